//! No allowance without a cause (docs/simulation.md, "Invariants"): a unit of valid usage may
//! end unbilled only through an exit the schedule itself caused, and the cause is named per
//! group-hour, never per schedule.
//!
//! | exit | its cause, recorded as the schedule ran |
//! |---|---|
//! | `NeedsReconciliation` (billed or not) | an injected fault on that group's attempt path: a `BatchMeterUsage` call carrying it lost, crashed, throttled, stopped or in an outage, or a fault on its mark, take-back or write-back (`FaultPlan::attempt_faults`) |
//! | `SubmissionExpired`, `AggregationExpired`, a fold's `TimestampOutOfWindow` | the hour is an edge input (the race class's backlog, stamped in the hour that leaves the window as the schedule starts), or its window closed while faults were on: before the fault-free drain had run two rounds |
//!
//! An hour whose window closes once the drain has had [`DRAIN_LEAD`] is billed, whatever the
//! window: the drain runs every stage every 10 virtual minutes without faults. A
//! `NeedsReconciliation` on a group no fault touched is the system racing itself (expiry and a
//! submitter run at the window's close): a violation, billed or not.

use crate::lifecycle::closing::DRAIN_LEAD;
use crate::world::{World, lock};
use awsmp_contract::keys::{GroupKey, HourBucket};
use awsmp_contract::time::is_billable;
use awsmp_loadtest::conservation::{GroupHour, Inputs};
use chrono::{DateTime, Duration, Utc};
use std::collections::BTreeSet;

/// Why an exit of a group-hour is allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// A fault hit the group's attempt path.
    AttemptFault,
    /// The hour is the race class's backlog.
    EdgeInput,
    /// The hour's window closed while faults were on.
    ClosedUnderFaults,
}

/// The window exits a cause may excuse (`pipeline_terminal` reasons' prefixes).
const WINDOW_EXITS: [&str; 3] = [
    "record:SubmissionExpired",
    "row:AggregationExpired:",
    "row:RejectedClientSide:TimestampOutOfWindow",
];
/// The reconciliation exit.
const RECONCILIATION: &str = "record:NeedsReconciliation";

/// The instant `hour` stops being billable (its window's close, or the month's grace end).
pub fn hour_close(w: &World, hour: HourBucket) -> DateTime<Utc> {
    let cfg = &w.svc.config.time;
    let start = hour.start();
    (1..=i64::from(cfg.billable_window_hours()) + 1)
        .map(|h| start + Duration::hours(h))
        .find(|t| !is_billable(hour, *t, cfg))
        .unwrap_or(start + Duration::hours(i64::from(cfg.billable_window_hours())))
}

/// Whether `hour`'s window closed while faults were on, or it is an edge input.
pub fn window_cause(w: &World, hour: HourBucket) -> Option<Cause> {
    if lock(&w.truth).edge_hours.contains(&hour) {
        return Some(Cause::EdgeInput);
    }
    let drained = (*lock(&w.lifecycle.drain_started))?;
    (hour_close(w, hour) < drained + DRAIN_LEAD).then_some(Cause::ClosedUnderFaults)
}

/// Whether a fault hit `group`'s attempt path.
pub fn attempt_cause(faulted: &BTreeSet<String>, group: &GroupKey) -> Option<Cause> {
    faulted
        .contains(&group.to_string())
        .then_some(Cause::AttemptFault)
}

fn group_key(gh: &GroupHour) -> Option<GroupKey> {
    let hour: HourBucket = gh.3.parse().ok()?;
    Some(GroupKey::new(&gh.0, &gh.1, &gh.2, hour))
}

/// Allow each pipeline exit that has a cause (per group-hour), and no other.
pub fn allow_caused_exits(w: &World, inp: &mut Inputs) {
    let faulted = w.faults.attempt_faults();
    for ((gh, reason), q) in inp.pipeline_terminal.clone() {
        let Some(group) = group_key(&gh) else {
            continue;
        };
        let cause = if reason.starts_with(RECONCILIATION) {
            attempt_cause(&faulted, &group)
        } else if WINDOW_EXITS.iter().any(|e| reason.starts_with(e)) {
            window_cause(w, group.hour)
        } else {
            None
        };
        if cause.is_some() && q > 0 {
            let key = ((gh.0, gh.1, gh.2), format!("pipeline:{reason}"));
            *inp.injected.entry(key).or_default() += q;
        }
    }
}
