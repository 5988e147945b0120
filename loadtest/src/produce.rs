//! The producing side of a load run: P producers generating a seeded, Zipf-skewed workload
//! at a target rate into the usage stream, with optional PutRecords faults, tracking exactly
//! what was accepted per group and what came back undelivered.

use crate::faults::{FaultClass, Faults};
use crate::loadrun::RunCounters;
use crate::workload::{Group, Workload, WorkloadSpec};
use anyhow::{Context, Result};
use awsmp_local_stack::local::LocalEnv;
use awsmp_producer::sink::{FaultConfig, FaultInjectingRecordSink, KinesisRecordSink};
use awsmp_producer::{DEFAULT_RETRY_POLICY, KinesisShardMapSource, Producer, Undelivered};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The producers' linger in a load run: events wait at most this long for company.
pub const LOADTEST_LINGER: Duration = Duration::from_millis(50);

/// How much to produce.
#[derive(Debug, Clone)]
pub struct ProduceSpec {
    /// Total events (across producers), or…
    pub events: Option<u64>,
    /// …seconds of production.
    pub duration: Option<f64>,
    /// Target events per second (across producers).
    pub rate: f64,
    /// Concurrent producers.
    pub producers: usize,
    /// Per-second collapse in the producer.
    pub collapse: bool,
    /// The workload.
    pub workload: WorkloadSpec,
    /// Fault classes on.
    pub faults: Faults,
}

/// What production delivered.
#[derive(Debug, Default)]
pub struct ProduceOutcome {
    /// Quantity accepted by `record()`, per group.
    pub produced: BTreeMap<Group, u64>,
    /// Quantity handed back undeliverable, per group, and by reason code.
    pub returned: BTreeMap<Group, u64>,
    /// Undelivered events by reason code.
    pub returned_by_reason: BTreeMap<String, u64>,
    /// Events accepted.
    pub events: u64,
    /// Events acknowledged by Kinesis (sum over producers).
    pub acked: u64,
    /// Faults injected, by class.
    pub faults: BTreeMap<String, u64>,
}

/// Run the producers to completion (events or duration reached), then shut them down,
/// delivering everything buffered. Each producer is pushed to `producers_out` as it starts
/// (for live acknowledgement counts); `counters.produced` counts accepted events.
pub async fn produce(
    env: &LocalEnv,
    stream: &str,
    licenses: &[(String, String)],
    spec: &ProduceSpec,
    counters: Arc<RunCounters>,
    producers_out: Arc<Mutex<Vec<Producer>>>,
) -> Result<ProduceOutcome> {
    let kinesis = env.kinesis().await?;
    let returned: Arc<Mutex<Vec<Undelivered>>> = Arc::default();
    let mut tasks = Vec::new();
    let mut sinks = Vec::new();
    let pacing = Pacing {
        per_producer_rate: spec.rate / spec.producers as f64,
        total_events: spec.events,
        issued: Arc::new(AtomicU64::new(0)),
        duration: spec.duration.map(Duration::from_secs_f64),
    };
    for p in 0..spec.producers {
        let sink = Arc::new(FaultInjectingRecordSink::new(
            KinesisRecordSink::new(kinesis.clone(), stream),
            fault_config(spec, p),
        ));
        sinks.push(sink.clone());
        let returned = returned.clone();
        let producer = Producer::builder(stream)
            .producer_id(format!("loadtest-{p}"))
            .collapse(spec.collapse)
            .linger(LOADTEST_LINGER)
            // Long enough that faults delay but never expire a record in a load run.
            .record_ttl(Duration::from_secs(300))
            .retry(DEFAULT_RETRY_POLICY)
            .on_undelivered(move |u| returned.lock().expect("poisoned").extend(u))
            .start_with(sink, KinesisShardMapSource::new(kinesis.clone(), stream))
            .context("starting a producer")?;
        producers_out
            .lock()
            .expect("poisoned")
            .push(producer.clone());
        let workload_spec = WorkloadSpec {
            seed: spec
                .workload
                .seed
                .wrapping_mul(1_000_003)
                .wrapping_add(p as u64),
            ..spec.workload.clone()
        };
        let workload = Workload::new(&workload_spec, licenses)?;
        RunCounters::add(&counters.producers_running, 1);
        tasks.push(tokio::spawn(run_producer(
            producer,
            workload,
            pacing.clone(),
            counters.clone(),
        )));
    }
    let mut out = ProduceOutcome::default();
    for t in tasks {
        let run = t.await??;
        for (g, q) in run.produced {
            *out.produced.entry(g).or_default() += q;
        }
        out.events += run.events;
        out.acked += run.acked;
        returned.lock().expect("poisoned").extend(run.undelivered);
    }
    add_returned(&mut out, returned.lock().expect("poisoned").drain(..));
    for s in &sinks {
        add_sink_faults(&mut out, s.counts());
    }
    Ok(out)
}

/// The PutRecords faults of producer `p`, by the run's fault classes.
fn fault_config(spec: &ProduceSpec, p: usize) -> FaultConfig {
    let rate = |class: FaultClass, r: f64| if spec.faults.has(class) { r } else { 0.0 };
    FaultConfig {
        seed: spec.workload.seed.wrapping_add(p as u64 + 1),
        call_throttle_rate: rate(FaultClass::Throttling, 0.05),
        entry_throttle_rate: rate(FaultClass::PartialPutRecords, 0.05),
        entry_failure_rate: rate(FaultClass::PartialPutRecords, 0.02),
        lost_response_rate: rate(FaultClass::LostResponses, 0.05),
        ..FaultConfig::default()
    }
}

/// When producers stop, and how fast they go.
#[derive(Clone)]
struct Pacing {
    per_producer_rate: f64,
    /// Stop once this many events were issued across producers…
    total_events: Option<u64>,
    issued: Arc<AtomicU64>,
    /// …or after this long.
    duration: Option<Duration>,
}

/// What one producer did.
struct ProducerRun {
    produced: BTreeMap<Group, u64>,
    events: u64,
    acked: u64,
    undelivered: Vec<Undelivered>,
}

/// Record events at the paced rate until the run's events or duration are reached, then shut
/// the producer down.
async fn run_producer(
    producer: Producer,
    mut workload: Workload,
    pacing: Pacing,
    counters: Arc<RunCounters>,
) -> Result<ProducerRun> {
    let mut produced: BTreeMap<Group, u64> = BTreeMap::new();
    let started = Instant::now();
    let mut n: u64 = 0;
    loop {
        if let Some(total) = pacing.total_events
            && pacing.issued.fetch_add(1, Ordering::SeqCst) >= total
        {
            break;
        }
        if pacing.duration.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
        // Pace to the target rate: event n is due at n / rate seconds.
        let due = Duration::from_secs_f64(n as f64 / pacing.per_producer_rate);
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            tokio::time::sleep(wait).await;
        }
        let (idx, event) = workload.next_event(chrono::Utc::now());
        let q = event.quantity;
        producer.record(event).await.context("record()")?;
        *produced.entry(workload.groups()[idx].clone()).or_default() += q;
        RunCounters::add(&counters.produced, 1);
        n += 1;
    }
    let outcome = producer.shutdown().await.context("producer shutdown")?;
    counters.producers_running.fetch_sub(1, Ordering::SeqCst);
    Ok(ProducerRun {
        produced,
        events: n,
        acked: producer.stats().events_acked,
        undelivered: outcome.undelivered,
    })
}

/// Undelivered events: their quantity per group, their count by reason code.
fn add_returned(out: &mut ProduceOutcome, returned: impl Iterator<Item = Undelivered>) {
    for u in returned {
        let g = Group {
            license_arn: u.event.license_arn.clone(),
            account: u.event.customer_aws_account_id.clone(),
            dimension: u.event.dimension.clone(),
        };
        *out.returned.entry(g).or_default() += u.event.quantity;
        *out.returned_by_reason
            .entry(u.reason.code().to_owned())
            .or_default() += u.constituents as u64;
    }
}

fn add_sink_faults(out: &mut ProduceOutcome, c: awsmp_producer::sink::FaultCounts) {
    for (k, v) in [
        ("producer:callsThrottled", c.calls_throttled),
        ("producer:entriesThrottled", c.entries_throttled),
        ("producer:entriesFailed", c.entries_failed),
        ("producer:responsesLost", c.responses_lost),
    ] {
        if v > 0 {
            *out.faults.entry(k.into()).or_default() += v;
        }
    }
}
