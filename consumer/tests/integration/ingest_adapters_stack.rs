//! meter-ingest's DynamoDB adapters and their in-memory twins pass the same contract: the
//! mapping round-trips an entry, rate counters add up, the held store lists by disposition and
//! a replay overwrites the same item; the archive reads back what was put, each event once.
//!
//! Run: `awsmp-local up && set -a && . .awsmp-local/env && set +a &&
//! cargo test -p awsmp-consumer --test integration ingest_adapters_stack:: -- --include-ignored`.

use anyhow::Result;
use awsmp_consumer::adapters::archive::S3BillingArchive;
use awsmp_consumer::adapters::ingest::{
    DynamoDbHeldStore, DynamoDbMappingStore, DynamoDbRateCounter,
};
use awsmp_consumer::adapters::ingest_memory::{
    MemoryHeldStore, MemoryMappingStore, MemoryRateCounter,
};
use awsmp_consumer::archive::{ArchivedEvent, BillingArchive, archive_objects};
use awsmp_consumer::domain::verify::VerifiedEvent;
use awsmp_consumer::ingest::mapping::{LicenseGrant, MappingEntry};
use awsmp_consumer::ingest::ports::{Disposition, HeldEvent, HeldStore, MappingStore, RateCounter};
use awsmp_local_stack::local::LocalEnv;
use chrono::{TimeZone, Utc};

fn run_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

async fn mapping_contract(store: &dyn MappingStore, run: &str) -> Result<()> {
    let arn = format!("arn:aws:lambda:us-east-1:111111111111:function:awsmp-meter-ingest:m{run}");
    assert_eq!(store.get(&arn).await?, None);
    let mut entry = MappingEntry {
        invoked_arn: arn.clone(),
        environment: "prod".into(),
        app_id: Some("app".into()),
        licenses: vec![LicenseGrant {
            license_arn:
                "arn:aws:license-manager::111111111111:license:l-0123456789abcdef0123456789abcdef"
                    .into(),
            customer_aws_account_id: "222222222222".into(),
        }],
        dimensions: vec!["api_calls".into()],
        max_events_per_second: 10,
        max_quantity: 100,
    };
    store.put(&entry).await?;
    assert_eq!(store.get(&arn).await?.as_ref(), Some(&entry));
    entry.max_quantity = 200;
    store.put(&entry).await?;
    assert_eq!(
        store.get(&arn).await?.map(|e| e.max_quantity),
        Some(200),
        "replaced"
    );
    Ok(())
}

async fn rate_contract(rates: &dyn RateCounter, run: &str) -> Result<()> {
    let key = format!("rate:{run}:1");
    let exp = Utc::now() + chrono::Duration::hours(1);
    assert_eq!(rates.add(&key, 3, exp).await?, 3);
    assert_eq!(rates.add(&key, 4, exp).await?, 7);
    assert_eq!(
        rates.add(&format!("rate:{run}:2"), 1, exp).await?,
        1,
        "another second"
    );
    Ok(())
}

async fn held_contract(held: &dyn HeldStore, run: &str) -> Result<()> {
    let item = |key: &str, disposition| HeldEvent {
        key: format!("{run}{key}"),
        disposition,
        reason: "RateLimited".into(),
        detail: "d".into(),
        invoked_arn: "arn".into(),
        request_id: "req".into(),
        event_id: key.into(),
        quantity: 4,
        payload: r#"{"eventId":"x"}"#.into(),
        received_at: Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 0).unwrap(),
        ttl: None,
    };
    held.put(&item("a", Disposition::Held)).await?;
    held.put(&item("b", Disposition::Rejected)).await?;
    let mine = |v: Vec<HeldEvent>| {
        v.into_iter()
            .filter(|h| h.key.starts_with(run))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        mine(held.list(Disposition::Held).await?),
        vec![item("a", Disposition::Held)]
    );
    held.put(&item("a", Disposition::Released)).await?;
    assert!(
        mine(held.list(Disposition::Held).await?).is_empty(),
        "the same key, overwritten"
    );
    assert_eq!(mine(held.list(Disposition::Released).await?).len(), 1);
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn ingest_stores_behave_like_their_memory_twins() -> Result<()> {
    let env = LocalEnv::from_process();
    let ddb = env.dynamodb().await?;
    let run = run_id();
    mapping_contract(
        &DynamoDbMappingStore::new(ddb.clone(), env.get("AWSMP_INGEST_MAPPING_TABLE")?),
        &run,
    )
    .await?;
    mapping_contract(&MemoryMappingStore::new(), &run).await?;
    rate_contract(
        &DynamoDbRateCounter::new(ddb.clone(), env.get("AWSMP_DEDUP_TABLE")?),
        &run,
    )
    .await?;
    rate_contract(&MemoryRateCounter::new(), &run).await?;
    held_contract(
        &DynamoDbHeldStore::new(ddb, env.get("AWSMP_INGEST_HELD_TABLE")?),
        &run,
    )
    .await?;
    held_contract(&MemoryHeldStore::new(), &run).await
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn the_s3_archive_reads_back_what_was_put_each_event_once() -> Result<()> {
    let env = LocalEnv::from_process();
    let archive = S3BillingArchive::new(env.s3().await?, env.get("AWSMP_BILLING_ARCHIVE_BUCKET")?);
    let run = run_id();
    let ev = |i: u32| {
        let v = VerifiedEvent {
            license_arn: format!("l-{run}"),
            customer_aws_account_id: "a".into(),
            dimension: "d".into(),
            second: 1_796_169_000 + i64::from(i),
            quantity: 2,
            allocations: None,
            event_id: format!("{run}-{i}"),
            producer_id: None,
        };
        ArchivedEvent::new(&v, ("s", &run, &i.to_string(), None), Utc::now())
    };
    let batch = [ev(1), ev(2), ev(3)];
    for o in archive_objects(&batch) {
        archive.put(&o).await?;
        archive.put(&o).await?; // a replay: same key, same content
    }
    // A retried part of the batch under another key.
    for o in archive_objects(&batch[1..]) {
        archive.put(&o).await?;
    }
    let mine: Vec<_> = archive
        .read_all()
        .await?
        .into_iter()
        .filter(|e| e.shard_id == run)
        .collect();
    assert_eq!(mine.len(), 3, "{mine:?}");
    assert_eq!(mine.iter().map(|e| e.quantity).sum::<u64>(), 6);
    Ok(())
}
