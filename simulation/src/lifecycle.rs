//! The license lifecycle in the simulated world: EventBridge's `License Updated` and
//! `License Deprovisioned` events through the subscription queue into the real subscription
//! Lambda (`awsmp_lifecycle::handlers::subscription`), late, duplicated and out of order; the
//! real deprovision-cleanup Lambda on its 15-minute schedule; and the pipeline's flush of a
//! deprovisioning license (the discoverer's `flush-deprovisioning` every 5 minutes, the
//! aggregator on the deprovision work queue, the submitter putting the license first), as
//! docs/lifecycle.md describes. The subscribers table is the memory twin behind a fault wrapper
//! (throttling, lost responses, crashes at every call), read by the pipeline as its
//! deprovisioning index.
//!
//! Checked after every schedule ([`check`]): a license, once deprovisioning, is never active
//! again; a deprovisioned license is finalized (inactive, out of the index) once its window
//! has closed; its usage from before the deprovisioning was billed by the window's close
//! (when the flush had a fault-free chance: [`closing::DRAIN_LEAD`]), and only its usage
//! produced after the flush's instant may end late ([`closing::allow_late_after_flush`]);
//! the lifecycle's queues are empty and no event was dead-lettered.

use crate::faults::mix;
use crate::ports::Ctx;
use crate::queue::SimQueue;
use crate::world::{World, lock};
use awsmp_aws::deprovisioning::DeprovisioningIndex;
use awsmp_aws::emf::MetricsSink;
use awsmp_contract::clock::Clock;
use awsmp_lifecycle::adapters::memory::{MemoryDeadLetters, MemorySubscriberStore};
use awsmp_lifecycle::domain::event::LicenseKey;
use awsmp_lifecycle::domain::state::{LicenseStatus, Subscriber};
use awsmp_lifecycle::handlers::{deprovision_cleanup, subscription};
use awsmp_pipeline::handlers::discoverer::DiscovererInput;
use awsmp_pipeline::handlers::{aggregator, handle_sqs_batch};
use awsmp_pipeline::ports::MessageQueue;
use chrono::{DateTime, Duration, SecondsFormat, Utc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

pub mod closing;
use awsmp_testkit::ports::{FaultyIndex, FaultySubscribers};

/// The deprovision-cleanup Lambda's schedule (`rate(15 minutes)`, docs/lifecycle.md).
pub const CLEANUP_EVERY: Duration = Duration::minutes(15);
/// The discoverer's `flush-deprovisioning` schedule (`rate(5 minutes)`, infra/main.yaml).
pub const FLUSH_EVERY: Duration = Duration::minutes(5);
/// Whether schedules deprovision a license: on in the default sweep (docs/simulation.md,
/// "What the simulation found", for what it found before);
/// `scripts/simulate --no-deprovision` (or [`set_deprovision`]) switches it off for one
/// process.
static DEPROVISION_IN_SWEEP: AtomicBool = AtomicBool::new(true);

/// Whether schedules deprovision a license (half of them, at a random active step).
pub fn deprovision_in_sweep() -> bool {
    DEPROVISION_IN_SWEEP.load(Ordering::Relaxed)
}

/// Switch the deprovisioning scenario on or off for this process.
pub fn set_deprovision(on: bool) {
    DEPROVISION_IN_SWEEP.store(on, Ordering::Relaxed);
}
/// SQS batch size of the subscription queue's mapping.
const SUBSCRIPTION_BATCH: usize = 10;
/// Attempts EventBridge makes to deliver an event to the queue (it retries for 24 h).
const DELIVERY_ATTEMPTS: usize = 20;

/// An EventBridge event waiting to be delivered at `at` (virtual time).
#[derive(Debug, Clone)]
struct Pending {
    at: DateTime<Utc>,
    body: String,
    what: String,
}

/// What the lifecycle stages share.
pub struct Lifecycle {
    /// The subscribers table.
    pub subscribers: MemorySubscriberStore,
    store: FaultySubscribers,
    /// The subscription queue.
    pub queue: Arc<SimQueue>,
    /// The deprovision work queue the flush fills.
    pub deprovision: Arc<SimQueue>,
    dead_letters: MemoryDeadLetters,
    metrics: MetricsSink,
    /// Events EventBridge has yet to deliver, by delivery time.
    pending: Mutex<Vec<Pending>>,
    /// Licenses deprovisioned, with the event time (ground truth).
    pub deprovisioned: Mutex<BTreeMap<LicenseKey, DateTime<Utc>>>,
    /// Licenses seen deprovisioning or inactive (never to be active again).
    left: Mutex<Vec<LicenseKey>>,
    /// Violations seen while the schedule ran.
    pub violations: Mutex<Vec<String>>,
    next: Mutex<(DateTime<Utc>, DateTime<Utc>)>,
    rng: Mutex<StdRng>,
    /// Active steps left before license 0 is deprovisioned (none in half the schedules).
    deprovision_at: Mutex<Option<usize>>,
    /// When the fault-free drain began.
    pub(crate) drain_started: Mutex<Option<DateTime<Utc>>>,
    /// The snapshots of the deprovisioned licenses' windows.
    closing: Mutex<closing::Closing>,
}

fn key_of(i: usize) -> LicenseKey {
    LicenseKey {
        license_arn: crate::steps::license(i),
        customer_aws_account_id: crate::steps::account(i),
    }
}

/// An EventBridge event of `detail_type` for `key` at `at` (the shape of
/// `lifecycle/tests/fixtures/license-*.json`).
fn event(detail_type: &str, key: &LicenseKey, at: DateTime<Utc>, id: u64) -> String {
    serde_json::json!({
        "version": "0",
        "id": format!("00000000-0000-4000-8000-{id:012}"),
        "detail-type": format!("{detail_type} - Manufacturer"),
        "source": "aws.agreement-marketplace",
        "account": "123456789012",
        "time": at.to_rfc3339_opts(SecondsFormat::Secs, true),
        "region": "us-east-1",
        "resources": [],
        "detail": {
            "catalog": "AWSMarketplace",
            "agreement": {"id": "agmt-sim"},
            "product": {"code": "prod-sim"},
            "license": {"arn": key.license_arn},
            "acceptor": {"accountId": key.customer_aws_account_id},
        }
    })
    .to_string()
}

impl Lifecycle {
    /// The lifecycle of `licenses` licenses from `start`: each updated (active) a day before;
    /// in half the schedules license 0 is deprovisioned at one of the `steps` active steps,
    /// while usage flows ([`World::deprovision`]).
    pub fn new(
        ctx: &Ctx,
        (queue, deprovision): (Arc<SimQueue>, Arc<SimQueue>),
        (seed, licenses, steps, start): (u64, usize, usize, DateTime<Utc>),
    ) -> Self {
        let mut rng = StdRng::seed_from_u64(mix(seed ^ 0x11fe_c7c1e));
        let mut pending = Vec::new();
        for i in 0..licenses {
            let at = start - Duration::days(1);
            let body = event("License Updated", &key_of(i), at, i as u64);
            let what = format!("License Updated l{i}");
            pending.push(Pending {
                at: start,
                body,
                what,
            });
        }
        let deprovision_at = (rng.random_bool(0.5) && deprovision_in_sweep())
            .then(|| rng.random_range(0..steps.max(1)));
        let subscribers = MemorySubscriberStore::new();
        Self {
            store: FaultySubscribers::new(subscribers.clone(), ctx),
            subscribers,
            queue,
            deprovision,
            dead_letters: MemoryDeadLetters::new(),
            metrics: MetricsSink::capture("lifecycle"),
            pending: Mutex::new(pending),
            deprovisioned: Mutex::new(BTreeMap::new()),
            deprovision_at: Mutex::new(deprovision_at),
            drain_started: Mutex::new(None),
            closing: Mutex::new(closing::Closing::default()),
            left: Mutex::new(Vec::new()),
            violations: Mutex::new(Vec::new()),
            next: Mutex::new((start, start)),
            rng: Mutex::new(rng),
        }
    }

    /// [`Lifecycle::new`] for the schedule `setup`, its subscription queue and the deprovision
    /// work queue.
    pub fn for_setup(
        ctx: &Ctx,
        setup: &crate::world::Setup,
        queue: Arc<SimQueue>,
        deprovision: &Arc<SimQueue>,
    ) -> Self {
        let schedule = (setup.seed, setup.licenses, setup.steps, setup.start);
        Self::new(ctx, (queue, deprovision.clone()), schedule)
    }

    /// The pipeline's deprovisioning index over the table, faulty.
    pub fn index(&self) -> Arc<dyn DeprovisioningIndex> {
        Arc::new(FaultyIndex::new(self.subscribers.clone(), &self.store.ctx))
    }
}

impl World {
    /// The lifecycle's share of one active step: EventBridge delivers what is due; then, at
    /// random, the subscription Lambda takes a batch; the scheduled flush and cleanup run
    /// when due.
    pub async fn lifecycle_step(&self) {
        self.observe_windows();
        let due = {
            let mut at = lock(&self.lifecycle.deprovision_at);
            let due = *at == Some(0);
            *at = at.and_then(|n| n.checked_sub(1));
            due
        };
        if due {
            self.deprovision();
        }
        self.deliver_events().await;
        if lock(&self.lifecycle.rng).random_bool(0.3) {
            self.subscribe().await;
        }
        self.scheduled_lifecycle().await;
    }

    /// The lifecycle's share of one fault-free drain round: every due event delivered and
    /// handled, the scheduled runs when due.
    pub async fn lifecycle_drain(&self) {
        lock(&self.lifecycle.drain_started).get_or_insert(self.clock.now());
        self.observe_windows();
        self.deliver_events().await;
        while self.subscribe().await {}
        self.scheduled_lifecycle().await;
        while self.aggregate_deprovisioning().await {}
    }

    /// License 0 is deprovisioned now (`T`): EventBridge delivers the event up to 4 minutes
    /// late, sometimes twice, and a stale `License Updated` (event time before `T`) after it.
    fn deprovision(&self) {
        let lc = &self.lifecycle;
        let (key, t) = (key_of(0), self.clock.now());
        let mut rng = lock(&lc.rng);
        let late = Duration::seconds(rng.random_range(0..=240));
        let body = event("License Deprovisioned", &key, t, 100);
        let what = "License Deprovisioned l0".to_owned();
        let mut pending = lock(&lc.pending);
        pending.push(Pending {
            at: t + late,
            body: body.clone(),
            what: what.clone(),
        });
        if rng.random_bool(0.5) {
            let at = t + late + Duration::seconds(rng.random_range(1..=600));
            let what = format!("{what} (duplicate)");
            pending.push(Pending { at, body, what });
        }
        let stale = event("License Updated", &key, t - Duration::minutes(5), 101);
        let at = t + late + Duration::seconds(rng.random_range(1..=900));
        let what = "License Updated l0 (stale, out of order)".to_owned();
        pending.push(Pending {
            at,
            body: stale,
            what,
        });
        pending.sort_by_key(|p| p.at);
        lock(&lc.deprovisioned).insert(key, t);
        self.faults.count("license-deprovisioned");
        self.log(format!("lifecycle: l0 deprovisioned at {t}"));
    }

    async fn deliver_events(&self) {
        let now = self.clock.now();
        let due: Vec<Pending> = {
            let mut pending = lock(&self.lifecycle.pending);
            let n = pending.iter().take_while(|p| p.at <= now).count();
            pending.drain(..n).collect()
        };
        for p in due {
            let body = vec![p.body];
            let mut sent = false;
            for _ in 0..DELIVERY_ATTEMPTS {
                // A lost response may have enqueued it already: a duplicate, as EventBridge
                // may deliver one.
                if self.lifecycle.queue.send_all(&body).await.is_ok() {
                    sent = true;
                    break;
                }
            }
            self.log(format!(
                "eventbridge: {}{}",
                p.what,
                if sent { "" } else { " [lost]" }
            ));
        }
    }

    /// One subscription Lambda invocation; false when the queue had nothing visible.
    async fn subscribe(&self) -> bool {
        let lc = &self.lifecycle;
        let Some(event) = lc.queue.receive(SUBSCRIPTION_BATCH) else {
            return false;
        };
        let svc = subscription::SubscriptionService {
            store: &lc.store,
            dead_letters: Some(&lc.dead_letters),
            metrics: &lc.metrics,
        };
        self.faults
            .begin(crate::stages::Step::Subscription.timeout());
        let response = subscription::handle_batch(&svc, event.clone()).await;
        let crashed = self.faults.end();
        lc.queue.complete(&event, (!crashed).then_some(&response));
        self.log(format!(
            "subscription: {} messages, {} failed{}",
            event.records.len(),
            response.batch_item_failures.len(),
            if crashed { " [crashed]" } else { "" }
        ));
        self.never_reactivated();
        true
    }

    fn never_reactivated(&self) {
        let lc = &self.lifecycle;
        for row in lc.subscribers.rows() {
            let mut left = lock(&lc.left);
            match row.subscription_status {
                Some(LicenseStatus::Active) if left.contains(&row.key) => {
                    lock(&lc.violations).push(format!(
                        "{} reactivated after leaving active",
                        row.key.license_arn
                    ));
                }
                Some(LicenseStatus::Deprovisioning | LicenseStatus::Inactive)
                    if !left.contains(&row.key) =>
                {
                    left.push(row.key.clone());
                }
                _ => {}
            }
        }
    }

    /// The flush (every 5 minutes) and the cleanup (every 15) when due.
    async fn scheduled_lifecycle(&self) {
        let now = self.clock.now();
        let (flush_due, cleanup_due) = {
            let mut next = lock(&self.lifecycle.next);
            let due = (now >= next.0, now >= next.1);
            if due.0 {
                next.0 = now + FLUSH_EVERY;
            }
            if due.1 {
                next.1 = now + CLEANUP_EVERY;
            }
            due
        };
        if flush_due {
            self.discover(DiscovererInput::FlushDeprovisioning).await;
            self.aggregate_deprovisioning().await;
        }
        if cleanup_due {
            self.deprovision_cleanup(now).await;
        }
    }

    /// One aggregator invocation on the deprovision work queue.
    async fn aggregate_deprovisioning(&self) -> bool {
        let Some(event) = self.lifecycle.deprovision.receive(SUBSCRIPTION_BATCH) else {
            return false;
        };
        self.faults.begin(crate::stages::Step::Aggregate.timeout());
        let svc = &self.svc;
        let response = handle_sqs_batch(
            "aggregate-deprovisioning",
            event.clone(),
            |body| async move { aggregator::aggregate(svc, &body).await.map(drop) },
        )
        .await;
        let crashed = self.faults.end();
        if crashed || !response.batch_item_failures.is_empty() {
            // A deprovisioned license's flushed groups wait here (every one, conservatively).
            crate::causes::note_failure(
                self,
                crate::stages::Step::Aggregate,
                crate::causes::Held::Every,
            );
        }
        self.lifecycle
            .deprovision
            .complete(&event, (!crashed).then_some(&response));
        self.log(format!(
            "aggregate-deprovisioning: {} messages, {} failed{}",
            event.records.len(),
            response.batch_item_failures.len(),
            if crashed { " [crashed]" } else { "" }
        ));
        true
    }

    async fn deprovision_cleanup(&self, now: DateTime<Utc>) {
        let lc = &self.lifecycle;
        let before = lc.subscribers.rows();
        self.faults
            .begin(crate::stages::Step::DeprovisionCleanup.timeout());
        let out = deprovision_cleanup::run(&lc.store, &lc.metrics, now).await;
        let crashed = self.faults.end();
        for row in lc.subscribers.rows() {
            let was = before.iter().find(|r| r.key == row.key);
            let finalized = row.subscription_status == Some(LicenseStatus::Inactive)
                && was.is_some_and(|w| w.subscription_status != row.subscription_status);
            let t = lock(&lc.deprovisioned).get(&row.key).copied();
            if let (true, Some(t)) = (finalized, t) {
                self.faults.count("license-finalized");
                let closes = t + awsmp_lifecycle::domain::state::DEPROVISIONING_WINDOW;
                if now < closes {
                    lock(&lc.violations).push(format!(
                        "{} finalized at {now}, before its window closed at {closes}",
                        row.key.license_arn
                    ));
                }
            }
        }
        self.log(match out {
            Ok(r) => format!(
                "deprovision-cleanup: {} expired, {} finalized{}",
                r.expired,
                r.finalized,
                if crashed { " [crashed]" } else { "" }
            ),
            Err(e) => format!("deprovision-cleanup: error: {e}"),
        });
        self.never_reactivated();
    }
}

/// The lifecycle's end-state violations: a deprovisioned license is inactive and out of the
/// index once its window closed, its usage from before the deprovisioning billed by then;
/// nothing left in the subscription queue; plus what the run saw (a reactivation).
pub fn check(w: &World) -> Vec<String> {
    let lc = &w.lifecycle;
    let mut out = lock(&lc.violations).clone();
    w.billed_by_close(&mut out);
    let now = w.clock.now();
    for (key, t) in lock(&lc.deprovisioned).iter() {
        let row = lc.subscribers.rows().into_iter().find(|r| &r.key == key);
        let closed = *t + awsmp_lifecycle::domain::state::DEPROVISIONING_WINDOW + CLEANUP_EVERY;
        match row {
            Some(Subscriber {
                subscription_status: Some(LicenseStatus::Inactive),
                deprovisioning_expiry: None,
                ..
            }) => {}
            _ if now < closed => {}
            other => out.push(format!(
                "{} deprovisioned at {t} is not finalized at {now}: {other:?}",
                key.license_arn
            )),
        }
    }
    if lc.queue.depth() > 0 || lc.deprovision.depth() > 0 {
        out.push(format!(
            "lifecycle queues not empty: {} subscription, {} deprovision work",
            lc.queue.depth(),
            lc.deprovision.depth()
        ));
    }
    let dead = lc.queue.dead_letters().len() + lc.dead_letters.sent().len();
    if dead > 0 {
        out.push(format!(
            "{dead} lifecycle events dead-lettered: none is malformed"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use awsmp_lifecycle::domain::event::{Parsed, Target, parse};

    #[test]
    fn the_simulated_events_are_the_ones_the_subscription_lambda_reads() {
        let key = key_of(2);
        let at: DateTime<Utc> = "2026-11-30T22:10:00Z".parse().unwrap();
        for (detail, want) in [
            ("License Deprovisioned", "LicenseDeprovisioned"),
            ("License Updated", "LicenseUpdated"),
        ] {
            let Ok(Parsed::Apply(e)) = parse(&event(detail, &key, at, 7)) else {
                panic!("{detail} does not parse");
            };
            assert_eq!(e.at, at);
            assert_eq!(e.target, Target::License(key.clone()));
            assert!(
                format!("{:?}", e.change).starts_with(want),
                "{:?}",
                e.change
            );
        }
    }
}
