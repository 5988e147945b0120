//! The producing side of a load run: P producers generating a seeded, Zipf-skewed workload
//! at a target rate into the usage stream, with optional PutRecords faults, tracking exactly
//! what was accepted per group and what came back undelivered.

use crate::faults::{FaultClass, Faults};
use crate::local::LocalEnv;
use crate::workload::{Group, Workload, WorkloadSpec};
use anyhow::{Context, Result};
use awsmp_producer::sink::{FaultConfig, FaultInjectingRecordSink, KinesisRecordSink};
use awsmp_producer::{DEFAULT_RETRY_POLICY, KinesisShardMapSource, Producer, Undelivered};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

/// Live counters, sampled for the report and the progress bar.
#[derive(Debug, Default)]
pub struct ProduceCounters {
    /// Events accepted by `record()`.
    pub produced: AtomicU64,
    /// Producers still running.
    pub running: AtomicU64,
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
/// delivering everything buffered.
pub async fn produce(
    env: &LocalEnv,
    stream: &str,
    licenses: &[(String, String)],
    spec: &ProduceSpec,
    counters: Arc<ProduceCounters>,
    producers_out: Arc<Mutex<Vec<Producer>>>,
) -> Result<ProduceOutcome> {
    let kinesis = env.kinesis().await?;
    let returned: Arc<Mutex<Vec<Undelivered>>> = Arc::default();
    let mut tasks = Vec::new();
    let mut sinks = Vec::new();
    let per_producer_rate = spec.rate / spec.producers as f64;
    let total_events = spec.events;
    let issued = Arc::new(AtomicU64::new(0));
    for p in 0..spec.producers {
        let fault = FaultConfig {
            seed: spec.workload.seed.wrapping_add(p as u64 + 1),
            call_throttle_rate: if spec.faults.has(FaultClass::Throttling) {
                0.05
            } else {
                0.0
            },
            entry_throttle_rate: if spec.faults.has(FaultClass::PartialPutRecords) {
                0.05
            } else {
                0.0
            },
            entry_failure_rate: if spec.faults.has(FaultClass::PartialPutRecords) {
                0.02
            } else {
                0.0
            },
            lost_response_rate: if spec.faults.has(FaultClass::LostResponses) {
                0.05
            } else {
                0.0
            },
            ..FaultConfig::default()
        };
        let sink = Arc::new(FaultInjectingRecordSink::new(
            KinesisRecordSink::new(kinesis.clone(), stream),
            fault,
        ));
        sinks.push(sink.clone());
        let returned = returned.clone();
        let producer = Producer::builder(stream)
            .producer_id(format!("loadtest-{p}"))
            .collapse(spec.collapse)
            .linger(Duration::from_millis(50))
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
        let mut workload = Workload::new(
            &WorkloadSpec {
                seed: spec
                    .workload
                    .seed
                    .wrapping_mul(1_000_003)
                    .wrapping_add(p as u64),
                ..spec.workload.clone()
            },
            licenses,
        )?;
        let counters = counters.clone();
        let issued = issued.clone();
        let duration = spec.duration.map(Duration::from_secs_f64);
        counters.running.fetch_add(1, Ordering::SeqCst);
        tasks.push(tokio::spawn(async move {
            let mut produced: BTreeMap<Group, u64> = BTreeMap::new();
            let started = Instant::now();
            let mut n: u64 = 0;
            loop {
                if let Some(total) = total_events
                    && issued.fetch_add(1, Ordering::SeqCst) >= total
                {
                    break;
                }
                if duration.is_some_and(|d| started.elapsed() >= d) {
                    break;
                }
                // Pace to the target rate: event n is due at n / rate seconds.
                let due = Duration::from_secs_f64(n as f64 / per_producer_rate);
                if let Some(wait) = due.checked_sub(started.elapsed()) {
                    tokio::time::sleep(wait).await;
                }
                let (idx, event) = workload.next_event(chrono::Utc::now());
                let q = event.quantity;
                producer.record(event).await.context("record()")?;
                *produced.entry(workload.groups()[idx].clone()).or_default() += q;
                counters.produced.fetch_add(1, Ordering::Relaxed);
                n += 1;
            }
            let outcome = producer.shutdown().await.context("producer shutdown")?;
            counters.running.fetch_sub(1, Ordering::SeqCst);
            anyhow::Ok((
                produced,
                n,
                producer.stats().events_acked,
                outcome.undelivered,
            ))
        }));
    }
    let mut out = ProduceOutcome::default();
    for t in tasks {
        let (produced, n, acked, undelivered) = t.await??;
        for (g, q) in produced {
            *out.produced.entry(g).or_default() += q;
        }
        out.events += n;
        out.acked += acked;
        returned.lock().expect("poisoned").extend(undelivered);
    }
    for u in returned.lock().expect("poisoned").drain(..) {
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
    for s in &sinks {
        let c = s.counts();
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
    Ok(out)
}
