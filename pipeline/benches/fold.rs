//! Aggregator fold of a full 3,600-row group (one row per second of the hour), with and
//! without VMT allocations (the "aggregator fold of a 3,600-row group" benchmark).
//!
//! - `fold_3600_rows/plain`, `fold_3600_rows/vmt_2x3_tags`: the rows as the DynamoDB adapter
//!   hands them to the aggregator's callback (domain rows, each folded by reference) → the
//!   validated, folded group (`GroupFold::finish`).
//! - `fold_3600_rows/plain_from_sdk_items`: the same group from what the adapter receives (the
//!   SDK's items of a `Query` page, owned): the adapter's conversion, the fold, and the rows'
//!   drop, all timed (the items are copied for each iteration outside the timed region).

use std::hint::black_box;

use aws_sdk_dynamodb::types::AttributeValue;
use awsmp_pipeline::adapters::dynamodb::{row_from_owned_item, to_sdk};
use awsmp_pipeline::domain::fold::{FoldOutcome, GroupFold};
use awsmp_pipeline::domain::keys::GroupKey;
use awsmp_pipeline::domain::row::{Allocation, RawUsageRow, Tag, conforming_row};
use awsmp_pipeline::domain::time::TimeConfig;
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

fn fold(c: &mut Criterion) {
    let now = Utc.with_ymd_and_hms(2026, 11, 30, 12, 20, 0).unwrap();
    let cfg = TimeConfig::default();
    let mut bench = c.benchmark_group("fold_3600_rows");
    bench.throughput(Throughput::Elements(3600));
    for (name, with_allocations) in [("plain", false), ("vmt_2x3_tags", true)] {
        let rows = rows(with_allocations);
        bench.bench_function(name, |b| {
            b.iter(|| {
                let mut f = GroupFold::new(group(), now, &cfg);
                for r in &rows {
                    f.push(black_box(r)).unwrap();
                }
                let outcome = f.finish();
                assert!(matches!(outcome, FoldOutcome::Valid(_)));
                black_box(outcome)
            })
        });
    }
    let items: Vec<HashMap<String, AttributeValue>> = rows(false)
        .iter()
        .map(|r| r.iter().map(|(k, v)| (k.clone(), to_sdk(v))).collect())
        .collect();
    bench.bench_function("plain_from_sdk_items", |b| {
        b.iter_batched(
            || items.clone(),
            |items| {
                let mut f = GroupFold::new(group(), now, &cfg);
                for item in items {
                    let row = row_from_owned_item(black_box(item));
                    f.push(&row).unwrap();
                }
                let outcome = f.finish();
                assert!(matches!(outcome, FoldOutcome::Valid(_)));
                black_box(outcome)
            },
            BatchSize::LargeInput,
        )
    });
    bench.finish();
}

criterion_group!(benches, fold);
criterion_main!(benches);
