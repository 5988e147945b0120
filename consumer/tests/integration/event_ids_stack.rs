//! Against the local stack: one event put plain through the SDK and again inside a KPL
//! aggregate with other events (a caller re-recording a `maybe_delivered` event with its
//! original id) is billed once, for a caller-supplied and for a generated id.
//!
//! Run: `awsmp-local up && set -a && . .awsmp-local/env && set +a &&
//! cargo test -p awsmp-consumer --test integration event_ids_stack:: -- --include-ignored`

use std::time::Duration;

use anyhow::{Context, Result, bail};
use aws_lambda_events::event::kinesis::KinesisEvent;
use aws_lambda_events::event::streams::KinesisEventResponse;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::StreamStatus;
use awsmp_consumer::Config;
use awsmp_consumer::adapters::dynamodb::consumer_from_config;
use awsmp_contract::Event;
use awsmp_contract::event_id::GeneratedId;
use awsmp_contract::wire::{encode_aggregated, encode_event};
use awsmp_local_stack::kinesis_esm::{EsmOptions, KinesisEsm};
use awsmp_local_stack::local::LocalEnv;
use awsmp_producer::partition::partition_key;
use chrono::Utc;

async fn create_stream(client: &aws_sdk_kinesis::Client) -> Result<String> {
    let name = format!("awsmp-event-ids-{}", uuid::Uuid::new_v4().simple());
    client
        .create_stream()
        .stream_name(&name)
        .shard_count(1)
        .send()
        .await
        .context("CreateStream")?;
    for _ in 0..200 {
        let d = client
            .describe_stream_summary()
            .stream_name(&name)
            .send()
            .await?;
        if d.stream_description_summary().map(|s| s.stream_status()) == Some(&StreamStatus::Active)
        {
            return Ok(name);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("stream {name} did not become ACTIVE")
}

/// Put `ids[0]` (5) plain, then an aggregate of `ids[1]` (2), `ids[0]` (5), `ids[2]` (3).
async fn put_plain_and_repacked(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
    license: &str,
    ids: [String; 3],
) -> Result<()> {
    let pk = partition_key(license, "210987654321", "api");
    let now = Utc::now();
    let payload = |id: &str, q| {
        encode_event(&Event::new(license, "210987654321", "api", q, now).with_event_id(id))
    };
    let plain = payload(&ids[0], 5);
    kinesis
        .put_record()
        .stream_name(stream)
        .partition_key(&pk)
        .data(Blob::new(plain.clone()))
        .send()
        .await?;
    let (b, c) = (payload(&ids[1], 2), payload(&ids[2], 3));
    let agg = encode_aggregated([
        (pk.as_str(), None, &b[..]),
        (pk.as_str(), None, &plain[..]),
        (pk.as_str(), None, &c[..]),
    ]);
    kinesis
        .put_record()
        .stream_name(stream)
        .partition_key(&pk)
        .data(Blob::new(agg.to_vec()))
        .send()
        .await?;
    Ok(())
}

async fn billed(ddb: &aws_sdk_dynamodb::Client, table: &str, license: &str) -> Result<u64> {
    let items = ddb
        .query()
        .table_name(table)
        .key_condition_expression("licenseArn = :l")
        .expression_attribute_values(":l", AttributeValue::S(license.to_owned()))
        .consistent_read(true)
        .send()
        .await?;
    let mut total = 0;
    for item in items.items() {
        total += item["quantity"].as_n().unwrap().parse::<u64>()?;
    }
    Ok(total)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn one_event_put_plain_and_inside_an_aggregate_is_billed_once() -> Result<()> {
    let env = LocalEnv::from_process();
    let (kinesis, ddb) = (env.kinesis().await?, env.dynamodb().await?);
    let config = Config::from_env()?;
    let stream = create_stream(&kinesis).await?;
    let run = uuid::Uuid::new_v4().simple().to_string();
    let license = |i: u8| {
        format!(
            "arn:aws:license-manager::123456789012:license:l-{}{i:02x}",
            &run[..30]
        )
    };
    let epoch = u128::from_str_radix(&run, 16)?;
    let generated = |seq| {
        GeneratedId {
            epoch,
            lane: 0,
            seq,
        }
        .to_string()
    };
    // GIVEN a caller id and a generated id, each put plain and again re-packed with new events,
    let supplied = [0, 1, 2].map(|k| format!("{run}-order-{k}"));
    put_plain_and_repacked(&kinesis, &stream, &license(0), supplied).await?;
    put_plain_and_repacked(&kinesis, &stream, &license(1), [1, 2, 3].map(generated)).await?;
    // WHEN the mapping delivers the stream to the consumer, one record per batch,
    let consumer = consumer_from_config(&config, ddb.clone());
    let dir = tempfile::tempdir()?;
    let options = EsmOptions {
        batch_size: 1,
        ..EsmOptions::default()
    };
    let mut esm = KinesisEsm::new(
        kinesis.clone(),
        &stream,
        options,
        dir.path().join("esm.json"),
    )
    .await?;
    let c = &consumer;
    let handler = |event: KinesisEvent| async move {
        Ok::<KinesisEventResponse, std::convert::Infallible>(c.handle(event).await)
    };
    esm.drain(handler).await?;
    // THEN each event is billed once.
    assert_eq!(billed(&ddb, &config.usage_table, &license(0)).await?, 10);
    assert_eq!(billed(&ddb, &config.usage_table, &license(1)).await?, 10);
    kinesis.delete_stream().stream_name(&stream).send().await?;
    Ok(())
}
