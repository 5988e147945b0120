//! The aggregated-usage table and the subscribers' deprovisioning index in memory.

use super::lag::{IndexLag, ReadConsistency};
use super::{DEFAULT_PAGE_SIZE, Faults, lock};
use crate::adapters::dynamodb::{
    aggregated_attrs, aggregated_from_attrs, aggregated_put_attrs, mark_attempted_condition,
    mark_attempted_update, put_if_absent_condition, retract_attempt_condition,
    retract_attempt_update, write_back_condition, write_back_update,
};
use crate::error::Result;
use crate::ports::{AggregatedItem, AggregatedStore, WriteBack};
use async_trait::async_trait;
use awsmp_aws::deprovisioning::{Deprovisioning, DeprovisioningIndex};
use awsmp_contract::attrs as a;
use awsmp_contract::condition::{Condition, Item};
use awsmp_contract::keys::{GroupKey, HourBucket};
use awsmp_contract::update::Update;
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Mutex;

/// Primary key of an aggregated record: `licenseArn`, `account_dimension_hour`.
type Key = (String, String);

fn key(group: &GroupKey) -> Key {
    (group.license_arn.clone(), group.aggregated_sort_key())
}

/// The aggregated-usage table: one record per group-hour, the first put wins. Each record is
/// stored as the attributes the DynamoDB adapter's writes leave (its put's, then each update
/// applied: the same [`Update`] values the adapter sends, where the same conditions hold), and
/// read back through the adapter's parser. Its pending index (a GSI) is eventually consistent
/// under a [`ReadConsistency`] knob; `get` is a consistent read.
#[derive(Debug)]
pub struct MemoryAggregatedStore {
    table: String,
    items: Mutex<Items>,
    lag: Mutex<IndexLag<Key, AggregatedItem>>,
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
        let attrs = aggregated_attrs(&item, DateTime::<Utc>::UNIX_EPOCH);
        items.put(k, attrs, item);
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
        let items = lock(&self.items);
        let ttl = items.attrs.get(&key(group))?.get(a::TTL)?;
        ttl.as_n()?.parse().ok()
    }

    /// The attributes stored for `group`'s record, binaries aside: what the DynamoDB adapter's
    /// writes leave on its item.
    pub fn attributes(&self, group: &GroupKey) -> Option<Item> {
        lock(&self.items).attrs.get(&key(group)).cloned()
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

    /// Apply `update` to `group`'s stored attributes if `condition` holds for them — the
    /// update and condition the DynamoDB adapter sends for this write — and read the record
    /// back from them as the adapter would; false where the condition fails. Every update
    /// condition requires a pending record, so an update never creates one here, nor in
    /// DynamoDB. An update DynamoDB would refuse is an error and changes nothing.
    fn update_if(&self, group: &GroupKey, condition: &Condition, update: &Update) -> Result<bool> {
        let mut items = lock(&self.items);
        let k = key(group);
        let (Some(attrs), Some(record)) = (items.attrs.get(&k), items.by_key.get(&k)) else {
            return Ok(false);
        };
        if !condition.holds_for(Some(attrs)) {
            return Ok(false);
        }
        let mut updated = attrs.clone();
        update.apply(&mut updated)?;
        let read = read_back(&self.table, &updated, record)?;
        lock(&self.lag).before_write(&k, Some(record));
        items.put(k, updated, read);
        Ok(true)
    }
}

/// The record `attrs` hold, read by the DynamoDB adapter's parser, with the binaries of
/// `binaries` (which no update changes).
fn read_back(table: &str, attrs: &Item, binaries: &AggregatedItem) -> Result<AggregatedItem> {
    Ok(AggregatedItem {
        contributed_seconds: binaries.contributed_seconds.clone(),
        contributed_quantities: binaries.contributed_quantities.clone(),
        ..aggregated_from_attrs(table, attrs)?
    })
}

/// The records by primary key — each one's stored attributes and the record they read back
/// as — and the sparse pending index over them (the keys of the pending records, by hour
/// bucket), kept in step on every write.
#[derive(Debug, Default)]
struct Items {
    attrs: BTreeMap<Key, Item>,
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

    /// Store `attrs` under `k`, read back as `record`.
    fn put(&mut self, k: Key, attrs: Item, record: AggregatedItem) {
        self.unindex(&k);
        self.attrs.insert(k.clone(), attrs);
        self.by_key.insert(k.clone(), record);
        self.reindex(&k);
    }
}

#[async_trait]
impl AggregatedStore for MemoryAggregatedStore {
    async fn put_if_absent(&self, item: &AggregatedItem, now: DateTime<Utc>) -> Result<bool> {
        self.faults.dynamodb("put_if_absent", &self.table)?;
        let mut items = lock(&self.items);
        let k = key(&item.group);
        if !put_if_absent_condition().holds_for(items.attrs.get(&k)) {
            return Ok(false);
        }
        // The adapter's item: no outcome and no attempt yet.
        let attrs = aggregated_put_attrs(item, now);
        let stored = read_back(&self.table, &attrs, item)?;
        lock(&self.lag).before_write(&k, None);
        items.put(k, attrs, stored);
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
        self.update_if(
            group,
            &mark_attempted_condition(),
            &mark_attempted_update(quantity, now),
        )
    }

    async fn retract_attempt(
        &self,
        group: &GroupKey,
        quantity: u64,
        previous: Option<u64>,
        now: DateTime<Utc>,
    ) -> Result<()> {
        self.faults.dynamodb("retract_attempt", &self.table)?;
        self.update_if(
            group,
            &retract_attempt_condition(quantity),
            &retract_attempt_update(previous, now),
        )?;
        Ok(())
    }

    async fn write_back(
        &self,
        group: &GroupKey,
        outcome: &WriteBack,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        self.faults.dynamodb("write_back", &self.table)?;
        self.update_if(
            group,
            &write_back_condition(outcome.if_attempt),
            &write_back_update(outcome, now),
        )
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
