//! The aggregated-usage table and its item conversion.

use super::errors::{ddb_err, malformed};
use super::pending::query_pending_index;
use crate::domain::fold::Overflow;
use crate::error::{PipelineError, Result};
use crate::ports::{AggregatedItem, AggregatedStore, Attempt, AttemptCondition, WriteBack};
use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue as Av;
use awsmp_aws::dynamodb::{WithCondition, WithUpdate, is_conditional_failure};
use awsmp_aws::dynamodb::{s, to_domain, to_sdk};
use awsmp_contract::attrs as a;
use awsmp_contract::condition::{Attr, Condition, Item, Value};
use awsmp_contract::keys::{GroupKey, HourBucket, parse_aggregated_sort_key};
use awsmp_contract::reasons::QUANTITY_ABOVE_API_MAXIMUM;
use awsmp_contract::row::{Allocation, AttrValue, Tag, parse_non_negative_integer};
use awsmp_contract::status::AggregatedStatus;
use awsmp_contract::update::Update;
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, HashMap};

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

/// The attributes of an aggregated record as the aggregator puts it, binaries aside (a
/// direct-submit seller writes the same). The memory twin stores them as its put.
pub fn aggregated_put_attrs(item: &AggregatedItem, now: DateTime<Utc>) -> Item {
    let g = &item.group;
    let mut m = Item::from([
        (a::LICENSE_ARN.to_owned(), AttrValue::s(&g.license_arn)),
        (
            a::AGGREGATED_SORT_KEY.to_owned(),
            AttrValue::s(g.aggregated_sort_key()),
        ),
        (
            a::CUSTOMER_AWS_ACCOUNT_ID.to_owned(),
            AttrValue::s(&g.customer_aws_account_id),
        ),
        (a::DIMENSION.to_owned(), AttrValue::s(&g.dimension)),
        (a::HOUR_BUCKET.to_owned(), AttrValue::s(g.hour.to_string())),
        (a::QUANTITY.to_owned(), AttrValue::n(item.quantity)),
        (a::ROW_COUNT.to_owned(), AttrValue::n(item.row_count.into())),
        (
            a::CREATED_AT.to_owned(),
            AttrValue::s(a::audit_timestamp(now)),
        ),
        (
            a::UPDATED_AT.to_owned(),
            AttrValue::s(a::audit_timestamp(now)),
        ),
    ]);
    let list =
        |allocs: &[Allocation]| AttrValue::L(allocs.iter().map(Allocation::to_attr).collect());
    if item.pending {
        m.insert(
            a::METERING_PENDING.to_owned(),
            AttrValue::s(g.hour.to_string()),
        );
    }
    if let Some(allocs) = &item.allocations {
        m.insert(a::USAGE_ALLOCATIONS.to_owned(), list(allocs));
    }
    if let Some(over) = &item.overflow {
        m.insert(a::OVERFLOW_QUANTITY.to_owned(), AttrValue::n(over.quantity));
        m.insert(
            a::OVERFLOW_REASON.to_owned(),
            AttrValue::s(QUANTITY_ABOVE_API_MAXIMUM),
        );
        if let Some(allocs) = &over.allocations {
            m.insert(a::OVERFLOW_ALLOCATIONS.to_owned(), list(allocs));
        }
    }
    if let Some(ci) = &item.customer_identifier {
        m.insert(a::CUSTOMER_IDENTIFIER.to_owned(), AttrValue::s(ci));
    }
    m
}

/// The attributes of a stored aggregated record, binaries aside: what the put wrote, and what
/// the attempt marks and the write-back set since (the updates below; the audit timestamps
/// at `now`, the TTL left out). The memory twin stores them for a record it is given whole
/// ([`MemoryAggregatedStore::insert`](crate::adapters::memory::MemoryAggregatedStore::insert));
/// a test proves [`aggregated_from_item`] reads them back as the same record.
pub fn aggregated_attrs(item: &AggregatedItem, now: DateTime<Utc>) -> Item {
    let mut m = aggregated_put_attrs(item, now);
    let mut set = |k: &str, v: Option<AttrValue>| {
        if let Some(v) = v {
            m.insert(k.to_owned(), v);
        }
    };
    set(
        a::METERING_STATUS,
        item.status.map(|s| AttrValue::s(s.as_str())),
    );
    set(
        a::METERING_STATUS_REASON,
        item.status_reason.as_ref().map(AttrValue::s),
    );
    set(
        a::METERING_RECORD_ID,
        item.metering_record_id.as_ref().map(AttrValue::s),
    );
    set(
        a::ATTEMPTED_QUANTITY,
        item.attempted_quantity.map(AttrValue::n),
    );
    set(a::ATTEMPT_NUMBER, item.attempt_number.map(AttrValue::n));
    set(
        a::SUBMISSION_ATTEMPTED_AT,
        item.submission_attempted_at
            .map(|t| AttrValue::s(a::audit_timestamp(t))),
    );
    m
}

/// The SDK item for an aggregated record (what the aggregator puts, or a direct-submit seller writes).
pub fn aggregated_to_item(item: &AggregatedItem, now: DateTime<Utc>) -> HashMap<String, Av> {
    let mut m: HashMap<String, Av> = aggregated_put_attrs(item, now)
        .iter()
        .map(|(k, v)| (k.clone(), to_sdk(v)))
        .collect();
    for (name, bytes) in [
        (a::CONTRIBUTED_SECONDS, &item.contributed_seconds),
        (a::CONTRIBUTED_QUANTITIES, &item.contributed_quantities),
    ] {
        if !bytes.is_empty() {
            m.insert(name.to_owned(), Av::B(Blob::new(bytes.clone())));
        }
    }
    m
}

/// The allocations list stored under `name`, if any.
fn allocations_of(table: &str, item: &Item, name: &str) -> Result<Option<Vec<Allocation>>> {
    match item.get(name) {
        None => Ok(None),
        Some(AttrValue::L(list)) => list
            .iter()
            .map(|v| allocation_from(v).ok_or_else(|| malformed(table, format!("bad {name}"))))
            .collect::<Result<Vec<_>>>()
            .map(Some),
        Some(_) => Err(malformed(table, format!("{name} is not a list"))),
    }
}

/// Parse an aggregated record item.
pub fn aggregated_from_item(table: &str, item: &HashMap<String, Av>) -> Result<AggregatedItem> {
    let attrs: Item = item
        .iter()
        .map(|(k, v)| (k.clone(), to_domain(v)))
        .collect();
    let mut record = aggregated_from_attrs(table, &attrs)?;
    let bytes = |k: &str| {
        item.get(k)
            .and_then(|v| v.as_b().ok())
            .map(|b| b.as_ref().to_vec())
            .unwrap_or_default()
    };
    record.contributed_seconds = bytes(a::CONTRIBUTED_SECONDS);
    record.contributed_quantities = bytes(a::CONTRIBUTED_QUANTITIES);
    Ok(record)
}

/// Parse an aggregated record from its attributes, binaries aside (its contributed seconds
/// and quantities are left empty): what [`aggregated_from_item`] reads, and what the memory
/// twin reads its stored attributes back with.
pub fn aggregated_from_attrs(table: &str, item: &Item) -> Result<AggregatedItem> {
    let str_of = |k: &str| item.get(k).and_then(AttrValue::as_s).map(str::to_owned);
    let num_of = |k: &str| -> Result<Option<u64>> {
        item.get(k)
            .map(|v| {
                v.as_n()
                    .and_then(|x| parse_non_negative_integer(x).ok())
                    .ok_or_else(|| malformed(table, format!("{k} is not a non-negative integer")))
            })
            .transpose()
    };
    let license = str_of(a::LICENSE_ARN).ok_or_else(|| malformed(table, "no licenseArn"))?;
    let sk = str_of(a::AGGREGATED_SORT_KEY).ok_or_else(|| malformed(table, "no sort key"))?;
    let (account, dimension, hour) = parse_aggregated_sort_key(&sk)
        .ok_or_else(|| malformed(table, format!("bad sort key {sk:?}")))?;
    let allocations = allocations_of(table, item, a::USAGE_ALLOCATIONS)?;
    let overflow = num_of(a::OVERFLOW_QUANTITY)?
        .map(|quantity| {
            Ok::<_, PipelineError>(Overflow {
                quantity,
                allocations: allocations_of(table, item, a::OVERFLOW_ALLOCATIONS)?,
            })
        })
        .transpose()?;
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
        contributed_seconds: Vec::new(),
        contributed_quantities: Vec::new(),
        overflow,
        customer_identifier: str_of(a::CUSTOMER_IDENTIFIER),
        pending: item.contains_key(a::METERING_PENDING),
        status: str_of(a::METERING_STATUS).and_then(|s| s.parse().ok()),
        status_reason: str_of(a::METERING_STATUS_REASON),
        metering_record_id: str_of(a::METERING_RECORD_ID),
        attempted_quantity: num_of(a::ATTEMPTED_QUANTITY)?,
        attempt_number: num_of(a::ATTEMPT_NUMBER)?,
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
            .with_condition(&put_if_absent_condition())
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
    ) -> Result<bool> {
        let res = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(group).into_iter().collect()))
            .with_update(
                &mark_attempted_update(quantity, now),
                &mark_attempted_condition(),
            )
            .send()
            .await;
        match res {
            Ok(_) => Ok(true),
            // Finalized meanwhile (e.g. expired): not to be sent.
            Err(e) if is_conditional_failure(&e) => Ok(false),
            Err(e) => Err(ddb_err("UpdateItem", &self.table, e)),
        }
    }

    async fn retract_attempt(
        &self,
        group: &GroupKey,
        quantity: u64,
        previous: Option<u64>,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let req = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(group).into_iter().collect()))
            .with_update(
                &retract_attempt_update(previous, now),
                &retract_attempt_condition(quantity),
            );
        match req.send().await {
            Ok(_) => Ok(()),
            // Finalized meanwhile, or marked with another quantity: nothing to take back.
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
        let res = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(group).into_iter().collect()))
            .with_update(
                &write_back_update(outcome, now),
                &write_back_condition(outcome.if_attempt),
            )
            .send()
            .await;
        match res {
            Ok(_) => Ok(true),
            Err(e) if is_conditional_failure(&e) => Ok(false),
            Err(e) => Err(ddb_err("UpdateItem", &self.table, e)),
        }
    }
}

fn pending() -> Condition {
    Condition::exists(Attr::bare(a::METERING_PENDING))
}

/// The put's condition: no record under the key yet (the first put wins: the commit point).
pub fn put_if_absent_condition() -> Condition {
    Condition::not_exists(Attr::bare(a::LICENSE_ARN))
}

/// An attempt mark's condition: the record is still pending.
pub fn mark_attempted_condition() -> Condition {
    pending()
}

/// A retraction's condition: still pending, and marked with `quantity`.
pub fn retract_attempt_condition(quantity: u64) -> Condition {
    pending().and(Condition::eq(
        Attr::bare(a::ATTEMPTED_QUANTITY),
        Value::n(":q", quantity),
    ))
}

/// A write-back's condition: the record is pending, and its attempt mark is what `if_attempt`
/// requires.
pub fn write_back_condition(if_attempt: AttemptCondition) -> Condition {
    match if_attempt {
        AttemptCondition::Any => pending(),
        AttemptCondition::NoAttempt => {
            pending().and(Condition::not_exists(Attr::bare(a::ATTEMPTED_QUANTITY)))
        }
        AttemptCondition::Exactly(Attempt { quantity, number }) => {
            let number = match number {
                Some(k) => Condition::eq(Attr::bare(a::ATTEMPT_NUMBER), Value::n(":an", k)),
                None => Condition::not_exists(Attr::bare(a::ATTEMPT_NUMBER)),
            };
            pending()
                .and(Condition::eq(
                    Attr::bare(a::ATTEMPTED_QUANTITY),
                    Value::n(":aq", quantity),
                ))
                .and(number)
        }
    }
}

/// `updatedAt` (and `createdAt` where missing, `submissionAttemptedAt`) at `now`.
fn now_value(now: DateTime<Utc>) -> Value {
    Value::s(":now", a::audit_timestamp(now))
}

/// An attempt mark's update: the quantity about to be sent and when, and the attempt's number
/// (`ADD`: 1 on the first mark, the next number on each later one).
pub fn mark_attempted_update(quantity: u64, now: DateTime<Utc>) -> Update {
    Update::new()
        .set(Attr::bare(a::ATTEMPTED_QUANTITY), Value::n(":q", quantity))
        .set(Attr::bare(a::SUBMISSION_ATTEMPTED_AT), now_value(now))
        .set(Attr::bare(a::UPDATED_AT), now_value(now))
        .add(Attr::bare(a::ATTEMPT_NUMBER), Value::n(":one", 1))
}

/// A retraction's update: the attempted quantity back to `previous`, or no attempt at all
/// (`None`: the mark's quantity and time removed; its number stays, so the next mark counts
/// on).
pub fn retract_attempt_update(previous: Option<u64>, now: DateTime<Utc>) -> Update {
    let update = match previous {
        Some(p) => Update::new().set(Attr::bare(a::ATTEMPTED_QUANTITY), Value::n(":prev", p)),
        None => Update::new()
            .remove(Attr::bare(a::ATTEMPTED_QUANTITY))
            .remove(Attr::bare(a::SUBMISSION_ATTEMPTED_AT)),
    };
    update.set(Attr::bare(a::UPDATED_AT), now_value(now))
}

/// A write-back's update: out of the pending index, with the outcome (status, and the
/// reason, `MeteringRecordId` and TTL it has).
pub fn write_back_update(outcome: &WriteBack, now: DateTime<Utc>) -> Update {
    let mut update = Update::new()
        .remove(Attr::bare(a::METERING_PENDING))
        .set(
            Attr::bare(a::METERING_STATUS),
            Value::s(":st", outcome.status.as_str()),
        )
        .set(Attr::bare(a::UPDATED_AT), now_value(now))
        .set_if_not_exists(Attr::bare(a::CREATED_AT), now_value(now));
    if let Some(r) = &outcome.reason {
        update = update.set(Attr::bare(a::METERING_STATUS_REASON), Value::s(":r", r));
    }
    if let Some(id) = &outcome.metering_record_id {
        update = update.set(Attr::bare(a::METERING_RECORD_ID), Value::s(":id", id));
    }
    if let Some(ttl) = outcome.ttl {
        // `ttl` is a reserved word.
        update = update.set(Attr::token("#ttl", a::TTL), Value::n(":ttl", ttl));
    }
    update
}

/// Whether a status stored on a record is terminal and billed.
pub fn is_billed(status: Option<AggregatedStatus>) -> bool {
    status.is_some_and(AggregatedStatus::is_billed)
}

#[cfg(test)]
mod tests;
