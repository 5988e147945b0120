//! One contract for the ingest-watermark store, run against the in-memory twin (always) and
//! the DynamoDB adapter on the local stack (`#[ignore]`d): watermarks never move backwards,
//! a drained shard stays drained, every shard is listed.
//!
//! Run: `awsmp-local up && set -a && . .awsmp-local/env && set +a &&
//! cargo test -p awsmp-consumer --test watermark_contract -- --include-ignored`

use anyhow::Result;
use awsmp_loadtest::local::LocalEnv;
use awsmp_pipeline::adapters::dynamodb::DynamoDbWatermarkStore;
use awsmp_pipeline::adapters::memory::MemoryWatermarkStore;
use awsmp_pipeline::ports::WatermarkStore;
use chrono::{DateTime, Duration, TimeZone, Utc};

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap() + Duration::milliseconds(250)
}

/// The contract, on shards named with `run` so runs on one stack do not meet.
async fn contract(store: &dyn WatermarkStore, run: &str) -> Result<()> {
    let (a, b) = (format!("{run}-shardId-0"), format!("{run}-shardId-1"));
    assert!(
        store.advance(&a, t0()).await?,
        "a first watermark is written"
    );
    assert!(store.advance(&a, t0() + Duration::seconds(5)).await?);
    assert!(!store.advance(&a, t0()).await?, "never backwards");
    assert!(
        !store.advance(&a, t0() + Duration::seconds(5)).await?,
        "equal is no move"
    );
    assert!(store.advance(&b, t0() - Duration::hours(1)).await?);
    store.mark_drained(&b).await?;
    assert!(
        store.advance(&b, t0()).await?,
        "a drained shard still moves forward"
    );
    let mut mine: Vec<_> = store
        .shards()
        .await?
        .into_iter()
        .filter(|s| s.shard_id.starts_with(run))
        .map(|s| (s.shard_id, s.applied_through, s.drained))
        .collect();
    mine.sort();
    assert_eq!(
        mine,
        [(a, t0() + Duration::seconds(5), false), (b, t0(), true)]
    );
    Ok(())
}

#[tokio::test]
async fn the_memory_twin_keeps_the_contract() -> Result<()> {
    contract(&MemoryWatermarkStore::new(), "mem").await
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn the_dynamodb_adapter_keeps_the_contract() -> Result<()> {
    let env = LocalEnv::from_process();
    let table = std::env::var("AWSMP_INGEST_WATERMARK_TABLE")?;
    let store = DynamoDbWatermarkStore::new(env.dynamodb().await?, table);
    let run = uuid::Uuid::new_v4().simple().to_string();
    contract(&store, &run).await
}
