//! Latencies of a run: event → usage row (timed by the consumer wrapper), event → billed (on
//! the run's clock) and record → Kinesis acknowledgement (reported by the producers).

use crate::conservation::GroupHour;
use crate::report::{Percentiles, RunReport};
use aws_lambda_events::kinesis::KinesisEvent;
use awsmp_pipeline::domain::keys::HourBucket;
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;

/// Per-event timings gathered by the consumer wrapper.
#[derive(Debug)]
pub(super) struct Timings {
    /// Event → row write, microseconds.
    event_to_row: hdrhistogram::Histogram<u64>,
    /// Event timestamps (ms) per group-hour, for event → billed.
    events_by_hour: BTreeMap<GroupHour, Vec<i64>>,
    /// Event ids already timed: duplicates on the stream (lost responses) count once.
    seen: HashSet<String>,
}

impl Default for Timings {
    fn default() -> Self {
        Self {
            event_to_row: histogram(),
            events_by_hour: BTreeMap::new(),
            seen: HashSet::new(),
        }
    }
}

pub(super) fn histogram() -> hdrhistogram::Histogram<u64> {
    hdrhistogram::Histogram::new(3).expect("3 significant figures is valid")
}

/// Record event → row latencies and event timestamps per group-hour for one delivered batch.
pub(super) fn observe_batch(
    event: &KinesisEvent,
    timings: &Mutex<Timings>,
    finished: DateTime<Utc>,
) {
    let mut t = timings.lock().expect("poisoned");
    for r in &event.records {
        let arrival = r.kinesis.approximate_arrival_timestamp.0;
        let Ok(user_records) = awsmp_producer::wire::decode_events(&r.kinesis.data.0) else {
            continue;
        };
        for u in user_records {
            let Ok(e) = u.event else {
                continue;
            };
            if !t.seen.insert(e.event_id.clone()) {
                continue;
            }
            let micros = (finished - e.timestamp)
                .num_microseconds()
                .unwrap_or(0)
                .max(0) as u64;
            let _ = t.event_to_row.record(micros);
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
