//! The dedup table (hash key `dedupKey`, TTL attribute `expiresAt`): per-id claims and
//! generated-id lanes (docs/guarantees.md, "Dedup").

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::{
    AttributeValue as Av, ReturnValue, ReturnValuesOnConditionCheckFailure,
};
use awsmp_contract::attrs::audit_timestamp;
use chrono::{DateTime, TimeZone, Utc};

use super::dynamodb::{ddb_err, n, s};
use crate::error::{ConsumerError, Result};
use crate::ports::{ClaimOutcome, DedupClaim, DedupStore, FirstSeen, LaneItem};
use awsmp_aws::dynamodb::is_conditional_failure;

/// Dedup table attributes.
pub mod dedup_attrs {
    /// Hash key.
    pub const DEDUP_KEY: &str = "dedupKey";
    /// Claiming record's shard.
    pub const SHARD_ID: &str = "shardId";
    /// Claiming record's sequence number (decimal).
    pub const SEQUENCE_NUMBER: &str = "sequenceNumber";
    /// ISO-8601 claim time.
    pub const CLAIMED_AT: &str = "claimedAt";
    /// TTL attribute (epoch seconds).
    pub const EXPIRES_AT: &str = "expiresAt";
    /// A generated-id lane's applied sequences (`LaneState::encode`).
    pub const LANE_STATE: &str = "laneState";
    /// A generated-id lane's compare-and-set version.
    pub const LANE_VERSION: &str = "laneVersion";
    /// A "first seen" record's time, epoch milliseconds.
    pub const FIRST_SEEN_MS: &str = "firstSeenMs";
}

/// The dedup table (hash key `dedupKey`, TTL attribute `expiresAt`).
#[derive(Debug, Clone)]
pub struct DynamoDbDedupStore {
    client: Client,
    table: String,
}

impl DynamoDbDedupStore {
    /// Over `table`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }
}

#[async_trait]
impl DedupStore for DynamoDbDedupStore {
    async fn claim(&self, c: &DedupClaim) -> Result<ClaimOutcome> {
        use dedup_attrs::*;
        let res = self
            .client
            .put_item()
            .table_name(&self.table)
            .item(DEDUP_KEY, s(&c.key))
            .item(SHARD_ID, s(&c.shard_id))
            .item(SEQUENCE_NUMBER, s(c.sequence_number.decimal()))
            .item(CLAIMED_AT, s(audit_timestamp(c.claimed_at)))
            .item(EXPIRES_AT, n(c.expires_at.timestamp()))
            // Absent, owned by this very record (a replay), or expired but not yet deleted by TTL.
            .condition_expression(
                "attribute_not_exists(#k) OR (#sh = :sh AND #sq = :sq) OR #ex < :now",
            )
            .expression_attribute_names("#k", DEDUP_KEY)
            .expression_attribute_names("#sh", SHARD_ID)
            .expression_attribute_names("#sq", SEQUENCE_NUMBER)
            .expression_attribute_names("#ex", EXPIRES_AT)
            .expression_attribute_values(":sh", s(&c.shard_id))
            .expression_attribute_values(":sq", s(c.sequence_number.decimal()))
            .expression_attribute_values(":now", n(c.claimed_at.timestamp()))
            .return_values(ReturnValue::AllOld)
            .send()
            .await;
        match res {
            Ok(out) => Ok(claim_outcome(out.attributes.as_ref(), c)),
            Err(e) if is_conditional_failure(&e) => Ok(ClaimOutcome::Duplicate),
            Err(e) => Err(ddb_err("PutItem", &self.table, e)),
        }
    }

    async fn read_lane(&self, key: &str) -> Result<Option<LaneItem>> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(dedup_attrs::DEDUP_KEY, s(key))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| ddb_err("GetItem", &self.table, e))?;
        out.item
            .map(|item| lane_from_item(key, &item))
            .transpose()
            .map_err(|detail| ConsumerError::MalformedItem {
                table: self.table.clone(),
                detail,
            })
    }

    async fn write_lane(&self, item: &LaneItem, expected: Option<u64>) -> Result<bool> {
        use dedup_attrs::*;
        let mut req = self
            .client
            .put_item()
            .table_name(&self.table)
            .item(DEDUP_KEY, s(&item.key))
            .item(LANE_STATE, s(&item.state))
            .item(LANE_VERSION, n(item.version))
            .item(EXPIRES_AT, n(item.expires_at.timestamp()));
        req = match expected {
            None => req
                .condition_expression("attribute_not_exists(#k)")
                .expression_attribute_names("#k", DEDUP_KEY),
            Some(v) => req
                .condition_expression("#v = :v")
                .expression_attribute_names("#v", LANE_VERSION)
                .expression_attribute_values(":v", n(v)),
        };
        match req.send().await {
            Ok(_) => Ok(true),
            Err(e) if is_conditional_failure(&e) => Ok(false),
            Err(e) => Err(ddb_err("PutItem", &self.table, e)),
        }
    }

    async fn first_seen(&self, seen: &FirstSeen) -> Result<DateTime<Utc>> {
        use dedup_attrs::*;
        let res = self
            .client
            .put_item()
            .table_name(&self.table)
            .item(DEDUP_KEY, s(&seen.key))
            .item(FIRST_SEEN_MS, n(seen.at.timestamp_millis()))
            .item(CLAIMED_AT, s(audit_timestamp(seen.at)))
            .item(EXPIRES_AT, n(seen.expires_at.timestamp()))
            // Absent, or expired but not yet deleted by TTL.
            .condition_expression("attribute_not_exists(#k) OR #ex < :now")
            .expression_attribute_names("#k", DEDUP_KEY)
            .expression_attribute_names("#ex", EXPIRES_AT)
            .expression_attribute_values(":now", n(seen.at.timestamp()))
            // The stored record comes back with the condition failure: one write either way.
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let err = match res {
            Ok(_) => return Ok(seen.at),
            Err(e) if is_conditional_failure(&e) => e,
            Err(e) => return Err(ddb_err("PutItem", &self.table, e)),
        };
        let old = match err.as_service_error() {
            Some(PutItemError::ConditionalCheckFailedException(c)) => c.item().cloned(),
            _ => None,
        };
        let old = match old {
            Some(item) if !item.is_empty() => item,
            // An endpoint that does not return the item: read it (strongly consistent).
            _ => self
                .client
                .get_item()
                .table_name(&self.table)
                .key(DEDUP_KEY, s(&seen.key))
                .consistent_read(true)
                .send()
                .await
                .map_err(|e| ddb_err("GetItem", &self.table, e))?
                .item
                .unwrap_or_default(),
        };
        first_seen_from_item(&seen.key, &old).map_err(|detail| ConsumerError::MalformedItem {
            table: self.table.clone(),
            detail,
        })
    }
}

/// The time a "first seen" record holds.
fn first_seen_from_item(
    key: &str,
    item: &HashMap<String, Av>,
) -> std::result::Result<DateTime<Utc>, String> {
    let ms = item
        .get(dedup_attrs::FIRST_SEEN_MS)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse::<i64>().ok())
        .ok_or_else(|| format!("{key}: no numeric {}", dedup_attrs::FIRST_SEEN_MS))?;
    Utc.timestamp_millis_opt(ms)
        .single()
        .ok_or_else(|| format!("{key}: {} out of range", dedup_attrs::FIRST_SEEN_MS))
}

/// A lane item as stored.
fn lane_from_item(key: &str, item: &HashMap<String, Av>) -> std::result::Result<LaneItem, String> {
    use dedup_attrs::*;
    let get = |name: &str| item.get(name).ok_or_else(|| format!("{key}: no {name}"));
    let number = |name: &str| -> std::result::Result<i64, String> {
        get(name)?
            .as_n()
            .ok()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{key}: {name} is not a number"))
    };
    let state = get(LANE_STATE)?
        .as_s()
        .map_err(|_| format!("{key}: {LANE_STATE} is not a string"))?;
    Ok(LaneItem {
        key: key.to_owned(),
        version: u64::try_from(number(LANE_VERSION)?).map_err(|e| e.to_string())?,
        state: state.clone(),
        expires_at: Utc
            .timestamp_opt(number(EXPIRES_AT)?, 0)
            .single()
            .ok_or_else(|| format!("{key}: {EXPIRES_AT} out of range"))?,
    })
}

/// Whether a successful claim was a first claim or a replay, from the replaced item.
pub fn claim_outcome(old: Option<&HashMap<String, Av>>, c: &DedupClaim) -> ClaimOutcome {
    use dedup_attrs::*;
    let Some(old) = old.filter(|o| !o.is_empty()) else {
        return ClaimOutcome::Claimed;
    };
    let same = old.get(SHARD_ID).and_then(|v| v.as_s().ok()) == Some(&c.shard_id)
        && old
            .get(SEQUENCE_NUMBER)
            .and_then(|v| v.as_s().ok())
            .map(String::as_str)
            == Some(c.sequence_number.decimal());
    if same {
        ClaimOutcome::Reclaimed
    } else {
        ClaimOutcome::Claimed
    }
}
