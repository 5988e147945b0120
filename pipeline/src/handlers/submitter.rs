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

use super::{Services, retry_transient, sleep_full_jitter};
use crate::config::MeteringMode;
use crate::domain::batch::{CallKind, SubmitRecord, plan_calls};
use crate::domain::bisect::{
    Bisector, CallOutcome, ExceptionClass, Halt, Verdict, classify_exception,
};
use crate::domain::results::{
    ApiResponse, Decision, dry_run_decision, map_response, oversized_decision, poison_decision,
};
use crate::domain::status::metric;
use crate::domain::time::submitter_pending_buckets;
use crate::emf::Metric;
use crate::error::{PipelineError, Result};
use crate::ports::{AggregatedItem, MeterCallError, MeteringApi, WriteBack};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// Attempts of one call on throttling / internal errors / lost responses before its records
/// are left pending for the next run.
pub const CALL_ATTEMPTS: u32 = 6;
const CALL_BACKOFF_BASE: Duration = Duration::from_millis(100);
const CALL_BACKOFF_CAP: Duration = Duration::from_secs(5);
/// Rounds of resending `UnprocessedRecords` within one run.
pub const UNPROCESSED_ROUNDS: u32 = 4;
/// Attempts of one write-back after AWS accepted its record: throttling must not lose it.
pub const WRITE_BACK_ATTEMPTS: u32 = 10;
const WRITE_BACK_CAP: Duration = Duration::from_secs(10);

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
    let budget = Duration::from_secs(svc.config.submitter_time_budget_secs);
    let now = svc.clock.now();
    let cfg = &svc.config;
    let mut out = SubmitterOutput::default();

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
    out.records_read = items.len();

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

    let mut failures: Vec<PipelineError> = Vec::new();
    for record in &plan.oversized {
        apply(svc, record, &oversized_decision(), &mut out, &mut failures).await;
    }
    for call in plan.calls {
        if started.elapsed() > budget {
            out.left_pending += call.records.len();
            out.halted.get_or_insert_with(|| "time budget spent".into());
            continue;
        }
        if out.halted.is_some() {
            out.left_pending += call.records.len();
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
                apply(svc, record, &decision, &mut out, &mut failures).await;
            }
            continue;
        }
        // UnprocessedRecords are retried with backoff and jitter while attempts and budget
        // remain; what is still unprocessed then stays pending for the next run.
        let mut batch = call.records;
        let mut round = 0;
        loop {
            let unprocessed = submit_call(
                svc,
                api,
                &call.kind,
                batch,
                started,
                budget,
                &mut out,
                &mut failures,
            )
            .await;
            round += 1;
            if unprocessed.is_empty() {
                break;
            }
            if round >= UNPROCESSED_ROUNDS || started.elapsed() > budget || out.halted.is_some() {
                for (record, decision) in &unprocessed {
                    apply(svc, record, decision, &mut out, &mut failures).await;
                }
                break;
            }
            sleep_full_jitter(round, CALL_BACKOFF_BASE, CALL_BACKOFF_CAP).await;
            batch = unprocessed.into_iter().map(|(r, _)| r).collect();
        }
    }

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

/// Send one planned call, bisecting request-level poison records, and write back every
/// final outcome. Returns the records left pending by the response (unprocessed), with their
/// decision, for the caller to resend.
#[allow(clippy::too_many_arguments)]
async fn submit_call(
    svc: &Services,
    api: &dyn MeteringApi,
    kind: &CallKind,
    mut records: Vec<SubmitRecord>,
    started: Instant,
    budget: Duration,
    out: &mut SubmitterOutput,
    failures: &mut Vec<PipelineError>,
) -> Vec<(SubmitRecord, Decision)> {
    let now = svc.clock.now();
    let mut bisector = Bisector::new(records.len());
    let mut responses: BTreeMap<u32, (Vec<usize>, ApiResponse)> = BTreeMap::new();
    while let Some(call) = bisector.next_call() {
        // Persist what we are about to send, before sending it.
        let mut persisted = true;
        for &i in &call.indices {
            let r = &records[i];
            if r.previous_attempt != Some(r.quantity)
                && let Err(e) =
                    retry_transient(|| svc.aggregated.mark_attempted(&r.group, r.quantity, now))
                        .await
            {
                tracing::warn!(group = %r.group, error = %e, "could not persist the attempt; not sending");
                persisted = false;
            }
        }
        if !persisted {
            bisector
                .report(call.id, CallOutcome::GaveUp)
                .expect("call in flight");
            continue;
        }
        let batch: Vec<SubmitRecord> = call.indices.iter().map(|&i| records[i].clone()).collect();
        let mut attempt = 0;
        let outcome = loop {
            out.calls += 1;
            let result = api.batch_meter_usage(kind, &batch).await;
            let retry = match result {
                Ok(response) => {
                    responses.insert(call.id.0, (call.indices.clone(), response));
                    break CallOutcome::Responded;
                }
                Err(MeterCallError::Exception { name, message }) => match classify_exception(&name)
                {
                    ExceptionClass::Retryable => {
                        tracing::info!(exception = %name, attempt, "BatchMeterUsage transient error; backing off");
                        true
                    }
                    _ => {
                        tracing::warn!(exception = %name, %message, records = batch.len(), depth = call.depth, "BatchMeterUsage request-level error");
                        break CallOutcome::RequestError { exception: name };
                    }
                },
                Err(MeterCallError::Transport(e)) => {
                    tracing::warn!(error = %e, attempt, "BatchMeterUsage: no response; retrying (a replay is recognised)");
                    true
                }
            };
            // No answer, or a transient error that may follow an applied call: from now on a
            // DuplicateRecord of this quantity is our own attempt. (Not before: the answer to
            // this very send must be read against the earlier attempts only, or a genuine
            // DuplicateRecord would be mistaken for a replay and reported as Success.)
            for &i in &call.indices {
                records[i].mark_sent();
            }
            attempt += 1;
            if retry && (attempt >= CALL_ATTEMPTS || started.elapsed() > budget) {
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
                Metric::count(metric::BATCH_METER_USAGE_EXCEPTION)
                    .with(metric::EXCEPTION, "DisabledApiException"),
            );
            out.halted = Some("DisabledApiException".into());
        }
        Some(Halt::Fatal { exception }) => {
            svc.metrics.emit(
                Metric::count(metric::BATCH_METER_USAGE_EXCEPTION)
                    .with(metric::EXCEPTION, exception.clone()),
            );
            out.halted = Some(exception.clone());
        }
        None => {}
    }
    // Decisions per record: from the response of the call that carried it, or the poison verdict.
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
            Some(d) => apply(svc, &records[i], &d, out, failures).await,
            None => out.left_pending += 1,
        }
    }
    unprocessed
}

/// Write one decision back (retrying through throttling) and emit its metric.
async fn apply(
    svc: &Services,
    record: &SubmitRecord,
    decision: &Decision,
    out: &mut SubmitterOutput,
    failures: &mut Vec<PipelineError>,
) {
    if let Some(m) = decision.metric() {
        let mut metric = Metric::count(m.name);
        if let Some((k, v)) = m.dimension {
            metric = metric.with(k, v);
        }
        svc.metrics.emit(metric);
    }
    let Decision::Finalize(f) = decision else {
        out.left_pending += 1;
        return;
    };
    let ttl = (f.status.is_billed() && svc.config.aggregated_ttl_days > 0)
        .then(|| svc.clock.now().timestamp() + i64::from(svc.config.aggregated_ttl_days) * 86_400);
    let write = WriteBack {
        status: f.status,
        reason: f.reason.clone(),
        metering_record_id: f.metering_record_id.clone(),
        ttl,
    };
    let now = svc.clock.now();
    let mut attempt = 0;
    loop {
        match svc.aggregated.write_back(&record.group, &write, now).await {
            Ok(_) => {
                *out.statuses
                    .entry(f.status.as_str().to_owned())
                    .or_default() += 1;
                return;
            }
            Err(e) if e.is_retryable() && attempt + 1 < WRITE_BACK_ATTEMPTS => {
                sleep_full_jitter(attempt, CALL_BACKOFF_BASE, WRITE_BACK_CAP).await;
                attempt += 1;
            }
            Err(e) => {
                tracing::error!(group = %record.group, status = %f.status, error = %e, "write-back failed; the record stays pending and its replay will be recognised");
                out.left_pending += 1;
                failures.push(e);
                return;
            }
        }
    }
}
