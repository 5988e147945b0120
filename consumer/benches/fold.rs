//! Consumer throughput: decode + verify + fold (events/s per core) of v2 and v1 batches at
//! 1,000 groups (`decode_verify_fold/v2_1000_groups`, `…/v1_1000_groups`, the fold's rows built,
//! as a warm instance decodes them: its names cached from the previous batch; beside each,
//! `…_cold`: the first batch of an instance, every name interned, and `…_general_path`: the
//! same batch through the owned general path every record took before the hot path), the whole handler
//! over in-memory stores, and write amplification (UpdateItems per 1,000 events) and dedup
//! cost (dedup-table writes per 1,000 events, for generated and for caller-supplied ids),
//! printed once per cardinality. Figure file (`target/awsmp-bench/<id>.json`):
//! `consumer-write-amplification`, rows written per distinct (group, second) of a batch.
//!
//! `md5_trailers/…`: the MD5 trailers of the v2 batch's aggregates, one at a time (`md-5`) and
//! side by side in SIMD lanes (`md5-many`, what the handler does); `…_md5_one_at_a_time` beside
//! each decode figure is the same decode with the former one-at-a-time trailer check.
//!
//! `cargo bench -p awsmp-consumer --bench fold`

use std::hint::black_box;
use std::sync::Arc;

use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
use awsmp_consumer::Settings;
use awsmp_consumer::adapters::memory::MemoryStores;
use awsmp_consumer::domain::fold::BatchFold;
use awsmp_consumer::domain::intern::NameCache;
use awsmp_consumer::domain::record::{
    DecodedRecord, StreamRecord, decode_general, decode_record_in, decode_records,
};
use awsmp_consumer::domain::trailer::{body_and_trailer, trailers_match};
use awsmp_consumer::domain::verify::VerifyPolicy;
use awsmp_consumer::handler::{kinesis_record, stream_record};
use awsmp_contract::Event;
use awsmp_contract::clock::FixedClock;
use awsmp_contract::event_id::{GeneratedId, lane_of};
use awsmp_contract::wire::{AggregateV2Builder, WireVersion, encode_aggregated};
use awsmp_producer::partition::{partition_hash, partition_key};
use bytes::Bytes;
use chrono::{Duration, TimeZone, Utc};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use md5::{Digest, Md5};

const EVENTS_PER_RECORD: usize = 50;
const RECORDS_PER_BATCH: usize = 100;
const STREAM: &str = "arn:aws:kinesis:us-east-1:123456789012:stream/awsmp-usage-events";

/// One Lambda batch: 100 aggregates of 50 events over `groups` groups, arriving within one
/// second (so rows = distinct groups in the batch).
fn batch(groups: usize, seed: usize) -> Vec<KinesisEventRecord> {
    batch_with(groups, seed, true, WireVersion::V2)
}

/// [`batch`], with producer-generated ids (`p:{epoch}:{lane}:{seq}`) or caller-supplied ones,
/// in wire version `version`.
fn batch_with(
    groups: usize,
    seed: usize,
    generated: bool,
    version: WireVersion,
) -> Vec<KinesisEventRecord> {
    let at = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
    (0..RECORDS_PER_BATCH)
        .map(|r| {
            let payloads: Vec<(String, Vec<u8>)> = (0..EVENTS_PER_RECORD)
                .map(|k| {
                    let i = seed * 1_000_003 + r * EVENTS_PER_RECORD + k;
                    // A cheap deterministic scatter over the groups.
                    let g = (i.wrapping_mul(2_654_435_761)) % groups;
                    let license = format!(
                        "arn:aws:license-manager::123456789012:license:l-{:032x}",
                        g / 4
                    );
                    let account = format!("{:012}", 100_000_000_000u64 + (g % 4) as u64);
                    let pk = partition_key(&license, &account, "api");
                    let id = if generated {
                        let lane = lane_of(partition_hash(&pk));
                        let seq = i as u64 + 1;
                        GeneratedId {
                            epoch: 1,
                            lane,
                            seq,
                        }
                        .to_string()
                    } else {
                        format!("e{i}")
                    };
                    let e = Event::new(&license, &account, "api", 1 + (i % 9) as u64, at)
                        .with_event_id(id)
                        .with_producer_id("bench");
                    (pk, version.encode(&e))
                })
                .collect();
            let data = match version {
                WireVersion::V1 => {
                    encode_aggregated(payloads.iter().map(|(pk, p)| (pk.as_str(), None, &p[..])))
                }
                WireVersion::V2 => {
                    let mut b = AggregateV2Builder::new();
                    for (pk, p) in payloads.iter() {
                        b.add(pk, &Bytes::copy_from_slice(p));
                    }
                    b.finish()
                }
            };
            kinesis_record(
                STREAM,
                "shardId-000000000000",
                &(1_000_000 + seed * RECORDS_PER_BATCH + r).to_string(),
                &payloads[0].0,
                at + Duration::milliseconds(r as i64 * 5),
                data.to_vec(),
            )
        })
        .collect()
}

/// How a bench decodes a batch.
#[derive(Clone, Copy)]
enum Path {
    /// As the handler does: the trailers checked together, then the hot path.
    Batch,
    /// The hot path record by record, each trailer hashed on its own (`md-5`).
    OneAtATime,
    /// The general (owned) path every record took before the hot path.
    General,
}

/// Decode, verify and fold one batch into its rows, the names interned in `cache`'s interner
/// (what the handler does: an instance keeps its names from one batch to the next).
fn decode_verify_fold_with(
    records: &[StreamRecord],
    policy: &VerifyPolicy,
    path: Path,
    cache: &NameCache,
) -> usize {
    let mut names = cache.take();
    let decoded: Vec<DecodedRecord> = match path {
        Path::Batch => decode_records(&records.iter().collect::<Vec<_>>(), policy, &mut names),
        Path::OneAtATime => records
            .iter()
            .map(|r| decode_record_in(r, policy, &mut names))
            .collect(),
        Path::General => records
            .iter()
            .map(|r| decode_general(r, policy, &mut names))
            .collect(),
    };
    cache.give_back(names);
    let mut fold = BatchFold::for_events(decoded.iter().map(|d| d.events.len()).sum());
    for (i, d) in decoded.into_iter().enumerate() {
        for (sub, ev) in d.events {
            fold.add(i as u32, sub, ev);
        }
    }
    fold.into_rows().len()
}

/// [`decode_verify_fold_with`] as the first batch of an instance decodes it (no names cached,
/// no fold tables kept from an earlier batch).
fn decode_verify_fold(records: &[StreamRecord], policy: &VerifyPolicy) -> usize {
    BatchFold::release_kept();
    decode_verify_fold_with(records, policy, Path::Batch, &NameCache::new())
}

/// The MD5 trailers of one batch of aggregates: one at a time (`md-5`) and side by side
/// (`md5-many`, what the handler does).
fn md5_trailers(c: &mut Criterion, records: &[StreamRecord]) {
    let data: Vec<&[u8]> = records.iter().map(|r| &r.data[..]).collect();
    let mut g = c.benchmark_group("md5_trailers");
    g.throughput(Throughput::Bytes(data.iter().map(|d| d.len() as u64).sum()));
    g.bench_function("md5_one_at_a_time", |b| {
        b.iter(|| {
            data.iter()
                .filter(|d| {
                    body_and_trailer(d).is_some_and(|(body, t)| Md5::digest(body).as_slice() == t)
                })
                .count()
        })
    });
    g.bench_function("md5_many_side_by_side", |b| {
        b.iter(|| trailers_match(&data).into_iter().filter(|ok| *ok).count())
    });
    g.finish();
}

/// `decode_verify_fold/…` and `md5_trailers/…`.
fn decode_benches(c: &mut Criterion) {
    let policy = VerifyPolicy::default();
    let events = (EVENTS_PER_RECORD * RECORDS_PER_BATCH) as u64;
    let mut md5_records = Vec::new();
    let mut g = c.benchmark_group("decode_verify_fold");
    g.throughput(Throughput::Elements(events));
    for (name, version) in [
        ("v2_1000_groups", WireVersion::V2),
        ("v1_1000_groups", WireVersion::V1),
    ] {
        let records: Vec<StreamRecord> = batch_with(1_000, 1, true, version)
            .iter()
            .map(|r| stream_record(r).unwrap())
            .collect();
        let rows = decode_verify_fold(&records, &policy);
        eprintln!(
            "{name}: {rows} rows per batch of {events} events -> {:.1} UpdateItems per 1,000 events",
            rows as f64 * 1000.0 / events as f64
        );
        // A warm instance: the batch's names cached from the previous batch, as a shard's
        // batches name the same groups.
        let cache = NameCache::new();
        g.bench_function(name, |b| {
            b.iter(|| {
                black_box(decode_verify_fold_with(
                    &records,
                    &policy,
                    Path::Batch,
                    &cache,
                ))
            })
        });
        // The first batch of an instance: every name interned.
        g.bench_function(format!("{name}_cold"), |b| {
            b.iter(|| black_box(decode_verify_fold(&records, &policy)))
        });
        // The same batch, each aggregate's trailer hashed on its own (`md-5`).
        g.bench_function(format!("{name}_md5_one_at_a_time"), |b| {
            b.iter(|| {
                black_box(decode_verify_fold_with(
                    &records,
                    &policy,
                    Path::OneAtATime,
                    &cache,
                ))
            })
        });
        // The same batch through the general (owned) path: the decode before the hot path.
        g.bench_function(format!("{name}_general_path"), |b| {
            b.iter(|| {
                black_box(decode_verify_fold_with(
                    &records,
                    &policy,
                    Path::General,
                    &NameCache::new(),
                ))
            })
        });
        if version == WireVersion::V2 {
            md5_records = records;
        }
    }
    g.finish();
    md5_trailers(c, &md5_records);
}

fn benches(c: &mut Criterion) {
    decode_benches(c);
    let events = (EVENTS_PER_RECORD * RECORDS_PER_BATCH) as u64;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut g = c.benchmark_group("handler_in_memory");
    g.throughput(Throughput::Elements(events));
    g.sample_size(10);
    for groups in [10usize, 1_000, 100_000] {
        let mut event = KinesisEvent::default();
        event.records = batch(groups, 2);
        let at = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 1).unwrap();
        g.bench_with_input(BenchmarkId::from_parameter(groups), &event, |b, ev| {
            b.iter(|| {
                // Fresh stores each time: every batch is a first delivery.
                let stores = MemoryStores::new();
                let consumer = stores.consumer(Settings::default(), Arc::new(FixedClock::new(at)));
                let (_, report) = rt.block_on(consumer.process(ev.clone()));
                black_box(report.update_items)
            })
        });
        let stores = MemoryStores::new();
        let consumer = stores.consumer(Settings::default(), Arc::new(FixedClock::new(at)));
        let (_, report) = rt.block_on(consumer.process(event.clone()));
        let per_1000 = |n: u64| n as f64 * 1000.0 / report.events_accepted as f64;
        let supplied = dedup_writes(&rt, batch_with(groups, 2, false, WireVersion::V2), at);
        if groups == 1_000 {
            let records: Vec<StreamRecord> = event
                .records
                .iter()
                .map(|r| stream_record(r).unwrap())
                .collect();
            let distinct = decode_verify_fold(&records, &Settings::default().verify);
            write_figure(
                "consumer-write-amplification",
                report.row_writes as f64 / distinct as f64,
                "ratio",
                &format!(
                    "{} row writes ({} UpdateItems) for {distinct} distinct (group, second) in one batch of {} events over 1,000 groups",
                    report.row_writes, report.update_items, report.events_accepted
                ),
            );
        }
        eprintln!(
            "handler groups={groups}: {} UpdateItems for {} events ({:.1} row writes per 1,000 events); dedup writes per 1,000 events: generated ids {:.1}, caller ids {:.1}, one claim per record (before) {:.1}",
            report.update_items,
            report.events_accepted,
            per_1000(report.update_items),
            per_1000(stores.dedup.writes()),
            per_1000(supplied),
            per_1000(RECORDS_PER_BATCH as u64),
        );
    }
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
    eprintln!("{figure}: {value:.3} {unit} ({detail})");
}

/// Dedup-table writes for one first delivery of `records`.
fn dedup_writes(
    rt: &tokio::runtime::Runtime,
    records: Vec<KinesisEventRecord>,
    at: chrono::DateTime<Utc>,
) -> u64 {
    let mut event = KinesisEvent::default();
    event.records = records;
    let stores = MemoryStores::new();
    let consumer = stores.consumer(Settings::default(), Arc::new(FixedClock::new(at)));
    rt.block_on(consumer.process(event));
    stores.dedup.writes()
}

criterion_group!(consumer_benches, benches);
criterion_main!(consumer_benches);
