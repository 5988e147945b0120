//! The ingest fence of a local run, as in AWS: the run's consumer publishes each shard's
//! watermark into the stack's ingest-watermark table (keyed `{stream}/{shardId}`,
//! docs/row-contract.md, "Ingest watermarks"), a heartbeat marker goes into every open shard
//! while the producers run, and the pipeline's discoverer and deprovisioning flush fence on the
//! run's own shards (docs/guarantees.md, "the ingest watermark fences every hour").
//!
//! Watermarks are in arrival time — the emulator's real time — while the pipeline's clock may
//! run ahead of it (`--consumer-lag`), so an hour closes on the pipeline's clock while its usage
//! is still unconsumed: the fence holds it. Once production is done and the consumer has caught
//! up, no record can arrive any more, so the settling ticks advance the run's watermarks to the
//! pipeline's instant, as `awsmp-local run` does after draining to the tip
//! (docs/local-stack.md, "Ingest watermark").

use crate::local::LocalEnv;
use anyhow::{Context, Result};
use async_trait::async_trait;
use awsmp_pipeline::adapters::dynamodb::DynamoDbWatermarkStore;
use awsmp_pipeline::ports::{ShardWatermark, WatermarkStore};
use chrono::{DateTime, Utc};
use std::sync::Arc;

/// The watermark table seen through one stream: the fence of a run is over the run's shards
/// only (the table also holds the stack's usage stream and earlier runs' streams).
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

    /// The stream is finished (production done, consumer caught up): every shard of it has
    /// applied everything that can ever arrive before `at`.
    pub(super) async fn finished_through(&self, at: DateTime<Utc>) -> Result<()> {
        for shard in self.shards().await.context("the run's watermarks")? {
            if !shard.drained {
                self.advance(&shard.key(), at)
                    .await
                    .with_context(|| format!("watermark of {}", shard.key()))?;
            }
        }
        Ok(())
    }

    /// The stream is gone: none of its shards may hold a fence any more.
    pub(super) async fn retire(&self) -> Result<()> {
        for shard in self.shards().await.context("the run's watermarks")? {
            self.mark_drained(&shard.key())
                .await
                .with_context(|| format!("retiring {}", shard.key()))?;
        }
        Ok(())
    }
}

#[async_trait]
impl WatermarkStore for RunWatermarks {
    async fn advance(
        &self,
        shard_id: &str,
        arrival: DateTime<Utc>,
    ) -> awsmp_pipeline::Result<bool> {
        self.table.advance(shard_id, arrival).await
    }

    async fn mark_drained(&self, shard_id: &str) -> awsmp_pipeline::Result<()> {
        self.table.mark_drained(shard_id).await
    }

    async fn shards(&self) -> awsmp_pipeline::Result<Vec<ShardWatermark>> {
        let mut shards = self.table.shards().await?;
        shards.retain(|s| s.stream.as_deref() == Some(self.stream.as_str()));
        Ok(shards)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use awsmp_pipeline::adapters::memory::MemoryWatermarkStore;
    use awsmp_pipeline::contract::stream::watermark_key;
    use chrono::TimeZone;

    #[tokio::test]
    async fn a_run_sees_advances_and_retires_only_its_own_stream() {
        let t = |m: u32| Utc.with_ymd_and_hms(2026, 11, 30, 13, m, 0).unwrap();
        let table = Arc::new(MemoryWatermarkStore::new());
        let shard = "shardId-000000000000";
        table
            .advance(&watermark_key("run", shard), t(1))
            .await
            .unwrap();
        table
            .advance(&watermark_key("usage", shard), t(2))
            .await
            .unwrap();
        table.advance(shard, t(3)).await.unwrap();
        let run = RunWatermarks::new(table.clone(), "run");
        let mine = run.shards().await.unwrap();
        assert_eq!(mine.len(), 1);
        assert_eq!(
            (mine[0].stream.as_deref(), mine[0].shard_id.as_str()),
            (Some("run"), shard)
        );
        run.finished_through(t(30)).await.unwrap();
        run.retire().await.unwrap();
        let all = table.shards().await.unwrap();
        let of = |key: &str| all.iter().find(|s| s.key() == key).unwrap().clone();
        let ours = of(&watermark_key("run", shard));
        assert_eq!((ours.applied_through, ours.drained), (t(30), true));
        let theirs = of(&watermark_key("usage", shard));
        assert_eq!((theirs.applied_through, theirs.drained), (t(2), false));
        assert_eq!(of(shard).applied_through, t(3));
    }
}
