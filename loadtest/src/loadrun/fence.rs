//! The ingest fence of a local run, as in AWS: the run's consumer publishes each shard's
//! watermark into the stack's ingest-watermark table (the run's stream is its own partition,
//! docs/row-contract.md, "Ingest watermarks"), a heartbeat marker goes into every open shard
//! while the producers run, and the pipeline's discoverer and deprovisioning flush fence on the
//! run's own stream (docs/guarantees.md, "the ingest watermark fences every hour").
//!
//! Watermarks are in arrival time — the emulator's real time — while the pipeline's clock may
//! run ahead of it (`--consumer-lag`), so an hour closes on the pipeline's clock while its usage
//! is still unconsumed: the fence holds it. Once production is done and the consumer has caught
//! up, no record can arrive any more, so the settling ticks advance the run's watermarks to the
//! pipeline's instant, as `awsmp-local run` does after draining to the tip
//! (docs/local-stack.md, "Ingest watermark").

use anyhow::{Context, Result};
use awsmp_aws::watermark::DynamoDbWatermarkStore;
use awsmp_aws::watermark::WatermarkStore;
use awsmp_local_stack::local::LocalEnv;
use chrono::{DateTime, Utc};
use std::sync::Arc;

/// The watermark table and the run's stream: the fence of a run is over the run's shards
/// only (the table also holds the stack's usage stream and earlier runs' streams, each in its
/// own partition).
pub(super) struct RunWatermarks {
    table: Arc<dyn WatermarkStore>,
    stream: String,
}

impl RunWatermarks {
    /// Over `table`, for `stream`'s shards.
    pub(super) fn new(table: Arc<dyn WatermarkStore>, stream: &str) -> Self {
        Self {
            table,
            stream: stream.to_owned(),
        }
    }

    /// The stack's watermark table for `stream`; `None` when the stack has none (no fence).
    pub(super) async fn of_stack(env: &LocalEnv, stream: &str) -> Result<Option<Arc<Self>>> {
        let Some(table) = env.vars.get("AWSMP_INGEST_WATERMARK_TABLE") else {
            return Ok(None);
        };
        let store = DynamoDbWatermarkStore::new(env.dynamodb().await?, table);
        Ok(Some(Arc::new(Self::new(Arc::new(store), stream))))
    }

    /// The table, for the discoverer's fence.
    pub(super) fn table(&self) -> Arc<dyn WatermarkStore> {
        self.table.clone()
    }

    /// The run's stream, the partition the fence reads.
    pub(super) fn stream(&self) -> &str {
        &self.stream
    }

    /// The stream is finished (production done, consumer caught up): every shard of it has
    /// applied everything that can ever arrive before `at`.
    pub(super) async fn finished_through(&self, at: DateTime<Utc>) -> Result<()> {
        let stream = self.stream.as_str();
        let shards = self.table.shards(stream).await;
        for shard in shards.context("the run's watermarks")? {
            if !shard.drained {
                self.table
                    .advance(stream, &shard.shard_id, at)
                    .await
                    .with_context(|| format!("watermark of {stream}/{}", shard.shard_id))?;
            }
        }
        Ok(())
    }

    /// The stream is gone: none of its shards may hold a fence any more.
    pub(super) async fn retire(&self) -> Result<()> {
        let stream = self.stream.as_str();
        let shards = self.table.shards(stream).await;
        for shard in shards.context("the run's watermarks")? {
            self.table
                .mark_drained(stream, &shard.shard_id)
                .await
                .with_context(|| format!("retiring {stream}/{}", shard.shard_id))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use awsmp_aws::watermark::MemoryWatermarkStore;
    use chrono::TimeZone;

    #[tokio::test]
    async fn a_run_advances_and_retires_only_its_own_stream() {
        let t = |m: u32| Utc.with_ymd_and_hms(2026, 11, 30, 13, m, 0).unwrap();
        let table = Arc::new(MemoryWatermarkStore::new());
        let shard = "shardId-000000000000";
        table.advance("run", shard, t(1)).await.unwrap();
        table.advance("usage", shard, t(2)).await.unwrap();
        let run = RunWatermarks::new(table.clone(), "run");
        assert_eq!(run.stream(), "run");
        run.finished_through(t(30)).await.unwrap();
        run.retire().await.unwrap();
        let ours = table.shards("run").await.unwrap();
        assert_eq!(ours.len(), 1);
        assert_eq!(
            (
                ours[0].shard_id.as_str(),
                ours[0].applied_through,
                ours[0].drained
            ),
            (shard, t(30), true)
        );
        let theirs = table.shards("usage").await.unwrap();
        assert_eq!(
            (theirs[0].applied_through, theirs[0].drained),
            (t(2), false)
        );
        // a drained shard is not advanced by a later finish
        run.finished_through(t(40)).await.unwrap();
        assert_eq!(table.shards("run").await.unwrap()[0].applied_through, t(30));
    }
}
