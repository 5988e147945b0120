//! Producer benchmarks (against an in-memory sink that acknowledges at once):
//! - `record/collapse`, `record/no_collapse` (v2, the default), `record/no_collapse_v1`:
//!   `Producer::record(Event)` throughput in events/s up to delivery; `record/collapse_meter`,
//!   `record/no_collapse_meter`: the same usage through bound group handles (`Meter::record`);
//!   `record/collapse_dense` and `record/collapse_dense_meter` at the collapse goal's density;
//!   `record/event_drop_floor`: the caller's events of the dense run only freed — the floor of
//!   `Producer::record(Event)`, which takes (and so frees) each event's strings;
//!   `record/collapse_meter_and_free`, `record/collapse_dense_meter_and_free`: each meter call
//!   followed by freeing the event it stands for — a bound on any call that takes an owned event
//!   (the meter's work and the free, with no lookup of the event's group);
//! - `encode/…`: v1 and v2 payload encoding and KPL aggregation throughput;
//! - figure files (`target/awsmp-bench/<id>.json`): `producer-record-latency-p50`, `-p99` and `-p999`
//!   (8 tasks recording at once, hdrhistogram; `producer-meter-record-latency-*` for meters), `wire-bytes-per-event-v2-300-groups` and
//!   `wire-bytes-per-event-v1-json` (300 groups, no collapse); also printed.

use std::time::{Duration, Instant};

use awsmp_contract::wire::{AggregateBuilder, WireVersion, encode_event, encode_single};
use awsmp_producer::partition::{ShardMap, partition_key};
use awsmp_producer::{
    Event, MemoryRecordSink, Meter, Producer, StaticShardMapSource, Tag, UsageAllocation,
};
use bytes::Bytes;
use chrono::{DateTime, TimeZone, Utc};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const GROUPS: usize = 1_000;
/// Enough shards that the per-shard budget (1 MiB/s each) does not limit what is measured.
const SHARDS: usize = 256;

/// Events over `GROUPS` groups with skewed popularity (a few hot groups), spread over
/// `seconds` seconds; ids left empty so `record()` generates them, as a caller would.
fn events(n: usize, seconds: i64, seed: u64) -> Vec<Event> {
    let mut rng = StdRng::seed_from_u64(seed);
    let t0 = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
    (0..n)
        .map(|i| {
            // Squaring a uniform draw skews towards low group numbers.
            let u: f64 = rng.random();
            let g = ((u * u) * GROUPS as f64) as usize;
            let q = rng.random_range(1..100u64);
            let e = Event::new(
                format!("arn:aws:license-manager::123456789012:license:l-{g:032x}"),
                format!("{:012}", 100_000_000_000u64 + g as u64),
                ["requests", "gb-hours", "seats"][g % 3],
                q,
                t0 + chrono::Duration::milliseconds((i as i64 * seconds * 1000) / n as i64),
            );
            if g.is_multiple_of(10) {
                e.with_allocations(vec![UsageAllocation::new(
                    q,
                    vec![Tag::new("team", "platform")],
                )])
            } else {
                e
            }
        })
        .collect()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn start(sink: MemoryRecordSink, collapse: bool) -> Producer {
    start_v(sink, collapse, WireVersion::V2)
}

fn start_v(sink: MemoryRecordSink, collapse: bool, version: WireVersion) -> Producer {
    let map = ShardMap::uniform(SHARDS);
    Producer::builder("bench")
        .wire_version(version)
        .collapse(collapse)
        .linger(Duration::from_millis(100))
        .producer_id("bench")
        .start_with(sink, StaticShardMapSource::new(map))
        .unwrap()
}

/// What one call records: an owned [`Event`] through `Producer::record`, or (group index,
/// timestamp, quantity) through the group's [`Meter`].
type MeterCall = (usize, DateTime<Utc>, u64);

/// The same usage as `events` for meters: each event's group index (by its partition key),
/// timestamp and quantity; the groups' keys in index order. Events with allocations have no
/// meter form (`Meter::record` takes none): their group's meter records the same quantity.
fn meter_calls(events: &[Event]) -> (Vec<[String; 3]>, Vec<MeterCall>) {
    let mut groups: Vec<[String; 3]> = Vec::new();
    let mut index: std::collections::HashMap<String, usize> = Default::default();
    let calls = events
        .iter()
        .map(|e| {
            let pk = partition_key(&e.license_arn, &e.customer_aws_account_id, &e.dimension);
            let g = *index.entry(pk).or_insert_with(|| {
                groups.push([
                    e.license_arn.clone(),
                    e.customer_aws_account_id.clone(),
                    e.dimension.clone(),
                ]);
                groups.len() - 1
            });
            (g, e.timestamp, e.quantity)
        })
        .collect();
    (groups, calls)
}

fn meters(p: &Producer, groups: &[[String; 3]]) -> Vec<Meter> {
    groups
        .iter()
        .map(|[l, a, d]| p.meter(l.as_str(), a.as_str(), d.as_str()).unwrap())
        .collect()
}

/// Events a dense collapse iteration records.
const DENSE_EVENTS: usize = 500_000;

/// The collapse goal's own density: `n` events of [`events`]' groups and skew, timestamped
/// as a caller recording at 10 M events/s stamps them (100 ns apart), all inside one second
/// of event time — about 500 events a (group, second) sum at 1,000 groups.
fn dense_events(n: usize, seed: u64) -> Vec<Event> {
    let t0 = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
    let mut evs = events(n, 1, seed);
    for (i, e) in evs.iter_mut().enumerate() {
        e.timestamp = t0 + chrono::Duration::nanoseconds(i as i64 * 100);
    }
    evs
}

fn record_throughput(c: &mut Criterion) {
    let rt = runtime();
    let batch = events(50_000, 5, 1);
    let (groups, calls) = meter_calls(&batch);
    let mut g = c.benchmark_group("record");
    g.throughput(Throughput::Elements(batch.len() as u64));
    g.sample_size(10);
    for (name, collapse, version) in [
        ("no_collapse", false, WireVersion::V2),
        ("collapse", true, WireVersion::V2),
        ("no_collapse_v1", false, WireVersion::V1),
    ] {
        g.bench_function(name, |b| {
            event_iterations(b, &rt, &batch, collapse, version)
        });
    }
    // The same usage through bound group handles (one meter per group, made once, as a
    // seller's hot loop keeps them), to delivery as above.
    for (name, collapse) in [("no_collapse_meter", false), ("collapse_meter", true)] {
        g.bench_function(name, |b| {
            meter_iterations(b, &rt, &groups, &calls, collapse, None)
        });
    }
    g.bench_function("collapse_meter_and_free", |b| {
        meter_iterations(b, &rt, &groups, &calls, true, Some(&batch))
    });
    g.finish();
    dense_collapse(c, &rt);
}

/// `record/collapse_dense` and `record/collapse_dense_meter`: collapse at the density of its
/// goal ([`dense_events`]), through `Producer::record(Event)` and through meters, to delivery.
fn dense_collapse(c: &mut Criterion, rt: &tokio::runtime::Runtime) {
    let batch = dense_events(DENSE_EVENTS, 4);
    let (groups, calls) = meter_calls(&batch);
    let mut g = c.benchmark_group("record");
    g.throughput(Throughput::Elements(batch.len() as u64));
    g.sample_size(10);
    g.bench_function("collapse_dense", |b| {
        event_iterations(b, rt, &batch, true, WireVersion::V2)
    });
    g.bench_function("collapse_dense_meter", |b| {
        meter_iterations(b, rt, &groups, &calls, true, None)
    });
    g.bench_function("collapse_dense_meter_and_free", |b| {
        meter_iterations(b, rt, &groups, &calls, true, Some(&batch))
    });
    // The floor of `Producer::record(Event)`: the caller's events only moved out of their
    // vector and freed (each its three strings, and its allocations), nothing recorded.
    g.bench_function("event_drop_floor", |b| {
        b.iter_custom(|iters| {
            let mut took = Duration::ZERO;
            for _ in 0..iters {
                let events = batch.to_vec();
                let started = Instant::now();
                for e in events {
                    drop(std::hint::black_box(e));
                }
                took += started.elapsed();
            }
            took
        })
    });
    g.finish();
}

/// Iterations of `batch` through `Producer::record(Event)`, to delivery.
fn event_iterations(
    b: &mut criterion::Bencher<'_>,
    rt: &tokio::runtime::Runtime,
    batch: &[Event],
    collapse: bool,
    version: WireVersion,
) {
    b.iter_custom(|iters| {
        rt.block_on(async {
            let p = start_v(
                MemoryRecordSink::discarding(ShardMap::uniform(SHARDS)),
                collapse,
                version,
            );
            let mut took = Duration::ZERO;
            for _ in 0..iters {
                // The caller's events exist before record() is called: built outside the
                // timed region, moved in (record() consumes them).
                let events = batch.to_vec();
                let started = Instant::now();
                for e in events {
                    p.record(e).await.unwrap();
                }
                // Count delivery too: throughput is what reaches the sink.
                p.flush().await.unwrap();
                took += started.elapsed();
            }
            p.shutdown().await.unwrap();
            took
        })
    })
}

/// Iterations of `calls` through one meter per group, to delivery. With `free`, the events
/// the calls stand for (`calls[i]` is `free[i]`'s usage) are copied before the timer and each
/// freed right after its call: what any call taking an owned event pays at least, with no
/// lookup of the event's group.
fn meter_iterations(
    b: &mut criterion::Bencher<'_>,
    rt: &tokio::runtime::Runtime,
    groups: &[[String; 3]],
    calls: &[MeterCall],
    collapse: bool,
    free: Option<&[Event]>,
) {
    b.iter_custom(|iters| {
        rt.block_on(async {
            let p = start(
                MemoryRecordSink::discarding(ShardMap::uniform(SHARDS)),
                collapse,
            );
            let meters = meters(&p, groups);
            let mut took = Duration::ZERO;
            for _ in 0..iters {
                let events = free.map(<[Event]>::to_vec);
                let started = Instant::now();
                match events {
                    None => {
                        for &(g, ts, q) in calls {
                            meters[g].record(ts, q).await.unwrap();
                        }
                    }
                    Some(events) => {
                        for (&(g, ts, q), e) in calls.iter().zip(events) {
                            meters[g].record(ts, q).await.unwrap();
                            drop(std::hint::black_box(e));
                        }
                    }
                }
                p.flush().await.unwrap();
                took += started.elapsed();
            }
            p.shutdown().await.unwrap();
            took
        })
    })
}

fn encode_throughput(c: &mut Criterion) {
    let evs = events(500, 1, 2);
    let payloads: Vec<(String, Bytes)> = evs
        .iter()
        .map(|e| {
            let e = e.clone().with_event_id(uuid::Uuid::new_v4().to_string());
            (
                partition_key(&e.license_arn, &e.customer_aws_account_id, &e.dimension),
                Bytes::from(encode_event(&e)),
            )
        })
        .collect();
    let bytes: usize = payloads.iter().map(|(_, p)| p.len()).sum();
    let with_ids: Vec<Event> = evs
        .iter()
        .map(|e| e.clone().with_event_id(uuid::Uuid::new_v4().to_string()))
        .collect();
    let mut g = c.benchmark_group("encode");
    g.throughput(Throughput::Elements(with_ids.len() as u64));
    g.bench_function("v1_payload", |b| {
        b.iter(|| {
            with_ids
                .iter()
                .map(|e| encode_event(e).len())
                .sum::<usize>()
        })
    });
    g.bench_function("v2_single", |b| {
        b.iter(|| {
            with_ids
                .iter()
                .map(|e| encode_single(e).len())
                .sum::<usize>()
        })
    });
    g.throughput(Throughput::Bytes(bytes as u64));
    g.bench_function("kpl_aggregate_500", |b| {
        b.iter(|| {
            let mut agg = AggregateBuilder::new();
            for (pk, p) in &payloads {
                agg.add(pk, None, p.clone());
            }
            agg.finish().len()
        })
    });
    g.finish();
}

/// One figure file per the bench contract: `<target>/awsmp-bench/<figure>.json`.
fn write_figure(figure: &str, value: f64, unit: &str, detail: &str) {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"),
        std::path::PathBuf::from,
    );
    let dir = target.join("awsmp-bench");
    std::fs::create_dir_all(&dir).unwrap();
    let body =
        serde_json::json!({"figure": figure, "value": value, "unit": unit, "detail": detail});
    std::fs::write(dir.join(format!("{figure}.json")), body.to_string()).unwrap();
    println!("{figure}: {value:.1} {unit} ({detail})");
}

/// Tasks recording at once for the latency figures.
const CONTENDING_TASKS: usize = 8;

/// Per-call `record()` latency percentiles with 8 tasks recording at once, after a warm-up
/// round ([`LATENCY_ROUNDS`]), for both APIs:
/// `Producer::record(Event)` (`producer-record-latency-*`) and `Meter::record`
/// (`producer-meter-record-latency-*`), no collapse, v2. A call is timed from before it to its
/// return, yields included: a call that spends the task's last unit of cooperative budget
/// waits its turn again (one call in 128 to 512, by what the call costs: `docs/benchmarks.md`,
/// "What a percentile includes"), and that wait is in the percentiles.
fn latency(_c: &mut Criterion) {
    let rt = runtime();
    let evs = events(200_000, 20, 3);
    let (groups, calls) = meter_calls(&evs);
    let event_hist = rt.block_on(event_latency(&evs));
    let meter_hist = rt.block_on(meter_latency(&groups, &calls));
    for (api, prefix, hist) in [
        (
            "Producer::record(Event)",
            "producer-record-latency",
            &event_hist,
        ),
        (
            "Meter::record",
            "producer-meter-record-latency",
            &meter_hist,
        ),
    ] {
        let detail = format!(
            "{api}: {CONTENDING_TASKS} tasks on 2 worker threads, {} calls after a warm-up round, no collapse, v2, yields included; p99.9 {} ns, max {} ns",
            hist.len(),
            hist.value_at_quantile(0.999),
            hist.max()
        );
        for (suffix, q) in [("p50", 0.50), ("p99", 0.99), ("p999", 0.999)] {
            write_figure(
                &format!("{prefix}-{suffix}"),
                hist.value_at_quantile(q) as f64,
                "ns",
                &detail,
            );
        }
    }
}

/// Rounds of the latency figures: the first warms the producer and is not kept.
const LATENCY_ROUNDS: usize = 2;

/// `Producer::record(Event)` latencies: 8 tasks, each recording its share of `evs`, in
/// [`LATENCY_ROUNDS`] rounds on one producer, each round flushed; the last round's calls are
/// the figures. The first round is a warm-up: the producer's staging buffers and vectors, the
/// per-thread key caches and the allocator's free memory are then as a running service has
/// them, so the figures are a service's steady state, not its first milliseconds (where
/// every staging page is touched for the first time).
async fn event_latency(evs: &[Event]) -> Histogram<u64> {
    let p = start(
        MemoryRecordSink::discarding(ShardMap::uniform(SHARDS)),
        false,
    );
    let per_task = evs.len() / CONTENDING_TASKS;
    let mut last = None;
    for _ in 0..LATENCY_ROUNDS {
        let tasks: Vec<_> = (0..CONTENDING_TASKS)
            .map(|t| {
                let (p, mine) = (p.clone(), evs[t * per_task..(t + 1) * per_task].to_vec());
                tokio::spawn(async move {
                    let mut hist = Histogram::<u64>::new(3).unwrap();
                    for e in &mine {
                        // Each call's event is built just before the call, outside the timed
                        // region, as a caller builds an event and records it: its strings
                        // are in the caller's cache, not read cold from 200,000 events built
                        // ahead (far more than the caches hold).
                        let e = e.clone();
                        let started = Instant::now();
                        p.record(e).await.unwrap();
                        hist.record(started.elapsed().as_nanos() as u64).unwrap();
                    }
                    hist
                })
            })
            .collect();
        last = Some(merged(tasks).await);
        p.flush().await.unwrap();
    }
    p.shutdown().await.unwrap();
    last.expect("at least one round")
}

/// `Meter::record` latencies: 8 tasks sharing the groups' meters, each recording its share
/// of `calls`, in rounds as [`event_latency`]'s.
async fn meter_latency(groups: &[[String; 3]], calls: &[MeterCall]) -> Histogram<u64> {
    let p = start(
        MemoryRecordSink::discarding(ShardMap::uniform(SHARDS)),
        false,
    );
    let meters = std::sync::Arc::new(meters(&p, groups));
    let per_task = calls.len() / CONTENDING_TASKS;
    let mut last = None;
    for _ in 0..LATENCY_ROUNDS {
        let tasks: Vec<_> = (0..CONTENDING_TASKS)
            .map(|t| {
                let (meters, mine) = (
                    meters.clone(),
                    calls[t * per_task..(t + 1) * per_task].to_vec(),
                );
                tokio::spawn(async move {
                    let mut hist = Histogram::<u64>::new(3).unwrap();
                    for (g, ts, q) in mine {
                        let started = Instant::now();
                        meters[g].record(ts, q).await.unwrap();
                        hist.record(started.elapsed().as_nanos() as u64).unwrap();
                    }
                    hist
                })
            })
            .collect();
        last = Some(merged(tasks).await);
        p.flush().await.unwrap();
    }
    drop(meters);
    p.shutdown().await.unwrap();
    last.expect("at least one round")
}

async fn merged(tasks: Vec<tokio::task::JoinHandle<Histogram<u64>>>) -> Histogram<u64> {
    let mut all = Histogram::<u64>::new(3).unwrap();
    for t in tasks {
        all.add(t.await.unwrap()).unwrap();
    }
    all
}

/// `n` events spread evenly over `groups` groups (ids left for `record()` to generate).
fn uniform_events(n: usize, groups: usize) -> Vec<Event> {
    let t0 = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
    (0..n)
        .map(|i| {
            let g = (i * 7919) % groups;
            Event::new(
                format!("arn:aws:license-manager::123456789012:license:l-{g:032x}"),
                format!("{:012}", 100_000_000_000u64 + g as u64),
                ["requests", "gb-hours", "seats"][g % 3],
                1 + (i % 97) as u64,
                t0 + chrono::Duration::milliseconds(i as i64),
            )
        })
        .collect()
}

/// Bytes on the stream per event at 300 groups without collapse, v2 and v1, against one
/// plain v1 JSON record (payload + partition key, what Kinesis bills) per event.
fn wire_bytes(_c: &mut Criterion) {
    let rt = runtime();
    let evs = uniform_events(100_000, 300);
    let per_event = |version| {
        rt.block_on(async {
            let sink = MemoryRecordSink::new(ShardMap::uniform(4));
            let p = start_v(sink.clone(), false, version);
            for e in &evs {
                p.record(e.clone()).await.unwrap();
            }
            p.shutdown().await.unwrap();
            let records = sink.records();
            let wire: usize = records.iter().map(|r| r.entry.billed_size()).sum();
            (wire as f64 / evs.len() as f64, records.len())
        })
    };
    let plain: usize = evs
        .iter()
        .map(|e| {
            let e = e
                .clone()
                .with_event_id("p:0123456789abcdef0123456789abcdef:7:123456")
                .with_producer_id("bench");
            encode_event(&e).len()
                + partition_key(&e.license_arn, &e.customer_aws_account_id, &e.dimension).len()
        })
        .sum();
    let json = plain as f64 / evs.len() as f64;
    let (v2, v2_records) = per_event(WireVersion::V2);
    let (v1, v1_records) = per_event(WireVersion::V1);
    write_figure(
        "wire-bytes-per-event-v1-json",
        json,
        "bytes",
        "one plain v1 JSON record per event (payload + partition key), generated id, 300 groups",
    );
    write_figure(
        "wire-bytes-per-event-v2-300-groups",
        v2,
        "bytes",
        &format!(
            "{} events over 300 groups, 4 shards, no collapse, KPL aggregates of 51,200 bytes: v2 {v2:.1} B/event in {v2_records} records ({:.3} of JSON); v1 aggregated {v1:.1} B/event in {v1_records} records ({:.3})",
            evs.len(),
            v2 / json,
            v1 / json
        ),
    );
}

criterion_group!(
    benches,
    record_throughput,
    encode_throughput,
    latency,
    wire_bytes
);
criterion_main!(benches);
