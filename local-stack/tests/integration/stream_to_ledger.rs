//! The whole path through the local runner: events recorded with the producer library land on
//! the usage stream, `tick` polls it through the local event source mapping into the
//! consumer, and the same tick meters the rows into the simulator — billed quantities equal
//! what was produced, also when the same records reach the stream twice.

use anyhow::Result;
use awsmp_local_stack::local::{LocalEnv, demo_account, demo_license_arn};
use awsmp_local_stack::runner::Runner;
use awsmp_producer::sink::{FaultConfig, FaultInjectingRecordSink, KinesisRecordSink};
use awsmp_producer::{Event, KinesisShardMapSource, Producer};
use chrono::{Duration, Utc};
use std::collections::BTreeMap;

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn produced_events_are_billed_exactly_through_tick() -> Result<()> {
    let _one = crate::common::STACK.lock().await;
    let env = LocalEnv::from_process();
    let stream = env.get("AWSMP_USAGE_STREAM")?.to_owned();
    let kinesis = env.kinesis().await?;
    // Lost responses: the producer resends, so some records reach the stream twice.
    let sink = FaultInjectingRecordSink::new(
        KinesisRecordSink::new(kinesis.clone(), &stream),
        FaultConfig {
            seed: 11,
            lost_response_rate: 0.3,
            ..FaultConfig::default()
        },
    );
    let producer = Producer::builder(&stream)
        .producer_id("stream-to-ledger-test")
        .start_with(sink, KinesisShardMapSource::new(kinesis, &stream))?;
    let mut expected: BTreeMap<(String, String), u64> = BTreeMap::new();
    for i in 0..600u64 {
        let license = 180 + (i % 6) as usize;
        let dimension = ["api_calls", "storage_gb_hours"][(i % 2) as usize];
        let quantity = 1 + i % 9;
        producer
            .record(Event::new(
                demo_license_arn(license),
                demo_account(license),
                dimension,
                quantity,
                Utc::now(),
            ))
            .await?;
        *expected
            .entry((demo_license_arn(license), dimension.to_owned()))
            .or_default() += quantity;
    }
    let outcome = producer.shutdown().await?;
    assert!(outcome.is_complete(), "{:?}", outcome.undelivered);

    let checkpoint = tempfile::tempdir()?;
    let runner = Runner::new(env.clone(), &BTreeMap::new())
        .await?
        .with_stream_consumer(checkpoint.path().join("esm.json"))
        .await?;
    let started = Utc::now();
    let report = runner
        .tick(started + Duration::hours(2) + Duration::minutes(5))
        .await?;
    let consumer = report.consumer.expect("the tick ran the consumer");
    assert!(consumer.records_delivered > 0);
    assert!(
        report.submitter_error.is_none(),
        "{:?}",
        report.submitter_error
    );

    let mut billed = billed_since(&env, &expected, started).await?;
    // An hour boundary during the test could leave one hour for a later tick: bill it too.
    if billed != expected {
        runner
            .tick(started + Duration::hours(3) + Duration::minutes(5))
            .await?;
        billed = billed_since(&env, &expected, started - Duration::hours(1)).await?;
    }
    assert_eq!(billed, expected, "billed exactly what was produced");
    Ok(())
}

/// The simulator's billed quantity per (license, dimension) of `expected`'s groups, for hours
/// from `since` on.
async fn billed_since(
    env: &LocalEnv,
    expected: &BTreeMap<(String, String), u64>,
    since: chrono::DateTime<Utc>,
) -> Result<BTreeMap<(String, String), u64>> {
    let ledger: serde_json::Value =
        reqwest::get(format!("{}/_sim/ledger", env.get("AWSMP_SIM_ADMIN_URL")?))
            .await?
            .json()
            .await?;
    let since = since.format("%Y-%m-%dT%H").to_string();
    let mut billed: BTreeMap<(String, String), u64> = BTreeMap::new();
    for r in ledger["records"].as_array().into_iter().flatten() {
        let key = (
            r["licenseArn"].as_str().unwrap_or_default().to_owned(),
            r["dimension"].as_str().unwrap_or_default().to_owned(),
        );
        if expected.contains_key(&key) && r["hour"].as_str().unwrap_or_default() >= since.as_str() {
            *billed.entry(key).or_default() += r["quantity"].as_u64().unwrap_or(0);
        }
    }
    Ok(billed)
}
