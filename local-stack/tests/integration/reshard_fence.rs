//! A reshard never stalls the ingest fence: a shard of a stream is split on the local stack
//! while usage keeps arriving; once a child has published its watermark, the heartbeat's
//! schedule marks the closed parent drained, and the fence (the lowest watermark over the
//! stream's shards not drained) moves past the split (docs/guarantees.md, "the ingest
//! watermark fences every hour").
//!
//! Run: `awsmp-local up && set -a && . .awsmp-local/env && set +a &&
//! cargo test -p awsmp-local-stack --test integration reshard_fence:: -- --include-ignored`

use crate::common;

use anyhow::{Context, Result, ensure};
use aws_lambda_events::kinesis::KinesisEvent;
use aws_sdk_kinesis::primitives::Blob;
use awsmp_aws::watermark::{ShardWatermark, WatermarkStore};
use awsmp_consumer::Consumer;
use awsmp_local_stack::kinesis_esm::{EsmOptions, KinesisEsm};
use awsmp_local_stack::local::{LocalEnv, demo_account, demo_license_arn};
use awsmp_pipeline::handlers::discoverer::Fence;
use chrono::{DateTime, Duration, SecondsFormat, Utc};
use common::streams::{fresh_stream, wait_active};
use std::sync::Arc;

/// The starting hash key of the second half of the hash key range (2^127).
const HALF: &str = "170141183460469231731687303715884105728";

/// Put `n` plain JSON usage events (payload v1) into `stream`, half routed to each half of the
/// hash key range; returns when the last was accepted.
async fn produce(kinesis: &aws_sdk_kinesis::Client, stream: &str, n: usize) -> Result<()> {
    for i in 0..n {
        let event = serde_json::json!({
            "v": 1,
            "eventId": uuid::Uuid::new_v4().to_string(),
            "licenseArn": demo_license_arn(170),
            "customerAWSAccountId": demo_account(170),
            "dimension": "api_calls",
            "quantity": 1,
            "timestamp": Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true),
        });
        let hash_key = if i % 2 == 0 { "1" } else { HALF };
        kinesis
            .put_record()
            .stream_name(stream)
            .partition_key(format!("k{i}"))
            .explicit_hash_key(hash_key)
            .data(Blob::new(event.to_string()))
            .send()
            .await
            .context("PutRecord")?;
    }
    Ok(())
}

/// The stream's watermarks.
async fn watermarks(store: &dyn WatermarkStore, stream: &str) -> Result<Vec<ShardWatermark>> {
    let mut shards = store.shards(stream).await?;
    assert!(
        shards.iter().all(|s| s.stream == stream),
        "the Query returns the stream's partition only"
    );
    shards.sort_by(|a, b| a.shard_id.cmp(&b.shard_id));
    Ok(shards)
}

/// One heartbeat schedule (markers, then drained parents retired) and a drain of the stream.
async fn beat_and_consume(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
    esm: &mut KinesisEsm,
    consumer: &Consumer,
    store: &dyn WatermarkStore,
) -> Result<()> {
    awsmp_consumer::heartbeat::scheduled(kinesis, stream, Some(store)).await?;
    let report = esm
        .drain(|event: KinesisEvent| async move {
            Ok::<_, std::convert::Infallible>(consumer.handle(event).await)
        })
        .await?;
    ensure!(report.function_errors == 0, "{report:?}");
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn a_split_shard_is_drained_and_the_fence_keeps_moving() -> Result<()> {
    let _one = crate::common::STACK.lock().await;
    let env = LocalEnv::from_process();
    let kinesis = env.kinesis().await?;
    let config = awsmp_consumer::Config::from_env()?;
    let consumer =
        awsmp_consumer::adapters::dynamodb::consumer_from_config(&config, env.dynamodb().await?);
    let store: Arc<dyn WatermarkStore> = consumer
        .watermarks
        .clone()
        .context("AWSMP_INGEST_WATERMARK_TABLE must be set")?;
    let stream = fresh_stream(&kinesis, "reshard", 1).await?;
    let dir = tempfile::tempdir()?;
    let mut esm = KinesisEsm::new(
        kinesis.clone(),
        &stream,
        EsmOptions::default(),
        dir.path().join("esm.json"),
    )
    .await?;
    let settle = Duration::zero();

    // GIVEN usage consumed from the stream's one shard
    produce(&kinesis, &stream, 20).await?;
    beat_and_consume(&kinesis, &stream, &mut esm, &consumer, &*store).await?;
    let before = watermarks(&*store, &stream).await?;
    ensure!(before.len() == 1, "one shard: {before:?}");
    let parent = before[0].clone();
    // WHEN the shard is split and usage keeps arriving in both children
    kinesis
        .split_shard()
        .stream_name(&stream)
        .shard_to_split(&parent.shard_id)
        .new_starting_hash_key(HALF)
        .send()
        .await?;
    wait_active(&kinesis, &stream).await?;
    tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
    let after_split: DateTime<Utc> = Utc::now();
    produce(&kinesis, &stream, 20).await?;
    beat_and_consume(&kinesis, &stream, &mut esm, &consumer, &*store).await?;
    // THEN the children publish, and the heartbeat's next run retires the parent
    beat_and_consume(&kinesis, &stream, &mut esm, &consumer, &*store).await?;
    let shards = watermarks(&*store, &stream).await?;
    let (old, children): (Vec<_>, Vec<_>) =
        shards.iter().partition(|s| s.shard_id == parent.shard_id);
    assert_eq!(children.len(), 2, "both children published: {shards:?}");
    assert!(old[0].drained, "the closed parent is drained: {shards:?}");
    assert!(
        children
            .iter()
            .all(|c| !c.drained && c.applied_through >= after_split)
    );
    // AND the fence moved past the split instead of holding at the parent's last arrival
    let fence = Fence::over(&shards, settle);
    assert!(
        fence
            .low
            .is_some_and(|low| low >= after_split && low > parent.applied_through),
        "fence {fence:?}, parent's last watermark {}",
        parent.applied_through
    );
    assert!(fence.passes(after_split));
    kinesis
        .delete_stream()
        .stream_name(&stream)
        .send()
        .await
        .ok();
    for s in &shards {
        store.mark_drained(&s.stream, &s.shard_id).await?;
    }
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn a_shard_whose_records_were_never_applied_holds_the_fence() -> Result<()> {
    let _one = crate::common::STACK.lock().await;
    let env = LocalEnv::from_process();
    let kinesis = env.kinesis().await?;
    let config = awsmp_consumer::Config::from_env()?;
    let consumer =
        awsmp_consumer::adapters::dynamodb::consumer_from_config(&config, env.dynamodb().await?);
    let store = consumer
        .watermarks
        .clone()
        .context("AWSMP_INGEST_WATERMARK_TABLE must be set")?;
    let stream = fresh_stream(&kinesis, "unseen", 2).await?;
    // GIVEN usage in both shards, none of it consumed yet, and another stream in the table
    // whose shard of the same id has published
    produce(&kinesis, &stream, 10).await?;
    let produced_by = Utc::now();
    let other = format!("{stream}-other");
    store
        .advance(&other, "shardId-000000000000", produced_by)
        .await?;
    // WHEN the heartbeat's schedule runs
    awsmp_consumer::heartbeat::scheduled(&kinesis, &stream, Some(&*store)).await?;
    // THEN both shards are registered at the epoch (the other stream's item registers
    // nothing: the heartbeat reads its own stream's partition), and the fence lets no hour
    // through
    let shards = watermarks(&*store, &stream).await?;
    assert_eq!(shards.len(), 2, "{shards:?}");
    assert!(
        shards
            .iter()
            .all(|s| s.applied_through == DateTime::<Utc>::UNIX_EPOCH)
    );
    assert!(
        !Fence::over(&shards, Duration::zero())
            .passes(DateTime::<Utc>::UNIX_EPOCH + Duration::seconds(1))
    );
    // AND once the consumer applied both shards the fence is past the usage
    let dir = tempfile::tempdir()?;
    let mut esm = KinesisEsm::new(
        kinesis.clone(),
        &stream,
        EsmOptions::default(),
        dir.path().join("esm.json"),
    )
    .await?;
    beat_and_consume(&kinesis, &stream, &mut esm, &consumer, &*store).await?;
    let shards = watermarks(&*store, &stream).await?;
    assert!(
        Fence::over(&shards, Duration::zero()).passes(produced_by),
        "{shards:?}"
    );
    kinesis
        .delete_stream()
        .stream_name(&stream)
        .send()
        .await
        .ok();
    for s in &shards {
        store.mark_drained(&s.stream, &s.shard_id).await?;
    }
    store.mark_drained(&other, "shardId-000000000000").await?;
    Ok(())
}
