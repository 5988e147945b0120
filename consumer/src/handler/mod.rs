//! The `kinesis-consumer` handler: one Kinesis batch in, usage rows out, partial batch failures
//! keyed by sequence number. The same function runs under `lambda_runtime` and under the local
//! event source mapping.
//!
//! [`Consumer::process`] is the sequence of its steps, one module each:
//! 1. `decode.rs`: parse, decode and verify every record (pure).
//! 2. `claim.rs`: claim each record's dedup key, then the event ids and the lanes (those two
//!    at once); a claim that cannot be made is the batch's *cut* — that record and every later
//!    one is left for the retry.
//! 3. `fold.rs`: fold the accepted events per (group, second).
//! 4. `refuse.rs`: record refused events (idempotent puts keyed by stream position), at the
//!    same time as step 5 — neither depends on the other.
//! 5. `rows.rs`: look up which group-hours are finalized; per row decide, record late /
//!    rejected parts, then one conditional write.
//! 6. `archive.rs`: with a billing archive, write the applied events of the records before the
//!    first failure (`crate::archive`); a failed write fails the batch from its first record.
//! 7. `watermark.rs`: publish the shard's ingest watermark — the highest arrival time of the
//!    records before the first failure — for the discoverer's fence, once the rows are durable.
//! 8. `respond.rs`: report the lowest failed record as the batch item failure.
//!
//! Within a step, independent store calls run concurrently, at most [`Settings::concurrency`]
//! ([`DEFAULT_STORE_CONCURRENCY`]) at once; [`BatchReport::phases`] times each step.
//!
//! Every store call is retried under [`Settings::store_retry`] ([`STORE_RETRY`]).

mod archive;
mod claim;
mod decode;
mod fold;
mod refuse;
mod respond;
mod rows;
mod watermark;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lambda_events::event::kinesis::KinesisEvent;
use aws_lambda_events::event::streams::KinesisEventResponse;
use awsmp_aws::emf::MetricsSink;
use awsmp_contract::clock::Clock;
use awsmp_contract::retry::RetryPolicy;
use chrono::{DateTime, Utc};

use crate::domain::intern::NameCache;
use crate::domain::row::RowLimits;
use crate::domain::verify::VerifyPolicy;
use crate::error::Result;
use crate::ports::{DedupStore, FinalizedGroups, RejectedEventStore, UsageRowWriter};

use decode::Slot;
pub use decode::{kinesis_record, stream_record};

/// Rejected bytes up to this size are stored inline (base64); larger ones by reference only.
/// Our bound: keeps a rejected-events item far below DynamoDB's 400 KB item limit.
pub const MAX_INLINE_REJECTED_BYTES: usize = 8 * 1024;
/// Optimistic-concurrency rounds on one row (decide, conditional write, re-read when another
/// writer moved the row first) before the row is failed and the batch retried. Not a backoff:
/// a round that loses the race re-reads at once.
pub const MAX_ROW_CAS_ROUNDS: u32 = 8;
/// Store calls of one step in flight at once (`AWSMP_CONSUMER_CONCURRENCY`). Our bound: enough
/// to hide a round trip behind fifteen others within a batch of a few hundred rows, few enough
/// that one invocation's throttled burst stays small; more does not help against the local
/// DynamoDB emulator, which answers one request at a time (docs/benchmarks-journal.md,
/// "event → usage row on the local stack").
pub const DEFAULT_STORE_CONCURRENCY: usize = 16;
/// Retries of one store call on a retryable error: 5 calls in all, full-jitter delays from
/// 25 ms doubling up to 2 s (about 0.4 s at most in all, well inside a Lambda invocation).
pub const STORE_RETRY: RetryPolicy =
    RetryPolicy::new(5, Duration::from_millis(25), Duration::from_secs(2));

/// Tunables of the handler (see [`crate::config::Config`] for their environment variables).
#[derive(Debug, Clone)]
pub struct Settings {
    /// Event verification.
    pub verify: VerifyPolicy,
    /// How long a dedup claim lives.
    pub dedup_ttl: chrono::Duration,
    /// Usage-row TTL in days after the row's second (0 = no `ttl` attribute).
    pub usage_ttl_days: u32,
    /// Rejected-events TTL in days (0 = keep).
    pub rejected_ttl_days: u32,
    /// Store calls of one step in flight at once ([`DEFAULT_STORE_CONCURRENCY`]).
    pub concurrency: usize,
    /// Row limits.
    pub limits: RowLimits,
    /// How a store call that failed with a retryable error is retried ([`STORE_RETRY`]).
    pub store_retry: RetryPolicy,
    /// Ranges of a dedup lane kept with their owner record
    /// ([`crate::domain::dedup::MAX_OWNED_RANGES`]; the simulation's scale class sets fewer,
    /// so a schedule reaches the compaction).
    pub lane_owned_ranges: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            verify: VerifyPolicy::default(),
            dedup_ttl: chrono::Duration::hours(48),
            usage_ttl_days: 365,
            rejected_ttl_days: 400,
            concurrency: DEFAULT_STORE_CONCURRENCY,
            limits: RowLimits::default(),
            store_retry: STORE_RETRY,
            lane_owned_ranges: crate::domain::dedup::MAX_OWNED_RANGES,
        }
    }
}

/// Everything the handler needs.
#[derive(Clone)]
pub struct Consumer {
    /// Tunables.
    pub settings: Settings,
    /// Dedup store.
    pub dedup: Arc<dyn DedupStore>,
    /// Rejected events and late usage.
    pub rejected: Arc<dyn RejectedEventStore>,
    /// The usage table.
    pub rows: Arc<dyn UsageRowWriter>,
    /// Finalized group-hours.
    pub finalized: Arc<dyn FinalizedGroups>,
    /// Ingest watermarks; `None`: not published (no fence downstream).
    pub watermarks: Option<Arc<dyn awsmp_aws::watermark::WatermarkStore>>,
    /// The billing archive; `None`: not archived.
    pub archive: Option<Arc<dyn crate::archive::BillingArchive>>,
    /// EMF metrics.
    pub metrics: MetricsSink,
    /// The clock (audit stamps, claim expiry).
    pub clock: Arc<dyn Clock>,
    /// Group names kept from one batch to the next ([`NameCache`]; `NameCache::new()`).
    pub names: NameCache,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// What one invocation did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchReport {
    /// Stream records delivered.
    pub records: usize,
    /// Events accepted into the fold (excluding duplicates and records after a failure).
    pub events_accepted: u64,
    /// Quantity newly added to rows.
    pub quantity_written: u64,
    /// Events (or row parts) recorded as rejected, by reason.
    pub rejected: BTreeMap<String, u64>,
    /// Quantity recorded as late usage.
    pub late_quantity: u64,
    /// Records skipped as duplicates.
    pub dedup_hits: u64,
    /// Distinct rows in the batch.
    pub rows: usize,
    /// Conditional writes that changed a row.
    pub row_writes: u64,
    /// `UpdateItem` calls, including ones whose condition failed.
    pub update_items: u64,
    /// Row parts skipped because the row already held them (replays).
    pub replayed_parts: u64,
    /// Row parts added although their lane's watermark had passed them: records of a batch
    /// the mapping discarded, re-driven from its on-failure destination.
    pub behind_watermark_parts: u64,
    /// The sequence number reported as the batch item failure, if any.
    pub failed_from: Option<String>,
    /// The batch's largest client-clock skew in seconds, rounded (either direction), if any
    /// event decoded.
    pub largest_client_skew_seconds: Option<i64>,
    /// Events written to the billing archive.
    pub archived_events: u64,
    /// Wall time of each step (what the load run's report takes apart).
    pub phases: PhaseTimes,
}

/// Wall time of each step of one invocation, in the order they run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PhaseTimes {
    /// Decode and verify (pure).
    pub decode: Duration,
    /// Record, id and lane claims.
    pub claims: Duration,
    /// Recording the refused events.
    pub refusals: Duration,
    /// The per-(group, second) fold (pure).
    pub fold: Duration,
    /// The finalized-group lookup.
    pub finalized: Duration,
    /// The row writes (their reads and row-level rejections included).
    pub rows: Duration,
    /// The billing archive.
    pub archive: Duration,
    /// The ingest watermark.
    pub watermark: Duration,
}

/// One invocation's working state, handed from step to step.
struct Batch<'e> {
    /// The delivered event.
    event: &'e KinesisEvent,
    /// The invocation's instant (audit stamps, claim expiry, TTLs).
    now: DateTime<Utc>,
    /// One per delivered record, in delivery order.
    slots: Vec<Slot>,
    /// The lowest record index that failed: Lambda resumes from it.
    failed: Option<usize>,
    /// What the invocation did so far.
    report: BatchReport,
}

impl Batch<'_> {
    /// Record `i` failed: the batch resumes from it, or from an earlier failed record.
    fn fail_at(&mut self, i: usize) {
        self.failed = Some(self.failed.map_or(i, |f| f.min(i)));
    }
}

impl Consumer {
    /// Handle one batch; failures become `batchItemFailures`, never an `Err`.
    pub async fn handle(&self, event: KinesisEvent) -> KinesisEventResponse {
        self.process(event).await.0
    }

    /// Handle one batch and say what happened.
    pub async fn process(&self, event: KinesisEvent) -> (KinesisEventResponse, BatchReport) {
        let started = Instant::now();
        let mut names = self.names.take();
        let slots = decode::decode_slots(&event, &self.settings.verify, &mut names);
        self.names.give_back(names);
        let mut batch = Batch {
            event: &event,
            now: self.clock.now(),
            failed: None,
            report: BatchReport {
                records: event.records.len(),
                // Rounded: the arrival time comes as float seconds (sub-millisecond noise).
                largest_client_skew_seconds: decode::largest_client_skew(&slots)
                    .map(|d| (d.num_milliseconds() as f64 / 1000.0).round() as i64),
                ..BatchReport::default()
            },
            slots,
        };
        let mut lap = Lap(started);
        batch.report.phases.decode = lap.next();
        let cut = self.claim_dedup_keys(&mut batch).await;
        batch.report.phases.claims = lap.next();
        let refusals = self.refusals(&batch, cut);
        let folded = self.fold(&mut batch, cut);
        batch.report.phases.fold = lap.next();
        let early = crate::mutants::active(crate::mutants::Mutant::WatermarkBeforeRows);
        if early {
            self.publish_watermark(&batch).await;
        }
        // The refusals and the rows are independent: recorded at once, both before the
        // archive and the watermark.
        let ((refused, refusing), ()) = futures::join!(
            self.put_refusals(&refusals),
            self.write_rows(&mut batch, &folded)
        );
        self.apply_refusals(&mut batch, &refusals, refused);
        batch.report.phases.refusals = refusing;
        // `write_rows` timed its finalized lookup; the rest of the lap is the row writes.
        batch.report.phases.rows = lap.next().saturating_sub(batch.report.phases.finalized);
        self.archive_applied(&mut batch, folded.archived).await;
        batch.report.phases.archive = lap.next();
        if !early {
            self.publish_watermark(&batch).await;
        }
        batch.report.phases.watermark = lap.next();
        self.respond(batch)
    }

    /// One store call under [`Settings::store_retry`].
    async fn with_retry<T, F, Fut>(&self, op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        if crate::mutants::active(crate::mutants::Mutant::WatermarkBeforeRows) {
            return retry_every_error(op).await;
        }
        awsmp_aws::retry(&self.settings.store_retry, op).await
    }

    /// The rejected-events TTL for an item recorded at `now` (`None`: keep).
    fn rejected_ttl(&self, now: DateTime<Utc>) -> Option<i64> {
        ttl_days_after(now, self.settings.rejected_ttl_days)
    }

    /// The usage-row TTL for the row of second `t` (`None`: no `ttl` attribute).
    fn usage_ttl(&self, t: DateTime<Utc>) -> Option<i64> {
        ttl_days_after(t, self.settings.usage_ttl_days)
    }
}

/// The mutant's retry: every error, ten attempts, no pause.
async fn retry_every_error<T, F, Fut>(mut op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut last = op().await;
    for _ in 1..10 {
        if last.is_ok() {
            break;
        }
        last = op().await;
    }
    last
}

/// A stopwatch read lap by lap.
struct Lap(Instant);

impl Lap {
    /// The time since the last lap (or the start), starting the next.
    fn next(&mut self) -> Duration {
        let now = Instant::now();
        now.duration_since(std::mem::replace(&mut self.0, now))
    }
}

/// Epoch seconds `days` after `t`; `None` when `days` is 0.
fn ttl_days_after(t: DateTime<Utc>, days: u32) -> Option<i64> {
    (days > 0).then(|| (t + chrono::Duration::days(i64::from(days))).timestamp())
}
