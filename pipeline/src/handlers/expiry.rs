//! Submission expiry: terminally expire aggregated records that can no longer be billed
//! (outside the window, or previous-month after the grace), with no blind spot: every bucket
//! of a bounded lookback is checked each run, whatever empty stretches lie between.

use super::{STORE_RETRY, Services};
use crate::contract::metrics;
use crate::contract::reasons::PENDING_PAST_BILLABLE_WINDOW;
use crate::contract::status::AggregatedStatus;
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
}

/// Run one expiry sweep.
pub async fn expire(svc: &Services) -> Result<ExpiryOutput> {
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
    let outcome = WriteBack {
        status: AggregatedStatus::SubmissionExpired,
        reason: Some(PENDING_PAST_BILLABLE_WINDOW.into()),
        metering_record_id: None,
        ttl: None,
    };
    for item in pending.into_iter().flatten() {
        if retry(&STORE_RETRY, || {
            store.write_back(&item.group, &outcome, now)
        })
        .await?
        {
            out.records_expired += 1;
            out.quantity_expired += item.quantity;
            tracing::error!(group = %item.group, quantity = item.quantity, "aggregated usage expired before submission");
            svc.metrics
                .emit(Metric::count(metrics::USAGE_SUBMISSION_EXPIRED));
        }
    }
    Ok(out)
}
