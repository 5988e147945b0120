//! Aggregator fold of a full 3,600-row group (one row per second of the hour), with and
//! without VMT allocations (the "aggregator fold of a 3,600-row group" benchmark).
//!
//! - `fold_3600_rows/plain`, `fold_3600_rows/vmt_2x3_tags`: the rows as the DynamoDB adapter
//!   hands them to the aggregator's callback (what `usage_row_from_owned_item` makes of the
//!   items: a conforming row compacted to its second and quantity, a row with allocations as
//!   a domain row), each folded by reference → the validated, folded group (`GroupFold::finish`).
//! - `fold_3600_rows/plain_from_sdk_items`: the same group from what the adapter receives (the
//!   SDK's items of a `Query` page, owned): the adapter's conversion, the fold, and the items'
//!   drop, all timed (the items are copied for each iteration outside the timed region).
//! - `fold_3600_rows/plain_domain_rows`: the plain group as domain rows (a map of owned
//!   strings each, what the adapter handed the fold before compact rows), folded with
//!   `GroupFold::push`.

use std::hint::black_box;

use aws_sdk_dynamodb::types::AttributeValue;
use awsmp_aws::dynamodb::to_sdk;
use awsmp_contract::keys::GroupKey;
use awsmp_contract::row::{Allocation, RawUsageRow, Tag, conforming_row};
use awsmp_contract::time::TimeConfig;
use awsmp_pipeline::adapters::dynamodb::usage_row_from_owned_item;
use awsmp_pipeline::domain::fold::{FoldOutcome, GroupFold, RowShape, UsageRow};
use chrono::{TimeZone, Utc};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use std::collections::HashMap;

fn group() -> GroupKey {
    GroupKey::new(
        "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef",
        "210987654321",
        "api_calls",
        "2026-11-30T11".parse().unwrap(),
    )
}

fn rows(with_allocations: bool) -> Vec<RawUsageRow> {
    let g = group();
    (0..3600u32)
        .map(|s| {
            let q = u64::from(s % 97 + 1);
            if with_allocations {
                // Two allocations per row over 20 distinct tag sets of 3 tags each.
                let tags = |n: u32| {
                    vec![
                        Tag::new("team", format!("t{}", n % 5)),
                        Tag::new("env", format!("e{}", n % 4)),
                        Tag::new("cc", "1"),
                    ]
                };
                let allocs = [
                    Allocation {
                        quantity: q / 2,
                        tags: tags(s),
                    },
                    Allocation {
                        quantity: q - q / 2,
                        tags: tags(s + 7),
                    },
                ];
                conforming_row(&g, s, q, Some(&allocs))
            } else {
                conforming_row(&g, s, q, None)
            }
        })
        .collect()
}

/// The rows as the SDK's items of the group's query.
fn items() -> Vec<HashMap<String, AttributeValue>> {
    rows(false)
        .iter()
        .map(|r| r.iter().map(|(k, v)| (k.clone(), to_sdk(v))).collect())
        .collect()
}

fn fold(c: &mut Criterion) {
    let now = Utc.with_ymd_and_hms(2026, 11, 30, 12, 20, 0).unwrap();
    let cfg = TimeConfig::default();
    let shape = RowShape::of(&group());
    let mut bench = c.benchmark_group("fold_3600_rows");
    bench.throughput(Throughput::Elements(3600));
    for (name, with_allocations) in [("plain", false), ("vmt_2x3_tags", true)] {
        // What `usage_row_from_owned_item` makes of the rows' items (a test in the adapter shows
        // it equal), built from the domain rows so the VMT rows lie in memory as they did.
        let rows: Vec<UsageRow> = rows(with_allocations)
            .into_iter()
            .map(|row| RowShape::usage_row(shape.as_ref(), row))
            .collect();
        bench.bench_function(name, |b| {
            b.iter(|| {
                let mut f = GroupFold::new(group(), now, &cfg);
                for r in &rows {
                    f.push_row(black_box(r)).unwrap();
                }
                let outcome = f.finish();
                assert!(matches!(outcome, FoldOutcome::Valid(_)));
                black_box(outcome)
            })
        });
    }
    let items = items();
    bench.bench_function("plain_from_sdk_items", |b| {
        b.iter_batched(
            || items.clone(),
            |items| {
                let mut f = GroupFold::new(group(), now, &cfg);
                for item in items {
                    let row = usage_row_from_owned_item(shape.as_ref(), black_box(item));
                    f.push_row(&row).unwrap();
                }
                let outcome = f.finish();
                assert!(matches!(outcome, FoldOutcome::Valid(_)));
                black_box(outcome)
            },
            BatchSize::LargeInput,
        )
    });
    let domain_rows = rows(false);
    bench.bench_function("plain_domain_rows", |b| {
        b.iter(|| {
            let mut f = GroupFold::new(group(), now, &cfg);
            for r in &domain_rows {
                f.push(black_box(r)).unwrap();
            }
            let outcome = f.finish();
            assert!(matches!(outcome, FoldOutcome::Valid(_)));
            black_box(outcome)
        })
    });
    bench.finish();
}

criterion_group!(benches, fold);
criterion_main!(benches);
