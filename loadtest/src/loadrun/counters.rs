//! The run's live counts, and the sampler that turns them into the report's timeline and the
//! progress bar about once a second.

use super::progress::Progress;
use crate::cost::{RunCounts, units};
use crate::report::Sample;
use aws_lambda_events::kinesis::KinesisEvent;
use awsmp_producer::Producer;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Every count of a run, updated by the producing and the consuming side as they go.
#[derive(Debug, Default)]
pub struct RunCounters {
    /// Events accepted by `record()`.
    pub produced: AtomicU64,
    /// Producers still running.
    pub producers_running: AtomicU64,
    /// Events the consumer accepted.
    pub consumed: AtomicU64,
    /// Usage-row writes the consumer made.
    pub rows_written: AtomicU64,
    /// DynamoDB `UpdateItem` calls the consumer made (for write amplification).
    pub update_items: AtomicU64,
    /// Group-hours the aggregator folded so far (work-queue messages it handled).
    pub aggregated: AtomicU64,
    /// Records billed so far (the simulator's ledger, or a deployment's `Success` records).
    pub billed: AtomicU64,
    /// Injected consumer crashes.
    pub crashes: AtomicU64,
    /// Consumer invocations, crashed ones too (Lambda bills them).
    pub consumer_invocations: AtomicU64,
    /// Their duration as Lambda bills it: each rounded up to a millisecond.
    pub consumer_billed_ms: AtomicU64,
    /// The Kinesis records the consumer received, each counted once.
    pub delivered: Mutex<DeliveredRecords>,
}

/// The distinct Kinesis records a consumer received and what they bill (a redelivered batch
/// is counted once, by sequence number).
#[derive(Debug, Default)]
pub struct DeliveredRecords {
    seen: HashSet<String>,
    /// Distinct records.
    pub records: u64,
    /// Their bytes: data and partition key.
    pub bytes: u64,
    /// Their PUT payload units (25 KB chunks, record by record).
    pub put_payload_units: u64,
    /// Their bytes as on-demand Kinesis bills data in (each rounded up to 1 KB).
    pub billed_bytes_in: u64,
}

impl DeliveredRecords {
    /// Count the records of `event` not seen before.
    pub fn observe(&mut self, event: &KinesisEvent) {
        for r in &event.records {
            if !self.seen.insert(r.kinesis.sequence_number.clone()) {
                continue;
            }
            let bytes = (r.kinesis.data.0.len() + r.kinesis.partition_key.len()) as u64;
            self.records += 1;
            self.bytes += bytes;
            self.put_payload_units += units::put_payload_units(bytes);
            self.billed_bytes_in += units::on_demand_billed_bytes(bytes);
        }
    }
}

impl RunCounters {
    /// Count what one pipeline tick aggregated: the work-queue messages it handled.
    pub fn add_tick(&self, tick: &awsmp_local_stack::runner::TickReport) {
        Self::add(
            &self.aggregated,
            tick.drained.get("work").map_or(0, |d| d.succeeded),
        );
    }

    /// Add `n` to `counter` (relaxed: the counts are statistics, not synchronisation).
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Set `counter` to `n`.
    pub fn set(counter: &AtomicU64, n: u64) {
        counter.store(n, Ordering::Relaxed);
    }

    /// Read `counter`.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// What the cost model needs of this run: the counts, with the run's `elapsed_secs`, its
    /// stream's `shards`, the billed size of one of its usage rows and its `group_hours`.
    pub fn cost_counts(
        &self,
        elapsed_secs: f64,
        shards: u32,
        row_bytes: u64,
        group_hours: u64,
    ) -> RunCounts {
        let d = self.delivered.lock().expect("poisoned");
        RunCounts {
            events: Self::get(&self.consumed),
            kinesis_records: d.records,
            kinesis_bytes: d.bytes,
            kinesis_put_payload_units: d.put_payload_units,
            kinesis_billed_bytes_in: d.billed_bytes_in,
            shards,
            elapsed_secs,
            consumer_invocations: Self::get(&self.consumer_invocations),
            consumer_billed_ms: Self::get(&self.consumer_billed_ms),
            consumer_update_items: Self::get(&self.update_items),
            rows: Self::get(&self.rows_written),
            row_bytes,
            group_hours,
            records_billed: Self::get(&self.billed),
        }
    }

    /// One sample of the counts, `t` seconds into the run, with `acked` events acknowledged.
    fn sample(&self, t: f64, acked: u64) -> Sample {
        Sample {
            t,
            produced: Self::get(&self.produced),
            acked,
            consumed: Self::get(&self.consumed),
            rows_written: Self::get(&self.rows_written),
            aggregated: Self::get(&self.aggregated),
            billed: Self::get(&self.billed),
        }
    }
}

/// Samples the counters until stopped.
pub(super) struct Sampler {
    stop: Arc<AtomicBool>,
    timeline: Arc<Mutex<Vec<Sample>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    /// Sample `counters` (and the Kinesis acknowledgements of `producers`) every second from now.
    pub(super) fn start(
        started: Instant,
        counters: Arc<RunCounters>,
        producers: Arc<Mutex<Vec<Producer>>>,
        progress: Progress,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let timeline: Arc<Mutex<Vec<Sample>>> = Arc::default();
        let task = {
            let (stop, timeline) = (stop.clone(), timeline.clone());
            tokio::spawn(async move {
                loop {
                    let acked: u64 = producers
                        .lock()
                        .expect("poisoned")
                        .iter()
                        .map(|p| p.stats().events_acked)
                        .sum();
                    let s = counters.sample(started.elapsed().as_secs_f64(), acked);
                    progress.update(&s);
                    timeline.lock().expect("poisoned").push(s);
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(1000)).await;
                }
            })
        };
        Self {
            stop,
            timeline,
            task,
        }
    }

    /// Take a last sample and return the timeline.
    pub(super) async fn stop(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.ok();
        std::mem::take(&mut *self.timeline.lock().expect("poisoned"))
    }
}
