//! Shared test helpers: what meter-ingest put on the usage stream, delivered to the unchanged
//! kinesis-consumer.

use aws_lambda_events::event::kinesis::KinesisEvent;
use awsmp_consumer::handler::kinesis_record;
use awsmp_producer::sink::StoredRecord;
use chrono::{DateTime, Utc};

pub const STREAM_ARN: &str = "arn:aws:kinesis:us-east-1:123456789012:stream/awsmp-usage-events";

/// What a producer sink accepted, delivered to the consumer as one batch: sequence numbers
/// from 1000, every record arriving at `arrival`.
pub fn delivered(records: &[StoredRecord], arrival: DateTime<Utc>) -> KinesisEvent {
    let mut e = KinesisEvent::default();
    e.records = records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            kinesis_record(
                STREAM_ARN,
                &r.shard_id,
                &(1000 + i).to_string(),
                &r.entry.partition_key,
                arrival,
                r.entry.data.to_vec(),
            )
        })
        .collect();
    e
}
