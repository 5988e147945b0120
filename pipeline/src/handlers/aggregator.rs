//! The aggregator: fold one group-hour, validate it, and commit it to aggregated-usage with a
//! conditional put (the commit point); or reject it client-side with a reason; or, on a
//! re-visit of an already-committed group, finish a lost cleanup and surface late rows.

use super::cleanup::{CleanupMessage, report_late};
use super::deps::AggregatorDeps;
use super::{STORE_RETRY, Services};
use crate::domain::fold::{
    AggregatedRecord, FoldOutcome, GroupFold, Rejection, RevisitRow, SecondQuantities, SecondSet,
    UsageRow, classify_revisit, folded_second,
};
use crate::error::{PipelineError, Result};
use crate::ports::{AggregatedItem, FoldedFinalize};
use awsmp_aws::emf::Metric;
use awsmp_aws::retry;
use awsmp_contract::DomainError;
use awsmp_contract::keys::{GroupKey, Identity, RowKey};
use awsmp_contract::metrics;
use awsmp_contract::reasons::{LATE_USAGE, QUANTITY_ABOVE_API_MAXIMUM};
use awsmp_contract::status::{RawStatus, aggregated_reason};
use chrono::{DateTime, Utc};
use serde::Serialize;

/// What one work message led to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
pub enum AggregateOutcome {
    /// Fresh aggregated record written; cleanup enqueued.
    Committed {
        /// Summed quantity.
        quantity: u64,
        /// Rows folded.
        rows: u32,
    },
    /// The group was rejected client-side.
    Rejected {
        /// Reason code.
        reason: String,
        /// Rows stamped.
        rows: usize,
    },
    /// The record already existed: lost cleanups finished, late rows surfaced.
    Revisited {
        /// Rows whose cleanup had been lost.
        cleaned: usize,
        /// Rows written after aggregation, and folded rows that grew after the fold.
        late_rows: usize,
        /// Quantity the late rows carried (for a grown row: the exact difference).
        late_quantity: u64,
    },
    /// No pending rows.
    Empty,
    /// Zero-sum group left pending until the oldest processed edge.
    DeferredZero,
}

/// Process one work message (one group), resolving the aggregator's dependencies from `svc`
/// (a process resolves them once, at start, and calls [`aggregate_with`]).
pub async fn aggregate(svc: &Services, body: &str) -> Result<AggregateOutcome> {
    aggregate_with(&AggregatorDeps::from_services(svc)?, body).await
}

/// Process one work message (one group).
pub async fn aggregate_with(svc: &AggregatorDeps, body: &str) -> Result<AggregateOutcome> {
    let group = GroupKey::from_work_message(body)?;
    let now = svc.clock.now();
    if let Some(existing) = svc.aggregated.get(&group).await? {
        return revisit(svc, &group, &existing).await;
    }
    match fold_pending_rows(svc, &group, now).await? {
        FoldOutcome::Valid(rec) => commit(svc, &group, &rec, now).await,
        FoldOutcome::Rejected(rej) => reject(svc, &group, &rej, now).await,
        FoldOutcome::Empty => Ok(AggregateOutcome::Empty),
        FoldOutcome::DeferredZero { .. } => Ok(AggregateOutcome::DeferredZero),
    }
}

/// Fold every pending row of `group`, streamed page by page.
async fn fold_pending_rows(
    svc: &AggregatorDeps,
    group: &GroupKey,
    now: DateTime<Utc>,
) -> Result<FoldOutcome> {
    let mut fold = GroupFold::new(group.clone(), now, &svc.config.time);
    let mut fold_error: Option<DomainError> = None;
    svc.usage
        .read_pending_rows(group, &mut |row: UsageRow| {
            if fold_error.is_none()
                && let Err(e) = fold.push_row(&row)
            {
                fold_error = Some(e);
            }
        })
        .await?;
    match fold_error {
        Some(e) => Err(e.into()),
        None => Ok(fold.finish()),
    }
}

/// The commit point: put the aggregated record unless the group already has one, then
/// enqueue the cleanup of its rows.
async fn commit(
    svc: &AggregatorDeps,
    group: &GroupKey,
    rec: &AggregatedRecord,
    now: DateTime<Utc>,
) -> Result<AggregateOutcome> {
    let mut item = AggregatedItem::new(rec.group.clone(), rec.quantity, rec.allocations.clone());
    item.row_count = rec.row_count;
    item.contributed_seconds = rec.seconds.to_bytes();
    item.contributed_quantities = rec.quantities.to_bytes(&rec.seconds);
    item.overflow = rec.overflow.clone();
    if let Identity::Legacy {
        customer_identifier,
        ..
    } = rec.identity()
    {
        item.customer_identifier = Some(customer_identifier.to_owned());
    }
    if !svc.aggregated.put_if_absent(&item, now).await? {
        // Someone committed this group between our read and our put.
        let existing =
            svc.aggregated
                .get(group)
                .await?
                .ok_or_else(|| PipelineError::MalformedItem {
                    table: svc.config.aggregated_table.clone(),
                    detail: format!("{group}: conditional put failed but no record exists"),
                })?;
        return revisit(svc, group, &existing).await;
    }
    if let Some(over) = &rec.overflow {
        tracing::error!(%group, billed = rec.quantity, remainder = over.quantity, reason = QUANTITY_ABOVE_API_MAXIMUM, "group-hour above the BatchMeterUsage Quantity maximum; the remainder is recorded, not billed");
        svc.metrics.emit(
            Metric::counts(metrics::USAGE_QUANTITY_ABOVE_API_MAXIMUM, over.quantity)
                .with(metrics::REASON, QUANTITY_ABOVE_API_MAXIMUM),
        );
    }
    // Only a fresh write enqueues cleanup. If this send fails, the message is retried; the
    // re-visit then finds the committed record and finishes the cleanup itself.
    let rows: Vec<(RowKey, u64)> = rec.raw_row_keys().zip(rec.raw_row_quantities()).collect();
    let reason = rec.raw_status_reason();
    svc.cleanup_queue
        .send_all(&CleanupMessage::folded_batches(&reason, &rows))
        .await?;
    Ok(AggregateOutcome::Committed {
        quantity: rec.quantity,
        rows: rec.row_count,
    })
}

/// Reject the group client-side: stamp every one of its pending rows with the reason.
async fn reject(
    svc: &AggregatorDeps,
    group: &GroupKey,
    rej: &Rejection,
    now: DateTime<Utc>,
) -> Result<AggregateOutcome> {
    let reason = rej.reason.as_str();
    tracing::warn!(%group, reason, detail = %rej.detail, row = ?rej.row_key, "group rejected client-side");
    let usage = svc.usage.as_ref();
    let mut rows = 0;
    for key in rej.rows.row_keys() {
        if retry(&STORE_RETRY, || {
            usage.finalize_row(&key, Some((RawStatus::RejectedClientSide, reason)), now)
        })
        .await?
        {
            rows += 1;
        }
    }
    svc.metrics
        .emit(Metric::count(metrics::USAGE_RECORD_REJECTED).with(metrics::REASON, reason));
    Ok(AggregateOutcome::Rejected {
        reason: reason.to_owned(),
        rows,
    })
}

/// The group already has its aggregated record: rows it folded in whose cleanup was lost are
/// finalized `Aggregated` with the committed record's own (authoritative) sum — conditioned on
/// the quantity folded from each, when the record stores them, so what a row gained after the
/// fold is late usage with its exact quantity; rows written after aggregation are terminal late
/// usage, never silently re-opened. A record without stored quantities (written by an older
/// version) has its folded rows stamped by key, as before.
async fn revisit(
    svc: &AggregatorDeps,
    group: &GroupKey,
    existing: &AggregatedItem,
) -> Result<AggregateOutcome> {
    let stored = SecondSet::from_bytes(&existing.contributed_seconds)?;
    let folded = (!existing.contributed_quantities.is_empty())
        .then(|| SecondQuantities::from_bytes(&existing.contributed_quantities, &stored))
        .transpose()?;
    let now = svc.clock.now();
    let mut rows = Vec::new();
    let usage = svc.usage.as_ref();
    usage
        .read_pending_rows(group, &mut |row| {
            rows.push(classify_revisit(group, &stored, &row.into_raw(group)))
        })
        .await?;
    let committed_reason = aggregated_reason(existing.quantity, existing.row_count);
    let (mut cleaned, mut late_rows, mut late_quantity) = (0, 0, 0);
    for row in rows {
        match row {
            RevisitRow::NotPending | RevisitRow::Foreign => {}
            RevisitRow::AlreadyAggregated(_)
                if awsmp_aws::mutants::active(
                    awsmp_aws::mutants::Mutant::RevisitDropsContributions,
                ) => {}
            RevisitRow::AlreadyAggregated(key) => {
                let folded_q = folded
                    .as_ref()
                    .zip(folded_second(group, &key))
                    .map(|(f, second)| f.get(second));
                match finish_folded(svc, &key, folded_q, &committed_reason, now).await? {
                    FoldedFinalize::Gone => {}
                    FoldedFinalize::Stamped => cleaned += 1,
                    FoldedFinalize::Late {
                        quantity,
                        recorded_now,
                    } => {
                        cleaned += 1;
                        if recorded_now {
                            late_rows += 1;
                            late_quantity += quantity;
                            report_late(&svc.metrics, &key, quantity);
                        }
                    }
                }
            }
            RevisitRow::Late(late) => {
                if retry(&STORE_RETRY, || {
                    usage.finalize_row(
                        &late.row_key,
                        Some((RawStatus::RejectedClientSide, LATE_USAGE)),
                        now,
                    )
                })
                .await?
                {
                    late_rows += 1;
                    late_quantity += late.quantity.unwrap_or(0);
                    tracing::error!(%group, row = %late.row_key.sort_key, quantity = ?late.quantity, "late usage after the group-hour was aggregated; not billed");
                    svc.metrics.emit(Metric::counts(
                        metrics::LATE_USAGE,
                        late.quantity.unwrap_or(0),
                    ));
                }
            }
        }
    }
    Ok(AggregateOutcome::Revisited {
        cleaned,
        late_rows,
        late_quantity,
    })
}

/// Finish the lost cleanup of one folded row: conditioned on its folded quantity when known,
/// by key otherwise (a record of an older version).
async fn finish_folded(
    svc: &AggregatorDeps,
    key: &RowKey,
    folded: Option<u64>,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<FoldedFinalize> {
    let usage = svc.usage.as_ref();
    match folded {
        Some(q) => retry(&STORE_RETRY, || usage.finalize_folded(key, q, reason, now)).await,
        None => {
            let stamp = Some((RawStatus::Aggregated, reason));
            Ok(
                if retry(&STORE_RETRY, || usage.finalize_row(key, stamp, now)).await? {
                    FoldedFinalize::Stamped
                } else {
                    FoldedFinalize::Gone
                },
            )
        }
    }
}
