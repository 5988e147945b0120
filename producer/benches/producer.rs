//! Producer benchmarks (against an in-memory sink that acknowledges at once):
//! - `record/…`: `record()` throughput in events/s, collapse off and on;
//! - `encode/…`: v1 payload encoding and KPL aggregation throughput;
//! - printed once: `record()` latency percentiles, and bytes on the wire per event compared with
//!   one plain JSON record per event.

use std::time::{Duration, Instant};

use awsmp_producer::partition::{ShardMap, partition_key};
use awsmp_producer::wire::{AggregateBuilder, encode_event};
use awsmp_producer::{
    Event, MemoryRecordSink, Producer, StaticShardMapSource, Tag, UsageAllocation,
};
use bytes::Bytes;
use chrono::{TimeZone, Utc};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
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
    let map = ShardMap::uniform(SHARDS);
    Producer::builder("bench")
        .collapse(collapse)
        .linger(Duration::from_millis(100))
        .producer_id("bench")
        .start_with(sink, StaticShardMapSource::new(map))
        .unwrap()
}

fn record_throughput(c: &mut Criterion) {
    let rt = runtime();
    let batch = events(50_000, 5, 1);
    let mut g = c.benchmark_group("record");
    g.throughput(Throughput::Elements(batch.len() as u64));
    g.sample_size(10);
    for collapse in [false, true] {
        g.bench_with_input(
            BenchmarkId::new(
                "events",
                if collapse {
                    "collapse_on"
                } else {
                    "collapse_off"
                },
            ),
            &collapse,
            |b, &collapse| {
                b.iter_custom(|iters| {
                    rt.block_on(async {
                        let p = start(
                            MemoryRecordSink::discarding(ShardMap::uniform(SHARDS)),
                            collapse,
                        );
                        let started = Instant::now();
                        for _ in 0..iters {
                            for e in &batch {
                                p.record(e.clone()).await.unwrap();
                            }
                            // Count delivery too: throughput is what reaches the sink.
                            p.flush().await.unwrap();
                        }
                        let took = started.elapsed();
                        p.shutdown().await.unwrap();
                        took
                    })
                })
            },
        );
    }
    g.finish();
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

/// Per-call `record()` latency percentiles, and bytes on the wire per event, printed once.
fn report(_c: &mut Criterion) {
    let rt = runtime();
    let evs = events(200_000, 20, 3);
    let plain: usize = evs
        .iter()
        .map(|e| {
            let e = e
                .clone()
                .with_event_id(uuid::Uuid::new_v4().to_string())
                .with_producer_id("bench");
            encode_event(&e).len()
                + partition_key(&e.license_arn, &e.customer_aws_account_id, &e.dimension).len()
        })
        .sum();
    for collapse in [false, true] {
        let (hist, wire, records) = rt.block_on(async {
            let sink = MemoryRecordSink::new(ShardMap::uniform(SHARDS));
            let p = start(sink.clone(), collapse);
            let mut hist = Histogram::<u64>::new(3).unwrap();
            for e in &evs {
                let t = Instant::now();
                p.record(e.clone()).await.unwrap();
                hist.record(t.elapsed().as_nanos() as u64).unwrap();
            }
            p.shutdown().await.unwrap();
            let records = sink.records();
            let wire: usize = records.iter().map(|r| r.entry.billed_size()).sum();
            (hist, wire, records.len())
        });
        let label = if collapse {
            "collapse_on "
        } else {
            "collapse_off"
        };
        println!(
            "record() latency {label}: p50 {} ns, p99 {} ns, p99.9 {} ns, max {} ns",
            hist.value_at_quantile(0.50),
            hist.value_at_quantile(0.99),
            hist.value_at_quantile(0.999),
            hist.max()
        );
        println!(
            "wire {label}: {:.1} bytes/event vs {:.1} plain JSON (ratio {:.3}); {} Kinesis records for {} events ({:.1} events/record)",
            wire as f64 / evs.len() as f64,
            plain as f64 / evs.len() as f64,
            wire as f64 / plain as f64,
            records,
            evs.len(),
            evs.len() as f64 / records as f64
        );
    }
}

criterion_group!(benches, record_throughput, encode_throughput, report);
criterion_main!(benches);
