//! Cleanup over in-memory stores, driven by the SQS cleanup-message fixtures.

use crate::handler_support;

use aws_lambda_events::sqs::SqsEvent;
use awsmp_contract::attrs as a;
use awsmp_contract::keys::RowKey;
use awsmp_contract::reasons::LATE_USAGE;
use awsmp_contract::status::RawStatus;
use awsmp_pipeline::handlers::cleanup::cleanup;
use awsmp_pipeline::handlers::handle_sqs_batch;
use awsmp_pipeline::ports::UsageStore;
use handler_support::*;

/// The fixture rows' seconds (`10:00:05`, `10:15:00`, `10:59:59`).
const SECONDS: [u32; 3] = [5, 900, 3599];

fn body(fixture_name: &str) -> String {
    sqs_event(fixture_name).records[0].body.clone().unwrap()
}

async fn deliver(w: &World, event: SqsEvent) -> Vec<String> {
    let svc = &w.svc;
    let response = handle_sqs_batch("cleanup", event, |body| async move {
        cleanup(svc, &body).await.map(drop)
    })
    .await;
    failed_ids(&response)
}

#[tokio::test]
async fn every_key_of_the_message_is_finalized_with_its_status() {
    let w = World::at(NOW);
    let g = work_group();
    w.put_rows(&g, &[(5, 5), (900, 4), (3599, 3)]);
    assert!(
        deliver(&w, sqs_event("sqs-cleanup-message.json"))
            .await
            .is_empty()
    );
    for second in SECONDS {
        let row = w.row(&g, second);
        assert!(!is_pending(&row));
        assert_eq!(attr(&row, a::METERING_STATUS), Some("Aggregated"));
        assert_eq!(
            attr(&row, a::METERING_STATUS_REASON),
            Some("Aggregated total quantity 12 from 3 raw usage records")
        );
    }
    // A redelivery changes nothing and still succeeds.
    assert_eq!(
        cleanup(&w.svc, &body("sqs-cleanup-message.json"))
            .await
            .unwrap(),
        3
    );
}

#[tokio::test]
async fn a_row_that_is_gone_is_never_recreated() {
    let w = World::at(NOW);
    let g = work_group();
    w.put_rows(&g, &[(5, 5), (3599, 3)]);
    let finalized = cleanup(&w.svc, &body("sqs-cleanup-message.json"))
        .await
        .unwrap();
    assert_eq!(finalized, 2);
    let gone = RowKey {
        license_arn: LICENSE.into(),
        sort_key: g.usage_sort_key_at(900),
    };
    assert_eq!(w.mem.usage.row(&gone), None);
    assert_eq!(w.mem.usage.rows().len(), 2);
}

#[tokio::test]
async fn a_status_less_message_keeps_the_status_of_a_row_that_changed() {
    // GIVEN a row a re-visit already stamped late usage, pending again by a rewrite
    let w = World::at(NOW);
    let g = work_group();
    w.put_rows(&g, &[(5, 5), (900, 4), (3599, 3)]);
    let key = RowKey {
        license_arn: LICENSE.into(),
        sort_key: g.usage_sort_key_at(900),
    };
    w.mem
        .usage
        .finalize_row(
            &key,
            Some((RawStatus::RejectedClientSide, LATE_USAGE)),
            at(NOW),
        )
        .await
        .unwrap();
    let mut rewritten = w.row(&g, 900);
    rewritten.insert(
        a::METERING_PENDING.into(),
        awsmp_contract::row::AttrValue::s(HOUR),
    );
    w.put_row(rewritten);

    // WHEN a cleanup message without a status arrives
    assert!(
        deliver(&w, sqs_event("sqs-cleanup-without-status.json"))
            .await
            .is_empty()
    );

    // THEN only meteringPending goes: the row's own status is never restamped
    let row = w.row(&g, 900);
    assert!(!is_pending(&row));
    assert_eq!(attr(&row, a::METERING_STATUS_REASON), Some(LATE_USAGE));
    assert_eq!(attr(&w.row(&g, 5), a::METERING_STATUS), None);
    assert!(!is_pending(&w.row(&g, 5)));
}

#[tokio::test]
async fn malformed_cleanup_messages_fail_as_bad_messages() {
    let w = World::at(NOW);
    let undecodable = cleanup(&w.svc, "{\"keys\":").await.unwrap_err();
    assert_eq!(undecodable.kind(), "BadMessage");
    assert!(
        std::error::Error::source(&undecodable).is_some(),
        "the JSON error is kept"
    );
    let half = cleanup(&w.svc, r#"{"status":"Aggregated","keys":[]}"#)
        .await
        .unwrap_err();
    assert_eq!(half.kind(), "BadMessage");
    assert!(!half.is_retryable() && !undecodable.is_retryable());
}

#[tokio::test(start_paused = true)]
async fn throttled_updates_are_retried_inside_the_handler() {
    let w = World::at(NOW);
    let g = work_group();
    w.put_rows(&g, &[(5, 5), (900, 4), (3599, 3)]);
    w.mem.usage.faults.throttle("finalize_row", 4);
    assert!(
        deliver(&w, sqs_event("sqs-cleanup-message.json"))
            .await
            .is_empty()
    );
    assert!(SECONDS.iter().all(|&s| !is_pending(&w.row(&g, s))));
    assert_eq!(w.mem.usage.faults.injected(), 4);
}
