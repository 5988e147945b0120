//! Step 3: record the refused events of the records before the cut — malformed stream
//! records and the user records decode or verification refused — as rejected events
//! (idempotent puts keyed by stream position), with an `EventRejected` metric each. The puts
//! run beside the row writes (`mod.rs`): neither decides the other, and a failed put fails its
//! record either way, before the watermark is published.

use aws_lambda_events::event::kinesis::KinesisEventRecord;
use awsmp_aws::emf::Metric;
use awsmp_contract::{metrics, reasons};
use base64::Engine;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use std::time::{Duration, Instant};

use super::decode::stream_name;
use super::{Batch, Consumer, MAX_INLINE_REJECTED_BYTES};
use crate::domain::record::{RefusedItem, StreamRecord};
use crate::error::{ErrorChain, Result};
use crate::ports::RejectedEvent;

impl Consumer {
    /// Record `refusals` (idempotent puts, at most `Settings::concurrency` at once): each
    /// record index with its outcome, and how long it took.
    pub(super) async fn put_refusals(
        &self,
        refusals: &[(usize, RejectedEvent)],
    ) -> (Vec<(usize, Result<()>)>, Duration) {
        let started = Instant::now();
        let results = futures::stream::iter(refusals)
            .map(|(i, r)| async move { (*i, self.with_retry(|| self.rejected.put(r)).await) })
            .buffer_unordered(self.settings.concurrency)
            .collect()
            .await;
        (results, started.elapsed())
    }

    /// Count the refusals and emit their metrics; a record whose refusal could not be
    /// recorded fails.
    pub(super) fn apply_refusals(
        &self,
        batch: &mut Batch<'_>,
        refusals: &[(usize, RejectedEvent)],
        results: Vec<(usize, Result<()>)>,
    ) {
        for (_, r) in refusals {
            *batch.report.rejected.entry(r.reason.clone()).or_default() += 1;
        }
        for (i, res) in results {
            if let Err(e) = res {
                tracing::warn!(error = %ErrorChain(&e), "recording a rejected event failed; the batch resumes from its record");
                batch.fail_at(i);
            }
        }
        for (_, r) in refusals {
            self.metrics.emit(
                Metric::count(metrics::EVENT_REJECTED).with(metrics::REASON, r.reason.clone()),
            );
        }
    }

    /// The rejected events of the records before `cut`, with their record's index.
    pub(super) fn refusals(&self, batch: &Batch<'_>, cut: usize) -> Vec<(usize, RejectedEvent)> {
        let mut refusals = Vec::new();
        for (i, s) in batch.slots[..cut].iter().enumerate() {
            if s.duplicate {
                continue;
            }
            match (&s.record, &s.decoded) {
                (Err(why), _) => {
                    let record = &batch.event.records[i];
                    refusals.push((i, malformed_record(record, why, batch.now)));
                }
                (Ok(rec), Some(d)) => {
                    for item in &d.refused {
                        refusals.push((i, self.refused_event(rec, item, batch.now)));
                    }
                }
                (Ok(_), None) => {}
            }
        }
        refusals
    }

    /// The rejected event for a refused user record (or whole record) of `rec`.
    fn refused_event(
        &self,
        rec: &StreamRecord,
        item: &RefusedItem,
        now: DateTime<Utc>,
    ) -> RejectedEvent {
        let e = item.event.as_ref();
        RejectedEvent {
            record_key: match item.sub {
                Some(sub) => format!(
                    "{}/{}/{}/{sub}",
                    rec.stream, rec.shard_id, rec.sequence_number
                ),
                None => format!(
                    "{}/{}/{}/record",
                    rec.stream, rec.shard_id, rec.sequence_number
                ),
            },
            reason: item.reason.to_owned(),
            detail: item.detail.clone(),
            stream: rec.stream.clone(),
            shard_id: rec.shard_id.clone(),
            sequence_number: rec.sequence_number.decimal().to_owned(),
            sub_sequence_numbers: item.sub.into_iter().collect(),
            partition_key: rec.partition_key.clone(),
            arrival: rec.arrival,
            data_base64: inline_data(&item.data),
            data_len: item.data.len(),
            quantity: e.map(|e| e.quantity),
            event_id: e.map(|e| e.event_id.clone()),
            producer_id: e.and_then(|e| e.producer_id.clone()),
            license_arn: e.map(|e| e.license_arn.clone()),
            customer_aws_account_id: e.map(|e| e.customer_aws_account_id.clone()),
            dimension: e.map(|e| e.dimension.clone()),
            row_sort_key: None,
            rejected_at: now,
            ttl: self.rejected_ttl(now),
        }
    }
}

/// The refused bytes, base64, when small enough to store inline.
fn inline_data(data: &[u8]) -> Option<String> {
    (data.len() <= MAX_INLINE_REJECTED_BYTES)
        .then(|| base64::engine::general_purpose::STANDARD.encode(data))
}

/// The rejected event for a delivered record that is not a usable stream record.
fn malformed_record(r: &KinesisEventRecord, why: &str, now: DateTime<Utc>) -> RejectedEvent {
    let stream = stream_name(r.event_source_arn.as_deref());
    let data = &r.kinesis.data.0;
    RejectedEvent {
        record_key: format!(
            "{stream}/{}/record",
            r.event_id.as_deref().unwrap_or(&r.kinesis.sequence_number)
        ),
        reason: reasons::MALFORMED_STREAM_RECORD.to_owned(),
        detail: why.to_owned(),
        stream,
        shard_id: String::new(),
        sequence_number: r.kinesis.sequence_number.clone(),
        sub_sequence_numbers: Vec::new(),
        partition_key: r.kinesis.partition_key.clone(),
        arrival: r.kinesis.approximate_arrival_timestamp.0,
        data_base64: inline_data(data),
        data_len: data.len(),
        rejected_at: now,
        ..RejectedEvent::default()
    }
}
