//! The in-memory twin of the ingest-watermark table: items as the DynamoDB adapter's updates
//! leave them (the same [`Update`] values applied), read back with its parser; `advance`
//! decides by its condition.

use super::{
    ShardWatermark, WATERMARK_SHARD_ID, WATERMARK_STREAM, WatermarkStore, advance_condition,
    advance_update, mark_drained_update, watermark_from_item,
};
use crate::dynamodb::to_sdk;
use crate::error::{Result, StoreError};
use async_trait::async_trait;
use awsmp_contract::condition::Item;
use awsmp_contract::row::AttrValue;
use awsmp_contract::update::Update;
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

const TABLE: &str = "ingest-watermarks";

/// Apply `update` to the item under `(stream, shard_id)`, created with its key where missing,
/// as `UpdateItem` does.
fn update_item(
    shards: &mut BTreeMap<(String, String), Item>,
    stream: &str,
    shard_id: &str,
    update: &Update,
) -> Result<()> {
    let item = shards
        .entry((stream.to_owned(), shard_id.to_owned()))
        .or_insert_with(|| key_item(stream, shard_id));
    update.apply(item).map_err(|e| StoreError::MalformedItem {
        table: TABLE.to_owned(),
        detail: e.to_string(),
    })
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
        update_item(&mut shards, stream, shard_id, &advance_update(arrival))?;
        Ok(true)
    }

    async fn mark_drained(&self, stream: &str, shard_id: &str) -> Result<()> {
        let mut shards = lock(&self.shards);
        update_item(&mut shards, stream, shard_id, &mark_drained_update())
    }

    async fn shards(&self, stream: &str) -> Result<Vec<ShardWatermark>> {
        lock(&self.shards)
            .iter()
            .filter(|((s, _), _)| s == stream)
            .map(|(_, item)| {
                let sdk = item.iter().map(|(k, v)| (k.clone(), to_sdk(v))).collect();
                watermark_from_item(TABLE, &sdk)
            })
            .collect()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
