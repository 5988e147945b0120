//! Latencies of a run: event → usage row (timed by the consumer wrapper), event → billed (on
//! the run's clock) and record → Kinesis acknowledgement (reported by the producers), and
//! event → row taken apart by stage (the report's "where the time goes" table): event →
//! stream (the producer), stream → invocation (the event source mapping), the invocation
//! (the consumer's reads and writes).

use super::emulator_cpu::ProcessCpu;
use super::phases::Invocations;
use crate::conservation::GroupHour;
use crate::report::{Percentiles, RunReport, StageBound};
use aws_lambda_events::kinesis::KinesisEvent;
use awsmp_contract::keys::HourBucket;
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;

/// Per-event timings gathered by the consumer wrapper.
#[derive(Debug)]
pub(super) struct Timings {
    /// Event → row write, microseconds.
    event_to_row: hdrhistogram::Histogram<u64>,
    /// Event → the stream's arrival timestamp (linger, PutRecords), microseconds.
    event_to_stream: hdrhistogram::Histogram<u64>,
    /// Arrival → the invocation that wrote it (polling, batching window), microseconds.
    stream_to_invoke: hdrhistogram::Histogram<u64>,
    /// The invocation, per event it carried (the consumer's work), microseconds.
    invocation: hdrhistogram::Histogram<u64>,
    /// Event timestamps (ms) per group-hour, for event → billed.
    events_by_hour: BTreeMap<GroupHour, Vec<i64>>,
    /// Event ids already timed: duplicates on the stream (lost responses) count once.
    seen: HashSet<String>,
    /// The consumer's invocations, step by step.
    pub(super) invocations: Invocations,
    /// The consumer's concurrent store calls (`Settings::concurrency`), for the report.
    pub(super) store_concurrency: usize,
    /// The mapping's batching window, for the report.
    pub(super) batching_window: std::time::Duration,
    /// How busy the DynamoDB emulator was while consuming (local runs).
    pub(super) emulator: Option<ProcessCpu>,
    /// How busy this process (producers, mapping, consumer, pipeline ticks) was meanwhile.
    pub(super) this_process: Option<ProcessCpu>,
}

impl Default for Timings {
    fn default() -> Self {
        Self {
            event_to_row: histogram(),
            event_to_stream: histogram(),
            stream_to_invoke: histogram(),
            invocation: histogram(),
            events_by_hour: BTreeMap::new(),
            seen: HashSet::new(),
            invocations: Invocations::default(),
            store_concurrency: 0,
            batching_window: std::time::Duration::ZERO,
            emulator: None,
            this_process: None,
        }
    }
}

pub(super) fn histogram() -> hdrhistogram::Histogram<u64> {
    hdrhistogram::Histogram::new(3).expect("3 significant figures is valid")
}

/// Microseconds from `from` to `to`, 0 when `to` is earlier (clocks of two processes).
fn micros_between(from: DateTime<Utc>, to: DateTime<Utc>) -> u64 {
    (to - from).num_microseconds().unwrap_or(0).max(0) as u64
}

/// Record event → row latencies (and their stages) and event timestamps per group-hour for
/// one delivered batch, invoked at `invoked` and finished at `finished`.
pub(super) fn observe_batch(
    event: &KinesisEvent,
    timings: &Mutex<Timings>,
    invoked: DateTime<Utc>,
    finished: DateTime<Utc>,
) {
    let mut t = timings.lock().expect("poisoned");
    let invocation = micros_between(invoked, finished);
    for r in &event.records {
        let arrival = r.kinesis.approximate_arrival_timestamp.0;
        let Ok(user_records) = awsmp_contract::wire::decode_events(&r.kinesis.data.0) else {
            continue;
        };
        for u in user_records {
            let Ok(e) = u.event else {
                continue;
            };
            if !t.seen.insert(e.event_id.clone()) {
                continue;
            }
            let _ = t.event_to_row.record(micros_between(e.timestamp, finished));
            let _ = t
                .event_to_stream
                .record(micros_between(e.timestamp, arrival));
            let _ = t.stream_to_invoke.record(micros_between(arrival, invoked));
            let _ = t.invocation.record(invocation);
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

/// What bounds each stage of event → row on the local stack, in the order an event passes
/// them: `(stage, histogram, bound)`.
fn stages(t: &Timings) -> [(&'static str, &hdrhistogram::Histogram<u64>, String); 4] {
    [
        (
            "event → stream",
            &t.event_to_stream,
            format!(
                "the producer: its linger ({} ms in a load run) and the PutRecords round trip",
                crate::produce::LOADTEST_LINGER.as_millis()
            ),
        ),
        (
            "stream → invocation",
            &t.stream_to_invoke,
            format!(
                "the event source mapping: one batch per shard at a time, so a record waits for its shard's invocation in progress (the invocation row) before its own, plus the poll of a caught-up shard (every {} ms, Lambda's base rate) and the batching window ({} ms)",
                awsmp_local_stack::kinesis_esm::SHARD_POLL_INTERVAL.as_millis(),
                t.batching_window.as_millis()
            ),
        ),
        (
            "invocation",
            &t.invocation,
            t.invocations.bound(t.store_concurrency, t.emulator, t.this_process).unwrap_or_else(|| {
                "the consumer: its steps one after another (claims, refusals, the finalized lookup, one UpdateItem per (group, second) row, the watermark), each store call a DynamoDB round trip".into()
            }),
        ),
        (
            "event → row",
            &t.event_to_row,
            "the sum of the three".into(),
        ),
    ]
}

/// The report's "where the time goes" table; the part (of the three) where the median event
/// spends longest is marked as the bottleneck.
fn stage_bounds(t: &Timings) -> Vec<StageBound> {
    let mut out: Vec<StageBound> = stages(t)
        .into_iter()
        .filter(|(_, h, _)| !h.is_empty())
        .map(|(stage, h, bound)| StageBound {
            stage: stage.into(),
            p50_ms: h.value_at_quantile(0.5) as f64 / 1000.0,
            p99_ms: h.value_at_quantile(0.99) as f64 / 1000.0,
            bound,
            bottleneck: false,
        })
        .collect();
    let parts = out.len().saturating_sub(1);
    if let Some(b) = out[..parts]
        .iter_mut()
        .max_by(|a, b| a.p50_ms.total_cmp(&b.p50_ms))
    {
        b.bottleneck = true;
    }
    out
}

/// Event → row and event → billed (`billed_at`: when each group-hour was billed) into `report`.
pub(super) fn record_latencies(
    timings: &Mutex<Timings>,
    billed_at: &BTreeMap<GroupHour, DateTime<Utc>>,
    report: &mut RunReport,
) {
    let mut event_to_billed = histogram();
    let t = timings.lock().expect("poisoned");
    for (gh, stamps) in &t.events_by_hour {
        if let Some(b) = billed_at.get(gh) {
            for s in stamps {
                let _ = event_to_billed.record(((b.timestamp_millis() - s).max(0) as u64) * 1000);
            }
        }
    }
    report.latency.insert(
        "eventToRow".into(),
        Percentiles::from_micros(&t.event_to_row),
    );
    report.latency.insert(
        "eventToBilled(virtual)".into(),
        Percentiles::from_micros(&event_to_billed),
    );
    report.stages = stage_bounds(&t);
}

/// Record-to-ack latencies the producers reported through the `metrics` facade.
pub(super) fn producer_latency() -> hdrhistogram::Histogram<u64> {
    let mut h = histogram();
    for v in crate::metrics_capture::drain_histogram(awsmp_producer::metrics::names::RECORD_TO_ACK)
    {
        let _ = h.record((v * 1_000_000.0) as u64);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lambda_events::kinesis::KinesisEventRecord;
    use chrono::TimeZone;

    fn batch(at: DateTime<Utc>, arrival: DateTime<Utc>, ids: &[&str]) -> KinesisEvent {
        let records = ids
            .iter()
            .map(|id| {
                let e = awsmp_contract::Event::new(
                    "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef",
                    "210987654321",
                    "requests",
                    1,
                    at,
                )
                .with_event_id(*id);
                let mut r = KinesisEventRecord::default();
                r.kinesis.data.0 = awsmp_contract::wire::encode_event(&e);
                r.kinesis.approximate_arrival_timestamp.0 = arrival;
                r.kinesis.sequence_number = (*id).to_owned();
                r
            })
            .collect();
        let mut event = KinesisEvent::default();
        event.records = records;
        event
    }

    #[test]
    fn event_to_row_is_taken_apart_by_stage() {
        let t0 = Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap();
        let ms = chrono::Duration::milliseconds;
        let timings = Mutex::new(Timings::default());
        // GIVEN two events stamped at t0, on the stream 100 ms later, invoked at 1 s, done at 1.5 s
        let b = batch(t0, t0 + ms(100), &["a", "b"]);
        observe_batch(&b, &timings, t0 + ms(1_000), t0 + ms(1_500));
        // WHEN the same batch is delivered again (a retry), it is not timed twice
        observe_batch(&b, &timings, t0 + ms(9_000), t0 + ms(9_500));
        let mut report = RunReport::default();
        record_latencies(&timings, &BTreeMap::new(), &mut report);
        // THEN each stage has its share, and the table ends with the whole
        let got: Vec<(String, u64, u64)> = report
            .stages
            .iter()
            .map(|s| {
                (
                    s.stage.clone(),
                    s.p50_ms.round() as u64,
                    s.p99_ms.round() as u64,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("event → stream".to_owned(), 100, 100),
                ("stream → invocation".to_owned(), 900, 900),
                ("invocation".to_owned(), 500, 500),
                ("event → row".to_owned(), 1_500, 1_500),
            ]
        );
        assert!(report.stages[1].bound.contains("Lambda's base rate"));
        let bottlenecks: Vec<&str> = report
            .stages
            .iter()
            .filter(|s| s.bottleneck)
            .map(|s| s.stage.as_str())
            .collect();
        assert_eq!(
            bottlenecks,
            ["stream → invocation"],
            "the largest p50 of the parts"
        );
        assert_eq!(report.latency["eventToRow"].count, 2);
    }

    #[test]
    fn a_stream_clock_behind_the_producer_counts_as_no_time_not_negative() {
        let t0 = Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap();
        let ms = chrono::Duration::milliseconds;
        let timings = Mutex::new(Timings::default());
        observe_batch(
            &batch(t0, t0 - ms(5), &["a"]),
            &timings,
            t0 + ms(10),
            t0 + ms(20),
        );
        let mut report = RunReport::default();
        record_latencies(&timings, &BTreeMap::new(), &mut report);
        assert_eq!(report.stages[0].p99_ms, 0.0);
        assert_eq!(report.stages[1].p50_ms.round(), 15.0);
    }
}
