//! Submission expiry: terminally expire aggregated records that can no longer be billed
//! (outside the window, or previous-month after the grace), with no blind spot: every bucket
//! of a bounded lookback is checked each run, whatever empty stretches lie between.
//!
//! A record with an attempt on file (`attemptedQuantity`: a call that may have been applied,
//! never answered) is not expired: AWS may have billed it. The submitter retries it on every
//! run while the window is open (an identical retry is answered `Success` with the same
//! `MeteringRecordId`); one still unresolved when the window closes becomes
//! `NeedsReconciliation` with the `UsageNeedsReconciliation` metric (docs/guarantees.md).
//!
//! Expiry decides from a snapshot while a submitter run that chose its buckets before the hour
//! left the window may still mark and send the record. So each write names the attempt mark it
//! was decided on ([`AttemptCondition`]): `SubmissionExpired` lands only while no attempt is on
//! file, `NeedsReconciliation` only while the attempt it read is; a record that changed
//! meanwhile is left to the next run, which decides again from what is on file then.
//! An attempt marked less than [`ATTEMPT_IN_FLIGHT_SECS`] ago is not decided at all: the run
//! that marked it may still be sending it or writing its answer back, and that answer, not
//! `NeedsReconciliation`, is the truth.

use super::deps::ExpiryDeps;
use super::{STORE_RETRY, Services};
use crate::domain::results::{Decision, needs_reconciliation_decision};
use crate::error::Result;
use crate::ports::{AggregatedItem, AttemptCondition, WriteBack};
use awsmp_aws::emf::Metric;
use awsmp_aws::retry;
use awsmp_contract::metrics;
use awsmp_contract::reasons::PENDING_PAST_BILLABLE_WINDOW;
use awsmp_contract::status::AggregatedStatus;
use awsmp_contract::time::expiry_buckets;
use futures::{StreamExt, TryStreamExt};
use serde::Serialize;

/// Buckets queried at once.
const EXPIRY_CONCURRENCY: usize = 8;

/// How long an attempt mark may still belong to a running submitter invocation: the
/// submitter's Lambda timeout (300 s, `infra/cfn/main_stack.py`; Lambda ends an invocation at
/// its timeout, <https://docs.aws.amazon.com/lambda/latest/dg/configuration-timeout.html>), plus
/// a minute for the two functions' clocks. While a mark is younger, the run that wrote it may
/// still be sending the record or writing its answer back, so expiry leaves the record to a
/// later run instead of declaring an answer that is on its way unresolved.
pub const ATTEMPT_IN_FLIGHT_SECS: i64 = 300 + 60;

/// What one run did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExpiryOutput {
    /// Buckets examined.
    pub buckets: usize,
    /// Records expired.
    pub records_expired: usize,
    /// Quantity they carried (revenue lost).
    pub quantity_expired: u64,
    /// Records with an unresolved attempt, marked `NeedsReconciliation` (possibly billed).
    pub records_unresolved: usize,
    /// Quantity they carried.
    pub quantity_unresolved: u64,
    /// Records not written because they changed after this run read them (finalized, or an
    /// attempt marked by a submitter run): left to the next run.
    pub records_changed_meanwhile: usize,
    /// Records with an attempt marked less than [`ATTEMPT_IN_FLIGHT_SECS`] ago (a submitter run
    /// may still answer it): left to a later run.
    pub records_attempt_in_flight: usize,
}

/// Run one expiry sweep, resolving expiry's dependencies from `svc` (a process resolves them
/// once, at start, and calls [`expire_with`]).
pub async fn expire(svc: &Services) -> Result<ExpiryOutput> {
    expire_with(&ExpiryDeps::from_services(svc)?).await
}

/// One expiry run over resolved dependencies.
pub async fn expire_with(svc: &ExpiryDeps) -> Result<ExpiryOutput> {
    let now = svc.clock.now();
    let buckets = expiry_buckets(now, &svc.config.time);
    let store = svc.aggregated.as_ref();
    let pending: Vec<Vec<AggregatedItem>> = futures::stream::iter(&buckets)
        .map(|b| store.pending(*b, None))
        .buffer_unordered(EXPIRY_CONCURRENCY)
        .try_collect()
        .await?;
    let mut out = ExpiryOutput {
        buckets: buckets.len(),
        ..Default::default()
    };
    for item in pending.into_iter().flatten() {
        if attempt_in_flight(&item, now) {
            // Marked by a submitter run that may still be running (the race at the window's
            // close): its answer decides, or, once the mark is older than any run, this sweep.
            out.records_attempt_in_flight += 1;
            tracing::info!(group = %item.group, attempted_at = ?item.submission_attempted_at, "attempt marked by a submitter run that may still be running; left to a later run");
            continue;
        }
        let outcome = expiry_write(&item);
        if !retry(&STORE_RETRY, || {
            store.write_back(&item.group, &outcome, now)
        })
        .await?
        {
            // Finalized, or an attempt marked, since it was read (a submitter run that chose it
            // before its hour left the window): its call may be billed, so the next run decides
            // again from what is on file then.
            out.records_changed_meanwhile += 1;
            tracing::info!(group = %item.group, status = %outcome.status, "record changed since expiry read it; not written, the next run decides again");
            continue;
        }
        if outcome.status == AggregatedStatus::NeedsReconciliation {
            out.records_unresolved += 1;
            out.quantity_unresolved += item.quantity;
            tracing::error!(group = %item.group, quantity = item.quantity, attempted = ?item.attempted_quantity, "window closed with an unresolved BatchMeterUsage attempt: possibly billed, reconcile");
            svc.metrics
                .emit(Metric::count(metrics::USAGE_NEEDS_RECONCILIATION));
        } else {
            out.records_expired += 1;
            out.quantity_expired += item.quantity;
            tracing::error!(group = %item.group, quantity = item.quantity, "aggregated usage expired before submission");
            svc.metrics
                .emit(Metric::count(metrics::USAGE_SUBMISSION_EXPIRED));
        }
    }
    Ok(out)
}

/// Whether `item`'s attempt mark may belong to a submitter run still in flight at `now`
/// ([`ATTEMPT_IN_FLIGHT_SECS`]). A mark without its time (written before it existed) is not.
fn attempt_in_flight(item: &AggregatedItem, now: chrono::DateTime<chrono::Utc>) -> bool {
    !awsmp_aws::mutants::active(awsmp_aws::mutants::Mutant::ExpiryDecidesInFlight)
        && item.attempted_quantity.is_some()
        && item
            .submission_attempted_at
            .is_some_and(|at| now - at < chrono::Duration::seconds(ATTEMPT_IN_FLIGHT_SECS))
}

/// What expiry writes for `item`, conditioned on the attempt mark it read: `SubmissionExpired`
/// only while no attempt is on file, `NeedsReconciliation` only while exactly the attempt it read
/// is. A submitter run that marked (and so may have sent) the record since makes the write fail
/// instead of overwriting a call AWS may have billed.
fn expiry_write(item: &AggregatedItem) -> WriteBack {
    let ignores_attempts =
        awsmp_aws::mutants::active(awsmp_aws::mutants::Mutant::ExpiryIgnoresAttempts);
    let pending_only =
        awsmp_aws::mutants::active(awsmp_aws::mutants::Mutant::ExpiryWritePendingOnly);
    if let Some(attempt) = item.attempt().filter(|_| !ignores_attempts)
        && let Decision::Finalize(f) = needs_reconciliation_decision(attempt.quantity)
    {
        return WriteBack {
            status: f.status,
            reason: f.reason,
            metering_record_id: None,
            ttl: None,
            if_attempt: if pending_only {
                AttemptCondition::Any
            } else {
                AttemptCondition::Exactly(attempt)
            },
        };
    }
    WriteBack {
        status: AggregatedStatus::SubmissionExpired,
        reason: Some(PENDING_PAST_BILLABLE_WINDOW.into()),
        metering_record_id: None,
        ttl: None,
        // The mutant ignores attempts altogether: its write lands whatever is on file.
        if_attempt: if ignores_attempts || pending_only {
            AttemptCondition::Any
        } else {
            AttemptCondition::NoAttempt
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The in-flight window is the submitter's Lambda timeout as deployed plus a minute: a
    /// shorter one decides marks a running invocation may still answer, a longer one holds
    /// records past any run (cargo-mutants' `300 - 60` and `300 * 60` on the constant).
    #[test]
    fn an_attempt_is_in_flight_for_the_submitters_timeout_and_a_minute() {
        let submitter = awsmp_contract::stages::named("submitter");
        assert_eq!(ATTEMPT_IN_FLIGHT_SECS, i64::from(submitter.timeout) + 60);
    }
}
