//! The raw usage table in memory.

use super::lag::{IndexLag, ReadConsistency};
use super::{DEFAULT_PAGE_SIZE, Faults, lock};
use crate::adapters::dynamodb::{
    expire_condition, expire_update, finalize_row_condition, finalize_row_update,
    folded_stamp_condition, folded_stamp_update,
};
use crate::domain::fold::{RowShape, UsageRow, late_difference};
use crate::error::{PipelineError, Result};
use crate::ports::{ExpiredRow, FoldedFinalize, UsageStore};
use async_trait::async_trait;
use awsmp_contract::attrs as a;
use awsmp_contract::condition::Condition;
use awsmp_contract::keys::{GroupKey, HourBucket, RowKey, split_usage_sort_key};
use awsmp_contract::row::{AttrValue, RawUsageRow, parse_non_negative_integer};
use awsmp_contract::status::RawStatus;
use awsmp_contract::update::Update;
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Mutex;

/// The raw usage table: rows by primary key, in sort-key order within a license as DynamoDB
/// returns them. The sparse `metering_pending` index holds exactly the rows whose
/// `meteringPending` is a string (the hour bucket), and is read page by page; like the GSI it
/// plays it is eventually consistent under a [`ReadConsistency`] knob (default consistent),
/// while the group reads by key prefix are consistent, as the DynamoDB adapter asks.
#[derive(Debug)]
pub struct MemoryUsageStore {
    table: String,
    rows: Mutex<Rows>,
    lag: Mutex<IndexLag<RowKey, RawUsageRow>>,
    page_size: usize,
    /// Faults to inject, by [`UsageStore`] method name.
    pub faults: Faults,
}

impl MemoryUsageStore {
    /// An empty table named `table` (the name appears in errors).
    pub fn new(table: impl Into<String>) -> Self {
        Self {
            table: table.into(),
            rows: Mutex::new(Rows::default()),
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

    /// Write a row as the consumer does (a whole item, replacing any row with its key).
    /// A row without a string `licenseArn` and sort key has no primary key and is refused.
    pub fn put_row(&self, row: RawUsageRow) -> bool {
        let Some(key) = row_key(&row) else {
            return false;
        };
        let mut rows = lock(&self.rows);
        lock(&self.lag).before_write(&key, rows.by_key.get(&key));
        rows.put(key, row);
        true
    }

    /// The row stored under `key`.
    pub fn row(&self, key: &RowKey) -> Option<RawUsageRow> {
        lock(&self.rows).by_key.get(key).cloned()
    }

    /// Every row, in key order.
    pub fn rows(&self) -> Vec<RawUsageRow> {
        lock(&self.rows).by_key.values().cloned().collect()
    }

    /// Whether any row has a `meteringPending` attribute.
    pub fn any_pending(&self) -> bool {
        lock(&self.rows)
            .by_key
            .values()
            .any(|r| r.contains_key(a::METERING_PENDING))
    }

    /// Every row of `license` whose sort key starts with `prefix`, in key order (a
    /// `begins_with` query, read consistently).
    pub fn rows_with_prefix(&self, license: &str, prefix: &str) -> Vec<RawUsageRow> {
        lock(&self.rows)
            .with_prefix(license, prefix)
            .map(|(_, r)| r.clone())
            .collect()
    }

    /// One page of the pending index for `bucket` (optionally one license), after `start`,
    /// over one index read's `view`: the page and the key to continue from, like
    /// `LastEvaluatedKey`.
    fn index_page(
        &self,
        view: &BTreeMap<RowKey, RawUsageRow>,
        bucket: HourBucket,
        license: Option<&str>,
        start: Option<&RowKey>,
    ) -> (Vec<RawUsageRow>, Option<RowKey>) {
        let hb = bucket.to_string();
        let from = start.map_or(Bound::Unbounded, Bound::Excluded);
        let mut page = Vec::new();
        for (key, row) in view.range((from, Bound::Unbounded)) {
            let in_index = row.get(a::METERING_PENDING).and_then(AttrValue::as_s) == Some(&hb);
            if in_index && license.is_none_or(|l| l == key.license_arn) {
                page.push(row.clone());
                if page.len() == self.page_size {
                    return (page, Some(key.clone()));
                }
            }
        }
        (page, None)
    }

    /// Every item of the pending index for `bucket`, page by page (one index read).
    fn index_items(&self, bucket: HourBucket, license: Option<&str>) -> Vec<RawUsageRow> {
        let hb = bucket.to_string();
        let view = {
            let rows = lock(&self.rows);
            let indexed = rows.pending.get(&hb).into_iter().flatten();
            let in_index = |r: &RawUsageRow| pending_bucket(r) == Some(hb.as_str());
            lock(&self.lag).view(&rows.by_key, indexed, in_index)
        };
        let mut out = Vec::new();
        let mut start = None;
        loop {
            let (page, next) = self.index_page(&view, bucket, license, start.as_ref());
            out.extend(page);
            match next {
                Some(key) => start = Some(key),
                None => return out,
            }
        }
    }

    /// Apply `update` — the one the DynamoDB adapter sends for this write — to the row at
    /// `key` if `condition` (the adapter's too) holds for it: the row as updated, or `None`
    /// where the condition fails (DynamoDB's failed condition). Every stamp's condition
    /// requires the row, so none creates one.
    fn update_if(
        &self,
        key: &RowKey,
        condition: &Condition,
        update: &Update,
    ) -> Result<Option<RawUsageRow>> {
        let mut rows = lock(&self.rows);
        if !rows
            .by_key
            .get(key)
            .is_some_and(|r| condition.holds_for(Some(r)))
        {
            return Ok(None);
        }
        self.apply_to(&mut rows, key, update)
    }

    /// Apply `update` to the row at `key` in `rows` (the table, locked), if there is one: the
    /// row as updated. All or nothing, as in DynamoDB: an update it would refuse is an error
    /// and changes nothing.
    fn apply_to(
        &self,
        rows: &mut Rows,
        key: &RowKey,
        update: &Update,
    ) -> Result<Option<RawUsageRow>> {
        let Some(row) = rows.by_key.get(key) else {
            return Ok(None);
        };
        let mut updated = row.clone();
        update.apply(&mut updated)?;
        lock(&self.lag).before_write(key, Some(row));
        rows.put(key.clone(), updated.clone());
        Ok(Some(updated))
    }
}

/// The string `meteringPending` of a row: the bucket whose sparse index holds it.
fn pending_bucket(row: &RawUsageRow) -> Option<&str> {
    row.get(a::METERING_PENDING).and_then(AttrValue::as_s)
}

/// The rows by primary key, and the sparse pending index over them (the keys of the rows
/// whose `meteringPending` is a string, by that string), kept in step on every write.
#[derive(Debug, Default)]
struct Rows {
    by_key: BTreeMap<RowKey, RawUsageRow>,
    pending: BTreeMap<String, BTreeSet<RowKey>>,
}

impl Rows {
    fn unindex(&mut self, key: &RowKey) {
        let Some(hb) = self.by_key.get(key).and_then(pending_bucket) else {
            return;
        };
        if let Some(keys) = self.pending.get_mut(hb) {
            keys.remove(key);
            if keys.is_empty() {
                let hb = hb.to_owned();
                self.pending.remove(&hb);
            }
        }
    }

    fn reindex(&mut self, key: &RowKey) {
        if let Some(hb) = self.by_key.get(key).and_then(pending_bucket) {
            self.pending
                .entry(hb.to_owned())
                .or_default()
                .insert(key.clone());
        }
    }

    fn put(&mut self, key: RowKey, row: RawUsageRow) {
        self.unindex(&key);
        self.by_key.insert(key.clone(), row);
        self.reindex(&key);
    }

    /// The rows of `license` whose sort key starts with `prefix`, in key order.
    fn with_prefix<'a>(
        &'a self,
        license: &'a str,
        prefix: &'a str,
    ) -> impl Iterator<Item = (&'a RowKey, &'a RawUsageRow)> + 'a {
        let from = RowKey {
            license_arn: license.to_owned(),
            sort_key: prefix.to_owned(),
        };
        self.by_key
            .range(from..)
            .take_while(move |(k, _)| k.license_arn == license && k.sort_key.starts_with(prefix))
    }
}

fn row_key(row: &RawUsageRow) -> Option<RowKey> {
    Some(RowKey {
        license_arn: row.get(a::LICENSE_ARN)?.as_s()?.to_owned(),
        sort_key: row.get(a::USAGE_SORT_KEY)?.as_s()?.to_owned(),
    })
}

/// The group a pending index item names, as the DynamoDB adapter derives it: from the sort
/// key's segments, or from the attributes when the key does not split.
fn group_of(row: &RawUsageRow, bucket: HourBucket) -> Option<GroupKey> {
    let get = |k: &str| row.get(k).and_then(AttrValue::as_s).map(str::to_owned);
    let sk = get(a::USAGE_SORT_KEY).unwrap_or_default();
    let (account, dimension) = match split_usage_sort_key(&sk) {
        Some(segs) => (
            Some(segs.account.to_owned()),
            Some(segs.dimension.to_owned()),
        ),
        None => (get(a::CUSTOMER_AWS_ACCOUNT_ID), get(a::DIMENSION)),
    };
    Some(GroupKey {
        license_arn: get(a::LICENSE_ARN)?,
        customer_aws_account_id: account?,
        dimension: dimension?,
        hour: bucket,
    })
}

#[async_trait]
impl UsageStore for MemoryUsageStore {
    async fn pending_groups(
        &self,
        bucket: HourBucket,
        license: Option<&str>,
    ) -> Result<Vec<GroupKey>> {
        self.faults.dynamodb("pending_groups", &self.table)?;
        let groups: BTreeSet<GroupKey> = self
            .index_items(bucket, license)
            .iter()
            .filter_map(|row| group_of(row, bucket))
            .collect();
        Ok(groups.into_iter().collect())
    }

    async fn read_pending_rows(
        &self,
        group: &GroupKey,
        each: &mut (dyn FnMut(UsageRow) + Send),
    ) -> Result<()> {
        self.faults.dynamodb("read_pending_rows", &self.table)?;
        // The same prefix as the DynamoDB adapter: without the trailing ':', so malformed
        // timestamps of this hour are read (and rejected) too.
        let prefix = group.usage_prefix();
        let prefix = prefix.trim_end_matches(':');
        let by_prefix: Vec<RawUsageRow> = lock(&self.rows)
            .with_prefix(&group.license_arn, prefix)
            .filter(|(_, r)| r.contains_key(a::METERING_PENDING))
            .map(|(_, r)| r.clone())
            .collect();
        // Conforming rows compacted, as the DynamoDB adapter hands them.
        let shape = RowShape::of(group);
        for row in by_prefix {
            each(RowShape::usage_row(shape.as_ref(), row));
        }
        // Rows whose key does not split but whose attributes name this group: found through
        // the index, as the DynamoDB adapter finds them.
        let attr = |r: &RawUsageRow, k: &str| r.get(k).and_then(AttrValue::as_s).map(str::to_owned);
        // The index names them; each is then read by key, consistently, and kept only while
        // still pending (the index may lag).
        for indexed in self.index_items(group.hour, Some(&group.license_arn)) {
            let sk = attr(&indexed, a::USAGE_SORT_KEY).unwrap_or_default();
            let names_group = attr(&indexed, a::CUSTOMER_AWS_ACCOUNT_ID).as_deref()
                == Some(&group.customer_aws_account_id)
                && attr(&indexed, a::DIMENSION).as_deref() == Some(&group.dimension);
            if !names_group || split_usage_sort_key(&sk).is_some() || sk.starts_with(prefix) {
                continue;
            }
            let current = row_key(&indexed).and_then(|k| self.row(&k));
            if let Some(row) = current.filter(|r| r.contains_key(a::METERING_PENDING)) {
                each(UsageRow::Raw(row));
            }
        }
        Ok(())
    }

    async fn finalize_row(
        &self,
        key: &RowKey,
        status: Option<(RawStatus, &str)>,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        self.faults.dynamodb("finalize_row", &self.table)?;
        let stamp = finalize_row_update(status, now);
        Ok(self
            .update_if(key, &finalize_row_condition(), &stamp)?
            .is_some())
    }

    async fn finalize_folded(
        &self,
        key: &RowKey,
        folded: u64,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<FoldedFinalize> {
        // The same `UpdateItem` stamp as `finalize_row`, so faults are injected under its name.
        self.faults.dynamodb("finalize_row", &self.table)?;
        let mut rows = lock(&self.rows);
        let Some(row) = rows.by_key.get(key) else {
            return Ok(FoldedFinalize::Gone);
        };
        // The adapter's stamp, conditioned on the quantity as read (under this lock the row
        // cannot change between the read and the stamp): only a late record fails it.
        if !folded_stamp_condition(row.get(a::QUANTITY)).holds_for(Some(row)) {
            let late = row
                .get(a::LATE_QUANTITY)
                .and_then(AttrValue::as_n)
                .and_then(|q| parse_non_negative_integer(q).ok());
            return match late {
                Some(quantity) => Ok(FoldedFinalize::Late {
                    quantity,
                    recorded_now: false,
                }),
                // The adapter would re-read and fail the same way until it gives up.
                None => Err(PipelineError::MalformedItem {
                    table: self.table.clone(),
                    detail: format!("{}: unreadable late record", key.sort_key),
                }),
            };
        }
        // The adapter's difference, from the row as read.
        let late = late_difference(folded, row).filter(|late| *late > 0);
        let stamp = folded_stamp_update(reason, folded, late, now);
        Ok(match (self.apply_to(&mut rows, key, &stamp)?, late) {
            (None, _) => FoldedFinalize::Gone,
            (Some(_), None) => FoldedFinalize::Stamped,
            (Some(_), Some(quantity)) => FoldedFinalize::Late {
                quantity,
                recorded_now: true,
            },
        })
    }

    async fn expire_bucket(
        &self,
        bucket: HourBucket,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<Vec<ExpiredRow>> {
        self.faults.dynamodb("expire_bucket", &self.table)?;
        let mut expired = Vec::new();
        let (still_pending, stamp) = (expire_condition(bucket), expire_update(reason, now));
        for item in self.index_items(bucket, None) {
            let Some(key) = row_key(&item) else { continue };
            if let Some(row) = self.update_if(&key, &still_pending, &stamp)? {
                let quantity = row
                    .get(a::QUANTITY)
                    .and_then(AttrValue::as_n)
                    .and_then(|q| parse_non_negative_integer(q).ok());
                expired.push(ExpiredRow { key, quantity });
            }
        }
        Ok(expired)
    }
}
