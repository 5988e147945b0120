//! DynamoDB adapters: the usage table, the aggregated-usage table and the subscribers'
//! deprovisioning index. Each holds only a client and a table name; conversion between the
//! SDK's `AttributeValue` and the domain's [`AttrValue`] lives here.

use crate::contract::attrs as a;
use crate::contract::status::{AggregatedStatus, RawStatus};
use crate::domain::keys::{
    GroupKey, HourBucket, RowKey, parse_aggregated_sort_key, split_usage_sort_key,
};
use crate::domain::row::{Allocation, AttrValue, RawUsageRow, Tag, parse_non_negative_integer};
use crate::error::{PipelineError, Result};
use crate::ports::{
    AggregatedItem, AggregatedStore, Deprovisioning, DeprovisioningIndex, ExpiredRow, UsageStore,
    WriteBack,
};
use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{AttributeValue as Av, ReturnValue};
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Convert an SDK attribute value to the domain's.
pub fn to_domain(av: &Av) -> AttrValue {
    match av {
        Av::S(s) => AttrValue::S(s.clone()),
        Av::N(n) => AttrValue::N(n.clone()),
        Av::Bool(b) => AttrValue::Bool(*b),
        Av::Null(_) => AttrValue::Null,
        Av::L(l) => AttrValue::L(l.iter().map(to_domain).collect()),
        Av::M(m) => AttrValue::M(m.iter().map(|(k, v)| (k.clone(), to_domain(v))).collect()),
        _ => AttrValue::Other,
    }
}

/// Convert a domain attribute value to the SDK's. `Other` has no faithful SDK form and
/// becomes NULL; the pipeline never writes it.
pub fn to_sdk(v: &AttrValue) -> Av {
    match v {
        AttrValue::S(s) => Av::S(s.clone()),
        AttrValue::N(n) => Av::N(n.clone()),
        AttrValue::Bool(b) => Av::Bool(*b),
        AttrValue::Null | AttrValue::Other => Av::Null(true),
        AttrValue::L(l) => Av::L(l.iter().map(to_sdk).collect()),
        AttrValue::M(m) => Av::M(m.iter().map(|(k, v)| (k.clone(), to_sdk(v))).collect()),
    }
}

/// A row (SDK item) in domain form.
pub fn row_from_item(item: &HashMap<String, Av>) -> RawUsageRow {
    item.iter()
        .map(|(k, v)| (k.clone(), to_domain(v)))
        .collect()
}

fn s(v: impl Into<String>) -> Av {
    Av::S(v.into())
}

fn n(v: impl ToString) -> Av {
    Av::N(v.to_string())
}

/// True when `e` is DynamoDB's `ConditionalCheckFailedException` (an expected outcome of a
/// conditional write, never an error to retry).
pub fn is_conditional_failure<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> bool {
    e.as_service_error().and_then(|s| s.code()) == Some("ConditionalCheckFailedException")
}

/// True when a failed DynamoDB call may succeed if retried: throttling, 5xx, transport.
pub fn is_retryable<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> bool {
    match e {
        SdkError::ServiceError(se) => matches!(
            se.err().code(),
            Some(
                "ProvisionedThroughputExceededException"
                    | "ThrottlingException"
                    | "RequestLimitExceeded"
                    | "InternalServerError"
                    | "ServiceUnavailable"
                    | "LimitExceededException"
                    | "TransactionConflictException"
            )
        ),
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            true
        }
        _ => false,
    }
}

fn ddb_err<E, R>(operation: &'static str, resource: &str, e: SdkError<E, R>) -> PipelineError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    PipelineError::DynamoDb {
        operation,
        resource: resource.to_owned(),
        retryable: is_retryable(&e),
        source: Box::new(e),
    }
}

fn malformed(table: &str, detail: impl Into<String>) -> PipelineError {
    PipelineError::MalformedItem {
        table: table.to_owned(),
        detail: detail.into(),
    }
}

/// Every item of `table`'s sparse `metering_pending` index in `bucket` (paginated), optionally
/// only one license's (the index sort key).
async fn query_pending_index(
    client: &Client,
    table: &str,
    bucket: HourBucket,
    license: Option<&str>,
) -> Result<Vec<HashMap<String, Av>>> {
    let mut out = Vec::new();
    let mut start = None;
    loop {
        let mut q = client
            .query()
            .table_name(table)
            .index_name(a::METERING_PENDING_INDEX)
            .expression_attribute_values(":hb", s(bucket.to_string()))
            .set_exclusive_start_key(start);
        q = match license {
            Some(l) => q
                .key_condition_expression("meteringPending = :hb AND licenseArn = :la")
                .expression_attribute_values(":la", s(l)),
            None => q.key_condition_expression("meteringPending = :hb"),
        };
        let page = q.send().await.map_err(|e| ddb_err("Query", table, e))?;
        out.extend(page.items.unwrap_or_default());
        start = page.last_evaluated_key;
        if start.is_none() {
            return Ok(out);
        }
    }
}

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
    /// Pending rows of `group`'s license and hour whose sort key does not split into
    /// `account#dimension#timestamp` but whose attributes name this group. No `begins_with`
    /// prefix can reach them; the discoverer keys them by their attributes, so they are found
    /// the same way (the sparse index, this license and hour) and handed to the fold, which
    /// rejects the group with `MalformedSortKey` rather than letting them age out.
    async fn read_malformed_key_rows(
        &self,
        group: &GroupKey,
        each: &mut (dyn FnMut(RawUsageRow) + Send),
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
                    each(row_from_item(&row));
                }
            }
            start = page.last_evaluated_key;
            if start.is_none() {
                return Ok(());
            }
        }
    }
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
        each: &mut (dyn FnMut(RawUsageRow) + Send),
    ) -> Result<()> {
        let mut start = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("licenseArn = :la AND begins_with(#sk, :prefix)")
                .filter_expression("attribute_exists(meteringPending)")
                .expression_attribute_names("#sk", a::USAGE_SORT_KEY)
                .expression_attribute_values(":la", s(&group.license_arn))
                // Without the trailing ':' so hour-truncated and other malformed timestamps of this
                // hour are read too, and rejected with a reason instead of sitting pending.
                .expression_attribute_values(
                    ":prefix",
                    s(group.usage_prefix().trim_end_matches(':')),
                )
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| ddb_err("Query", &self.table, e))?;
            for item in page.items() {
                each(row_from_item(item));
            }
            start = page.last_evaluated_key;
            if start.is_none() {
                break;
            }
        }
        self.read_malformed_key_rows(group, each).await
    }

    async fn finalize_row(
        &self,
        key: &RowKey,
        status: Option<(RawStatus, &str)>,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let mut req = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(a::LICENSE_ARN, s(&key.license_arn))
            .key(a::USAGE_SORT_KEY, s(&key.sort_key))
            // Never create a phantom row: UpdateItem on a missing key would insert one.
            .condition_expression("attribute_exists(licenseArn)")
            .expression_attribute_values(":now", s(a::audit_timestamp(now)));
        req = match status {
            Some((st, reason)) => req
                .update_expression(
                    "REMOVE meteringPending SET meteringStatus = :st, meteringStatusReason = :r, \
                     updatedAt = :now, createdAt = if_not_exists(createdAt, :now)",
                )
                .expression_attribute_values(":st", s(st.as_str()))
                .expression_attribute_values(":r", s(reason)),
            None => req.update_expression("REMOVE meteringPending SET updatedAt = :now, createdAt = if_not_exists(createdAt, :now)"),
        };
        match req.send().await {
            Ok(_) => Ok(true),
            Err(e) if is_conditional_failure(&e) => Ok(false),
            Err(e) => Err(ddb_err("UpdateItem", &self.table, e)),
        }
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
                // Only a row still pending in this very bucket: a concurrent aggregation wins.
                .condition_expression("meteringPending = :hb")
                .update_expression(
                    "REMOVE meteringPending SET meteringStatus = :st, meteringStatusReason = :r, \
                     updatedAt = :now, createdAt = if_not_exists(createdAt, :now)",
                )
                .expression_attribute_values(":hb", s(bucket.to_string()))
                .expression_attribute_values(":st", s(RawStatus::AggregationExpired.as_str()))
                .expression_attribute_values(":r", s(reason))
                .expression_attribute_values(":now", s(a::audit_timestamp(now)))
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

/// The aggregated-usage table.
#[derive(Debug, Clone)]
pub struct DynamoDbAggregatedStore {
    client: Client,
    table: String,
}

impl DynamoDbAggregatedStore {
    /// Over `table`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }

    fn key(group: &GroupKey) -> [(String, Av); 2] {
        [
            (a::LICENSE_ARN.to_owned(), s(&group.license_arn)),
            (
                a::AGGREGATED_SORT_KEY.to_owned(),
                s(group.aggregated_sort_key()),
            ),
        ]
    }
}

/// The SDK item for an aggregated record (what the aggregator puts, or a direct-submit seller writes).
pub fn aggregated_to_item(item: &AggregatedItem, now: DateTime<Utc>) -> HashMap<String, Av> {
    let g = &item.group;
    let mut m = HashMap::from([
        (a::LICENSE_ARN.to_owned(), s(&g.license_arn)),
        (
            a::AGGREGATED_SORT_KEY.to_owned(),
            s(g.aggregated_sort_key()),
        ),
        (
            a::CUSTOMER_AWS_ACCOUNT_ID.to_owned(),
            s(&g.customer_aws_account_id),
        ),
        (a::DIMENSION.to_owned(), s(&g.dimension)),
        (a::HOUR_BUCKET.to_owned(), s(g.hour.to_string())),
        (a::QUANTITY.to_owned(), n(item.quantity)),
        (a::ROW_COUNT.to_owned(), n(item.row_count)),
        (a::CREATED_AT.to_owned(), s(a::audit_timestamp(now))),
        (a::UPDATED_AT.to_owned(), s(a::audit_timestamp(now))),
    ]);
    if item.pending {
        m.insert(a::METERING_PENDING.to_owned(), s(g.hour.to_string()));
    }
    if let Some(allocs) = &item.allocations {
        m.insert(
            a::USAGE_ALLOCATIONS.to_owned(),
            Av::L(allocs.iter().map(|al| to_sdk(&al.to_attr())).collect()),
        );
    }
    if !item.contributed_seconds.is_empty() {
        m.insert(
            a::CONTRIBUTED_SECONDS.to_owned(),
            Av::B(Blob::new(item.contributed_seconds.clone())),
        );
    }
    if let Some(ci) = &item.customer_identifier {
        m.insert(a::CUSTOMER_IDENTIFIER.to_owned(), s(ci));
    }
    m
}

/// Parse an aggregated record item.
pub fn aggregated_from_item(table: &str, item: &HashMap<String, Av>) -> Result<AggregatedItem> {
    let str_of = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned();
    let num_of = |k: &str| -> Result<Option<u64>> {
        item.get(k)
            .map(|v| {
                v.as_n()
                    .ok()
                    .and_then(|x| parse_non_negative_integer(x).ok())
                    .ok_or_else(|| malformed(table, format!("{k} is not a non-negative integer")))
            })
            .transpose()
    };
    let license = str_of(a::LICENSE_ARN).ok_or_else(|| malformed(table, "no licenseArn"))?;
    let sk = str_of(a::AGGREGATED_SORT_KEY).ok_or_else(|| malformed(table, "no sort key"))?;
    let (account, dimension, hour) = parse_aggregated_sort_key(&sk)
        .ok_or_else(|| malformed(table, format!("bad sort key {sk:?}")))?;
    let allocations = match item.get(a::USAGE_ALLOCATIONS) {
        None => None,
        Some(Av::L(list)) => Some(
            list.iter()
                .map(|v| {
                    allocation_from(&to_domain(v))
                        .ok_or_else(|| malformed(table, "bad usageAllocations"))
                })
                .collect::<Result<Vec<_>>>()?,
        ),
        Some(_) => return Err(malformed(table, "usageAllocations is not a list")),
    };
    Ok(AggregatedItem {
        group: GroupKey {
            license_arn: license,
            customer_aws_account_id: account.to_owned(),
            dimension: dimension.to_owned(),
            hour,
        },
        quantity: num_of(a::QUANTITY)?.ok_or_else(|| malformed(table, "no quantity"))?,
        allocations,
        row_count: num_of(a::ROW_COUNT)?.unwrap_or(0) as u32,
        contributed_seconds: item
            .get(a::CONTRIBUTED_SECONDS)
            .and_then(|v| v.as_b().ok())
            .map(|b| b.as_ref().to_vec())
            .unwrap_or_default(),
        customer_identifier: str_of(a::CUSTOMER_IDENTIFIER),
        pending: item.contains_key(a::METERING_PENDING),
        status: str_of(a::METERING_STATUS).and_then(|s| s.parse().ok()),
        status_reason: str_of(a::METERING_STATUS_REASON),
        metering_record_id: str_of(a::METERING_RECORD_ID),
        attempted_quantity: num_of(a::ATTEMPTED_QUANTITY)?,
        submission_attempted_at: str_of(a::SUBMISSION_ATTEMPTED_AT)
            .and_then(|t| DateTime::parse_from_rfc3339(&t).ok())
            .map(|t| t.with_timezone(&Utc)),
    })
}

fn allocation_from(v: &AttrValue) -> Option<Allocation> {
    let m = v.as_m()?;
    let quantity = parse_non_negative_integer(m.get(a::ALLOCATED_USAGE_QUANTITY)?.as_n()?).ok()?;
    let tags = match m.get(a::TAGS) {
        None => Vec::new(),
        Some(t) => t
            .as_l()?
            .iter()
            .map(|t| {
                let tm: &BTreeMap<String, AttrValue> = t.as_m()?;
                Some(Tag::new(
                    tm.get(a::TAG_KEY)?.as_s()?,
                    tm.get(a::TAG_VALUE)?.as_s()?,
                ))
            })
            .collect::<Option<Vec<_>>>()?,
    };
    Some(Allocation { quantity, tags })
}

#[async_trait]
impl AggregatedStore for DynamoDbAggregatedStore {
    async fn put_if_absent(&self, item: &AggregatedItem, now: DateTime<Utc>) -> Result<bool> {
        let res = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(aggregated_to_item(item, now)))
            .condition_expression("attribute_not_exists(licenseArn)")
            .send()
            .await;
        match res {
            Ok(_) => Ok(true),
            Err(e) if is_conditional_failure(&e) => Ok(false),
            Err(e) => Err(ddb_err("PutItem", &self.table, e)),
        }
    }

    async fn get(&self, group: &GroupKey) -> Result<Option<AggregatedItem>> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(group).into_iter().collect()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| ddb_err("GetItem", &self.table, e))?;
        out.item
            .as_ref()
            .map(|i| aggregated_from_item(&self.table, i))
            .transpose()
    }

    async fn pending(
        &self,
        bucket: HourBucket,
        license: Option<&str>,
    ) -> Result<Vec<AggregatedItem>> {
        query_pending_index(&self.client, &self.table, bucket, license)
            .await?
            .iter()
            .map(|item| aggregated_from_item(&self.table, item))
            .collect()
    }

    async fn mark_attempted(
        &self,
        group: &GroupKey,
        quantity: u64,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let res = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(group).into_iter().collect()))
            .condition_expression("attribute_exists(meteringPending)")
            .update_expression(
                "SET attemptedQuantity = :q, submissionAttemptedAt = :now, updatedAt = :now",
            )
            .expression_attribute_values(":q", n(quantity))
            .expression_attribute_values(":now", s(a::audit_timestamp(now)))
            .send()
            .await;
        match res {
            Ok(_) => Ok(()),
            Err(e) if is_conditional_failure(&e) => Ok(()),
            Err(e) => Err(ddb_err("UpdateItem", &self.table, e)),
        }
    }

    async fn write_back(
        &self,
        group: &GroupKey,
        outcome: &WriteBack,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let mut sets = vec![
            "meteringStatus = :st",
            "updatedAt = :now",
            "createdAt = if_not_exists(createdAt, :now)",
        ];
        let mut req = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(group).into_iter().collect()))
            .condition_expression("attribute_exists(meteringPending)")
            .expression_attribute_values(":st", s(outcome.status.as_str()))
            .expression_attribute_values(":now", s(a::audit_timestamp(now)));
        if let Some(r) = &outcome.reason {
            sets.push("meteringStatusReason = :r");
            req = req.expression_attribute_values(":r", s(r));
        }
        if let Some(id) = &outcome.metering_record_id {
            sets.push("meteringRecordId = :id");
            req = req.expression_attribute_values(":id", s(id));
        }
        if let Some(ttl) = outcome.ttl {
            sets.push("#ttl = :ttl");
            req = req
                .expression_attribute_names("#ttl", a::TTL)
                .expression_attribute_values(":ttl", n(ttl));
        }
        let res = req
            .update_expression(format!("REMOVE meteringPending SET {}", sets.join(", ")))
            .send()
            .await;
        match res {
            Ok(_) => Ok(true),
            Err(e) if is_conditional_failure(&e) => Ok(false),
            Err(e) => Err(ddb_err("UpdateItem", &self.table, e)),
        }
    }
}

/// Partition value of the sparse `deprovisioning-pending-index` (a constant flag).
pub const DEPROVISIONING_PENDING_FLAG: &str = "1";
/// The sparse index name.
pub const DEPROVISIONING_INDEX: &str = "deprovisioning-pending-index";

/// The subscribers table's deprovisioning index (read-only here).
#[derive(Debug, Clone)]
pub struct DynamoDbDeprovisioningIndex {
    client: Client,
    table: String,
}

impl DynamoDbDeprovisioningIndex {
    /// Over the subscribers `table`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }
}

#[async_trait]
impl DeprovisioningIndex for DynamoDbDeprovisioningIndex {
    async fn active(&self) -> Result<Vec<Deprovisioning>> {
        let mut out = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(DEPROVISIONING_INDEX)
                .key_condition_expression("deprovisioningPendingFlag = :f")
                .expression_attribute_values(":f", s(DEPROVISIONING_PENDING_FLAG))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| ddb_err("Query", &self.table, e))?;
            for item in page.items() {
                let get = |k: &str| item.get(k).and_then(|v| v.as_s().ok());
                let (Some(l), Some(acct), Some(exp)) = (
                    get(a::LICENSE_ARN),
                    get(a::CUSTOMER_AWS_ACCOUNT_ID),
                    get("deprovisioningExpiry"),
                ) else {
                    return Err(malformed(
                        &self.table,
                        "deprovisioning index item without its keys",
                    ));
                };
                let expiry = DateTime::parse_from_rfc3339(exp)
                    .map_err(|_| {
                        malformed(&self.table, format!("bad deprovisioningExpiry {exp:?}"))
                    })?
                    .with_timezone(&Utc);
                out.push(Deprovisioning {
                    license_arn: l.clone(),
                    customer_aws_account_id: acct.clone(),
                    expiry,
                });
            }
            start = page.last_evaluated_key;
            if start.is_none() {
                return Ok(out);
            }
        }
    }
}

/// Whether a status stored on a record is terminal and billed.
pub fn is_billed(status: Option<AggregatedStatus>) -> bool {
    status.is_some_and(AggregatedStatus::is_billed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::row::Tag;

    fn group() -> GroupKey {
        GroupKey {
            license_arn:
                "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef"
                    .into(),
            customer_aws_account_id: "111122223333".into(),
            dimension: "calls".into(),
            hour: "2026-11-30T10".parse().unwrap(),
        }
    }

    #[test]
    fn aggregated_items_round_trip() {
        let mut item = AggregatedItem::new(
            group(),
            42,
            Some(vec![Allocation {
                quantity: 42,
                tags: vec![Tag::new("team", "a")],
            }]),
        );
        item.row_count = 3;
        item.contributed_seconds = vec![0b101, 0, 1];
        let now = "2026-11-30T12:00:00Z".parse().unwrap();
        let back = aggregated_from_item("t", &aggregated_to_item(&item, now)).unwrap();
        assert_eq!(back, item);
    }

    #[test]
    fn attribute_values_round_trip() {
        let v = AttrValue::M(BTreeMap::from([
            (
                "a".into(),
                AttrValue::L(vec![
                    AttrValue::N("1".into()),
                    AttrValue::Bool(true),
                    AttrValue::Null,
                ]),
            ),
            ("b".into(), AttrValue::S("x".into())),
        ]));
        assert_eq!(to_domain(&to_sdk(&v)), v);
        assert_eq!(to_domain(&Av::Ss(vec!["a".into()])), AttrValue::Other);
    }
}
