//! Shared pieces of the port contract suites (`tests/contract_*.rs`): each suite has one
//! generic test body, run against the in-memory adapter in plain `cargo test` and against the
//! AWS adapter on the local stack (`#[ignore]`d; `scripts/test` starts a stack and runs them
//! with `--include-ignored`). The stack is reached through the environment `awsmp-local up`
//! writes (`AWS_ENDPOINT_URL_<SERVICE>`, region, credentials, resource names).

#![allow(dead_code)]

use aws_sdk_dynamodb::types::AttributeValue as Av;
use awsmp_aws::dynamodb::{row_from_item, to_sdk};
use awsmp_contract::keys::{GroupKey, HourBucket, RowKey};
use awsmp_contract::row::RawUsageRow;
use chrono::{DateTime, Utc};
use std::collections::HashMap;

/// A name unique to this run, so runs on one stack never meet.
pub fn run_id() -> String {
    format!(
        "{:x}{:x}",
        std::process::id(),
        Utc::now().timestamp_nanos_opt().unwrap_or_default()
    )
}

/// A Concurrent-Agreements license ARN unique to `run`.
pub fn license(run: &str, n: u32) -> String {
    format!("arn:aws:license-manager::123456789012:license:l-{run}{n:04}")
}

/// An hour unique to `run` (index reads and the age-out sweep are per hour, across every
/// license, so runs on one stack must not share one): an hour of 2001–2012.
pub fn hour(run: &str) -> HourBucket {
    let n = run
        .bytes()
        .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    let base: HourBucket = "2001-01-01T00".parse().unwrap();
    base.plus_hours(i64::try_from(n % 100_000).unwrap_or_default())
}

/// A group of `license` in `hour`.
pub fn group(license: &str, dimension: &str, hour: HourBucket) -> GroupKey {
    GroupKey::new(license, "111122223333", dimension, hour)
}

/// The instant the suites act at.
pub fn now() -> DateTime<Utc> {
    "2026-11-30T12:00:00Z".parse().unwrap()
}

/// The key of `row`.
pub fn key_of(group: &GroupKey, second: u32) -> RowKey {
    RowKey {
        license_arn: group.license_arn.clone(),
        sort_key: group.usage_sort_key_at(second),
    }
}

/// An environment variable the local stack sets.
pub fn stack_var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: start the local stack (awsmp-local up) and source its env")
    })
}

/// A DynamoDB client on the local stack.
pub async fn dynamodb() -> aws_sdk_dynamodb::Client {
    aws_sdk_dynamodb::Client::new(&awsmp_aws::sdk::sdk_config().await)
}

/// An SQS client on the local stack.
pub async fn sqs() -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::new(&awsmp_aws::sdk::sdk_config().await)
}

/// Write `row` as a whole item (as the consumer does).
pub async fn put_item(client: &aws_sdk_dynamodb::Client, table: &str, row: &RawUsageRow) {
    let item: HashMap<String, Av> = row.iter().map(|(k, v)| (k.clone(), to_sdk(v))).collect();
    client
        .put_item()
        .table_name(table)
        .set_item(Some(item))
        .send()
        .await
        .unwrap();
}

/// Read an item by key, consistently.
pub async fn get_item(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    key: [(&str, &str); 2],
) -> Option<RawUsageRow> {
    let out = client
        .get_item()
        .table_name(table)
        .set_key(Some(
            key.iter()
                .map(|(k, v)| ((*k).to_owned(), Av::S((*v).to_owned())))
                .collect(),
        ))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    out.item.as_ref().map(row_from_item)
}
