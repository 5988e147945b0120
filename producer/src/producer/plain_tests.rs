//! The plain event's fast path ([`Producer::stage_plain`]): an event with no id, producer id
//! or allocations of its own, of a group this thread has checked, is staged as the checked
//! path stages it — the same records byte for byte, counters, back-pressure, refusals and
//! events given back.

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use proptest::prelude::*;

use super::plain::{PLAIN_ABSORBED, PLAIN_STAGED};
use crate::partition::ShardMap;
use crate::sink::StoredRecord;
use crate::test_support::paused_runtime;
use crate::{
    Event, MemoryRecordSink, Producer, ProducerError, ProducerStats, StaticShardMapSource, Tag,
    UsageAllocation,
};
use awsmp_contract::error::ValidationError;
use awsmp_contract::wire::WireVersion;

const EPOCH: u128 = 0x5555_0123_4567_89ab_cdef_0123_4567_89ab;
const PRODUCER_ID: &str = "svc";

fn event(g: usize, timestamp: DateTime<Utc>, quantity: u64) -> Event {
    Event::new(
        format!("arn:aws:license-manager::123456789012:license:l-{g:032x}"),
        format!("{:012}", 100_000_000_000u64 + g as u64),
        ["requests", "seats", "gb-hours"][g % 3],
        quantity,
        timestamp,
    )
}

/// `e` made to take the checked path with the same outcome: the producer's default producer
/// id written into it (what both paths write for a plain event).
fn checked(mut e: Event) -> Event {
    e.producer_id = Some(PRODUCER_ID.to_owned());
    e
}

fn producer(sink: &MemoryRecordSink, max_buffered: usize) -> Producer {
    producer_as(sink, max_buffered, false, WireVersion::V2)
}

fn producer_as(
    sink: &MemoryRecordSink,
    max_buffered: usize,
    collapse: bool,
    version: WireVersion,
) -> Producer {
    Producer::builder("s")
        .collapse(collapse)
        .wire_version(version)
        .linger(Duration::from_millis(50))
        .max_buffered_bytes(max_buffered)
        .jitter_seed(7)
        .id_epoch(EPOCH)
        .producer_id(PRODUCER_ID)
        .start_with(
            sink.clone(),
            StaticShardMapSource::new(ShardMap::uniform(3)),
        )
        .unwrap()
}

/// Events this thread's calls took through the fast path: staged, or added to open sums.
fn staged_plain() -> u64 {
    PLAIN_STAGED.with(std::cell::Cell::get) + PLAIN_ABSORBED.with(std::cell::Cell::get)
}

/// What reached the sink, what the producer counted, and how many calls took the fast path.
type Run = (Vec<StoredRecord>, ProducerStats, u64);

fn run(events: &[Event], take_checked_path: bool, collapse: bool, version: WireVersion) -> Run {
    paused_runtime().block_on(async {
        let sink = MemoryRecordSink::new(ShardMap::uniform(3));
        let p = producer_as(&sink, 16 * 1024 * 1024, collapse, version);
        let before = staged_plain();
        for (i, e) in events.iter().enumerate() {
            let e = if take_checked_path {
                checked(e.clone())
            } else {
                e.clone()
            };
            p.record(e).await.unwrap();
            if i % 89 == 88 {
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        }
        let fast = staged_plain() - before;
        assert!(p.shutdown().await.unwrap().is_complete());
        (sink.records(), p.stats(), fast)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, .. ProptestConfig::default() })]

    /// The same plain events through the fast path and through the checked path: identical
    /// records (data, keys, shards, in order) and counters, with and without collapse, v1
    /// and v2. Timestamps carry nanoseconds (truncated alike); quantities reach `u64::MAX`
    /// (the longest varints, and sums that overflow and open another).
    #[test]
    fn a_plain_event_is_staged_as_the_checked_path_stages_it(
        raw in prop::collection::vec(
            (0usize..7, 0i64..5_000_000_000, any::<u64>(), 0usize..4),
            1..300,
        ),
        small in any::<bool>(),
        collapse in any::<bool>(),
        v1 in any::<bool>(),
    ) {
        let version = if v1 { WireVersion::V1 } else { WireVersion::V2 };
        let t0 = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
        let events: Vec<Event> = raw
            .iter()
            .map(|&(g, ns, q, tags)| {
                // Small quantities and a few seconds: sums of many events (collapse).
                let (ns, q) = if small { (ns % 3_000_000_000, q % 1_000) } else { (ns, q) };
                let e = event(g, t0 + chrono::Duration::nanoseconds(ns), q);
                // Some events of some groups carry an allocation of all their units.
                if g % 3 == 0 && tags > 0 {
                    let tags = (0..tags).map(|t| Tag::new(format!("k{t}"), "v")).collect();
                    e.with_allocations(vec![UsageAllocation::new(q, tags)])
                } else {
                    e
                }
            })
            .collect();
        let plain = events.iter().filter(|e| e.usage_allocations.is_none()).count();
        let (fast, fast_stats, fast_calls) = run(&events, false, collapse, version);
        let (slow, slow_stats, slow_calls) = run(&events, true, collapse, version);
        prop_assert_eq!(slow_calls, 0, "an event with its own producer id is checked");
        if !collapse && version == WireVersion::V2 {
            // Each group's first event on this thread is checked (and keeps the group's
            // head) unless an earlier case kept it already; every later one is staged by
            // the fast path.
            let groups = raw.iter().map(|r| r.0).collect::<std::collections::BTreeSet<_>>();
            prop_assert!(fast_calls as usize >= events.len() - groups.len());
        }
        if collapse && small {
            // The checked path keeps each group, and opens each window's sums of events with
            // allocations (a window closes after every 89th event) — in v1 every sum; every
            // other event joins or opens its sum on the fast path, in v2 with allocations too.
            let v2 = version == WireVersion::V2;
            let opened = events
                .iter()
                .enumerate()
                .filter(|(_, e)| !v2 || e.usage_allocations.is_some())
                .map(|(i, e)| {
                    let allocated = e.usage_allocations.is_some();
                    (i / 89, e.dimension.clone(), e.license_arn.clone(), e.timestamp.timestamp(), allocated)
                })
                .collect::<std::collections::BTreeSet<_>>();
            let groups = raw.iter().map(|r| r.0).collect::<std::collections::BTreeSet<_>>();
            let joinable = if v2 { events.len() } else { plain };
            prop_assert!(fast_calls as usize + opened.len() + groups.len() >= joinable);
        }
        prop_assert_eq!(fast.len(), slow.len());
        for (a, b) in fast.iter().zip(&slow) {
            prop_assert_eq!(&a.entry, &b.entry);
            prop_assert_eq!(&a.shard_id, &b.shard_id);
        }
        prop_assert_eq!(fast_stats, slow_stats);
    }
}

/// Fills a paused sink's buffer with `try_record` of plain events (or their checked twins):
/// how many were accepted, the event `Full` gave back, whether `record()` then waits, and
/// the fast-path count.
async fn fill(take_checked_path: bool, collapse: bool) -> (usize, Event, bool, u64) {
    let sink = MemoryRecordSink::new(ShardMap::uniform(3));
    sink.pause();
    let p = producer_as(&sink, 64 * 1024, collapse, WireVersion::V2);
    let t0 = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
    let before = staged_plain();
    // With collapse, a second apart: each event opens a sum, charged.
    let step = if collapse { 1_000_000_123 } else { 1_000_123 };
    for i in 0..100_000usize {
        // Sub-millisecond digits: the event given back has them truncated, on both paths.
        let ts = t0 + chrono::Duration::nanoseconds(i as i64 * step);
        let e = event(i % 4, ts, 3);
        let e = if take_checked_path { checked(e) } else { e };
        match p.try_record(e.clone()) {
            Ok(()) => {}
            Err(ProducerError::Full(given_back)) => {
                let fast = staged_plain() - before;
                let waited = tokio::time::timeout(Duration::from_secs(5), p.record(e)).await;
                return (i, *given_back, waited.is_err(), fast);
            }
            Err(e) => panic!("{e}"),
        }
        tokio::task::yield_now().await;
    }
    panic!("the buffer never filled");
}

#[tokio::test(start_paused = true)]
async fn back_pressure_and_the_event_given_back_are_the_checked_paths() {
    // With collapse, every event opens a sum: the fast path's opening, charged.
    for collapse in [false, true] {
        let (n, full, waited, fast) = fill(false, collapse).await;
        let (m, checked_full, checked_waited, checked_fast) = fill(true, collapse).await;
        assert!(
            fast as usize >= n - 4,
            "collapse {collapse}: the plain events took the fast path ({fast} of {n})"
        );
        assert_eq!(checked_fast, 0);
        assert_eq!(n, m, "collapse {collapse}: as many accepted before Full");
        assert_eq!(
            full, checked_full,
            "collapse {collapse}: Full gives back the same event"
        );
        assert_eq!(full.timestamp.timestamp_subsec_nanos() % 1_000_000, 0);
        assert!(
            full.event_id.starts_with("p:"),
            "with its generated id: {full:?}"
        );
        assert!(
            waited && checked_waited,
            "collapse {collapse}: record() waits while full"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_group_too_large_for_a_record_is_refused_on_every_call() {
    let sink = MemoryRecordSink::new(ShardMap::uniform(3));
    let p = producer(&sink, 16 * 1024 * 1024);
    let t0 = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
    let mut e = event(1, t0, 1);
    // The group passes its checks (and is kept by the thread's cache); the event, its
    // producer id a mebibyte long, does not fit a record.
    e.producer_id = Some("p".repeat(1024 * 1024));
    for _ in 0..3 {
        match p.record(e.clone()).await {
            Err(ProducerError::Invalid {
                source: ValidationError::EventTooLarge { .. },
                event,
            }) => assert_eq!(event.producer_id, e.producer_id),
            other => panic!("not refused: {other:?}"),
        }
    }
    // A plain event of an ordinary group still goes through.
    p.record(event(2, t0, 5)).await.unwrap();
    p.flush().await.unwrap();
    assert_eq!(p.stats().events_recorded, 1);
    assert_eq!(sink.records().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_closed_producer_gives_a_plain_event_back_with_its_id() {
    let sink = MemoryRecordSink::new(ShardMap::uniform(3));
    let p = producer(&sink, 16 * 1024 * 1024);
    let t0 = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
    p.record(event(3, t0, 1)).await.unwrap();
    p.shutdown().await.unwrap();
    match p.record(event(3, t0, 2)).await {
        Err(ProducerError::Closed(Some(e))) => {
            assert!(e.event_id.starts_with("p:"), "{e:?}");
            assert_eq!(e.producer_id.as_deref(), Some(PRODUCER_ID));
            assert_eq!(e.quantity, 2);
        }
        other => panic!("not closed: {other:?}"),
    }
}

/// A tight loop of plain events still yields (its budget spent every second call): a task
/// spawned before the loop runs while it does, with and without collapse.
#[tokio::test(flavor = "current_thread")]
async fn a_tight_loop_of_plain_events_yields() {
    for collapse in [false, true] {
        let sink = MemoryRecordSink::new(ShardMap::uniform(3));
        let p = producer_as(&sink, 16 * 1024 * 1024, collapse, WireVersion::V2);
        let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let other = ran.clone();
        tokio::spawn(async move { other.store(true, std::sync::atomic::Ordering::SeqCst) });
        let t0 = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
        let before = staged_plain();
        let mut yielded_at = None;
        for i in 0..2_000 {
            p.record(event(0, t0, 1)).await.unwrap();
            if yielded_at.is_none() && ran.load(std::sync::atomic::Ordering::SeqCst) {
                yielded_at = Some(i);
            }
        }
        assert!(
            staged_plain() - before >= 1_990,
            "collapse {collapse}: the fast path ran"
        );
        assert!(
            yielded_at.is_some(),
            "collapse {collapse}: the loop never yielded"
        );
        p.shutdown().await.unwrap();
        assert_eq!(p.stats().events_recorded, 2_000);
    }
}

/// An event with allocations the checked path refuses is refused alike after its group is
/// kept (the fast path checks allocations as the checked path does, and leaves a refusal to
/// it): the same reason, nothing staged, no id taken.
#[tokio::test(start_paused = true)]
async fn bad_allocations_are_refused_after_the_group_is_kept() {
    for collapse in [false, true] {
        bad_allocations_are_refused(collapse).await;
    }
}

/// [`bad_allocations_are_refused_after_the_group_is_kept`], with collapse or without (where
/// the good event with allocations opened the sum the bad ones would join).
async fn bad_allocations_are_refused(collapse: bool) {
    let sink = MemoryRecordSink::new(ShardMap::uniform(3));
    let p = producer_as(&sink, 16 * 1024 * 1024, collapse, WireVersion::V2);
    let t0 = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
    let tagged = |n: u64| UsageAllocation::new(n, vec![Tag::new("team", "a")]);
    // Keeps the group (and its head) on this thread.
    p.record(event(4, t0, 5)).await.unwrap();
    p.record(event(4, t0, 5).with_allocations(vec![tagged(5)]))
        .await
        .unwrap();
    let bad = [
        (
            vec![tagged(4)],
            "allocations summing to less than the quantity",
        ),
        (vec![], "an empty allocation list"),
        (
            vec![UsageAllocation::new(5, vec![])],
            "an allocation without tags",
        ),
    ];
    for (allocations, what) in bad {
        let before = staged_plain();
        match p
            .record(event(4, t0, 5).with_allocations(allocations))
            .await
        {
            Err(ProducerError::Invalid { source, event }) => {
                assert!(event.usage_allocations.is_some(), "{what}: {source}");
            }
            other => panic!("collapse {collapse}, {what}: not refused: {other:?}"),
        }
        assert_eq!(
            staged_plain(),
            before,
            "collapse {collapse}, {what}: not staged"
        );
    }
    p.flush().await.unwrap();
    assert_eq!(p.stats().events_recorded, 2);
    assert_eq!(p.buffered_bytes(), 0, "nothing charged for the refused");
}

/// Collapse: events with allocations of one group and second, after the first opened their
/// sum, join it on the fast path — each charged as the checked path charges it, the tag
/// sets summed apart — and the window sends one event: the whole quantity, each tag set's
/// sum, the earliest timestamp.
#[tokio::test(start_paused = true)]
async fn allocated_events_join_their_sum_on_the_fast_path() {
    let sink = MemoryRecordSink::new(ShardMap::uniform(3));
    let p = producer_as(&sink, 16 * 1024 * 1024, true, WireVersion::V2);
    let t0 = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
    let tagged = |n: u64, team: &str| UsageAllocation::new(n, vec![Tag::new("team", team)]);
    // The first event keeps the group and opens the allocated sum (the checked path).
    let first = event(6, t0 + chrono::Duration::milliseconds(900), 4);
    p.record(first.with_allocations(vec![tagged(4, "a")]))
        .await
        .unwrap();
    let before = staged_plain();
    let charged = p.buffered_bytes();
    for i in 0..40u64 {
        let team = if i % 2 == 0 { "a" } else { "b" };
        // Nanoseconds past the millisecond: the sum keeps the earliest, truncated.
        let at = t0 + chrono::Duration::nanoseconds(1_000_000 * (899 - i as i64) + 999);
        let e = event(6, at, 3).with_allocations(vec![tagged(2, team), tagged(1, "c")]);
        p.record(e).await.unwrap();
    }
    assert_eq!(
        staged_plain() - before,
        40,
        "every later event on the fast path"
    );
    assert!(
        p.buffered_bytes() >= charged * 40,
        "each is charged: {} after {charged} for the first",
        p.buffered_bytes()
    );
    p.flush().await.unwrap();
    assert_eq!(p.buffered_bytes(), 0);
    assert_eq!(p.stats().events_recorded, 41);
    let sums: Vec<Event> = sink
        .records()
        .iter()
        .flat_map(|r| awsmp_contract::wire::decode_events(&r.entry.data).unwrap())
        .map(|u| u.event.unwrap())
        .collect();
    assert_eq!(sums.len(), 1, "one sum: {sums:?}");
    let sum = &sums[0];
    assert_eq!(sum.quantity, 4 + 40 * 3);
    assert_eq!(
        sum.timestamp,
        t0 + chrono::Duration::milliseconds(899 - 39),
        "the earliest, in whole milliseconds"
    );
    let mut by_team: Vec<(String, u64)> = sum
        .usage_allocations
        .iter()
        .flatten()
        .map(|a| (a.tags[0].value.clone(), a.allocated_usage_quantity))
        .collect();
    by_team.sort();
    let expected = [("a", 4 + 20 * 2), ("b", 20 * 2), ("c", 40)];
    let expected: Vec<(String, u64)> = expected.iter().map(|&(t, n)| (t.into(), n)).collect();
    assert_eq!(by_team, expected);
}

/// Collapse, v2: plain events of a kept group open their seconds' sums on the fast path, and
/// a meter of the group — another origin, whose own sums are hollow — joins those sums, and
/// their later plain events join the sums it opened: one sum a second, the whole quantity,
/// the group and producer id written whole.
#[tokio::test(start_paused = true)]
async fn plain_events_and_a_meter_of_the_group_share_their_sums() {
    let sink = MemoryRecordSink::new(ShardMap::uniform(3));
    let p = producer_as(&sink, 16 * 1024 * 1024, true, WireVersion::V2);
    let t0 = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
    let at =
        |s: i64, ms: i64| t0 + chrono::Duration::seconds(s) + chrono::Duration::milliseconds(ms);
    // The group is kept by its first event (the checked path).
    p.record(event(4, at(0, 500), 1)).await.unwrap();
    let m = {
        let e = event(4, t0, 0);
        p.meter(e.license_arn, e.customer_aws_account_id, e.dimension)
            .unwrap()
    };
    let before = staged_plain();
    for s in 1..6 {
        // The plain event opens the second's sum; the meter's event, its slot on another
        // sum, finds it in the table.
        p.record(event(4, at(s, 700), 10)).await.unwrap();
        m.record(at(s, 300), 5).await.unwrap();
        p.record(event(4, at(s, 900), 2)).await.unwrap();
    }
    for s in 6..9 {
        // The meter opens the second's sum (hollow); the plain events find it by its
        // shared fields.
        m.record(at(s, 300), 5).await.unwrap();
        p.record(event(4, at(s, 700), 10)).await.unwrap();
        p.record(event(4, at(s, 900), 2)).await.unwrap();
    }
    assert_eq!(
        staged_plain() - before,
        16,
        "every plain event on the fast path"
    );
    p.flush().await.unwrap();
    assert_eq!(p.stats().events_recorded, 25);
    let mut sums: Vec<Event> = sink
        .records()
        .iter()
        .flat_map(|r| awsmp_contract::wire::decode_events(&r.entry.data).unwrap())
        .map(|u| u.event.unwrap())
        .collect();
    sums.sort_by_key(|e| e.timestamp);
    let whole = checked(event(4, t0, 0));
    let seen: Vec<(DateTime<Utc>, u64)> = sums.iter().map(|e| (e.timestamp, e.quantity)).collect();
    let expected: Vec<(DateTime<Utc>, u64)> = std::iter::once((at(0, 500), 1))
        .chain((1..9).map(|s| (at(s, 300), 17)))
        .collect();
    assert_eq!(seen, expected, "one sum a second: {sums:?}");
    for e in &sums {
        assert_eq!(e.group(), whole.group());
        assert_eq!(e.producer_id, whole.producer_id);
    }
    p.shutdown().await.unwrap();
}
