//! The submitter: one per product and region, serial. Reads pending aggregated records
//! (deprovisioning licenses first, then oldest first, capped per run), plans
//! `BatchMeterUsage` calls (≤25 records, ≤1 MB, CA and legacy apart), isolates request-level
//! poison records by bisection, retries throttling and transient errors with full-jitter
//! backoff inside its time budget, and writes every per-record outcome back.
//!
//! Beyond the reference: `attemptedQuantity` is persisted before each call, so a crash or a
//! lost response after AWS accepted a batch is recognised on the next run (identical retry →
//! Success / DuplicateRecord of our own attempt) instead of being mis-reported; write-backs
//! of an accepted batch are retried through throttling and never abandoned silently.
//!
//! Throughput: calls are paced at the BatchMeterUsage quota, a call's attempt marks are
//! written concurrently, and its write-backs run in the background while the next calls go
//! out (all joined before the run ends), so a serial submitter keeps the quota busy.

use super::{Services, retry_transient, sleep_full_jitter};
use crate::config::MeteringMode;
use crate::contract::metrics;
use crate::contract::status::AggregatedStatus;
use crate::domain::batch::{CallKind, SubmitRecord, plan_calls};
use crate::domain::bisect::{
    Bisector, CallOutcome, ExceptionClass, Halt, Verdict, classify_exception,
};
use crate::domain::keys::GroupKey;
use crate::domain::results::{
    ApiResponse, Decision, dry_run_decision, map_response, oversized_decision, poison_decision,
};
use crate::domain::time::submitter_pending_buckets;
use crate::emf::Metric;
use crate::error::{PipelineError, Result};
use crate::ports::{AggregatedItem, AggregatedStore, MeterCallError, MeteringApi, WriteBack};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

/// Attempts of one call on throttling / internal errors / lost responses before its records
/// are left pending for the next run.
pub const CALL_ATTEMPTS: u32 = 6;
// The first retry waits at most 100 ms (one quota slot), then the wait doubles.
const CALL_BACKOFF_BASE: Duration = Duration::from_millis(50);
const CALL_BACKOFF_CAP: Duration = Duration::from_secs(5);
/// BatchMeterUsage quota per account and region, in calls per second (AWS Marketplace
/// Metering Service quotas, ~10 calls/s per account and region:
/// <https://docs.aws.amazon.com/marketplace/latest/userguide/metering-service-quotas.html>). Calls are paced to it.
pub const QUOTA_CALLS_PER_SECOND: u32 = 10;
/// Rounds of resending `UnprocessedRecords` within one run.
pub const UNPROCESSED_ROUNDS: u32 = 4;
/// Attempts of one write-back after AWS accepted its record: throttling must not lose it.
pub const WRITE_BACK_ATTEMPTS: u32 = 10;
const WRITE_BACK_BASE: Duration = Duration::from_millis(100);
const WRITE_BACK_CAP: Duration = Duration::from_secs(10);
/// Write-backs in flight at once (four calls' worth): bounds the run's concurrent writes.
const MAX_WRITE_BACKS_IN_FLIGHT: usize = 100;

/// What one run did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
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
    /// Set when the run stopped early: `DisabledApiException`, a fatal exception, or the budget.
    pub halted: Option<String>,
}

/// Run one submitter pass with `api` (unused in dry-run mode).
pub async fn submit(svc: &Services, api: &dyn MeteringApi) -> Result<SubmitterOutput> {
    let started = Instant::now();
    let now = svc.clock.now();
    let cfg = &svc.config;

    // Deprovisioning licenses first, current hour included; a lookup failure falls back to
    // the ordinary pass and never blocks submission.
    let deprovisioning: BTreeSet<String> = match &svc.deprovisioning {
        Some(index) => match index.active().await {
            Ok(list) => list.into_iter().map(|d| d.license_arn).collect(),
            Err(e) => {
                tracing::warn!(error = %e, "deprovisioning index unavailable; ordinary pass only");
                BTreeSet::new()
            }
        },
        None => BTreeSet::new(),
    };
    let mut items: Vec<AggregatedItem> = Vec::new();
    for license in &deprovisioning {
        for bucket in submitter_pending_buckets(now, &cfg.time, true) {
            items.extend(svc.aggregated.pending(bucket, Some(license)).await?);
        }
    }
    let mut ordinary = 0;
    for bucket in submitter_pending_buckets(now, &cfg.time, false) {
        if ordinary >= cfg.submitter_max_records_per_run {
            break;
        }
        for item in svc.aggregated.pending(bucket, None).await? {
            if !deprovisioning.contains(&item.group.license_arn)
                && ordinary < cfg.submitter_max_records_per_run
            {
                ordinary += 1;
                items.push(item);
            }
        }
    }

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
        pacer: Pacer::new(QUOTA_CALLS_PER_SECOND),
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
        if run.started.elapsed() > run.budget {
            run.out.left_pending += call.records.len();
            run.out
                .halted
                .get_or_insert_with(|| "time budget spent".into());
            continue;
        }
        if run.out.halted.is_some() {
            run.out.left_pending += call.records.len();
            continue;
        }
        if cfg.metering_mode == MeteringMode::DryRun {
            for record in &call.records {
                let decision = if cfg
                    .dry_run_accounts
                    .contains(&record.group.customer_aws_account_id)
                {
                    dry_run_decision()
                } else {
                    // Dry-run is for test accounts only: never pretend a real buyer was billed.
                    poison_decision("DryRunAccountNotAllowlisted")
                };
                run.apply(record, &decision).await;
            }
            continue;
        }
        // UnprocessedRecords are retried with backoff and jitter while attempts and budget
        // remain; what is still unprocessed then stays pending for the next run.
        let mut batch = call.records;
        let mut round = 0;
        loop {
            let unprocessed = run.submit_call(&call.kind, batch).await;
            round += 1;
            if unprocessed.is_empty() {
                break;
            }
            if round >= UNPROCESSED_ROUNDS
                || run.started.elapsed() > run.budget
                || run.out.halted.is_some()
            {
                for (record, decision) in &unprocessed {
                    run.apply(record, decision).await;
                }
                break;
            }
            sleep_full_jitter(round, CALL_BACKOFF_BASE, CALL_BACKOFF_CAP).await;
            batch = unprocessed.into_iter().map(|(r, _)| r).collect();
        }
    }
    run.settle_all().await;

    let Run { out, failures, .. } = run;
    if let Some(halt) = &out.halted
        && halt != "time budget spent"
    {
        return Err(PipelineError::MeteringHalted {
            exception: halt.clone(),
        });
    }
    if let Some(first) = failures.into_iter().next() {
        // Records whose write-back failed stay pending with attemptedQuantity set: the next run
        // resubmits them and recognises the replay. Failing the run raises the Errors alarm.
        return Err(first);
    }
    Ok(out)
}

/// Spaces call starts at the quota: at most one slot per interval, never banking more than
/// the current slot, so the average stays at the quota and bursts stay at two calls.
#[derive(Debug)]
struct Pacer {
    interval: Duration,
    next: Option<tokio::time::Instant>,
}

impl Pacer {
    fn new(calls_per_second: u32) -> Self {
        Self {
            interval: Duration::from_secs(1) / calls_per_second.max(1),
            next: None,
        }
    }

    /// Wait for the next slot and take it. The slot after it is one interval later, or now
    /// when the caller was late (one missed slot is made up, never more).
    async fn ready(&mut self) {
        if let Some(slot) = self.next {
            tokio::time::sleep_until(slot).await;
        }
        let now = tokio::time::Instant::now();
        self.next = Some(match self.next {
            Some(slot) => (slot + self.interval).max(now),
            None => now + self.interval,
        });
    }
}

/// Outcome of one background write-back.
type WriteBackDone = (GroupKey, AggregatedStatus, Result<()>);

/// One submitter run's state.
struct Run<'a> {
    svc: &'a Services,
    api: &'a dyn MeteringApi,
    started: Instant,
    budget: Duration,
    out: SubmitterOutput,
    failures: Vec<PipelineError>,
    write_backs: JoinSet<WriteBackDone>,
    pacer: Pacer,
}

impl Run<'_> {
    /// Send one planned call, bisecting request-level poison records, and write back every
    /// final outcome. Returns the records left pending by the response (unprocessed), with
    /// their decision, for the caller to resend.
    async fn submit_call(
        &mut self,
        kind: &CallKind,
        mut records: Vec<SubmitRecord>,
    ) -> Vec<(SubmitRecord, Decision)> {
        let svc = self.svc;
        let now = svc.clock.now();
        let mut bisector = Bisector::new(records.len());
        let mut responses: BTreeMap<u32, (Vec<usize>, ApiResponse)> = BTreeMap::new();
        while let Some(call) = bisector.next_call() {
            // Persist what we are about to send, before sending it (all of the call's records
            // at once).
            let marks = call
                .indices
                .iter()
                .map(|&i| &records[i])
                .filter(|r| r.previous_attempt != Some(r.quantity))
                .map(|r| async move {
                    retry_transient(|| svc.aggregated.mark_attempted(&r.group, r.quantity, now))
                        .await
                        .map_err(|e| (r.group.clone(), e))
                });
            let mut persisted = true;
            for mark in futures::future::join_all(marks).await {
                if let Err((group, e)) = mark {
                    tracing::warn!(%group, error = %e, "could not persist the attempt; not sending");
                    persisted = false;
                }
            }
            if !persisted {
                bisector
                    .report(call.id, CallOutcome::GaveUp)
                    .expect("call in flight");
                continue;
            }
            let batch: Vec<SubmitRecord> =
                call.indices.iter().map(|&i| records[i].clone()).collect();
            let mut attempt = 0;
            let outcome = loop {
                self.pacer.ready().await;
                self.out.calls += 1;
                let result = self.api.batch_meter_usage(kind, &batch).await;
                let retry = match result {
                    Ok(response) => {
                        responses.insert(call.id.0, (call.indices.clone(), response));
                        break CallOutcome::Responded;
                    }
                    Err(MeterCallError::Exception { name, message }) => {
                        match classify_exception(&name) {
                            ExceptionClass::Retryable => {
                                tracing::info!(exception = %name, attempt, "BatchMeterUsage transient error; backing off");
                                true
                            }
                            _ => {
                                tracing::warn!(exception = %name, %message, records = batch.len(), depth = call.depth, "BatchMeterUsage request-level error");
                                break CallOutcome::RequestError { exception: name };
                            }
                        }
                    }
                    Err(MeterCallError::Transport(e)) => {
                        tracing::warn!(error = %e, attempt, "BatchMeterUsage: no response; retrying (a replay is recognised)");
                        true
                    }
                };
                // No answer, or a transient error that may follow an applied call: from now on
                // a DuplicateRecord of this quantity is our own attempt. (Not before: the
                // answer to this very send must be read against the earlier attempts only, or a
                // genuine DuplicateRecord would be mistaken for a replay and reported as
                // Success.)
                for &i in &call.indices {
                    records[i].mark_sent();
                }
                attempt += 1;
                if retry && (attempt >= CALL_ATTEMPTS || self.started.elapsed() > self.budget) {
                    break CallOutcome::GaveUp;
                }
                sleep_full_jitter(attempt, CALL_BACKOFF_BASE, CALL_BACKOFF_CAP).await;
            };
            bisector.report(call.id, outcome).expect("call in flight");
        }
        let result = bisector.finish();
        match &result.halt {
            Some(Halt::RegionDisabled) => {
                tracing::error!(
                    "BatchMeterUsage is disabled in this region: nothing can be billed here"
                );
                svc.metrics.emit(
                    Metric::count(metrics::BATCH_METER_USAGE_EXCEPTION)
                        .with(metrics::EXCEPTION, "DisabledApiException"),
                );
                self.out.halted = Some("DisabledApiException".into());
            }
            Some(Halt::Fatal { exception }) => {
                svc.metrics.emit(
                    Metric::count(metrics::BATCH_METER_USAGE_EXCEPTION)
                        .with(metrics::EXCEPTION, exception.clone()),
                );
                self.out.halted = Some(exception.clone());
            }
            None => {}
        }
        // Decisions per record: from the response of the call that carried it, or the poison
        // verdict.
        let mut decisions: Vec<Option<Decision>> = vec![None; records.len()];
        for (indices, response) in responses.values() {
            let batch: Vec<SubmitRecord> = indices.iter().map(|&i| records[i].clone()).collect();
            for (&i, d) in indices.iter().zip(map_response(&batch, response)) {
                decisions[i] = Some(d);
            }
        }
        let mut unprocessed = Vec::new();
        for (i, verdict) in result.verdicts.iter().enumerate() {
            let decision = match verdict {
                Verdict::Submitted { .. } => decisions[i].take(),
                Verdict::Poison { exception } => Some(poison_decision(exception)),
                Verdict::NotSubmitted => None,
            };
            match decision {
                Some(d @ Decision::StayPending { .. }) => unprocessed.push((records[i].clone(), d)),
                Some(d) => self.apply(&records[i], &d).await,
                None => self.out.left_pending += 1,
            }
        }
        unprocessed
    }

    /// Emit a decision's metric and start its write-back in the background (retried through
    /// throttling; joined before the run ends).
    async fn apply(&mut self, record: &SubmitRecord, decision: &Decision) {
        let svc = self.svc;
        if let Some(m) = decision.metric() {
            let mut metric = Metric::count(m.name);
            if let Some((k, v)) = m.dimension {
                metric = metric.with(k, v);
            }
            svc.metrics.emit(metric);
        }
        let Decision::Finalize(f) = decision else {
            self.out.left_pending += 1;
            return;
        };
        let ttl = (f.status.is_billed() && svc.config.aggregated_ttl_days > 0).then(|| {
            svc.clock.now().timestamp() + i64::from(svc.config.aggregated_ttl_days) * 86_400
        });
        let write = WriteBack {
            status: f.status,
            reason: f.reason.clone(),
            metering_record_id: f.metering_record_id.clone(),
            ttl,
        };
        let (store, group, status, now) = (
            svc.aggregated.clone(),
            record.group.clone(),
            f.status,
            svc.clock.now(),
        );
        self.write_backs.spawn(async move {
            let result = write_back(store, &group, &write, now).await;
            (group, status, result)
        });
        while self.write_backs.len() > MAX_WRITE_BACKS_IN_FLIGHT {
            self.settle_one().await;
        }
    }

    /// Wait for one background write-back and account for it.
    async fn settle_one(&mut self) -> bool {
        let Some(joined) = self.write_backs.join_next().await else {
            return false;
        };
        let (group, status, result) = match joined {
            Ok(done) => done,
            // A write-back task only panics on a bug: surface it as such.
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        };
        match result {
            Ok(()) => {
                *self
                    .out
                    .statuses
                    .entry(status.as_str().to_owned())
                    .or_default() += 1;
            }
            Err(e) => {
                tracing::error!(%group, %status, error = %e, "write-back failed; the record stays pending and its replay will be recognised");
                self.out.left_pending += 1;
                self.failures.push(e);
            }
        }
        true
    }

    /// Wait for every background write-back.
    async fn settle_all(&mut self) {
        while self.settle_one().await {}
    }
}

/// Write one outcome back, retrying through throttling: AWS accepted the record, so giving
/// up early would leave it to be resubmitted and only recognised as a replay.
async fn write_back(
    store: Arc<dyn AggregatedStore>,
    group: &GroupKey,
    write: &WriteBack,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<()> {
    let mut attempt = 0;
    loop {
        match store.write_back(group, write, now).await {
            Ok(_) => return Ok(()),
            Err(e) if e.is_retryable() && attempt + 1 < WRITE_BACK_ATTEMPTS => {
                sleep_full_jitter(attempt, WRITE_BACK_BASE, WRITE_BACK_CAP).await;
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}
