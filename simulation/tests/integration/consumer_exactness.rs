//! Exactness under faults: for many seeded schedules of duplicates, crashes mid-batch,
//! bisection, checkpoint resumes, throttled writes and lost responses, the usage rows hold
//! exactly the quantities of the unique records — per group-second — and every row passes the
//! aggregator's guardrails.

use crate::consumer_common as common;

use std::sync::Arc;
use std::time::Duration;

use awsmp_consumer::Settings;
use awsmp_consumer::adapters::memory::MemoryStores;
use awsmp_consumer::handler::STORE_RETRY;
use awsmp_contract::attrs;
use awsmp_contract::clock::FixedClock;
use awsmp_contract::keys::{GroupKey, HourBucket, parse_usage_timestamp, split_usage_sort_key};
use awsmp_contract::reasons;
use awsmp_contract::retry::RetryPolicy;
use awsmp_contract::row::AttrValue;
use awsmp_contract::time::TimeConfig;
use awsmp_pipeline::domain::fold::{FoldOutcome, GroupFold};
use awsmp_testkit::ports::{Ctx, Faulty};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use common::*;

fn settings() -> Settings {
    Settings {
        store_retry: RetryPolicy {
            base: Duration::from_micros(50),
            ..STORE_RETRY
        },
        concurrency: 4,
        ..Settings::default()
    }
}

fn faulty_consumer(stores: &MemoryStores, faults: &Faults) -> awsmp_consumer::Consumer {
    let mut c = stores.consumer(settings(), Arc::new(FixedClock::new(t0())));
    let ctx = Ctx::new(faults.clone());
    c.dedup = Arc::new(Faulty::new(stores.dedup.clone(), &ctx));
    c.rejected = Arc::new(Faulty::new(stores.rejected.clone(), &ctx));
    c.rows = Arc::new(Faulty::new(stores.rows.clone(), &ctx));
    c.finalized = Arc::new(Faulty::new(stores.finalized.clone(), &ctx));
    c
}

/// Every row, folded alone, is valid for the aggregator.
fn assert_rows_pass_the_guardrails(stores: &MemoryStores) {
    for (key, row) in stores.rows.rows() {
        let seg = split_usage_sort_key(&key.sort_key).unwrap();
        let ts = parse_usage_timestamp(seg.timestamp).unwrap();
        let group = GroupKey::new(
            &key.license_arn,
            seg.account,
            seg.dimension,
            HourBucket::containing(ts),
        );
        let now = HourBucket::containing(ts).end() + chrono::Duration::minutes(70);
        let mut fold = GroupFold::new(group, now, &TimeConfig::default()).finalize_zero(true);
        // Rows the pipeline finalized lost only their marker: check them as written.
        let mut row = row;
        row.entry(attrs::METERING_PENDING.to_owned())
            .or_insert_with(|| AttrValue::s(HourBucket::containing(ts).to_string()));
        fold.push(&row).unwrap();
        assert!(
            matches!(fold.finish(), FoldOutcome::Valid(_)),
            "row {key:?} is rejected by the aggregator: {row:?}"
        );
    }
}

#[tokio::test]
async fn replays_add_nothing_twice_and_skip_nothing_under_seeded_faults() {
    for seed in 0..40u64 {
        let stream = workload(seed, 2, 7, 60);
        let stores = MemoryStores::new();
        let faults = plan(seed, 80, 50);
        let consumer = faulty_consumer(&stores, &faults);
        let mut rng = StdRng::seed_from_u64(seed ^ 0xfeed);
        let batch = 1 + (seed as usize % 9);
        let stats = drain(&consumer, &stream, batch, &faults, || {
            rng.random_bool(0.3).then(|| rng.random_range(0..25))
        })
        .await;
        assert_eq!(
            stores.rows.quantities(),
            stream.expected,
            "seed {seed}: rows differ from the unique records ({stats:?})"
        );
        assert!(
            stores.rejected.items().is_empty(),
            "seed {seed}: nothing is rejected"
        );
        assert!(
            stats.function_errors > 0 || seed % 10 != 0,
            "seed {seed}: {stats:?}"
        );
        assert_rows_pass_the_guardrails(&stores);
    }
}

#[tokio::test]
async fn a_replayed_stream_adds_nothing() {
    let stream = workload(7, 2, 5, 40);
    let stores = MemoryStores::new();
    let faults = plan(1, 0, 0);
    let consumer = faulty_consumer(&stores, &faults);
    drain(&consumer, &stream, 10, &faults, || None).await;
    assert_eq!(stores.rows.quantities(), stream.expected);
    // GIVEN every record applied; WHEN the mapping re-reads the whole stream (e.g. an iterator
    // reset to TRIM_HORIZON) with other batch boundaries; THEN nothing changes.
    drain(&consumer, &stream, 3, &faults, || None).await;
    drain(&consumer, &stream, 100, &faults, || None).await;
    assert_eq!(stores.rows.quantities(), stream.expected);
    let hits = consumer.metrics.total("DedupHit");
    assert!(hits >= 3.0 * stream.duplicates as f64, "{hits}");
}

#[tokio::test]
async fn late_usage_is_recorded_not_written_and_replays_are_not_late() {
    for seed in 0..15u64 {
        let stream = workload(100 + seed, 1, 3, 50);
        let stores = MemoryStores::new();
        let faults = plan(seed, 50, 50);
        let consumer = faulty_consumer(&stores, &faults);
        let shard = &stream.shards[0];
        let half = shard.len() / 2;
        let first = Stream {
            shards: vec![shard[..half].to_vec()],
            ..Stream::default()
        };
        let mut rng = StdRng::seed_from_u64(seed);
        drain(&consumer, &first, 4, &faults, || {
            rng.random_bool(0.3).then(|| rng.random_range(0..10))
        })
        .await;
        // GIVEN the pipeline finalizes every group-hour written so far.
        let before = stores.rows.quantities();
        for key in before.keys() {
            let seg = split_usage_sort_key(&key.sort_key).unwrap();
            let hour = HourBucket::containing(parse_usage_timestamp(seg.timestamp).unwrap());
            let g = GroupKey::new(&key.license_arn, seg.account, seg.dimension, hour);
            stores.rows.finalize(&g);
            stores.finalized.finalize(g);
        }
        // WHEN the whole shard is (re)delivered, overlapping what was applied.
        drain(&consumer, &stream, 5, &faults, || {
            rng.random_bool(0.3).then(|| rng.random_range(0..10))
        })
        .await;
        // THEN finalized rows are unchanged, and rows + late usage = everything, exactly.
        let after = stores.rows.quantities();
        for (k, q) in &before {
            assert_eq!(
                after.get(k),
                Some(q),
                "seed {seed}: finalized row {k:?} re-opened"
            );
        }
        let late = stores.rejected.quantity(reasons::LATE_USAGE);
        assert_eq!(
            after.values().sum::<u64>() + late,
            stream.expected_total(),
            "seed {seed}"
        );
        assert_rows_pass_the_guardrails(&stores);
    }
}

#[tokio::test]
async fn checkpoint_resumes_after_partial_failures_are_exact() {
    for seed in 0..10u64 {
        let stream = workload(500 + seed, 2, 6, 50);
        let stores = MemoryStores::new();
        // Heavy throttling exhausts the in-handler retries: the handler reports batch item
        // failures and the mapping resumes from the lowest one.
        let faults = plan(seed, 450, 100);
        let consumer = faulty_consumer(&stores, &faults);
        let stats = drain(&consumer, &stream, 8, &faults, || None).await;
        assert!(stats.partial_failures > 0, "seed {seed}: {stats:?}");
        assert_eq!(stores.rows.quantities(), stream.expected, "seed {seed}");
        assert_rows_pass_the_guardrails(&stores);
    }
}

#[tokio::test]
async fn a_discarded_batch_redriven_after_its_lanes_moved_on_is_applied_once() {
    let mut behind = 0;
    for seed in 0..12u64 {
        let stream = workload(300 + seed, 1, 3, 60);
        let shard = &stream.shards[0];
        let mut rng = StdRng::seed_from_u64(seed);
        let a = rng.random_range(5..25);
        let b = a + rng.random_range(3..12);
        let part = |r: std::ops::Range<usize>| Stream {
            shards: vec![shard[r].to_vec()],
            ..Stream::default()
        };
        let stores = MemoryStores::new();
        let faults = plan(seed, 50, 50);
        let consumer = faulty_consumer(&stores, &faults);
        // GIVEN the records before the batch applied, and the batch's attempts each stopped
        // by a crash after a few store calls (some of its rows written, others not) until the
        // mapping, its retries used up, discards it to the on-failure destination…
        drain(&consumer, &part(0..a), 7, &faults, || None).await;
        for _ in 0..3 {
            faults.crash_after(rng.random_range(0..15));
            consumer.handle(event(&shard[a..b])).await;
            faults.recover();
        }
        // …and moves on: later records of the same lanes write the same per-second rows.
        drain(&consumer, &part(b..shard.len()), 7, &faults, || None).await;
        // WHEN the operator re-drives it, invoking again until no record failed…
        let mut redriven = false;
        for _ in 0..100 {
            let (response, report) = consumer.process(event(&shard[a..b])).await;
            behind += report.behind_watermark_parts;
            if response.batch_item_failures.is_empty() {
                redriven = true;
                break;
            }
        }
        assert!(redriven, "seed {seed}: the re-drive never succeeded");
        // …and once more.
        let clean = stores.consumer(settings(), Arc::new(FixedClock::new(t0())));
        let (response, again) = clean.process(event(&shard[a..b])).await;
        // THEN the rows hold exactly the unique records: nothing lost, nothing twice. Per
        // group, not per second: a producer's twin of a discarded record, later on the
        // stream, may be the copy that applies its events (at its own arrival second).
        assert!(response.batch_item_failures.is_empty());
        assert_eq!(
            again.quantity_written, 0,
            "seed {seed}: the second re-drive"
        );
        let per_group = |rows: &std::collections::BTreeMap<awsmp_contract::keys::RowKey, u64>| {
            let mut out = std::collections::BTreeMap::<(String, String), u64>::new();
            for (k, q) in rows {
                let group = k.sort_key.rsplit_once('#').unwrap().0.to_owned();
                *out.entry((k.license_arn.clone(), group)).or_default() += q;
            }
            out
        };
        assert_eq!(
            per_group(&stores.rows.quantities()),
            per_group(&stream.expected),
            "seed {seed}"
        );
        assert_rows_pass_the_guardrails(&stores);
    }
    assert!(
        behind > 0,
        "no re-driven record fell behind a later record of its lane"
    );
}
