//! The capabilities the consumer needs, as small traits (DynamoDB adapters in
//! [`crate::adapters::dynamodb`], in-memory fakes in [`crate::adapters::memory`]).

use std::collections::HashSet;

use async_trait::async_trait;
use awsmp_contract::keys::{GroupKey, RowKey};
use awsmp_contract::row::RawUsageRow;
use chrono::{DateTime, Utc};

use crate::domain::row::RowWrite;
use crate::domain::seq::SeqNum;
use crate::error::Result;

/// A de-duplication claim: this stream record is the one copy of `key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DedupClaim {
    /// The dedup key (`kpl:<md5>`, `evt:<event id>`, `raw:<md5>`).
    pub key: String,
    /// Shard of the claiming record.
    pub shard_id: String,
    /// Sequence number of the claiming record.
    pub sequence_number: SeqNum,
    /// When claimed.
    pub claimed_at: DateTime<Utc>,
    /// When the claim lapses (the store's TTL; an expired claim is claimable again even if the
    /// store has not deleted it yet).
    pub expires_at: DateTime<Utc>,
}

/// What a claim found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// First claim of the key.
    Claimed,
    /// The key was already claimed by this very record (a replay): process it again.
    Reclaimed,
    /// Another record claimed the key: this one is a duplicate.
    Duplicate,
}

/// The stored state of one generated-id lane ([`crate::domain::dedup::LaneState`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneItem {
    /// The dedup-table key (`seq:{epoch}:{lane}`).
    pub key: String,
    /// Compare-and-set version (1 on the first write).
    pub version: u64,
    /// [`crate::domain::dedup::LaneState::encode`].
    pub state: String,
    /// When the lane lapses (the store's TTL): the dedup window after its last write.
    pub expires_at: DateTime<Utc>,
}

/// The dedup store (short TTL): per-id claims and generated-id lanes.
#[async_trait]
pub trait DedupStore: Send + Sync {
    /// Claim `claim.key` for `claim`'s record (conditional put: absent, expired, or already
    /// owned by the same shard and sequence number).
    async fn claim(&self, claim: &DedupClaim) -> Result<ClaimOutcome>;
    /// Strongly consistent read of one lane.
    async fn read_lane(&self, key: &str) -> Result<Option<LaneItem>>;
    /// Write `item` if the stored lane is still at version `expected` (`None`: absent);
    /// `Ok(false)` when another writer moved it first.
    async fn write_lane(&self, item: &LaneItem, expected: Option<u64>) -> Result<bool>;
    /// Record `seen.at` as the first time `seen.key` was seen, unless an unexpired record of
    /// it exists (one conditional put); the first time on record, which is `seen.at` for a
    /// first sighting. meter-ingest keys it by invoked ARN and request id, so a Lambda async
    /// retry keeps its first attempt's receive time (docs/meter-ingest.md).
    async fn first_seen(&self, seen: &FirstSeen) -> Result<DateTime<Utc>>;
}

/// A "first seen" record: when `key` was first seen, kept until `expires_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirstSeen {
    /// The dedup-table key (`ingreq:<md5>` for a meter-ingest request).
    pub key: String,
    /// This sighting's time (millisecond precision is kept).
    pub at: DateTime<Utc>,
    /// When the record lapses (the store's TTL; an expired record counts as absent).
    pub expires_at: DateTime<Utc>,
}

/// One rejected event, or one part of a row that was not written (late usage and other
/// row-level reasons), with a reference to the raw bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RejectedEvent {
    /// Unique, deterministic key: `{stream}/{shard}/{seq}/{sub|record|row/…}` (a replay
    /// overwrites the same item).
    pub record_key: String,
    /// Reason code.
    pub reason: String,
    /// Detail.
    pub detail: String,
    /// Stream name.
    pub stream: String,
    /// Shard id.
    pub shard_id: String,
    /// Sequence number of the stream record.
    pub sequence_number: String,
    /// Positions inside the record (empty: the whole record).
    pub sub_sequence_numbers: Vec<u32>,
    /// Kinesis partition key.
    pub partition_key: String,
    /// Arrival time.
    pub arrival: DateTime<Utc>,
    /// The rejected bytes, base64, when small enough to keep.
    pub data_base64: Option<String>,
    /// Length of the rejected bytes.
    pub data_len: usize,
    /// Quantity not billed, when known.
    pub quantity: Option<u64>,
    /// Event id, when known.
    pub event_id: Option<String>,
    /// Producer id, when known.
    pub producer_id: Option<String>,
    /// License ARN, when known.
    pub license_arn: Option<String>,
    /// Account id, when known.
    pub customer_aws_account_id: Option<String>,
    /// Dimension, when known.
    pub dimension: Option<String>,
    /// Usage-row sort key (row-level reasons).
    pub row_sort_key: Option<String>,
    /// When recorded.
    pub rejected_at: DateTime<Utc>,
    /// Epoch-seconds TTL, if the store expires items.
    pub ttl: Option<i64>,
}

/// The rejected-events store.
#[async_trait]
pub trait RejectedEventStore: Send + Sync {
    /// Record (idempotently: same key, same item).
    async fn put(&self, event: &RejectedEvent) -> Result<()>;
}

/// The usage table, as the consumer writes it.
#[async_trait]
pub trait UsageRowWriter: Send + Sync {
    /// Strongly consistent read of one row.
    async fn read(&self, key: &RowKey) -> Result<Option<RawUsageRow>>;
    /// One conditional write; `Ok(false)` when its guard did not hold.
    async fn write(&self, write: &RowWrite) -> Result<bool>;
}

/// Which group-hours the pipeline has finalized (an aggregated-usage record exists).
#[async_trait]
pub trait FinalizedGroups: Send + Sync {
    /// The finalized subset of `groups`.
    async fn finalized(&self, groups: &[GroupKey]) -> Result<HashSet<GroupKey>>;
}
