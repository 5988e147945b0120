//! Which fault a call draws: its roll against the rates, an outlasting throttle that holds it,
//! or a fault forced on it (a crash point, a script, a script per key).

use super::{CallKey, Fault, Invocation, Rates, State};
use std::collections::VecDeque;

/// One throttle in this many outlasts every retry policy: the call stays throttled for the
/// rest of its invocation.
pub(super) const OUTLASTING_THROTTLE_ONE_IN: u64 = 3;

/// The layer whose retry loop a repeated call is: the pipeline's stores, `BatchMeterUsage`
/// (the submitter), or another's (the consumer, meter-ingest, the lifecycle).
pub(super) fn retry_class(operation: &str) -> &'static str {
    const PIPELINE: [&str; 11] = [
        "pending_groups",
        "read_pending_rows",
        "finalize_row",
        "finalize_folded",
        "expire_bucket",
        "put_if_absent",
        "get",
        "pending",
        "mark_attempted",
        "retract_attempt",
        "write_back",
    ];
    if operation == "batch_meter_usage" {
        "retry-marketplace"
    } else if PIPELINE.contains(&operation) {
        "retry-pipeline-store"
    } else {
        "retry-other"
    }
}

/// The fault a call's `roll` (0–999) draws at `r`; only a `write` may lose its response or
/// crash after applying.
pub(super) fn pick(r: Rates, roll: u64, write: bool) -> Option<Fault> {
    let mut edge = 0;
    for (fault, rate, allowed) in [
        (Fault::Throttle, r.throttle, true),
        (Fault::FailBeforeApply, r.fail_before_apply, true),
        (Fault::LoseResponse, r.lose_response, write),
        (Fault::Crash, r.crash, true),
        (Fault::ApplyThenFail, r.crash, write),
        (Fault::Preempt, r.preempt, true),
    ] {
        if !allowed {
            continue;
        }
        edge += u64::from(rate);
        if roll < edge {
            return Some(fault);
        }
    }
    None
}

/// The fault of a call of `call_key` in `invocation`: a throttle while an outlasting one holds
/// it (in a `running` invocation), else `fresh()`. A fresh throttle outlasts the retries in
/// one case of [`OUTLASTING_THROTTLE_ONE_IN`]; a call failed retryably is remembered, so its
/// repeat in the same invocation counts as a retry.
pub(super) fn held_or(
    s: &mut State,
    running: bool,
    call_key: CallKey,
    invocation: Invocation,
    variant: u64,
    fresh: impl FnOnce() -> Option<Fault>,
) -> Option<Fault> {
    let pick = if running && s.hot.get(&call_key) == Some(&invocation) {
        *s.tally.entry("throttle-outlasting-retries").or_default() += 1;
        Some(Fault::Throttle)
    } else {
        fresh()
    };
    if running
        && pick == Some(Fault::Throttle)
        && (variant >> 32).is_multiple_of(OUTLASTING_THROTTLE_ONE_IN)
    {
        s.hot.insert(call_key.clone(), invocation);
    }
    if matches!(
        pick,
        Some(Fault::Throttle | Fault::FailBeforeApply | Fault::LoseResponse)
    ) {
        s.failed.insert(call_key, invocation);
    }
    pick
}

/// The fault a call takes whatever its roll: a crash once the crash point is passed
/// ([`FaultPlan::crash_after`]) or reached ([`FaultPlan::crash_at`]), else the next one
/// scripted for its operation, else the one scripted for the `nth` (from 1) call of its
/// operation on its key.
///
/// [`FaultPlan::crash_after`]: super::FaultPlan::crash_after
/// [`FaultPlan::crash_at`]: super::FaultPlan::crash_at
pub(super) fn forced(s: &mut State, operation: &str, nth: u32) -> Option<Fault> {
    s.ops += 1;
    if s.crash_after.is_some_and(|n| s.ops > n) {
        s.crash_after = None;
        return Some(Fault::Crash);
    }
    if let Some((op, left)) = &mut s.crash_at
        && op == operation
    {
        if *left <= 1 {
            s.crash_at = None;
            return Some(Fault::Crash);
        }
        *left -= 1;
    }
    s.script
        .get_mut(operation)
        .and_then(VecDeque::pop_front)
        .or_else(|| {
            let each = s.script_each_key.get(operation)?;
            each.get(usize::try_from(nth).ok()?.checked_sub(1)?)
                .copied()
        })
}
