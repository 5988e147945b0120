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

use super::dynamodb::{ddb_err, s};
use crate::error::{ConsumerError, Result};
use crate::ports::{ClaimOutcome, DedupClaim, DedupStore, FirstSeen, LaneItem};
use awsmp_aws::dynamodb::{WithCondition, is_conditional_failure, to_sdk};
use awsmp_contract::condition::{Attr, Condition, Item, Value};
use awsmp_contract::row::AttrValue;

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
        let res = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(sdk_item(&claim_item(c))))
            .with_condition(&claim_condition(c))
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
        let req = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(sdk_item(&lane_item(item))))
            .with_condition(&lane_condition(expected));
        match req.send().await {
            Ok(_) => Ok(true),
            Err(e) if is_conditional_failure(&e) => Ok(false),
            Err(e) => Err(ddb_err("PutItem", &self.table, e)),
        }
    }

    async fn first_seen(&self, seen: &FirstSeen) -> Result<DateTime<Utc>> {
        let res = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(sdk_item(&first_seen_item(seen))))
            .with_condition(&first_seen_condition(seen))
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
                .key(dedup_attrs::DEDUP_KEY, s(&seen.key))
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

/// A claim's item: what the adapter puts and the memory twin stores.
pub fn claim_item(c: &DedupClaim) -> Item {
    use dedup_attrs::*;
    Item::from([
        (DEDUP_KEY.to_owned(), AttrValue::s(&c.key)),
        (SHARD_ID.to_owned(), AttrValue::s(&c.shard_id)),
        (
            SEQUENCE_NUMBER.to_owned(),
            AttrValue::s(c.sequence_number.decimal()),
        ),
        (
            CLAIMED_AT.to_owned(),
            AttrValue::s(audit_timestamp(c.claimed_at)),
        ),
        (
            EXPIRES_AT.to_owned(),
            AttrValue::N(c.expires_at.timestamp().to_string()),
        ),
    ])
}

/// A claim's condition: absent, owned by this very record (a replay), or expired but not yet
/// deleted by TTL (epoch seconds, as TTL counts).
pub fn claim_condition(c: &DedupClaim) -> Condition {
    use dedup_attrs::*;
    let owner = Condition::eq(Attr::token("#sh", SHARD_ID), Value::s(":sh", &c.shard_id)).and(
        Condition::eq(
            Attr::token("#sq", SEQUENCE_NUMBER),
            Value::s(":sq", c.sequence_number.decimal()),
        ),
    );
    Condition::not_exists(Attr::token("#k", DEDUP_KEY))
        .or(owner)
        .or(expired(c.claimed_at))
}

/// `#ex < :now`: the stored item expired before `now` (epoch seconds).
fn expired(now: DateTime<Utc>) -> Condition {
    Condition::lt(
        Attr::token("#ex", dedup_attrs::EXPIRES_AT),
        Value::n(":now", now.timestamp()),
    )
}

/// A generated-id lane's item: what the adapter puts and the memory twin stores.
pub fn lane_item(item: &LaneItem) -> Item {
    use dedup_attrs::*;
    Item::from([
        (DEDUP_KEY.to_owned(), AttrValue::s(&item.key)),
        (LANE_STATE.to_owned(), AttrValue::s(&item.state)),
        (LANE_VERSION.to_owned(), AttrValue::n(item.version)),
        (
            EXPIRES_AT.to_owned(),
            AttrValue::N(item.expires_at.timestamp().to_string()),
        ),
    ])
}

/// A lane write's compare-and-set: no lane yet (`expected` `None`), or the lane at version
/// `expected`.
pub fn lane_condition(expected: Option<u64>) -> Condition {
    match expected {
        None => Condition::not_exists(Attr::token("#k", dedup_attrs::DEDUP_KEY)),
        Some(v) => Condition::eq(
            Attr::token("#v", dedup_attrs::LANE_VERSION),
            Value::n(":v", v),
        ),
    }
}

/// A "first seen" record's item: what the adapter puts and the memory twin stores.
pub fn first_seen_item(seen: &FirstSeen) -> Item {
    use dedup_attrs::*;
    Item::from([
        (DEDUP_KEY.to_owned(), AttrValue::s(&seen.key)),
        (
            FIRST_SEEN_MS.to_owned(),
            AttrValue::N(seen.at.timestamp_millis().to_string()),
        ),
        (
            CLAIMED_AT.to_owned(),
            AttrValue::s(audit_timestamp(seen.at)),
        ),
        (
            EXPIRES_AT.to_owned(),
            AttrValue::N(seen.expires_at.timestamp().to_string()),
        ),
    ])
}

/// A "first seen" record's condition: absent, or expired but not yet deleted by TTL.
pub fn first_seen_condition(seen: &FirstSeen) -> Condition {
    Condition::not_exists(Attr::token("#k", dedup_attrs::DEDUP_KEY)).or(expired(seen.at))
}

/// An item in the SDK's form.
pub fn sdk_item(item: &Item) -> HashMap<String, Av> {
    item.iter().map(|(k, v)| (k.clone(), to_sdk(v))).collect()
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
pub fn lane_from_item(
    key: &str,
    item: &HashMap<String, Av>,
) -> std::result::Result<LaneItem, String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::seq::SeqNum;

    fn at(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(secs, 0).unwrap()
    }

    fn claim() -> DedupClaim {
        DedupClaim {
            key: "k".into(),
            shard_id: "shardId-000000000001".into(),
            sequence_number: SeqNum::parse("42").unwrap(),
            claimed_at: at(1_000),
            expires_at: at(2_000),
        }
    }

    /// A rendering: the expression, its names and its values, in token order.
    type Sent = (String, Vec<(String, String)>, Vec<(String, AttrValue)>);

    fn rendered(c: &Condition) -> Sent {
        let r = c.render();
        (
            r.expression,
            r.names.into_iter().collect(),
            r.values.into_iter().collect(),
        )
    }

    #[test]
    fn each_condition_renders_as_sent() {
        let (expr, names, values) = rendered(&claim_condition(&claim()));
        assert_eq!(
            expr,
            "attribute_not_exists(#k) OR (#sh = :sh AND #sq = :sq) OR #ex < :now"
        );
        assert_eq!(names.len(), 4);
        assert_eq!(
            values,
            [
                (":now".to_owned(), AttrValue::n(1_000)),
                (":sh".to_owned(), AttrValue::s("shardId-000000000001")),
                (":sq".to_owned(), AttrValue::s("42")),
            ]
        );
        let (expr, names, values) = rendered(&lane_condition(None));
        assert_eq!(expr, "attribute_not_exists(#k)");
        assert_eq!(names, [("#k".to_owned(), "dedupKey".to_owned())]);
        assert!(values.is_empty());
        let (expr, names, values) = rendered(&lane_condition(Some(3)));
        assert_eq!(expr, "#v = :v");
        assert_eq!(names, [("#v".to_owned(), "laneVersion".to_owned())]);
        assert_eq!(values, [(":v".to_owned(), AttrValue::n(3))]);
        let seen = FirstSeen {
            key: "k".into(),
            at: at(1_500),
            expires_at: at(2_000),
        };
        let (expr, _, values) = rendered(&first_seen_condition(&seen));
        assert_eq!(expr, "attribute_not_exists(#k) OR #ex < :now");
        assert_eq!(values, [(":now".to_owned(), AttrValue::n(1_500))]);
    }

    #[test]
    fn a_claim_is_refused_only_while_another_unexpired_owner_holds_it() {
        let c = claim();
        let other = DedupClaim {
            shard_id: "shardId-000000000002".into(),
            ..claim()
        };
        assert!(claim_condition(&c).holds_for(None));
        // Owned by this very record: a replay.
        assert!(claim_condition(&c).holds_for(Some(&claim_item(&c))));
        // Another owner, unexpired at `claimed_at` (expiry is epoch seconds, as TTL counts).
        assert!(!claim_condition(&c).holds_for(Some(&claim_item(&other))));
        let expired = DedupClaim {
            expires_at: at(999),
            ..other.clone()
        };
        assert!(claim_condition(&c).holds_for(Some(&claim_item(&expired))));
        let same_second = DedupClaim {
            expires_at: at(1_000),
            ..other
        };
        assert!(!claim_condition(&c).holds_for(Some(&claim_item(&same_second))));
    }
}
