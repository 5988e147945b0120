//! The discoverer's three modes over in-memory stores, driven by the EventBridge target
//! inputs in `tests/fixtures/`.

use crate::handler_support;

use awsmp_aws::deprovisioning::Deprovisioning;
use awsmp_contract::attrs as a;
use awsmp_contract::keys::GroupKey;
use awsmp_contract::metrics;
use awsmp_contract::reasons::PENDING_PAST_BILLABLE_WINDOW;
use awsmp_contract::status::RawStatus;
use awsmp_pipeline::adapters::memory::{MemoryAdapters, MemoryUsageStore};
use awsmp_pipeline::handlers::discoverer::{DiscovererInput, discover};
use handler_support::*;
use std::sync::Arc;

fn input(name: &str) -> DiscovererInput {
    serde_json::from_str(&fixture(name)).expect("discoverer input fixture")
}

fn enqueued(queue: &awsmp_pipeline::adapters::memory::MemoryQueue) -> Vec<GroupKey> {
    let mut groups: Vec<GroupKey> = queue
        .messages()
        .iter()
        .map(|m| GroupKey::from_work_message(m).expect("work message"))
        .collect();
    groups.sort();
    groups
}

#[tokio::test]
async fn meter_target_enqueues_one_work_message_per_pending_group() {
    // GIVEN pending rows of two groups in the hour two back, a finalized row there, and a
    // pending row of the hour after it
    let w = World::at(NOW);
    w.put_rows(&work_group(), &[(5, 1), (6, 2)]);
    w.put_rows(&group("storage_gb", HOUR), &[(7, 3)]);
    let done = group("done", HOUR);
    w.put_rows(&done, &[(8, 4)]);
    let mut finalized = w.row(&done, 8);
    finalized.remove(a::METERING_PENDING);
    w.put_row(finalized);
    w.put_rows(&group(DIMENSION, "2026-11-30T11"), &[(9, 5)]);

    // WHEN the hourOffset 2 target runs
    let out = discover(&w.svc, input("eventbridge-meter-input.json"))
        .await
        .unwrap();

    // THEN each pending group of that hour is enqueued once, as the aggregator's fixture reads it
    assert_eq!((out.buckets, out.groups_enqueued), (1, 2));
    assert_eq!(
        enqueued(&w.mem.work_queue),
        [work_group(), group("storage_gb", HOUR)]
    );
    let work_fixture = sqs_event("sqs-work-message.json");
    assert!(
        w.mem
            .work_queue
            .messages()
            .contains(work_fixture.records[0].body.as_ref().unwrap()),
        "the discoverer writes the work message the aggregator fixture carries"
    );
}

#[tokio::test]
async fn meter_target_reads_every_page_of_the_pending_index() {
    let mem = MemoryAdapters {
        usage: Arc::new(MemoryUsageStore::new("usage").with_page_size(1)),
        ..MemoryAdapters::new()
    };
    let w = World::with_adapters(NOW, config(&[]), mem);
    for d in ["a", "b", "c", "d", "e"] {
        w.put_rows(&group(d, HOUR), &[(1, 1), (2, 1)]);
    }
    let out = discover(&w.svc, input("eventbridge-meter-input.json"))
        .await
        .unwrap();
    assert_eq!(out.groups_enqueued, 5);
    assert_eq!(enqueued(&w.mem.work_queue).len(), 5);
}

#[tokio::test]
async fn meter_target_below_the_lock_does_nothing() {
    let w = World::with_config(NOW, config(&[("AWSMP_METERING_LOCK_HOURS", "3")]));
    w.put_rows(&work_group(), &[(5, 1)]);
    let out = discover(&w.svc, input("eventbridge-meter-input.json"))
        .await
        .unwrap();
    assert_eq!((out.buckets, out.groups_enqueued), (0, 0));
    assert!(w.mem.work_queue.messages().is_empty());
}

#[tokio::test]
async fn a_failed_send_fails_the_run_for_the_schedule_to_retry() {
    let w = World::at(NOW);
    w.put_rows(&work_group(), &[(5, 1)]);
    w.mem.work_queue.faults.throttle("send_all", 1);
    let e = discover(&w.svc, input("eventbridge-meter-input.json"))
        .await
        .unwrap_err();
    assert!(e.is_retryable(), "{e}");
    assert!(w.mem.work_queue.messages().is_empty());
}

#[tokio::test]
async fn ageout_shard_expires_only_its_buckets_past_the_window() {
    // GIVEN rows still pending 28 hours back (shard 0) and 29 hours back (shard 1)
    let w = World::at(NOW);
    let old = group(DIMENSION, "2026-11-29T08");
    w.put_rows(&old, &[(1, 5), (2, 7)]);
    let other_shard = group(DIMENSION, "2026-11-29T07");
    w.put_rows(&other_shard, &[(3, 11)]);

    // WHEN age-out shard 0 runs
    let out = discover(&w.svc, input("eventbridge-ageout-input.json"))
        .await
        .unwrap();

    // THEN only shard 0's rows are expired, with their reason, and counted
    assert_eq!((out.rows_expired, out.quantity_expired), (2, 12));
    for second in [1, 2] {
        let row = w.row(&old, second);
        assert!(!is_pending(&row));
        assert_eq!(
            attr(&row, a::METERING_STATUS),
            Some(RawStatus::AggregationExpired.as_str())
        );
        assert_eq!(
            attr(&row, a::METERING_STATUS_REASON),
            Some(PENDING_PAST_BILLABLE_WINDOW)
        );
    }
    assert!(is_pending(&w.row(&other_shard, 3)));
    assert_eq!(
        w.metrics.total(metrics::USAGE_AGGREGATION_EXPIRED.name()),
        2.0
    );
}

#[tokio::test]
async fn flush_deprovisioning_enqueues_the_license_hours_including_the_current_one() {
    // GIVEN a license deprovisioning in five minutes, with pending rows now and two hours back
    let w = World::at(NOW);
    w.mem.deprovisioning.insert(Deprovisioning {
        license_arn: LICENSE.into(),
        customer_aws_account_id: ACCOUNT.into(),
        expiry: at("2026-11-30T12:15:00Z"),
    });
    w.put_rows(&work_group(), &[(5, 1)]);
    let current = group(DIMENSION, "2026-11-30T12");
    w.put_rows(&current, &[(6, 1)]);

    let out = discover(&w.svc, input("eventbridge-flush-deprovisioning-input.json"))
        .await
        .unwrap();

    // THEN both go to the deprovision-work queue, none to the ordinary work queue
    assert_eq!(out.groups_enqueued, 2);
    assert_eq!(enqueued(&w.mem.deprovision_queue), [work_group(), current]);
    assert!(w.mem.work_queue.messages().is_empty());
}

#[test]
fn a_scheduled_event_without_the_constant_input_is_refused() {
    // The rule must pass its constant input; the bare scheduled event names no mode.
    let raw = fixture("eventbridge-scheduled-event.json");
    assert!(serde_json::from_str::<DiscovererInput>(&raw).is_err());
    assert_eq!(
        input("eventbridge-meter-input.json"),
        DiscovererInput::Meter { hour_offset: 2 }
    );
}

#[tokio::test]
async fn an_ageout_shard_with_nothing_past_the_window_reports_no_expiry() {
    // GIVEN pending rows only inside the window (two hours back)
    let w = World::at(NOW);
    let recent = group(DIMENSION, "2026-11-30T10");
    w.put_rows(&recent, &[(1, 5)]);

    // WHEN age-out shard 0 runs
    let out = discover(&w.svc, input("eventbridge-ageout-input.json"))
        .await
        .unwrap();

    // THEN nothing is expired, and no aggregation-expired datum is emitted (not even a zero)
    assert_eq!((out.rows_expired, out.quantity_expired), (0, 0));
    assert!(is_pending(&w.row(&recent, 1)));
    assert!(
        w.metrics
            .points(metrics::USAGE_AGGREGATION_EXPIRED.name())
            .is_empty()
    );
}
