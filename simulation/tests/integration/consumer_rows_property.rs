//! Property tests: whatever events arrive — mixed allocated and unallocated usage in one
//! second, totals beyond the API maximum, zero quantities, any batch boundaries — every row
//! the consumer writes passes the aggregator's guardrails (`GroupFold`), and every unit is
//! either in a row or recorded with a reason.

use crate::consumer_common as common;

use std::sync::Arc;

use awsmp_consumer::Settings;
use awsmp_consumer::adapters::memory::MemoryStores;
use awsmp_consumer::handler::kinesis_record;
use awsmp_contract::clock::FixedClock;
use awsmp_contract::keys::{GroupKey, HourBucket, parse_usage_timestamp, split_usage_sort_key};
use awsmp_contract::limits::marketplace::MAX_USAGE_QUANTITY;
use awsmp_contract::time::TimeConfig;
use awsmp_contract::wire::{encode_aggregated, encode_event};
use awsmp_pipeline::domain::fold::{FoldOutcome, GroupFold};
use awsmp_producer::{Event, Tag, UsageAllocation};
use chrono::Duration;
use proptest::prelude::*;

use common::{STREAM_ARN, event, license, t0};

#[derive(Debug, Clone)]
struct Ev {
    group: usize,
    second: i64,
    quantity: u64,
    /// Tag-set ids the quantity is spread over (empty: unallocated).
    tags: Vec<u8>,
}

fn ev_strategy() -> impl Strategy<Value = Ev> {
    (
        0..2usize,
        0..3i64,
        prop_oneof![
            Just(0u64),
            1..50u64,
            (MAX_USAGE_QUANTITY / 3)..=(MAX_USAGE_QUANTITY / 2)
        ],
        prop_oneof![Just(vec![]), proptest::collection::vec(0..6u8, 1..4)],
    )
        .prop_map(|(group, second, quantity, tags)| Ev {
            group,
            second,
            quantity,
            tags,
        })
}

fn to_event(e: &Ev, id: usize) -> Event {
    let ts = t0() + Duration::seconds(e.second);
    let mut ev = Event::new(license(e.group), "210987654321", "api", e.quantity, ts)
        .with_event_id(format!("e{id}"));
    if !e.tags.is_empty() {
        let n = e.tags.len() as u64;
        let allocs = e
            .tags
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let share = e.quantity / n + u64::from((i as u64) < e.quantity % n);
                UsageAllocation::new(share, vec![Tag::new("k", format!("v{t}"))])
            })
            .collect();
        ev = ev.with_allocations(allocs);
    }
    ev
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn consumer_rows_always_pass_the_aggregator(
        records in proptest::collection::vec(proptest::collection::vec(ev_strategy(), 1..5), 1..12),
        batch in 1..5usize,
        max_allocations in prop_oneof![Just(2usize), Just(2500usize)],
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let stores = MemoryStores::new();
        let mut settings = Settings::default();
        settings.limits.max_allocations = max_allocations.min(2500);
        let consumer = stores.consumer(settings, Arc::new(FixedClock::new(t0())));
        let mut delivered = Vec::new();
        let mut total = 0u64;
        let mut id = 0;
        for (i, evs) in records.iter().enumerate() {
            // Every event of a record shares the record's arrival second.
            let second = evs[0].second;
            let payloads: Vec<Vec<u8>> = evs.iter().map(|e| {
                id += 1;
                total += e.quantity;
                encode_event(&to_event(&Ev { second, ..e.clone() }, id))
            }).collect();
            let data = encode_aggregated(payloads.iter().map(|p| ("pk", None, &p[..]))).to_vec();
            delivered.push(kinesis_record(
                STREAM_ARN, "shardId-000000000000", &(100 + i).to_string(), "pk",
                t0() + Duration::seconds(second), data,
            ));
        }
        rt.block_on(async {
            for chunk in delivered.chunks(batch) {
                let r = consumer.handle(event(chunk)).await;
                assert!(r.batch_item_failures.is_empty());
            }
        });
        let rows = stores.rows.rows();
        for (key, row) in &rows {
            let seg = split_usage_sort_key(&key.sort_key).unwrap();
            let ts = parse_usage_timestamp(seg.timestamp).unwrap();
            let hour = HourBucket::containing(ts);
            let g = GroupKey::new(&key.license_arn, seg.account, seg.dimension, hour);
            let mut fold = GroupFold::new(g, hour.end() + Duration::minutes(70), &TimeConfig::default())
                .finalize_zero(true);
            fold.push(row).unwrap();
            let outcome = fold.finish();
            prop_assert!(matches!(outcome, FoldOutcome::Valid(_)), "{outcome:?} for {row:?}");
        }
        let rejected: u64 = stores.rejected.items().values().filter_map(|e| e.quantity).sum();
        prop_assert_eq!(stores.rows.total() + rejected, total);
    }
}
