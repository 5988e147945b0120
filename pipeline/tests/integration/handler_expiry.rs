//! Submission expiry over the in-memory aggregated store: past the window, and at month end.

use crate::handler_support;

use awsmp_contract::keys::GroupKey;
use awsmp_contract::metrics;
use awsmp_contract::reasons::PENDING_PAST_BILLABLE_WINDOW;
use awsmp_contract::status::AggregatedStatus;
use awsmp_contract::time::expiry_buckets;
use awsmp_pipeline::handlers::expiry::expire;
use handler_support::*;

fn expired(w: &World, g: &GroupKey) -> bool {
    let item = w.aggregated(g);
    !item.pending
        && item.status == Some(AggregatedStatus::SubmissionExpired)
        && item.status_reason.as_deref() == Some(PENDING_PAST_BILLABLE_WINDOW)
}

#[tokio::test]
async fn records_past_the_billable_window_expire() {
    let w = World::at(NOW);
    let stale = group(DIMENSION, "2026-11-29T11"); // 25 hours back
    let billable = work_group();
    w.put_aggregated(&stale, 40);
    w.put_aggregated(&billable, 2);
    let out = expire(&w.svc).await.unwrap();
    assert_eq!((out.records_expired, out.quantity_expired), (1, 40));
    // It reports every bucket of its lookback it examined, each expired hour back to it.
    let examined = expiry_buckets(at(NOW), &w.svc.config.time).len();
    assert!(examined > 24, "{examined}");
    assert_eq!(out.buckets, examined);
    assert!(expired(&w, &stale));
    assert!(w.aggregated(&billable).pending);
    assert_eq!(
        w.metrics.total(metrics::USAGE_SUBMISSION_EXPIRED.name()),
        1.0
    );
}

#[tokio::test]
async fn previous_month_records_expire_when_the_grace_closes_at_six() {
    // GIVEN a record of the last hour of November and one of December's first hours
    let november = group(DIMENSION, "2026-11-30T23");
    let december = group(DIMENSION, "2026-12-01T04");

    // WHEN expiry runs inside the month-end grace, nothing of November expires
    let w = World::at("2026-12-01T05:50:00Z");
    w.put_aggregated(&november, 7);
    w.put_aggregated(&december, 3);
    assert_eq!(expire(&w.svc).await.unwrap().records_expired, 0);
    assert!(w.aggregated(&november).pending);

    // WHEN it runs once the grace has closed, November expires and December stays
    w.clock.set(at("2026-12-01T06:10:00Z"));
    let out = expire(&w.svc).await.unwrap();
    assert_eq!((out.records_expired, out.quantity_expired), (1, 7));
    assert!(expired(&w, &november));
    assert!(w.aggregated(&december).pending);
}

#[tokio::test(start_paused = true)]
async fn throttled_write_backs_are_retried_and_an_expired_record_is_not_counted_twice() {
    let w = World::at(NOW);
    let stale = group(DIMENSION, "2026-11-29T11");
    w.put_aggregated(&stale, 40);
    w.mem.aggregated.faults.throttle("write_back", 2);
    assert_eq!(expire(&w.svc).await.unwrap().records_expired, 1);
    assert!(expired(&w, &stale));
    assert_eq!(expire(&w.svc).await.unwrap().records_expired, 0);
}
