//! The ingest-watermark table (`awsmp-ingest-watermarks`, `infra/resources.json`): one item per
//! shard, one partition per stream — hash key `stream`, range key `shardId` — holding
//! `appliedThrough` (epoch milliseconds) and `drained` (docs/row-contract.md, "Ingest
//! watermarks"). A stream's watermarks are read with one paginated, strongly consistent
//! `Query` on its partition: no `Scan`. The consumer writes it, the discoverer (its fence) and
//! the stream heartbeat read it, so the port and both adapters live here, once.

use crate::dynamodb::{WithUpdate, ddb_err, is_conditional_failure, malformed, query_all, s};
use crate::error::Result;
use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use awsmp_contract::condition::{Attr, Condition, Value};
use awsmp_contract::row::AttrValue;
use awsmp_contract::update::Update;
use chrono::{DateTime, Utc};
use std::collections::HashMap;

mod memory;
pub use memory::MemoryWatermarkStore;

/// How far the consumer has applied one shard of the usage stream (docs/guarantees.md,
/// "Ingest watermark").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardWatermark {
    /// The stream the shard belongs to (the table's hash key, docs/row-contract.md, "Ingest
    /// watermarks").
    pub stream: String,
    /// The shard id, e.g. `shardId-000000000000` (the table's range key).
    pub shard_id: String,
    /// The highest `approximateArrivalTimestamp` whose rows were written (or whose heartbeat
    /// marker was seen).
    pub applied_through: DateTime<Utc>,
    /// The shard is closed (resharding) and the consumer reached its end: it no longer holds
    /// the fence back.
    pub drained: bool,
}

/// The ingest-watermark table: one item per shard, one partition per stream (hash key
/// `stream`, range key `shardId`). The consumer writes, the discoverer and the stream
/// heartbeat read one stream's partition.
#[async_trait]
pub trait WatermarkStore: Send + Sync {
    /// Move the watermark of `stream`'s shard `shard_id` to `arrival`, never backwards (a
    /// conditional write). True when it moved; false when it was already at or past `arrival`.
    async fn advance(&self, stream: &str, shard_id: &str, arrival: DateTime<Utc>) -> Result<bool>;
    /// Record that `stream`'s closed shard `shard_id` was read to its end.
    async fn mark_drained(&self, stream: &str, shard_id: &str) -> Result<()>;
    /// The watermark of every shard of `stream` that has one (a strongly consistent read).
    async fn shards(&self, stream: &str) -> Result<Vec<ShardWatermark>>;
}

/// Hash key: the stream's name.
pub const WATERMARK_STREAM: &str = "stream";
/// Range key: the shard id, e.g. `shardId-000000000000`.
pub const WATERMARK_SHARD_ID: &str = "shardId";
/// Highest applied arrival time, epoch milliseconds.
pub const WATERMARK_APPLIED_THROUGH: &str = "appliedThrough";
/// The closed shard was read to its end.
pub const WATERMARK_DRAINED: &str = "drained";

/// The ingest-watermark table over DynamoDB.
#[derive(Debug, Clone)]
pub struct DynamoDbWatermarkStore {
    client: Client,
    table: String,
}

impl DynamoDbWatermarkStore {
    /// Over `table`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }

    fn key(stream: &str, shard_id: &str) -> HashMap<String, AttributeValue> {
        HashMap::from([
            (WATERMARK_STREAM.to_owned(), s(stream)),
            (WATERMARK_SHARD_ID.to_owned(), s(shard_id)),
        ])
    }
}

#[async_trait]
impl WatermarkStore for DynamoDbWatermarkStore {
    async fn advance(&self, stream: &str, shard_id: &str, arrival: DateTime<Utc>) -> Result<bool> {
        let r = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(stream, shard_id)))
            // The condition names `#t` and `:t`; the update sets the same.
            .with_update(&advance_update(arrival), &advance_condition(arrival))
            .send()
            .await;
        match r {
            Ok(_) => Ok(true),
            Err(e) if is_conditional_failure(&e) => Ok(false),
            Err(e) => Err(ddb_err("UpdateItem", &self.table, e)),
        }
    }

    async fn mark_drained(&self, stream: &str, shard_id: &str) -> Result<()> {
        self.client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(stream, shard_id)))
            .with_unconditional_update(&mark_drained_update())
            .send()
            .await
            .map_err(|e| ddb_err("UpdateItem", &self.table, e))?;
        Ok(())
    }

    async fn shards(&self, stream: &str) -> Result<Vec<ShardWatermark>> {
        let query = self
            .client
            .query()
            .table_name(&self.table)
            .consistent_read(true)
            .key_condition_expression("#s = :s")
            .expression_attribute_names("#s", WATERMARK_STREAM)
            .expression_attribute_values(":s", s(stream));
        let items = query_all(query, &self.table).await?;
        items
            .iter()
            .map(|item| watermark_from_item(&self.table, item))
            .collect()
    }
}

fn applied_through() -> Attr {
    Attr::token("#t", WATERMARK_APPLIED_THROUGH)
}

fn arrival_value(arrival: DateTime<Utc>) -> Value {
    Value::n(":t", arrival.timestamp_millis())
}

/// An advance's condition: no watermark yet, or one below `arrival` (never backwards).
pub fn advance_condition(arrival: DateTime<Utc>) -> Condition {
    Condition::not_exists(applied_through())
        .or(Condition::lt(applied_through(), arrival_value(arrival)))
}

/// An advance's update: the watermark at `arrival` (epoch milliseconds; on a shard without an
/// item, `UpdateItem` creates it).
pub fn advance_update(arrival: DateTime<Utc>) -> Update {
    Update::new().set(applied_through(), arrival_value(arrival))
}

/// A drained shard's update (unconditional).
pub fn mark_drained_update() -> Update {
    Update::new().set(
        Attr::token("#d", WATERMARK_DRAINED),
        Value::new(":d", AttrValue::Bool(true)),
    )
}

/// One watermark item in domain form; a drained shard may have no `appliedThrough` yet.
fn watermark_from_item(
    table: &str,
    item: &HashMap<String, AttributeValue>,
) -> Result<ShardWatermark> {
    let text = |attr: &str| {
        item.get(attr)
            .and_then(|v| v.as_s().ok())
            .ok_or_else(|| malformed(table, format!("watermark item without {attr}")))
    };
    let (stream, shard_id) = (text(WATERMARK_STREAM)?, text(WATERMARK_SHARD_ID)?);
    let millis = match item.get(WATERMARK_APPLIED_THROUGH) {
        None => 0,
        Some(v) => v
            .as_n()
            .ok()
            .and_then(|t| t.parse::<i64>().ok())
            .ok_or_else(|| {
                malformed(table, format!("bad appliedThrough of {stream}/{shard_id}"))
            })?,
    };
    let applied_through = DateTime::from_timestamp_millis(millis).ok_or_else(|| {
        malformed(
            table,
            format!("appliedThrough of {stream}/{shard_id} out of range"),
        )
    })?;
    let drained = item
        .get(WATERMARK_DRAINED)
        .and_then(|v| v.as_bool().ok())
        .copied()
        .unwrap_or(false);
    Ok(ShardWatermark {
        stream: stream.clone(),
        shard_id: shard_id.clone(),
        applied_through,
        drained,
    })
}

#[cfg(test)]
mod condition_tests {
    use super::*;

    #[test]
    fn each_update_renders_as_sent() {
        let arrival = DateTime::from_timestamp_millis(1_796_040_007_250).unwrap();
        let r = advance_update(arrival).render_with(&advance_condition(arrival));
        assert_eq!(r.expression, "SET #t = :t");
        assert_eq!(
            r.condition.as_deref(),
            Some("attribute_not_exists(#t) OR #t < :t")
        );
        // One `#t` and one `:t`, shared by both expressions.
        assert_eq!((r.names.len(), r.values.len()), (1, 1));
        let r = mark_drained_update().render();
        assert_eq!((r.expression.as_str(), r.condition), ("SET #d = :d", None));
        assert_eq!(r.names["#d"], WATERMARK_DRAINED);
        assert_eq!(r.values[":d"], AttrValue::Bool(true));
    }

    #[test]
    fn the_advance_condition_renders_as_sent() {
        let arrival = DateTime::from_timestamp_millis(1_796_040_007_250).unwrap();
        let r = advance_condition(arrival).render();
        assert_eq!(r.expression, "attribute_not_exists(#t) OR #t < :t");
        assert_eq!(r.names["#t"], WATERMARK_APPLIED_THROUGH);
        assert_eq!(r.values[":t"], AttrValue::N("1796040007250".into()));
        assert_eq!((r.names.len(), r.values.len()), (1, 1));
    }
}
