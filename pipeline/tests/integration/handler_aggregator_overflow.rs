//! A group-hour whose sum exceeds `BatchMeterUsage`'s `Quantity` maximum
//! (<https://docs.aws.amazon.com/marketplacemetering/latest/APIReference/API_UsageRecord.html>)
//! bills the maximum and records the remainder, never rejecting the whole hour.

use crate::handler_support;

use awsmp_contract::attrs as a;
use awsmp_contract::limits::marketplace::MAX_USAGE_QUANTITY;
use awsmp_contract::metrics;
use awsmp_contract::reasons::QUANTITY_ABOVE_API_MAXIMUM;
use awsmp_contract::status::RawStatus;
use awsmp_pipeline::handlers::aggregator::{AggregateOutcome, aggregate};
use handler_support::*;

fn work_body() -> String {
    sqs_event("sqs-work-message.json").records[0]
        .body
        .clone()
        .unwrap()
}

#[tokio::test]
async fn an_hour_above_the_api_maximum_bills_the_maximum() {
    let w = World::at(NOW);
    let g = work_group();
    w.put_rows(&g, &[(5, MAX_USAGE_QUANTITY), (900, 7)]);
    let out = aggregate(&w.svc, &work_body()).await.unwrap();
    assert_eq!(
        out,
        AggregateOutcome::Committed {
            quantity: MAX_USAGE_QUANTITY,
            rows: 2
        }
    );
    let item = w.aggregated(&g);
    assert_eq!(item.quantity, MAX_USAGE_QUANTITY);
    assert_eq!(item.overflow.map(|o| o.quantity), Some(7));
    assert_eq!(
        w.metrics
            .total(metrics::USAGE_QUANTITY_ABOVE_API_MAXIMUM.name()),
        7.0
    );
    let point = &w
        .metrics
        .points(metrics::USAGE_QUANTITY_ABOVE_API_MAXIMUM.name())[0];
    assert_eq!(point[metrics::REASON], QUANTITY_ABOVE_API_MAXIMUM);
    assert_ne!(
        attr(&w.row(&g, 5), a::METERING_STATUS),
        Some(RawStatus::RejectedClientSide.as_str())
    );
}
