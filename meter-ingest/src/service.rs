//! The meter-ingest handler: one async invocation in, its events on the usage stream or kept
//! with a reason (docs/meter-ingest.md). The steps, in order:
//!
//! 1. parse the payload strictly — malformed: the invocation fails (Lambda's on-failure
//!    destination gets it), nothing applied; then the receive time: a conditional "first
//!    seen" write keyed by invoked ARN and request id, from which a Lambda async retry (same
//!    request id) reads back its first attempt's time, the one every later step uses;
//! 2. identity: the qualified invoked ARN, the environment's account allowlist, the mapping
//!    entry (none yet: every event held as `UnknownInvoker`);
//! 3. per event: attribution from the entry (never the hints), timestamp authority;
//! 4. the event-id dedup claim (owner: the request id, which a Lambda async retry keeps);
//! 5. anomaly bounds and the rate limit: the excess is held;
//! 6. refused events recorded, accepted ones put on the usage stream.

use std::collections::HashSet;
use std::sync::Arc;

use awsmp_aws::emf::{Metric, MetricsSink};
use awsmp_contract::Event;
use awsmp_contract::clock::Clock;
use awsmp_contract::retry::{RetryPolicy, Retryable};
use awsmp_contract::{metrics, reasons};
use chrono::{DateTime, Duration, SubsecRound, Utc};
use futures::{StreamExt, TryStreamExt};

use super::check::{
    attribute, check_bounds, check_dimension, check_hint, dedup_key, put_entry, rate_key,
    request_key, stream_event, within_rate,
};
use super::identity::{Allowlist, module_label, parse_invoked_arn};
use super::mapping::MappingEntry;
use super::payload::{ModuleEvent, parse_payload};
use super::ports::{Disposition, HeldEvent, HeldStore, MappingStore, RateCounter, UsageStream};
use super::report::{EventResult, IngestReport, Outcome};
use crate::error::{IngestError, Result};
use awsmp_consumer::domain::seq::SeqNum;
use awsmp_consumer::domain::verify::Refusal;
use awsmp_consumer::handler::STORE_RETRY;
use awsmp_consumer::ports::{ClaimOutcome, DedupClaim, DedupStore, FirstSeen};

/// How long a per-second rate counter is kept. Our bound: a second's counter is only read in
/// that second; a day is far past any retry.
pub const RATE_COUNTER_TTL_HOURS: i64 = 24;

/// Tunables of meter-ingest (see [`super::config::IngestConfig`] for their variables).
#[derive(Debug, Clone)]
pub struct IngestSettings {
    /// The environment and its account allowlist.
    pub allowlist: Allowlist,
    /// Largest accepted distance between `recordedAtHint` and the receive time.
    pub max_clock_skew: Duration,
    /// How long an event-id claim and an invocation's "first seen" record live (24–72 h).
    pub dedup_ttl: Duration,
    /// TTL of rejected events in days (0: keep). Held events are kept until released.
    pub rejected_ttl_days: u32,
    /// Concurrent store calls.
    pub concurrency: usize,
    /// How a store call that failed with a retryable error is retried.
    pub store_retry: RetryPolicy,
}

/// Everything the handler needs.
#[derive(Clone)]
pub struct MeterIngest {
    /// Tunables.
    pub settings: IngestSettings,
    /// The mapping (usually behind [`crate::adapters::dynamodb::CachedMappingStore`]).
    pub mappings: Arc<dyn MappingStore>,
    /// Event-id claims (the consumer's dedup table).
    pub dedup: Arc<dyn DedupStore>,
    /// Rate counters.
    pub rates: Arc<dyn RateCounter>,
    /// The usage stream.
    pub stream: Arc<dyn UsageStream>,
    /// Held and rejected events.
    pub held: Arc<dyn HeldStore>,
    /// EMF metrics.
    pub metrics: MetricsSink,
    /// The clock: the receive time.
    pub clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for MeterIngest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeterIngest")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// One async invocation as Lambda delivers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// `Context::invoked_function_arn`: the module's identity.
    pub invoked_arn: String,
    /// `Context::request_id` (kept by Lambda's async retries of the same event).
    pub request_id: String,
    /// The payload.
    pub payload: serde_json::Value,
}

/// The checks an operator's release waives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waive {
    /// A first delivery, or a release of events held for an unknown invoker: every check.
    Nothing,
    /// A release of events held by a bound or the rate limit: the operator approved them.
    Bounds,
}

/// Where one invocation is at.
struct Ctx<'a> {
    arn: &'a str,
    module: String,
    request_id: &'a str,
    received_at: DateTime<Utc>,
    waive: Waive,
}

#[derive(Debug, Clone)]
enum Fate {
    Accept(Box<Event>),
    Duplicate,
    Hold(Refusal),
    Reject(Refusal),
}

struct Slot {
    ev: ModuleEvent,
    raw: serde_json::Value,
    fate: Fate,
    /// Its claim was this request's own from an earlier attempt (a Lambda retry): that
    /// attempt already counted it in the same second's rate counter.
    reclaimed: bool,
}

impl MeterIngest {
    /// Handle one invocation. `Err` for a malformed payload
    /// ([`IngestError::MalformedPayload`]) and for store failures: Lambda retries, then
    /// routes the invocation to the on-failure destination. Refused events are not errors.
    /// The receive time is the first attempt's: a retry with the same request id reads it
    /// back from the "first seen" record ([`DedupStore::first_seen`]); a failure to write
    /// that record fails the invocation before anything is applied.
    pub async fn handle(&self, inv: &Invocation) -> Result<IngestReport> {
        let module = module_label(&inv.invoked_arn);
        let events = parse_payload(&inv.payload).map_err(|m| {
            self.metrics.emit(
                Metric::count(metrics::INGEST_MALFORMED_PAYLOAD)
                    .with(metrics::MODULE, module.clone()),
            );
            IngestError::MalformedPayload { detail: m.0 }
        })?;
        let received_at = self.first_seen(inv).await?;
        let ctx = Ctx {
            arn: &inv.invoked_arn,
            module,
            request_id: &inv.request_id,
            received_at,
            waive: Waive::Nothing,
        };
        let report = self.apply(&ctx, events).await?;
        report.emit(&self.metrics);
        Ok(report)
    }

    /// The invocation's receive time: now, or the time its first attempt recorded.
    async fn first_seen(&self, inv: &Invocation) -> Result<DateTime<Utc>> {
        // Millisecond precision: the v1 payload's timestamp form.
        let now = self.clock.now().trunc_subsecs(3);
        let seen = FirstSeen {
            key: request_key(&inv.invoked_arn, &inv.request_id),
            at: now,
            expires_at: now + self.settings.dedup_ttl,
        };
        self.with_retry(|| self.dedup.first_seen(&seen)).await
    }

    /// Release every held event: each is checked again against the mapping as it is now, with
    /// its original receive time as the timestamp authority; one held by a bound or the rate
    /// limit is let through (releasing it is the operator's approval). Released events go on
    /// the usage stream and are marked `Released`; the rest stay held or become rejected.
    pub async fn release_held(&self) -> Result<Vec<IngestReport>> {
        let held = self
            .with_retry(|| self.held.list(Disposition::Held))
            .await?;
        let mut reports = Vec::with_capacity(held.len());
        for h in held {
            let payload: serde_json::Value =
                serde_json::from_str(&h.payload).map_err(|e| IngestError::MalformedItem {
                    table: "held events".into(),
                    detail: format!("{}: payload: {e}", h.key),
                })?;
            let events = parse_payload(&payload).map_err(|m| IngestError::MalformedItem {
                table: "held events".into(),
                detail: format!("{}: {}", h.key, m.0),
            })?;
            let ctx = Ctx {
                arn: &h.invoked_arn,
                module: module_label(&h.invoked_arn),
                request_id: &h.request_id,
                received_at: h.received_at,
                waive: if h.reason == reasons::UNKNOWN_INVOKER {
                    Waive::Nothing
                } else {
                    Waive::Bounds
                },
            };
            let report = self.apply(&ctx, events).await?;
            if report.accepted + report.duplicates == report.events.len() {
                let released = HeldEvent {
                    disposition: Disposition::Released,
                    ..h.clone()
                };
                self.with_retry(|| self.held.put(&released)).await?;
            }
            reports.push(report);
        }
        Ok(reports)
    }

    /// The deploy-ordering guard: `Ok(entry)` when `invoked_arn` may take traffic — qualified,
    /// its account allowlisted, its mapping entry written for this environment — else the
    /// refusal an invocation would meet (docs/meter-ingest.md, "Deploy ordering").
    pub async fn check_alias(&self, invoked_arn: &str) -> Result<Result<MappingEntry, Refusal>> {
        Ok(self
            .identify(invoked_arn)
            .await?
            .map_err(|fate| match fate {
                Fate::Hold(r) | Fate::Reject(r) => r,
                // identify() refuses with a hold or a reject only.
                Fate::Accept(_) | Fate::Duplicate => Refusal {
                    reason: reasons::UNKNOWN_INVOKER,
                    detail: invoked_arn.to_owned(),
                },
            }))
    }

    async fn apply(
        &self,
        ctx: &Ctx<'_>,
        events: Vec<(ModuleEvent, serde_json::Value)>,
    ) -> Result<IngestReport> {
        let identity = self.identify(ctx.arn).await?;
        let mut slots: Vec<Slot> = events
            .into_iter()
            .map(|(ev, raw)| Slot {
                ev,
                raw,
                fate: Fate::Duplicate,
                reclaimed: false,
            })
            .collect();
        match identity {
            Err(fate) => slots.iter_mut().for_each(|s| s.fate = fate.clone()),
            Ok(entry) => self.decide(ctx, &entry, &mut slots).await?,
        }
        self.record_refusals(ctx, &slots).await?;
        let entries: Vec<_> = slots
            .iter()
            .filter_map(|s| match &s.fate {
                Fate::Accept(e) => Some(put_entry(e)),
                _ => None,
            })
            .collect();
        if !entries.is_empty() {
            self.stream.put(entries).await?;
        }
        let results = slots.into_iter().map(result_of).collect();
        Ok(IngestReport::new(
            ctx.arn,
            &ctx.module,
            ctx.request_id,
            ctx.received_at,
            results,
        ))
    }

    /// The mapping entry of `arn`, or the fate of all its events.
    async fn identify(&self, arn: &str) -> Result<Result<MappingEntry, Fate>> {
        let id = match parse_invoked_arn(arn) {
            Ok(id) => id,
            Err(r) => return Ok(Err(Fate::Reject(r))),
        };
        if let Err(r) = self.settings.allowlist.check(&id) {
            return Ok(Err(Fate::Reject(r)));
        }
        let Some(entry) = self.with_retry(|| self.mappings.get(arn)).await? else {
            return Ok(Err(Fate::Hold(Refusal {
                reason: reasons::UNKNOWN_INVOKER,
                detail: format!("no mapping entry for {arn} yet"),
            })));
        };
        if let Err(r) = self
            .settings
            .allowlist
            .check_environment(&entry.environment)
        {
            return Ok(Err(Fate::Reject(r)));
        }
        Ok(Ok(entry))
    }

    async fn decide(&self, ctx: &Ctx<'_>, entry: &MappingEntry, slots: &mut [Slot]) -> Result<()> {
        let mut seen = HashSet::new();
        for s in slots.iter_mut() {
            s.fate = match self.check_event(ctx, entry, &s.ev) {
                Err(r) => Fate::Reject(r),
                Ok(_) if !seen.insert(s.ev.event_id.clone()) => Fate::Duplicate,
                Ok(e) => Fate::Accept(Box::new(e)),
            };
        }
        self.claim(ctx, slots).await?;
        if ctx.waive == Waive::Nothing {
            for s in slots.iter_mut() {
                if let (Fate::Accept(_), Err(r)) = (&s.fate, check_bounds(entry, &s.ev)) {
                    s.fate = Fate::Hold(r);
                }
            }
            self.limit_rate(ctx, entry, slots).await?;
        }
        Ok(())
    }

    fn check_event(
        &self,
        ctx: &Ctx<'_>,
        entry: &MappingEntry,
        ev: &ModuleEvent,
    ) -> Result<Event, Refusal> {
        let grant = attribute(entry, ev)?;
        check_dimension(entry, ev)?;
        check_hint(
            ev.recorded_at_hint,
            ctx.received_at,
            self.settings.max_clock_skew,
        )?;
        Ok(stream_event(ctx.arn, grant, ev, ctx.received_at))
    }

    /// Claim each accepted event's id; another owner's claim makes it a duplicate.
    async fn claim(&self, ctx: &Ctx<'_>, slots: &mut [Slot]) -> Result<()> {
        // The dedup port's owner is a (shard, sequence) pair: here the request id, at 0.
        let owner = format!("ingest:{}", ctx.request_id);
        let zero = SeqNum::parse("0").map_err(IngestError::Config)?;
        let claims: Vec<(usize, DedupClaim)> = slots
            .iter()
            .enumerate()
            .filter(|(_, s)| matches!(s.fate, Fate::Accept(_)))
            .map(|(i, s)| {
                let claim = DedupClaim {
                    key: dedup_key(ctx.arn, &s.ev.event_id),
                    shard_id: owner.clone(),
                    sequence_number: zero.clone(),
                    claimed_at: ctx.received_at,
                    expires_at: ctx.received_at + self.settings.dedup_ttl,
                };
                (i, claim)
            })
            .collect();
        let outcomes: Vec<(usize, ClaimOutcome)> = futures::stream::iter(claims)
            .map(|(i, c)| async move {
                self.with_retry(|| self.dedup.claim(&c))
                    .await
                    .map(|o| (i, o))
            })
            .buffer_unordered(self.settings.concurrency.max(1))
            .try_collect()
            .await?;
        for (i, o) in outcomes {
            match o {
                ClaimOutcome::Duplicate => slots[i].fate = Fate::Duplicate,
                ClaimOutcome::Reclaimed => slots[i].reclaimed = true,
                ClaimOutcome::Claimed => {}
            }
        }
        Ok(())
    }

    /// Count the accepted events in the module's second; hold those past its limit. An event
    /// an earlier attempt of this request claimed was counted by it (the same second, the
    /// first attempt's receive time), so it is not counted twice.
    async fn limit_rate(
        &self,
        ctx: &Ctx<'_>,
        entry: &MappingEntry,
        slots: &mut [Slot],
    ) -> Result<()> {
        let accepted: Vec<usize> = (0..slots.len())
            .filter(|&i| matches!(slots[i].fate, Fate::Accept(_)) && !slots[i].reclaimed)
            .collect();
        let n = accepted.len() as u64;
        if n == 0 {
            return Ok(());
        }
        let key = rate_key(ctx.arn, ctx.received_at.timestamp());
        let expires = ctx.received_at + Duration::hours(RATE_COUNTER_TTL_HOURS);
        let total = self.with_retry(|| self.rates.add(&key, n, expires)).await?;
        let within = within_rate(entry.max_events_per_second, total, n) as usize;
        for &i in &accepted[within..] {
            slots[i].fate = Fate::Hold(Refusal {
                reason: reasons::RATE_LIMITED,
                detail: format!(
                    "{total} events in second {} above maxEventsPerSecond {}",
                    ctx.received_at.timestamp(),
                    entry.max_events_per_second
                ),
            });
        }
        Ok(())
    }

    async fn record_refusals(&self, ctx: &Ctx<'_>, slots: &[Slot]) -> Result<()> {
        let items: Vec<HeldEvent> = slots
            .iter()
            .filter_map(|s| {
                let (disposition, r) = match &s.fate {
                    Fate::Hold(r) => (Disposition::Held, r),
                    Fate::Reject(r) => (Disposition::Rejected, r),
                    _ => return None,
                };
                let ttl = (disposition == Disposition::Rejected
                    && self.settings.rejected_ttl_days > 0)
                    .then(|| {
                        (ctx.received_at
                            + Duration::days(i64::from(self.settings.rejected_ttl_days)))
                        .timestamp()
                    });
                Some(HeldEvent {
                    key: super::check::held_key(ctx.arn, &s.ev.event_id),
                    disposition,
                    reason: r.reason.to_owned(),
                    detail: r.detail.clone(),
                    invoked_arn: ctx.arn.to_owned(),
                    request_id: ctx.request_id.to_owned(),
                    event_id: s.ev.event_id.clone(),
                    quantity: s.ev.quantity,
                    payload: s.raw.to_string(),
                    received_at: ctx.received_at,
                    ttl,
                })
            })
            .collect();
        futures::stream::iter(items)
            .map(|h| async move { self.with_retry(|| self.held.put(&h)).await })
            .buffer_unordered(self.settings.concurrency.max(1))
            .try_collect::<Vec<()>>()
            .await?;
        Ok(())
    }

    /// `op` under the store retry policy; its error (this crate's, or the shared dedup
    /// store's) classified by its own [`Retryable`] and then kept as an [`IngestError`].
    async fn with_retry<T, E, F, Fut>(&self, op: F) -> Result<T>
    where
        E: Retryable + Into<IngestError>,
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, E>>,
    {
        awsmp_aws::retry(&self.settings.store_retry, op)
            .await
            .map_err(Into::into)
    }
}

impl Default for IngestSettings {
    fn default() -> Self {
        Self {
            allowlist: Allowlist {
                environment: "prod".into(),
                accounts: HashSet::new(),
            },
            max_clock_skew: Duration::seconds(
                awsmp_consumer::domain::verify::DEFAULT_MAX_CLOCK_SKEW_SECONDS,
            ),
            dedup_ttl: Duration::hours(48),
            rejected_ttl_days: 400,
            concurrency: 16,
            store_retry: STORE_RETRY,
        }
    }
}

fn result_of(s: Slot) -> EventResult {
    let (outcome, refusal, stream_event_id) = match s.fate {
        Fate::Accept(e) => (Outcome::Accepted, None, Some(e.event_id)),
        Fate::Duplicate => (Outcome::Duplicate, None, None),
        Fate::Hold(r) => (Outcome::Held, Some(r), None),
        Fate::Reject(r) => (Outcome::Rejected, Some(r), None),
    };
    EventResult {
        event_id: s.ev.event_id,
        outcome,
        reason: refusal.as_ref().map(|r| r.reason),
        detail: refusal.map(|r| r.detail),
        stream_event_id,
    }
}
