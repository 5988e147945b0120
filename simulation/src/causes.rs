//! No allowance without a cause (docs/simulation.md, "Invariants"): a unit of valid usage may
//! end unbilled only through an exit the schedule itself caused, and the cause is named per
//! group-hour, never per schedule.
//!
//! | exit | its cause, recorded as the schedule ran |
//! |---|---|
//! | `NeedsReconciliation` (billed or not) | an injected fault on that group's attempt path: a `BatchMeterUsage` call carrying it lost, crashed, throttled, stopped or in an outage, or a fault on its mark, take-back or write-back (`FaultPlan::attempt_faults`) |
//! | `SubmissionExpired`, `AggregationExpired`, a fold's `TimestampOutOfWindow` | the hour is an edge input (the race class's backlog, stamped in the hour that leaves the window as the schedule starts); or its window closed before the fault-free drain had run two rounds *and* a recorded failure on that group's billing path fell between the hour's end and its close ([`StageFailure`]: a failed invocation of a stage the hour waits on, or a fault on the group's attempt); for `SubmissionExpired`, never when a clean submitter run read the record pending before the close, unless a fault hit the record's own attempt |
//!
//! An hour whose window closes once the drain has had [`DRAIN_LEAD`] is billed, whatever the
//! window: the drain runs every stage every 10 virtual minutes without faults. A
//! `NeedsReconciliation` on a group no fault touched is the system racing itself (expiry and a
//! submitter run at the window's close): a violation, billed or not. So is an hour that left its
//! window while faults were on but nothing on its path failed: the scheduler not picking a
//! stage, a fault retried away, or a failure in a stage the hour does not wait on (the license
//! lifecycle, expiry, age-out) excuses nothing.
//!
//! What a failure may hold back ([`Held`]): a consumer lane's or a heartbeat's, the hours its
//! shard's watermark has not fenced; a meter run's, the hour it targets; an aggregator
//! message's or a cleanup message's, its groups; a submitter run's, the records pending as it
//! started.

use crate::esm::STREAM_NAME;
use crate::lifecycle::closing::DRAIN_LEAD;
use crate::stages::Step;
use crate::world::{World, lock};
use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use awsmp_aws::watermark::WatermarkStore;
use awsmp_contract::clock::Clock;
use awsmp_contract::keys::{
    GroupKey, HourBucket, RowKey, parse_usage_timestamp, split_usage_sort_key,
};
use awsmp_contract::time::{is_billable, submitter_pending_buckets};
use awsmp_loadtest::conservation::{GroupHour, Inputs};
use awsmp_pipeline::handlers::cleanup::CleanupMessage;
use chrono::{DateTime, Duration, Utc};
use futures::FutureExt;
use std::collections::BTreeSet;

/// Why an exit of a group-hour is allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// A fault hit the group's attempt path.
    AttemptFault,
    /// The hour is the race class's backlog.
    EdgeInput,
    /// An invocation of this stage on the group's billing path failed while the hour's window
    /// was open, and the window closed while faults were on.
    StageFailed(Step),
}

/// A failed invocation of a stage an hour's billing waits on, as the schedule ran it: it
/// crashed, timed out, returned an error or reported failed items (a poison batch's function
/// error included). A fault the invocation retried away is not one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageFailure {
    /// The virtual clock when the invocation ended.
    pub at: DateTime<Utc>,
    /// The stage.
    pub stage: Step,
    /// What it may have held back.
    pub held: Held,
}

/// What a failed invocation may have held back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    /// Every group: a consumer lane or a heartbeat holds the fence for every hour; the
    /// deprovisioning flush covers every deprovisioning license.
    Every,
    /// These groups: an aggregator message's group, a cleanup message's rows' groups, the
    /// records pending when a submitter run started.
    Groups(BTreeSet<GroupKey>),
    /// Every group of this hour: the hour a discoverer meter run targeted.
    Hour(HourBucket),
    /// Every hour the failing lane's shard had not yet fenced: those ending after this instant
    /// (its watermark less the settle margin; the fence passes an hour only once every
    /// shard's watermark is past its end plus the margin).
    Unfenced(DateTime<Utc>),
}

impl StageFailure {
    /// Whether it may have held `group` back.
    fn touches(&self, group: &GroupKey) -> bool {
        match &self.held {
            Held::Every => true,
            Held::Groups(g) => g.contains(group),
            Held::Hour(h) => *h == group.hour,
            Held::Unfenced(through) => group.hour.end() > *through,
        }
    }
}

/// The stages an hour's billing waits on: the consumer (its lanes' watermarks are the fence),
/// the heartbeat (an idle shard's watermark), the discoverer's meter and flush runs, the
/// aggregator, cleanup (the rows' final status) and the submitter.
pub const BILLING_PATH: [Step; 6] = [
    Step::ConsumerBatch,
    Step::Heartbeat,
    Step::Discover,
    Step::Aggregate,
    Step::Cleanup,
    Step::Submit,
];

/// The window exits a cause may excuse (`pipeline_terminal` reasons' prefixes).
const WINDOW_EXITS: [&str; 3] = [
    "record:SubmissionExpired",
    "row:AggregationExpired:",
    "row:RejectedClientSide:TimestampOutOfWindow",
];
/// The expiry of a record the submitter never sent.
const SUBMISSION_EXPIRED: &str = "record:SubmissionExpired";
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

/// Record a failed invocation of `stage` at the clock's reading (only stages on the billing
/// path are kept).
pub fn note_failure(w: &World, stage: Step, held: Held) {
    if BILLING_PATH.contains(&stage) {
        lock(&w.truth).stage_failures.push(StageFailure {
            at: w.clock.now(),
            stage,
            held,
        });
    }
}

/// Record the failed messages of an aggregator or cleanup invocation (`step`; all of them
/// when it crashed): an aggregator message holds back its group, a cleanup message its rows'
/// groups, and a message that cannot be read any group.
pub fn note_sqs_failures(
    w: &World,
    step: Step,
    event: &SqsEvent,
    crashed: bool,
    response: &SqsBatchResponse,
) {
    let failed: Vec<&str> = event
        .records
        .iter()
        .filter(|m| {
            crashed
                || response
                    .batch_item_failures
                    .iter()
                    .any(|f| Some(&f.item_identifier) == m.message_id.as_ref())
        })
        .filter_map(|m| m.body.as_deref())
        .collect();
    if failed.is_empty() {
        return;
    }
    let groups = if step == Step::Cleanup {
        failed
            .iter()
            .map(|b| serde_json::from_str::<CleanupMessage>(b).ok())
            .collect::<Option<Vec<_>>>()
            .and_then(|ms| ms.iter().flat_map(|m| &m.keys).map(row_group).collect())
    } else {
        failed
            .iter()
            .map(|b| GroupKey::from_work_message(b).ok())
            .collect::<Option<BTreeSet<_>>>()
    };
    note_failure(w, step, groups.map_or(Held::Every, Held::Groups));
}

/// What a failure of a consumer lane (or a heartbeat) on `shard` may hold back: the hours its
/// watermark has not fenced yet; every hour when it has none; nothing when the shard is
/// drained (closed and read to its end: the fence no longer waits for it).
pub fn unfenced_by(w: &World, shard: &str) -> Option<Held> {
    let settle = Duration::seconds(i64::try_from(w.svc.config.watermark_settle_secs).ok()?);
    let shards = w
        .watermarks
        .shards(STREAM_NAME)
        .now_or_never()
        .and_then(Result::ok)
        .unwrap_or_default();
    match shards.into_iter().find(|s| s.shard_id == shard) {
        Some(s) if s.drained => None,
        Some(s) => Some(Held::Unfenced(s.applied_through - settle)),
        None => Some(Held::Every),
    }
}

/// Record a failure of a consumer lane (or a heartbeat) on `shard`: what it holds back is
/// read from the shard's watermark now ([`unfenced_by`]).
pub fn note_lane_failure(w: &World, stage: Step, shard: &str) {
    if let Some(held) = unfenced_by(w, shard) {
        note_failure(w, stage, held);
    }
}

/// The group of a raw row's key (`None`: a key that does not parse).
pub fn row_group(key: &RowKey) -> Option<GroupKey> {
    let seg = split_usage_sort_key(&key.sort_key)?;
    let at = parse_usage_timestamp(seg.timestamp).ok()?;
    Some(GroupKey::new(
        &key.license_arn,
        seg.account,
        seg.dimension,
        HourBucket::containing(at),
    ))
}

/// Every record pending now, in any hour: what a submitter run starting now may hold back if
/// it fails.
pub fn pending_groups(w: &World) -> BTreeSet<GroupKey> {
    w.aggregated
        .items()
        .into_iter()
        .filter(|i| i.pending)
        .map(|i| i.group)
        .collect()
}

/// Why `group`'s hour may have left its window unbilled, if anything recorded says so: it is
/// an edge input; or it closed before the drain had [`DRAIN_LEAD`] and a failure on the
/// group's path ([`StageFailure`], or a fault on its attempt) fell between the hour's end
/// (when its processing begins) and its close.
pub fn window_cause(w: &World, group: &GroupKey) -> Option<Cause> {
    if lock(&w.truth).edge_hours.contains(&group.hour) {
        return Some(Cause::EdgeInput);
    }
    let drained = (*lock(&w.lifecycle.drain_started))?;
    let close = hour_close(w, group.hour);
    if close >= drained + DRAIN_LEAD {
        return None;
    }
    if attempt_cause(&w.faults.attempt_faults(), group).is_some() {
        return Some(Cause::AttemptFault);
    }
    let open = group.hour.end()..close;
    lock(&w.truth)
        .stage_failures
        .iter()
        .find(|f| open.contains(&f.at) && f.touches(group))
        .map(|f| Cause::StageFailed(f.stage))
}

/// Count how far the rule reaches in this schedule (a `limit-*` of its explored summary, so a
/// sweep counts the schedules): group-hours with usage whose window closed while faults were
/// on (`limit-window-closed-under-faults`); of those, the ones a clean submitter run read
/// pending before the close, whose expiry no failure elsewhere excuses
/// (`limit-window-closed-read-clean`), and the ones with no recorded cause at all, which must
/// be billed whatever their exit (`limit-window-closed-uncaused`).
pub fn note_reach(w: &World, groups: impl IntoIterator<Item = GroupKey>) {
    let Some(drained) = *lock(&w.lifecycle.drain_started) else {
        return;
    };
    let groups: BTreeSet<GroupKey> = groups.into_iter().collect();
    for group in groups {
        if hour_close(w, group.hour) >= drained + DRAIN_LEAD {
            continue;
        }
        w.faults.count("limit-window-closed-under-faults");
        if lock(&w.truth).read_by_clean_submit.contains(&group) {
            w.faults.count("limit-window-closed-read-clean");
        }
        if window_cause(w, &group).is_none() {
            w.faults.count("limit-window-closed-uncaused");
        }
    }
}

/// The groups a submitter run starting now reads, of those `pending`: the ones in the
/// completed hours of the window it covers.
pub fn submit_candidates(w: &World, pending: &BTreeSet<GroupKey>) -> Vec<GroupKey> {
    let buckets = submitter_pending_buckets(w.clock.now(), &w.svc.config.time, false);
    pending
        .iter()
        .filter(|g| buckets.contains(&g.hour))
        .cloned()
        .collect()
}

/// After a submitter run that read `candidates` as it started: when it ended clean (no crash,
/// no error, no halt, its cap not reached), each candidate whose window was still open when it
/// ended was read and sent by a run that attempted every record it read; it can no longer end
/// `SubmissionExpired` for a cause other than a fault on its own attempt (which a record the
/// run left pending has).
pub fn note_clean_submit(w: &World, candidates: Vec<GroupKey>, clean: bool) {
    if !clean {
        return;
    }
    let now = w.clock.now();
    let read: Vec<GroupKey> = candidates
        .into_iter()
        .filter(|g| now < hour_close(w, g.hour))
        .collect();
    lock(&w.truth).read_by_clean_submit.extend(read);
}

/// Why `group`'s record may have ended `SubmissionExpired`: a fault on its own attempt; else,
/// unless a clean submitter run read it pending before its window closed, the window's cause
/// ([`window_cause`]).
pub fn expiry_cause(w: &World, group: &GroupKey) -> Option<Cause> {
    if let Some(c) = attempt_cause(&w.faults.attempt_faults(), group) {
        return Some(c);
    }
    if lock(&w.truth).read_by_clean_submit.contains(group) {
        return None;
    }
    window_cause(w, group)
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
        } else if reason.starts_with(SUBMISSION_EXPIRED) {
            expiry_cause(w, &group)
        } else if WINDOW_EXITS.iter().any(|e| reason.starts_with(e)) {
            window_cause(w, &group)
        } else {
            None
        };
        if cause.is_some() && q > 0 {
            let key = ((gh.0, gh.1, gh.2), format!("pipeline:{reason}"));
            *inp.injected.entry(key).or_default() += q;
        }
    }
}

#[cfg(test)]
mod tests;
