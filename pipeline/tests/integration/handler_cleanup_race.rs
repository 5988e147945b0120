//! The aggregation race over in-memory stores: a row grows between the aggregator's read and
//! its cleanup (or its re-visit). The difference is recorded as late usage with its exact
//! quantity, never stamped `Aggregated` as if it had been billed (docs/guarantees.md,
//! "Cleanup never stamps what was not billed").

use crate::handler_support;

use awsmp_contract::attrs as a;
use awsmp_contract::keys::GroupKey;
use awsmp_contract::metrics;
use awsmp_contract::reasons::LATE_USAGE;
use awsmp_contract::row::AttrValue;
use awsmp_contract::status::{RawStatus, aggregated_reason};
use awsmp_pipeline::handlers::aggregator::{AggregateOutcome, aggregate};
use awsmp_pipeline::handlers::cleanup::cleanup;
use handler_support::*;

fn work_body() -> String {
    sqs_event("sqs-work-message.json").records[0]
        .body
        .clone()
        .unwrap()
}

/// The consumer's `UpdateItem` on a pending row: `quantity += delta`, `rowVersion += 1`.
fn grow(w: &World, g: &GroupKey, second: u32, delta: u64) {
    let mut row = w.row(g, second);
    let q: u64 = row[a::QUANTITY].as_n().unwrap().parse().unwrap();
    row.insert(a::QUANTITY.into(), AttrValue::n(q + delta));
    w.put_row(row);
}

fn number(row: &awsmp_contract::row::RawUsageRow, name: &str) -> Option<u64> {
    row.get(name)?.as_n()?.parse().ok()
}

#[tokio::test]
async fn a_row_that_grew_before_cleanup_records_the_difference_as_late_usage() {
    // GIVEN two rows folded into a committed record of 10
    let w = World::at(NOW);
    let g = work_group();
    w.put_rows(&g, &[(5, 5), (900, 5)]);
    let out = aggregate(&w.svc, &work_body()).await.unwrap();
    assert_eq!(
        out,
        AggregateOutcome::Committed {
            quantity: 10,
            rows: 2
        }
    );

    // WHEN the consumer adds 3 to a row before cleanup runs, then cleanup runs twice
    grow(&w, &g, 900, 3);
    let messages = w.mem.cleanup_queue.take();
    assert_eq!(messages.len(), 1);
    for _ in 0..2 {
        // Each run finalizes both rows, the grown one too (as late usage), and says so.
        assert_eq!(cleanup(&w.svc, &messages[0]).await.unwrap(), 2);
    }

    // THEN the untouched row is Aggregated; the grown one keeps what was billed apart from
    // the 3 units that were not, recorded once as late usage
    let fine = w.row(&g, 5);
    assert_eq!(
        attr(&fine, a::METERING_STATUS),
        Some(RawStatus::Aggregated.as_str())
    );
    assert_eq!(number(&fine, a::LATE_QUANTITY), None);
    let grown = w.row(&g, 900);
    assert!(!is_pending(&grown));
    assert_eq!(
        attr(&grown, a::METERING_STATUS),
        Some(RawStatus::Aggregated.as_str())
    );
    assert_eq!(
        attr(&grown, a::METERING_STATUS_REASON),
        Some(aggregated_reason(10, 2).as_str())
    );
    assert_eq!(number(&grown, a::FOLDED_QUANTITY), Some(5));
    assert_eq!(number(&grown, a::LATE_QUANTITY), Some(3));
    assert_eq!(attr(&grown, a::LATE_REASON), Some(LATE_USAGE));
    assert_eq!(w.metrics.total(metrics::LATE_USAGE.name()), 3.0);
    assert_eq!(w.aggregated(&g).quantity, 10);
}

#[tokio::test]
async fn a_lost_cleanup_revisit_records_what_a_folded_row_gained() {
    // GIVEN a committed record of 10 whose cleanup message was lost
    let w = World::at(NOW);
    let g = work_group();
    w.put_rows(&g, &[(5, 5), (900, 5)]);
    aggregate(&w.svc, &work_body()).await.unwrap();
    w.mem.cleanup_queue.take();

    // WHEN a folded row grows and the group is visited again (twice)
    grow(&w, &g, 5, 4);
    let out = aggregate(&w.svc, &work_body()).await.unwrap();
    aggregate(&w.svc, &work_body()).await.unwrap();

    // THEN both rows are finalized, the 4 units are late usage exactly once
    assert_eq!(
        out,
        AggregateOutcome::Revisited {
            cleaned: 2,
            late_rows: 1,
            late_quantity: 4
        }
    );
    let grown = w.row(&g, 5);
    assert!(!is_pending(&grown));
    assert_eq!(number(&grown, a::FOLDED_QUANTITY), Some(5));
    assert_eq!(number(&grown, a::LATE_QUANTITY), Some(4));
    assert!(!is_pending(&w.row(&g, 900)));
    assert_eq!(number(&w.row(&g, 900), a::LATE_QUANTITY), None);
    assert_eq!(w.metrics.total(metrics::LATE_USAGE.name()), 4.0);
}

#[tokio::test]
async fn a_message_of_an_older_version_without_folded_quantities_stamps_by_key() {
    let w = World::at(NOW);
    let g = work_group();
    w.put_rows(&g, &[(5, 5), (900, 4), (3599, 3)]);
    let body = sqs_event("sqs-cleanup-message-without-folded.json").records[0]
        .body
        .clone()
        .unwrap();
    assert_eq!(cleanup(&w.svc, &body).await.unwrap(), 3);
    for second in [5, 900, 3599] {
        let row = w.row(&g, second);
        assert!(!is_pending(&row));
        assert_eq!(
            attr(&row, a::METERING_STATUS_REASON),
            Some(aggregated_reason(12, 3).as_str())
        );
        assert_eq!(number(&row, a::LATE_QUANTITY), None);
    }
}

#[tokio::test]
async fn folded_quantities_that_do_not_match_the_keys_are_a_bad_message() {
    let w = World::at(NOW);
    let body = sqs_event("sqs-cleanup-message.json").records[0]
        .body
        .clone()
        .unwrap()
        .replace("\"folded\":[5,4,3]", "\"folded\":[5,4]");
    let err = cleanup(&w.svc, &body).await.unwrap_err();
    assert!(err.to_string().contains("folded"), "{err}");
}
