//! The `DedupStore` contract, one body run against the in-memory store (plain `cargo test`)
//! and the DynamoDB store on the local stack (`#[ignore]`d; `scripts/test` runs it): a claim
//! tells a first claim, a replay by the same record, a duplicate from another record and a
//! claim after the first one lapsed apart (a lapsed claim is claimable even while the item is
//! still there, since dynalite does not expire items); generated-id lanes are written by
//! compare-and-set and read back consistently; a "first seen" record keeps its first time
//! (to the millisecond) until it lapses.
//!
//! Run against the stack: `awsmp-local up && set -a && . $AWSMP_LOCAL_DIR/env && set +a &&
//! cargo test -p awsmp-consumer --test integration contract_dedup:: -- --include-ignored`

use anyhow::Result;
use awsmp_consumer::adapters::dynamodb::DynamoDbDedupStore;
use awsmp_consumer::adapters::memory::MemoryDedupStore;
use awsmp_consumer::domain::seq::SeqNum;
use awsmp_consumer::ports::{ClaimOutcome, DedupClaim, DedupStore, FirstSeen, LaneItem};
use awsmp_local_stack::local::LocalEnv;
use chrono::{DateTime, Duration, TimeZone, Utc};

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap()
}

async fn claims(store: &dyn DedupStore, run: &str) -> Result<()> {
    let key = format!("kpl:{run}");
    let claim = |shard: &str, s: u64, at: DateTime<Utc>| DedupClaim {
        key: key.clone(),
        shard_id: shard.into(),
        sequence_number: SeqNum::parse(&s.to_string()).unwrap(),
        claimed_at: at,
        expires_at: at + Duration::hours(48),
    };
    let (s0, s1) = ("shardId-000000000000", "shardId-000000000001");
    let cases = [
        (claim(s0, 10, t0()), ClaimOutcome::Claimed),
        (claim(s0, 10, t0()), ClaimOutcome::Reclaimed),
        (claim(s0, 11, t0()), ClaimOutcome::Duplicate),
        (claim(s1, 10, t0()), ClaimOutcome::Duplicate),
        (
            claim(s0, 11, t0() + Duration::hours(49)),
            ClaimOutcome::Claimed,
        ),
        (
            claim(s0, 10, t0() + Duration::hours(50)),
            ClaimOutcome::Duplicate,
        ),
        (
            claim(s0, 11, t0() + Duration::hours(50)),
            ClaimOutcome::Reclaimed,
        ),
    ];
    for (i, (c, want)) in cases.iter().enumerate() {
        assert_eq!(store.claim(c).await?, *want, "case {i}");
    }
    Ok(())
}

async fn lanes(store: &dyn DedupStore, run: &str) -> Result<()> {
    let key = format!("seq:{run}:3");
    let item = |version: u64, state: &str| LaneItem {
        key: key.clone(),
        version,
        state: state.into(),
        expires_at: t0() + Duration::hours(48),
    };
    assert_eq!(store.read_lane(&key).await?, None);
    let cases = [
        (item(1, "1|1-1@1@aa"), None, true),
        (item(1, "1|1-2@1@bb"), None, false),
        (item(2, "2|1-2@2@aa"), Some(2), false),
        (item(2, "2|1-2@2@aa"), Some(1), true),
        (item(3, "3|1-3@3@aa"), Some(1), false),
    ];
    for (i, (it, expected, want)) in cases.iter().enumerate() {
        assert_eq!(store.write_lane(it, *expected).await?, *want, "case {i}");
    }
    assert_eq!(store.read_lane(&key).await?, Some(item(2, "2|1-2@2@aa")));
    Ok(())
}

async fn first_seen(store: &dyn DedupStore, run: &str) -> Result<()> {
    let key = format!("ingreq:{run}");
    let seen = |at: DateTime<Utc>| FirstSeen {
        key: key.clone(),
        at,
        expires_at: at + Duration::hours(48),
    };
    let first = t0() + Duration::milliseconds(123);
    let cases = [
        // The first sighting records its time, to the millisecond.
        (first, first),
        // A retry 90 s and 150 s later reads it back, unchanged.
        (t0() + Duration::seconds(90), first),
        (t0() + Duration::seconds(150), first),
        // An earlier clock changes nothing either.
        (t0() - Duration::seconds(5), first),
        // Once the record lapsed, a sighting is a first one again.
        (t0() + Duration::hours(49), t0() + Duration::hours(49)),
        (t0() + Duration::hours(50), t0() + Duration::hours(49)),
    ];
    for (i, (at, want)) in cases.iter().enumerate() {
        assert_eq!(store.first_seen(&seen(*at)).await?, *want, "case {i}");
    }
    // Another key has its own record.
    let other = FirstSeen {
        key: format!("ingreq:{run}:other"),
        ..seen(t0() + Duration::seconds(7))
    };
    assert_eq!(store.first_seen(&other).await?, other.at);
    Ok(())
}

async fn contract(store: &dyn DedupStore, run: &str) -> Result<()> {
    claims(store, run).await?;
    lanes(store, run).await?;
    first_seen(store, run).await
}

#[tokio::test]
async fn the_memory_dedup_store_keeps_the_contract() -> Result<()> {
    contract(&MemoryDedupStore::new(), "mem").await
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn the_dynamodb_dedup_store_keeps_the_contract() -> Result<()> {
    let env = LocalEnv::from_process();
    let table = std::env::var("AWSMP_DEDUP_TABLE")?;
    let store = DynamoDbDedupStore::new(env.dynamodb().await?, &table);
    contract(&store, &uuid::Uuid::new_v4().simple().to_string()).await
}
