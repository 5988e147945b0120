//! Reading what every tier of the pipeline ended with, for one run's groups and hours only:
//! usage rows, aggregated records and consumer rejections (the DynamoDB tables of
//! `infra/resources.json`; their attributes in `docs/row-contract.md`).

use crate::conservation::{self, GroupHour, Inputs};
use anyhow::Result;
use aws_sdk_dynamodb::types::AttributeValue as Av;
use awsmp_contract::keys::HourBucket;
use awsmp_local_stack::local::LocalEnv;
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, BTreeSet, HashMap};

type Item = HashMap<String, Av>;

/// What of the tables belongs to this run.
pub(super) struct Scope<'a> {
    pub(super) stream: &'a str,
    pub(super) licenses: &'a BTreeSet<String>,
    groups: BTreeSet<conservation::Group>,
    /// RFC 3339 (millis, Z) instant the run started: compare as strings.
    since: String,
    /// Its hour bucket.
    since_hour: String,
}

impl<'a> Scope<'a> {
    /// The groups `inputs` produced (or got back) on `stream`, from `started_at` on: a
    /// deployment's licenses outlive one run.
    pub(super) fn new(
        stream: &'a str,
        licenses: &'a BTreeSet<String>,
        inputs: &Inputs,
        started_at: DateTime<Utc>,
    ) -> Self {
        Self {
            stream,
            licenses,
            groups: inputs
                .produced
                .keys()
                .chain(inputs.producer_returned.keys())
                .chain(inputs.injected.keys().map(|(g, _)| g))
                .chain(inputs.injected_duplicates.keys())
                .cloned()
                .collect(),
            since: started_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            since_hour: HourBucket::containing(started_at).to_string(),
        }
    }

    pub(super) fn keeps(&self, gh: &GroupHour) -> bool {
        gh.3 >= self.since_hour
            && self
                .groups
                .contains(&(gh.0.clone(), gh.1.clone(), gh.2.clone()))
    }
}

/// A string attribute, or "".
pub(super) fn text(item: &Item, k: &str) -> String {
    item.get(k)
        .and_then(|v| v.as_s().ok())
        .cloned()
        .unwrap_or_default()
}

/// A number attribute, or 0.
fn num(item: &Item, k: &str) -> u64 {
    item.get(k)
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Every item of `license` in `table`.
pub(super) async fn query_license(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    license: &str,
) -> Result<Vec<Item>> {
    let mut out = Vec::new();
    let mut start = None;
    loop {
        let page = ddb
            .query()
            .table_name(table)
            .key_condition_expression("licenseArn = :l")
            .expression_attribute_values(":l", Av::S(license.to_owned()))
            .set_exclusive_start_key(start)
            .send()
            .await?;
        out.extend(page.items.unwrap_or_default());
        start = page.last_evaluated_key;
        if start.is_none() {
            return Ok(out);
        }
    }
}

/// Group-hours in scope whose raw rows or aggregated records are still pending.
pub(super) async fn pending_hours(
    env: &LocalEnv,
    licenses: &[(String, String)],
    scope: &Scope<'_>,
) -> Result<BTreeSet<GroupHour>> {
    let ddb = env.dynamodb().await?;
    let mut pending = BTreeSet::new();
    for table in [
        env.get("AWSMP_USAGE_TABLE")?,
        env.get("AWSMP_AGGREGATED_USAGE_TABLE")?,
    ] {
        for (license, _) in licenses {
            for item in query_license(&ddb, table, license).await? {
                if let Some(Av::S(hour)) = item.get("meteringPending") {
                    pending.insert((
                        license.clone(),
                        text(&item, "customerAWSAccountId"),
                        text(&item, "dimension"),
                        hour.clone(),
                    ));
                }
            }
        }
    }
    pending.retain(|gh| scope.keeps(gh));
    Ok(pending)
}

/// Read rows, terminal pipeline states and consumer rejections into `inputs`. Returns the
/// quantity of aggregated records AWS accepted (`Success`), per group-hour: the billing
/// record of a deployment.
pub(super) async fn collect_tables(
    env: &LocalEnv,
    scope: &Scope<'_>,
    inputs: &mut Inputs,
) -> Result<BTreeMap<GroupHour, u64>> {
    let ddb = env.dynamodb().await?;
    let mut accepted = BTreeMap::new();
    for license in scope.licenses {
        let rows = query_license(&ddb, env.get("AWSMP_USAGE_TABLE")?, license).await?;
        collect_rows(license, &rows, scope, inputs);
        let aggregated =
            query_license(&ddb, env.get("AWSMP_AGGREGATED_USAGE_TABLE")?, license).await?;
        collect_aggregated(license, &aggregated, scope, inputs, &mut accepted);
    }
    collect_rejected(&ddb, env.get("AWSMP_REJECTED_EVENTS_TABLE")?, scope, inputs).await?;
    Ok(accepted)
}

fn collect_rows(license: &str, items: &[Item], scope: &Scope<'_>, inputs: &mut Inputs) {
    for item in items {
        let s = |k: &str| text(item, k);
        let hour = s("timestamp").get(..13).unwrap_or_default().to_owned();
        let gh = (
            license.to_owned(),
            s("customerAWSAccountId"),
            s("dimension"),
            hour,
        );
        if !scope.keeps(&gh) {
            continue;
        }
        let q = num(item, "quantity");
        *inputs.rows.entry(gh.clone()).or_default() += q;
        match s("meteringStatus").as_str() {
            "" => {}
            // A row that grew after it was folded: the rest is late usage, on the row
            // (docs/guarantees.md, "Cleanup never stamps what was not billed").
            "Aggregated" => {
                let late = num(item, "lateQuantity");
                if late > 0 {
                    *inputs
                        .pipeline_terminal
                        .entry((gh, format!("Aggregated:{}", s("lateReason"))))
                        .or_default() += late
                }
            }
            status => {
                *inputs
                    .pipeline_terminal
                    .entry((gh, format!("row:{status}:{}", s("meteringStatusReason"))))
                    .or_default() += q
            }
        }
    }
}

fn collect_aggregated(
    license: &str,
    items: &[Item],
    scope: &Scope<'_>,
    inputs: &mut Inputs,
    accepted: &mut BTreeMap<GroupHour, u64>,
) {
    for item in items {
        let s = |k: &str| text(item, k);
        let gh = (
            license.to_owned(),
            s("customerAWSAccountId"),
            s("dimension"),
            s("hourBucket"),
        );
        if !scope.keeps(&gh) {
            continue;
        }
        *inputs.aggregated.entry(gh.clone()).or_default() += num(item, "quantity");
        // The unbilled rest of a group-hour above the API maximum (docs/guarantees.md).
        let overflow = num(item, "overflowQuantity");
        if overflow > 0 {
            *inputs
                .pipeline_terminal
                .entry((gh.clone(), s("overflowReason")))
                .or_default() += overflow
        }
        match s("meteringStatus").as_str() {
            "" => {}
            "Success" => *accepted.entry(gh).or_default() += num(item, "quantity"),
            status => {
                *inputs
                    .pipeline_terminal
                    .entry((gh, format!("record:{status}")))
                    .or_default() += num(item, "quantity")
            }
        }
    }
}

/// Consumer rejections (and late usage) of this run's stream.
async fn collect_rejected(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    scope: &Scope<'_>,
    inputs: &mut Inputs,
) -> Result<()> {
    let mut start = None;
    loop {
        let page = ddb
            .scan()
            .table_name(table)
            .set_exclusive_start_key(start)
            .send()
            .await?;
        for item in page.items() {
            let s = |k: &str| text(item, k);
            let g = (s("licenseArn"), s("customerAWSAccountId"), s("dimension"));
            // A record nothing of which decoded has no group: counted by reason.
            if g.0.is_empty() && s("stream") == scope.stream && s("rejectedAt") >= scope.since {
                *inputs
                    .rejected_records
                    .entry(format!("{}{}", conservation::CONSUMER, s("reason")))
                    .or_default() += 1;
                continue;
            }
            if s("stream") != scope.stream
                || !scope.licenses.contains(&g.0)
                || s("rejectedAt") < scope.since
                || !scope.groups.contains(&g)
            {
                continue;
            }
            *inputs
                .consumer_rejected
                .entry((g, s("reason")))
                .or_default() += num(item, "quantity");
        }
        start = page.last_evaluated_key;
        if start.is_none() {
            return Ok(());
        }
    }
}
