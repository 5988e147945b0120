//! The consuming side of a local run: the local Kinesis event source mapping feeding the
//! consumer while the producers run, optionally with injected consumer crashes.

use super::RunContext;
use super::counters::RunCounters;
use super::target::ConsumeOutcome;
use super::timings::{Timings, observe_batch};
use crate::faults::FaultClass;
use anyhow::{Result, bail};
use aws_lambda_events::event::streams::KinesisEventResponse;
use aws_lambda_events::kinesis::KinesisEvent;
use awsmp_aws::emf::MetricsSink;
use awsmp_consumer::Consumer;
use awsmp_local_stack::kinesis_esm::{EsmOptions, EsmReport, KinesisEsm, SHARD_POLL_INTERVAL};
use awsmp_local_stack::local::LocalEnv;
use awsmp_local_stack::local::hosted::{Hosted, scheduled_event};
use awsmp_testkit::faults::{FaultPlan, Rates};
use awsmp_testkit::ports::{Ctx, Faulty};
use chrono::Utc;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Real time between heartbeat markers while the producers run.
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);

/// The consumer and its crashing twin: same tables, stores that die after N calls.
struct Consumers {
    consumer: Consumer,
    crashing: Consumer,
    store_faults: Arc<FaultPlan>,
    /// Crash about one batch in four.
    crash: bool,
    rng: Mutex<rand::rngs::StdRng>,
    /// The consumer and the heartbeat as processes; `None`: in process.
    hosted: Option<Arc<Hosted>>,
    /// The hosted consumer's stdout lines (its EMF metrics).
    lines: Mutex<Vec<String>>,
}

impl Consumers {
    async fn new(
        env: &LocalEnv,
        metrics: MetricsSink,
        (crash, seed): (bool, u64),
        hosted: Option<Arc<Hosted>>,
    ) -> Result<Self> {
        use awsmp_consumer::adapters::dynamodb::{DynamoDbDedupStore, DynamoDbUsageRows};
        let config = awsmp_consumer::Config::from_lookup(|k| {
            env.vars.get(k).cloned().or_else(|| std::env::var(k).ok())
        })?;
        let ddb = env.dynamodb().await?;
        let mut consumer =
            awsmp_consumer::adapters::dynamodb::consumer_from_config(&config, ddb.clone());
        consumer.metrics = metrics;
        // No rates and no interleaver: only the crash point armed before a crashing batch.
        let ctx = Ctx::new(FaultPlan::new(seed, Rates::default()));
        let store_faults = ctx.faults.clone();
        let mut crashing = consumer.clone();
        crashing.rows = Arc::new(Faulty::new(
            DynamoDbUsageRows::new(ddb.clone(), env.get("AWSMP_USAGE_TABLE")?),
            &ctx,
        ));
        crashing.dedup = Arc::new(Faulty::new(
            DynamoDbDedupStore::new(ddb, env.get("AWSMP_DEDUP_TABLE")?),
            &ctx,
        ));
        Ok(Self {
            consumer,
            crashing,
            store_faults,
            crash,
            rng: Mutex::new(rand::rngs::StdRng::seed_from_u64(seed ^ 0xc0ffee)),
            hosted,
            lines: Mutex::default(),
        })
    }

    /// The heartbeat's scheduled run: the stream-heartbeat process on its scheduled event, or
    /// its function in process.
    async fn heartbeat(
        &self,
        kinesis: &aws_sdk_kinesis::Client,
        stream: &str,
        marks: &dyn awsmp_aws::watermark::WatermarkStore,
    ) -> Result<()> {
        match &self.hosted {
            Some(h) => {
                let event = scheduled_event("stream-heartbeat", Utc::now());
                h.invoke("stream-heartbeat", &event).await?;
            }
            None => {
                awsmp_consumer::heartbeat::scheduled(kinesis, stream, Some(marks)).await?;
            }
        }
        Ok(())
    }

    /// One invocation of the consumer's process. With consumer crashes on, about one in four
    /// is killed (`SIGKILL`) 0–300 ms in, part-way through its writes or not: the mapping
    /// replays the batch.
    async fn handle_hosted(
        &self,
        h: &Hosted,
        event: KinesisEvent,
        counters: &RunCounters,
        timings: &Mutex<Timings>,
    ) -> std::result::Result<KinesisEventResponse, String> {
        let (started, invoked) = (Instant::now(), Utc::now());
        counters.delivered.lock().expect("poisoned").observe(&event);
        let crash_after = {
            let mut rng = self.rng.lock().expect("poisoned");
            (self.crash && rng.random_bool(0.25))
                .then(|| Duration::from_millis(rng.random_range(0..300)))
        };
        let payload = serde_json::to_value(&event).map_err(|e| e.to_string())?;
        let out = h
            .invoke_crashing("kinesis-consumer", &payload, crash_after)
            .await;
        RunCounters::add(&counters.consumer_invocations, 1);
        let ms = started.elapsed().as_micros().div_ceil(1000) as u64;
        RunCounters::add(&counters.consumer_billed_ms, ms);
        let lines = h.take_stdout(&["kinesis-consumer"]);
        RunCounters::add(&counters.consumed, metric_sum(&lines, "EventsAccepted"));
        RunCounters::add(&counters.rows_written, metric_sum(&lines, "RowsWritten"));
        self.lines.lock().expect("poisoned").extend(lines);
        match out {
            Err(e @ awsmp_lambda_host::Error::Crashed { .. }) if crash_after.is_some() => {
                RunCounters::add(&counters.crashes, 1);
                Err(format!("injected crash: {e}"))
            }
            Err(e) => Err(e.to_string()),
            Ok(answer) => {
                let response: KinesisEventResponse =
                    serde_json::from_value(answer).map_err(|e| e.to_string())?;
                if response.batch_item_failures.is_empty() {
                    observe_batch(&event, timings, invoked, Utc::now());
                }
                Ok(response)
            }
        }
    }

    /// One invocation: either the function "dies" part-way through its writes (an error), or
    /// the consumer processes the batch and the counters and timings are updated.
    async fn handle(
        &self,
        event: KinesisEvent,
        counters: &RunCounters,
        timings: &Mutex<Timings>,
    ) -> std::result::Result<KinesisEventResponse, String> {
        if let Some(h) = &self.hosted {
            return self.handle_hosted(h, event, counters, timings).await;
        }
        let started = Instant::now();
        let invoked = Utc::now();
        counters.delivered.lock().expect("poisoned").observe(&event);
        let billed = |counters: &RunCounters| {
            RunCounters::add(&counters.consumer_invocations, 1);
            let ms = started.elapsed().as_micros().div_ceil(1000) as u64;
            RunCounters::add(&counters.consumer_billed_ms, ms);
        };
        let (crash_now, crash_after) = {
            let mut rng = self.rng.lock().expect("poisoned");
            (
                self.crash && rng.random_bool(0.25),
                rng.random_range(0..8u64),
            )
        };
        if crash_now {
            self.store_faults.crash_after(crash_after);
            let _ = self.crashing.process(event).await;
            self.store_faults.recover();
            RunCounters::add(&counters.crashes, 1);
            billed(counters);
            return Err("injected crash: the function died mid-batch".to_owned());
        }
        let (response, batch) = self.consumer.process(event.clone()).await;
        billed(counters);
        RunCounters::add(&counters.consumed, batch.events_accepted);
        RunCounters::add(&counters.rows_written, batch.row_writes);
        RunCounters::add(&counters.update_items, batch.update_items);
        if response.batch_item_failures.is_empty() {
            let finished = Utc::now();
            let mut t = timings.lock().expect("poisoned");
            t.invocations.observe(&batch);
            t.store_concurrency = self.consumer.settings.concurrency;
            drop(t);
            observe_batch(&event, timings, invoked, finished);
        }
        Ok(response)
    }
}

/// Poll `stream` through the local event source mapping (checkpoints in `checkpoint`) into
/// the consumer until production is done and every shard is caught up. With consumer crashes
/// on, about one batch in four "kills the function" part-way through its writes (the rows and
/// dedup stores stop answering after a random number of calls, and the invocation errors):
/// the mapping retries and bisects, and the replays must add nothing twice and skip nothing.
pub(super) async fn consume(
    ctx: &RunContext<'_>,
    env: &LocalEnv,
    (stream, checkpoint): (&str, &Path),
    hosted: Option<Arc<Hosted>>,
) -> Result<ConsumeOutcome> {
    let options = EsmOptions {
        batch_size: 500,
        batching_window: ctx.spec.overlap.batching_window,
        // Retry until it succeeds: a load run must not discard data to the failure queue.
        max_retry_attempts: None,
        bisect_on_error: true,
        parallelization_factor: ctx.spec.overlap.parallelization_factor.max(1),
        failure_destination: Some((
            env.sqs().await?,
            env.get("AWSMP_CONSUMER_FAILURE_QUEUE_URL")?.to_owned(),
        )),
        ..EsmOptions::default()
    };
    ctx.timings.lock().expect("poisoned").batching_window = options.batching_window;
    let mut esm = KinesisEsm::new(
        env.kinesis().await?,
        stream,
        options,
        checkpoint.to_path_buf(),
    )
    .await?;
    let metrics = MetricsSink::capture("kinesis-consumer");
    let faults = &ctx.spec.produce.faults;
    let crash = faults.has(FaultClass::ConsumerCrashes);
    let seed = ctx.spec.produce.workload.seed;
    let consumers = Consumers::new(env, metrics.clone(), (crash, seed), hosted).await?;
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    let kinesis = env.kinesis().await?;
    if !consumers.crash {
        follow(ctx, &mut esm, &consumers, (&kinesis, stream), &mut totals).await?;
    }
    let mut last_beat: Option<Instant> = None;
    loop {
        let production_finished = ctx.production_done.load(Ordering::SeqCst);
        // The heartbeat's schedule, compressed: while the producers run, every open shard gets
        // a marker each second, so an idle shard's watermark keeps up (docs/guarantees.md).
        if let Some(marks) = consumers.consumer.watermarks.as_deref()
            && !production_finished
            && last_beat.is_none_or(|b| b.elapsed() >= HEARTBEAT_EVERY)
        {
            consumers.heartbeat(&kinesis, stream, marks).await?;
            last_beat = Some(Instant::now());
        }
        let polled = Instant::now();
        let handle = |event: KinesisEvent| consumers.handle(event, &ctx.counters, &ctx.timings);
        // Lambda runs one batch per shard at a time, the shards concurrently; injected crashes
        // share one fault switch, so batches that may crash go one after another. After a
        // followed run this drains what is left (a shard a reshard opened meanwhile).
        let report = if consumers.crash {
            esm.drain(handle).await?
        } else {
            esm.drain_concurrent(handle).await?
        };
        add_esm_counts(&mut totals, &report);
        ensure_no_discards(&report)?;
        if production_finished && report.records_delivered == 0 {
            let mut lines = metrics.lines();
            lines.append(&mut consumers.lines.lock().expect("poisoned"));
            return Ok(outcome(totals, &ctx.counters, &lines));
        }
        if Instant::now() > ctx.deadline {
            bail!("the consumer did not catch up before the timeout");
        }
        if report.records_delivered == 0 {
            // Caught up: poll again at Lambda's base rate.
            tokio::time::sleep(SHARD_POLL_INTERVAL.saturating_sub(polled.elapsed())).await;
        }
    }
}

/// While the producers run: Lambda's poller, each shard on its own
/// ([`KinesisEsm::follow`]), beside the heartbeat, until production is done and every shard
/// has caught up after it.
async fn follow(
    ctx: &RunContext<'_>,
    esm: &mut KinesisEsm,
    consumers: &Consumers,
    (kinesis, stream): (&aws_sdk_kinesis::Client, &str),
    totals: &mut BTreeMap<String, u64>,
) -> Result<()> {
    let marks = consumers.consumer.watermarks.as_deref();
    let handle = |event: KinesisEvent| consumers.handle(event, &ctx.counters, &ctx.timings);
    let finished = || ctx.production_done.load(Ordering::SeqCst);
    let deadline = tokio::time::Instant::from_std(ctx.deadline);
    let (report, beats) = tokio::time::timeout_at(deadline, async {
        futures::join!(
            esm.follow(handle, finished),
            heartbeats(ctx, consumers, (kinesis, stream), marks)
        )
    })
    .await
    .map_err(|_| anyhow::anyhow!("the consumer did not catch up before the timeout"))?;
    let report = report?;
    beats?;
    add_esm_counts(totals, &report);
    ensure_no_discards(&report)
}

/// The heartbeat's schedule, compressed: while the producers run, every open shard gets a
/// marker each second, so an idle shard's watermark keeps up (docs/guarantees.md).
async fn heartbeats(
    ctx: &RunContext<'_>,
    consumers: &Consumers,
    (kinesis, stream): (&aws_sdk_kinesis::Client, &str),
    marks: Option<&dyn awsmp_aws::watermark::WatermarkStore>,
) -> Result<()> {
    let Some(marks) = marks else {
        return Ok(());
    };
    while !ctx.production_done.load(Ordering::SeqCst) {
        let beat = Instant::now();
        consumers.heartbeat(kinesis, stream, marks).await?;
        let next = beat + HEARTBEAT_EVERY;
        while Instant::now() < next && !ctx.production_done.load(Ordering::SeqCst) {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
    Ok(())
}

/// A load run must lose nothing to the failure queue.
fn ensure_no_discards(report: &EsmReport) -> Result<()> {
    if !report.discarded.is_empty() {
        bail!(
            "the event source mapping discarded {} batch(es) to the failure destination: {:?}",
            report.discarded.len(),
            report.discarded
        );
    }
    Ok(())
}

fn add_esm_counts(totals: &mut BTreeMap<String, u64>, report: &EsmReport) {
    for (k, v) in [
        ("esm:functionErrors", report.function_errors),
        ("esm:partialFailures", report.partial_failures),
        ("esm:bisections", report.bisections),
    ] {
        *totals.entry(k.into()).or_default() += v;
    }
}

/// The mapping's fault counts, the injected crashes and the consumer's rejections by reason
/// (its `EventRejected` metric lines).
fn outcome(
    mut faults: BTreeMap<String, u64>,
    counters: &RunCounters,
    lines: &[String],
) -> ConsumeOutcome {
    faults.retain(|_, v| *v > 0);
    let crashes = RunCounters::get(&counters.crashes);
    if crashes > 0 {
        faults.insert("consumer:crashes".into(), crashes);
    }
    let mut rejects = BTreeMap::new();
    for line in lines {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v.get("EventRejected").is_some() {
            *rejects
                .entry(format!("consumer:{}", v["Reason"].as_str().unwrap_or("?")))
                .or_default() += v["EventRejected"].as_f64().unwrap_or(0.0) as u64;
        }
    }
    ConsumeOutcome {
        faults,
        rejects,
        overlap: BTreeMap::new(),
    }
}

/// The sum of the consumer's `metric` (`EventsAccepted`, `RowsWritten`) over its EMF lines.
fn metric_sum(lines: &[String], metric: &str) -> u64 {
    lines
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v.get(metric).and_then(serde_json::Value::as_f64))
        .map(|n| n as u64)
        .sum()
}
