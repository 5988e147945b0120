//! The submitter: one per product and region, serial. Reads pending aggregated records
//! (deprovisioning licenses first, then oldest first, capped per run), plans
//! `BatchMeterUsage` calls (≤25 records, ≤1 MB, CA and legacy apart), isolates request-level
//! poison records by bisection, retries throttling and transient errors with full-jitter
//! backoff inside its time budget, and writes every per-record outcome back
//! (docs/metering-api.md).
//!
//! `attemptedQuantity` is persisted before each call, so a crash or a lost response after AWS
//! accepted a batch is recognised on the next run (identical retry → Success / DuplicateRecord
//! of our own attempt) instead of being mis-reported; a call AWS provably did not apply
//! (throttled, refused, unprocessed) takes its mark back, so it never makes a later
//! DuplicateRecord ours. The mark is conditional on the record being pending, so a record
//! expired since the run read it is never sent. Write-backs of an accepted batch are retried
//! through throttling and never abandoned silently: one that finds its record finalized with
//! another outcome fails the run with [`PipelineError::WriteBackConflict`], a metric and an
//! alarm.
//!
//! Throughput: calls are paced at the submitter's share of the BatchMeterUsage quota
//! (`AWSMP_SUBMITTER_CALLS_PER_SECOND`, [`crate::config::Config::submitter_calls_per_second`]:
//! every product metered in the account and region shares it), a call's attempt marks are
//! written concurrently, and its write-backs run in the background while the next calls go
//! out (all joined before the run ends), so a serial submitter keeps the quota busy.
//!
//! | module | step |
//! |---|---|
//! | this file | read the pending records, plan the calls, resend `UnprocessedRecords` |
//! | `submitter/send.rs` | one planned call: attempt marks, bisection, retries of transient errors |
//! | `submitter/write_back.rs` | per-record decisions: metrics and background write-backs |
//! | `submitter/pacer.rs` | spacing call starts at the quota |

mod pacer;
mod send;
mod write_back;

use super::Services;
use super::deps::SubmitterDeps;
use crate::config::MeteringMode;
use crate::domain::batch::{PlannedCall, SubmitRecord, plan_calls};
use crate::domain::results::{dry_run_decision, oversized_decision, poison_decision};
use crate::error::{PipelineError, Result};
use crate::ports::{AggregatedItem, MeteringApi};
use awsmp_aws::emf::Metric;
use awsmp_contract::metrics;
use awsmp_contract::retry::RetryPolicy;
use awsmp_contract::time::submitter_pending_buckets;
use chrono::{DateTime, Utc};
use pacer::Pacer;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};
use tokio::task::JoinSet;
use write_back::WriteBackDone;

/// One `BatchMeterUsage` call on throttling, internal errors and lost responses: six sends,
/// the first retry within one quota slot (100 ms), then doubling; what is still unanswered
/// stays pending for the next run.
pub const CALL_RETRY: RetryPolicy =
    RetryPolicy::new(6, Duration::from_millis(100), Duration::from_secs(5));
/// Resending `UnprocessedRecords` within one run: four rounds in all, spaced like
/// [`CALL_RETRY`]; what is still unprocessed then stays pending for the next run.
pub const UNPROCESSED_RETRY: RetryPolicy =
    RetryPolicy::new(4, Duration::from_millis(100), Duration::from_secs(5));
/// One write-back after AWS accepted its record: ten attempts, up to ~33 s of waiting, because
/// throttling must not lose an accepted record's outcome.
pub const WRITE_BACK_RETRY: RetryPolicy =
    RetryPolicy::new(10, Duration::from_millis(100), Duration::from_secs(10));
/// Write-backs in flight at once (four calls' worth): bounds the run's concurrent writes.
const MAX_WRITE_BACKS_IN_FLIGHT: usize = 100;
/// Why a run stopped early when its time budget ran out (not an error: the rest stays pending).
pub const BUDGET_SPENT: &str = "time budget spent";

/// What one run did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubmitterOutput {
    /// Pending records read.
    pub records_read: usize,
    /// BatchMeterUsage calls made (including retries and bisection halves).
    pub calls: usize,
    /// Final statuses written, by status.
    pub statuses: BTreeMap<String, usize>,
    /// Records left pending (unprocessed, retries exhausted, time budget).
    pub left_pending: usize,
    /// Records found finalized when their attempt was about to be marked (expired since the
    /// run read them): not sent.
    pub finalized_meanwhile: usize,
    /// Set when the run stopped early: `DisabledApiException`, a fatal exception, or the budget.
    pub halted: Option<String>,
}

/// Run one submitter pass with `api` (unused in dry-run mode), resolving the submitter's
/// dependencies from `svc` (a process resolves them once, at start, and calls
/// [`submit_with`]).
pub async fn submit(svc: &Services, api: &dyn MeteringApi) -> Result<SubmitterOutput> {
    submit_with(&SubmitterDeps::from_services(svc)?, api).await
}

/// Run one submitter pass with `api` (unused in dry-run mode).
pub async fn submit_with(svc: &SubmitterDeps, api: &dyn MeteringApi) -> Result<SubmitterOutput> {
    let started = Instant::now();
    let now = svc.clock.now();
    let cfg = &svc.config;
    let deprovisioning = deprovisioning_licenses(svc).await;
    let items = read_pending(svc, &deprovisioning, now).await?;

    let mut run = Run {
        svc,
        api,
        started,
        budget: Duration::from_secs(cfg.submitter_time_budget_secs),
        out: SubmitterOutput {
            records_read: items.len(),
            ..Default::default()
        },
        failures: Vec::new(),
        write_backs: JoinSet::new(),
        pacer: Pacer::new(cfg.submitter_calls_per_second),
    };
    let records: Vec<SubmitRecord> = items
        .into_iter()
        .map(|item| SubmitRecord {
            deprovisioning: deprovisioning.contains(&item.group.license_arn),
            previous_attempt: item.attempted_quantity,
            group: item.group,
            quantity: item.quantity,
            allocations: item.allocations,
        })
        .collect();
    let product = cfg.product_code.clone();
    let plan = plan_calls(records, |_license| Some(product.clone()));

    for record in &plan.oversized {
        run.apply(record, &oversized_decision()).await;
    }
    for call in plan.calls {
        run.run_call(call).await;
    }
    run.settle_all().await;
    run.report_throughput();
    run.conclude()
}

/// Licenses in their deprovisioning flush window. A lookup failure falls back to the ordinary
/// pass and never blocks submission.
async fn deprovisioning_licenses(svc: &SubmitterDeps) -> BTreeSet<String> {
    let Some(index) = &svc.deprovisioning else {
        return BTreeSet::new();
    };
    match index.active().await {
        Ok(list) => list.into_iter().map(|d| d.license_arn).collect(),
        Err(e) => {
            tracing::warn!(error = %e, "deprovisioning index unavailable; ordinary pass only");
            BTreeSet::new()
        }
    }
}

/// The run's records: every pending record of the deprovisioning licenses (current hour
/// included), then the ordinary pass up to its per-run cap: oldest hour first and, within an
/// hour, records never sent first, then those whose last attempt is oldest
/// ([`least_recently_attempted_first`]).
async fn read_pending(
    svc: &SubmitterDeps,
    deprovisioning: &BTreeSet<String>,
    now: DateTime<Utc>,
) -> Result<Vec<AggregatedItem>> {
    let cfg = &svc.config;
    let mut items: Vec<AggregatedItem> = Vec::new();
    for license in deprovisioning {
        for bucket in submitter_pending_buckets(now, &cfg.time, true) {
            items.extend(svc.aggregated.pending(bucket, Some(license)).await?);
        }
    }
    let mut ordinary = 0;
    for bucket in submitter_pending_buckets(now, &cfg.time, false) {
        if ordinary >= cfg.submitter_max_records_per_run {
            break;
        }
        if awsmp_aws::mutants::active(awsmp_aws::mutants::Mutant::SubmitterSkipsLastHour)
            && !awsmp_contract::time::is_billable(
                bucket,
                now + chrono::Duration::hours(1),
                &cfg.time,
            )
        {
            continue;
        }
        let mut bucket_items = svc.aggregated.pending(bucket, None).await?;
        least_recently_attempted_first(&mut bucket_items);
        for item in bucket_items {
            if !deprovisioning.contains(&item.group.license_arn)
                && ordinary < cfg.submitter_max_records_per_run
            {
                ordinary += 1;
                items.push(item);
            }
        }
    }
    Ok(items)
}

/// Order one hour's pending records for a capped run: never attempted first, then by their
/// last attempt, oldest first (a stable sort: the store's order otherwise). A record retried
/// in this run goes to the back of its hour for the next, so when more records are pending
/// than the cap — in an outage that leaves attempts unanswered, every run retrying them — the
/// cap rotates through all of them instead of retrying the same ones while the rest wait out
/// the billable window.
fn least_recently_attempted_first(items: &mut [AggregatedItem]) {
    items.sort_by_key(|item| item.submission_attempted_at);
}

/// One submitter run's state.
struct Run<'a> {
    svc: &'a SubmitterDeps,
    api: &'a dyn MeteringApi,
    started: Instant,
    budget: Duration,
    out: SubmitterOutput,
    failures: Vec<PipelineError>,
    write_backs: JoinSet<WriteBackDone>,
    pacer: Pacer,
}

impl Run<'_> {
    fn budget_spent(&self) -> bool {
        self.started.elapsed() > self.budget
    }

    /// One planned call: skipped once the run halted or its budget is spent, decided locally
    /// in dry-run mode, else sent, with its `UnprocessedRecords` resent while
    /// [`UNPROCESSED_RETRY`] and the budget allow; what is still unprocessed stays pending.
    async fn run_call(&mut self, call: PlannedCall) {
        if self.budget_spent() {
            self.out.left_pending += call.records.len();
            self.out.halted.get_or_insert_with(|| BUDGET_SPENT.into());
            return;
        }
        if self.out.halted.is_some() {
            self.out.left_pending += call.records.len();
            return;
        }
        if self.svc.config.metering_mode == MeteringMode::DryRun {
            return self.dry_run(&call.records).await;
        }
        let mut batch = call.records;
        let mut round = 0;
        loop {
            let unprocessed = self.submit_call(&call.kind, batch).await;
            if unprocessed.is_empty() {
                return;
            }
            if !UNPROCESSED_RETRY.allows_retry(round)
                || self.budget_spent()
                || self.out.halted.is_some()
            {
                for (record, decision) in &unprocessed {
                    self.apply(record, decision).await;
                }
                return;
            }
            // The thread-local RNG is dropped before the await: the run's future stays `Send`.
            let delay = awsmp_aws::retry::jitter(&UNPROCESSED_RETRY, round);
            tokio::time::sleep(delay).await;
            round += 1;
            batch = unprocessed.into_iter().map(|(r, _)| r).collect();
        }
    }

    /// Dry-run: no call; allow-listed test accounts end `DryRunSubmitted`, anyone else `Error`.
    async fn dry_run(&mut self, records: &[SubmitRecord]) {
        for record in records {
            let decision = if self
                .svc
                .config
                .dry_run_accounts
                .contains(&record.group.customer_aws_account_id)
            {
                dry_run_decision()
            } else {
                // Dry-run is for test accounts only: never pretend a real buyer was billed.
                poison_decision("DryRunAccountNotAllowlisted")
            };
            self.apply(record, &decision).await;
        }
    }

    /// The run's calls and finalized records, once per run (zeros too, so charts stay continuous).
    fn report_throughput(&self) {
        let finalized: usize = self.out.statuses.values().sum();
        self.svc.metrics.emit(Metric::counts(
            metrics::BATCH_METER_USAGE_CALLS,
            self.out.calls as u64,
        ));
        self.svc.metrics.emit(Metric::counts(
            metrics::USAGE_RECORDS_FINALIZED,
            finalized as u64,
        ));
    }

    /// The run's result: a halt other than the budget is an error, and so is a failed
    /// write-back (records whose write-back failed stay pending with `attemptedQuantity` set:
    /// the next run resubmits them and recognises the replay; failing the run raises the
    /// Errors alarm).
    fn conclude(self) -> Result<SubmitterOutput> {
        let Run { out, failures, .. } = self;
        if let Some(halt) = &out.halted
            && halt != BUDGET_SPENT
        {
            return Err(PipelineError::MeteringHalted {
                exception: halt.clone(),
                left_pending: out.left_pending,
            });
        }
        if let Some(first) = failures.into_iter().next() {
            return Err(first);
        }
        Ok(out)
    }
}
