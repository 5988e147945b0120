//! The capacity plan (docs/capacity.md): for an event rate, the shards, consumer concurrency,
//! DynamoDB write units, queue depths and `BatchMeterUsage` share it needs, which AWS limit
//! binds first, and the cost per million events from the cost model (`loadtest/src/cost/`).
//! `awsmp-loadtest capacity` prints it; a test keeps docs/capacity.md equal to it.

use crate::cost::{CostComparison, RunCounts, units};
use awsmp_contract::keys::SECONDS_PER_HOUR;
use awsmp_contract::limits::kinesis::{SHARD_BYTES_PER_SECOND, SHARD_RECORDS_PER_SECOND};
use awsmp_contract::limits::marketplace::{
    BATCH_METER_USAGE_CALLS_PER_SECOND, MAX_USAGE_RECORDS_PER_CALL,
};
use awsmp_contract::limits::sqs::MAX_CLEANUP_KEYS_PER_MESSAGE;
use serde::Serialize;
use std::fmt::Write as _;

/// Default shard quota per account in us-east-1
/// (<https://docs.aws.amazon.com/streams/latest/dev/service-sizes-and-limits.html>).
pub const KINESIS_SHARD_QUOTA: u64 = 500;
/// Concurrent batches per shard as deployed: the ingest template allows `ParallelizationFactor`
/// 1 only (`ConsumerParallelizationFactor`, `infra/cfn/ingest_stack.py`; why in
/// docs/guarantees.md, "Known limitations"), although Lambda allows up to 10
/// (<https://docs.aws.amazon.com/lambda/latest/dg/with-kinesis.html>). More consumer
/// concurrency means more shards.
pub const DEPLOYED_PARALLELIZATION_FACTOR: u64 = 1;
/// Default concurrent executions per account and region
/// (<https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html>).
pub const LAMBDA_CONCURRENCY_QUOTA: u64 = 1_000;
/// A function has one vCPU's worth of CPU at 1,769 MB, proportionally less below
/// (<https://docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html>).
pub const LAMBDA_MB_PER_VCPU: f64 = 1_769.0;
/// Default on-demand write throughput per table, in write request units a second
/// (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html>).
pub const DYNAMODB_TABLE_WRITE_UNITS_QUOTA: u64 = 40_000;
/// Write units a second one partition serves: every row of one license shares its partition
/// key (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-partition-key-design.html>).
pub const DYNAMODB_PARTITION_WRITE_UNITS: u64 = 1_000;
/// The producer's largest KPL aggregate (`awsmp_producer::ProducerConfig::max_aggregate_bytes`).
pub const AGGREGATE_BYTES: u64 = 51_200;

/// What a plan is computed from: the measured per-core figures and the workload's shape.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Assumptions {
    /// Bytes on the stream per event (the `wire-bytes-per-event-*` bench figure).
    pub bytes_per_event: f64,
    /// Consumer decode + verify + fold, events a second on one core (the
    /// `consumer/decode_verify_fold/*` bench figure).
    pub consumer_events_per_core_second: f64,
    /// Events a second of one group (license × account × dimension): the groups are the rate
    /// divided by this.
    pub events_per_group_second: f64,
    /// Groups (accounts × dimensions) of one license: its rows share one partition.
    pub groups_per_license: u64,
    /// One usage row's billed size.
    pub row_bytes: u64,
    /// The consumer function's memory.
    pub consumer_memory_mb: u32,
}

impl Default for Assumptions {
    /// The figures measured with the default wire format, v2 (docs/wire-format.md, "v2
    /// aggregates"; docs/benchmarks.md): 26 bytes an event on the stream at 300 groups without
    /// collapse, and 6.17 M events a second a core through the consumer's decode + verify +
    /// fold at 1,000 groups (`scripts/bench` on a fresh clone, a quiet 2-core machine; with the
    /// other core loaded it measured 5.27 M, so a busy host needs up to 1.2× the cores);
    /// 10 events a second a group; 30 groups a license; a 278-byte row (a load run's); the
    /// template's 1,024 MB consumer.
    fn default() -> Self {
        Self {
            bytes_per_event: 26.0,
            consumer_events_per_core_second: 6_170_000.0,
            events_per_group_second: 10.0,
            groups_per_license: 30,
            row_bytes: 278,
            consumer_memory_mb: crate::cost::CONSUMER_MEMORY_MB,
        }
    }
}

/// One limit's need against its ceiling.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Load {
    /// Which limit.
    pub limit: &'static str,
    /// What the rate needs.
    pub need: f64,
    /// The default ceiling.
    pub ceiling: f64,
    /// What a seller does when the need passes the ceiling.
    pub remedy: &'static str,
}

impl Load {
    /// Need over ceiling.
    pub fn utilization(&self) -> f64 {
        self.need / self.ceiling
    }
}

/// The plan for one event rate.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// Events a second.
    pub events_per_second: f64,
    /// Groups active every second.
    pub groups: u64,
    /// Shards: the larger of the byte and the record write limit.
    pub shards: u64,
    /// Consumer cores busy.
    pub consumer_cores: f64,
    /// Concurrent consumer invocations: at least one a shard, enough for the cores.
    pub consumer_concurrency: u64,
    /// Usage-table write units a second (one row per group and second).
    pub write_units_per_second: u64,
    /// Work messages the discoverer enqueues for each hour (one per group-hour).
    pub work_queue_per_hour: u64,
    /// Cleanup messages for each hour.
    pub cleanup_queue_per_hour: u64,
    /// Share of the `BatchMeterUsage` ceiling the hour's records take.
    pub batch_meter_usage_share: f64,
    /// Every limit, in the order of the table.
    pub loads: Vec<Load>,
    /// AWS dollars per million events, on-demand stream.
    pub usd_per_million_events: f64,
    /// The same for one row per event.
    pub usd_per_million_events_one_row_each: f64,
}

impl Plan {
    /// The limit closest to (or furthest past) its ceiling.
    pub fn binding(&self) -> &Load {
        self.loads
            .iter()
            .max_by(|a, b| a.utilization().total_cmp(&b.utilization()))
            .expect("a plan has loads")
    }
}

/// The plan for `rate` events a second under `a`.
pub fn plan(rate: f64, a: &Assumptions) -> Plan {
    let groups = (rate / a.events_per_group_second).ceil().max(1.0) as u64;
    let bytes_per_second = rate * a.bytes_per_event;
    let records_per_second = bytes_per_second / AGGREGATE_BYTES as f64;
    let consumer_cores = rate / a.consumer_events_per_core_second;
    let vcpu = f64::from(a.consumer_memory_mb) / LAMBDA_MB_PER_VCPU;
    // Invocations the consumer's CPU needs at once; each shard runs at most
    // DEPLOYED_PARALLELIZATION_FACTOR of them, so CPU can also set the shard count.
    let consumer_invocations_needed = consumer_cores / vcpu;
    let consumer_invocations = consumer_invocations_needed.ceil().max(1.0) as u64;
    let shards = (bytes_per_second / SHARD_BYTES_PER_SECOND as f64)
        .ceil()
        .max((records_per_second / SHARD_RECORDS_PER_SECOND as f64).ceil())
        .max(consumer_invocations.div_ceil(DEPLOYED_PARALLELIZATION_FACTOR) as f64)
        .max(1.0) as u64;
    // One invocation per shard runs whenever the shard has records.
    let consumer_concurrency = consumer_invocations.max(shards);
    let rows_per_second = (groups as f64).min(rate);
    let write_units_per_second = rows_per_second as u64 * units::write_units(a.row_bytes);
    let rows_per_group_hour =
        (rows_per_second / groups as f64 * f64::from(SECONDS_PER_HOUR)) as u64;
    let cleanup_queue_per_hour =
        groups * rows_per_group_hour.div_ceil(MAX_CLEANUP_KEYS_PER_MESSAGE as u64);
    let records_per_hour_ceiling = f64::from(BATCH_METER_USAGE_CALLS_PER_SECOND)
        * MAX_USAGE_RECORDS_PER_CALL as f64
        * f64::from(SECONDS_PER_HOUR);
    let loads = loads(
        groups,
        shards,
        consumer_invocations_needed,
        write_units_per_second,
        rows_per_second,
        records_per_hour_ceiling,
        a,
    );
    let cost = CostComparison::of(hour_counts(
        rate,
        groups,
        rows_per_second,
        records_per_second,
        consumer_cores,
        shards,
        a,
    ));
    Plan {
        events_per_second: rate,
        groups,
        shards,
        consumer_cores,
        consumer_concurrency,
        write_units_per_second,
        work_queue_per_hour: groups,
        cleanup_queue_per_hour,
        batch_meter_usage_share: groups as f64 / records_per_hour_ceiling,
        loads,
        usd_per_million_events: cost.streaming_on_demand.per_million_events_usd,
        usd_per_million_events_one_row_each: cost.one_row_per_event.per_million_events_usd,
    }
}

/// Every limit's need against its ceiling.
fn loads(
    groups: u64,
    shards: u64,
    consumer_invocations_needed: f64,
    write_units_per_second: u64,
    rows_per_second: f64,
    records_per_hour_ceiling: f64,
    a: &Assumptions,
) -> Vec<Load> {
    let license_write_units =
        a.groups_per_license.min(groups) as f64 * rows_per_second / groups as f64;
    vec![
        Load {
            limit: "Kinesis shards per account",
            need: shards as f64,
            ceiling: KINESIS_SHARD_QUOTA as f64,
            remedy: "request a shard quota increase; a smaller wire format (v2) needs fewer shards",
        },
        Load {
            limit: "consumer concurrency, one batch per shard (parallelization factor 1)",
            need: consumer_invocations_needed,
            ceiling: (shards * DEPLOYED_PARALLELIZATION_FACTOR) as f64,
            remedy: "add shards, or raise the consumer's memory (more CPU per invocation)",
        },
        Load {
            limit: "Lambda concurrent executions",
            need: consumer_invocations_needed.ceil().max(shards as f64),
            ceiling: LAMBDA_CONCURRENCY_QUOTA as f64,
            remedy: "request a concurrency quota increase",
        },
        Load {
            limit: "usage-table write units per second",
            need: write_units_per_second as f64,
            ceiling: DYNAMODB_TABLE_WRITE_UNITS_QUOTA as f64,
            remedy: "raise the table's on-demand maximum throughput quota",
        },
        Load {
            limit: "write units per second of one license's partition",
            need: license_write_units,
            ceiling: DYNAMODB_PARTITION_WRITE_UNITS as f64,
            remedy: "fewer groups per license a second: DynamoDB splits hot partitions, a sort-key range at a time",
        },
        Load {
            limit: "BatchMeterUsage records per hour (10 calls/s × 25)",
            need: groups as f64,
            ceiling: records_per_hour_ceiling,
            remedy: "request a Metering Service quota increase, or meter from more accounts or regions",
        },
    ]
}

/// One hour at `rate` as the cost model's counts: aggregates of [`AGGREGATE_BYTES`], one
/// consumer invocation a second per concurrent batch, one row per group and second.
fn hour_counts(
    rate: f64,
    groups: u64,
    rows_per_second: f64,
    records_per_second: f64,
    consumer_cores: f64,
    shards: u64,
    a: &Assumptions,
) -> RunCounts {
    let secs = f64::from(SECONDS_PER_HOUR);
    let records = (records_per_second * secs).ceil() as u64;
    let vcpu = f64::from(a.consumer_memory_mb) / LAMBDA_MB_PER_VCPU;
    let rows = (rows_per_second * secs) as u64;
    RunCounts {
        events: (rate * secs) as u64,
        kinesis_records: records,
        kinesis_bytes: (rate * a.bytes_per_event * secs) as u64,
        kinesis_put_payload_units: records * units::put_payload_units(AGGREGATE_BYTES),
        kinesis_billed_bytes_in: records * units::on_demand_billed_bytes(AGGREGATE_BYTES),
        shards: shards as u32,
        elapsed_secs: secs,
        consumer_invocations: shards * SECONDS_PER_HOUR as u64,
        consumer_billed_ms: (consumer_cores / vcpu * secs * 1000.0) as u64,
        consumer_update_items: rows,
        rows,
        row_bytes: a.row_bytes,
        group_hours: groups,
        records_billed: groups,
    }
}

/// The plan's table in Markdown, for `rates`.
pub fn markdown(rates: &[f64], a: &Assumptions) -> String {
    let plans: Vec<Plan> = rates.iter().map(|&r| plan(r, a)).collect();
    let mut s = String::from(
        "| events/s | groups | shards | consumer cores | consumer concurrency | usage-table WCU/s | work messages/h | cleanup messages/h | BatchMeterUsage share | binds first (need / ceiling) | USD per M events (one row each) |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for p in &plans {
        let b = p.binding();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.2} | {} | {} | {} | {} | {:.1} % | {} ({:.0} / {:.0}) | {:.3} ({:.3}) |",
            p.events_per_second,
            p.groups,
            p.shards,
            p.consumer_cores,
            p.consumer_concurrency,
            p.write_units_per_second,
            p.work_queue_per_hour,
            p.cleanup_queue_per_hour,
            p.batch_meter_usage_share * 100.0,
            b.limit,
            b.need,
            b.ceiling,
            p.usd_per_million_events,
            p.usd_per_million_events_one_row_each,
        );
    }
    s.push_str("\nWhat to do where a limit passes its ceiling:\n\n");
    for p in &plans {
        for l in p.loads.iter().filter(|l| l.utilization() > 1.0) {
            let _ = writeln!(
                s,
                "- {} events/s: {} needs {:.0} of {:.0} — {}.",
                p.events_per_second, l.limit, l.need, l.ceiling, l.remedy
            );
        }
    }
    s
}

/// `awsmp-loadtest capacity`: the plan's inputs (defaults: [`Assumptions::default`]).
#[derive(clap::Args, Clone, Debug)]
pub struct CapacityArgs {
    /// Events a second to plan for (default: 10 k, 100 k, 1 M, 10 M).
    #[arg(long, value_delimiter = ',')]
    rates: Vec<f64>,
    /// Bytes on the stream per event.
    #[arg(long)]
    bytes_per_event: Option<f64>,
    /// Consumer events a second on one core.
    #[arg(long)]
    consumer_events_per_core_second: Option<f64>,
    /// Events a second of one group.
    #[arg(long)]
    events_per_group_second: Option<f64>,
    /// Groups of one license.
    #[arg(long)]
    groups_per_license: Option<u64>,
}

impl CapacityArgs {
    /// The plan's table for these arguments.
    pub fn markdown(&self) -> String {
        let d = Assumptions::default();
        let a = Assumptions {
            bytes_per_event: self.bytes_per_event.unwrap_or(d.bytes_per_event),
            consumer_events_per_core_second: self
                .consumer_events_per_core_second
                .unwrap_or(d.consumer_events_per_core_second),
            events_per_group_second: self
                .events_per_group_second
                .unwrap_or(d.events_per_group_second),
            groups_per_license: self.groups_per_license.unwrap_or(d.groups_per_license),
            ..d
        };
        let rates = if self.rates.is_empty() {
            PLAN_RATES.to_vec()
        } else {
            self.rates.clone()
        };
        markdown(&rates, &a)
    }
}

/// The rates of docs/capacity.md.
pub const PLAN_RATES: [f64; 4] = [10_000.0, 100_000.0, 1_000_000.0, 10_000_000.0];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_row_size_is_a_run_row() {
        let group = awsmp_contract::keys::GroupKey::new(
            crate::loadrun::run_license(0x1234_5678, 7).0,
            crate::loadrun::run_license(0x1234_5678, 7).1,
            "dim0",
            "2026-11-30T11".parse().unwrap(),
        );
        let row = awsmp_contract::row::conforming_row(&group, 59, 12, None);
        assert_eq!(units::item_bytes(&row), Assumptions::default().row_bytes);
    }

    /// The figures of the v1 wire format and the consumer before its hot path: 348 bytes an
    /// event, 280 k events a second a core. The hand computations below use them.
    fn v1_json() -> Assumptions {
        Assumptions {
            bytes_per_event: 348.0,
            consumer_events_per_core_second: 280_000.0,
            ..Assumptions::default()
        }
    }

    #[test]
    fn ten_thousand_events_a_second_by_hand() {
        let p = plan(10_000.0, &v1_json());
        // 3.48 MB/s over 1 MiB/s shards → 4 shards; 68 aggregates/s is far below 1,000/s.
        assert_eq!(p.shards, 4);
        assert_eq!(p.groups, 1_000);
        // 10,000 / 280,000 cores at 1,024/1,769 vCPU → 0.062 invocations, at least one a shard.
        assert_eq!(p.consumer_concurrency, 4);
        assert_eq!(p.write_units_per_second, 1_000);
        // Every group every second: 3,600 rows an hour → 36 cleanup messages a group-hour.
        assert_eq!(p.cleanup_queue_per_hour, 36_000);
        assert_eq!(p.work_queue_per_hour, 1_000);
        assert!((p.batch_meter_usage_share - 1_000.0 / 900_000.0).abs() < 1e-12);
        assert!(p.binding().utilization() < 1.0, "{:?}", p.binding());
        assert!(p.usd_per_million_events < p.usd_per_million_events_one_row_each);
    }

    #[test]
    fn the_binding_limit_moves_with_the_rate() {
        let a = v1_json();
        // 1 M events/s: 100 k groups write 100 k units/s against the table's 40 k.
        let p = plan(1_000_000.0, &a);
        assert_eq!(p.binding().limit, "usage-table write units per second");
        // 10 M events/s: a million group-hours an hour pass BatchMeterUsage's 900 k, but the
        // table's 1 M units/s (25×) pass it first.
        let p = plan(10_000_000.0, &a);
        let bmu = p
            .loads
            .iter()
            .find(|l| l.limit.starts_with("BatchMeterUsage"))
            .unwrap();
        assert!(bmu.utilization() > 1.0);
        assert!(p.binding().utilization() >= bmu.utilization());
        // Fewer, busier groups move the bind to the shards: 1,000 events/s a group.
        let busy = Assumptions {
            events_per_group_second: 1_000.0,
            ..a
        };
        assert_eq!(
            plan(10_000_000.0, &busy).binding().limit,
            "Kinesis shards per account"
        );
    }

    #[test]
    fn the_v2_wire_format_keeps_ten_million_events_within_the_shard_quota() {
        // 26 bytes an event: 260 MB/s over 1 MiB/s shards → 248 shards of the 500 default,
        // where v1's 348 bytes needed 3,319; the consumer needs 10 M / 6.17 M ≈ 1.6 cores.
        let p = plan(10_000_000.0, &Assumptions::default());
        assert_eq!(p.shards, 248);
        let shards = p
            .loads
            .iter()
            .find(|l| l.limit == "Kinesis shards per account")
            .unwrap();
        assert!(shards.utilization() < 1.0, "{shards:?}");
        assert!(plan(10_000_000.0, &v1_json()).shards > 3_000);
        assert!((p.consumer_cores - 10_000_000.0 / 6_170_000.0).abs() < 0.01);
    }

    #[test]
    fn docs_capacity_md_holds_the_generated_plan() {
        let doc =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/capacity.md"))
                .expect("docs/capacity.md");
        let table = markdown(&PLAN_RATES, &Assumptions::default());
        assert!(
            doc.contains(&table),
            "docs/capacity.md is out of date; regenerate with `awsmp-loadtest capacity`:\n{table}"
        );
    }
}
