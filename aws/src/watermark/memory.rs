//! The in-memory twin of the ingest-watermark table.

use super::{ShardWatermark, WatermarkStore};
use crate::error::Result;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

/// Watermarks by stream (the partition) and shard id; `advance` never moves one backwards,
/// like the DynamoDB adapter's conditional update.
#[derive(Debug, Default)]
pub struct MemoryWatermarkStore {
    shards: Mutex<BTreeMap<(String, String), ShardWatermark>>,
}

impl MemoryWatermarkStore {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }
}

fn at(stream: &str, shard_id: &str, applied_through: DateTime<Utc>) -> ShardWatermark {
    ShardWatermark {
        stream: stream.to_owned(),
        shard_id: shard_id.to_owned(),
        applied_through,
        drained: false,
    }
}

#[async_trait]
impl WatermarkStore for MemoryWatermarkStore {
    async fn advance(&self, stream: &str, shard_id: &str, arrival: DateTime<Utc>) -> Result<bool> {
        let mut shards = lock(&self.shards);
        let key = (stream.to_owned(), shard_id.to_owned());
        match shards.get_mut(&key) {
            Some(w) if w.applied_through >= arrival => Ok(false),
            Some(w) => {
                w.applied_through = arrival;
                Ok(true)
            }
            None => {
                shards.insert(key, at(stream, shard_id, arrival));
                Ok(true)
            }
        }
    }

    async fn mark_drained(&self, stream: &str, shard_id: &str) -> Result<()> {
        let mut shards = lock(&self.shards);
        let w = shards
            .entry((stream.to_owned(), shard_id.to_owned()))
            .or_insert_with(|| at(stream, shard_id, DateTime::<Utc>::UNIX_EPOCH));
        w.drained = true;
        Ok(())
    }

    async fn shards(&self, stream: &str) -> Result<Vec<ShardWatermark>> {
        Ok(lock(&self.shards)
            .values()
            .filter(|w| w.stream == stream)
            .cloned()
            .collect())
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
