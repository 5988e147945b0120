//! Reading the stores into per-group-hour [`HourSources`]: the raw rows and aggregated
//! records of each license (one `Query` per license and table, filtered to the hours), the
//! consumer's rejections (a `Scan` of the rejected-events store, which has no hour index) and
//! the audit trail. The tables are those of `infra/resources.json`; the attributes are the row
//! contract's (docs/row-contract.md).

use crate::sources::HourSources;
use crate::subscription::SubscriptionView;
use crate::trail::TrailRecord;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue as Av;
use awsmp_contract::attrs as a;
use awsmp_contract::keys::{GroupKey, HourBucket, split_usage_sort_key};
use awsmp_contract::status::RawStatus;
use awsmp_contract::subscribers as sub;
use awsmp_pipeline::adapters::dynamodb::aggregated_from_item;
use awsmp_pipeline::error::{PipelineError, Result};
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, BTreeSet, HashMap};

type Item = HashMap<String, Av>;

/// The tables `meterctl` reads.
#[derive(Debug, Clone)]
pub struct OpsTables {
    /// DynamoDB client.
    pub client: Client,
    /// Raw usage table (full mode).
    pub usage: Option<String>,
    /// Aggregated-usage table.
    pub aggregated: String,
    /// Rejected-events store (`AWSMP_REJECTED_EVENTS_TABLE`), if known.
    pub rejected: Option<String>,
    /// Subscribers table, if known.
    pub subscribers: Option<String>,
}

fn dynamo_err<E: std::error::Error + Send + Sync + 'static>(
    operation: &'static str,
    resource: &str,
) -> impl FnOnce(E) -> PipelineError {
    let resource = resource.to_owned();
    move |e| PipelineError::DynamoDb {
        operation,
        resource,
        retryable: false,
        source: Box::new(e),
    }
}

fn text<'a>(item: &'a Item, k: &str) -> Option<&'a str> {
    item.get(k).and_then(|v| v.as_s().ok()).map(String::as_str)
}

fn num(item: &Item, k: &str) -> u64 {
    item.get(k)
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

impl OpsTables {
    /// Every item of `license` in `table` whose `attr` is between `lo` and `hi` (strings).
    async fn query_between(
        &self,
        table: &str,
        license: &str,
        attr: &str,
        lo: String,
        hi: String,
    ) -> Result<Vec<Item>> {
        self.client
            .query()
            .table_name(table)
            .key_condition_expression("#l = :l")
            .filter_expression("#t BETWEEN :lo AND :hi")
            .expression_attribute_names("#l", a::LICENSE_ARN)
            .expression_attribute_names("#t", attr)
            .expression_attribute_values(":l", Av::S(license.to_owned()))
            .expression_attribute_values(":lo", Av::S(lo))
            .expression_attribute_values(":hi", Av::S(hi))
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(dynamo_err("Query", table))
    }

    /// Every item of `table`, page by page (only `attrs` when given).
    async fn scan(&self, table: &str, attrs: Option<&str>) -> Result<Vec<Item>> {
        self.client
            .scan()
            .table_name(table)
            .set_projection_expression(attrs.map(str::to_owned))
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(dynamo_err("Scan", table))
    }

    /// The licenses to read: `explicit`, else every license with an aggregated record or a
    /// subscriber entry (a `Scan` of the license attribute only).
    pub async fn licenses(&self, explicit: &[String]) -> Result<BTreeSet<String>> {
        if !explicit.is_empty() {
            return Ok(explicit.iter().cloned().collect());
        }
        let mut out = BTreeSet::new();
        let tables = std::iter::once(&self.aggregated).chain(self.subscribers.as_ref());
        for table in tables {
            for item in self.scan(table, Some(a::LICENSE_ARN)).await? {
                if let Some(l) = text(&item, a::LICENSE_ARN) {
                    out.insert(l.to_owned());
                }
            }
        }
        Ok(out)
    }

    /// The sources of every group-hour of `license` in `from..=to`.
    pub async fn license_sources(
        &self,
        license: &str,
        from: HourBucket,
        to: HourBucket,
    ) -> Result<BTreeMap<GroupKey, HourSources>> {
        let mut out: BTreeMap<GroupKey, HourSources> = BTreeMap::new();
        if let Some(usage) = &self.usage {
            let (lo, hi) = (format!("{from}:00:00"), format!("{to}:59:59"));
            for item in self
                .query_between(usage, license, a::TIMESTAMP, lo, hi)
                .await?
            {
                if let Some(g) = row_group(license, &item) {
                    add_row(
                        out.entry(g.clone()).or_insert_with(|| HourSources::new(g)),
                        &item,
                    );
                }
            }
        }
        let (lo, hi) = (from.to_string(), to.to_string());
        let items = self
            .query_between(&self.aggregated, license, a::HOUR_BUCKET, lo, hi)
            .await?;
        for item in items {
            let record = aggregated_from_item(&self.aggregated, &item)?;
            let g = record.group.clone();
            out.entry(g.clone())
                .or_insert_with(|| HourSources::new(g))
                .record = Some(record);
        }
        Ok(out)
    }

    /// Every subscriber entry of `license` (one per buyer account), with a consistent read:
    /// where `meterctl status` learns whether the license is active, in its flush window, or
    /// finalized. Empty without a subscribers table.
    pub async fn subscriptions(&self, license: &str) -> Result<Vec<SubscriptionView>> {
        let Some(table) = &self.subscribers else {
            return Ok(Vec::new());
        };
        let items = self
            .client
            .query()
            .table_name(table)
            .consistent_read(true)
            .key_condition_expression("#l = :l")
            .expression_attribute_names("#l", a::LICENSE_ARN)
            .expression_attribute_values(":l", Av::S(license.to_owned()))
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(dynamo_err("Query", table))?;
        items
            .iter()
            .map(|item| subscription(table, license, item))
            .collect()
    }

    /// The consumer's rejections of `licenses` in `from..=to`, by group-hour and reason (only
    /// those it could attribute to a row: `rowSortKey` set).
    pub async fn consumer_rejected(
        &self,
        licenses: &BTreeSet<String>,
        from: HourBucket,
        to: HourBucket,
    ) -> Result<BTreeMap<GroupKey, BTreeMap<String, u64>>> {
        let mut out: BTreeMap<GroupKey, BTreeMap<String, u64>> = BTreeMap::new();
        let Some(table) = &self.rejected else {
            return Ok(out);
        };
        for item in self.scan(table, None).await? {
            let Some(license) = text(&item, a::LICENSE_ARN).filter(|l| licenses.contains(*l))
            else {
                continue;
            };
            let Some(g) = text(&item, "rowSortKey").and_then(|sk| sort_key_group(license, sk))
            else {
                continue;
            };
            if g.hour < from || g.hour > to {
                continue;
            }
            let reason = text(&item, "reason").unwrap_or("Unknown").to_owned();
            *out.entry(g).or_default().entry(reason).or_default() += num(&item, a::QUANTITY);
        }
        Ok(out)
    }
}

fn time(table: &str, item: &Item, k: &str) -> Result<Option<DateTime<Utc>>> {
    text(item, k)
        .map(|v| {
            DateTime::parse_from_rfc3339(v)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|_| PipelineError::MalformedItem {
                    table: table.to_owned(),
                    detail: format!("{k} {v:?} is not RFC 3339"),
                })
        })
        .transpose()
}

fn subscription(table: &str, license: &str, item: &Item) -> Result<SubscriptionView> {
    Ok(SubscriptionView {
        license_arn: license.to_owned(),
        customer_aws_account_id: text(item, a::CUSTOMER_AWS_ACCOUNT_ID)
            .unwrap_or_default()
            .to_owned(),
        subscription_status: text(item, sub::SUBSCRIPTION_STATUS).map(str::to_owned),
        agreement_status: text(item, sub::AGREEMENT_STATUS).map(str::to_owned),
        deprovisioning_expiry: time(table, item, sub::DEPROVISIONING_EXPIRY)?,
        license_event_at: time(table, item, sub::LICENSE_EVENT_AT)?,
        updated_at: time(table, item, a::UPDATED_AT)?,
    })
}

fn sort_key_group(license: &str, sk: &str) -> Option<GroupKey> {
    let seg = split_usage_sort_key(sk)?;
    let hour: HourBucket = seg.timestamp.get(..13)?.parse().ok()?;
    Some(GroupKey::new(license, seg.account, seg.dimension, hour))
}

/// The group-hour of a raw row, from its sort key.
fn row_group(license: &str, item: &Item) -> Option<GroupKey> {
    sort_key_group(license, text(item, a::USAGE_SORT_KEY)?)
}

fn add_row(s: &mut HourSources, item: &Item) {
    let status = text(item, a::METERING_STATUS).and_then(|v| v.parse::<RawStatus>().ok());
    s.rows.add(
        num(item, a::QUANTITY),
        item.contains_key(a::METERING_PENDING),
        status,
        text(item, a::METERING_STATUS_REASON).unwrap_or_default(),
        num(item, a::LATE_QUANTITY),
    );
}

/// Merge the consumer's rejections and the trail into `sources`, adding group-hours only they
/// know of (`from..=to` only).
pub fn merge(
    sources: &mut BTreeMap<GroupKey, HourSources>,
    rejected: BTreeMap<GroupKey, BTreeMap<String, u64>>,
    trail: Vec<TrailRecord>,
    licenses: &BTreeSet<String>,
    from: HourBucket,
    to: HourBucket,
) {
    for (g, reasons) in rejected {
        sources
            .entry(g.clone())
            .or_insert_with(|| HourSources::new(g))
            .consumer_rejected = reasons;
    }
    for t in trail {
        let g = &t.group;
        if g.hour < from || g.hour > to || !licenses.contains(&g.license_arn) {
            continue;
        }
        sources
            .entry(g.clone())
            .or_insert_with(|| HourSources::new(g.clone()))
            .trail
            .push(t);
    }
}

/// What a ledger, verify or status run reads.
#[derive(Debug, Clone)]
pub struct Query {
    /// Licenses (partition keys) to read; empty: every license with an aggregated record or a
    /// subscriber entry.
    pub licenses: Vec<String>,
    /// First hour.
    pub from: HourBucket,
    /// Last hour.
    pub to: HourBucket,
    /// The moment of reading.
    pub now: chrono::DateTime<chrono::Utc>,
}

/// The sources of every group-hour of `q`, from the tables and the trail: the one reading
/// path of `meterctl ledger`, `verify` and `status`, and of the load test's ledger.
pub async fn sources(
    tables: &OpsTables,
    trail: &dyn crate::trail::MeteringTrail,
    q: &Query,
    time: &awsmp_contract::time::TimeConfig,
) -> crate::Result<Vec<HourSources>> {
    let window =
        crate::trail::TrailWindow::for_hours(q.from, q.to, time.billable_window_hours(), q.now);
    let records = trail.batch_meter_usage_records(window).await?;
    // Not the trail's licenses: CloudTrail holds every product metered in the account and
    // region, and a call for another product's license is not this stack's to explain.
    let licenses = tables.licenses(&q.licenses).await?;
    let mut out = BTreeMap::new();
    for license in &licenses {
        out.append(&mut tables.license_sources(license, q.from, q.to).await?);
    }
    let rejected = tables.consumer_rejected(&licenses, q.from, q.to).await?;
    merge(&mut out, rejected, records, &licenses, q.from, q.to);
    Ok(out.into_values().collect())
}
