//! The submitter over the in-memory aggregated store and BatchMeterUsage ledger: success,
//! UnprocessedRecords, throttling, lost responses, DuplicateRecord, CustomerNotSubscribed,
//! poison records, DisabledApiException, dry-run, throttled write-backs and write-backs whose
//! answer was lost.

use crate::handler_support;

use awsmp_contract::keys::GroupKey;
use awsmp_contract::metrics;
use awsmp_contract::status::AggregatedStatus;
use awsmp_pipeline::PipelineError;
use awsmp_pipeline::adapters::memory::{CallFault, MemoryAggregatedStore};
use awsmp_pipeline::handlers::SubmitterDeps;
use awsmp_pipeline::handlers::submitter::{
    BUDGET_SPENT, CALL_RETRY, SubmitterOutput, UNPROCESSED_RETRY, submit, submit_with,
};
use awsmp_pipeline::ports::{AggregatedItem, AggregatedStore, MeteringApi};
use awsmp_testkit::faults::{Fault, FaultPlan, Rates};
use awsmp_testkit::ports::{Ctx, Faulty};
use handler_support::*;
use std::collections::BTreeMap;
use std::sync::Arc;

const DIMENSIONS: [&str; 3] = ["api_calls", "storage_gb", "users"];

/// A world with one pending record per dimension at [`HOUR`], quantities 10, 20, 30.
fn backlog(config: awsmp_pipeline::config::Config) -> (World, Vec<GroupKey>) {
    let w = World::with_config(NOW, config);
    let groups: Vec<GroupKey> = DIMENSIONS.iter().map(|d| group(d, HOUR)).collect();
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

/// The groups the ledger billed, in order.
fn billed_groups(w: &World) -> Vec<GroupKey> {
    let mut groups: Vec<GroupKey> = w
        .mem
        .metering
        .ledger()
        .iter()
        .map(|b| b.group.clone())
        .collect();
    groups.sort();
    groups
}

fn status_of(w: &World, g: &GroupKey) -> (bool, Option<AggregatedStatus>, Option<String>) {
    let item = w.aggregated(g);
    (item.pending, item.status, item.status_reason)
}

#[tokio::test]
async fn pending_records_are_billed_once_and_written_back() {
    let (w, groups) = backlog(config(&[("AWSMP_AGGREGATED_USAGE_TABLE_TTL_DAYS", "30")]));
    let out = run(&w).await.unwrap();
    assert_eq!(out.records_read, 3);
    assert_eq!(out.calls, 1);
    assert_eq!(out.statuses, statuses(&[("Success", 3)]));
    let ledger = w.mem.metering.ledger();
    assert_eq!(ledger.len(), 3);
    for (g, billed) in groups.iter().zip(&ledger) {
        let item = w.aggregated(g);
        assert_eq!(
            (item.pending, item.status),
            (false, Some(AggregatedStatus::Success))
        );
        assert_eq!(
            item.metering_record_id.as_ref(),
            Some(&billed.metering_record_id)
        );
        assert_eq!(
            item.attempted_quantity,
            Some(billed.quantity),
            "persisted before the call"
        );
        let ttl = at(NOW).timestamp() + 30 * 86_400;
        assert_eq!(w.mem.aggregated.ttl(g), Some(ttl));
    }
    // A second run finds nothing pending.
    assert_eq!(run(&w).await.unwrap().records_read, 0);
}

#[tokio::test(start_paused = true)]
async fn unprocessed_records_are_resent_within_the_run() {
    let (w, groups) = backlog(config(&[]));
    w.mem.metering.script([CallFault::Unprocessed(1)]);
    let out = run(&w).await.unwrap();
    assert_eq!((out.calls, out.left_pending), (2, 0));
    assert_eq!(out.statuses, statuses(&[("Success", 3)]));
    assert_eq!(status_of(&w, &groups[2]).1, Some(AggregatedStatus::Success));
}

#[tokio::test(start_paused = true)]
async fn records_unprocessed_in_every_round_stay_pending() {
    let (w, groups) = backlog(config(&[]));
    let rounds = UNPROCESSED_RETRY.max_attempts as usize;
    w.mem
        .metering
        .script(std::iter::repeat_n(CallFault::Unprocessed(1), rounds));
    let out = run(&w).await.unwrap();
    assert_eq!((out.calls, out.left_pending), (rounds, 1));
    assert_eq!(status_of(&w, &groups[2]), (true, None, None));
    assert_eq!(
        w.aggregated(&groups[2]).attempted_quantity,
        None,
        "listed unprocessed, so not applied: its attempt mark is taken back"
    );
    assert_eq!(
        w.metrics.total(metrics::USAGE_RECORD_UNPROCESSED.name()),
        1.0
    );
}

#[tokio::test(start_paused = true)]
async fn throttling_is_retried_and_bills_once() {
    let (w, _) = backlog(config(&[]));
    let throttle = CallFault::Exception("ThrottlingException".into());
    w.mem.metering.script([throttle.clone(), throttle]);
    let out = run(&w).await.unwrap();
    assert_eq!(out.calls, 3);
    assert_eq!(out.statuses, statuses(&[("Success", 3)]));
    assert_eq!(w.mem.metering.ledger().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn throttling_past_the_retry_policy_leaves_records_pending() {
    let (w, groups) = backlog(config(&[]));
    let attempts = CALL_RETRY.max_attempts as usize;
    w.mem.metering.script(std::iter::repeat_n(
        CallFault::Exception("ThrottlingException".into()),
        attempts,
    ));
    let out = run(&w).await.unwrap();
    assert_eq!(
        (out.calls, out.left_pending, out.halted),
        (attempts, 3, None)
    );
    assert!(w.mem.metering.ledger().is_empty());
    for g in &groups {
        let item = w.aggregated(g);
        assert!(item.pending && item.status.is_none());
        // Throttled calls were not applied: their attempt marks are taken back (issue 15).
        assert_eq!(item.attempted_quantity, None);
    }
}

#[tokio::test(start_paused = true)]
async fn a_lost_response_after_billing_is_recognised_on_the_retry() {
    let (w, _) = backlog(config(&[]));
    w.mem.metering.script([CallFault::ApplyThenLoseResponse]);
    let out = run(&w).await.unwrap();
    assert_eq!(out.calls, 2);
    assert_eq!(out.statuses, statuses(&[("Success", 3)]));
    assert_eq!(w.mem.metering.ledger().len(), 3, "billed exactly once");
}

#[tokio::test]
async fn an_hour_billed_by_someone_else_is_a_duplicate_record() {
    let (w, groups) = backlog(config(&[]));
    w.mem.metering.prebill(groups[0].clone(), 99);
    let out = run(&w).await.unwrap();
    assert_eq!(
        out.statuses,
        statuses(&[("DuplicateRecord", 1), ("Success", 2)])
    );
    assert_eq!(
        status_of(&w, &groups[0]).1,
        Some(AggregatedStatus::DuplicateRecord)
    );
    assert_eq!(w.metrics.total(metrics::DUPLICATE_RECORD.name()), 1.0);
    assert_eq!(
        w.mem.metering.ledger()[0].quantity,
        99,
        "the first write stays billed"
    );
}

#[tokio::test]
async fn a_resubmission_of_our_attempt_and_a_changed_quantity_are_told_apart() {
    // GIVEN our earlier attempts, both billed: one with the quantity still pending (its
    // response was lost when the process died), one with a quantity that has since changed
    let w = World::at(NOW);
    let (same, changed) = (group("api_calls", HOUR), group("users", HOUR));
    for (g, attempted, quantity) in [(&same, 10, 10), (&changed, 7, 9)] {
        let mut item = AggregatedItem::new(g.clone(), quantity, None);
        item.attempted_quantity = Some(attempted);
        w.mem.aggregated.insert(item);
        w.mem.metering.prebill(g.clone(), attempted);
    }

    // WHEN the submitter resubmits both
    let out = run(&w).await.unwrap();

    // THEN the identical one is Success with the id billed first, the changed one a
    // mismatch naming both quantities, and nothing more is billed
    assert_eq!(
        out.statuses,
        statuses(&[("DuplicateRecordQuantityMismatch", 1), ("Success", 1)])
    );
    let billed = w.mem.metering.ledger();
    assert_eq!(
        w.aggregated(&same).metering_record_id,
        Some(billed[0].metering_record_id.clone())
    );
    assert_eq!(
        status_of(&w, &same),
        (false, Some(AggregatedStatus::Success), None)
    );
    let (_, status, reason) = status_of(&w, &changed);
    assert_eq!(
        status,
        Some(AggregatedStatus::DuplicateRecordQuantityMismatch)
    );
    assert!(reason.unwrap().contains("sent 7 earlier, now 9"));
    assert_eq!(
        billed.iter().map(|b| b.quantity).collect::<Vec<_>>(),
        [10, 7]
    );
    assert_eq!(
        w.metrics
            .total(metrics::DUPLICATE_RECORD_QUANTITY_MISMATCH.name()),
        1.0
    );
}

#[tokio::test]
async fn an_unsubscribed_customer_is_terminal() {
    let (w, groups) = backlog(config(&[]));
    w.mem.metering.unsubscribe(ACCOUNT);
    let out = run(&w).await.unwrap();
    assert_eq!(out.statuses, statuses(&[("CustomerNotSubscribed", 3)]));
    assert_eq!(
        status_of(&w, &groups[1]),
        (false, Some(AggregatedStatus::CustomerNotSubscribed), None)
    );
    assert_eq!(
        w.metrics.total(metrics::CUSTOMER_NOT_SUBSCRIBED.name()),
        3.0
    );
    assert!(w.mem.metering.ledger().is_empty());
}

#[tokio::test]
async fn a_poison_record_is_isolated_and_the_rest_billed() {
    let (w, groups) = backlog(config(&[]));
    w.mem
        .metering
        .reject_dimension("storage_gb", "InvalidUsageDimensionException");
    let out = run(&w).await.unwrap();
    assert_eq!(out.statuses, statuses(&[("Error", 1), ("Success", 2)]));
    assert_eq!(
        status_of(&w, &groups[1]),
        (
            false,
            Some(AggregatedStatus::Error),
            Some("InvalidUsageDimensionException".into())
        )
    );
    assert_eq!(w.mem.metering.ledger().len(), 2);
}

#[tokio::test]
async fn a_disabled_api_halts_the_run_and_marks_nothing() {
    let (w, groups) = backlog(config(&[]));
    w.mem.metering.disable();
    let e = run(&w).await.unwrap_err();
    assert!(
        matches!(&e, PipelineError::MeteringHalted { exception, .. } if exception == "DisabledApiException"),
        "{e}"
    );
    assert!(
        groups
            .iter()
            .all(|g| status_of(&w, g) == (true, None, None))
    );
    let points = w
        .metrics
        .points(metrics::BATCH_METER_USAGE_EXCEPTION.name());
    assert_eq!(points.len(), 1);
    assert_eq!(points[0][metrics::EXCEPTION], "DisabledApiException");
}

#[tokio::test]
async fn dry_run_bills_nothing_and_refuses_accounts_off_the_allowlist() {
    let (w, groups) = backlog(config(&[
        ("AWSMP_METERING_MODE", "dry-run"),
        ("AWSMP_DRY_RUN_ACCOUNTS", ACCOUNT),
    ]));
    let stranger = GroupKey::new(LICENSE, "444455556666", "api_calls", HOUR.parse().unwrap());
    w.put_aggregated(&stranger, 5);
    let out = run(&w).await.unwrap();
    assert_eq!(out.calls, 0);
    assert_eq!(w.mem.metering.calls(), 0);
    assert_eq!(
        out.statuses,
        statuses(&[("DryRunSubmitted", 3), ("Error", 1)])
    );
    assert_eq!(
        status_of(&w, &groups[0]).1,
        Some(AggregatedStatus::DryRunSubmitted)
    );
    assert_eq!(
        status_of(&w, &stranger).2.as_deref(),
        Some("DryRunAccountNotAllowlisted")
    );
}

#[tokio::test(start_paused = true)]
async fn throttled_write_backs_are_retried_never_lost() {
    let (w, groups) = backlog(config(&[]));
    w.mem.aggregated.faults.throttle("write_back", 5);
    w.mem.aggregated.faults.throttle("mark_attempted", 2);
    let out = run(&w).await.unwrap();
    assert_eq!(out.statuses, statuses(&[("Success", 3)]));
    assert!(groups.iter().all(|g| !w.aggregated(g).pending));
    assert_eq!(w.mem.aggregated.faults.injected(), 7);
}

#[tokio::test(start_paused = true)]
async fn a_write_back_whose_answer_was_lost_is_recognised_on_its_retry() {
    // GIVEN the backlog in a table whose first write-back is applied and its answer lost
    let (w, _) = backlog(config(&[]));
    let ctx = Ctx::new(FaultPlan::new(1, Rates::default()));
    let faults = ctx.faults.clone();
    faults.script("write_back", [Fault::LoseResponse]);
    let table = Arc::new(Faulty::new(
        MemoryAggregatedStore::new("aggregated-usage"),
        &ctx,
    ));
    for item in w.mem.aggregated.items() {
        table.inner.insert(item);
    }
    let mut deps = SubmitterDeps::from_services(&w.svc).unwrap();
    deps.aggregated = table.clone();

    // WHEN the submitter runs, its retry of that write-back finds the record finalized
    let out = submit_with(&deps, w.mem.metering.as_ref()).await.unwrap();

    // THEN it finds its own outcome there: no conflict, every record billed and recorded
    assert_eq!(faults.injected(), 1);
    assert_eq!(out.statuses, statuses(&[("Success", 3)]));
    assert_eq!(w.metrics.total(metrics::WRITE_BACK_CONFLICT.name()), 0.0);
    let ledger = w.mem.metering.ledger();
    for (item, billed) in table.inner.items().iter().zip(&ledger) {
        assert_eq!(
            (item.status, item.metering_record_id.as_ref()),
            (
                Some(AggregatedStatus::Success),
                Some(&billed.metering_record_id)
            )
        );
    }
}

#[test]
fn a_run_can_be_spawned_on_a_multi_threaded_runtime() {
    fn assert_send<T: Send>(_: &T) {}
    let (w, _) = backlog(config(&[]));
    let run = submit(&w.svc, w.mem.metering.as_ref());
    assert_send(&run);
}

#[tokio::test]
async fn a_capped_run_sends_records_never_attempted_then_the_least_recently_attempted() {
    // GIVEN one hour with more pending records than the per-run cap: two whose attempts an
    // outage left unanswered (storage_gb's the more recent), one never sent
    let w = World::with_config(NOW, config(&[("AWSMP_SUBMITTER_MAX_RECORDS_PER_RUN", "2")]));
    let [api, storage, users] = DIMENSIONS.map(|d| group(d, HOUR));
    for (g, attempted_at) in [
        (&api, "2026-11-30T11:10:00Z"),
        (&storage, "2026-11-30T11:40:00Z"),
    ] {
        let mut item = AggregatedItem::new(g.clone(), 5, None);
        item.attempted_quantity = Some(5);
        item.submission_attempted_at = Some(at(attempted_at));
        w.mem.aggregated.insert(item);
    }
    w.put_aggregated(&users, 7);

    // WHEN one run reads its cap
    let out = run(&w).await.unwrap();

    // THEN it sends the record never sent and the oldest attempt, not the store's first two
    // (which every run of an outage would read again, leaving the third to expire unsent)
    assert_eq!(out.records_read, 2);
    let billed = billed_groups(&w);
    assert_eq!(billed.len(), 2);
    assert!(
        billed.contains(&users),
        "the record never sent is sent: {billed:?}"
    );
    assert!(
        billed.contains(&api),
        "then the least recently attempted: {billed:?}"
    );
    assert!(
        w.aggregated(&storage).pending,
        "the most recent attempt waits for the next run"
    );
}

/// A license in its deprovisioning flush window has every pending record sent, the current
/// hour's included and beside the per-run cap; another license's current hour waits for its
/// lock. When the deprovisioning index cannot be read, the run is the ordinary pass.
#[tokio::test]
async fn a_deprovisioning_license_is_sent_whole_and_an_unreadable_index_falls_back() {
    use awsmp_aws::deprovisioning::Deprovisioning;
    use awsmp_contract::keys::HourBucket;
    const OTHER: &str =
        "arn:aws:license-manager::123456789012:license:l-ffffffffffffffffffffffffffffffff";
    let other = |hour: &str| {
        GroupKey::new(
            OTHER,
            ACCOUNT,
            DIMENSION,
            hour.parse::<HourBucket>().unwrap(),
        )
    };
    let current = group(DIMENSION, "2026-11-30T12");
    let world = || {
        let w = World::with_config(NOW, config(&[("AWSMP_SUBMITTER_MAX_RECORDS_PER_RUN", "1")]));
        w.mem.deprovisioning.insert(Deprovisioning {
            license_arn: LICENSE.into(),
            customer_aws_account_id: ACCOUNT.into(),
            expiry: at("2026-11-30T12:15:00Z"),
        });
        w.put_aggregated(&current, 4);
        w.put_aggregated(&work_group(), 5);
        w.put_aggregated(&other(HOUR), 6);
        w.put_aggregated(&other("2026-11-30T12"), 7);
        w
    };

    let w = world();
    let out = run(&w).await.unwrap();
    assert_eq!(
        out.records_read, 3,
        "both of the license's hours, and the cap's one"
    );
    let mut expected = vec![current.clone(), work_group(), other(HOUR)];
    expected.sort();
    assert_eq!(billed_groups(&w), expected);
    assert!(w.aggregated(&other("2026-11-30T12")).pending);

    let w = world();
    w.mem.deprovisioning.faults.throttle("active", 1);
    let out = run(&w).await.unwrap();
    assert_eq!(
        out.records_read, 1,
        "the ordinary pass: the oldest hour's first record"
    );
    assert_eq!(billed_groups(&w).len(), 1);
    assert!(w.aggregated(&current).pending, "the current hour waits");
}

/// A run whose time budget is spent before a call sends nothing more: the call's records stay
/// pending for the next run, and the run ends without an error (the budget is not a fault).
#[tokio::test]
async fn a_spent_budget_leaves_the_records_pending_and_is_no_error() {
    let (w, groups) = backlog(config(&[("AWSMP_SUBMITTER_TIME_BUDGET_SECS", "0")]));
    let out = run(&w).await.unwrap();
    assert_eq!((out.calls, out.left_pending), (0, 3));
    assert_eq!(out.halted.as_deref(), Some(BUDGET_SPENT));
    assert!(w.mem.metering.ledger().is_empty());
    assert!(
        groups
            .iter()
            .all(|g| status_of(&w, g) == (true, None, None))
    );
}

/// A run halted by `DisabledApiException` on its first call (of two: 30 records, 25 a call)
/// says in its error how many records it left pending: the first call's, unanswered, and the
/// second call's, never sent.
#[tokio::test]
async fn a_halted_run_names_the_records_it_left_pending() {
    let w = World::with_config(NOW, config(&[]));
    let groups: Vec<GroupKey> = (0..30).map(|i| group(&format!("d{i}"), HOUR)).collect();
    for g in &groups {
        w.put_aggregated(g, 1);
    }
    w.mem.metering.disable();
    let e = run(&w).await.unwrap_err();
    assert!(
        matches!(&e, PipelineError::MeteringHalted { exception, left_pending: 30 } if exception == "DisabledApiException"),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "metering halted by DisabledApiException; 30 records left pending for the next run"
    );
    assert_eq!(w.mem.metering.calls(), 1, "the second call is never sent");
    assert!(groups.iter().all(|g| w.aggregated(g).pending));
}

/// `BatchMeterUsage` answering after a delay (real time: the run's budget is measured on the
/// wall clock, as Lambda's timeout is).
struct Delay(std::time::Duration);

#[async_trait::async_trait]
impl Hooks for Delay {
    async fn before_call(&self) {
        tokio::time::sleep(self.0).await;
    }
}

/// A budget spent while a call's `UnprocessedRecords` wait for their resend: they are not
/// resent, and stay pending for the next run.
#[tokio::test]
async fn unprocessed_records_are_not_resent_past_the_budget() {
    let (w, groups) = backlog(config(&[("AWSMP_SUBMITTER_TIME_BUDGET_SECS", "1")]));
    w.mem.metering.script([CallFault::Unprocessed(1)]);
    let slow = Hooked {
        inner: w.mem.metering.clone() as Arc<dyn MeteringApi>,
        hooks: Delay(std::time::Duration::from_millis(1100)),
    };
    let out = submit(&w.svc, &slow).await.unwrap();
    assert_eq!((out.calls, out.left_pending), (1, 1));
    assert_eq!(out.statuses, statuses(&[("Success", 2)]));
    assert_eq!(status_of(&w, &groups[2]), (true, None, None));
}

/// A 5xx proves nothing: AWS may have billed the records before it failed. When every send of
/// a call ends in one, the records stay pending with their attempt marks (expiry must not take
/// them for never sent, and the next run's answer is recognised as our own).
#[tokio::test(start_paused = true)]
async fn records_whose_sends_all_ended_in_a_5xx_keep_their_attempt_marks() {
    let (w, groups) = backlog(config(&[]));
    let fault = CallFault::ApplyThenException("InternalServiceErrorException".into());
    w.mem
        .metering
        .script(std::iter::repeat_n(fault, CALL_RETRY.max_attempts as usize));
    let out = run(&w).await.unwrap();
    assert_eq!(out.left_pending, 3);
    assert_eq!(w.mem.metering.ledger().len(), 3, "AWS billed them");
    for (g, quantity) in groups.iter().zip([10, 20, 30]) {
        let item = w.aggregated(g);
        assert!(item.pending);
        assert_eq!(
            item.attempted_quantity,
            Some(quantity),
            "{g}: the mark stays"
        );
    }
    // The next run's resend is answered as the identical retry it is.
    let out = run(&w).await.unwrap();
    assert_eq!(out.statuses, statuses(&[("Success", 3)]));
}

/// Only a billed record gets the aggregated table's TTL, and only when one is configured: a
/// record AWS refused stays for the operator, and without a TTL no record expires.
#[tokio::test]
async fn only_billed_records_get_the_ttl_and_only_when_one_is_configured() {
    let (w, groups) = backlog(config(&[]));
    run(&w).await.unwrap();
    assert_eq!(w.mem.metering.ledger().len(), 3);
    assert!(groups.iter().all(|g| w.mem.aggregated.ttl(g).is_none()));

    let (w, groups) = backlog(config(&[("AWSMP_AGGREGATED_USAGE_TABLE_TTL_DAYS", "30")]));
    w.mem.metering.unsubscribe(ACCOUNT);
    let out = run(&w).await.unwrap();
    assert_eq!(out.statuses, statuses(&[("CustomerNotSubscribed", 3)]));
    assert!(groups.iter().all(|g| w.mem.aggregated.ttl(g).is_none()));
}

/// Counts the write-backs in flight at once (each takes a millisecond of the paused clock).
#[derive(Default)]
struct WritesInFlight {
    now: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl Hooks for WritesInFlight {
    async fn before_write(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        self.most
            .fetch_max(self.now.fetch_add(1, SeqCst) + 1, SeqCst);
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    async fn after_write(&self) {
        self.now.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A run with more records than write-backs may be in flight (250 records, ten calls, 100
/// write-backs at most) holds the bound, and every record is written back.
#[tokio::test(start_paused = true)]
async fn write_backs_in_flight_stay_bounded() {
    let w = World::with_config(NOW, config(&[]));
    let groups: Vec<GroupKey> = (0..250).map(|i| group(&format!("d{i}"), HOUR)).collect();
    for g in &groups {
        w.put_aggregated(g, 1);
    }
    let store = Arc::new(Hooked {
        inner: w.mem.aggregated.clone() as Arc<dyn AggregatedStore>,
        hooks: WritesInFlight::default(),
    });
    let mut deps = SubmitterDeps::from_services(&w.svc).unwrap();
    deps.aggregated = store.clone();
    let out = submit_with(&deps, w.mem.metering.as_ref()).await.unwrap();
    assert_eq!(out.statuses, statuses(&[("Success", 250)]));
    let most = store.hooks.most.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        (2..=101).contains(&most),
        "{most} write-backs in flight at once"
    );
}

/// A write-back that fails for good (throttled past its retry policy) fails the run, and its
/// record stays pending with its attempt mark: the next run resends it and AWS's answer to the
/// identical retry is written back.
#[tokio::test(start_paused = true)]
async fn a_write_back_that_fails_for_good_fails_the_run_and_the_next_run_writes_it() {
    let (w, groups) = backlog(config(&[]));
    let attempts = awsmp_pipeline::handlers::submitter::WRITE_BACK_RETRY.max_attempts;
    w.mem.aggregated.faults.throttle("write_back", 3 * attempts);
    let e = run(&w).await.unwrap_err();
    assert!(e.to_string().contains("write_back"), "{e}");
    assert_eq!(w.mem.metering.ledger().len(), 3, "AWS billed them");
    for (g, quantity) in groups.iter().zip([10, 20, 30]) {
        let item = w.aggregated(g);
        assert!(item.pending, "{g}");
        assert_eq!(item.attempted_quantity, Some(quantity));
    }
    let out = run(&w).await.unwrap();
    assert_eq!(out.statuses, statuses(&[("Success", 3)]));
    assert_eq!(w.mem.metering.ledger().len(), 3, "billed once");
}

/// Another writer finalizing `group` while a `BatchMeterUsage` call is out (`Success` with
/// another `MeteringRecordId`).
struct FinalizedMeanwhile {
    store: Arc<MemoryAggregatedStore>,
    group: GroupKey,
}

#[async_trait::async_trait]
impl Hooks for FinalizedMeanwhile {
    async fn before_call(&self) {
        let other = awsmp_pipeline::ports::WriteBack {
            status: AggregatedStatus::Success,
            reason: None,
            metering_record_id: Some("someone-elses-record".into()),
            ttl: None,
            if_attempt: Default::default(),
        };
        assert!(
            self.store
                .write_back(&self.group, &other, at(NOW))
                .await
                .unwrap()
        );
    }
}

/// A write-back that finds its record finalized by someone else — the same status, another
/// `MeteringRecordId` — is a conflict, never taken for our own earlier delivery.
#[tokio::test]
async fn a_record_finalized_meanwhile_with_another_record_id_is_a_conflict() {
    let (w, groups) = backlog(config(&[]));
    let api = Hooked {
        inner: w.mem.metering.clone() as Arc<dyn MeteringApi>,
        hooks: FinalizedMeanwhile {
            store: w.mem.aggregated.clone(),
            group: groups[0].clone(),
        },
    };
    let e = submit(&w.svc, &api).await.unwrap_err();
    assert!(
        matches!(&e, PipelineError::WriteBackConflict { group, .. } if *group == groups[0]),
        "{e}"
    );
    assert_eq!(w.metrics.total(metrics::WRITE_BACK_CONFLICT.name()), 1.0);
    assert_eq!(
        w.aggregated(&groups[0]).metering_record_id.as_deref(),
        Some("someone-elses-record")
    );
}
