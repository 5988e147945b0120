//! Lambda timeouts, in seconds, of the functions the simulation runs, as deployed
//! (`infra/cfn/main_stack.py`, `infra/cfn/ingest_stack.py`, `infra/cfn/events_stack.py`):
//! Lambda stops an invocation at its timeout
//! (<https://docs.aws.amazon.com/lambda/latest/dg/configuration-timeout.html>), so a call the
//! virtual clock reaches past it fails, and so does every later one (`simulation/src/faults.rs`).

/// `kinesis-consumer`.
pub const CONSUMER: i64 = 60;
/// `aggregator` (work queue and deprovision work queue).
pub const AGGREGATOR: i64 = 20;
/// `cleanup`.
pub const CLEANUP: i64 = 20;
/// `submitter` (its run's own budget is 240 s).
pub const SUBMITTER: i64 = 300;
/// `expiry`.
pub const EXPIRY: i64 = 300;
/// `discoverer`.
pub const DISCOVERER: i64 = 300;
/// `stream-heartbeat`.
pub const HEARTBEAT: i64 = 30;
/// `meter-ingest`.
pub const METER_INGEST: i64 = 30;
/// `subscription`.
pub const SUBSCRIPTION: i64 = 10;
/// `deprovision-cleanup`.
pub const DEPROVISION_CLEANUP: i64 = 60;

/// `secs` as a duration.
pub fn of(secs: i64) -> chrono::Duration {
    chrono::Duration::seconds(secs)
}
