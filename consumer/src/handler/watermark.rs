//! Step 7: the shard's ingest watermark. Once the batch's row writes succeeded, the highest
//! `approximateArrivalTimestamp` among the records before the first failure is published,
//! conditionally (never backwards), so the discoverer aggregates an hour only after every
//! shard was applied past it (docs/guarantees.md, "Ingest watermark"). The watermark is keyed
//! by stream (the partition) and shard (docs/row-contract.md, "Ingest watermarks").

use super::{Batch, Consumer, STORE_RETRY};

impl Consumer {
    /// Publish the watermark of the batch's shard. A failed publish only delays the fence (the
    /// next batch or heartbeat moves it), so it is logged, never a batch failure.
    pub(super) async fn publish_watermark(&self, batch: &Batch<'_>) {
        let Some(store) = self.watermarks.as_deref() else {
            return;
        };
        let applied = batch.failed.unwrap_or(batch.slots.len());
        let Some(record) = batch.slots[..applied]
            .iter()
            .filter_map(|s| s.record.as_ref().ok())
            .max_by_key(|r| r.arrival)
        else {
            return;
        };
        let (stream, shard, arrival) = (
            record.stream.as_str(),
            record.shard_id.as_str(),
            record.arrival,
        );
        if let Err(e) =
            awsmp_aws::retry(&STORE_RETRY, || store.advance(stream, shard, arrival)).await
        {
            tracing::warn!(
                error = &e as &dyn std::error::Error,
                stream,
                shard,
                "ingest watermark not published"
            );
        }
    }
}
