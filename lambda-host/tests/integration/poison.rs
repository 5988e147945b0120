//! The real consumer answering a batch item failure: a record whose usage row can never be
//! written (its dimension is so long that the row's sort key passes DynamoDB's 1,024-byte limit,
//! so every write of it is refused) is answered as the batch's `batchItemFailures` entry; the
//! event source mapping, one record a batch, checkpoints the record before it, retries only it
//! until its retries run out, sends it to the on-failure destination and goes on with the next
//! record. The rows of the other records are each written once, none of the poison.
//!
//! One record a batch: in a batch of several, this record fails the batch from its first record
//! (the answer names the batch's first record), so the retry would begin there.

use crate::common::{
    NEEDS_STACK, clients_env, delete_stream, fresh_license, own_stream, start_with, uuid_hex,
};
use crate::ingest::{usage_record, usage_rows};
use aws_lambda_events::event::streams::KinesisEventResponse;
use aws_sdk_dynamodb::types::AttributeValue;
use awsmp_loadtest::kinesis_esm::{EsmOptions, EsmReport, KinesisEsm};
use serde_json::Value;
use std::sync::Mutex;

/// A dimension whose usage row's sort key (`{account}#{dimension}#{second}`) passes DynamoDB's
/// 1,024-byte limit for a sort key
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

/// The consumer's process behind the mapping, one record a batch, two retries, no bisection:
/// the first sequence number of every batch delivered, every answer, the mapping's report.
async fn drain_one_record_a_batch(stream: &str) -> (Vec<String>, Vec<Value>, EsmReport) {
    let env = clients_env();
    // Without the billing archive: an archive write that fails fails the batch from its first
    // record (its object key carries the dimension too), which would hide where the row failed.
    let consumer = start_with("kinesis-consumer", &[("AWSMP_BILLING_ARCHIVE_BUCKET", "")]).await;
    let dir = std::env::temp_dir().join(format!("lambda-host-poison-{}", uuid_hex()));
    std::fs::create_dir_all(&dir).unwrap();
    let options = EsmOptions {
        batch_size: 1,
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

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the built binaries and the local stack (awsmp-local up); run by scripts/test"]
async fn a_record_whose_row_cannot_be_written_is_the_one_failure_and_the_mapping_resumes_there() {
    let _ = NEEDS_STACK;
    let stream = own_stream(1).await;
    let license = fresh_license();
    let account = "210000000046";
    let records = put_three(&stream, &license, account).await;
    let poison_seq = records[1].clone();
    let (firsts, answers, report) = drain_one_record_a_batch(&stream).await;
    delete_stream(&stream).await;
    // Batches: the first record, the poison three times (the first delivery and its two
    // retries), then the last record; the first record never again.
    assert_eq!(
        firsts,
        vec![
            records[0].clone(),
            poison_seq.clone(),
            poison_seq.clone(),
            poison_seq.clone(),
            records[2].clone()
        ],
        "{answers:?}"
    );
    // The real consumer answered each delivery of the poison with it as the batch item failure.
    for answer in &answers[1..4] {
        assert_eq!(
            answer["batchItemFailures"],
            serde_json::json!([{"itemIdentifier": poison_seq}]),
            "{answers:?}"
        );
    }
    for answer in [&answers[0], &answers[4]] {
        assert_eq!(
            answer["batchItemFailures"],
            serde_json::json!([]),
            "{answers:?}"
        );
    }
    assert_eq!(report.function_errors, 0, "{report:?}");
    assert_eq!(report.partial_failures, 3, "{report:?}");
    assert_eq!(
        report.discarded.len(),
        1,
        "the poison, after its retries: {report:?}"
    );
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
