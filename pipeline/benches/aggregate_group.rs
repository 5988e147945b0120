//! The aggregator's read + fold of one full 3,600-row group.
//!
//! - `aggregator/read_and_fold_3600_row_group_{sequential,streaming}/<pages>`: the pages of an
//!   in-memory query with a simulated round trip of [`PAGE_LATENCY`] per page, read one
//!   after another or with the next page fetched while the current one is folded
//!   (`pipeline/src/adapters/pages.rs`, what the DynamoDB adapter does), side by side. `<pages>` is the
//!   page size: 1 MB of rows (DynamoDB's page limit for a `Query`) or 100 rows; `…_no_wait`:
//!   100-row pages with no simulated round trip, so the only work to overlap is the page's
//!   production (a copy of its rows, as the adapter's fetch converts them) against the fold of
//!   the one before, on the runtime's two worker threads.
//! - `aggregator/read_and_fold_3600_row_group_dynamodb`: through DynamoDB (the targeted
//!   `begins_with` query, page by page, streamed into the guardrail fold), against the local
//!   stack. The rows are written once in setup; the benchmark only reads and folds, so they
//!   stay pending. Needs the local stack: `awsmp-local up`, source its env file; without
//!   `AWS_ENDPOINT_URL_DYNAMODB` it says so and measures only the in-memory pair.
//!
//! `cargo bench -p awsmp-pipeline --bench aggregate_group`

use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use awsmp_aws::dynamodb::to_sdk;
use awsmp_contract::keys::{GroupKey, SECONDS_PER_HOUR};
use awsmp_contract::row::AttrValue;
use awsmp_contract::row::{RawUsageRow, conforming_row};
use awsmp_contract::time::TimeConfig;
use awsmp_pipeline::adapters::dynamodb::DynamoDbUsageStore;
use awsmp_pipeline::adapters::pages::{Page, prefetched, sequential};
use awsmp_pipeline::domain::fold::{FoldOutcome, GroupFold};
use awsmp_pipeline::ports::UsageStore;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

/// DynamoDB `BatchWriteItem` limit: "up to 25 item put or delete operations".
const BATCH_WRITE_ITEMS: usize = 25;
/// A `Query` page holds at most 1 MB of items
/// (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Query.Pagination.html).
const QUERY_PAGE_BYTES: usize = 1024 * 1024;
/// The simulated round trip of one query page (a consistent `Query` in one region takes
/// milliseconds; the figure is an assumption of the benchmark, not a measurement).
const PAGE_LATENCY: Duration = Duration::from_millis(5);

/// DynamoDB's size of an item: the lengths of its attribute names and values
/// (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html).
fn item_bytes(row: &RawUsageRow) -> usize {
    row.iter()
        .map(|(k, v)| {
            k.len()
                + match v {
                    AttrValue::S(s) | AttrValue::N(s) => s.len(),
                    _ => 8,
                }
        })
        .sum()
}

/// The read + fold over pages of `rows_per_page`, sequential or streaming.
fn read_and_fold_in_memory(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let group = bench_group();
    let rows: Vec<RawUsageRow> = (0..SECONDS_PER_HOUR)
        .map(|s| conforming_row(&group, s, u64::from(s % 17), None))
        .collect();
    let now = group.hour.end() + chrono::Duration::hours(1);
    let cfg = TimeConfig::default();
    let per_mb = QUERY_PAGE_BYTES / item_bytes(&rows[0]);
    let mut g = c.benchmark_group("aggregator");
    g.throughput(Throughput::Elements(u64::from(SECONDS_PER_HOUR)))
        .sample_size(20);
    for (label, per_page, latency) in [
        ("1mb_pages", per_mb, PAGE_LATENCY),
        ("100_row_pages", 100, PAGE_LATENCY),
        ("100_row_pages_no_wait", 100, Duration::ZERO),
    ] {
        let pages: Arc<Vec<Vec<RawUsageRow>>> =
            Arc::new(rows.chunks(per_page).map(<[_]>::to_vec).collect());
        eprintln!(
            "aggregator {label}: {} rows per page, {} pages, {latency:?} per page",
            per_page.min(rows.len()),
            pages.len()
        );
        let fetch = move |start: Option<usize>| {
            let pages = pages.clone();
            async move {
                if !latency.is_zero() {
                    tokio::time::sleep(latency).await;
                }
                let i = start.unwrap_or(0);
                Ok::<_, Infallible>(Page {
                    items: pages[i].clone(),
                    next: (i + 1 < pages.len()).then_some(i + 1),
                })
            }
        };
        for streaming in [false, true] {
            let name = if streaming { "streaming" } else { "sequential" };
            let fetch = fetch.clone();
            g.bench_function(
                format!("read_and_fold_3600_row_group_{name}/{label}"),
                |b| {
                    b.iter(|| {
                        rt.block_on(async {
                            let mut fold = GroupFold::new(group.clone(), now, &cfg);
                            let push = |row: RawUsageRow| {
                                fold.push(&row).expect("no duplicate rows");
                            };
                            let read = if streaming {
                                prefetched(fetch.clone(), push).await
                            } else {
                                sequential(fetch.clone(), push).await
                            };
                            read.expect("in memory");
                            assert!(matches!(fold.finish(), FoldOutcome::Valid(_)));
                        })
                    })
                },
            );
        }
    }
    g.finish();
}

/// A group of its own (a license and a year no test uses).
fn bench_group() -> GroupKey {
    GroupKey::new(
        "arn:aws:license-manager::123456789012:license:l-0000000000000000000000000be0f01d",
        "270000000001",
        "api_calls",
        "2070-01-15T10".parse().expect("hour"),
    )
}

async fn write_group(client: &aws_sdk_dynamodb::Client, table: &str, group: &GroupKey) {
    let rows: Vec<RawUsageRow> = (0..SECONDS_PER_HOUR)
        .map(|s| conforming_row(group, s, u64::from(s % 17), None))
        .collect();
    for chunk in rows.chunks(BATCH_WRITE_ITEMS) {
        let mut requests: Vec<WriteRequest> = chunk
            .iter()
            .map(|r| {
                let item: HashMap<String, AttributeValue> =
                    r.iter().map(|(k, v)| (k.clone(), to_sdk(v))).collect();
                WriteRequest::builder()
                    .put_request(
                        PutRequest::builder()
                            .set_item(Some(item))
                            .build()
                            .expect("put"),
                    )
                    .build()
            })
            .collect();
        // BatchWriteItem answers 200 with UnprocessedItems: resend them until none are left.
        while !requests.is_empty() {
            let out = client
                .batch_write_item()
                .request_items(table, requests)
                .send()
                .await
                .expect("BatchWriteItem against the local stack");
            requests = out
                .unprocessed_items
                .and_then(|mut m| m.remove(table))
                .unwrap_or_default();
        }
    }
}

fn aggregate_group(c: &mut Criterion) {
    if std::env::var_os("AWS_ENDPOINT_URL_DYNAMODB").is_none() {
        eprintln!(
            "aggregate_group: skipped — AWS_ENDPOINT_URL_DYNAMODB is unset. Start the local stack \
             (awsmp-local up) and source its env file to run this benchmark."
        );
        return;
    }
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let sdk = rt.block_on(awsmp_aws::sdk::sdk_config());
    let client = aws_sdk_dynamodb::Client::new(&sdk);
    let table = std::env::var("AWSMP_USAGE_TABLE").unwrap_or_else(|_| "awsmp-usage".into());
    let group = bench_group();
    rt.block_on(write_group(&client, &table, &group));
    let store = DynamoDbUsageStore::new(client, &table);
    let now = group.hour.end() + chrono::Duration::hours(1);
    let cfg = TimeConfig::default();
    let expected: u64 = (0..u64::from(SECONDS_PER_HOUR)).map(|s| s % 17).sum();

    let mut g = c.benchmark_group("aggregator");
    g.throughput(Throughput::Elements(u64::from(SECONDS_PER_HOUR)))
        .sample_size(10)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(30));
    g.bench_function("read_and_fold_3600_row_group_dynamodb", |b| {
        b.iter(|| {
            rt.block_on(async {
                let mut fold = GroupFold::new(group.clone(), now, &cfg);
                store
                    .read_pending_rows(&group, &mut |row| {
                        fold.push_row(&row).expect("no duplicate rows");
                    })
                    .await
                    .expect("read the group");
                match fold.finish() {
                    FoldOutcome::Valid(rec) => {
                        assert_eq!((rec.row_count, rec.quantity), (SECONDS_PER_HOUR, expected));
                    }
                    other => panic!("unexpected fold outcome {other:?}"),
                }
            })
        })
    });
    g.finish();
}

criterion_group!(benches, read_and_fold_in_memory, aggregate_group);
criterion_main!(benches);
