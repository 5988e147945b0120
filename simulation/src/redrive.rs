//! The operator's re-drive from the consumer's on-failure destination (docs/operations.md,
//! "Re-driving the consumer's on-failure queue"): for each message, read the shard's records
//! from `startSequenceNumber` to `endSequenceNumber` (in AWS: `GetShardIterator`
//! `AT_SEQUENCE_NUMBER`, then `GetRecords`), invoke the consumer with them as the mapping
//! would, and delete the message once the invocation succeeded. The consumer's dedup and each
//! row's spans make a re-drive of records it had partly applied safe, also when later records
//! of the same lanes wrote the same rows meanwhile (docs/guarantees.md, "Consumer: per-row,
//! per-lane coverage"); records whose hour was finalized meanwhile are refused as `LateUsage`,
//! each with its reason in the rejected-events store.

use crate::destination::{InvocationRecord, KinesisBatchInfo};
use crate::esm::delivered;
use crate::world::{World, lock};
use aws_lambda_events::event::kinesis::KinesisEvent;
use std::collections::BTreeMap;

/// Units per (license, account, dimension).
type Units = BTreeMap<(String, String, String), u64>;

impl World {
    /// The records of `batch`, as the mapping delivers them.
    fn records_of(&self, batch: &KinesisBatchInfo) -> Option<KinesisEvent> {
        let start: u128 = batch.start_sequence_number.parse().ok()?;
        let end: u128 = batch.end_sequence_number.parse().ok()?;
        let records = self.stream.with_shards(|shards| {
            let shard = shards.iter().find(|s| s.id == batch.shard_id)?;
            let recs: Vec<_> = shard
                .records
                .iter()
                .filter(|r| (start..=end).contains(&r.sequence_number))
                .map(|r| delivered(&shard.id, r))
                .collect();
            Some(recs)
        })?;
        let mut event = KinesisEvent::default();
        event.records = records;
        Some(event)
    }

    /// Re-drive every message of the destination; a message whose invocation fails stays for
    /// the next run. The messages re-driven.
    pub async fn redrive_failures(&self) -> usize {
        let mut done = 0;
        loop {
            let next = lock(&self.esm).destination.receive();
            let Some(body) = next else {
                break;
            };
            let parsed = serde_json::from_str::<InvocationRecord>(&body);
            let Some((record, event)) = parsed
                .ok()
                .and_then(|r| self.records_of(&r.kinesis_batch_info).map(|e| (r, e)))
            else {
                // Kept: the invariants report a message that could not be re-driven.
                lock(&self.esm).destination.put_back(body);
                self.log("operator: re-drive: a message names no records of the stream");
                break;
            };
            self.faults
                .begin(crate::stages::Step::ConsumerBatch.timeout());
            let (response, report) = self.consumer.process(event.clone()).await;
            let crashed = self.faults.end();
            let info = &record.kinesis_batch_info;
            if crashed || !response.batch_item_failures.is_empty() {
                // Its records are behind the lane's watermark: it may hold any hour back.
                crate::causes::note_failure(
                    self,
                    crate::stages::Step::ConsumerBatch,
                    crate::causes::Held::Every,
                );
                lock(&self.esm).destination.put_back(body);
                self.log(format!(
                    "operator: re-drive of {} {}..{} failed; kept",
                    info.shard_id, info.start_sequence_number, info.end_sequence_number
                ));
                break;
            }
            // Usage that reached the destination may end late, reported with its reason.
            let units = units_of(&event);
            let mut truth = lock(&self.truth);
            for (group, q) in units {
                *truth.late.entry(group).or_default() += q;
            }
            drop(truth);
            self.log(format!(
                "operator: re-drove {} {}..{} ({} records): {} events, +{} units ({} row parts behind their lane's watermark), {} dedup hits, rejected {:?}",
                info.shard_id,
                info.start_sequence_number,
                info.end_sequence_number,
                report.records,
                report.events_accepted,
                report.quantity_written,
                report.behind_watermark_parts,
                report.dedup_hits,
                report.rejected
            ));
            let mut esm = lock(&self.esm);
            *esm.stats.entry("batches-redriven").or_default() += 1;
            esm.destination.redriven.push(record);
            drop(esm);
            done += 1;
        }
        done
    }
}

/// The units of every event in `event`'s records (heartbeats and bad bytes have none).
fn units_of(event: &KinesisEvent) -> Units {
    let mut out = Units::new();
    for r in &event.records {
        let Ok(users) = awsmp_contract::wire::decode_events(&r.kinesis.data.0) else {
            continue;
        };
        for e in users.into_iter().filter_map(|u| u.event.ok()) {
            *out.entry((e.license_arn, e.customer_aws_account_id, e.dimension))
                .or_default() += e.quantity;
        }
    }
    out
}
