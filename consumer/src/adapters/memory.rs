//! In-memory fakes of every port, with the same semantics as the DynamoDB adapters: each
//! conditional write is decided by the condition the DynamoDB adapter sends, evaluated on the
//! stored item (the row store applies [`RowWrite::apply`], whose guard is
//! [`RowWrite::condition`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use awsmp_contract::attrs;
use awsmp_contract::keys::{GroupKey, RowKey, split_usage_sort_key};
use awsmp_contract::row::{AttrValue, RawUsageRow};
use chrono::{DateTime, Utc};

use super::dedup_table::{
    claim_condition, claim_item, claim_outcome, first_seen_condition, first_seen_item,
    lane_condition, lane_item, sdk_item,
};
use crate::domain::row::RowWrite;
use crate::error::Result;
use crate::ports::{
    ClaimOutcome, DedupClaim, DedupStore, FinalizedGroups, FirstSeen, LaneItem, RejectedEvent,
    RejectedEventStore, UsageRowWriter,
};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means a test thread panicked holding plain data.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Dedup claims in memory. Each write decides by evaluating the DynamoDB adapter's condition
/// on the stored item as the adapter writes it (`claim_item`, `lane_item`, `first_seen_item`).
#[derive(Debug, Clone, Default)]
pub struct MemoryDedupStore {
    claims: Arc<Mutex<HashMap<String, DedupClaim>>>,
    lanes: Arc<Mutex<HashMap<String, LaneItem>>>,
    /// "First seen" records.
    seen: Arc<Mutex<HashMap<String, FirstSeen>>>,
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
            .filter(|seen| seen.expires_at >= now)
            .map(|seen| seen.at)
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
        let old = claims.get(&claim.key).map(claim_item);
        if !claim_condition(claim).holds_for(old.as_ref()) {
            return Ok(ClaimOutcome::Duplicate);
        }
        // What the adapter reads from the replaced item (`ReturnValues` `ALL_OLD`).
        let outcome = claim_outcome(old.as_ref().map(sdk_item).as_ref(), claim);
        claims.insert(claim.key.clone(), claim.clone());
        Ok(outcome)
    }

    async fn read_lane(&self, key: &str) -> Result<Option<LaneItem>> {
        Ok(lock(&self.lanes).get(key).cloned())
    }

    async fn write_lane(&self, item: &LaneItem, expected: Option<u64>) -> Result<bool> {
        self.count_write();
        let mut lanes = lock(&self.lanes);
        let old = lanes.get(&item.key).map(lane_item);
        if !lane_condition(expected).holds_for(old.as_ref()) {
            return Ok(false);
        }
        lanes.insert(item.key.clone(), item.clone());
        Ok(true)
    }

    async fn first_seen(&self, seen: &FirstSeen) -> Result<DateTime<Utc>> {
        self.count_write();
        let mut records = lock(&self.seen);
        match records.get(&seen.key) {
            Some(old) if !first_seen_condition(seen).holds_for(Some(&first_seen_item(old))) => {
                Ok(old.at)
            }
            _ => {
                records.insert(seen.key.clone(), seen.clone());
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
