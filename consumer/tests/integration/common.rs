//! Shared test helpers: the stream's ARN, licenses, the workload's start and a batch of
//! delivered records. (The seeded workload and the in-memory event source mapping of the fault
//! schedules are the simulation's: `simulation/tests/integration/consumer_common.rs`.)
#![allow(dead_code)]

use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
use chrono::{DateTime, TimeZone, Utc};

pub const STREAM_ARN: &str = "arn:aws:kinesis:us-east-1:123456789012:stream/awsmp-usage-events";

pub fn license(i: usize) -> String {
    format!("arn:aws:license-manager::123456789012:license:l-{i:032x}")
}

pub fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 12, 59, 50).unwrap()
}

pub fn event(records: &[KinesisEventRecord]) -> KinesisEvent {
    let mut e = KinesisEvent::default();
    e.records = records.to_vec();
    e
}
