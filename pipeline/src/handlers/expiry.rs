//! Submission expiry: terminally expire aggregated records that can no longer be billed
//! (outside the window, or previous-month after the grace), with no blind spot: every bucket
//! of a bounded lookback is checked each run, whatever empty stretches lie between.
//!
//! A record with an attempt on file (`attemptedQuantity`: a call that may have been applied,
//! never answered) is not expired: AWS may have billed it. The submitter retries it on every
//! run while the window is open (an identical retry is answered `Success` with the same
//! `MeteringRecordId`); one still unresolved when the window closes becomes
//! `NeedsReconciliation` with the `UsageNeedsReconciliation` metric (docs/guarantees.md).

use super::deps::ExpiryDeps;
use super::{STORE_RETRY, Services};
use crate::contract::metrics;
use crate::contract::reasons::PENDING_PAST_BILLABLE_WINDOW;
use crate::contract::status::AggregatedStatus;
use crate::domain::results::{Decision, needs_reconciliation_decision};
use crate::domain::time::expiry_buckets;
use crate::emf::Metric;
use crate::error::Result;
use crate::ports::{AggregatedItem, WriteBack};
use awsmp_retry::retry;
use futures::{StreamExt, TryStreamExt};
use serde::Serialize;

/// Buckets queried at once.
const EXPIRY_CONCURRENCY: usize = 8;

/// What one run did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
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
    let expired = WriteBack {
        status: AggregatedStatus::SubmissionExpired,
        reason: Some(PENDING_PAST_BILLABLE_WINDOW.into()),
        metering_record_id: None,
        ttl: None,
    };
    for item in pending.into_iter().flatten() {
        let outcome = match item
            .attempted_quantity
            .filter(|_| !crate::mutants::active(crate::mutants::Mutant::ExpiryIgnoresAttempts))
            .map(needs_reconciliation_decision)
        {
            Some(Decision::Finalize(f)) => WriteBack {
                status: f.status,
                reason: f.reason,
                metering_record_id: None,
                ttl: None,
            },
            _ => expired.clone(),
        };
        if !retry(&STORE_RETRY, || {
            store.write_back(&item.group, &outcome, now)
        })
        .await?
        {
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
