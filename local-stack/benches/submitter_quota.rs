//! Submitter throughput against the Marketplace simulator's 10 requests/s quota, with
//! throttling injected: each iteration writes a backlog of pending aggregated records (setup,
//! untimed), then times the serial submitter until the backlog is drained.
//!
//! Reported besides criterion's time: the BatchMeterUsage requests that got past the quota per
//! second, as a ratio of the quota (target ≥ 95 %), the accepted calls per second, and the
//! no-loss check — every record ends terminal `Success` with the ledger's MeteringRecordId, and
//! the ledger holds exactly one line per record (zero lost write-backs).
//!
//! Needs the local stack's DynamoDB (the simulator runs in-process, so its quota and clock are
//! this bench's alone): `awsmp-local up`, source its env file, then
//! `cargo bench -p awsmp-local-stack --bench submitter_quota`. Without
//! `AWS_ENDPOINT_URL_DYNAMODB` it says so and measures nothing.

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{PutRequest, WriteRequest};
use awsmp_aws::emf::MetricsSink;
use awsmp_contract::clock::FixedClock;
use awsmp_contract::keys::{GroupKey, HourBucket};
use awsmp_contract::status::AggregatedStatus;
use awsmp_local_stack::local::{
    DEMO_DIMENSIONS, LocalEnv, demo_account, demo_catalog, demo_license_arn,
};
use awsmp_marketplace_sim::{Catalog, Faults, SimConfig, SimHandle, spawn_on};
use awsmp_pipeline::adapters::dynamodb::aggregated_to_item;
use awsmp_pipeline::adapters::marketplace::MarketplaceMeteringApi;
use awsmp_pipeline::config::Config;
use awsmp_pipeline::domain::batch::{CallKind, SubmitRecord};
use awsmp_pipeline::domain::results::ApiResponse;
use awsmp_pipeline::handlers::{Services, submitter};
use awsmp_pipeline::ports::{AggregatedItem, MeterCallError, MeteringApi};
use chrono::{DateTime, Duration as ChronoDuration, TimeZone, Utc};
use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The simulator's (and AWS's) BatchMeterUsage quota, requests per second.
const QUOTA_PER_SECOND: f64 = 10.0;
/// Injected throttling on top of the quota.
const INJECTED_THROTTLE_RATE: f64 = 0.1;
/// Demo licenses this bench owns.
const LICENSES: std::ops::Range<usize> = 160..200;
/// Hours of backlog per iteration: 40 licenses × 3 dimensions × 10 hours = 1,200 records,
/// 48 full calls.
const HOURS: i64 = 10;
/// `BatchWriteItem` limit: "up to 25 item put or delete operations".
const BATCH_WRITE_ITEMS: usize = 25;

/// Counts what the submitter's calls got back.
#[derive(Default)]
struct CallStats {
    /// First call start and last call end of the current iteration.
    span: std::sync::Mutex<Option<(Instant, Instant)>>,
    accepted: AtomicU64,
    quota_throttled: AtomicU64,
    injected_throttled: AtomicU64,
    other_errors: AtomicU64,
}

struct CountingApi {
    inner: MarketplaceMeteringApi,
    stats: Arc<CallStats>,
}

#[async_trait]
impl MeteringApi for CountingApi {
    async fn batch_meter_usage(
        &self,
        kind: &CallKind,
        records: &[SubmitRecord],
    ) -> Result<ApiResponse, MeterCallError> {
        let start = Instant::now();
        let r = self.inner.batch_meter_usage(kind, records).await;
        {
            let mut span = self.stats.span.lock().expect("span");
            let first = span.map_or(start, |(f, _)| f);
            *span = Some((first, Instant::now()));
        }
        let counter = match &r {
            Ok(_) => &self.stats.accepted,
            Err(MeterCallError::Exception { name, message, .. })
                if name == "ThrottlingException" =>
            {
                if message.contains("injected") {
                    &self.stats.injected_throttled
                } else {
                    &self.stats.quota_throttled
                }
            }
            Err(_) => &self.stats.other_errors,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        r
    }
}

struct Bench {
    rt: tokio::runtime::Runtime,
    svc: Services,
    clock: Arc<FixedClock>,
    sim: SimHandle,
    api: CountingApi,
    ddb: aws_sdk_dynamodb::Client,
    table: String,
    iteration: i64,
    elapsed: Duration,
    /// Summed first-call-to-last-answer spans: the time the submitter was sending.
    sending: Duration,
    records: u64,
}

fn base() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2071, 1, 1, 0, 0, 0)
        .single()
        .expect("instant")
}

impl Bench {
    fn new() -> Self {
        let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
        let env = LocalEnv::from_process();
        let (svc, clock, sim, api, ddb, table) = rt.block_on(async {
            let mut catalog = demo_catalog();
            catalog["requestsPerSecond"] = serde_json::json!(QUOTA_PER_SECOND as u32);
            let mut cfg =
                SimConfig::new(Catalog::from_json(&catalog.to_string()).expect("demo catalog"));
            cfg.faults = Faults::from_json(&format!(
                r#"{{"throttleRate": {INJECTED_THROTTLE_RATE}, "seed": 42}}"#
            ))
            .expect("faults");
            let sim = spawn_on("127.0.0.1:0".parse().expect("addr"), cfg)
                .await
                .expect("simulator");
            let mut sim_env = env.clone();
            sim_env
                .vars
                .insert("AWS_ENDPOINT_URL_MARKETPLACE_METERING".into(), sim.url());
            let api = CountingApi {
                inner: MarketplaceMeteringApi::new(sim_env.metering().await.expect("client")),
                stats: Arc::default(),
            };
            // One product in this (simulated) account and region: the submitter may take the whole quota.
            let config = Config::from_lookup(|k| match k {
                "AWSMP_SUBMITTER_CALLS_PER_SECOND" => Some((QUOTA_PER_SECOND as u32).to_string()),
                _ => env.vars.get(k).cloned(),
            })
            .expect("config");
            let table = config.aggregated_table.clone();
            let clock = Arc::new(FixedClock::new(base()));
            let ddb = env.dynamodb().await.expect("dynamodb");
            let svc = Services::from_clients(
                config,
                ddb.clone(),
                env.sqs().await.expect("sqs"),
                MetricsSink::capture("bench-submitter"),
                clock.clone(),
            );
            (svc, clock, sim, api, ddb, table)
        });
        Self {
            rt,
            svc,
            clock,
            sim,
            api,
            ddb,
            table,
            iteration: 0,
            elapsed: Duration::ZERO,
            sending: Duration::ZERO,
            records: 0,
        }
    }

    /// A fresh instant, its backlog written, the simulator's clock set. Returns the groups.
    fn setup(&mut self) -> Vec<GroupKey> {
        self.iteration += 1;
        // Iterations two days apart: no iteration's records fall into another's window.
        let now = base() + ChronoDuration::days(2 * self.iteration);
        self.clock.set(now);
        self.sim.with_state_mut(|s| s.set_clock(Some(now)));
        let current = HourBucket::containing(now);
        let groups: Vec<GroupKey> = (1..=HOURS)
            .flat_map(|age| {
                LICENSES.flat_map(move |i| {
                    DEMO_DIMENSIONS.iter().map(move |d| {
                        GroupKey::new(
                            demo_license_arn(i),
                            demo_account(i),
                            *d,
                            current.minus_hours(age),
                        )
                    })
                })
            })
            .collect();
        self.rt.block_on(async {
            for chunk in groups.chunks(BATCH_WRITE_ITEMS) {
                let mut requests: Vec<WriteRequest> = chunk
                    .iter()
                    .map(|g| {
                        let item =
                            aggregated_to_item(&AggregatedItem::new(g.clone(), 5, None), now);
                        WriteRequest::builder()
                            .put_request(
                                PutRequest::builder()
                                    .set_item(Some(item))
                                    .build()
                                    .expect("put"),
                            )
                            .build()
                    })
                    .collect();
                while !requests.is_empty() {
                    let out = self
                        .ddb
                        .batch_write_item()
                        .request_items(&self.table, requests)
                        .send()
                        .await
                        .expect("BatchWriteItem against the local stack");
                    requests = out
                        .unprocessed_items
                        .and_then(|mut m| m.remove(&self.table))
                        .unwrap_or_default();
                }
            }
        });
        groups
    }

    /// Submitter runs until nothing is left pending; the time they took.
    fn drain(&mut self) -> Duration {
        *self.api.stats.span.lock().expect("span") = None;
        let started = Instant::now();
        self.rt.block_on(async {
            for run in 0.. {
                let out = submitter::submit(&self.svc, &self.api)
                    .await
                    .expect("submitter run");
                if out.left_pending == 0 {
                    break;
                }
                assert!(run < 10, "backlog not drained after {run} runs: {out:?}");
            }
        });
        let took = started.elapsed();
        if let Some((first, last)) = *self.api.stats.span.lock().expect("span") {
            self.sending += last - first;
        }
        took
    }

    /// No write-back lost: every record terminal Success with the ledger's id, one ledger line each.
    fn verify(&self, groups: &[GroupKey]) {
        let ledger = self.sim.ledger();
        let by_key: std::collections::HashMap<(String, String, String), &str> = ledger
            .records()
            .iter()
            .map(|r| {
                (
                    (
                        r.key.license_arn.clone().unwrap_or_default(),
                        r.key.dimension.clone(),
                        r.key.hour.format("%Y-%m-%dT%H").to_string(),
                    ),
                    r.metering_record_id.as_str(),
                )
            })
            .collect();
        self.rt.block_on(async {
            for g in groups {
                let rec = self
                    .svc
                    .aggregated
                    .get(g)
                    .await
                    .expect("get")
                    .expect("record");
                assert!(
                    rec.status == Some(AggregatedStatus::Success) && !rec.pending,
                    "{g}: {:?} pending={}",
                    rec.status,
                    rec.pending
                );
                let id = by_key
                    .get(&(
                        g.license_arn.clone(),
                        g.dimension.clone(),
                        g.hour.to_string(),
                    ))
                    .unwrap_or_else(|| panic!("{g}: not in the ledger"));
                assert_eq!(rec.metering_record_id.as_deref(), Some(*id), "{g}");
            }
        });
        assert!(ledger.duplicates().is_empty(), "DuplicateRecord attempts");
    }
}

fn submitter_quota(c: &mut Criterion) {
    if std::env::var_os("AWS_ENDPOINT_URL_DYNAMODB").is_none() {
        eprintln!(
            "submitter_quota: skipped — AWS_ENDPOINT_URL_DYNAMODB is unset. Start the local stack \
             (awsmp-local up) and source its env file to run this benchmark."
        );
        return;
    }
    let mut bench = Bench::new();
    let per_iteration = (LICENSES.len() * DEMO_DIMENSIONS.len()) as u64 * HOURS as u64;
    let mut g = c.benchmark_group("submitter");
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(Duration::from_secs(60))
        .throughput(Throughput::Elements(per_iteration));
    g.bench_function("drain_1200_records_at_10_rps_quota_10pct_throttled", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let groups = bench.setup();
                let took = bench.drain();
                bench.verify(&groups);
                total += took;
                bench.elapsed += took;
                bench.records += groups.len() as u64;
            }
            total
        })
    });
    g.finish();

    let s = &bench.api.stats;
    let wall = bench.elapsed.as_secs_f64();
    let sending = bench.sending.as_secs_f64();
    let accepted = s.accepted.load(Ordering::Relaxed);
    let injected = s.injected_throttled.load(Ordering::Relaxed);
    let quota = s.quota_throttled.load(Ordering::Relaxed);
    let other = s.other_errors.load(Ordering::Relaxed);
    // Requests the quota admitted: accepted ones, plus injected throttles (they took a token).
    let admitted = accepted + injected + other;
    let pct = |secs: f64| 100.0 * admitted as f64 / secs / QUOTA_PER_SECOND;
    eprintln!(
        "submitter_quota: {records} records, {admitted} requests past the quota ({accepted} \
         accepted, {injected} injected throttles, {other} other errors) and {quota} quota \
         throttles.\n  while sending (first call to last answer, {sending:.1} s): {:.2} req/s = \
         {:.1} % of the {QUOTA_PER_SECOND} req/s quota\n  whole runs incl. reading the backlog \
         and the last write-backs ({wall:.1} s): {:.2} req/s = {:.1} %; {:.0} records/s\n  \
         zero lost write-backs: {records} records Success with the ledger's MeteringRecordId, \
         one ledger line each, no DuplicateRecord",
        admitted as f64 / sending,
        pct(sending),
        admitted as f64 / wall,
        pct(wall),
        bench.records as f64 / wall,
        records = bench.records,
    );
}

criterion_group!(benches, submitter_quota);
criterion_main!(benches);
