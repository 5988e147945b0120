//! The raw usage table.

use super::convert::usage_row_from_owned_item;
use super::errors::{ddb_err, malformed};
use super::folded::FoldedStamp;
use super::pending::query_pending_index;
use crate::adapters::pages::{Page, prefetched};
use crate::domain::fold::{RowShape, UsageRow};
use crate::error::Result;
use crate::ports::{ExpiredRow, FoldedFinalize, UsageStore};
use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue as Av, ReturnValue};
use awsmp_aws::dynamodb::{WithUpdate, is_conditional_failure};
use awsmp_aws::dynamodb::{row_from_item, s};
use awsmp_contract::attrs as a;
use awsmp_contract::condition::{Attr, Condition, Value};
use awsmp_contract::keys::{GroupKey, HourBucket, RowKey, split_usage_sort_key};
use awsmp_contract::row::parse_non_negative_integer;
use awsmp_contract::status::RawStatus;
use awsmp_contract::update::Update;
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use std::collections::{BTreeSet, HashMap};

/// A DynamoDB `LastEvaluatedKey` / `ExclusiveStartKey`.
type Key = HashMap<String, Av>;

/// The raw usage table.
#[derive(Debug, Clone)]
pub struct DynamoDbUsageStore {
    client: Client,
    table: String,
}

impl DynamoDbUsageStore {
    /// Over `table`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }

    /// Every item of the sparse index in `bucket` (paginated), optionally for one license.
    async fn pending_index_items(
        &self,
        bucket: HourBucket,
        license: Option<&str>,
    ) -> Result<Vec<HashMap<String, Av>>> {
        query_pending_index(&self.client, &self.table, bucket, license).await
    }
}

impl DynamoDbUsageStore {
    /// One page of `group`'s consistent `begins_with` query per call, starting after the
    /// key it is given (`None`: the first page), its items converted to rows.
    fn pending_rows_pager(
        &self,
        group: &GroupKey,
    ) -> impl FnMut(Option<Key>) -> BoxFuture<'static, Result<Page<UsageRow, Key>>> + use<> {
        let (client, table) = (self.client.clone(), self.table.clone());
        let license = group.license_arn.clone();
        let shape = RowShape::of(group);
        // Without the trailing ':' so hour-truncated and other malformed timestamps of this
        // hour are read too, and rejected with a reason instead of sitting pending.
        let prefix = group.usage_prefix().trim_end_matches(':').to_owned();
        move |start| {
            let request = client
                .query()
                .table_name(&table)
                .key_condition_expression("licenseArn = :la AND begins_with(#sk, :prefix)")
                .filter_expression("attribute_exists(meteringPending)")
                .expression_attribute_names("#sk", a::USAGE_SORT_KEY)
                .expression_attribute_values(":la", s(&license))
                .expression_attribute_values(":prefix", s(&prefix))
                .consistent_read(true)
                .set_exclusive_start_key(start);
            let (table, shape) = (table.clone(), shape.clone());
            Box::pin(async move {
                let page = request
                    .send()
                    .await
                    .map_err(|e| ddb_err("Query", &table, e))?;
                // The page is ours: a conforming item is compacted (nothing kept), any other
                // moves its names and values into a row, uncopied.
                let items = page.items.unwrap_or_default();
                let row = |item| usage_row_from_owned_item(shape.as_ref(), item);
                Ok(Page {
                    items: items.into_iter().map(row).collect(),
                    next: page.last_evaluated_key,
                })
            })
        }
    }
}

impl DynamoDbUsageStore {
    /// Pending rows of `group`'s license and hour whose sort key does not split into
    /// `account#dimension#timestamp` but whose attributes name this group. No `begins_with`
    /// prefix can reach them; the discoverer keys them by their attributes, so they are found
    /// the same way (the sparse index, this license and hour) and handed to the fold, which
    /// rejects the group with `MalformedSortKey` rather than letting them age out.
    async fn read_malformed_key_rows(
        &self,
        group: &GroupKey,
        each: &mut (dyn FnMut(UsageRow) + Send),
    ) -> Result<()> {
        let mut start = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(a::METERING_PENDING_INDEX)
                .key_condition_expression("meteringPending = :hb AND licenseArn = :la")
                .filter_expression(
                    "#acct = :acct AND #dim = :dim AND NOT begins_with(#sk, :prefix)",
                )
                .expression_attribute_names("#acct", a::CUSTOMER_AWS_ACCOUNT_ID)
                .expression_attribute_names("#dim", a::DIMENSION)
                .expression_attribute_names("#sk", a::USAGE_SORT_KEY)
                .expression_attribute_values(":hb", s(group.hour.to_string()))
                .expression_attribute_values(":la", s(&group.license_arn))
                .expression_attribute_values(":acct", s(&group.customer_aws_account_id))
                .expression_attribute_values(":dim", s(&group.dimension))
                .expression_attribute_values(
                    ":prefix",
                    s(group.usage_prefix().trim_end_matches(':')),
                )
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| ddb_err("Query", &self.table, e))?;
            for item in page.items() {
                let Some(Av::S(sk)) = item.get(a::USAGE_SORT_KEY) else {
                    continue;
                };
                // A well-formed key belongs to the group it names, which reads it by prefix.
                if split_usage_sort_key(sk).is_some() {
                    continue;
                }
                let full = self
                    .client
                    .get_item()
                    .table_name(&self.table)
                    .key(a::LICENSE_ARN, s(&group.license_arn))
                    .key(a::USAGE_SORT_KEY, s(sk))
                    .consistent_read(true)
                    .send()
                    .await
                    .map_err(|e| ddb_err("GetItem", &self.table, e))?;
                if let Some(row) = full.item.filter(|r| r.contains_key(a::METERING_PENDING)) {
                    each(UsageRow::Raw(row_from_item(&row)));
                }
            }
            start = page.last_evaluated_key;
            if start.is_none() {
                return Ok(());
            }
        }
    }
}

/// A stamp's condition: the row exists (`UpdateItem` on a missing key would insert a phantom
/// row).
pub fn finalize_row_condition() -> Condition {
    Condition::exists(Attr::bare(a::LICENSE_ARN))
}

/// Age-out's condition: the row is still pending in this very bucket (a concurrent
/// aggregation wins).
pub fn expire_condition(bucket: HourBucket) -> Condition {
    Condition::eq(
        Attr::bare(a::METERING_PENDING),
        Value::s(":hb", bucket.to_string()),
    )
}

/// A row stamp's update: out of the pending index, with `status` and its reason if given, and
/// the audit timestamps (`createdAt` only where the consumer left none).
pub fn finalize_row_update(status: Option<(RawStatus, &str)>, now: DateTime<Utc>) -> Update {
    let mut update = Update::new().remove(Attr::bare(a::METERING_PENDING));
    if let Some((st, reason)) = status {
        update = update
            .set(Attr::bare(a::METERING_STATUS), Value::s(":st", st.as_str()))
            .set(
                Attr::bare(a::METERING_STATUS_REASON),
                Value::s(":r", reason),
            );
    }
    let now = Value::s(":now", a::audit_timestamp(now));
    update
        .set(Attr::bare(a::UPDATED_AT), now.clone())
        .set_if_not_exists(Attr::bare(a::CREATED_AT), now)
}

/// Age-out's update: the row stamped `AggregationExpired` with `reason`.
pub fn expire_update(reason: &str, now: DateTime<Utc>) -> Update {
    finalize_row_update(Some((RawStatus::AggregationExpired, reason)), now)
}

#[async_trait]
impl UsageStore for DynamoDbUsageStore {
    async fn pending_groups(
        &self,
        bucket: HourBucket,
        license: Option<&str>,
    ) -> Result<Vec<GroupKey>> {
        let mut groups = BTreeSet::new();
        for item in self.pending_index_items(bucket, license).await? {
            let get = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned();
            // The group is what the sort key names, because the aggregator reads the group by
            // sort-key prefix: a row whose attributes disagree with its key (or are missing)
            // is then read and rejected with a reason (SortKeyMismatch, Missing*) instead of
            // sitting pending. Only a key without three segments falls back to the
            // attributes; the aggregator finds such rows through the index.
            let sk = get(a::USAGE_SORT_KEY).unwrap_or_default();
            let (account, dimension) = match split_usage_sort_key(&sk) {
                Some(segs) => (
                    Some(segs.account.to_owned()),
                    Some(segs.dimension.to_owned()),
                ),
                None => (get(a::CUSTOMER_AWS_ACCOUNT_ID), get(a::DIMENSION)),
            };
            let (Some(license), Some(account), Some(dimension)) =
                (get(a::LICENSE_ARN), account, dimension)
            else {
                tracing::warn!(table = %self.table, sort_key = %sk, "pending row with no group identity; left for age-out");
                continue;
            };
            groups.insert(GroupKey {
                license_arn: license,
                customer_aws_account_id: account,
                dimension,
                hour: bucket,
            });
        }
        Ok(groups.into_iter().collect())
    }

    async fn read_pending_rows(
        &self,
        group: &GroupKey,
        each: &mut (dyn FnMut(UsageRow) + Send),
    ) -> Result<()> {
        // Page N+1 is fetched (and converted) while page N is folded: the same query, the
        // same pages, only the wait overlaps (pipeline/src/adapters/pages.rs).
        prefetched(self.pending_rows_pager(group), &mut *each).await?;
        self.read_malformed_key_rows(group, each).await
    }

    async fn finalize_row(
        &self,
        key: &RowKey,
        status: Option<(RawStatus, &str)>,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let req = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(a::LICENSE_ARN, s(&key.license_arn))
            .key(a::USAGE_SORT_KEY, s(&key.sort_key))
            .with_update(&finalize_row_update(status, now), &finalize_row_condition());
        match req.send().await {
            Ok(_) => Ok(true),
            Err(e) if is_conditional_failure(&e) => Ok(false),
            Err(e) => Err(ddb_err("UpdateItem", &self.table, e)),
        }
    }

    async fn finalize_folded(
        &self,
        key: &RowKey,
        folded: u64,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<FoldedFinalize> {
        FoldedStamp {
            client: &self.client,
            table: &self.table,
            key,
            folded,
            reason,
            now,
        }
        .run()
        .await
    }

    async fn expire_bucket(
        &self,
        bucket: HourBucket,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<Vec<ExpiredRow>> {
        let mut expired = Vec::new();
        for item in self.pending_index_items(bucket, None).await? {
            let (Some(Av::S(license)), Some(Av::S(sk))) =
                (item.get(a::LICENSE_ARN), item.get(a::USAGE_SORT_KEY))
            else {
                return Err(malformed(&self.table, "index item without its key"));
            };
            let key = RowKey {
                license_arn: license.clone(),
                sort_key: sk.clone(),
            };
            let res = self
                .client
                .update_item()
                .table_name(&self.table)
                .key(a::LICENSE_ARN, s(license))
                .key(a::USAGE_SORT_KEY, s(sk))
                .with_update(&expire_update(reason, now), &expire_condition(bucket))
                .return_values(ReturnValue::AllNew)
                .send()
                .await;
            match res {
                Ok(out) => {
                    let quantity = out
                        .attributes
                        .as_ref()
                        .and_then(|at| at.get(a::QUANTITY))
                        .and_then(|q| q.as_n().ok())
                        .and_then(|q| parse_non_negative_integer(q).ok());
                    expired.push(ExpiredRow { key, quantity });
                }
                Err(e) if is_conditional_failure(&e) => {}
                Err(e) => return Err(ddb_err("UpdateItem", &self.table, e)),
            }
        }
        Ok(expired)
    }
}
