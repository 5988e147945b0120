//! One contract for the ingest-watermark store, run against the in-memory twin (always) and
//! the DynamoDB adapter on the local stack (`#[ignore]`d): watermarks never move backwards,
//! a drained shard stays drained, every shard of a stream is listed and no other stream's.
//!
//! Run: `awsmp-local up && set -a && . .awsmp-local/env && set +a &&
//! cargo test -p awsmp-consumer --test integration watermark_contract:: -- --include-ignored`

use anyhow::Result;
use awsmp_aws::watermark::DynamoDbWatermarkStore;
use awsmp_aws::watermark::MemoryWatermarkStore;
use awsmp_aws::watermark::WatermarkStore;
use awsmp_local_stack::local::LocalEnv;
use chrono::{DateTime, Duration, TimeZone, Utc};

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap() + Duration::milliseconds(250)
}

/// The contract, on streams named with `run` so runs on one stack do not meet.
async fn contract(store: &dyn WatermarkStore, run: &str) -> Result<()> {
    let (stream, other) = (format!("{run}-usage"), format!("{run}-other"));
    let (a, b) = ("shardId-000000000000", "shardId-000000000001");
    assert!(
        store.advance(&stream, a, t0()).await?,
        "a first watermark is written"
    );
    assert!(
        store
            .advance(&stream, a, t0() + Duration::seconds(5))
            .await?
    );
    assert!(!store.advance(&stream, a, t0()).await?, "never backwards");
    assert!(
        !store
            .advance(&stream, a, t0() + Duration::seconds(5))
            .await?,
        "equal is no move"
    );
    assert!(
        store.advance(&other, a, t0()).await?,
        "the same shard id of another stream is another item"
    );
    assert!(store.advance(&stream, b, t0() - Duration::hours(1)).await?);
    store.mark_drained(&stream, b).await?;
    assert!(
        store.advance(&stream, b, t0()).await?,
        "a drained shard still moves forward"
    );
    store.mark_drained(&other, b).await?;
    let listed = |shards: Vec<awsmp_aws::watermark::ShardWatermark>| {
        let mut out: Vec<_> = shards
            .into_iter()
            .map(|s| (s.stream, s.shard_id, s.applied_through, s.drained))
            .collect();
        out.sort();
        out
    };
    assert_eq!(
        listed(store.shards(&stream).await?),
        [
            (
                stream.clone(),
                a.to_owned(),
                t0() + Duration::seconds(5),
                false
            ),
            (stream.clone(), b.to_owned(), t0(), true)
        ]
    );
    assert_eq!(
        listed(store.shards(&other).await?),
        [
            (other.clone(), a.to_owned(), t0(), false),
            (
                other.clone(),
                b.to_owned(),
                DateTime::<Utc>::UNIX_EPOCH,
                true
            )
        ],
        "a shard drained before it published is listed at the epoch"
    );
    assert!(
        store.shards(&format!("{run}-none")).await?.is_empty(),
        "a stream without watermarks has none"
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
