//! In-memory fakes of every port, with the same semantics as the DynamoDB adapters (the row
//! store applies [`RowWrite::apply`], the guard the DynamoDB condition implements).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use awsmp_contract::attrs;
use awsmp_contract::keys::{GroupKey, RowKey, split_usage_sort_key};
use awsmp_contract::row::{AttrValue, RawUsageRow};
use chrono::{DateTime, Utc};

use crate::domain::row::RowWrite;
use crate::domain::seq::SeqNum;
use crate::error::Result;
use crate::ports::{
    ClaimOutcome, DedupClaim, DedupStore, FinalizedGroups, FirstSeen, LaneItem, RejectedEvent,
    RejectedEventStore, UsageRowWriter,
};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means a test thread panicked holding plain data.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A claim's owner (shard, sequence number) and expiry.
type ClaimEntry = (String, SeqNum, DateTime<Utc>);

/// A "first seen" record's time and expiry.
type SeenEntry = (DateTime<Utc>, DateTime<Utc>);

/// Dedup claims in memory.
#[derive(Debug, Clone, Default)]
pub struct MemoryDedupStore {
    claims: Arc<Mutex<HashMap<String, ClaimEntry>>>,
    lanes: Arc<Mutex<HashMap<String, LaneItem>>>,
    /// "First seen" records: the time and the expiry.
    seen: Arc<Mutex<HashMap<String, SeenEntry>>>,
    writes: Arc<std::sync::atomic::AtomicU64>,
}

impl MemoryDedupStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of claims held.
    pub fn len(&self) -> usize {
        lock(&self.claims).len()
    }

    /// True when no claim is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of generated-id lanes held.
    pub fn lanes(&self) -> usize {
        lock(&self.lanes).len()
    }

    /// The unexpired "first seen" time of `key` at `now`, if one is recorded.
    pub fn first_seen_at(&self, key: &str, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        lock(&self.seen)
            .get(key)
            .filter(|(_, expires)| *expires >= now)
            .map(|(at, _)| *at)
    }

    /// Writes made so far (claims and lane writes, including failed conditions): the cost.
    pub fn writes(&self) -> u64 {
        self.writes.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn count_write(&self) {
        self.writes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

#[async_trait]
impl DedupStore for MemoryDedupStore {
    async fn claim(&self, claim: &DedupClaim) -> Result<ClaimOutcome> {
        self.count_write();
        let mut claims = lock(&self.claims);
        let outcome = match claims.get(&claim.key) {
            None => ClaimOutcome::Claimed,
            Some((_, _, expires)) if *expires < claim.claimed_at => ClaimOutcome::Claimed,
            Some((shard, seq, _)) if *shard == claim.shard_id && *seq == claim.sequence_number => {
                ClaimOutcome::Reclaimed
            }
            Some(_) => return Ok(ClaimOutcome::Duplicate),
        };
        claims.insert(
            claim.key.clone(),
            (
                claim.shard_id.clone(),
                claim.sequence_number.clone(),
                claim.expires_at,
            ),
        );
        Ok(outcome)
    }

    async fn read_lane(&self, key: &str) -> Result<Option<LaneItem>> {
        Ok(lock(&self.lanes).get(key).cloned())
    }

    async fn write_lane(&self, item: &LaneItem, expected: Option<u64>) -> Result<bool> {
        self.count_write();
        let mut lanes = lock(&self.lanes);
        if lanes.get(&item.key).map(|l| l.version) != expected {
            return Ok(false);
        }
        lanes.insert(item.key.clone(), item.clone());
        Ok(true)
    }

    async fn first_seen(&self, seen: &FirstSeen) -> Result<DateTime<Utc>> {
        self.count_write();
        let mut records = lock(&self.seen);
        match records.get(&seen.key) {
            // The DynamoDB condition: `#ex < :now` in epoch seconds.
            Some((at, expires)) if expires.timestamp() >= seen.at.timestamp() => Ok(*at),
            _ => {
                records.insert(seen.key.clone(), (seen.at, seen.expires_at));
                Ok(seen.at)
            }
        }
    }
}

/// Rejected events in memory, by record key.
#[derive(Debug, Clone, Default)]
pub struct MemoryRejectedEventStore {
    items: Arc<Mutex<BTreeMap<String, RejectedEvent>>>,
}

impl MemoryRejectedEventStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every item, by key.
    pub fn items(&self) -> BTreeMap<String, RejectedEvent> {
        lock(&self.items).clone()
    }

    /// Sum of the recorded quantities with `reason`.
    pub fn quantity(&self, reason: &str) -> u64 {
        lock(&self.items)
            .values()
            .filter(|e| e.reason == reason)
            .filter_map(|e| e.quantity)
            .sum()
    }
}

#[async_trait]
impl RejectedEventStore for MemoryRejectedEventStore {
    async fn put(&self, event: &RejectedEvent) -> Result<()> {
        lock(&self.items).insert(event.record_key.clone(), event.clone());
        Ok(())
    }
}

/// The usage table in memory.
#[derive(Debug, Clone, Default)]
pub struct MemoryUsageRows {
    rows: Arc<Mutex<BTreeMap<RowKey, RawUsageRow>>>,
}

impl MemoryUsageRows {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every row.
    pub fn rows(&self) -> BTreeMap<RowKey, RawUsageRow> {
        lock(&self.rows).clone()
    }

    /// Put a row as-is (a seller-written row, or a test's setup).
    pub fn put(&self, row: RawUsageRow) {
        let key = RowKey {
            license_arn: row
                .get(attrs::LICENSE_ARN)
                .and_then(AttrValue::as_s)
                .unwrap_or_default()
                .to_owned(),
            sort_key: row
                .get(attrs::USAGE_SORT_KEY)
                .and_then(AttrValue::as_s)
                .unwrap_or_default()
                .to_owned(),
        };
        lock(&self.rows).insert(key, row);
    }

    /// Quantity per row key (rows whose quantity is a valid integer).
    pub fn quantities(&self) -> BTreeMap<RowKey, u64> {
        lock(&self.rows)
            .iter()
            .filter_map(|(k, r)| {
                let q = r.get(attrs::QUANTITY)?.as_n()?.parse().ok()?;
                Some((k.clone(), q))
            })
            .collect()
    }

    /// Sum of every row's quantity.
    pub fn total(&self) -> u64 {
        self.quantities().values().sum()
    }

    /// What the pipeline's cleanup does: remove `meteringPending` from the group-hour's rows.
    pub fn finalize(&self, group: &GroupKey) {
        let prefix = group.usage_prefix();
        for (k, r) in lock(&self.rows).iter_mut() {
            if k.license_arn == group.license_arn
                && k.sort_key.starts_with(&prefix)
                && split_usage_sort_key(&k.sort_key).is_some()
            {
                r.remove(attrs::METERING_PENDING);
            }
        }
    }
}

#[async_trait]
impl UsageRowWriter for MemoryUsageRows {
    async fn read(&self, key: &RowKey) -> Result<Option<RawUsageRow>> {
        Ok(lock(&self.rows).get(key).cloned())
    }

    async fn write(&self, write: &RowWrite) -> Result<bool> {
        let mut rows = lock(&self.rows);
        match write.apply(rows.get(&write.key)) {
            Some(row) => {
                rows.insert(write.key.clone(), row);
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

/// Finalized group-hours in memory.
#[derive(Debug, Clone, Default)]
pub struct MemoryFinalizedGroups {
    groups: Arc<Mutex<HashSet<GroupKey>>>,
}

impl MemoryFinalizedGroups {
    /// None finalized.
    pub fn new() -> Self {
        Self::default()
    }

    /// Mark `group` finalized (an aggregated record was committed).
    pub fn finalize(&self, group: GroupKey) {
        lock(&self.groups).insert(group);
    }
}

#[async_trait]
impl FinalizedGroups for MemoryFinalizedGroups {
    async fn finalized(&self, groups: &[GroupKey]) -> Result<HashSet<GroupKey>> {
        let have = lock(&self.groups);
        Ok(groups
            .iter()
            .filter(|g| have.contains(*g))
            .cloned()
            .collect())
    }
}

/// One of each in-memory store, and a [`crate::Consumer`] over them.
#[derive(Debug, Clone, Default)]
pub struct MemoryStores {
    /// Dedup claims.
    pub dedup: MemoryDedupStore,
    /// Rejected events.
    pub rejected: MemoryRejectedEventStore,
    /// Usage rows.
    pub rows: MemoryUsageRows,
    /// Finalized group-hours.
    pub finalized: MemoryFinalizedGroups,
    /// Ingest watermarks (the pipeline's in-memory twin: the discoverer reads what this writes).
    pub watermarks: Arc<awsmp_aws::watermark::MemoryWatermarkStore>,
}

impl MemoryStores {
    /// Empty stores.
    pub fn new() -> Self {
        Self::default()
    }

    /// A consumer over these stores, capturing its metrics.
    pub fn consumer(
        &self,
        settings: crate::Settings,
        clock: Arc<dyn awsmp_contract::clock::Clock>,
    ) -> crate::Consumer {
        crate::Consumer {
            settings,
            dedup: Arc::new(self.dedup.clone()),
            rejected: Arc::new(self.rejected.clone()),
            rows: Arc::new(self.rows.clone()),
            finalized: Arc::new(self.finalized.clone()),
            watermarks: Some(self.watermarks.clone()),
            archive: None,
            metrics: awsmp_aws::emf::MetricsSink::capture("kinesis-consumer"),
            clock,
            names: crate::domain::intern::NameCache::new(),
        }
    }
}
