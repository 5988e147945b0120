//! The real consumer answering a batch item failure: a record whose usage row cannot be written
//! (a row of another shape already holds its key, so DynamoDB refuses the update) is the batch's
//! one `batchItemFailures` entry; the event source mapping checkpoints the records before it and
//! retries from it, never delivering an earlier record again, until its retries run out and it
//! goes to the on-failure destination. The rows of the other records are each written once.

use crate::common::{
    NEEDS_STACK, clients_env, delete_stream, fresh_license, own_stream, start, uuid_hex,
};
use crate::ingest::{usage_record, usage_rows};
use aws_lambda_events::event::streams::KinesisEventResponse;
use aws_sdk_dynamodb::types::AttributeValue;
use awsmp_loadtest::kinesis_esm::{EsmOptions, KinesisEsm};
use std::sync::Mutex;

/// Put `license`'s events on dimensions `a`, `poison`, `b` (quantities 1, 2, 4) in that order on
/// `stream`; returns each record's sequence number and arrival second.
async fn put_three(stream: &str, license: &str, account: &str) -> Vec<(String, String)> {
    let kinesis = clients_env().kinesis().await.unwrap();
    let mut out = Vec::new();
    for (i, (dimension, quantity)) in [("a", 1), ("poison", 2), ("b", 4)].into_iter().enumerate() {
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
        out.push((put.sequence_number().to_owned(), dimension.to_owned()));
    }
    out
}

/// The arrival second of the record `seq` (the consumer's timestamp policy is the arrival time).
async fn arrival_second(stream: &str, seq: &str) -> String {
    let kinesis = clients_env().kinesis().await.unwrap();
    let shards = kinesis
        .list_shards()
        .stream_name(stream)
        .send()
        .await
        .unwrap();
    let shard = shards.shards()[0].shard_id().to_owned();
    let it = kinesis
        .get_shard_iterator()
        .stream_name(stream)
        .shard_id(shard)
        .shard_iterator_type(aws_sdk_kinesis::types::ShardIteratorType::AtSequenceNumber)
        .starting_sequence_number(seq)
        .send()
        .await
        .unwrap();
    let got = kinesis
        .get_records()
        .shard_iterator(it.shard_iterator().unwrap())
        .send()
        .await
        .unwrap();
    let at = got.records()[0].approximate_arrival_timestamp().unwrap();
    chrono::DateTime::from_timestamp(at.secs(), 0)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%S")
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the built binaries and the local stack (awsmp-local up); run by scripts/test"]
async fn a_record_whose_row_cannot_be_written_is_the_one_failure_and_the_mapping_resumes_there() {
    let _ = NEEDS_STACK;
    let env = clients_env();
    let stream = own_stream(1).await;
    let license = fresh_license();
    let account = "210000000046";
    let records = put_three(&stream, &license, account).await;
    let poison_seq = records[1].0.clone();
    // The poison: a row at the key of the second record's row whose quantity is a string, so the
    // consumer's `ADD quantity` is refused by DynamoDB.
    let second = arrival_second(&stream, &poison_seq).await;
    env.dynamodb()
        .await
        .unwrap()
        .put_item()
        .table_name(env.get("AWSMP_USAGE_TABLE").unwrap())
        .item("licenseArn", AttributeValue::S(license.clone()))
        .item(
            "customerAWSAccountId_dimension_timestamp",
            AttributeValue::S(format!("{account}#poison#{second}")),
        )
        .item("quantity", AttributeValue::S("not a number".into()))
        .send()
        .await
        .unwrap();
    let consumer = start("kinesis-consumer").await;
    let dir = std::env::temp_dir().join(format!("lambda-host-poison-{}", uuid_hex()));
    std::fs::create_dir_all(&dir).unwrap();
    let options = EsmOptions {
        max_retry_attempts: Some(2),
        bisect_on_error: false,
        retry_backoff: std::time::Duration::from_millis(10),
        ..EsmOptions::default()
    };
    let mut esm = KinesisEsm::new(
        env.kinesis().await.unwrap(),
        &stream,
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
    delete_stream(&stream).await;
    let firsts = firsts.into_inner().unwrap();
    let answers = answers.into_inner().unwrap();
    // The real consumer answered the poison record, and only it, as the batch item failure.
    assert_eq!(
        answers[0]["batchItemFailures"],
        serde_json::json!([{"itemIdentifier": poison_seq}]),
        "{answers:?}"
    );
    // The first batch began at the first record; every retry began at the poison record.
    assert_eq!(firsts[0], records[0].0, "{firsts:?}");
    assert!(firsts.len() >= 2, "{firsts:?} {report:?}");
    assert!(
        firsts[1..].iter().all(|s| *s == poison_seq),
        "retries resume at the failed record: {firsts:?}"
    );
    assert_eq!(report.function_errors, 0, "{report:?}");
    assert!(report.partial_failures >= 2, "{report:?}");
    assert_eq!(
        report.discarded.len(),
        1,
        "the poison, after its retries: {report:?}"
    );
    // Rows: `a` and `b` once each; the poison row as it was.
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
    assert_eq!(
        quantity("poison"),
        vec![AttributeValue::S("not a number".into())],
        "{rows:?}"
    );
}
