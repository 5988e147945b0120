//! The submitter and expiry tell the truth (over the in-memory adapters): a throttled call was
//! not applied and never makes a later `DuplicateRecord` ours; an attempt on file is
//! reconciled within the window or ends `NeedsReconciliation`, never `SubmissionExpired`; an
//! exception the pipeline does not model is isolated by bisection instead of halting.

use crate::handler_support;

use awsmp_contract::keys::GroupKey;
use awsmp_contract::metrics;
use awsmp_contract::status::AggregatedStatus;
use awsmp_pipeline::PipelineError;
use awsmp_pipeline::adapters::memory::CallFault;
use awsmp_pipeline::handlers::expiry::expire;
use awsmp_pipeline::handlers::submitter::{CALL_RETRY, SubmitterOutput, submit};
use awsmp_pipeline::ports::AggregatedItem;
use handler_support::*;
use std::collections::BTreeMap;

const DIMENSIONS: [&str; 3] = ["api_calls", "storage_gb", "users"];

/// A world with one pending record per dimension at `hour`, quantities 10, 20, 30.
fn backlog(hour: &str) -> (World, Vec<GroupKey>) {
    let w = World::at(NOW);
    let groups: Vec<GroupKey> = DIMENSIONS.iter().map(|d| group(d, hour)).collect();
    for (i, g) in groups.iter().enumerate() {
        w.put_aggregated(g, 10 * (i as u64 + 1));
    }
    (w, groups)
}

async fn run(w: &World) -> Result<SubmitterOutput, PipelineError> {
    submit(&w.svc, w.mem.metering.as_ref()).await
}

fn statuses(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(s, n)| ((*s).to_owned(), *n)).collect()
}

fn throttles(n: usize) -> impl Iterator<Item = CallFault> {
    std::iter::repeat_n(CallFault::Exception("ThrottlingException".into()), n)
}

#[tokio::test(start_paused = true)]
async fn a_duplicate_after_a_throttled_send_is_someone_elses() {
    // GIVEN an hour AWS already billed at 99 (not our quantity), and a throttled first send
    let (w, groups) = backlog(HOUR);
    w.mem.metering.prebill(groups[0].clone(), 99);
    w.mem.metering.script(throttles(1));
    // WHEN the submitter retries within the run
    let out = run(&w).await.unwrap();
    // THEN the throttled send made nothing ours: DuplicateRecord, flagged
    assert_eq!(
        out.statuses,
        statuses(&[("DuplicateRecord", 1), ("Success", 2)])
    );
    assert_eq!(
        w.aggregated(&groups[0]).status,
        Some(AggregatedStatus::DuplicateRecord)
    );
    assert_eq!(w.metrics.total(metrics::DUPLICATE_RECORD.name()), 1.0);
}

#[tokio::test(start_paused = true)]
async fn a_call_throttled_past_the_policy_leaves_no_attempt_on_file() {
    // GIVEN every send of the run is throttled
    let (w, groups) = backlog(HOUR);
    w.mem
        .metering
        .script(throttles(CALL_RETRY.max_attempts as usize));
    let out = run(&w).await.unwrap();
    assert_eq!(out.left_pending, 3);
    // THEN the marks written before the call are taken back
    for g in &groups {
        let item = w.aggregated(g);
        assert!(item.pending);
        assert_eq!(
            (item.attempted_quantity, item.submission_attempted_at),
            (None, None)
        );
    }
    // WHEN someone else bills one of the hours before the next run
    w.mem.metering.prebill(groups[1].clone(), 99);
    let out = run(&w).await.unwrap();
    // THEN it is a DuplicateRecord, not a replay of ours
    assert_eq!(
        out.statuses,
        statuses(&[("DuplicateRecord", 1), ("Success", 2)])
    );
}

#[tokio::test(start_paused = true)]
async fn a_throttled_call_restores_the_earlier_attempt() {
    // GIVEN an earlier attempt of 7 on file (outcome unknown), the record now at 9
    let w = World::at(NOW);
    let g = group("users", HOUR);
    let mut item = AggregatedItem::new(g.clone(), 9, None);
    item.attempted_quantity = Some(7);
    w.mem.aggregated.insert(item);
    w.mem
        .metering
        .script(throttles(CALL_RETRY.max_attempts as usize));
    run(&w).await.unwrap();
    // THEN the attempt of 7 is still on file: the throttled 9 was never applied
    assert_eq!(w.aggregated(&g).attempted_quantity, Some(7));
}

#[tokio::test(start_paused = true)]
async fn a_send_without_an_answer_keeps_its_attempt_on_file() {
    let (w, groups) = backlog(HOUR);
    w.mem.metering.script(std::iter::repeat_n(
        CallFault::NoResponse,
        CALL_RETRY.max_attempts as usize,
    ));
    run(&w).await.unwrap();
    for (i, g) in groups.iter().enumerate() {
        assert_eq!(
            w.aggregated(g).attempted_quantity,
            Some(10 * (i as u64 + 1))
        );
    }
}

#[tokio::test]
async fn an_unmodelled_exception_is_isolated_and_the_rest_billed() {
    let (w, groups) = backlog(HOUR);
    w.mem
        .metering
        .reject_dimension("storage_gb", "SomeFutureException");
    let out = run(&w).await.unwrap();
    assert_eq!(out.halted, None);
    assert_eq!(out.statuses, statuses(&[("Error", 1), ("Success", 2)]));
    let item = w.aggregated(&groups[1]);
    assert_eq!(
        (item.status, item.status_reason.as_deref()),
        (Some(AggregatedStatus::Error), Some("SomeFutureException"))
    );
    assert_eq!(w.mem.metering.ledger().len(), 2);
}

#[tokio::test]
async fn a_documented_whole_region_error_halts_and_marks_nothing() {
    let (w, groups) = backlog(HOUR);
    w.mem
        .metering
        .script([CallFault::Exception("AccessDeniedException".into())]);
    let e = run(&w).await.unwrap_err();
    assert!(
        matches!(&e, PipelineError::MeteringHalted { exception, .. } if exception == "AccessDeniedException"),
        "{e}"
    );
    for g in &groups {
        let item = w.aggregated(g);
        assert!(item.pending && item.status.is_none() && item.attempted_quantity.is_none());
    }
}

/// The oldest billable hour at [`NOW`] (age 23), and the instant its window has closed.
const LAST_BILLABLE_HOUR: &str = "2026-11-29T13";
const WINDOW_CLOSED: &str = "2026-11-30T13:10:00Z";

/// AWS applies the first send and answers none of the run's sends.
fn applied_then_unanswered(w: &World) {
    let rest = CALL_RETRY.max_attempts as usize - 1;
    w.mem.metering.script(
        std::iter::once(CallFault::ApplyThenLoseResponse)
            .chain(std::iter::repeat_n(CallFault::NoResponse, rest)),
    );
}

#[tokio::test(start_paused = true)]
async fn an_applied_call_unanswered_at_window_close_needs_reconciliation() {
    // GIVEN a call AWS applied for the last billable hour, never answered in the run
    let (w, groups) = backlog(LAST_BILLABLE_HOUR);
    applied_then_unanswered(&w);
    assert_eq!(run(&w).await.unwrap().left_pending, 3);
    assert_eq!(w.mem.metering.ledger().len(), 3, "AWS billed them");
    // WHEN the window closes before the next run and expiry sweeps
    w.clock.set(at(WINDOW_CLOSED));
    let out = expire(&w.svc).await.unwrap();
    // THEN they are possibly billed, alarmed, never SubmissionExpired
    assert_eq!((out.records_expired, out.records_unresolved), (0, 3));
    assert_eq!(out.quantity_unresolved, 60);
    for g in &groups {
        let item = w.aggregated(g);
        assert_eq!(
            (item.pending, item.status),
            (false, Some(AggregatedStatus::NeedsReconciliation))
        );
        assert!(
            item.status_reason
                .unwrap()
                .starts_with("AttemptUnresolvedAtWindowClose")
        );
    }
    assert_eq!(
        w.metrics.total(metrics::USAGE_NEEDS_RECONCILIATION.name()),
        3.0
    );
    assert_eq!(
        w.metrics.total(metrics::USAGE_SUBMISSION_EXPIRED.name()),
        0.0
    );
}

#[tokio::test(start_paused = true)]
async fn an_attempt_on_file_is_reconciled_by_a_retry_within_the_window() {
    // GIVEN the same applied, unanswered call
    let (w, groups) = backlog(LAST_BILLABLE_HOUR);
    applied_then_unanswered(&w);
    run(&w).await.unwrap();
    let billed = w.mem.metering.ledger();
    // WHEN the next run comes while the hour is still billable
    let out = run(&w).await.unwrap();
    // THEN the identical retry resolves it: Success with the id AWS gave the first time
    assert_eq!(out.statuses, statuses(&[("Success", 3)]));
    for (g, line) in groups.iter().zip(&billed) {
        assert_eq!(
            w.aggregated(g).metering_record_id.as_ref(),
            Some(&line.metering_record_id)
        );
    }
    w.clock.set(at(WINDOW_CLOSED));
    let out = expire(&w.svc).await.unwrap();
    assert_eq!((out.records_expired, out.records_unresolved), (0, 0));
}

#[tokio::test]
async fn a_record_expired_without_an_attempt_is_submission_expired() {
    let w = World::at(WINDOW_CLOSED);
    let g = group(DIMENSION, LAST_BILLABLE_HOUR);
    w.put_aggregated(&g, 4);
    let out = expire(&w.svc).await.unwrap();
    assert_eq!((out.records_expired, out.records_unresolved), (1, 0));
    assert_eq!(
        w.aggregated(&g).status,
        Some(AggregatedStatus::SubmissionExpired)
    );
}
