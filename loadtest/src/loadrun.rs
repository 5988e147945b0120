//! One load run, end to end: producers → Kinesis → consumer (local event source mapping) →
//! usage table → pipeline ticks on a controlled clock → Marketplace simulator, then the
//! conservation check and the report.
//!
//! Every run gets fresh identities (its own licenses in a catalog of its own, its own stream),
//! so runs never see each other's usage and a seed replays a run exactly.

use crate::conservation::{self, GroupHour, Inputs};
use crate::faults::FaultClass;
use crate::kinesis_esm::{EsmOptions, KinesisEsm};
use crate::local::{self, LocalEnv, Paths, UpOptions};
use crate::produce::{ProduceCounters, ProduceSpec, produce};
use crate::report::{Percentiles, RunReport, Sample};
use crate::runner::Runner;
use crate::workload::Group;
use anyhow::{Context, Result, bail};
use aws_lambda_events::kinesis::KinesisEvent;
use aws_sdk_dynamodb::types::AttributeValue as Av;
use awsmp_consumer::Consumer;
use awsmp_pipeline::domain::keys::HourBucket;
use chrono::{DateTime, Duration as ChronoDuration, Utc};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Product code of load-test catalogs.
pub const LOADTEST_PRODUCT_CODE: &str = "awsmploadtest0product00001";
/// Shards of a run's stream.
pub const RUN_STREAM_SHARDS: i32 = 2;
/// Pipeline ticks with Marketplace faults on; later ticks run clean so a run settles.
const FAULTY_TICKS: usize = 4;
/// Most pipeline ticks before a run is declared unsettled.
const MAX_TICKS: usize = 40;

/// Where a run goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The local stack (started if needed), with a catalog and a stream of the run's own, the
    /// local event source mapping and consumer, pipeline ticks on a controlled clock, and the
    /// simulator's ledger as the billing record.
    Local,
    /// A real deployment, named by the environment (`AWSMP_USAGE_STREAM`, the table names,
    /// `AWS_REGION`, credentials; `AWS_ENDPOINT_URL_<SERVICE>` if set). Its own consumer and
    /// schedules do the work; the run produces, waits until every group-hour of its licenses
    /// is terminal, and takes `Success` records of aggregated-usage as billed.
    Deployment {
        /// Licenses to meter against (license ARN, buyer account) — test licenses of the
        /// product, in a dry-run or test-account stage.
        licenses: Vec<(String, String)>,
    },
}

/// A whole run.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// Where it runs.
    pub target: Target,
    /// What to produce.
    pub produce: ProduceSpec,
    /// Stop after producing (no consumer, no pipeline).
    pub produce_only: bool,
    /// Give up after this long.
    pub timeout: Duration,
    /// Show a progress bar.
    pub progress: bool,
    /// For the report.
    pub command_line: String,
}

/// Live counters of the consuming side.
#[derive(Debug, Default)]
struct ConsumeCounters {
    consumed: AtomicU64,
    rows_written: AtomicU64,
    update_items: AtomicU64,
    billed: AtomicU64,
    crashes: AtomicU64,
}

/// Per-event timings gathered by the consumer wrapper.
#[derive(Debug, Default)]
struct Timings {
    /// Event → row write, microseconds.
    event_to_row: Option<hdrhistogram::Histogram<u64>>,
    /// Event timestamps (ms) per group-hour, for event → billed.
    events_by_hour: BTreeMap<GroupHour, Vec<i64>>,
    /// Event ids already timed: duplicates on the stream (lost responses) count once.
    seen: std::collections::HashSet<String>,
}

fn histogram() -> hdrhistogram::Histogram<u64> {
    hdrhistogram::Histogram::new(3).expect("3 significant figures is valid")
}

/// License ARN and account of license `i` in run `nonce`: fresh identities per run.
pub fn run_license(nonce: u32, i: usize) -> (String, String) {
    (
        format!(
            "arn:aws:license-manager::123456789012:license:l-{nonce:08x}{:024x}",
            i
        ),
        format!(
            "{:012}",
            300_000_000_000_u64 + u64::from(nonce % 1000) * 1_000_000 + i as u64
        ),
    )
}

fn catalog(licenses: &[(String, String)], dimensions: &[String]) -> serde_json::Value {
    serde_json::json!({
        "windowHours": 24,
        "requestsPerSecond": 10,
        "maxAllocationsPerRecord": 2500,
        "products": [{
            "productCode": LOADTEST_PRODUCT_CODE,
            "dimensions": dimensions,
            "licenses": licenses.iter().map(|(l, a)| serde_json::json!({"licenseArn": l, "customerAWSAccountId": a, "status": "active"})).collect::<Vec<_>>(),
        }]
    })
}

/// Run the load test on the local stack in `paths`.
pub async fn run(paths: &Paths, spec: &RunSpec) -> Result<RunReport> {
    let started = Instant::now();
    let run_started_at = Utc::now();
    let deadline = started + spec.timeout;
    let w = &spec.produce.workload;
    let nonce = (w.seed as u32) ^ (Utc::now().timestamp() as u32).rotate_left(16);
    let needed = w.groups.div_ceil(w.dimensions.len());
    let deployment = matches!(spec.target, Target::Deployment { .. });
    let licenses: Vec<(String, String)> = match &spec.target {
        Target::Local => (0..needed).map(|i| run_license(nonce, i)).collect(),
        Target::Deployment { licenses } => {
            anyhow::ensure!(
                licenses.len() >= needed,
                "{} groups over {} dimensions need {needed} licenses; {} given",
                w.groups,
                w.dimensions.len(),
                licenses.len()
            );
            let simulated_only = [
                FaultClass::ConsumerCrashes,
                FaultClass::DuplicateDeliveries,
                FaultClass::MarketplaceFaults,
                FaultClass::SubmitterCrashes,
                FaultClass::ClockJumps,
            ];
            if let Some(c) = simulated_only.iter().find(|c| spec.produce.faults.has(**c)) {
                bail!(
                    "fault class {c} exists only on the local stack; against a deployment only producer faults apply"
                );
            }
            licenses[..needed].to_vec()
        }
    };

    // Local state of the run (its catalog, its mapping's checkpoints); a deployment run keeps none.
    let dir = paths.root.join("loadtest");
    let (env, stream, sim) = if deployment {
        let env = LocalEnv::from_process();
        let stream = env.get("AWSMP_USAGE_STREAM")?.to_owned();
        (env, stream, None)
    } else {
        std::fs::create_dir_all(&dir)?;
        for old in std::fs::read_dir(&dir)?.flatten() {
            std::fs::remove_file(old.path()).ok();
        }
        let catalog_path = dir.join(format!("catalog-{nonce:08x}.json"));
        std::fs::write(
            &catalog_path,
            serde_json::to_string_pretty(&catalog(&licenses, &w.dimensions))?,
        )?;
        let env = local::up(
            paths,
            &UpOptions {
                catalog: Some(catalog_path),
                ephemeral: None,
            },
        )
        .await
        .context("starting the local stack")?;
        let stream = format!("awsmp-loadtest-{nonce:08x}");
        let kinesis = env.kinesis().await?;
        local::resources::ensure_stream(
            &kinesis,
            &local::resources::StreamDef {
                logical_id: "LoadTestStream".into(),
                stack: "loadtest".into(),
                name: stream.clone(),
                env: String::new(),
                shards: RUN_STREAM_SHARDS,
            },
        )
        .await?;
        let sim = SimAdmin::new(&env)?;
        sim.post("/_sim/reset", serde_json::json!({})).await?;
        (env, stream, Some(sim))
    };

    let mut settings = BTreeMap::from([
        ("command".to_owned(), spec.command_line.clone()),
        (
            "events".to_owned(),
            spec.produce.events.map_or("-".into(), |e| e.to_string()),
        ),
        (
            "duration".to_owned(),
            spec.produce
                .duration
                .map_or("-".into(), |d| format!("{d} s")),
        ),
        ("rate".to_owned(), format!("{} events/s", spec.produce.rate)),
        ("groups".to_owned(), w.groups.to_string()),
        ("dimensions".to_owned(), w.dimensions.join(",")),
        ("producers".to_owned(), spec.produce.producers.to_string()),
        ("collapse".to_owned(), spec.produce.collapse.to_string()),
        ("seed".to_owned(), w.seed.to_string()),
        ("faults".to_owned(), spec.produce.faults.describe()),
        (
            "stream".to_owned(),
            format!("{stream} ({RUN_STREAM_SHARDS} shards)"),
        ),
    ]);

    let progress = Progress::new(spec);
    let pcounters = Arc::new(ProduceCounters::default());
    let ccounters = Arc::new(ConsumeCounters::default());
    let timings = Arc::new(Mutex::new(Timings {
        event_to_row: Some(histogram()),
        ..Default::default()
    }));
    let producers = Arc::new(Mutex::new(Vec::new()));
    let timeline: Arc<Mutex<Vec<Sample>>> = Arc::default();
    let stop_sampling = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (p, c, producers, timeline, stop, progress) = (
            pcounters.clone(),
            ccounters.clone(),
            producers.clone(),
            timeline.clone(),
            stop_sampling.clone(),
            progress.clone(),
        );
        tokio::spawn(async move {
            loop {
                let acked: u64 = producers
                    .lock()
                    .expect("poisoned")
                    .iter()
                    .map(|p: &awsmp_producer::Producer| p.stats().events_acked)
                    .sum();
                let s = Sample {
                    t: started.elapsed().as_secs_f64(),
                    produced: p.produced.load(Ordering::Relaxed),
                    acked,
                    consumed: c.consumed.load(Ordering::Relaxed),
                    rows_written: c.rows_written.load(Ordering::Relaxed),
                    billed: c.billed.load(Ordering::Relaxed),
                };
                progress.update(&s);
                timeline.lock().expect("poisoned").push(s);
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(1000)).await;
            }
        })
    };

    // The consumer, fed by the local event source mapping while the producers run.
    let consumer_metrics = awsmp_pipeline::emf::MetricsSink::capture("kinesis-consumer");
    let consumer = build_consumer(&env, consumer_metrics.clone()).await?;
    let production_done = Arc::new(AtomicBool::new(false));
    let crash = spec.produce.faults.has(FaultClass::ConsumerCrashes);
    let checkpoint = dir.join(format!("esm-{nonce:08x}.json"));
    // Producing and consuming run side by side, as they would in production.
    let consuming = async {
        if spec.produce_only || deployment {
            return Ok(BTreeMap::new());
        }
        consume(
            &env,
            &stream,
            &consumer,
            &ccounters,
            &timings,
            &production_done,
            crash,
            w.seed,
            &checkpoint,
            deadline,
        )
        .await
    };
    let producing = async {
        progress.phase("producing");
        let out = produce(
            &env,
            &stream,
            &licenses,
            &spec.produce,
            pcounters.clone(),
            producers.clone(),
        )
        .await;
        production_done.store(true, Ordering::SeqCst);
        if out.is_ok() && !spec.produce_only {
            progress.phase("consuming");
        }
        out
    };
    let (produced, consumed) = tokio::join!(producing, consuming);
    let produced = produced?;
    let esm_faults = consumed?;
    let mut report = RunReport {
        faults: produced.faults.clone(),
        ..Default::default()
    };
    for (reason, n) in &produced.returned_by_reason {
        *report
            .rejects
            .entry(format!("producer:{reason}"))
            .or_default() += n;
    }

    let mut inputs = Inputs {
        produced: produced
            .produced
            .iter()
            .map(|(g, q)| (key(g), *q))
            .collect(),
        producer_returned: produced
            .returned
            .iter()
            .map(|(g, q)| (key(g), *q))
            .collect(),
        ..Default::default()
    };
    let record_to_ack = producer_latency(&producers);

    if spec.produce_only {
        progress.phase("done");
        // Ingestion only: every accepted event was acknowledged by Kinesis or handed back.
        let returned: u64 = produced.returned_by_reason.values().sum();
        let mut verdict = conservation::Verdict {
            produced: inputs.produced.values().sum(),
            ..Default::default()
        };
        if produced.acked + returned != produced.events {
            verdict.violations.push(conservation::Violation {
                stage: "produce",
                key: stream.clone(),
                expected: produced.events,
                found: produced.acked + returned,
                detail: "events neither acknowledged by Kinesis nor handed back".into(),
            });
        }
        verdict.conserved = verdict.violations.is_empty();
        report.conservation = verdict;
    } else {
        report.faults.extend(esm_faults);
        let crashes = ccounters.crashes.load(Ordering::Relaxed);
        if crashes > 0 {
            report.faults.insert("consumer:crashes".into(), crashes);
        }
        for line in consumer_metrics.lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            if v.get("EventRejected").is_some() {
                *report
                    .rejects
                    .entry(format!("consumer:{}", v["Reason"].as_str().unwrap_or("?")))
                    .or_default() += v["EventRejected"].as_f64().unwrap_or(0.0) as u64;
            }
        }

        let our: BTreeSet<String> = licenses.iter().map(|(l, _)| l.clone()).collect();
        // Only this run's groups and hours: a deployment's licenses outlive one run.
        let scope = Scope {
            stream: &stream,
            licenses: &our,
            groups: inputs
                .produced
                .keys()
                .chain(inputs.producer_returned.keys())
                .cloned()
                .collect(),
            since: run_started_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            since_hour: HourBucket::containing(run_started_at).to_string(),
        };
        if let Some(sim) = &sim {
            // The pipeline, on a controlled clock: hours close without waiting an hour.
            progress.phase("metering");
            let mut runner = Runner::new(env.clone(), &BTreeMap::new()).await?;
            if spec.produce.faults.has(FaultClass::DuplicateDeliveries) {
                duplicate_deliveries(&mut runner);
            }
            let marketplace_faults = spec.produce.faults.has(FaultClass::MarketplaceFaults);
            let submitter_crashes = spec.produce.faults.has(FaultClass::SubmitterCrashes);
            if marketplace_faults || submitter_crashes {
                sim.post(
                    "/_sim/faults",
                    serde_json::json!({
                        "throttleRate": if marketplace_faults { 0.2 } else { 0.0 },
                        "internalErrorRate": if marketplace_faults { 0.05 } else { 0.0 },
                        "unprocessedRate": if marketplace_faults { 0.1 } else { 0.0 },
                        "applyThenFailRate": if submitter_crashes { 0.3 } else { 0.0 },
                        "latencyMs": 0,
                        "seed": w.seed,
                    }),
                )
                .await?;
            }
            let last_hour = HourBucket::containing(Utc::now());
            let lock = runner.svc.config.time.metering_lock_hours();
            let mut at =
                last_hour.plus_hours(i64::from(lock) + 1).start() + ChronoDuration::minutes(5);
            let mut ticks = 0;
            loop {
                let tick = runner
                    .tick(at)
                    .await
                    .with_context(|| format!("tick at {at}"))?;
                ticks += 1;
                if let Some(e) = &tick.submitter_error {
                    tracing::info!(error = %e, "submitter run failed; the next tick retries");
                }
                let ledger = sim.ledger().await?;
                ccounters.billed.store(
                    ledger["records"].as_array().map_or(0, |r| r.len() as u64),
                    Ordering::Relaxed,
                );
                if ticks == FAULTY_TICKS {
                    sim.post("/_sim/faults", serde_json::json!({})).await?;
                }
                let pending: BTreeSet<GroupHour> = pending_hours(&env, &licenses)
                    .await?
                    .into_iter()
                    .filter(|gh| scope.keeps(gh))
                    .collect();
                if pending.is_empty() || ticks >= MAX_TICKS || Instant::now() > deadline {
                    inputs.still_pending = pending;
                    break;
                }
                at += if spec.produce.faults.has(FaultClass::ClockJumps) {
                    // Irregular jumps: 1–40 minutes, never backwards.
                    ChronoDuration::minutes(
                        1 + (w.seed.wrapping_add(ticks as u64 * 7919) % 40) as i64,
                    )
                } else {
                    ChronoDuration::minutes(5)
                };
            }
            settings.insert("pipelineTicks".into(), ticks.to_string());
            let counters = sim.ledger().await?["counters"].clone();
            for (k, name) in [
                ("throttled", "marketplace:throttled"),
                ("internalErrors", "marketplace:internalErrors"),
                ("unprocessed", "marketplace:unprocessed"),
                ("applyThenFail", "marketplace:applyThenFail"),
            ] {
                if let Some(n) = counters[k].as_u64().filter(|n| *n > 0) {
                    report.faults.insert(name.into(), n);
                }
            }
            for line in runner.metrics.lines() {
                let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                    continue;
                };
                if v.get("UsageRecordRejected").is_some() {
                    *report
                        .rejects
                        .entry(format!("pipeline:{}", v["Reason"].as_str().unwrap_or("?")))
                        .or_default() += 1;
                }
            }
        } else {
            // A deployment's own consumer and schedules do the work: wait until every unit is
            // in a row or rejected and no group-hour of ours is pending.
            progress.phase("waiting for the deployment");
            let produced_total: u64 = inputs.produced.values().sum::<u64>()
                + inputs.producer_returned.values().sum::<u64>();
            loop {
                let mut probe = Inputs::default();
                collect(&env, None, &scope, &mut probe).await?;
                ccounters
                    .billed
                    .store(probe.billed.len() as u64, Ordering::Relaxed);
                let accounted = probe.rows.values().sum::<u64>()
                    + probe.consumer_rejected.values().sum::<u64>();
                let pending: BTreeSet<GroupHour> = pending_hours(&env, &licenses)
                    .await?
                    .into_iter()
                    .filter(|gh| scope.keeps(gh))
                    .collect();
                if (accounted >= produced_total && pending.is_empty()) || Instant::now() > deadline
                {
                    inputs.still_pending = pending;
                    break;
                }
                tokio::time::sleep(Duration::from_secs(15)).await;
            }
        }

        progress.phase("checking");
        collect(&env, sim.as_ref(), &scope, &mut inputs).await?;
        let billed_at = billed_instants(&env, sim.as_ref(), &our).await?;
        let mut event_to_billed = histogram();
        {
            let t = timings.lock().expect("poisoned");
            for (gh, stamps) in &t.events_by_hour {
                if let Some(b) = billed_at.get(gh) {
                    for s in stamps {
                        let _ = event_to_billed
                            .record(((b.timestamp_millis() - s).max(0) as u64) * 1000);
                    }
                }
            }
            if let Some(h) = &t.event_to_row {
                report
                    .latency
                    .insert("eventToRow".into(), Percentiles::from_micros(h));
            }
        }
        report.latency.insert(
            "eventToBilled(virtual)".into(),
            Percentiles::from_micros(&event_to_billed),
        );
        report.conservation = conservation::check(&inputs);
        let consumed = ccounters.consumed.load(Ordering::Relaxed);
        report.write_amplification = if consumed > 0 {
            ccounters.update_items.load(Ordering::Relaxed) as f64 * 1000.0 / consumed as f64
        } else {
            0.0
        };
    }
    report.latency.insert(
        "recordToAck".into(),
        Percentiles::from_micros(&record_to_ack),
    );

    stop_sampling.store(true, Ordering::SeqCst);
    sampler.await.ok();
    progress.finish();
    if !deployment {
        env.kinesis()
            .await?
            .delete_stream()
            .stream_name(&stream)
            .send()
            .await
            .ok();
        settings.insert("target".into(), "local stack".into());
    } else {
        settings.insert("target".into(), format!("deployment (stream {stream})"));
    }
    report.settings = settings;
    report.mode = if spec.produce_only { "produce" } else { "run" }.into();
    report.elapsed_secs = started.elapsed().as_secs_f64();
    report.timeline = std::mem::take(&mut *timeline.lock().expect("poisoned"));
    Ok(report)
}

fn key(g: &Group) -> conservation::Group {
    (
        g.license_arn.clone(),
        g.account.clone(),
        g.dimension.clone(),
    )
}

/// Record-to-ack latencies the producers reported through the `metrics` facade.
fn producer_latency(
    _producers: &Arc<Mutex<Vec<awsmp_producer::Producer>>>,
) -> hdrhistogram::Histogram<u64> {
    let mut h = histogram();
    for v in crate::metrics_capture::drain_histogram(awsmp_producer::metrics::names::RECORD_TO_ACK)
    {
        let _ = h.record((v * 1_000_000.0) as u64);
    }
    h
}

async fn build_consumer(
    env: &LocalEnv,
    metrics: awsmp_pipeline::emf::MetricsSink,
) -> Result<Consumer> {
    let config = awsmp_consumer::Config::from_lookup(|k| {
        env.vars.get(k).cloned().or_else(|| std::env::var(k).ok())
    })?;
    let mut consumer =
        awsmp_consumer::adapters::dynamodb::consumer_from_config(&config, env.dynamodb().await?);
    consumer.metrics = metrics;
    Ok(consumer)
}

/// Poll the stream through the local event source mapping into the consumer until production
/// is done and every shard is caught up. With `crash`, about one batch in four "kills the
/// function" part-way through its writes (the rows and dedup stores stop answering after a
/// random number of calls, and the invocation errors): the mapping retries and bisects, and
/// the replays must add nothing twice and skip nothing.
#[allow(clippy::too_many_arguments)]
async fn consume(
    env: &LocalEnv,
    stream: &str,
    consumer: &Consumer,
    counters: &ConsumeCounters,
    timings: &Mutex<Timings>,
    done: &AtomicBool,
    crash: bool,
    seed: u64,
    checkpoint: &std::path::Path,
    deadline: Instant,
) -> Result<BTreeMap<String, u64>> {
    use awsmp_consumer::adapters::dynamodb::{DynamoDbDedupStore, DynamoDbUsageRows};
    use awsmp_consumer::adapters::fault::{Faults as StoreFaults, Faulty};
    use rand::{Rng, SeedableRng};
    let options = EsmOptions {
        batch_size: 500,
        batching_window: Duration::from_millis(200),
        // Retry until it succeeds: a load run must not discard data to the failure queue.
        max_retry_attempts: None,
        bisect_on_error: true,
        failure_destination: Some((
            env.sqs().await?,
            env.get("AWSMP_CONSUMER_FAILURE_QUEUE_URL")?.to_owned(),
        )),
        ..EsmOptions::default()
    };
    let mut esm = KinesisEsm::new(
        env.kinesis().await?,
        stream,
        options,
        checkpoint.to_path_buf(),
    )
    .await?;
    // The crashing twin of the consumer: same tables, stores that die after N calls.
    let store_faults = StoreFaults::new(seed);
    let ddb = env.dynamodb().await?;
    let mut crashing = consumer.clone();
    crashing.rows = Arc::new(Faulty::new(
        DynamoDbUsageRows::new(ddb.clone(), env.get("AWSMP_USAGE_TABLE")?),
        store_faults.clone(),
    ));
    crashing.dedup = Arc::new(Faulty::new(
        DynamoDbDedupStore::new(ddb, env.get("AWSMP_DEDUP_TABLE")?),
        store_faults.clone(),
    ));
    let rng = Mutex::new(rand::rngs::StdRng::seed_from_u64(seed ^ 0xc0ffee));
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    loop {
        let production_finished = done.load(Ordering::SeqCst);
        let report = esm
            .drain(|event: KinesisEvent| {
                let (crash_now, crash_after) = {
                    let mut rng = rng.lock().expect("poisoned");
                    (crash && rng.random_bool(0.25), rng.random_range(0..8u64))
                };
                let (consumer, crashing, faults) = (consumer, &crashing, &store_faults);
                async move {
                    if crash_now {
                        faults.crash_after(crash_after);
                        let _ = crashing.process(event).await;
                        faults.recover();
                        counters.crashes.fetch_add(1, Ordering::Relaxed);
                        return Err("injected crash: the function died mid-batch".to_owned());
                    }
                    let (response, batch) = consumer.process(event.clone()).await;
                    counters
                        .consumed
                        .fetch_add(batch.events_accepted, Ordering::Relaxed);
                    counters
                        .rows_written
                        .fetch_add(batch.row_writes, Ordering::Relaxed);
                    counters
                        .update_items
                        .fetch_add(batch.update_items, Ordering::Relaxed);
                    if response.batch_item_failures.is_empty() {
                        observe_batch(&event, timings, Utc::now());
                    }
                    Ok::<_, String>(response)
                }
            })
            .await?;
        for (k, v) in [
            ("esm:functionErrors", report.function_errors),
            ("esm:partialFailures", report.partial_failures),
            ("esm:bisections", report.bisections),
        ] {
            *totals.entry(k.into()).or_default() += v;
        }
        if !report.discarded.is_empty() {
            bail!(
                "the event source mapping discarded {} batch(es) to the failure destination: {:?}",
                report.discarded.len(),
                report.discarded
            );
        }
        if production_finished && report.records_delivered == 0 {
            totals.retain(|_, v| *v > 0);
            return Ok(totals);
        }
        if Instant::now() > deadline {
            bail!("the consumer did not catch up before the timeout");
        }
        if report.records_delivered == 0 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Record event → row latencies and event timestamps per group-hour for one delivered batch.
fn observe_batch(event: &KinesisEvent, timings: &Mutex<Timings>, finished: DateTime<Utc>) {
    let mut t = timings.lock().expect("poisoned");
    for r in &event.records {
        let arrival = r.kinesis.approximate_arrival_timestamp.0;
        let Ok(user_records) = awsmp_producer::wire::deaggregate(&r.kinesis.data.0) else {
            continue;
        };
        for u in user_records {
            let Ok(e) = awsmp_producer::wire::decode_event(&u.data) else {
                continue;
            };
            if !t.seen.insert(e.event_id.clone()) {
                continue;
            }
            let micros = (finished - e.timestamp)
                .num_microseconds()
                .unwrap_or(0)
                .max(0) as u64;
            if let Some(h) = t.event_to_row.as_mut() {
                let _ = h.record(micros);
            }
            let hour = HourBucket::containing(arrival).to_string();
            t.events_by_hour
                .entry((
                    e.license_arn.clone(),
                    e.customer_aws_account_id.clone(),
                    e.dimension.clone(),
                    hour,
                ))
                .or_default()
                .push(e.timestamp.timestamp_millis());
        }
    }
}

/// Wrap the runner's work and cleanup queues so every message is sent twice.
fn duplicate_deliveries(runner: &mut Runner) {
    let svc = &mut runner.svc;
    for q in [
        &mut svc.work_queue,
        &mut svc.deprovision_queue,
        &mut svc.cleanup_queue,
    ] {
        if let Some(inner) = q.take() {
            *q = Some(Arc::new(DuplicatingQueue(inner)));
        }
    }
}

/// Sends every message twice: SQS is at-least-once, and the pipeline must not care.
struct DuplicatingQueue(Arc<dyn awsmp_pipeline::ports::MessageQueue>);

#[async_trait::async_trait]
impl awsmp_pipeline::ports::MessageQueue for DuplicatingQueue {
    async fn send_all(&self, bodies: &[String]) -> awsmp_pipeline::Result<()> {
        self.0.send_all(bodies).await?;
        self.0.send_all(bodies).await
    }
}

/// Group-hours of our licenses whose raw rows or aggregated records are still pending.
async fn pending_hours(
    env: &LocalEnv,
    licenses: &[(String, String)],
) -> Result<BTreeSet<GroupHour>> {
    let ddb = env.dynamodb().await?;
    let mut pending = BTreeSet::new();
    for table in [
        env.get("AWSMP_USAGE_TABLE")?,
        env.get("AWSMP_AGGREGATED_USAGE_TABLE")?,
    ] {
        for (license, _) in licenses {
            for item in query_license(&ddb, table, license).await? {
                if let Some(Av::S(hour)) = item.get("meteringPending") {
                    let s = |k: &str| {
                        item.get(k)
                            .and_then(|v| v.as_s().ok())
                            .cloned()
                            .unwrap_or_default()
                    };
                    pending.insert((
                        license.clone(),
                        s("customerAWSAccountId"),
                        s("dimension"),
                        hour.clone(),
                    ));
                }
            }
        }
    }
    Ok(pending)
}

async fn query_license(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    license: &str,
) -> Result<Vec<std::collections::HashMap<String, Av>>> {
    let mut out = Vec::new();
    let mut start = None;
    loop {
        let page = ddb
            .query()
            .table_name(table)
            .key_condition_expression("licenseArn = :l")
            .expression_attribute_values(":l", Av::S(license.to_owned()))
            .set_exclusive_start_key(start)
            .send()
            .await?;
        out.extend(page.items.unwrap_or_default());
        start = page.last_evaluated_key;
        if start.is_none() {
            return Ok(out);
        }
    }
}

fn num(item: &std::collections::HashMap<String, Av>, k: &str) -> u64 {
    item.get(k)
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Read what every tier ended with, for our licenses only.
async fn collect(
    env: &LocalEnv,
    sim: Option<&SimAdmin>,
    scope: &Scope<'_>,
    inputs: &mut Inputs,
) -> Result<()> {
    let ddb = env.dynamodb().await?;
    let (stream, our) = (scope.stream, scope.licenses);
    for license in our {
        for item in query_license(&ddb, env.get("AWSMP_USAGE_TABLE")?, license).await? {
            let s = |k: &str| {
                item.get(k)
                    .and_then(|v| v.as_s().ok())
                    .cloned()
                    .unwrap_or_default()
            };
            let hour = s("timestamp").get(..13).unwrap_or_default().to_owned();
            let gh = (
                license.clone(),
                s("customerAWSAccountId"),
                s("dimension"),
                hour,
            );
            if !scope.keeps(&gh) {
                continue;
            }
            let q = num(&item, "quantity");
            *inputs.rows.entry(gh.clone()).or_default() += q;
            match s("meteringStatus").as_str() {
                "" | "Aggregated" => {}
                status => {
                    *inputs
                        .pipeline_terminal
                        .entry((gh, format!("{status}:{}", s("meteringStatusReason"))))
                        .or_default() += q
                }
            }
        }
        for item in query_license(&ddb, env.get("AWSMP_AGGREGATED_USAGE_TABLE")?, license).await? {
            let s = |k: &str| {
                item.get(k)
                    .and_then(|v| v.as_s().ok())
                    .cloned()
                    .unwrap_or_default()
            };
            let gh = (
                license.clone(),
                s("customerAWSAccountId"),
                s("dimension"),
                s("hourBucket"),
            );
            if !scope.keeps(&gh) {
                continue;
            }
            match s("meteringStatus").as_str() {
                "" => {}
                // Billed units come from the simulator's ledger when there is one; against a
                // deployment, from the records AWS accepted.
                "Success" if sim.is_some() => {}
                "Success" => *inputs.billed.entry(gh).or_default() += num(&item, "quantity"),
                status => {
                    *inputs
                        .pipeline_terminal
                        .entry((gh, status.to_owned()))
                        .or_default() += num(&item, "quantity")
                }
            }
        }
    }
    // Consumer rejections (and late usage) of this run's stream.
    let mut start = None;
    loop {
        let page = ddb
            .scan()
            .table_name(env.get("AWSMP_REJECTED_EVENTS_TABLE")?)
            .set_exclusive_start_key(start)
            .send()
            .await?;
        for item in page.items() {
            let s = |k: &str| {
                item.get(k)
                    .and_then(|v| v.as_s().ok())
                    .cloned()
                    .unwrap_or_default()
            };
            if s("stream") != stream
                || !our.contains(&s("licenseArn"))
                || s("rejectedAt") < scope.since
                || !scope.groups.contains(&(
                    s("licenseArn"),
                    s("customerAWSAccountId"),
                    s("dimension"),
                ))
            {
                continue;
            }
            let g = (s("licenseArn"), s("customerAWSAccountId"), s("dimension"));
            *inputs
                .consumer_rejected
                .entry((g, s("reason")))
                .or_default() += num(item, "quantity");
        }
        start = page.last_evaluated_key;
        if start.is_none() {
            break;
        }
    }
    let Some(sim) = sim else { return Ok(()) };
    let ledger = sim.ledger().await?;
    for r in ledger["records"].as_array().into_iter().flatten() {
        let gh = ledger_group_hour(r);
        if our.contains(&gh.0) && scope.keeps(&gh) {
            *inputs.billed.entry(gh).or_default() += r["quantity"].as_u64().unwrap_or(0);
        }
    }
    Ok(())
}

/// What of the tables belongs to this run.
struct Scope<'a> {
    stream: &'a str,
    licenses: &'a BTreeSet<String>,
    groups: BTreeSet<conservation::Group>,
    /// RFC 3339 (millis, Z) instant the run started: compare as strings.
    since: String,
    /// Its hour bucket.
    since_hour: String,
}

impl Scope<'_> {
    fn keeps(&self, gh: &GroupHour) -> bool {
        gh.3 >= self.since_hour
            && self
                .groups
                .contains(&(gh.0.clone(), gh.1.clone(), gh.2.clone()))
    }
}

/// When the simulator billed each of our group-hours (its clock: virtual time).
async fn billed_instants(
    env: &LocalEnv,
    sim: Option<&SimAdmin>,
    our: &BTreeSet<String>,
) -> Result<BTreeMap<GroupHour, DateTime<Utc>>> {
    let mut out = BTreeMap::new();
    let Some(sim) = sim else {
        // A deployment: when the submitter recorded `Success` (its write-back time).
        let ddb = env.dynamodb().await?;
        for license in our {
            for item in
                query_license(&ddb, env.get("AWSMP_AGGREGATED_USAGE_TABLE")?, license).await?
            {
                let s = |k: &str| {
                    item.get(k)
                        .and_then(|v| v.as_s().ok())
                        .cloned()
                        .unwrap_or_default()
                };
                if s("meteringStatus") != "Success" {
                    continue;
                }
                if let Ok(at) = DateTime::parse_from_rfc3339(&s("updatedAt")) {
                    out.insert(
                        (
                            license.clone(),
                            s("customerAWSAccountId"),
                            s("dimension"),
                            s("hourBucket"),
                        ),
                        at.with_timezone(&Utc),
                    );
                }
            }
        }
        return Ok(out);
    };
    let ledger = sim.ledger().await?;
    for r in ledger["records"].as_array().into_iter().flatten() {
        let gh = ledger_group_hour(r);
        let billed_at = r["firstSeen"]
            .as_str()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok());
        if let Some(at) = billed_at.filter(|_| our.contains(&gh.0)) {
            out.insert(gh, at.with_timezone(&Utc));
        }
    }
    Ok(out)
}

/// The group-hour of one simulator ledger record.
fn ledger_group_hour(r: &serde_json::Value) -> GroupHour {
    let field = |k: &str| r[k].as_str().unwrap_or_default().to_owned();
    (
        field("licenseArn"),
        field("customerAWSAccountId"),
        field("dimension"),
        field("hour"),
    )
}

/// The simulator's admin API.
struct SimAdmin {
    url: String,
    http: reqwest::Client,
}

impl SimAdmin {
    fn new(env: &LocalEnv) -> Result<Self> {
        Ok(Self {
            url: env.get("AWSMP_SIM_ADMIN_URL")?.to_owned(),
            http: reqwest::Client::new(),
        })
    }

    async fn post(&self, path: &str, body: serde_json::Value) -> Result<()> {
        let res = self
            .http
            .post(format!("{}{path}", self.url))
            .json(&body)
            .send()
            .await?;
        if !res.status().is_success() {
            bail!(
                "simulator {path}: {} {}",
                res.status(),
                res.text().await.unwrap_or_default()
            );
        }
        Ok(())
    }

    async fn ledger(&self) -> Result<serde_json::Value> {
        Ok(self
            .http
            .get(format!("{}/_sim/ledger", self.url))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }
}

/// The progress bar.
#[derive(Clone)]
struct Progress(Option<indicatif::ProgressBar>);

impl Progress {
    fn new(spec: &RunSpec) -> Self {
        if !spec.progress {
            return Self(None);
        }
        let total = spec.produce.events.or_else(|| {
            spec.produce
                .duration
                .map(|d| (d * spec.produce.rate) as u64)
        });
        let bar = indicatif::ProgressBar::new(total.unwrap_or(0));
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} events  {msg}",
            )
            .expect("valid template"),
        );
        Self(Some(bar))
    }

    fn update(&self, s: &Sample) {
        if let Some(b) = &self.0 {
            b.set_position(s.produced);
            b.set_message(format!(
                "acked {}  consumed {}  rows {}  billed {}",
                s.acked, s.consumed, s.rows_written, s.billed
            ));
        }
    }

    fn phase(&self, phase: &str) {
        if let Some(b) = &self.0 {
            b.set_prefix(phase.to_owned());
            b.println(format!("== {phase}"));
        }
    }

    fn finish(&self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_identities_are_valid_and_distinct() {
        let (l0, a0) = run_license(0xdead_beef, 0);
        let (l1, a1) = run_license(0xdead_beef, 1);
        assert!(awsmp_pipeline::ids::is_valid_license_arn(&l0), "{l0}");
        assert!(awsmp_pipeline::ids::is_valid_account_id(&a0), "{a0}");
        assert_ne!(l0, l1);
        assert_ne!(a0, a1);
        assert_ne!(run_license(1, 0).0, run_license(2, 0).0);
    }
}
