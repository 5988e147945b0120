//! The aggregation race on the local stack, through the real SDK and the stage handlers: a
//! usage-row increment that lands after the aggregator read its group-hour but before cleanup
//! ran is recorded as late usage with its exact quantity — never stamped `Aggregated` as if it
//! had been billed (docs/guarantees.md, "Cleanup never stamps what was not billed").

use crate::common;

use anyhow::{Context, Result, ensure};
use aws_sdk_dynamodb::types::AttributeValue as Av;
use awsmp_contract::attrs as a;
use awsmp_contract::keys::GroupKey;
use awsmp_contract::reasons::LATE_USAGE;
use awsmp_contract::row::RawUsageRow;
use common::*;
use serde_json::json;

/// The consumer's `UpdateItem` on a pending row: `ADD quantity`, `rowVersion`, only while
/// `meteringPending` is set (consumer/src/domain/row/).
async fn consumer_adds(st: &Stack, r: &RawUsageRow, delta: u64) -> Result<()> {
    st.ddb
        .update_item()
        .table_name(&st.usage_table)
        .key(
            a::LICENSE_ARN,
            Av::S(r[a::LICENSE_ARN].as_s().unwrap().into()),
        )
        .key(a::USAGE_SORT_KEY, Av::S(sort_key(r)))
        .condition_expression("attribute_exists(meteringPending)")
        .update_expression("ADD quantity :d, rowVersion :one")
        .expression_attribute_values(":d", Av::N(delta.to_string()))
        .expression_attribute_values(":one", Av::N("1".into()))
        .send()
        .await
        .context("the consumer's increment")?;
    Ok(())
}

fn number(r: &RawUsageRow, name: &str) -> Option<u64> {
    r.get(name)?.as_n()?.parse().ok()
}

/// One work message for `g`, as the discoverer enqueues it, as an SQS event.
fn work_event(g: &GroupKey) -> serde_json::Value {
    json!({"Records": [{"messageId": "exactness-cleanup-1", "body": g.to_work_message()}]})
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn an_increment_between_fold_and_cleanup_is_late_usage_not_stamped() -> Result<()> {
    let _one = STACK.lock().await;
    let st = Stack::new().await?;
    let runner = runner(&[]).await?;

    // GIVEN two rows (5 + 5) of one group-hour, aggregated: the record holds 10
    let g = group(30, "api_calls", "2032-05-04T10");
    let rows = vec![row(&g, 5, 5), row(&g, 900, 5)];
    st.put_rows(&rows).await?;
    runner.set_time(utc(2032, 5, 4, 12, 0, 0)).await?;
    runner.invoke("aggregator", work_event(&g)).await?;
    ensure!(st.record(&g).await?.quantity == 10, "committed 10");

    // WHEN the consumer adds 3 to a row before cleanup runs, then every stage runs (twice)
    consumer_adds(&st, &rows[1], 3).await?;
    runner.tick(utc(2032, 5, 4, 12, 5, 0)).await?;
    runner.tick(utc(2032, 5, 4, 12, 10, 0)).await?;

    // THEN 10 is billed, the grown row records the 3 units it holds beyond that as late usage
    let line = st.ledger(&g.license_arn).await?.billed(&g)?.clone();
    ensure!(line["quantity"] == 10, "billed {}", line["quantity"]);
    let grown = st.raw(&g.license_arn, &sort_key(&rows[1])).await?;
    ensure!(!grown.contains_key(a::METERING_PENDING), "finalized");
    assert_eq!(number(&grown, a::QUANTITY), Some(8));
    assert_eq!(number(&grown, a::FOLDED_QUANTITY), Some(5));
    assert_eq!(number(&grown, a::LATE_QUANTITY), Some(3));
    assert_eq!(
        grown.get(a::LATE_REASON).and_then(|v| v.as_s()),
        Some(LATE_USAGE)
    );
    let fine = st.raw(&g.license_arn, &sort_key(&rows[0])).await?;
    assert_eq!(number(&fine, a::LATE_QUANTITY), None);
    assert_eq!(runner.metrics.total("LateUsage"), 3.0);
    Ok(())
}
