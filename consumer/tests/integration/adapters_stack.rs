//! The DynamoDB adapters against dynalite, checked against the in-memory fakes: the same
//! conditional writes succeed or fail the same way and leave the same rows, and dedup claims
//! tell first claims, replays, duplicates and expired claims apart, and generated-id lanes are
//! written by compare-and-set.
//!
//! Run: `awsmp-local up && set -a && . .awsmp-local/env && set +a &&
//! cargo test -p awsmp-consumer --test integration adapters_stack:: -- --include-ignored`

use anyhow::Result;
use awsmp_consumer::Config;
use awsmp_consumer::adapters::dynamodb::{DynamoDbDedupStore, DynamoDbUsageRows};
use awsmp_consumer::adapters::memory::{MemoryDedupStore, MemoryUsageRows};
use awsmp_consumer::domain::row::coverage::MAX_LANE_SPANS;
use awsmp_consumer::domain::row::{Change, Coverage, Guard, RowWrite, SpanWrite};
use awsmp_consumer::domain::seq::{Lane, SeqNum};
use awsmp_consumer::ports::{ClaimOutcome, DedupClaim, DedupStore, LaneItem, UsageRowWriter};
use awsmp_contract::keys::RowKey;
use awsmp_contract::row::{Allocation, Tag};
use awsmp_local_stack::local::LocalEnv;
use chrono::{Duration, TimeZone, Utc};

fn seq(n: u64) -> SeqNum {
    SeqNum::parse(&n.to_string()).unwrap()
}

fn write(
    key: &RowKey,
    guard: Guard,
    change: Change,
    wm: Vec<(Lane, SeqNum)>,
    now: &str,
) -> RowWrite {
    // The spans the consumer writes with each guard: the optimistic write appends its span
    // (from its first part to its watermark), a decided write replaces the list.
    let spans = wm
        .iter()
        .map(|(lane, hi)| {
            let first = match &guard {
                Guard::Fresh { lanes, .. } => lanes.iter().find(|(l, _)| l == lane).map(|f| &f.1),
                _ => None,
            };
            let w = match first {
                Some(lo) => SpanWrite::Append(Coverage::span_item(lo, hi)),
                None => SpanWrite::Replace(vec![Coverage::span_item(hi, hi)]),
            };
            (lane.clone(), w)
        })
        .collect();
    RowWrite {
        key: key.clone(),
        customer_aws_account_id: "210987654321".into(),
        dimension: "api".into(),
        timestamp: "2026-11-30T12:00:07".into(),
        metering_pending: "2026-11-30T12".into(),
        ttl: Some(1_830_000_000),
        now: now.into(),
        guard,
        change,
        watermarks: wm,
        spans,
    }
}

fn fresh(lanes: Vec<(Lane, SeqNum)>, room: u64, unalloc: bool) -> Guard {
    Guard::Fresh {
        lanes,
        max_quantity_before: room,
        require_unallocated: unalloc,
    }
}

fn alloc(q: u64, t: &str) -> Allocation {
    Allocation {
        quantity: q,
        tags: vec![Tag::new("team", t)],
    }
}

fn lanes() -> (Lane, Lane) {
    (
        Lane::new("shardId-000000000000", "pk-a"),
        Lane::new("shardId-000000000001", "pk-b"),
    )
}

/// Optimistic ADDs: a creation, its replay, a later batch with a new lane, no room left.
fn add_steps(key: &RowKey) -> Vec<RowWrite> {
    let (a, b) = lanes();
    vec![
        // First batch: created by an optimistic ADD.
        write(
            key,
            fresh(vec![(a.clone(), seq(9))], 100, true),
            Change::Add(5),
            vec![(a.clone(), seq(12))],
            "t1",
        ),
        // Its replay: lane a's watermark 12 is not below 9.
        write(
            key,
            fresh(vec![(a.clone(), seq(9))], 100, true),
            Change::Add(5),
            vec![(a.clone(), seq(12))],
            "t2",
        ),
        // A later batch of lane a (sequence numbers grow a digit) and a new lane b.
        write(
            key,
            fresh(vec![(a.clone(), seq(100)), (b.clone(), seq(7))], 100, true),
            Change::Add(3),
            vec![(a.clone(), seq(120)), (b.clone(), seq(8))],
            "t3",
        ),
        // No room left under the maximum.
        write(
            key,
            fresh(vec![(a.clone(), seq(200))], 7, true),
            Change::Add(93),
            vec![(a.clone(), seq(200))],
            "t4",
        ),
    ]
}

/// Compare-and-set writes, an Absent guard on an existing row, allocations.
fn cas_steps(key: &RowKey) -> Vec<RowWrite> {
    let (a, b) = lanes();
    vec![
        // Compare-and-set on the version: wrong, then right.
        write(
            key,
            Guard::Version(Some(1)),
            Change::Set {
                quantity: 50,
                allocations: None,
            },
            vec![(a.clone(), seq(300))],
            "t5",
        ),
        write(
            key,
            Guard::Version(Some(2)),
            Change::Set {
                quantity: 50,
                allocations: None,
            },
            vec![(a.clone(), seq(300))],
            "t6",
        ),
        // Absent guard on an existing row.
        write(key, Guard::Absent, Change::Add(1), vec![], "t7"),
        // Allocations by compare-and-set, then an unallocated ADD is refused.
        write(
            key,
            Guard::Version(Some(3)),
            Change::Set {
                quantity: 60,
                allocations: Some(vec![alloc(40, "a"), alloc(20, "b")]),
            },
            vec![(b.clone(), seq(9))],
            "t8",
        ),
        write(
            key,
            fresh(vec![(a.clone(), seq(301))], 1000, true),
            Change::Add(1),
            vec![(a.clone(), seq(301))],
            "t9",
        ),
        write(
            key,
            fresh(vec![(a.clone(), seq(301))], 1000, false),
            Change::Add(0),
            vec![(a.clone(), seq(301))],
            "t10",
        ),
        // Lane a's spans filled to the cap: the optimistic write is refused (the row is read
        // and its spans compacted instead).
        {
            let mut full = write(
                key,
                Guard::Version(Some(5)),
                Change::Add(0),
                vec![(a.clone(), seq(400))],
                "t11",
            );
            let items = (0..MAX_LANE_SPANS as u64)
                .map(|i| Coverage::span_item(&seq(310 + 10 * i), &seq(311 + 10 * i)))
                .collect();
            full.spans = vec![(a.clone(), SpanWrite::Replace(items))];
            full
        },
        write(
            key,
            fresh(vec![(a.clone(), seq(500))], 1000, false),
            Change::Add(0),
            vec![(a.clone(), seq(500))],
            "t12",
        ),
    ]
}

/// Remove `meteringPending` from the row in both stores, as the pipeline's cleanup does.
async fn finalize_in_both(
    env: &LocalEnv,
    config: &Config,
    mem: &MemoryUsageRows,
    key: &RowKey,
) -> Result<()> {
    let mut finalized = mem.read(key).await?.unwrap();
    finalized.remove("meteringPending");
    let client = env.dynamodb().await?;
    client
        .update_item()
        .table_name(&config.usage_table)
        .key(
            "licenseArn",
            aws_sdk_dynamodb::types::AttributeValue::S(key.license_arn.clone()),
        )
        .key(
            "customerAWSAccountId_dimension_timestamp",
            aws_sdk_dynamodb::types::AttributeValue::S(key.sort_key.clone()),
        )
        .update_expression("REMOVE meteringPending")
        .send()
        .await?;
    mem.put(finalized);
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn conditional_row_writes_behave_like_the_in_memory_model() -> Result<()> {
    let env = LocalEnv::from_process();
    let config = Config::from_env()?;
    let ddb = DynamoDbUsageRows::new(env.dynamodb().await?, &config.usage_table);
    let mem = MemoryUsageRows::new();
    let run = uuid::Uuid::new_v4().simple().to_string();
    let key = RowKey {
        license_arn: format!(
            "arn:aws:license-manager::123456789012:license:l-{}",
            &run[..32]
        ),
        sort_key: "210987654321#api#2026-11-30T12:00:07".into(),
    };
    let a = lanes().0;
    let steps: Vec<RowWrite> = [add_steps(&key), cas_steps(&key)].concat();
    let expected_outcomes = [
        true, false, true, false, false, true, false, true, false, true, true, false,
    ];
    for (i, w) in steps.iter().enumerate() {
        let m = mem.write(w).await?;
        let d = ddb.write(w).await?;
        assert_eq!(
            (m, d),
            (expected_outcomes[i], expected_outcomes[i]),
            "step {i}"
        );
        assert_eq!(
            mem.read(&key).await?,
            ddb.read(&key).await?,
            "row after step {i}"
        );
    }
    // A pipeline-finalized row (marker removed) is refused by every guard but Absent's creator.
    finalize_in_both(&env, &config, &mem, &key).await?;
    for w in [
        write(
            &key,
            fresh(vec![(a.clone(), seq(999))], 1000, false),
            Change::Add(1),
            vec![],
            "t11",
        ),
        write(&key, Guard::Version(Some(5)), Change::Add(1), vec![], "t12"),
    ] {
        assert_eq!((mem.write(&w).await?, ddb.write(&w).await?), (false, false));
    }
    assert_eq!(mem.read(&key).await?, ddb.read(&key).await?);
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn dedup_claims_tell_first_claims_replays_duplicates_and_expired_claims_apart() -> Result<()>
{
    let env = LocalEnv::from_process();
    let config = Config::from_env()?;
    let ddb = DynamoDbDedupStore::new(env.dynamodb().await?, &config.dedup_table);
    let mem = MemoryDedupStore::new();
    let key = format!("kpl:{}", uuid::Uuid::new_v4().simple());
    let t = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
    let claim = |shard: &str, s: u64, at: chrono::DateTime<Utc>| DedupClaim {
        key: key.clone(),
        shard_id: shard.into(),
        sequence_number: seq(s),
        claimed_at: at,
        expires_at: at + Duration::hours(48),
    };
    let cases = [
        (claim("shardId-000000000000", 10, t), ClaimOutcome::Claimed),
        (
            claim("shardId-000000000000", 10, t),
            ClaimOutcome::Reclaimed,
        ),
        (
            claim("shardId-000000000000", 11, t),
            ClaimOutcome::Duplicate,
        ),
        (
            claim("shardId-000000000001", 10, t),
            ClaimOutcome::Duplicate,
        ),
        (
            claim("shardId-000000000000", 11, t + Duration::hours(49)),
            ClaimOutcome::Claimed,
        ),
        (
            claim("shardId-000000000000", 10, t + Duration::hours(50)),
            ClaimOutcome::Duplicate,
        ),
    ];
    for (i, (c, want)) in cases.iter().enumerate() {
        assert_eq!(mem.claim(c).await?, *want, "memory, case {i}");
        assert_eq!(ddb.claim(c).await?, *want, "DynamoDB, case {i}");
    }
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn lane_writes_are_compare_and_set_in_dynamodb_as_in_memory() -> Result<()> {
    let env = LocalEnv::from_process();
    let config = Config::from_env()?;
    let ddb = DynamoDbDedupStore::new(env.dynamodb().await?, &config.dedup_table);
    let mem = MemoryDedupStore::new();
    let key = format!("seq:{}:3", uuid::Uuid::new_v4().simple());
    let t = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
    let item = |version: u64, state: &str| LaneItem {
        key: key.clone(),
        version,
        state: state.into(),
        expires_at: t + Duration::hours(48),
    };
    let cases = [
        (item(1, "1|1-1@1@aa"), None, true),
        (item(1, "1|1-2@1@bb"), None, false),
        (item(2, "2|1-2@2@aa"), Some(2), false),
        (item(2, "2|1-2@2@aa"), Some(1), true),
    ];
    for (i, (it, expected, want)) in cases.iter().enumerate() {
        assert_eq!(
            mem.write_lane(it, *expected).await?,
            *want,
            "memory, case {i}"
        );
        assert_eq!(
            ddb.write_lane(it, *expected).await?,
            *want,
            "DynamoDB, case {i}"
        );
    }
    let stored = ddb.read_lane(&key).await?;
    assert_eq!(stored, Some(item(2, "2|1-2@2@aa")));
    assert_eq!(stored, mem.read_lane(&key).await?);
    assert_eq!(ddb.read_lane("seq:absent:0").await?, None);
    Ok(())
}
