//! A meter records exactly what `Producer::record` records for the same usage: the same
//! records byte for byte (same ids: both producers get one epoch), the same counters, the
//! same back-pressure and refusals.

use std::time::Duration;

use chrono::{TimeZone, Timelike, Utc};
use proptest::prelude::*;

use crate::partition::ShardMap;
use crate::sink::StoredRecord;
use crate::test_support::paused_runtime;
use crate::{
    Event, MemoryRecordSink, Producer, ProducerError, ProducerStats, StaticShardMapSource,
};
use awsmp_contract::event::MAX_DIMENSION_BYTES;
use awsmp_contract::wire::WireVersion;

const EPOCH: u128 = 0x0123_4567_89ab_cdef_0123_4567_89ab_cdef;

fn arn(g: usize) -> String {
    format!("arn:aws:license-manager::123456789012:license:l-{g:032x}")
}

fn group(g: usize) -> (String, String, String) {
    (
        arn(g),
        format!("{:012}", 100_000_000_000u64 + g as u64),
        ["requests", "seats", "gb-hours"][g % 3].to_owned(),
    )
}

/// One producer's settings in a comparison.
#[derive(Debug, Clone, Copy)]
struct Setup {
    collapse: bool,
    version: WireVersion,
    aggregation: bool,
    producer_id: bool,
}

fn producer(sink: &MemoryRecordSink, s: Setup, max_buffered: usize) -> Producer {
    let mut b = Producer::builder("s")
        .collapse(s.collapse)
        .wire_version(s.version)
        .aggregation(s.aggregation)
        .linger(Duration::from_millis(50))
        .max_buffered_bytes(max_buffered)
        .jitter_seed(7)
        .id_epoch(EPOCH);
    if s.producer_id {
        b = b.producer_id("svc");
    }
    b.start_with(
        sink.clone(),
        StaticShardMapSource::new(ShardMap::uniform(3)),
    )
    .unwrap()
}

type Usage = (usize, i64, u64);

/// What reached the sink and what the producer counted.
type Run = (Vec<StoredRecord>, ProducerStats);

/// A meter of each of the first `n` test groups.
fn meters_of(p: &Producer, n: usize) -> Vec<crate::Meter> {
    (0..n)
        .map(|g| {
            let (l, a, d) = group(g);
            p.meter(l, a, d).unwrap()
        })
        .collect()
}

fn run(s: Setup, usage: &[Usage], meters: bool) -> Run {
    paused_runtime().block_on(async {
        let sink = MemoryRecordSink::new(ShardMap::uniform(3));
        let p = producer(&sink, s, 16 * 1024 * 1024);
        let bound = meters_of(&p, 5);
        let t0 = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
        for (i, &(g, ms, q)) in usage.iter().enumerate() {
            let ts = t0 + chrono::Duration::milliseconds(ms);
            if meters {
                bound[g].record(ts, q).await.unwrap();
            } else {
                let (l, a, d) = group(g);
                p.record(Event::new(l, a, d, q, ts)).await.unwrap();
            }
            // Windows close in between (linger), as a caller's pace would have them.
            if i % 97 == 96 {
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        }
        assert!(p.shutdown().await.unwrap().is_complete());
        (sink.records(), p.stats())
    })
}

fn setup() -> impl Strategy<Value = Setup> {
    (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()).prop_map(
        |(collapse, v1, aggregation, producer_id)| Setup {
            collapse,
            version: if v1 { WireVersion::V1 } else { WireVersion::V2 },
            aggregation,
            producer_id,
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    /// The same usage through `Producer::record(Event)` and through meters: identical
    /// records (data, partition keys, explicit hash keys, shards, in order) and counters —
    /// with and without collapse, v1 and v2, aggregated or not, including sums that fill up
    /// on quantity overflow.
    #[test]
    fn a_meter_records_what_record_records(
        s in setup(),
        raw in prop::collection::vec((0usize..5, 0i64..3_000, 0u64..1_000), 1..400),
        huge in any::<bool>(),
    ) {
        let usage: Vec<Usage> = raw
            .into_iter()
            .enumerate()
            .map(|(i, (g, ms, q))| (g, ms, if huge && i % 5 == 0 { u64::MAX - q } else { q }))
            .collect();
        let (events, event_stats) = run(s, &usage, false);
        let (metered, meter_stats) = run(s, &usage, true);
        prop_assert_eq!(events.len(), metered.len());
        for (a, b) in events.iter().zip(&metered) {
            prop_assert_eq!(&a.entry, &b.entry);
            prop_assert_eq!(&a.shard_id, &b.shard_id);
        }
        prop_assert_eq!(event_stats, meter_stats);
        let sent: u128 = usage.iter().map(|u| u128::from(u.2)).sum();
        let got: u128 = metered
            .iter()
            .flat_map(|r| awsmp_contract::wire::decode_events(&r.entry.data).unwrap())
            .map(|u| u128::from(u.event.unwrap().quantity))
            .sum();
        prop_assert_eq!(sent, got, "every unit delivered");
    }
}

/// Fills a paused sink's buffer with `try_record` through one API; the count accepted, the
/// event `Full` gives back, and what `record()` then does.
async fn fill(s: Setup, meters: bool) -> (usize, Event, bool) {
    let sink = MemoryRecordSink::new(ShardMap::uniform(3));
    sink.pause();
    let p = producer(&sink, s, 64 * 1024);
    let (l, a, d) = group(1);
    let m = p.meter(l.clone(), a.clone(), d.clone()).unwrap();
    let t0 = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
    for i in 0..100_000usize {
        // A new second every event under collapse: each opens a sum, charged.
        let ts = t0 + chrono::Duration::seconds(i as i64);
        let r = if meters {
            m.try_record(ts, 3)
        } else {
            p.try_record(Event::new(l.clone(), a.clone(), d.clone(), 3, ts))
        };
        match r {
            Ok(()) => {}
            Err(ProducerError::Full(event)) => {
                let waited = if meters {
                    tokio::time::timeout(Duration::from_secs(5), m.record(event.timestamp, 3)).await
                } else {
                    tokio::time::timeout(Duration::from_secs(5), p.record((*event).clone())).await
                };
                return (i, *event, waited.is_err());
            }
            Err(e) => panic!("{e}"),
        }
        tokio::task::yield_now().await;
    }
    panic!("the buffer never filled");
}

#[tokio::test(start_paused = true)]
async fn back_pressure_is_the_same() {
    for collapse in [false, true] {
        for version in [WireVersion::V2, WireVersion::V1] {
            let s = Setup {
                collapse,
                version,
                aggregation: true,
                producer_id: true,
            };
            let (n, full, waited) = fill(s, false).await;
            let (m, metered_full, metered_waited) = fill(s, true).await;
            assert_eq!(n, m, "{s:?}: as many accepted before Full");
            assert_eq!(full, metered_full, "{s:?}: Full gives back the same event");
            assert_eq!(waited, metered_waited, "{s:?}: record() waits alike");
            // Without collapse nothing is released until the sink acknowledges; a closing
            // window releases what its sums were charged beyond their encoding.
            assert!(collapse || waited, "{s:?}: record() waits while full");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_meter_is_refused_what_record_is_refused() {
    let sink = MemoryRecordSink::new(ShardMap::uniform(3));
    let s = Setup {
        collapse: false,
        version: WireVersion::V2,
        aggregation: true,
        producer_id: false,
    };
    let p = producer(&sink, s, 1024 * 1024);
    let (l, a, d) = group(0);
    assert_eq!(
        p.meter("prod-abc", a.clone(), d.clone())
            .unwrap_err()
            .reason(),
        "InvalidLicenseArn"
    );
    assert_eq!(
        p.meter(l.clone(), "12", d.clone()).unwrap_err().reason(),
        "InvalidAccountId"
    );
    assert_eq!(
        p.meter(l.clone(), a.clone(), "").unwrap_err().reason(),
        "EmptyDimension"
    );
    assert_eq!(
        p.meter(l.clone(), a.clone(), "d".repeat(MAX_DIMENSION_BYTES + 1))
            .unwrap_err()
            .reason(),
        "DimensionTooLong"
    );
    let m = p.meter(l.clone(), a.clone(), d.clone()).unwrap();
    let at = |y, mo, day, h, mi, sec, nanos| {
        let t = Utc.with_ymd_and_hms(y, mo, day, h, mi, sec).unwrap();
        t.with_nanosecond(nanos).unwrap()
    };
    // Either side of the years 1970–9999, to the nanosecond, as `Producer::record` draws it.
    let edges = [
        (at(1969, 12, 31, 23, 59, 59, 999_999_999), false),
        (at(1970, 1, 1, 0, 0, 0, 0), true),
        (at(9999, 12, 31, 23, 59, 59, 999_999_999), true),
        (at(10000, 1, 1, 0, 0, 0, 0), false),
    ];
    for (t, valid) in edges {
        let by_meter = m.record(t, 1).await;
        let by_record = p.record(Event::new(&l, &a, &d, 1, t)).await;
        assert_eq!(by_meter.is_ok(), valid, "{t}");
        assert_eq!(by_record.is_ok(), valid, "{t}");
        let Err(ProducerError::Invalid { source, event }) = by_meter else {
            continue;
        };
        assert_eq!(source.reason(), "MalformedTimestamp");
        assert_eq!(event.quantity, 1);
        assert!(!event.event_id.is_empty(), "given back with an id");
    }
    p.shutdown().await.unwrap();
    let late = m.record(Utc::now(), 2).await.unwrap_err();
    assert!(matches!(late, ProducerError::Closed(Some(_))), "{late}");
    assert_eq!(p.stats().events_recorded, 4);
}

/// What `metrics`' counter `names::EVENTS_RECORDED` was added since the last snapshot of a
/// local recorder (its snapshots take the counters' values).
fn recorded_metric(snapshotter: &metrics_util::debugging::Snapshotter) -> u64 {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(k, ..)| k.key().name() == crate::metrics::names::EVENTS_RECORDED)
        .map(|(.., v)| match v {
            metrics_util::debugging::DebugValue::Counter(c) => c,
            _ => 0,
        })
        .sum()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, .. ProptestConfig::default() })]

    /// With collapse, a meter's events added to an open sum are counted when the sum's slot
    /// is detached, not one by one: `stats()` still counts every accepted event after every
    /// call, and the `metrics` counter has them all once `flush()` (or `shutdown()`) returns.
    #[test]
    fn recorded_counts_are_exact_with_slots(
        raw in prop::collection::vec((0usize..3, 0i64..2_500, 0u64..1_000, any::<bool>()), 1..300),
        flush_every in 1usize..120,
    ) {
        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            paused_runtime().block_on(async {
                let sink = MemoryRecordSink::new(ShardMap::uniform(3));
                let s = Setup {
                    collapse: true,
                    version: WireVersion::V2,
                    aggregation: true,
                    producer_id: false,
                };
                let p = producer(&sink, s, 16 * 1024 * 1024);
                let bound = meters_of(&p, 3);
                let t0 = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
                let mut metric = 0;
                for (i, &(g, ms, q, by_meter)) in raw.iter().enumerate() {
                    let ts = t0 + chrono::Duration::milliseconds(ms);
                    if by_meter {
                        bound[g].record(ts, q).await.unwrap();
                    } else {
                        let (l, a, d) = group(g);
                        p.record(Event::new(l, a, d, q, ts)).await.unwrap();
                    }
                    assert_eq!(p.stats().events_recorded, i as u64 + 1);
                    if i % flush_every == flush_every - 1 {
                        p.flush().await.unwrap();
                        metric += recorded_metric(&snapshotter);
                        assert_eq!(metric, i as u64 + 1);
                    }
                }
                assert!(p.shutdown().await.unwrap().is_complete());
                let n = raw.len() as u64;
                assert_eq!(p.stats().events_recorded, n);
                assert_eq!(metric + recorded_metric(&snapshotter), n);
                assert_eq!(p.stats().events_acked, n);
            });
        });
    }
}

/// A tight loop of meter calls still yields (its budget spent every fourth call, every
/// sixteenth with collapse): a task spawned on the same single-threaded runtime runs once the
/// loop has spent the task's budget of 128 units, and not before it has spent most of it.
#[tokio::test]
async fn a_tight_meter_loop_yields() {
    for (collapse, every) in [
        (false, super::METER_CALLS_A_UNIT),
        (true, super::COLLAPSING_METER_CALLS_A_UNIT),
    ] {
        let sink = MemoryRecordSink::new(ShardMap::uniform(3));
        let s = Setup {
            collapse,
            version: WireVersion::V2,
            aggregation: true,
            producer_id: false,
        };
        let p = producer(&sink, s, 16 * 1024 * 1024);
        let (l, a, d) = group(0);
        let m = p.meter(l, a, d).unwrap();
        // The loop starts a turn of its own, with the whole budget.
        tokio::task::yield_now().await;
        let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let other = ran.clone();
        tokio::spawn(async move { other.store(true, std::sync::atomic::Ordering::SeqCst) });
        let t0 = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
        let mut yielded_at = None;
        let calls = 5_000;
        for i in 0..calls {
            m.record(t0, 1).await.unwrap();
            if yielded_at.is_none() && ran.load(std::sync::atomic::Ordering::SeqCst) {
                yielded_at = Some(i);
            }
        }
        // A turn's budget is 128 units, and the call that finds it spent (the 129th unit)
        // yields. The thread's call count starts wherever earlier calls on it left it, so
        // the first unit is spent within `every` calls: the call yielding is the
        // 128 × `every`-th (counted from 0) or one of the `every` - 1 after it.
        let budget = 128 * every as usize;
        let yielded_at = yielded_at.expect("the loop yields");
        assert!(
            (budget..budget + every as usize).contains(&yielded_at),
            "collapse {collapse}: yielded after {yielded_at} calls, where {budget} calls spend a turn's budget"
        );
        p.shutdown().await.unwrap();
        assert_eq!(p.stats().events_recorded, calls as u64);
    }
}
