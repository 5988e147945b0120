//! The real consumer and an event whose usage row could never be written: its dimension is so
//! long (1,100 bytes) that the row's sort key would pass DynamoDB's 1,024-byte limit. The
//! consumer refuses it before any write, with its reason code (`DimensionTooLong`) in the
//! rejected-events table, like any other invalid event; the batch — three records, the bad one
//! in the middle — answers no batch item failure, so the event source mapping never retries it,
//! and the rows of the records around it are written once.

use crate::common::{
    NEEDS_STACK, clients_env, delete_stream, fresh_license, own_stream, start, uuid_hex,
};
use crate::ingest::{usage_record, usage_rows};
use aws_lambda_events::event::streams::KinesisEventResponse;
use aws_sdk_dynamodb::types::AttributeValue;
use awsmp_local_stack::kinesis_esm::{EsmOptions, EsmReport, KinesisEsm};
use serde_json::Value;
use std::sync::Mutex;

/// A dimension whose usage row's sort key (`{account}#{dimension}#{second}`) would pass
/// DynamoDB's 1,024-byte limit for a sort key
/// (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html#limits-partition-sort-keys>).
fn poison_dimension() -> String {
    "x".repeat(1100)
}

/// Put `license`'s events on dimensions `a`, the poison one, `b` (quantities 1, 2, 4) in that
/// order on `stream`; returns each record's sequence number.
async fn put_three(stream: &str, license: &str, account: &str) -> Vec<String> {
    let kinesis = clients_env().kinesis().await.unwrap();
    let mut out = Vec::new();
    let poison = poison_dimension();
    for (i, (dimension, quantity)) in [("a", 1), (poison.as_str(), 2), ("b", 4)]
        .into_iter()
        .enumerate()
    {
        let mut rec = usage_record(license, account, &format!("p-{i}-{license}"), quantity);
        rec["dimension"] = dimension.into();
        let put = kinesis
            .put_record()
            .stream_name(stream)
            .partition_key(format!("{license}|{account}"))
            .data(aws_sdk_kinesis::primitives::Blob::new(rec.to_string()))
            .send()
            .await
            .unwrap();
        out.push(put.sequence_number().to_owned());
    }
    out
}

/// The consumer's process (as rendered: the billing archive on) behind the mapping, ten records
/// a batch, two retries, no bisection: the first sequence number of every batch delivered,
/// every answer, the mapping's report.
async fn drain(stream: &str) -> (Vec<String>, Vec<Value>, EsmReport) {
    let env = clients_env();
    let consumer = start("kinesis-consumer").await;
    let dir = std::env::temp_dir().join(format!("lambda-host-poison-{}", uuid_hex()));
    std::fs::create_dir_all(&dir).unwrap();
    let options = EsmOptions {
        batch_size: 10,
        max_retry_attempts: Some(2),
        bisect_on_error: false,
        retry_backoff: std::time::Duration::from_millis(10),
        ..EsmOptions::default()
    };
    let mut esm = KinesisEsm::new(
        env.kinesis().await.unwrap(),
        stream,
        options,
        dir.join("checkpoints.json"),
    )
    .await
    .unwrap();
    // The first sequence number of every batch delivered, and every answer.
    let firsts = Mutex::new(Vec::new());
    let answers = Mutex::new(Vec::new());
    let (f, firsts_ref, answers_ref) = (&consumer, &firsts, &answers);
    let report = esm
        .drain(|event| async move {
            let first = event.records[0].kinesis.sequence_number.clone();
            firsts_ref.lock().unwrap().push(first);
            let payload = serde_json::to_value(&event).map_err(|e| e.to_string())?;
            let answer = f.invoke(&payload, None).await.map_err(|e| e.to_string())?;
            answers_ref.lock().unwrap().push(answer.clone());
            serde_json::from_value::<KinesisEventResponse>(answer).map_err(|e| e.to_string())
        })
        .await
        .unwrap();
    consumer.stop().await;
    std::fs::remove_dir_all(&dir).ok();
    (
        firsts.into_inner().unwrap(),
        answers.into_inner().unwrap(),
        report,
    )
}

/// The rejected-events items of the record `seq` (a test's scan of its own few items).
async fn rejected_items(seq: &str) -> Vec<std::collections::HashMap<String, AttributeValue>> {
    let env = clients_env();
    let ddb = env.dynamodb().await.unwrap();
    ddb.scan()
        .table_name(env.get("AWSMP_REJECTED_EVENTS_TABLE").unwrap())
        .filter_expression("sequenceNumber = :s")
        .expression_attribute_values(":s", AttributeValue::S(seq.into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .items
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the built binaries and the local stack (awsmp-local up); run by scripts/test"]
async fn an_event_whose_row_cannot_be_written_is_refused_and_the_batch_around_it_written_once() {
    let _ = NEEDS_STACK;
    let stream = own_stream(1).await;
    let license = fresh_license();
    let account = "210000000046";
    let records = put_three(&stream, &license, account).await;
    let poison_seq = records[1].clone();
    let (firsts, answers, report) = drain(&stream).await;
    delete_stream(&stream).await;
    // One batch of the three records, answered without a batch item failure: nothing retried.
    assert_eq!(firsts, vec![records[0].clone()], "{answers:?}");
    assert_eq!(
        answers[0]["batchItemFailures"],
        serde_json::json!([]),
        "{answers:?}"
    );
    assert_eq!(report.function_errors, 0, "{report:?}");
    assert_eq!(report.partial_failures, 0, "{report:?}");
    assert!(report.discarded.is_empty(), "{report:?}");
    // The poison is refused with its reason code and its quantity.
    let refused = rejected_items(&poison_seq).await;
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(
        refused[0]["reason"],
        AttributeValue::S("DimensionTooLong".into())
    );
    // Refused by the event rules, it keeps its bytes (its 2 units with them).
    let data = refused[0]["data"].as_s().unwrap();
    let data = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, data).unwrap();
    let event: Value = serde_json::from_slice(&data).unwrap();
    assert_eq!(event["quantity"], 2, "{event}");
    // Rows: `a` and `b` once each, none of the poison record.
    let rows = usage_rows(&license).await;
    let quantity = |dimension: &str| -> Vec<AttributeValue> {
        rows.iter()
            .filter(|r| {
                r["customerAWSAccountId_dimension_timestamp"]
                    .as_s()
                    .is_ok_and(|k| k.contains(&format!("#{dimension}#")))
            })
            .filter_map(|r| r.get("quantity").cloned())
            .collect()
    };
    assert_eq!(
        quantity("a"),
        vec![AttributeValue::N("1".into())],
        "{rows:?}"
    );
    assert_eq!(
        quantity("b"),
        vec![AttributeValue::N("4".into())],
        "{rows:?}"
    );
    assert_eq!(rows.len(), 2, "no row of the poison record: {rows:?}");
}
