//! The consumer's and meter-ingest's ports under the fault plan, and the consumer's two plain
//! adapters over the pipeline's tables ([`ConsumerRows`], [`AggregatedFinalized`]).

use super::Faulty;
use async_trait::async_trait;
use awsmp_consumer::domain::dedup::LaneState;
use awsmp_consumer::domain::row::RowWrite;
use awsmp_consumer::ports::{
    ClaimOutcome, DedupClaim, DedupStore, FinalizedGroups, FirstSeen, LaneItem, RejectedEvent,
    RejectedEventStore, UsageRowWriter,
};
use awsmp_contract::keys::{GroupKey, RowKey};
use awsmp_contract::row::RawUsageRow;
use awsmp_meter_ingest::mapping::MappingEntry;
use awsmp_meter_ingest::ports::{
    Disposition, HeldEvent, HeldStore, MappingStore, RateCounter, UsageStream,
};
use awsmp_pipeline::adapters::memory::{MemoryAggregatedStore, MemoryUsageStore};
use awsmp_producer::sink::PutEntry;
use chrono::{DateTime, Utc};
use std::collections::HashSet;
use std::sync::Arc;

type CResult<T> = awsmp_consumer::error::Result<T>;
type IResult<T> = awsmp_meter_ingest::error::Result<T>;

/// The consumer's row writes, into the pipeline's raw usage table: a conditional write is
/// one read-apply-put with no await between, atomic on the single-threaded executor.
pub struct ConsumerRows {
    /// The shared table.
    pub table: Arc<MemoryUsageStore>,
}

#[async_trait]
impl UsageRowWriter for ConsumerRows {
    async fn read(&self, key: &RowKey) -> CResult<Option<RawUsageRow>> {
        Ok(self.table.row(key))
    }

    async fn write(&self, write: &RowWrite) -> CResult<bool> {
        Ok(match write.apply(self.table.row(&write.key).as_ref()) {
            Some(row) => self.table.put_row(row),
            None => false,
        })
    }
}

#[async_trait]
impl<T: UsageRowWriter + ?Sized> UsageRowWriter for Faulty<T> {
    async fn read(&self, key: &RowKey) -> CResult<Option<RawUsageRow>> {
        let call = self.inner.read(key);
        self.call("row-read", &key.sort_key, false, call).await
    }

    async fn write(&self, write: &RowWrite) -> CResult<bool> {
        let call = self.inner.write(write);
        self.call("row-write", &write.key.sort_key, true, call)
            .await
    }
}

#[async_trait]
impl<T: DedupStore + ?Sized> DedupStore for Faulty<T> {
    async fn claim(&self, claim: &DedupClaim) -> CResult<ClaimOutcome> {
        // A KPL record's key is the MD5 of its body, which holds generated ids (random epochs):
        // its stream position names it stably.
        let key = if claim.key.starts_with("kpl:") {
            format!("{}:{}", claim.shard_id, claim.sequence_number.decimal())
        } else {
            claim.key.clone()
        };
        let call = self.inner.claim(claim);
        self.call("claim", &key, true, call).await
    }

    async fn read_lane(&self, key: &str) -> CResult<Option<LaneItem>> {
        let call = self.inner.read_lane(key);
        self.call("read_lane", key, false, call).await
    }

    async fn write_lane(&self, item: &LaneItem, expected: Option<u64>) -> CResult<bool> {
        let call = self.inner.write_lane(item, expected);
        let written = self.call("write_lane", &item.key, true, call).await;
        // A lane written with ranges whose owner it forgot: its compaction ran.
        if written.as_ref().is_ok_and(|w| *w)
            && LaneState::decode(&item.state).is_ok_and(|l| l.forgotten() > 0)
        {
            self.ctx.faults.count("limit-dedup-compaction");
        }
        written
    }

    async fn first_seen(&self, seen: &FirstSeen) -> CResult<DateTime<Utc>> {
        let call = self.inner.first_seen(seen);
        self.call("first_seen", &seen.key, true, call).await
    }
}

#[async_trait]
impl<T: RejectedEventStore + ?Sized> RejectedEventStore for Faulty<T> {
    async fn put(&self, event: &RejectedEvent) -> CResult<()> {
        let call = self.inner.put(event);
        self.call("rejected-put", &event.record_key, true, call)
            .await
    }
}

/// Finalized group-hours: those with an aggregated record (what the DynamoDB adapter reads).
pub struct AggregatedFinalized {
    /// The aggregated table.
    pub table: Arc<MemoryAggregatedStore>,
}

#[async_trait]
impl FinalizedGroups for AggregatedFinalized {
    async fn finalized(&self, groups: &[GroupKey]) -> CResult<HashSet<GroupKey>> {
        Ok(groups
            .iter()
            .filter(|g| self.table.contains(g))
            .cloned()
            .collect())
    }
}

#[async_trait]
impl<T: FinalizedGroups + ?Sized> FinalizedGroups for Faulty<T> {
    async fn finalized(&self, groups: &[GroupKey]) -> CResult<HashSet<GroupKey>> {
        // Named by its least group, whatever order a caller lists them in.
        let key = groups
            .iter()
            .map(|g| g.to_string())
            .min()
            .unwrap_or_default();
        let call = self.inner.finalized(groups);
        self.call("finalized", &key, false, call).await
    }
}

#[async_trait]
impl<T: UsageStream + ?Sized> UsageStream for Faulty<T> {
    async fn put(&self, entries: Vec<PutEntry>) -> IResult<()> {
        let key = entries
            .first()
            .map(|e| format!("{}+{}", e.partition_key, entries.len()))
            .unwrap_or_default();
        let call = self.inner.put(entries);
        self.call("ingest-put-records", &key, true, call).await
    }
}

#[async_trait]
impl<T: MappingStore + ?Sized> MappingStore for Faulty<T> {
    async fn get(&self, invoked_arn: &str) -> IResult<Option<MappingEntry>> {
        let call = self.inner.get(invoked_arn);
        self.call("ingest-mapping-get", invoked_arn, false, call)
            .await
    }

    async fn put(&self, entry: &MappingEntry) -> IResult<()> {
        let call = self.inner.put(entry);
        self.call("ingest-mapping-put", &entry.invoked_arn, true, call)
            .await
    }
}

#[async_trait]
impl<T: RateCounter + ?Sized> RateCounter for Faulty<T> {
    async fn add(&self, key: &str, n: u64, expires_at: DateTime<Utc>) -> IResult<u64> {
        let call = self.inner.add(key, n, expires_at);
        self.call("ingest-rate-add", key, true, call).await
    }
}

#[async_trait]
impl<T: HeldStore + ?Sized> HeldStore for Faulty<T> {
    async fn put(&self, event: &HeldEvent) -> IResult<()> {
        let call = self.inner.put(event);
        self.call("ingest-held-put", &event.key, true, call).await
    }

    async fn list(&self, disposition: Disposition) -> IResult<Vec<HeldEvent>> {
        let call = self.inner.list(disposition);
        self.call("ingest-held-list", disposition.as_str(), false, call)
            .await
    }
}
