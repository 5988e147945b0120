//! The main stack's metering path as processes on the local stack: a Kinesis batch of an hour
//! that has ended through kinesis-consumer, the work message through aggregator (an SQS batch
//! with a malformed message reported back as a batch item failure), its cleanup message through
//! cleanup; the discoverer on each EventBridge target's constant input.

use crate::common::{
    NEEDS_STACK, clients_env, drain_queue, fresh_license, own_queue, start, start_with,
};
use crate::ingest::{usage_record, usage_rows, usage_total};
use base64::Engine;
use chrono::{Duration, Timelike, Utc};
use serde_json::{Value, json};

/// An SQS event as Lambda's mapping delivers it.
pub fn sqs_event(queue: &str, bodies: &[String]) -> Value {
    let now = Utc::now().timestamp_millis().to_string();
    let records: Vec<Value> = bodies
        .iter()
        .enumerate()
        .map(|(i, body)| {
            json!({"messageId": format!("m-{i}-{}", uuid::Uuid::new_v4()), "receiptHandle": format!("rh-{i}"),
                   "body": body,
                   "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": now,
                                  "SenderId": "AROAEXAMPLE:awsmp", "ApproximateFirstReceiveTimestamp": now},
                   "messageAttributes": {}, "md5OfBody": "", "eventSource": "aws:sqs",
                   "eventSourceARN": format!("arn:aws:sqs:us-east-1:123456789012:{queue}"),
                   "awsRegion": "us-east-1"})
        })
        .collect();
    json!({ "Records": records })
}

/// The message ids a batch response reports as failed.
pub fn failed_ids(answer: &Value) -> Vec<String> {
    answer["batchItemFailures"]
        .as_array()
        .map(|l| {
            l.iter()
                .filter_map(|f| f["itemIdentifier"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// A Kinesis batch as the event source mapping delivers it: `license`'s events (10, 20, 30)
/// arrived at `arrival`.
fn kinesis_batch(license: &str, account: &str, arrival: chrono::DateTime<Utc>) -> Value {
    let records: Vec<Value> = (0..3u64)
        .map(|i| {
            let data = usage_record(license, account, &format!("p-{i}-{license}"), 10 * (i + 1)).to_string();
            let seq = format!("4959033827149025660855969253836157109592157598913658{i:04}");
            json!({"kinesis": {"kinesisSchemaVersion": "1.0",
                               "partitionKey": format!("{license}|{account}|api"),
                               "sequenceNumber": seq,
                               "data": base64::engine::general_purpose::STANDARD.encode(data),
                               "approximateArrivalTimestamp": arrival.timestamp_millis() as f64 / 1000.0},
                   "eventSource": "aws:kinesis", "eventVersion": "1.0",
                   "eventID": format!("shardId-000000000000:{seq}"), "eventName": "aws:kinesis:record",
                   "invokeIdentityArn": "arn:aws:iam::123456789012:role/consumer", "awsRegion": "us-east-1",
                   "eventSourceARN": "arn:aws:kinesis:us-east-1:123456789012:stream/awsmp-usage-events"})
        })
        .collect();
    json!({ "Records": records })
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the built binaries and the local stack (awsmp-local up); run by scripts/test"]
async fn an_ended_hour_goes_from_the_stream_to_an_aggregate_and_its_rows_are_cleaned() {
    let _ = NEEDS_STACK;
    let license = fresh_license();
    let account = "210000000044";
    // Arrived two hours ago (the consumer's timestamp policy is the arrival time).
    let arrival = Utc::now() - Duration::hours(2);
    let consumer = start("kinesis-consumer").await;
    let answer = consumer
        .invoke(&kinesis_batch(&license, account, arrival), None)
        .await
        .unwrap();
    consumer.stop().await;
    assert_eq!(answer["batchItemFailures"], json!([]), "{answer}");
    assert_eq!(usage_total(&license).await, 60);
    let hour = arrival
        .with_minute(0)
        .unwrap()
        .format("%Y-%m-%dT%H")
        .to_string();
    let cleanup_bodies = aggregate(&license, account, &hour).await;
    let cleanup = start("cleanup").await;
    let answer = cleanup
        .invoke(&sqs_event("awsmp-metering-cleanup", &cleanup_bodies), None)
        .await
        .unwrap();
    cleanup.stop().await;
    assert!(failed_ids(&answer).is_empty(), "{answer}");
    // Each raw row is finalized: stamped with the aggregation's status, off the pending index.
    let rows = usage_rows(&license).await;
    assert!(!rows.is_empty());
    for row in &rows {
        assert!(!row.contains_key("meteringPending"), "{row:?}");
        assert!(
            row.values()
                .any(|v| v.as_s().is_ok_and(|s| s == "Aggregated")),
            "{row:?}"
        );
    }
}

/// The aggregator on the hour's work message beside a malformed one: one aggregate of 60, the
/// malformed message its one batch item failure; returns the cleanup message it sent.
async fn aggregate(license: &str, account: &str, hour: &str) -> Vec<String> {
    let env = clients_env();
    let work = json!({"licenseArn": license, "customerAWSAccountId": account,
                      "dimension": "api", "hourBucket": hour})
    .to_string();
    let batch = sqs_event("awsmp-metering-work", &[work, "{not json".into()]);
    let bad_id = batch["Records"][1]["messageId"]
        .as_str()
        .unwrap()
        .to_owned();
    // The cleanup queue of the test's own, so no other test receives its message.
    let cleanup_queue = own_queue().await;
    let aggregator = start_with("aggregator", &[("AWSMP_CLEANUP_QUEUE_URL", &cleanup_queue)]).await;
    let answer = aggregator.invoke(&batch, None).await.unwrap();
    aggregator.stop().await;
    assert_eq!(failed_ids(&answer), vec![bad_id], "{answer}");
    let ddb = env.dynamodb().await.unwrap();
    let aggregated = ddb
        .query()
        .table_name(env.get("AWSMP_AGGREGATED_USAGE_TABLE").unwrap())
        .key_condition_expression("licenseArn = :l")
        .expression_attribute_values(
            ":l",
            aws_sdk_dynamodb::types::AttributeValue::S(license.to_owned()),
        )
        .send()
        .await
        .unwrap()
        .items
        .unwrap_or_default();
    assert_eq!(aggregated.len(), 1, "{aggregated:?}");
    let total = aggregated[0]
        .get("quantity")
        .and_then(|q| q.as_n().ok())
        .cloned();
    assert_eq!(total.as_deref(), Some("60"), "{aggregated:?}");

    // The aggregator's cleanup message, as the cleanup mapping would deliver it.
    let cleanup_bodies: Vec<String> = drain_queue(&cleanup_queue).await;
    assert_eq!(
        cleanup_bodies.len(),
        1,
        "the aggregator sent one cleanup message"
    );
    cleanup_bodies
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the built binaries and the local stack (awsmp-local up); run by scripts/test"]
async fn the_discoverer_answers_each_schedule_target_with_its_input() {
    let f = crate::common::rendered().remove("discoverer").unwrap();
    assert_eq!(f.schedules.len(), 31);
    let discoverer = start("discoverer").await;
    for s in &f.schedules {
        let input = s
            .input
            .clone()
            .expect("each discoverer target has a constant input");
        let answer = discoverer.invoke(&input, None).await;
        assert!(answer.is_ok(), "{}: {answer:?}", s.target);
    }
    // An input no target sends is refused by the function, not the host.
    let refused = discoverer
        .invoke(&json!({"mode": "meter", "hourOffset": 1, "x": 1}), None)
        .await;
    discoverer.stop().await;
    assert!(
        matches!(refused, Err(awsmp_lambda_host::Error::Function { .. })),
        "{refused:?}"
    );
}
