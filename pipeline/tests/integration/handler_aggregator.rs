//! The aggregator over in-memory stores, driven by the SQS work-message fixtures: commit,
//! zero deferral, client-side rejection, duplicate delivery, late usage, poison messages and
//! throttled storage.

use crate::handler_support;

use aws_lambda_events::sqs::SqsEvent;
use awsmp_contract::attrs as a;
use awsmp_contract::metrics;
use awsmp_contract::reasons::LATE_USAGE;
use awsmp_contract::row::AttrValue;
use awsmp_contract::status::{RawStatus, aggregated_reason};
use awsmp_pipeline::handlers::aggregator::{AggregateOutcome, aggregate};
use awsmp_pipeline::handlers::cleanup::{CleanupMessage, cleanup};
use awsmp_pipeline::handlers::handle_sqs_batch;
use handler_support::*;

/// Run the aggregator over `event` as its Lambda does; the failed message ids.
async fn deliver(w: &World, event: SqsEvent) -> Vec<String> {
    let svc = &w.svc;
    let response = handle_sqs_batch("aggregator", event, |body| async move {
        aggregate(svc, &body).await.map(drop)
    })
    .await;
    failed_ids(&response)
}

/// Run cleanup over every message the aggregator enqueued.
async fn drain_cleanup(w: &World) {
    let svc = &w.svc;
    let event = w.mem.cleanup_queue.receive(10);
    let response = handle_sqs_batch("cleanup", event, |body| async move {
        cleanup(svc, &body).await.map(drop)
    })
    .await;
    assert!(response.batch_item_failures.is_empty());
}

fn work_body() -> String {
    sqs_event("sqs-work-message.json").records[0]
        .body
        .clone()
        .unwrap()
}

#[tokio::test]
async fn a_group_is_committed_once_and_its_rows_cleaned_up() {
    // GIVEN three pending rows of the work message's group
    let w = World::at(NOW);
    let g = work_group();
    w.put_rows(&g, &[(5, 5), (900, 4), (3599, 3)]);

    // WHEN the work message is delivered
    assert!(
        deliver(&w, sqs_event("sqs-work-message.json"))
            .await
            .is_empty()
    );

    // THEN the commit point holds the sum, pending for the submitter, and one cleanup
    // message names every row with the reference reason text (the cleanup fixture's body)
    let item = w.aggregated(&g);
    assert_eq!((item.quantity, item.row_count, item.pending), (12, 3, true));
    let sent: Vec<CleanupMessage> = w
        .mem
        .cleanup_queue
        .messages()
        .iter()
        .map(|m| serde_json::from_str(m).unwrap())
        .collect();
    let fixture: CleanupMessage = serde_json::from_str(
        sqs_event("sqs-cleanup-message.json").records[0]
            .body
            .as_ref()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(sent, [fixture]);

    drain_cleanup(&w).await;
    for second in [5, 900, 3599] {
        let row = w.row(&g, second);
        assert!(!is_pending(&row));
        assert_eq!(
            attr(&row, a::METERING_STATUS),
            Some(RawStatus::Aggregated.as_str())
        );
        assert_eq!(
            attr(&row, a::METERING_STATUS_REASON),
            Some(aggregated_reason(12, 3).as_str())
        );
    }
}

#[tokio::test]
async fn a_zero_sum_group_is_deferred_and_left_pending() {
    let w = World::at(NOW);
    let g = work_group();
    w.put_rows(&g, &[(5, 0), (6, 0)]);
    let out = aggregate(&w.svc, &work_body()).await.unwrap();
    assert_eq!(out, AggregateOutcome::DeferredZero);
    assert!(w.mem.aggregated.items().is_empty(), "0 would lock the hour");
    assert!(is_pending(&w.row(&g, 5)) && is_pending(&w.row(&g, 6)));
    assert!(w.mem.cleanup_queue.messages().is_empty());
}

#[tokio::test]
async fn a_group_with_an_invalid_row_is_rejected_with_its_reason() {
    // GIVEN a group whose second row carries a negative quantity
    let w = World::at(NOW);
    let g = work_group();
    w.put_rows(&g, &[(5, 5), (6, 1)]);
    let mut bad = w.row(&g, 6);
    bad.insert(a::QUANTITY.into(), AttrValue::N("-1".into()));
    w.put_row(bad);

    let out = aggregate(&w.svc, &work_body()).await.unwrap();

    // THEN nothing is committed and every row of the group is stamped with the reason
    assert_eq!(
        out,
        AggregateOutcome::Rejected {
            reason: "NegativeQuantity".into(),
            rows: 2
        }
    );
    assert!(w.mem.aggregated.items().is_empty());
    for second in [5, 6] {
        let row = w.row(&g, second);
        assert_eq!(
            attr(&row, a::METERING_STATUS),
            Some(RawStatus::RejectedClientSide.as_str())
        );
        assert_eq!(
            attr(&row, a::METERING_STATUS_REASON),
            Some("NegativeQuantity")
        );
    }
    let points = w.metrics.points(metrics::USAGE_RECORD_REJECTED.name());
    assert_eq!(points.len(), 1);
    assert_eq!(points[0][metrics::REASON], "NegativeQuantity");
}

#[tokio::test]
async fn a_duplicate_delivery_commits_once_and_finishes_the_cleanup() {
    // GIVEN the same work message twice in one batch (at-least-once delivery)
    let w = World::at(NOW);
    let g = work_group();
    w.put_rows(&g, &[(5, 5), (900, 4)]);

    assert!(
        deliver(&w, sqs_event("sqs-work-duplicate-delivery.json"))
            .await
            .is_empty()
    );

    // THEN one record, one cleanup message, and the second delivery already finalized the
    // rows with the committed record's own sum
    assert_eq!(w.mem.aggregated.items().len(), 1);
    assert_eq!(w.aggregated(&g).quantity, 9);
    assert_eq!(w.mem.cleanup_queue.messages().len(), 1);
    for second in [5, 900] {
        let row = w.row(&g, second);
        assert!(!is_pending(&row));
        assert_eq!(
            attr(&row, a::METERING_STATUS_REASON),
            Some(aggregated_reason(9, 2).as_str())
        );
    }
}

#[tokio::test]
async fn a_row_written_after_aggregation_is_late_usage_never_billed() {
    let w = World::at(NOW);
    let g = work_group();
    w.put_rows(&g, &[(5, 5)]);
    aggregate(&w.svc, &work_body()).await.unwrap();
    drain_cleanup(&w).await;

    // WHEN a row of the committed hour arrives and the group is visited again
    w.put_rows(&g, &[(100, 8)]);
    let out = aggregate(&w.svc, &work_body()).await.unwrap();

    // THEN it is stamped late, surfaced as a metric, and the record keeps its sum
    assert_eq!(
        out,
        AggregateOutcome::Revisited {
            cleaned: 0,
            late_rows: 1,
            late_quantity: 8
        }
    );
    let row = w.row(&g, 100);
    assert_eq!(
        attr(&row, a::METERING_STATUS),
        Some(RawStatus::RejectedClientSide.as_str())
    );
    assert_eq!(attr(&row, a::METERING_STATUS_REASON), Some(LATE_USAGE));
    assert_eq!(w.metrics.total(metrics::LATE_USAGE.name()), 8.0);
    assert_eq!(w.aggregated(&g).quantity, 5);
}

#[tokio::test]
async fn undecodable_and_bodiless_messages_fail_alone() {
    let w = World::at(NOW);
    w.put_rows(&work_group(), &[(5, 5)]);
    let failed = deliver(&w, sqs_event("sqs-work-poison-batch.json")).await;
    assert_eq!(
        failed,
        [
            "c3b2a190-7d6e-4f5a-8b9c-0d1e2f3a4b03",
            "e5d4c3b2-a190-4f8e-9d7c-6b5a4f3e2d04"
        ]
    );
    assert_eq!(w.aggregated(&work_group()).quantity, 5);
}

#[tokio::test(start_paused = true)]
async fn throttled_storage_is_retried_then_redelivered() {
    let w = World::at(NOW);
    let g = work_group();
    w.put_rows(&g, &[(5, 5), (6, 0)]);
    // Throttled row stamps are retried inside the handler...
    w.mem.usage.faults.throttle("finalize_row", 2);
    // ...a throttled read fails the message, which SQS redelivers.
    w.mem.usage.faults.throttle("read_pending_rows", 1);

    let failed = deliver(&w, sqs_event("sqs-work-message.json")).await;
    assert_eq!(failed, ["4d1f6a3e-0b7c-4a52-9d1e-6f0a1c2b3d01"]);
    assert!(w.mem.aggregated.items().is_empty());

    assert!(
        deliver(&w, sqs_event("sqs-work-message.json"))
            .await
            .is_empty()
    );
    assert_eq!(w.aggregated(&g).quantity, 5);
    // The commit enqueued cleanup; the throttled stamps are absorbed there.
    drain_cleanup(&w).await;
    assert!(!is_pending(&w.row(&g, 5)));
    assert_eq!(w.mem.usage.faults.injected(), 3);
}
