//! meter-ingest in the simulated world (docs/meter-ingest.md): the real `MeterIngest` handler
//! over the in-memory mapping, dedup, rate-counter and held-events stores, every one behind the
//! fault wrapper (`testkit/src/ports.rs`), writing accepted events into the simulated stream.
//! Untrusted modules async-invoke their aliases with valid events, replays of an event id under
//! a new request, and attacks the trust boundary must refuse: a dimension the module is not
//! granted, a backdated hint, a quantity over its bound, an unknown or an unqualified alias.
//! A failed invocation is retried twice with its request id, as Lambda retries an async
//! invocation (`MeterIngestInvokeConfig`, `infra/cfn/ingest_stack.py`): at once, or — in half
//! the ingest schedules — 60 to 120 s apart, as Lambda spaces them
//! (https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html), each
//! retry run at the first ingest step past its time. One that fails every time goes to the
//! on-failure destination, which the operator re-invokes in the drain. A retry's receive time
//! is the one its first attempt recorded (the "first seen" record), so its events are judged
//! against the hints they were sent with, however late the retry.
//!
//! Valid events are conserved like producer usage (each billed exactly once); every refused
//! one must be in the held-events table with its disposition and reason ([`check`]).

use crate::faults::{hash, mix};
use crate::ports::{Ctx, Faulty};
use crate::steps::{DIMENSIONS, account, license};
use crate::stream::SimStream;
use crate::world::{Setup, World, lock};
use async_trait::async_trait;
use awsmp_aws::emf::MetricsSink;
use awsmp_consumer::adapters::memory::MemoryDedupStore;
use awsmp_contract::clock::{Clock, FixedClock};
use awsmp_contract::reasons;
use awsmp_meter_ingest::adapters::memory::{
    MemoryHeldStore, MemoryMappingStore, MemoryRateCounter,
};
use awsmp_meter_ingest::check::{held_key, request_key};
use awsmp_meter_ingest::error::Result as IResult;
use awsmp_meter_ingest::identity::Allowlist;
use awsmp_meter_ingest::mapping::{LicenseGrant, MappingEntry};
use awsmp_meter_ingest::ports::{Disposition, HeldEvent, MappingStore, UsageStream};
use awsmp_meter_ingest::{IngestSettings, Invocation, MeterIngest};
use awsmp_producer::sink::PutEntry;
use chrono::{DateTime, Duration, SecondsFormat, Utc};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

/// The account the modules' aliases live in (the allowlist).
pub const MODULE_ACCOUNT: &str = "111111111111";
/// Retries Lambda makes of a failed async invocation (`MaximumRetryAttempts` of
/// `MeterIngestInvokeConfig`, `infra/cfn/ingest_stack.py`).
pub const ASYNC_RETRIES: u32 = 2;
/// The anomaly bound of one event (`maxQuantity` of both modules' entries).
const MAX_QUANTITY: u64 = 1000;
/// One ingest invocation in this many active steps of an ingest schedule.
const INVOKE_ONE_IN: u64 = 5;
/// Ingest schedules whose retries are spaced as Lambda spaces them, per thousand.
const SPACED_PER_MILLE: u64 = 500;
/// The spacing of Lambda's async retries, seconds: about 1 and 2 minutes
/// (https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html).
const RETRY_SPACING_SECS: std::ops::RangeInclusive<u64> = 60..=120;

/// The qualified ARN of module `name`'s alias.
pub fn module_arn(name: &str) -> String {
    format!("arn:aws:lambda:us-east-1:{MODULE_ACCOUNT}:function:awsmp-meter-ingest:{name}")
}

/// The usage stream as meter-ingest writes it: every entry into the simulated stream, the
/// stream event ids it carried kept (which of a failed invocation's events reached the stream).
pub struct SimIngestStream {
    /// The stream.
    pub stream: Arc<SimStream>,
    /// Event ids put, as the consumer sees them (`mi:…`).
    pub put_ids: Mutex<BTreeSet<String>>,
}

#[async_trait]
impl UsageStream for SimIngestStream {
    async fn put(&self, entries: Vec<PutEntry>) -> IResult<()> {
        for e in entries {
            if let Ok(ev) = awsmp_contract::wire::decode_event(&e.data) {
                lock(&self.put_ids).insert(ev.event_id);
            }
            let hash = e.explicit_hash_key.and_then(|h| h.parse().ok());
            self.stream.put(&e.partition_key, hash, e.data);
        }
        Ok(())
    }
}

/// What the modules sent and what must become of it.
#[derive(Debug, Default)]
pub struct IngestTruth {
    /// Refused events, by (invoked ARN, event id): the disposition and reason they must have.
    pub refused: BTreeMap<(String, String), (Disposition, &'static str)>,
    /// Valid events sent, by the ARN that sent them (their JSON), for replays.
    pub valid: Vec<(String, Value)>,
    /// Invocations whose retries ran out (on the on-failure destination), with their valid
    /// events and when they were sent.
    pub failed: Vec<(Invocation, Vec<Valid>, DateTime<Utc>)>,
    /// Failed invocations waiting for Lambda's next spaced retry.
    pub pending: Vec<Pending>,
    /// Ingest steps so far (the draws' counter).
    pub steps: u64,
    /// Events sent (the event id counter).
    pub events: u64,
}

/// A failed invocation Lambda retries later.
#[derive(Debug, Clone)]
pub struct Pending {
    inv: Invocation,
    valid: Vec<Valid>,
    sent: DateTime<Utc>,
    /// Attempts made so far.
    attempts: u32,
    /// When Lambda makes the next one.
    due: DateTime<Utc>,
}

/// A valid event: its group, quantity and the module's event id.
#[derive(Debug, Clone)]
pub struct Valid {
    group: (String, String, String),
    quantity: u64,
    event_id: String,
}

/// meter-ingest's part of the world.
pub struct Ingest {
    /// The real handler.
    pub handler: MeterIngest,
    /// The held-events table.
    pub held: MemoryHeldStore,
    /// The dedup table (event-id claims, "first seen" records).
    pub dedup: MemoryDedupStore,
    /// The stream as meter-ingest writes it.
    pub stream: Arc<SimIngestStream>,
    /// Ground truth.
    pub truth: Mutex<IngestTruth>,
}

fn entry(name: &str, licenses: &[usize], dimensions: &[&str]) -> MappingEntry {
    MappingEntry {
        invoked_arn: module_arn(name),
        environment: "prod".into(),
        app_id: Some(format!("app-{name}")),
        licenses: licenses
            .iter()
            .map(|&l| LicenseGrant {
                license_arn: license(l),
                customer_aws_account_id: account(l),
            })
            .collect(),
        dimensions: dimensions.iter().map(|d| (*d).to_owned()).collect(),
        max_events_per_second: 1000,
        max_quantity: MAX_QUANTITY,
    }
}

/// The value of a future that is ready at once (the in-memory stores answer without waiting).
fn at_once<T>(f: impl std::future::Future<Output = T>) -> T {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => unreachable!("an in-memory store answers at once"),
    }
}

impl Ingest {
    /// The handler for `setup`'s licenses: module `a` granted license 0's `requests`, module
    /// `b` the last license's two dimensions; module `x` has no mapping entry.
    pub fn for_setup(
        ctx: &Ctx,
        setup: &Setup,
        stream: &Arc<SimStream>,
        clock: &Arc<FixedClock>,
    ) -> Self {
        let mappings = MemoryMappingStore::new();
        let last = setup.licenses.saturating_sub(1);
        for e in [
            entry("a", &[0], &DIMENSIONS[..1]),
            entry("b", &[last], &DIMENSIONS),
        ] {
            at_once(mappings.put(&e)).expect("the in-memory mapping takes an entry");
        }
        let held = MemoryHeldStore::new();
        let settings = IngestSettings {
            allowlist: Allowlist {
                environment: "prod".into(),
                accounts: [MODULE_ACCOUNT.to_owned()].into(),
            },
            // One call at a time: its retries (unseeded jitter) then never reorder calls.
            concurrency: 1,
            ..IngestSettings::default()
        };
        let clock: Arc<dyn Clock> = clock.clone();
        let sink = Arc::new(SimIngestStream {
            stream: stream.clone(),
            put_ids: Mutex::default(),
        });
        let dedup = MemoryDedupStore::new();
        let handler = MeterIngest {
            settings,
            mappings: Arc::new(Faulty::new(mappings, ctx)),
            dedup: Arc::new(Faulty::new(dedup.clone(), ctx)),
            rates: Arc::new(Faulty::new(MemoryRateCounter::new(), ctx)),
            stream: Arc::new(Faulty::<SimIngestStream>::new(sink.clone(), ctx)),
            held: Arc::new(Faulty::new(held.clone(), ctx)),
            metrics: MetricsSink::capture("meter-ingest"),
            clock,
        };
        Self {
            handler,
            held,
            dedup,
            stream: sink,
            truth: Mutex::new(IngestTruth::default()),
        }
    }
}

/// What one drawn event is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Valid,
    Replay,
    UngrantedDimension,
    Backdated,
    OverBound,
}

impl World {
    /// One step of an ingest schedule: now and then a module invokes its alias (draws from
    /// the seed and a counter, never from the scheduler's RNG).
    pub async fn ingest_step(&self) {
        if !self.setup.ingest {
            return;
        }
        self.ingest_retries().await;
        let (n, h) = {
            let mut t = lock(&self.ingest.truth);
            t.steps += 1;
            (
                t.steps,
                hash(self.setup.seed, &["ingest", &t.steps.to_string()]),
            )
        };
        if h % INVOKE_ONE_IN != 0 {
            return;
        }
        let module = match (h >> 8) % 10 {
            0 => "x",
            1..=5 => "a",
            _ => "b",
        };
        let arn = if (h >> 16) % 25 == 0 {
            // The unqualified function: no module identity.
            module_arn(module)
                .rsplit_once(':')
                .map(|(f, _)| f.to_owned())
                .unwrap_or_default()
        } else {
            module_arn(module)
        };
        let events = 1 + (h >> 24) % 3;
        let (payload, valid): (Vec<Value>, Vec<Option<Valid>>) = (0..events)
            .map(|i| self.ingest_event(&arn, module, mix(h ^ (i + 1))))
            .unzip();
        let valid: Vec<Valid> = valid.into_iter().flatten().collect();
        let inv = Invocation {
            invoked_arn: arn,
            request_id: format!("req-{n}"),
            payload: json!({ "events": payload }),
        };
        let sent = self.clock.now();
        if self.spaced_retries() {
            if self.attempt_ingest(&inv, 0).await {
                self.settle(&inv, valid, sent);
            } else {
                let due = sent + self.retry_spacing(&inv, 1);
                lock(&self.ingest.truth).pending.push(Pending {
                    inv,
                    valid,
                    sent,
                    attempts: 1,
                    due,
                });
            }
        } else if self.invoke_ingest(&inv).await {
            self.settle(&inv, valid, sent);
        } else {
            lock(&self.ingest.truth).failed.push((inv, valid, sent));
        }
    }

    /// Whether this schedule's failed invocations are retried 60–120 s apart.
    fn spaced_retries(&self) -> bool {
        hash(self.setup.seed, &["ingest-retry-spacing"]) % 1000 < SPACED_PER_MILLE
    }

    /// How long after attempt `attempt - 1` of `inv` Lambda makes attempt `attempt`.
    fn retry_spacing(&self, inv: &Invocation, attempt: u32) -> Duration {
        let h = hash(
            self.setup.seed,
            &["ingest-retry", &inv.request_id, &attempt.to_string()],
        );
        let span = RETRY_SPACING_SECS.end() - RETRY_SPACING_SECS.start() + 1;
        Duration::seconds((RETRY_SPACING_SECS.start() + h % span) as i64)
    }

    /// Lambda's spaced retries that are due: each with the same request id; one that fails
    /// again waits for the next, the last goes to the on-failure destination.
    async fn ingest_retries(&self) {
        let now = self.clock.now();
        let due: Vec<Pending> = {
            let mut t = lock(&self.ingest.truth);
            let (due, waiting) = std::mem::take(&mut t.pending)
                .into_iter()
                .partition(|p| p.due <= now);
            t.pending = waiting;
            due
        };
        for mut p in due {
            self.faults.count("ingest-spaced-retry");
            self.log(format!(
                "meter-ingest {}: retry {} {} s after the first attempt",
                p.inv.request_id,
                p.attempts,
                (now - p.sent).num_seconds()
            ));
            if self.attempt_ingest(&p.inv, p.attempts).await {
                self.settle(&p.inv, p.valid, p.sent);
            } else if p.attempts >= ASYNC_RETRIES {
                self.log(format!(
                    "meter-ingest {}: retries exhausted, to the on-failure destination",
                    p.inv.request_id
                ));
                lock(&self.ingest.truth)
                    .failed
                    .push((p.inv, p.valid, p.sent));
            } else {
                p.attempts += 1;
                p.due = now + self.retry_spacing(&p.inv, p.attempts);
                lock(&self.ingest.truth).pending.push(p);
            }
        }
    }

    /// An attempt of `inv` succeeded: its receive time is the one its "first seen" record
    /// holds (its first attempt's, unless that attempt failed before recording it). A valid
    /// event sent within the clock-skew bound of it must be billed exactly once; one sent
    /// earlier (the record written by a late attempt) must end `StaleTimestamp`, as must the
    /// events a check after the hint's would have refused.
    fn settle(&self, inv: &Invocation, valid: Vec<Valid>, sent: DateTime<Utc>) {
        let now = self.clock.now();
        let key = request_key(&inv.invoked_arn, &inv.request_id);
        let received = self.ingest.dedup.first_seen_at(&key, now).unwrap_or(now);
        let stale = received - sent > self.ingest.handler.settings.max_clock_skew;
        if stale {
            self.faults.count("ingest-first-seen-late");
            self.stale_refusals(inv);
        } else if now - sent > self.ingest.handler.settings.max_clock_skew {
            // A retry past the skew bound, judged at its first attempt's receive time.
            self.faults.count("ingest-kept-receive-time");
        }
        for v in valid {
            if stale {
                lock(&self.ingest.truth).refused.insert(
                    (inv.invoked_arn.clone(), v.event_id),
                    (Disposition::Rejected, reasons::STALE_TIMESTAMP),
                );
            } else {
                *lock(&self.truth).produced.entry(v.group).or_default() += v.quantity;
            }
        }
    }

    /// One event of module `module` invoking as `arn`: a refusal's disposition and reason
    /// recorded, a valid event returned with it.
    fn ingest_event(&self, arn: &str, module: &str, h: u64) -> (Value, Option<Valid>) {
        let now = self.clock.now();
        let kind = match h % 20 {
            0..=11 => Kind::Valid,
            12..=13 => Kind::Replay,
            14..=15 => Kind::UngrantedDimension,
            16..=17 => Kind::Backdated,
            _ => Kind::OverBound,
        };
        let mut t = lock(&self.ingest.truth);
        let own: Vec<&Value> = t
            .valid
            .iter()
            .filter(|(a, _)| a == arn)
            .map(|(_, v)| v)
            .collect();
        if kind == Kind::Replay && !own.is_empty() {
            // The same event again under a new request: a dedup hit (or, past the clock-skew
            // bound, a stale hint), nothing added.
            self.faults.count("ingest-replay");
            return (own[((h >> 8) % own.len() as u64) as usize].clone(), None);
        }
        t.events += 1;
        let id = format!("ing-{}", t.events);
        let (lic, dims): (usize, &[&str]) = if module == "b" {
            (self.setup.licenses.saturating_sub(1), &DIMENSIONS)
        } else {
            (0, &DIMENSIONS[..1])
        };
        let (dimension, hint, quantity) = match kind {
            Kind::UngrantedDimension if module == "a" => (DIMENSIONS[1], now, 5),
            Kind::Backdated => (dims[0], now - Duration::minutes(5), 5),
            Kind::OverBound => (dims[0], now, MAX_QUANTITY + 1),
            _ => (
                dims[((h >> 8) % dims.len() as u64) as usize],
                now,
                1 + (h >> 16) % 20,
            ),
        };
        let ev = json!({
            "eventId": id,
            "dimension": dimension,
            "quantity": quantity,
            "recordedAtHint": hint.to_rfc3339_opts(SecondsFormat::Millis, true),
            "licenseArn": license(lic),
            "customerAWSAccountId": account(lic),
            "appIdHint": "spoofed",
        });
        let refusal = if !arn.ends_with(&format!(":{module}")) {
            Some((Disposition::Rejected, reasons::UNQUALIFIED_INVOKER))
        } else if module == "x" {
            Some((Disposition::Held, reasons::UNKNOWN_INVOKER))
        } else if dimension == DIMENSIONS[1] && module == "a" {
            Some((Disposition::Rejected, reasons::UNAUTHORIZED_DIMENSION))
        } else if kind == Kind::Backdated {
            Some((Disposition::Rejected, reasons::STALE_TIMESTAMP))
        } else if kind == Kind::OverBound {
            Some((Disposition::Held, reasons::QUANTITY_OUT_OF_BOUNDS))
        } else {
            None
        };
        if let Some(r) = refusal {
            self.faults.count("ingest-attack");
            t.refused.insert((arn.to_owned(), id), r);
            return (ev, None);
        }
        t.valid.push((arn.to_owned(), ev.clone()));
        let valid = Valid {
            group: (license(lic), account(lic), dimension.to_owned()),
            quantity,
            event_id: id,
        };
        (ev, Some(valid))
    }

    /// Invoke as Lambda does an async invocation: retried twice at once with its request id,
    /// then to the on-failure destination. True when an attempt succeeded.
    async fn invoke_ingest(&self, inv: &Invocation) -> bool {
        for attempt in 0..=ASYNC_RETRIES {
            if self.attempt_ingest(inv, attempt).await {
                return true;
            }
        }
        self.log(format!(
            "meter-ingest {}: retries exhausted, to the on-failure destination",
            inv.request_id
        ));
        false
    }

    /// One attempt of `inv`. True when it succeeded.
    async fn attempt_ingest(&self, inv: &Invocation, attempt: u32) -> bool {
        self.faults
            .begin(crate::stages::Step::MeterIngest.timeout());
        let out = self.ingest.handler.handle(inv).await;
        let crashed = self.faults.end();
        match out {
            Ok(r) if !crashed => {
                self.log(format!(
                    "meter-ingest {} {}: {} accepted, {} duplicates, {} held, {} rejected",
                    r.module, inv.request_id, r.accepted, r.duplicates, r.held, r.rejected
                ));
                return true;
            }
            Ok(_) => self.log(format!(
                "meter-ingest {}: attempt {attempt} crashed",
                inv.request_id
            )),
            Err(e) => self.log(format!(
                "meter-ingest {}: attempt {attempt} failed: {}",
                inv.request_id,
                e.failure_type()
            )),
        }
        false
    }

    /// Lambda's pending retries run, then the operator re-invokes every invocation on
    /// meter-ingest's on-failure destination with its request id (its own dedup claims pass;
    /// replays add nothing). Its receive time is its first attempt's record: its valid events
    /// must be billed once ([`World::settle`]); only an invocation none of whose attempts
    /// recorded a receive time is judged at the re-invoke's, its events `StaleTimestamp`.
    pub async fn ingest_drain(&self) {
        let (failed, pending) = {
            let mut t = lock(&self.ingest.truth);
            (
                std::mem::take(&mut t.failed),
                std::mem::take(&mut t.pending),
            )
        };
        let again = pending.into_iter().map(|p| (p.inv, p.valid, p.sent));
        for (inv, valid, sent) in failed.into_iter().chain(again) {
            if !self.invoke_ingest(&inv).await {
                lock(&self.ingest.truth).failed.push((inv, valid, sent));
                continue;
            }
            self.settle(&inv, valid, sent);
        }
    }
}

impl World {
    /// A late re-invoke of `inv`: its events a check after the hint's refused (a bound) are
    /// now refused by the hint, `StaleTimestamp`.
    fn stale_refusals(&self, inv: &Invocation) {
        let ids = inv.payload["events"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["eventId"].as_str());
        let mut t = lock(&self.ingest.truth);
        for id in ids {
            let key = (inv.invoked_arn.clone(), id.to_owned());
            if let Some(r) = t.refused.get_mut(&key)
                && r.1 == reasons::QUANTITY_OUT_OF_BOUNDS
            {
                *r = (Disposition::Rejected, reasons::STALE_TIMESTAMP);
            }
        }
    }
}

/// Every refused event is in the held-events table with its disposition and reason, and no
/// invocation is left on the on-failure destination.
pub fn check(w: &World) -> Vec<String> {
    let mut out = Vec::new();
    let items: BTreeMap<String, HeldEvent> = w
        .ingest
        .held
        .items()
        .into_iter()
        .map(|h| (h.key.clone(), h))
        .collect();
    let truth = lock(&w.ingest.truth);
    for ((arn, id), (disposition, reason)) in &truth.refused {
        let found = items.get(&held_key(arn, id));
        let ok = found.is_some_and(|h| h.disposition == *disposition && h.reason == *reason);
        if !ok {
            out.push(format!(
                "ingest event {id} of {arn} must be {} {reason}, found {:?}",
                disposition.as_str(),
                found.map(|h| (h.disposition, h.reason.clone()))
            ));
        }
    }
    for (inv, _, _) in &truth.failed {
        out.push(format!(
            "ingest invocation {} left on the on-failure destination",
            inv.request_id
        ));
    }
    for p in &truth.pending {
        out.push(format!(
            "ingest invocation {} left waiting for a retry",
            p.inv.request_id
        ));
    }
    out
}
