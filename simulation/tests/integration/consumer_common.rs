//! The consumer's fault-schedule helpers (`consumer_exactness`, `consumer_rows_property`): a
//! seeded workload of producer-encoded stream records and a small in-memory event source
//! mapping with Lambda's retry, bisect-on-error and checkpoint rules, driving the consumer alone
//! on its in-memory stores. Here, not in the consumer's tests, because those tests fold the rows
//! with the pipeline's `GroupFold`, and the consumer does not depend on the pipeline.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
use awsmp_consumer::Consumer;
use awsmp_consumer::handler::kinesis_record;
use awsmp_contract::keys::{RowKey, format_usage_timestamp};
use awsmp_contract::wire::{encode_aggregated, encode_event};
use awsmp_producer::partition::partition_key;
use awsmp_producer::{Event, Tag, UsageAllocation};
use awsmp_testkit::faults::{FaultPlan, Rates};
use chrono::{DateTime, Duration, TimeZone, Utc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The fault plan a test's consumer stores share.
pub type Faults = Arc<FaultPlan>;

/// A plan for `seed` throttling `throttle` and losing the answer of `lose` calls in a thousand.
pub fn plan(seed: u64, throttle: u32, lose: u32) -> Faults {
    Arc::new(FaultPlan::new(
        seed,
        Rates {
            throttle,
            lose_response: lose,
            ..Rates::default()
        },
    ))
}

pub const STREAM_ARN: &str = "arn:aws:kinesis:us-east-1:123456789012:stream/awsmp-usage-events";

pub fn license(i: usize) -> String {
    format!("arn:aws:license-manager::123456789012:license:l-{i:032x}")
}

pub fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 12, 59, 50).unwrap()
}

/// One group of the workload; `allocated` groups always carry allocations.
#[derive(Debug, Clone)]
pub struct Group {
    pub license_arn: String,
    pub account: String,
    pub dimension: String,
    pub allocated: bool,
    pub shard: usize,
}

impl Group {
    pub fn pk(&self) -> String {
        partition_key(&self.license_arn, &self.account, &self.dimension)
    }
}

/// A stream: per shard, the delivered records in order.
#[derive(Debug, Clone, Default)]
pub struct Stream {
    pub shards: Vec<Vec<KinesisEventRecord>>,
    /// Expected quantity per row (unique records only).
    pub expected: BTreeMap<RowKey, u64>,
    /// Copies put twice (producer retries).
    pub duplicates: usize,
    pub events: usize,
}

impl Stream {
    pub fn expected_total(&self) -> u64 {
        self.expected.values().sum()
    }
}

fn shard_id(i: usize) -> String {
    format!("shardId-{i:012}")
}

/// `groups` groups over three licenses and two dimensions, one in four allocated, spread
/// round-robin over `shards` shards.
fn workload_groups(shards: usize, groups: usize) -> Vec<Group> {
    (0..groups)
        .map(|i| Group {
            license_arn: license(i % 3),
            account: format!("{:012}", 210_987_654_321u64 + i as u64),
            dimension: if i % 2 == 0 {
                "api".into()
            } else {
                "gb#hours".into()
            },
            allocated: i % 4 == 3,
            shard: i % shards,
        })
        .collect()
}

/// One random event of `g` (id `ev-{seed}-{ev_id}`), encoded, and its quantity.
fn random_event(
    rng: &mut StdRng,
    g: &Group,
    arrival: DateTime<Utc>,
    seed: u64,
    ev_id: u64,
) -> (Vec<u8>, u64) {
    let q: u64 = if rng.random_bool(0.1) {
        0
    } else {
        rng.random_range(1..1000)
    };
    let client = arrival - Duration::milliseconds(rng.random_range(0..5_000));
    let mut e = Event::new(&g.license_arn, &g.account, &g.dimension, q, client)
        .with_event_id(format!("ev-{seed}-{ev_id}"))
        .with_producer_id("test-producer");
    if g.allocated && q > 0 {
        let a = rng.random_range(0..=q);
        let mut allocs = vec![UsageAllocation::new(a, vec![Tag::new("team", "a")])];
        if q - a > 0 {
            allocs.push(UsageAllocation::new(
                q - a,
                vec![Tag::new("team", format!("b{}", rng.random_range(0..3)))],
            ));
        }
        e = e.with_allocations(allocs);
    }
    (encode_event(&e), q)
}

impl Stream {
    /// Count `contributions` of a unique record that arrived at `arrival` as expected.
    fn expect(&mut self, contributions: Vec<(Group, u64)>, arrival: DateTime<Utc>) {
        self.events += contributions.len();
        for (g, q) in contributions {
            let key = RowKey {
                license_arn: g.license_arn.clone(),
                sort_key: format!(
                    "{}#{}#{}",
                    g.account,
                    g.dimension,
                    format_usage_timestamp(arrival)
                ),
            };
            *self.expected.entry(key).or_default() += q;
        }
    }
}

/// A seeded workload: `records` records over `groups` groups on `shards` shards, aggregates
/// mixing groups of one shard, plain records, duplicates; arrival seconds cross an hour
/// boundary; sequence numbers cross a length boundary (9,99x → 10,00x).
pub fn workload(seed: u64, shards: usize, groups: usize, records: usize) -> Stream {
    let mut rng = StdRng::seed_from_u64(seed);
    let gs = workload_groups(shards, groups);
    let mut stream = Stream {
        shards: vec![Vec::new(); shards],
        ..Stream::default()
    };
    let mut seq: Vec<u64> = vec![9_990; shards];
    let mut ev_id = 0u64;
    for r in 0..records {
        let shard = rng.random_range(0..shards);
        let on_shard: Vec<&Group> = gs.iter().filter(|g| g.shard == shard).collect();
        if on_shard.is_empty() {
            continue;
        }
        let arrival = t0()
            + Duration::milliseconds((r as i64) * 40 + rng.random_range(0..900))
            + Duration::seconds(rng.random_range(0..3));
        let plain = rng.random_bool(0.2);
        let n = if plain { 1 } else { rng.random_range(1..12) };
        let mut payloads = Vec::new();
        let mut contributions = Vec::new();
        for _ in 0..n {
            let g = on_shard[rng.random_range(0..on_shard.len())];
            ev_id += 1;
            let (payload, q) = random_event(&mut rng, g, arrival, seed, ev_id);
            payloads.push((g.pk(), payload));
            contributions.push((g.clone(), q));
        }
        let outer_pk = payloads[0].0.clone();
        let data = if plain {
            payloads[0].1.clone()
        } else {
            encode_aggregated(payloads.iter().map(|(pk, p)| (pk.as_str(), None, &p[..]))).to_vec()
        };
        seq[shard] += rng.random_range(1..5);
        let rec = kinesis_record(
            STREAM_ARN,
            &shard_id(shard),
            &seq[shard].to_string(),
            &outer_pk,
            arrival,
            data.clone(),
        );
        stream.shards[shard].push(rec);
        stream.expect(contributions, arrival);
        // A producer retry after a lost response: the same bytes, later on the same shard.
        if rng.random_bool(0.15) {
            seq[shard] += 1;
            let copy_arrival = arrival + Duration::milliseconds(rng.random_range(1..1500));
            stream.shards[shard].push(kinesis_record(
                STREAM_ARN,
                &shard_id(shard),
                &seq[shard].to_string(),
                &outer_pk,
                copy_arrival,
                data,
            ));
            stream.duplicates += 1;
        }
    }
    stream
}

pub fn event(records: &[KinesisEventRecord]) -> KinesisEvent {
    let mut e = KinesisEvent::default();
    e.records = records.to_vec();
    e
}

/// What the simulated mapping did.
#[derive(Debug, Default, Clone)]
pub struct EsmStats {
    pub invocations: u64,
    pub function_errors: u64,
    pub partial_failures: u64,
    pub bisections: u64,
}

/// Lambda's Kinesis mapping, in memory: per shard in order, batches of `batch_size`;
/// a function error (here: the consumer crashed) retries the batch bisected; a batch item
/// failure checkpoints before the failed record and resumes from it. Before each invocation
/// `crash` may arm a crash after some store operations.
pub async fn drain(
    consumer: &Consumer,
    stream: &Stream,
    batch_size: usize,
    faults: &Faults,
    mut crash: impl FnMut() -> Option<u64>,
) -> EsmStats {
    let mut stats = EsmStats::default();
    for shard in &stream.shards {
        let mut checkpoint = 0;
        while checkpoint < shard.len() {
            let end = (checkpoint + batch_size).min(shard.len());
            // Pending sub-batches (bisection splits a failing batch into halves, in order).
            let mut pending = vec![(checkpoint, end)];
            while let Some((lo, hi)) = pending.pop() {
                if let Some(n) = crash() {
                    faults.crash_after(n);
                }
                stats.invocations += 1;
                let response = consumer.handle(event(&shard[lo..hi])).await;
                if faults.crashed() {
                    // The function errored: Lambda retries, bisecting the batch.
                    faults.recover();
                    stats.function_errors += 1;
                    if hi - lo > 1 {
                        stats.bisections += 1;
                        let mid = lo + (hi - lo) / 2;
                        pending.push((mid, hi));
                        pending.push((lo, mid));
                    } else {
                        pending.push((lo, hi));
                    }
                    continue;
                }
                match response.batch_item_failures.first() {
                    None => checkpoint = hi,
                    Some(f) => {
                        stats.partial_failures += 1;
                        let id = f.item_identifier.clone().unwrap_or_default();
                        let at = shard[lo..hi]
                            .iter()
                            .position(|r| r.kinesis.sequence_number == id)
                            .map(|p| lo + p)
                            .expect("the failure names a record of the batch");
                        // Checkpoint before the failed record; drop the queued halves (they are
                        // re-read from the checkpoint).
                        checkpoint = at;
                        pending.clear();
                    }
                }
                if pending.is_empty() {
                    break;
                }
            }
        }
    }
    stats
}
