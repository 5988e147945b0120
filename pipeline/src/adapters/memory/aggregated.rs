//! The aggregated-usage table and the subscribers' deprovisioning index in memory.

use super::lag::{IndexLag, ReadConsistency};
use super::{DEFAULT_PAGE_SIZE, Faults, lock};
use crate::adapters::dynamodb::{
    aggregated_attrs, mark_attempted_condition, put_if_absent_condition, retract_attempt_condition,
    write_back_condition,
};
use crate::error::Result;
use crate::ports::{AggregatedItem, AggregatedStore, WriteBack};
use async_trait::async_trait;
use awsmp_aws::deprovisioning::{Deprovisioning, DeprovisioningIndex};
use awsmp_contract::condition::{Condition, Item};
use awsmp_contract::keys::{GroupKey, HourBucket};
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Mutex;

/// Primary key of an aggregated record: `licenseArn`, `account_dimension_hour`.
type Key = (String, String);

fn key(group: &GroupKey) -> Key {
    (group.license_arn.clone(), group.aggregated_sort_key())
}

/// The aggregated-usage table: one record per group-hour, the first put wins. Its pending
/// index (a GSI) is eventually consistent under a [`ReadConsistency`] knob; `get` is a
/// consistent read.
#[derive(Debug)]
pub struct MemoryAggregatedStore {
    table: String,
    items: Mutex<Items>,
    lag: Mutex<IndexLag<Key, AggregatedItem>>,
    ttls: Mutex<BTreeMap<Key, i64>>,
    page_size: usize,
    /// Faults to inject, by [`AggregatedStore`] method name.
    pub faults: Faults,
}

impl MemoryAggregatedStore {
    /// An empty table named `table` (the name appears in errors).
    pub fn new(table: impl Into<String>) -> Self {
        Self {
            table: table.into(),
            items: Mutex::new(Items::default()),
            lag: Mutex::new(IndexLag::new(ReadConsistency::Consistent)),
            ttls: Mutex::new(BTreeMap::new()),
            page_size: DEFAULT_PAGE_SIZE,
            faults: Faults::default(),
        }
    }

    /// Read the pending index `page_size` items at a time (at least one).
    pub fn with_page_size(mut self, page_size: usize) -> Self {
        self.page_size = page_size.max(1);
        self
    }

    /// How reads of the pending index see recent writes (default: consistent).
    pub fn with_read_consistency(self, mode: ReadConsistency) -> Self {
        *lock(&self.lag) = IndexLag::new(mode);
        self
    }

    /// Propagate every write to the pending index (under [`ReadConsistency::Manual`]).
    pub fn propagate_index(&self) {
        lock(&self.lag).propagate();
    }

    /// Write `item` as stored, unconditionally (a direct-submit seller's record, or a test's
    /// starting state). Unlike [`AggregatedStore::put_if_absent`] it keeps every field.
    pub fn insert(&self, item: AggregatedItem) {
        let mut items = lock(&self.items);
        let k = key(&item.group);
        lock(&self.lag).before_write(&k, items.by_key.get(&k));
        items.put(k, item);
    }

    /// Every record, in key order.
    pub fn items(&self) -> Vec<AggregatedItem> {
        lock(&self.items).by_key.values().cloned().collect()
    }

    /// Whether any record is pending.
    pub fn any_pending(&self) -> bool {
        !lock(&self.items).pending.is_empty()
    }

    /// Whether `group` has a record (a consistent read of its key).
    pub fn contains(&self, group: &GroupKey) -> bool {
        lock(&self.items).by_key.contains_key(&key(group))
    }

    /// The TTL (epoch seconds) set on `group`'s record, if any.
    pub fn ttl(&self, group: &GroupKey) -> Option<i64> {
        lock(&self.ttls).get(&key(group)).copied()
    }

    /// One page of the pending index for `bucket` after `start` (over one index read's
    /// `view`), and the key to continue from.
    fn index_page(
        &self,
        view: &BTreeMap<Key, AggregatedItem>,
        bucket: HourBucket,
        license: Option<&str>,
        start: Option<&Key>,
    ) -> (Vec<AggregatedItem>, Option<Key>) {
        let from = start.map_or(Bound::Unbounded, Bound::Excluded);
        let mut page = Vec::new();
        for (k, item) in view.range((from, Bound::Unbounded)) {
            if item.pending
                && item.group.hour == bucket
                && license.is_none_or(|l| l == item.group.license_arn)
            {
                page.push(item.clone());
                if page.len() == self.page_size {
                    return (page, Some(k.clone()));
                }
            }
        }
        (page, None)
    }

    /// Apply `update` to `group`'s record if `condition` — the one the DynamoDB adapter
    /// sends for this write — holds for its attributes; false otherwise. Every update
    /// condition requires a pending record, so an update never creates one here, nor in
    /// DynamoDB.
    fn update_if(
        &self,
        group: &GroupKey,
        condition: &Condition,
        update: impl FnOnce(&mut AggregatedItem),
    ) -> bool {
        let mut items = lock(&self.items);
        let k = key(group);
        match items.by_key.get(&k).filter(|i| holds(condition, i)) {
            Some(item) => {
                lock(&self.lag).before_write(&k, Some(item));
                items.update(&k, update);
                true
            }
            None => false,
        }
    }
}

/// `item`'s attributes as the DynamoDB adapter stores them (the audit timestamps aside, which
/// no condition reads).
fn stored_attrs(item: &AggregatedItem) -> Item {
    aggregated_attrs(item, DateTime::<Utc>::UNIX_EPOCH)
}

/// Whether `condition` holds for `item` as the DynamoDB adapter stores it.
fn holds(condition: &Condition, item: &AggregatedItem) -> bool {
    condition.holds_for(Some(&stored_attrs(item)))
}

/// The records by primary key, and the sparse pending index over them (the keys of the
/// pending records, by hour bucket), kept in step on every write.
#[derive(Debug, Default)]
struct Items {
    by_key: BTreeMap<Key, AggregatedItem>,
    pending: BTreeMap<HourBucket, BTreeSet<Key>>,
}

impl Items {
    fn unindex(&mut self, k: &Key) {
        let Some(hour) = self
            .by_key
            .get(k)
            .filter(|i| i.pending)
            .map(|i| i.group.hour)
        else {
            return;
        };
        if let Some(keys) = self.pending.get_mut(&hour) {
            keys.remove(k);
            if keys.is_empty() {
                self.pending.remove(&hour);
            }
        }
    }

    fn reindex(&mut self, k: &Key) {
        if let Some(item) = self.by_key.get(k).filter(|i| i.pending) {
            self.pending
                .entry(item.group.hour)
                .or_default()
                .insert(k.clone());
        }
    }

    fn put(&mut self, k: Key, item: AggregatedItem) {
        self.unindex(&k);
        self.by_key.insert(k.clone(), item);
        self.reindex(&k);
    }

    /// Apply `update` to the record at `k`, if any, keeping the index in step.
    fn update(&mut self, k: &Key, update: impl FnOnce(&mut AggregatedItem)) {
        self.unindex(k);
        if let Some(item) = self.by_key.get_mut(k) {
            update(item);
        }
        self.reindex(k);
    }
}

#[async_trait]
impl AggregatedStore for MemoryAggregatedStore {
    async fn put_if_absent(&self, item: &AggregatedItem, _now: DateTime<Utc>) -> Result<bool> {
        self.faults.dynamodb("put_if_absent", &self.table)?;
        let mut items = lock(&self.items);
        let existing = items.by_key.get(&key(&item.group)).map(stored_attrs);
        if !put_if_absent_condition().holds_for(existing.as_ref()) {
            return Ok(false);
        }
        // What the DynamoDB adapter's item holds: no outcome and no attempt yet.
        let stored = AggregatedItem {
            status: None,
            status_reason: None,
            metering_record_id: None,
            attempted_quantity: None,
            submission_attempted_at: None,
            attempt_number: None,
            ..item.clone()
        };
        lock(&self.lag).before_write(&key(&item.group), None);
        items.put(key(&item.group), stored);
        Ok(true)
    }

    async fn get(&self, group: &GroupKey) -> Result<Option<AggregatedItem>> {
        self.faults.dynamodb("get", &self.table)?;
        Ok(lock(&self.items).by_key.get(&key(group)).cloned())
    }

    async fn pending(
        &self,
        bucket: HourBucket,
        license: Option<&str>,
    ) -> Result<Vec<AggregatedItem>> {
        self.faults.dynamodb("pending", &self.table)?;
        let view = {
            let items = lock(&self.items);
            let indexed = items.pending.get(&bucket).into_iter().flatten();
            let in_index = |i: &AggregatedItem| i.pending && i.group.hour == bucket;
            lock(&self.lag).view(&items.by_key, indexed, in_index)
        };
        let mut out = Vec::new();
        let mut start = None;
        loop {
            let (page, next) = self.index_page(&view, bucket, license, start.as_ref());
            out.extend(page);
            match next {
                Some(k) => start = Some(k),
                None => return Ok(out),
            }
        }
    }

    async fn mark_attempted(
        &self,
        group: &GroupKey,
        quantity: u64,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        self.faults.dynamodb("mark_attempted", &self.table)?;
        // A record no longer pending was finalized by someone else: nothing to mark.
        Ok(self.update_if(group, &mark_attempted_condition(), |item| {
            item.attempted_quantity = Some(quantity);
            item.submission_attempted_at = Some(now);
            item.attempt_number = Some(item.attempt_number.unwrap_or(0) + 1);
        }))
    }

    async fn retract_attempt(
        &self,
        group: &GroupKey,
        quantity: u64,
        previous: Option<u64>,
        _now: DateTime<Utc>,
    ) -> Result<()> {
        self.faults.dynamodb("retract_attempt", &self.table)?;
        self.update_if(group, &retract_attempt_condition(quantity), |item| {
            item.attempted_quantity = previous;
            if previous.is_none() {
                item.submission_attempted_at = None;
            }
        });
        Ok(())
    }

    async fn write_back(
        &self,
        group: &GroupKey,
        outcome: &WriteBack,
        _now: DateTime<Utc>,
    ) -> Result<bool> {
        self.faults.dynamodb("write_back", &self.table)?;
        let written = self.update_if(group, &write_back_condition(outcome.if_attempt), |item| {
            item.pending = false;
            item.status = Some(outcome.status);
            if let Some(r) = &outcome.reason {
                item.status_reason = Some(r.clone());
            }
            if let Some(id) = &outcome.metering_record_id {
                item.metering_record_id = Some(id.clone());
            }
        });
        if let (true, Some(ttl)) = (written, outcome.ttl) {
            lock(&self.ttls).insert(key(group), ttl);
        }
        Ok(written)
    }
}

/// The subscribers table's deprovisioning index: the licenses in their flush window.
#[derive(Debug, Default)]
pub struct MemoryDeprovisioningIndex {
    entries: Mutex<Vec<Deprovisioning>>,
    /// Faults to inject (`active`).
    pub faults: Faults,
}

impl MemoryDeprovisioningIndex {
    /// Put a license in its flush window (replacing an entry for the same license).
    pub fn insert(&self, entry: Deprovisioning) {
        let mut entries = lock(&self.entries);
        entries.retain(|e| e.license_arn != entry.license_arn);
        entries.push(entry);
    }
}

#[async_trait]
impl DeprovisioningIndex for MemoryDeprovisioningIndex {
    async fn active(&self) -> Result<Vec<Deprovisioning>, awsmp_aws::error::StoreError> {
        self.faults.store("active", "subscribers")?;
        Ok(lock(&self.entries).clone())
    }
}
