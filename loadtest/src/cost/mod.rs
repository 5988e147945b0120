//! The AWS cost of a run, per million events: every billable operation the run did, priced at
//! the public on-demand prices of [`prices`] (us-east-1), next to the same workload written one
//! row per event straight into the usage table (docs/capacity.md explains the model).
//!
//! | module | what it owns |
//! |---|---|
//! | `prices` | the dollar prices, each with its source and the date it was read |
//! | `units` | how AWS rounds an operation into billed units (25 KB, 1 KB, 4 KB, 64 KB) |
//! | `model` | a run's counts → the operations of the streaming path and of one row per event |

mod model;
pub mod prices;
pub mod units;

pub use model::{
    AGGREGATED_RECORD_BYTES, CONSUMER_MEMORY_MB, PIPELINE_INVOCATION_BILLED_MS, PIPELINE_MEMORY_MB,
    RunCounts, aggregated_record_bytes, one_row_per_event, streaming,
};

use serde::Serialize;

/// Billable operations of one workload, in the units AWS bills.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Operations {
    /// Events the workload metered (the denominator of the cost per million).
    pub events: u64,
    /// Kinesis PUT payload units (25 KB chunks of each record), provisioned mode.
    pub kinesis_put_payload_units: u64,
    /// Kinesis shard-hours, provisioned mode.
    pub kinesis_shard_hours: f64,
    /// Kinesis bytes billed as ingested (each record rounded up to 1 KB), on-demand mode.
    pub kinesis_billed_bytes_in: u64,
    /// Kinesis bytes retrieved by the consumer, on-demand mode.
    pub kinesis_bytes_out: u64,
    /// Kinesis stream-hours, on-demand mode.
    pub kinesis_stream_hours: f64,
    /// Lambda invocations, every function.
    pub lambda_invocations: u64,
    /// Lambda GB-seconds, every function.
    pub lambda_gb_seconds: f64,
    /// DynamoDB write request units.
    pub dynamodb_write_units: u64,
    /// DynamoDB read request units (an eventually consistent read is half a unit).
    pub dynamodb_read_units: f64,
    /// SQS requests (64 KB chunks).
    pub sqs_requests: u64,
    /// `BatchMeterUsage` calls.
    pub batch_meter_usage_calls: u64,
}

/// The Kinesis capacity mode priced (`infra/ingest.yaml`'s `StreamMode`, `ON_DEMAND` by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum StreamMode {
    /// Per GB in and out plus a stream-hour.
    OnDemand,
    /// Shard-hours plus PUT payload units.
    Provisioned,
}

/// One priced line: a service's quantity and its dollars.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CostLine {
    /// What is billed, e.g. "DynamoDB write request units".
    pub item: String,
    /// How many.
    pub quantity: f64,
    /// US dollars.
    pub usd: f64,
}

/// A workload's operations priced.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CostEstimate {
    /// Events metered.
    pub events: u64,
    /// Line by line; lines of zero quantity are left out.
    pub lines: Vec<CostLine>,
    /// Sum of the lines.
    pub total_usd: f64,
    /// `total_usd` per million events (0 for no events).
    pub per_million_events_usd: f64,
}

/// Price `ops` with the Kinesis stream in `mode`.
pub fn price(ops: &Operations, mode: StreamMode) -> CostEstimate {
    use prices::*;
    let per_million = |n: f64, p: f64| n / 1e6 * p;
    let mut lines = kinesis_lines(ops, mode);
    lines.extend([
        line(
            "Lambda requests",
            ops.lambda_invocations as f64,
            per_million(ops.lambda_invocations as f64, LAMBDA_PER_MILLION_REQUESTS),
        ),
        line(
            "Lambda GB-seconds (Arm)",
            ops.lambda_gb_seconds,
            ops.lambda_gb_seconds * LAMBDA_ARM_PER_GB_SECOND,
        ),
        line(
            "DynamoDB write request units",
            ops.dynamodb_write_units as f64,
            per_million(
                ops.dynamodb_write_units as f64,
                DYNAMODB_PER_MILLION_WRITE_UNITS,
            ),
        ),
        line(
            "DynamoDB read request units",
            ops.dynamodb_read_units,
            per_million(ops.dynamodb_read_units, DYNAMODB_PER_MILLION_READ_UNITS),
        ),
        line(
            "SQS requests",
            ops.sqs_requests as f64,
            per_million(ops.sqs_requests as f64, SQS_PER_MILLION_REQUESTS),
        ),
        line(
            "BatchMeterUsage calls",
            ops.batch_meter_usage_calls as f64,
            ops.batch_meter_usage_calls as f64 * BATCH_METER_USAGE_PER_CALL,
        ),
    ]);
    lines.retain(|l| l.quantity > 0.0);
    let total_usd: f64 = lines.iter().map(|l| l.usd).sum();
    CostEstimate {
        events: ops.events,
        per_million_events_usd: if ops.events == 0 {
            0.0
        } else {
            total_usd * 1e6 / ops.events as f64
        },
        lines,
        total_usd,
    }
}

/// The Kinesis lines of `ops` in `mode`.
fn kinesis_lines(ops: &Operations, mode: StreamMode) -> Vec<CostLine> {
    use prices::*;
    let per_million = |n: f64, p: f64| n / 1e6 * p;
    match mode {
        StreamMode::Provisioned => vec![
            line(
                "Kinesis shard-hours",
                ops.kinesis_shard_hours,
                ops.kinesis_shard_hours * KINESIS_SHARD_HOUR,
            ),
            line(
                "Kinesis PUT payload units",
                ops.kinesis_put_payload_units as f64,
                per_million(
                    ops.kinesis_put_payload_units as f64,
                    KINESIS_PER_MILLION_PUT_PAYLOAD_UNITS,
                ),
            ),
        ],
        StreamMode::OnDemand => vec![
            line(
                "Kinesis on-demand stream-hours",
                ops.kinesis_stream_hours,
                ops.kinesis_stream_hours * KINESIS_ON_DEMAND_STREAM_HOUR,
            ),
            line(
                "Kinesis on-demand GB in",
                ops.kinesis_billed_bytes_in as f64 / units::GB,
                ops.kinesis_billed_bytes_in as f64 / units::GB * KINESIS_ON_DEMAND_PER_GB_IN,
            ),
            line(
                "Kinesis on-demand GB out",
                ops.kinesis_bytes_out as f64 / units::GB,
                ops.kinesis_bytes_out as f64 / units::GB * KINESIS_ON_DEMAND_PER_GB_OUT,
            ),
        ],
    }
}

fn line(item: &str, quantity: f64, usd: f64) -> CostLine {
    CostLine {
        item: item.to_owned(),
        quantity,
        usd,
    }
}

/// The report's cost section: the streaming path in both Kinesis modes, and one row per event.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CostComparison {
    /// What the run counted.
    pub counts: RunCounts,
    /// The streaming path, on-demand stream (the template's default).
    pub streaming_on_demand: CostEstimate,
    /// The streaming path, provisioned stream of the run's shards.
    pub streaming_provisioned: CostEstimate,
    /// The same events, one usage row each, written straight into the usage table.
    pub one_row_per_event: CostEstimate,
}

impl CostComparison {
    /// Price a run's counts.
    pub fn of(counts: RunCounts) -> Self {
        let s = streaming(&counts);
        Self {
            streaming_on_demand: price(&s, StreamMode::OnDemand),
            streaming_provisioned: price(&s, StreamMode::Provisioned),
            one_row_per_event: price(&one_row_per_event(&counts), StreamMode::OnDemand),
            counts,
        }
    }

    /// How many times cheaper the streaming path (on-demand) is than one row per event.
    pub fn saving(&self) -> f64 {
        let s = self.streaming_on_demand.per_million_events_usd;
        if s > 0.0 {
            self.one_row_per_event.per_million_events_usd / s
        } else {
            0.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn prices_each_line_by_hand() {
        let ops = Operations {
            events: 2_000_000,
            kinesis_put_payload_units: 4_000,
            kinesis_shard_hours: 2.0,
            kinesis_billed_bytes_in: 2 * 1_073_741_824,
            kinesis_bytes_out: 1_073_741_824,
            kinesis_stream_hours: 1.0,
            lambda_invocations: 1_000_000,
            lambda_gb_seconds: 1_000.0,
            dynamodb_write_units: 2_000_000,
            dynamodb_read_units: 4_000_000.0,
            sqs_requests: 500_000,
            batch_meter_usage_calls: 40,
        };
        let od = price(&ops, StreamMode::OnDemand);
        // 0.04 + 2×0.08 + 0.04 + 0.20 + 1000×0.0000133334 + 2×0.625 + 4×0.125 + 0.5×0.40 + 0
        let expected = 0.04 + 0.16 + 0.04 + 0.20 + 0.013_333_4 + 1.25 + 0.5 + 0.2;
        assert!(
            close(od.total_usd, expected),
            "{} vs {expected}",
            od.total_usd
        );
        assert!(close(od.per_million_events_usd, expected / 2.0));
        let pr = price(&ops, StreamMode::Provisioned);
        // 2×0.015 + 0.004×0.014 replaces the on-demand Kinesis lines.
        let expected_pr = expected - 0.24 + 0.03 + 0.000_056;
        assert!(close(pr.total_usd, expected_pr), "{}", pr.total_usd);
        assert!(pr.lines.iter().any(|l| l.item == "Kinesis shard-hours"));
        assert!(!pr.lines.iter().any(|l| l.item.contains("on-demand")));
    }

    #[test]
    fn no_events_costs_nothing_per_million_and_drops_empty_lines() {
        let c = price(&Operations::default(), StreamMode::OnDemand);
        assert_eq!(c.total_usd, 0.0);
        assert_eq!(c.per_million_events_usd, 0.0);
        assert!(c.lines.is_empty());
    }
}
