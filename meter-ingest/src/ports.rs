//! The capabilities meter-ingest needs beyond the consumer's dedup store
//! (`awsmp_consumer::ports::DedupStore`, reused for its claims): DynamoDB and Kinesis adapters in
//! [`crate::adapters::dynamodb`], in-memory twins in [`crate::adapters::memory`].

use async_trait::async_trait;
use awsmp_producer::sink::PutEntry;
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::mapping::MappingEntry;
use crate::error::Result;

/// The mapping table (`AWSMP_INGEST_MAPPING_TABLE`).
#[async_trait]
pub trait MappingStore: Send + Sync {
    /// The entry of `invoked_arn`, if one exists.
    async fn get(&self, invoked_arn: &str) -> Result<Option<MappingEntry>>;
    /// Create or replace an entry (seeding, the deploy tooling).
    async fn put(&self, entry: &MappingEntry) -> Result<()>;
}

/// Per-module, per-second event counters (kept in the dedup table, with its TTL).
#[async_trait]
pub trait RateCounter: Send + Sync {
    /// Add `n` to counter `key` (created at 0, lapsing at `expires_at`); the new total.
    async fn add(&self, key: &str, n: u64, expires_at: DateTime<Utc>) -> Result<u64>;
}

/// The usage stream, as meter-ingest writes it: every entry is stored, or the call fails.
#[async_trait]
pub trait UsageStream: Send + Sync {
    /// Put every entry (≤ 500), resending failed entries; `Err` when some could not be stored.
    async fn put(&self, entries: Vec<PutEntry>) -> Result<()>;
}

/// What became of a refused event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Disposition {
    /// Not billed and not lost: waiting for an operator (or the mapping entry) to release it.
    Held,
    /// Refused for good (an attack, a stale clock).
    Rejected,
    /// Was held, then released onto the usage stream.
    Released,
}

impl Disposition {
    /// The stored spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Held => "Held",
            Self::Rejected => "Rejected",
            Self::Released => "Released",
        }
    }

    /// From the stored spelling.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Held, Self::Rejected, Self::Released]
            .into_iter()
            .find(|d| d.as_str() == s)
    }
}

/// One refused event, kept with its raw payload (`AWSMP_INGEST_HELD_TABLE`, hash key
/// `heldKey`). A replay of the same event overwrites the same item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldEvent {
    /// `{md5(invoked ARN, event id)}`.
    pub key: String,
    /// Held, rejected or released.
    pub disposition: Disposition,
    /// Reason code.
    pub reason: String,
    /// Detail.
    pub detail: String,
    /// The invoked ARN, as Lambda gave it.
    pub invoked_arn: String,
    /// The request id of the invocation that brought it (its dedup claim's owner).
    pub request_id: String,
    /// The module's event id.
    pub event_id: String,
    /// Its quantity.
    pub quantity: u64,
    /// The event's JSON, as the module sent it.
    pub payload: String,
    /// The receive time: the timestamp authority, also when it is released later.
    pub received_at: DateTime<Utc>,
    /// Epoch-seconds TTL (rejected events only; held ones are kept until released).
    pub ttl: Option<i64>,
}

/// The held-events table.
#[async_trait]
pub trait HeldStore: Send + Sync {
    /// Record (idempotently: same key, same item).
    async fn put(&self, event: &HeldEvent) -> Result<()>;
    /// Every event of `disposition`.
    async fn list(&self, disposition: Disposition) -> Result<Vec<HeldEvent>>;
}
