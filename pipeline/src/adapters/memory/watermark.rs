//! The in-memory twin of the ingest-watermark table.

use super::lock;
use crate::error::Result;
use crate::ports::{ShardWatermark, WatermarkStore};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Watermarks by key (`{stream}/{shardId}`); `advance` never moves one backwards, like the DynamoDB adapter's
/// conditional update.
#[derive(Debug, Default)]
pub struct MemoryWatermarkStore {
    shards: Mutex<BTreeMap<String, ShardWatermark>>,
}

impl MemoryWatermarkStore {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl WatermarkStore for MemoryWatermarkStore {
    async fn advance(&self, shard_id: &str, arrival: DateTime<Utc>) -> Result<bool> {
        let mut shards = lock(&self.shards);
        match shards.get_mut(shard_id) {
            Some(w) if w.applied_through >= arrival => Ok(false),
            Some(w) => {
                w.applied_through = arrival;
                Ok(true)
            }
            None => {
                shards.insert(
                    shard_id.to_owned(),
                    ShardWatermark::for_key(shard_id, arrival, false),
                );
                Ok(true)
            }
        }
    }

    async fn mark_drained(&self, shard_id: &str) -> Result<()> {
        let mut shards = lock(&self.shards);
        let w = shards.entry(shard_id.to_owned()).or_insert_with(|| {
            ShardWatermark::for_key(shard_id, DateTime::<Utc>::UNIX_EPOCH, false)
        });
        w.drained = true;
        Ok(())
    }

    async fn shards(&self) -> Result<Vec<ShardWatermark>> {
        Ok(lock(&self.shards).values().cloned().collect())
    }
}
