//! From what a run counted to the billable operations of the streaming path, and of the same
//! events written one row each straight into the usage table.
//!
//! Counted by the run: the Kinesis records the consumer received (each once, by sequence
//! number, with its size), the consumer's invocations and their duration, its `UpdateItem`s,
//! the usage rows, the group-hours and the records billed. Derived per group-hour from those
//! counts (the pipeline tier's calls, as `docs/architecture.md` describes them): the
//! discoverer's index query, the aggregator's work message and group query, the aggregated
//! record's put and its submission stamp, the cleanup messages and deletes, and the
//! `BatchMeterUsage` calls of 25 records. A write that adds an item to a table's
//! `metering_pending` index or removes it from there is billed to the index too.

use super::Operations;
use super::units::{gb_seconds, read_units, write_units};
use awsmp_contract::keys::SECONDS_PER_HOUR;
use awsmp_contract::limits::marketplace::MAX_USAGE_RECORDS_PER_CALL;
use awsmp_contract::limits::sqs::MAX_CLEANUP_KEYS_PER_MESSAGE;
use awsmp_pipeline::domain::fold::{SECOND_QUANTITY_BYTES, SECOND_SET_BYTES};
use serde::Serialize;

/// The consumer function's memory (`infra/ingest.yaml`, `KinesisConsumerFunction`).
pub const CONSUMER_MEMORY_MB: u32 = 1024;
/// The pipeline functions' memory (`infra/main.yaml`: discoverer, aggregator, submitter).
pub const PIPELINE_MEMORY_MB: u32 = 512;
/// Billed duration assumed per pipeline invocation: the local run executes the pipeline in
/// process, so its Lambda time is not measured; this is a generous round figure.
pub const PIPELINE_INVOCATION_BILLED_MS: u64 = 200;
/// Scheduled pipeline invocations an hour (`infra/main.yaml`: six schedules at
/// `rate(15 minutes)` and one at `rate(5 minutes)`).
pub const SCHEDULED_INVOCATIONS_PER_HOUR: f64 = 6.0 * 4.0 + 12.0;
/// An aggregated record's keys, status and reasons (a few hundred bytes), before the
/// contributing seconds' bitmap and quantities (docs/row-contract.md).
pub const AGGREGATED_RECORD_BYTES: u64 = 400;

/// An aggregated record of `seconds` contributing seconds: its keys and status, the seconds'
/// bitmap and a quantity per second (`awsmp_pipeline::domain::fold::SecondQuantities`).
pub fn aggregated_record_bytes(seconds: u64) -> u64 {
    AGGREGATED_RECORD_BYTES
        + SECOND_SET_BYTES as u64
        + SECOND_QUANTITY_BYTES as u64 * seconds.min(u64::from(SECONDS_PER_HOUR))
}
/// Write units a usage row costs in the usage table's `metering_pending` index each time it
/// enters or leaves it: an index entry holds the table's and the index's keys and the two
/// projected attributes (`infra/resources.json`: `INCLUDE customerAWSAccountId, dimension`),
/// far under 1 KB. A write that adds an item to a global secondary index, or removes it, is
/// billed to the index as well; an update that leaves the indexed and projected attributes as
/// they were is not
/// (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/GSI.html#GSI.ThroughputConsiderations.Writes>).
pub const USAGE_INDEX_ENTRY_WRITE_UNITS: u64 = 1;

/// SQS-triggered Lambdas take messages in batches of 10 (`infra/main.yaml`, `BatchSize: 10`).
const SQS_BATCH_SIZE: u64 = 10;
/// Requests one SQS message costs: send, receive, delete.
const SQS_REQUESTS_PER_MESSAGE: u64 = 3;

/// What one run counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunCounts {
    /// Events metered (accepted by the consumer).
    pub events: u64,
    /// Distinct Kinesis records the consumer received.
    pub kinesis_records: u64,
    /// Their bytes (data and partition key).
    pub kinesis_bytes: u64,
    /// Their PUT payload units, record by record.
    pub kinesis_put_payload_units: u64,
    /// Their bytes as on-demand Kinesis bills data in (each rounded up to 1 KB).
    pub kinesis_billed_bytes_in: u64,
    /// Shards of the run's stream.
    pub shards: u32,
    /// Wall-clock seconds of the run.
    pub elapsed_secs: f64,
    /// Consumer invocations.
    pub consumer_invocations: u64,
    /// Their billed duration, each rounded up to a millisecond.
    pub consumer_billed_ms: u64,
    /// Consumer `UpdateItem` calls.
    pub consumer_update_items: u64,
    /// Usage rows written (one per group and second a batch touched).
    pub rows: u64,
    /// Size of one usage row as DynamoDB bills it.
    pub row_bytes: u64,
    /// Group-hours aggregated.
    pub group_hours: u64,
    /// Usage records billed.
    pub records_billed: u64,
}

/// The streaming path's operations for `c`.
pub fn streaming(c: &RunCounts) -> Operations {
    let hours = c.elapsed_secs / 3600.0;
    let consumer = Operations {
        events: c.events,
        kinesis_put_payload_units: c.kinesis_put_payload_units,
        kinesis_shard_hours: f64::from(c.shards) * hours,
        kinesis_billed_bytes_in: c.kinesis_billed_bytes_in,
        kinesis_bytes_out: c.kinesis_bytes,
        kinesis_stream_hours: hours,
        lambda_invocations: c.consumer_invocations,
        lambda_gb_seconds: gb_seconds(c.consumer_billed_ms, CONSUMER_MEMORY_MB),
        // Every update, and each new row's entry in the usage table's index (a row's later
        // updates leave its indexed attributes as they were).
        dynamodb_write_units: c.consumer_update_items * write_units(c.row_bytes)
            + c.rows * USAGE_INDEX_ENTRY_WRITE_UNITS,
        ..Operations::default()
    };
    add(consumer, pipeline(c, c.rows))
}

/// The same events, one usage row each, put straight into the usage table by the seller's
/// application (no stream, no consumer); the pipeline then reads and cleans up a row per event.
pub fn one_row_per_event(c: &RunCounts) -> Operations {
    let direct = Operations {
        events: c.events,
        dynamodb_write_units: c.events * (write_units(c.row_bytes) + USAGE_INDEX_ENTRY_WRITE_UNITS),
        ..Operations::default()
    };
    add(direct, pipeline(c, c.events))
}

/// The pipeline tier's operations for `rows` usage rows over the run's group-hours.
fn pipeline(c: &RunCounts, rows: u64) -> Operations {
    let gh = c.group_hours;
    if gh == 0 {
        return Operations::default();
    }
    let rows_per_group_hour = rows.div_ceil(gh);
    let group_bytes = rows_per_group_hour * c.row_bytes;
    let cleanup_messages = gh * rows_per_group_hour.div_ceil(MAX_CLEANUP_KEYS_PER_MESSAGE as u64);
    let invocations = gh.div_ceil(SQS_BATCH_SIZE)
        + cleanup_messages.div_ceil(SQS_BATCH_SIZE)
        + (SCHEDULED_INVOCATIONS_PER_HOUR * c.elapsed_secs / 3600.0).ceil() as u64;
    Operations {
        lambda_invocations: invocations,
        lambda_gb_seconds: gb_seconds(
            invocations * PIPELINE_INVOCATION_BILLED_MS,
            PIPELINE_MEMORY_MB,
        ),
        // The aggregated record's conditional put, then its submission stamp (which removes
        // `meteringPending`), each billed to the table and to its `metering_pending` index
        // (projecting every attribute, so an entry is the record's size); every row's
        // deletion by cleanup, from the table and from the usage table's index.
        dynamodb_write_units: 4 * gh * write_units(aggregated_record_bytes(rows_per_group_hour))
            + rows * (write_units(c.row_bytes) + USAGE_INDEX_ENTRY_WRITE_UNITS),
        // The discoverer's index query (eventually consistent), the aggregator's group query
        // (strongly consistent).
        dynamodb_read_units: gh as f64
            * (read_units(group_bytes, false) + read_units(group_bytes, true)),
        sqs_requests: SQS_REQUESTS_PER_MESSAGE * (gh + cleanup_messages),
        batch_meter_usage_calls: c.records_billed.div_ceil(MAX_USAGE_RECORDS_PER_CALL as u64),
        ..Operations::default()
    }
}

fn add(a: Operations, b: Operations) -> Operations {
    Operations {
        events: a.events.max(b.events),
        kinesis_put_payload_units: a.kinesis_put_payload_units + b.kinesis_put_payload_units,
        kinesis_shard_hours: a.kinesis_shard_hours + b.kinesis_shard_hours,
        kinesis_billed_bytes_in: a.kinesis_billed_bytes_in + b.kinesis_billed_bytes_in,
        kinesis_bytes_out: a.kinesis_bytes_out + b.kinesis_bytes_out,
        kinesis_stream_hours: a.kinesis_stream_hours + b.kinesis_stream_hours,
        lambda_invocations: a.lambda_invocations + b.lambda_invocations,
        lambda_gb_seconds: a.lambda_gb_seconds + b.lambda_gb_seconds,
        dynamodb_write_units: a.dynamodb_write_units + b.dynamodb_write_units,
        dynamodb_read_units: a.dynamodb_read_units + b.dynamodb_read_units,
        sqs_requests: a.sqs_requests + b.sqs_requests,
        batch_meter_usage_calls: a.batch_meter_usage_calls + b.batch_meter_usage_calls,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::{CostComparison, StreamMode, price};

    /// One hour at 1,000 events/s over 100 groups: 3.6 M events, every group busy every
    /// second, so 360,000 rows; 100 group-hours.
    fn hour() -> RunCounts {
        RunCounts {
            events: 3_600_000,
            kinesis_records: 36_000,
            kinesis_bytes: 36_000 * 10_000,
            kinesis_put_payload_units: 36_000,
            kinesis_billed_bytes_in: 36_000 * 10_240,
            shards: 2,
            elapsed_secs: 3600.0,
            consumer_invocations: 7_200,
            consumer_billed_ms: 7_200 * 50,
            consumer_update_items: 360_000,
            rows: 360_000,
            row_bytes: 300,
            group_hours: 100,
            records_billed: 100,
        }
    }

    #[test]
    fn pipeline_operations_by_hand() {
        let p = pipeline(&hour(), 360_000);
        // 3,600 rows a group-hour → 36 cleanup messages each; 100 + 3,600 messages.
        assert_eq!(p.sqs_requests, 3 * (100 + 3_600));
        // 10 + 360 SQS batches + 36 scheduled.
        assert_eq!(p.lambda_invocations, 10 + 360 + 36);
        assert_eq!(p.lambda_gb_seconds, 406.0 * 0.2 * 0.5);
        // Aggregated record 400 + 450 + 14,400 B → 15 units, twice per group-hour; a row 1 unit
        // to delete.
        assert_eq!(write_units(aggregated_record_bytes(3_600)), 15);
        assert_eq!(
            aggregated_record_bytes(36_000),
            aggregated_record_bytes(3_600)
        );
        assert_eq!(write_units(aggregated_record_bytes(10)), 1);
        // Each twice more for the indexes: the aggregated record's put and stamp, a row's
        // index entry on deletion.
        assert_eq!(p.dynamodb_write_units, 4 * 100 * 15 + 2 * 360_000);
        // 3,600 × 300 B = 1,080,000 B = 264 × 4 KB (rounded up): 132 + 264 per group-hour.
        assert_eq!(p.dynamodb_read_units, 100.0 * (132.0 + 264.0));
        assert_eq!(p.batch_meter_usage_calls, 4);
    }

    #[test]
    fn streaming_against_one_row_per_event_by_hand() {
        let c = hour();
        let s = streaming(&c);
        assert_eq!(s.kinesis_shard_hours, 2.0);
        assert_eq!(s.kinesis_stream_hours, 1.0);
        assert_eq!(s.lambda_invocations, 7_200 + 406);
        assert_eq!(s.lambda_gb_seconds, 360.0 + 40.6);
        // Each row: its update and index entry, its deletion from the table and the index.
        assert_eq!(s.dynamodb_write_units, 4 * 360_000 + 6_000);
        let r = one_row_per_event(&c);
        assert_eq!(r.kinesis_put_payload_units, 0);
        // 36,000 rows a group-hour → 360 cleanup messages each.
        assert_eq!(r.lambda_invocations, 10 + 3_600 + 36);
        // 3.6 M puts + 3.6 M deletes, each with its index entry, + the aggregated records.
        assert_eq!(r.dynamodb_write_units, 4 * 3_600_000 + 6_000);
        let cmp = CostComparison::of(c);
        let od = price(&s, StreamMode::OnDemand);
        assert_eq!(cmp.streaming_on_demand, od);
        // Writes dominate both: 14.4 M units of one row per event against 1.44 M.
        assert!(cmp.saving() > 5.0, "saving {}", cmp.saving());
        assert!(
            cmp.one_row_per_event.per_million_events_usd
                > cmp.streaming_provisioned.per_million_events_usd
        );
    }

    #[test]
    fn a_run_without_group_hours_has_no_pipeline_cost() {
        let c = RunCounts {
            group_hours: 0,
            ..hour()
        };
        assert_eq!(pipeline(&c, 1_000), Operations::default());
    }
}
