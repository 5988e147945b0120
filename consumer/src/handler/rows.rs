//! Step 5: look up which of the batch's group-hours are finalized, then per row decide
//! ([`resolve`]), record its late / rejected parts, and make one conditional write —
//! re-reading and deciding again when another writer moved the row first.

use std::collections::{BTreeSet, HashSet};

use awsmp_aws::emf::Metric;
use awsmp_contract::attrs::audit_timestamp;
use awsmp_contract::keys::GroupKey;
use awsmp_contract::{metrics, reasons};
use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt};

use super::decode::Slot;
use super::fold::Folded;
use super::{Batch, Consumer, MAX_ROW_CAS_ROUNDS};
use crate::domain::fold::RowContribution;
use crate::domain::row::{
    Decision, Observation, PartRejection, RecordMeta, Resolve, RowState, resolve, row_write,
};
use crate::domain::verify::Kind;
use crate::error::{ConsumerError, ErrorChain, Result};
use crate::ports::RejectedEvent;

/// What writing one row did.
struct RowOutcome {
    decision: Decision,
    written: bool,
    update_items: u64,
}

impl Consumer {
    /// Write every folded row; a row that cannot be written — its write failed, or whether its
    /// group-hour is finalized could not be looked up — fails from its own first record.
    pub(super) async fn write_rows(&self, batch: &mut Batch<'_>, folded: &Folded) {
        let rows = &folded.rows;
        // In key order, not a hash set's (seeded per set): the lookups after a failed one run
        // in this order, and a replay must make them in the same one.
        let groups: Vec<GroupKey> = rows
            .iter()
            .map(|r| r.id.group())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let lookup = std::time::Instant::now();
        let finalized = if groups.is_empty() {
            Ok(HashSet::new())
        } else {
            self.with_retry(|| self.finalized.finalized(&groups)).await
        };
        let (finalized, unknown) = match finalized {
            Ok(finalized) => (finalized, HashSet::new()),
            Err(e) => {
                // One group's lookup may fail the whole call (a key DynamoDB refuses): each
                // group alone, so only the rows of the groups that still fail are left, and the
                // batch resumes from their earliest record, not from its first.
                tracing::warn!(error = %ErrorChain(&e), "finalized-group lookup failed; looking up each group alone");
                self.finalized_each(groups).await
            }
        };
        batch.report.phases.finalized = lookup.elapsed();
        for row in rows.iter().filter(|r| unknown.contains(&r.id.group())) {
            batch.fail_at(row.first_record() as usize);
        }
        let (slots, metas, finalized, now) = (&batch.slots, &folded.metas, &finalized, batch.now);
        let outcomes: Vec<(usize, Result<RowOutcome>)> = futures::stream::iter(rows.iter())
            .filter(|row| std::future::ready(!unknown.contains(&row.id.group())))
            .map(|row| async move {
                let fin = finalized.contains(&row.id.group());
                (
                    row.first_record() as usize,
                    self.write_row(&row, metas, slots, fin, now).await,
                )
            })
            .buffer_unordered(self.settings.concurrency)
            .collect()
            .await;
        for (first, outcome) in outcomes {
            match outcome {
                Ok(o) => self.tally_row(batch, &o),
                Err(e) => {
                    tracing::warn!(error = %ErrorChain(&e), "row write failed; the batch resumes from its first record");
                    batch.fail_at(first);
                }
            }
        }
    }

    /// The finalized groups among `groups`, each looked up alone, and the groups whose lookup
    /// failed.
    async fn finalized_each(
        &self,
        groups: Vec<GroupKey>,
    ) -> (HashSet<GroupKey>, HashSet<GroupKey>) {
        let results: Vec<(GroupKey, Result<HashSet<GroupKey>>)> = futures::stream::iter(groups)
            .map(|g| async move {
                let one = std::slice::from_ref(&g);
                let r = self.with_retry(|| self.finalized.finalized(one)).await;
                (g, r)
            })
            .buffer_unordered(self.settings.concurrency)
            .collect()
            .await;
        let (mut finalized, mut unknown) = (HashSet::new(), HashSet::new());
        for (g, r) in results {
            match r {
                Ok(found) => finalized.extend(found),
                Err(e) => {
                    tracing::warn!(error = %ErrorChain(&e), group = ?g, "finalized-group lookup failed; the group's rows are left for the retry");
                    unknown.insert(g);
                }
            }
        }
        (finalized, unknown)
    }

    /// Add a written (or fully rejected) row to the report and the metrics.
    fn tally_row(&self, batch: &mut Batch<'_>, o: &RowOutcome) {
        let report = &mut batch.report;
        report.update_items += o.update_items;
        report.row_writes += u64::from(o.written);
        report.quantity_written += o.decision.accepted_quantity;
        report.replayed_parts += o.decision.applied.len() as u64;
        report.behind_watermark_parts += o.decision.behind_watermark;
        for rej in &o.decision.rejected {
            *report.rejected.entry(rej.reason.to_owned()).or_default() += 1;
            if rej.reason == reasons::LATE_USAGE {
                report.late_quantity += rej.quantity;
                self.metrics
                    .emit(Metric::counts(metrics::LATE_USAGE, rej.quantity));
            } else {
                self.metrics
                    .emit(Metric::count(metrics::EVENT_REJECTED).with(metrics::REASON, rej.reason));
            }
        }
    }

    /// Decide, record the rejected parts, write; on a failed condition re-read and repeat, at
    /// most [`MAX_ROW_CAS_ROUNDS`] times.
    async fn write_row(
        &self,
        row: &RowContribution<'_>,
        metas: &[RecordMeta],
        slots: &[Slot],
        finalized: bool,
        now: DateTime<Utc>,
    ) -> Result<RowOutcome> {
        let key = row.id.key();
        let mut state: Option<Option<RowState>> = None;
        let mut update_items = 0;
        for _ in 0..MAX_ROW_CAS_ROUNDS {
            let observation = match &state {
                None => Observation::Unknown,
                Some(None) => Observation::Absent,
                Some(Some(st)) => Observation::Present(st),
            };
            let decision = match resolve(row, metas, observation, finalized, self.settings.limits) {
                Resolve::NeedsRead => {
                    let read = self.with_retry(|| self.rows.read(&key)).await?;
                    state = Some(read.as_ref().map(RowState::from_row));
                    continue;
                }
                Resolve::Decided(d) => d,
            };
            // Rejections are recorded before the write that moves the watermark past them.
            let recs: Vec<RejectedEvent> = decision
                .rejected
                .iter()
                .map(|rej| self.row_rejection(row, rej, metas, slots, now))
                .collect();
            futures::stream::iter(&recs)
                .map(|r| self.with_retry(|| self.rejected.put(r)))
                .buffer_unordered(self.settings.concurrency)
                .try_collect::<Vec<()>>()
                .await?;
            let Some(plan) = decision.write.clone() else {
                return Ok(RowOutcome {
                    decision,
                    written: false,
                    update_items,
                });
            };
            let ttl = self.usage_ttl(row.id.instant());
            let write = row_write(row.id, plan, ttl, audit_timestamp(now));
            update_items += 1;
            if self.with_retry(|| self.rows.write(&write)).await? {
                return Ok(RowOutcome {
                    decision,
                    written: true,
                    update_items,
                });
            }
            let read = self.with_retry(|| self.rows.read(&key)).await?;
            state = Some(read.as_ref().map(RowState::from_row));
        }
        Err(ConsumerError::Contention {
            license_arn: key.license_arn,
            sort_key: key.sort_key,
        })
    }

    /// The rejected event for a part of `row` that is not written (late usage and the other
    /// row-level reasons).
    fn row_rejection(
        &self,
        row: &RowContribution<'_>,
        rej: &PartRejection,
        metas: &[RecordMeta],
        slots: &[Slot],
        now: DateTime<Utc>,
    ) -> RejectedEvent {
        let part = &row.parts[rej.part];
        let meta = &metas[part.record as usize];
        let rec = slots[part.record as usize].record.as_ref().ok();
        let kind = match rej.kind {
            None => "all",
            Some(Kind::Allocated) => "allocated",
            Some(Kind::Unallocated) => "unallocated",
        };
        let key = row.id.key();
        let stream = rec.map(|r| r.stream.clone()).unwrap_or_default();
        let shard = rec.map(|r| r.shard_id.clone()).unwrap_or_default();
        RejectedEvent {
            record_key: format!(
                "{stream}/{shard}/{}/row/{}/{}/{kind}",
                meta.seq, key.license_arn, key.sort_key
            ),
            reason: rej.reason.to_owned(),
            detail: format!(
                "{} units ({kind} usage) of {} events not written to the row",
                rej.quantity,
                part.subs.len()
            ),
            stream,
            shard_id: shard,
            sequence_number: meta.seq.decimal().to_owned(),
            sub_sequence_numbers: part.subs.to_vec(),
            partition_key: rec.map(|r| r.partition_key.clone()).unwrap_or_default(),
            arrival: rec.map_or(now, |r| r.arrival),
            data_base64: None,
            data_len: 0,
            quantity: Some(rej.quantity),
            event_id: None,
            producer_id: None,
            license_arn: Some(row.id.license_arn().to_owned()),
            customer_aws_account_id: Some(row.id.customer_aws_account_id().to_owned()),
            dimension: Some(row.id.dimension().to_owned()),
            row_sort_key: Some(key.sort_key),
            rejected_at: now,
            ttl: self.rejected_ttl(now),
        }
    }
}
