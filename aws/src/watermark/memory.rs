//! The in-memory twin of the ingest-watermark table: items as the DynamoDB adapter's updates
//! leave them, read back with its parser; `advance` decides by its condition.

use super::{
    ShardWatermark, WATERMARK_APPLIED_THROUGH, WATERMARK_DRAINED, WATERMARK_SHARD_ID,
    WATERMARK_STREAM, WatermarkStore, advance_condition, watermark_from_item,
};
use crate::dynamodb::to_sdk;
use crate::error::Result;
use async_trait::async_trait;
use awsmp_contract::condition::Item;
use awsmp_contract::row::AttrValue;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

/// Watermark items by stream (the partition) and shard id; `advance` never moves one
/// backwards: it evaluates the DynamoDB adapter's condition.
#[derive(Debug, Default)]
pub struct MemoryWatermarkStore {
    shards: Mutex<BTreeMap<(String, String), Item>>,
}

impl MemoryWatermarkStore {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }
}

/// The item an `UpdateItem` on a missing key starts from: its key.
fn key_item(stream: &str, shard_id: &str) -> Item {
    Item::from([
        (WATERMARK_STREAM.to_owned(), AttrValue::s(stream)),
        (WATERMARK_SHARD_ID.to_owned(), AttrValue::s(shard_id)),
    ])
}

#[async_trait]
impl WatermarkStore for MemoryWatermarkStore {
    async fn advance(&self, stream: &str, shard_id: &str, arrival: DateTime<Utc>) -> Result<bool> {
        let mut shards = lock(&self.shards);
        let key = (stream.to_owned(), shard_id.to_owned());
        if !advance_condition(arrival).holds_for(shards.get(&key)) {
            return Ok(false);
        }
        shards
            .entry(key)
            .or_insert_with(|| key_item(stream, shard_id))
            .insert(
                WATERMARK_APPLIED_THROUGH.to_owned(),
                AttrValue::N(arrival.timestamp_millis().to_string()),
            );
        Ok(true)
    }

    async fn mark_drained(&self, stream: &str, shard_id: &str) -> Result<()> {
        lock(&self.shards)
            .entry((stream.to_owned(), shard_id.to_owned()))
            .or_insert_with(|| key_item(stream, shard_id))
            .insert(WATERMARK_DRAINED.to_owned(), AttrValue::Bool(true));
        Ok(())
    }

    async fn shards(&self, stream: &str) -> Result<Vec<ShardWatermark>> {
        lock(&self.shards)
            .iter()
            .filter(|((s, _), _)| s == stream)
            .map(|(_, item)| {
                let sdk = item.iter().map(|(k, v)| (k.clone(), to_sdk(v))).collect();
                watermark_from_item("ingest-watermarks", &sdk)
            })
            .collect()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
