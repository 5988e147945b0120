//! Against the local stack (kinesalite + dynalite + moto): events produced with the producer
//! library flow through a stream of this test's own, the local event source mapping and the
//! handler into the usage table — exactly, also with a duplicated record (a producer retry
//! after a lost response), a consumer killed mid-batch, and a full replay of the stream.
//!
//! Run: `awsmp-local up && set -a && . .awsmp-local/env && set +a &&
//! cargo test -p awsmp-consumer --test integration stack:: -- --include-ignored`

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use aws_lambda_events::event::kinesis::KinesisEvent;
use aws_lambda_events::event::streams::KinesisEventResponse;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::{ShardIteratorType, StreamStatus};
use awsmp_aws::emf::MetricsSink;
use awsmp_consumer::Config;
use awsmp_consumer::adapters::dynamodb::{DynamoDbUsageRows, consumer_from_config};
use awsmp_contract::keys::format_usage_timestamp;
use awsmp_contract::wire::{decode_events, encode_aggregated, encode_event};
use awsmp_local_stack::kinesis_esm::{EsmOptions, KinesisEsm};
use awsmp_local_stack::local::LocalEnv;
use awsmp_producer::partition::partition_key;
use awsmp_producer::{
    Event, FaultConfig, FaultInjectingRecordSink, KinesisRecordSink, KinesisShardMapSource,
    Producer, Tag, UsageAllocation,
};
use awsmp_testkit::faults::{FaultPlan, Rates};
use awsmp_testkit::ports::{Ctx, Faulty};
use chrono::{TimeZone, Utc};

struct TestStream {
    client: aws_sdk_kinesis::Client,
    name: String,
}

impl TestStream {
    async fn create(client: aws_sdk_kinesis::Client) -> Result<Self> {
        let name = format!("awsmp-consumer-test-{}", uuid::Uuid::new_v4().simple());
        client
            .create_stream()
            .stream_name(&name)
            .shard_count(2)
            .send()
            .await
            .context("CreateStream")?;
        for _ in 0..200 {
            let d = client
                .describe_stream_summary()
                .stream_name(&name)
                .send()
                .await?;
            if d.stream_description_summary().map(|s| s.stream_status())
                == Some(&StreamStatus::Active)
            {
                return Ok(Self { client, name });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!("stream {name} did not become ACTIVE")
    }

    /// Expected quantity per (license, sort key), read back independently: every record on
    /// every shard, identical bytes counted once.
    async fn expected(&self) -> Result<BTreeMap<(String, String), u64>> {
        let shards = self
            .client
            .list_shards()
            .stream_name(&self.name)
            .send()
            .await?;
        let mut seen = std::collections::HashSet::new();
        let mut out = BTreeMap::new();
        for shard in shards.shards() {
            let mut it = self
                .client
                .get_shard_iterator()
                .stream_name(&self.name)
                .shard_id(shard.shard_id())
                .shard_iterator_type(ShardIteratorType::TrimHorizon)
                .send()
                .await?
                .shard_iterator
                .context("no iterator")?;
            loop {
                let r = self.client.get_records().shard_iterator(&it).send().await?;
                for rec in r.records() {
                    if !seen.insert(rec.data().as_ref().to_vec()) {
                        continue;
                    }
                    let arrival = Utc
                        .timestamp_millis_opt(
                            rec.approximate_arrival_timestamp().unwrap().to_millis()?,
                        )
                        .unwrap();
                    // Every event of the record, v1 or v2 (a v2 aggregate's group table is
                    // not an event).
                    for u in decode_events(rec.data().as_ref())? {
                        // Billed at its arrival second, however far its client clock is off.
                        let e = u.event?;
                        let sk = format!(
                            "{}#{}#{}",
                            e.customer_aws_account_id,
                            e.dimension,
                            format_usage_timestamp(arrival)
                        );
                        *out.entry((e.license_arn, sk)).or_default() += e.quantity;
                    }
                }
                match r.next_shard_iterator() {
                    Some(n) if !r.records().is_empty() => it = n.to_owned(),
                    _ => break,
                }
            }
        }
        Ok(out)
    }
}

impl Drop for TestStream {
    fn drop(&mut self) {
        let client = self.client.clone();
        let name = self.name.clone();
        // Best effort: the stack is ephemeral anyway.
        tokio::spawn(async move {
            let _ = client.delete_stream().stream_name(name).send().await;
        });
    }
}

async fn rows_of(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    licenses: &[String],
) -> Result<BTreeMap<(String, String), u64>> {
    let mut out = BTreeMap::new();
    for l in licenses {
        let items = ddb
            .query()
            .table_name(table)
            .key_condition_expression("licenseArn = :l")
            .expression_attribute_values(":l", AttributeValue::S(l.clone()))
            .consistent_read(true)
            .send()
            .await?;
        for item in items.items() {
            let sk = item["customerAWSAccountId_dimension_timestamp"]
                .as_s()
                .unwrap()
                .clone();
            let q: u64 = item["quantity"].as_n().unwrap().parse()?;
            assert_eq!(
                item["meteringPending"].as_s().unwrap(),
                &sk.rsplit_once('#').unwrap().1[..13],
                "meteringPending is the hour of the row's own second"
            );
            out.insert((l.clone(), sk), q);
        }
    }
    Ok(out)
}

/// The mapping's settings for these tests: small batches, failures to the stack's queue.
fn esm_options(env: &LocalEnv, sqs: &aws_sdk_sqs::Client) -> EsmOptions {
    EsmOptions {
        batch_size: 9,
        batching_window: Duration::from_millis(200),
        failure_destination: Some((
            sqs.clone(),
            env.get("AWSMP_CONSUMER_FAILURE_QUEUE_URL")
                .unwrap()
                .to_owned(),
        )),
        ..EsmOptions::default()
    }
}

/// Events produced with the producer library into `stream`, through a sink that loses 30% of
/// PutRecords responses after applying them (the producer resends those records
/// byte-identical: duplicates on the stream), and vendor-metered tagging on one group.
async fn produce_with_lost_responses(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
    licenses: &[String],
) -> Result<()> {
    let sink = Arc::new(FaultInjectingRecordSink::new(
        KinesisRecordSink::new(kinesis.clone(), stream),
        FaultConfig {
            seed: 3,
            lost_response_rate: 0.3,
            entry_throttle_rate: 0.05,
            ..FaultConfig::default()
        },
    ));
    let producer = Producer::builder(stream)
        .producer_id("stack-test")
        .linger(Duration::from_millis(20))
        .start_with(
            sink.clone(),
            KinesisShardMapSource::new(kinesis.clone(), stream),
        )?;
    for i in 0..600u64 {
        let l = &licenses[(i % 3) as usize];
        let dim = if i % 2 == 0 { "api" } else { "gb" };
        producer
            .record(Event::new(l, "210987654321", dim, 1 + i % 7, Utc::now()))
            .await?;
        if i % 150 == 0 {
            tokio::time::sleep(Duration::from_millis(1100)).await;
        }
    }
    // Vendor-metered tagging on one group.
    for i in 0..40u64 {
        let e =
            Event::new(&licenses[2], "210987654321", "vmt", 10, Utc::now()).with_allocations(vec![
                UsageAllocation::new(3 + i % 2, vec![Tag::new("team", "a")]),
                UsageAllocation::new(7 - i % 2, vec![Tag::new("team", format!("b{}", i % 3))]),
            ]);
        producer.record(e).await?;
    }
    assert!(producer.shutdown().await?.is_complete());
    assert!(sink.counts().responses_lost > 0, "{:?}", sink.counts());
    Ok(())
}

/// A plain record whose client timestamp is ten minutes older than its arrival (delayed in the
/// producer), and one record put twice with identical bytes (the producer's response was
/// lost). Returns the delayed put.
async fn put_stale_and_duplicated(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
    licenses: &[String],
    run: &str,
) -> Result<aws_sdk_kinesis::operation::put_record::PutRecordOutput> {
    let stale = encode_event(
        &Event::new(
            &licenses[1],
            "210987654321",
            "api",
            77,
            Utc::now() - chrono::Duration::minutes(10),
        )
        .with_event_id(format!("{run}-stale")),
    );
    let stale_put = kinesis
        .put_record()
        .stream_name(stream)
        .partition_key(partition_key(&licenses[1], "210987654321", "api"))
        .data(Blob::new(stale))
        .send()
        .await?;
    let pk = partition_key(&licenses[0], "210987654321", "api");
    let payloads: Vec<Vec<u8>> = (0..3)
        .map(|k| {
            encode_event(
                &Event::new(&licenses[0], "210987654321", "api", 100 + k, Utc::now())
                    .with_event_id(format!("{run}-dup-{k}")),
            )
        })
        .collect();
    let bytes = encode_aggregated(payloads.iter().map(|p| (pk.as_str(), None, &p[..])));
    for _ in 0..2 {
        kinesis
            .put_record()
            .stream_name(stream)
            .partition_key(&pk)
            .data(Blob::new(bytes.to_vec()))
            .send()
            .await?;
    }
    Ok(stale_put)
}

/// Drain `stream` through a consumer whose row store is killed mid-batch now and then: some
/// invocations fail, nothing is discarded, and the duplicates are dedup hits.
async fn drain_through_crashes(
    env: &LocalEnv,
    config: &Config,
    stream: &str,
    checkpoints: &std::path::Path,
) -> Result<()> {
    let (kinesis, ddb, sqs) = (
        env.kinesis().await?,
        env.dynamodb().await?,
        env.sqs().await?,
    );
    let ctx = Ctx::new(FaultPlan::new(7, Rates::default()));
    let faults = ctx.faults.clone();
    let mut consumer = consumer_from_config(config, ddb.clone());
    consumer.metrics = MetricsSink::capture("kinesis-consumer");
    consumer.rows = Arc::new(Faulty::new(
        DynamoDbUsageRows::new(ddb.clone(), &config.usage_table),
        &ctx,
    ));
    let mut esm = KinesisEsm::new(
        kinesis.clone(),
        stream,
        esm_options(env, &sqs),
        checkpoints.to_path_buf(),
    )
    .await?;
    let invocations = std::sync::atomic::AtomicU64::new(0);
    let handler = |event: KinesisEvent| {
        let n = invocations.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if n.is_multiple_of(3) {
            faults.crash_after(n % 4);
        }
        let c = &consumer;
        let f = &faults;
        async move {
            let response = c.handle(event).await;
            if f.crashed() {
                f.recover();
                return Err("consumer killed mid-batch");
            }
            Ok(response)
        }
    };
    let report = esm.drain_concurrent(handler).await?;
    assert!(report.function_errors > 0, "{report:?}");
    assert!(report.discarded.is_empty(), "{report:?}");
    assert!(
        consumer.metrics.total("DedupHit") >= 2.0,
        "lost responses and the manual copy"
    );
    Ok(())
}

/// Every allocated (`vmt`) row of `license` carries allocations summing to its quantity.
async fn assert_allocations_sum_to_quantity(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    license: &str,
) -> Result<()> {
    let vmt = ddb
        .query()
        .table_name(table)
        .key_condition_expression("licenseArn = :l AND begins_with(#sk, :p)")
        .expression_attribute_names("#sk", "customerAWSAccountId_dimension_timestamp")
        .expression_attribute_values(":l", AttributeValue::S(license.to_owned()))
        .expression_attribute_values(":p", AttributeValue::S("210987654321#vmt#".into()))
        .consistent_read(true)
        .send()
        .await?;
    assert!(!vmt.items().is_empty());
    for item in vmt.items() {
        let q: u64 = item["quantity"].as_n().unwrap().parse()?;
        let allocated: u64 = item["usageAllocations"]
            .as_l()
            .unwrap()
            .iter()
            .map(|a| {
                a.as_m().unwrap()["AllocatedUsageQuantity"]
                    .as_n()
                    .unwrap()
                    .parse::<u64>()
                    .unwrap()
            })
            .sum();
        assert_eq!(allocated, q);
    }
    Ok(())
}

/// A second tick from the persisted checkpoints delivers nothing, and a full replay from
/// TRIM_HORIZON with other batch boundaries adds nothing.
async fn replays_add_nothing(
    env: &LocalEnv,
    config: &Config,
    stream: &str,
    checkpoints: &std::path::Path,
    licenses: &[String],
    expected: &BTreeMap<(String, String), u64>,
) -> Result<()> {
    let (kinesis, ddb, sqs) = (
        env.kinesis().await?,
        env.dynamodb().await?,
        env.sqs().await?,
    );
    let options = || esm_options(env, &sqs);
    let mut again = KinesisEsm::new(
        kinesis.clone(),
        stream,
        options(),
        checkpoints.to_path_buf(),
    )
    .await?;
    let plain = consumer_from_config(config, ddb.clone());
    let r2 = again
        .drain(|e| {
            let c = &plain;
            async move { Ok::<_, String>(c.handle(e).await) }
        })
        .await?;
    assert_eq!(r2.records_delivered, 0);
    std::fs::remove_file(checkpoints)?;
    let mut replay = KinesisEsm::new(
        kinesis.clone(),
        stream,
        EsmOptions {
            batch_size: 50,
            ..options()
        },
        checkpoints.to_path_buf(),
    )
    .await?;
    let r3 = replay
        .drain(|e| {
            let c = &plain;
            async move { Ok::<_, String>(c.handle(e).await) }
        })
        .await?;
    assert!(r3.records_delivered > 0);
    assert_eq!(
        rows_of(&ddb, &config.usage_table, licenses).await?,
        *expected
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn produced_events_reach_the_usage_table_exactly_through_crashes_duplicates_and_replays()
-> Result<()> {
    let env = LocalEnv::from_process();
    let kinesis = env.kinesis().await?;
    let ddb = env.dynamodb().await?;
    let config = Config::from_env()?;
    let stream = TestStream::create(kinesis.clone()).await?;
    let run = uuid::Uuid::new_v4().simple().to_string();
    let licenses: Vec<String> = (0..3)
        .map(|i| {
            format!(
                "arn:aws:license-manager::123456789012:license:l-{}{i:02x}",
                &run[..30]
            )
        })
        .collect();

    // GIVEN events produced with the producer library into our stream (lost responses),
    produce_with_lost_responses(&kinesis, &stream.name, &licenses).await?;
    // AND a delayed plain record and a record put twice with identical bytes.
    let stale_put = put_stale_and_duplicated(&kinesis, &stream.name, &licenses, &run).await?;
    let expected = stream.expected().await?;
    let expected_total: u64 = expected.values().sum();
    assert_eq!(
        expected_total,
        (0..600u64).map(|i| 1 + i % 7).sum::<u64>() + 303 + 400 + 77
    );

    // WHEN the mapping delivers through a consumer that is killed mid-batch now and then,
    let dir = tempfile::tempdir()?;
    let checkpoints = dir.path().join("esm.json");
    drain_through_crashes(&env, &config, &stream.name, &checkpoints).await?;

    // THEN the rows hold exactly what the stream holds, per group-second.
    let rows = rows_of(&ddb, &config.usage_table, &licenses).await?;
    assert_eq!(rows, expected);

    // AND allocated rows carry allocations summing to their quantity,
    assert_allocations_sum_to_quantity(&ddb, &config.usage_table, &licenses[2]).await?;
    // AND the delayed event is billed at its arrival second, not rejected as stale,
    let key = format!(
        "{}/{}/{}/record",
        stream.name,
        stale_put.shard_id(),
        stale_put.sequence_number()
    );
    let rejected = ddb
        .get_item()
        .table_name(&config.rejected_table)
        .key("recordKey", AttributeValue::S(key.clone()))
        .send()
        .await?
        .item;
    assert!(rejected.is_none(), "{key} was rejected: {rejected:?}");
    // AND replays from the checkpoints and from TRIM_HORIZON add nothing.
    replays_add_nothing(
        &env,
        &config,
        &stream.name,
        &checkpoints,
        &licenses,
        &expected,
    )
    .await
}

/// `n` records with one partition key, in order; their sequence numbers.
async fn put_plain_records(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
    n: usize,
) -> Result<Vec<String>> {
    let mut seqs = Vec::new();
    for i in 0..n {
        let out = kinesis
            .put_record()
            .stream_name(stream)
            .partition_key("one-key")
            .data(Blob::new(format!("record {i}")))
            .send()
            .await?;
        seqs.push(out.sequence_number().to_owned());
    }
    Ok(seqs)
}

/// A queue of this test's own (the mapping's on-failure destination); its URL.
async fn create_queue(sqs: &aws_sdk_sqs::Client) -> Result<String> {
    sqs.create_queue()
        .queue_name(format!(
            "awsmp-consumer-test-{}",
            uuid::Uuid::new_v4().simple()
        ))
        .send()
        .await?
        .queue_url
        .context("no queue url")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn a_batch_that_keeps_failing_goes_to_the_on_failure_destination_and_the_mapping_moves_on()
-> Result<()> {
    let env = LocalEnv::from_process();
    let kinesis = env.kinesis().await?;
    let sqs = env.sqs().await?;
    let stream = TestStream::create(kinesis.clone()).await?;
    let queue = create_queue(&sqs).await?;
    let seqs = put_plain_records(&kinesis, &stream.name, 6).await?;
    let poison = seqs[3].clone();
    let dir = tempfile::tempdir()?;
    let mut esm = KinesisEsm::new(
        kinesis.clone(),
        &stream.name,
        EsmOptions {
            batch_size: 6,
            max_retry_attempts: Some(3),
            failure_destination: Some((sqs.clone(), queue.clone())),
            ..EsmOptions::default()
        },
        dir.path().join("esm.json"),
    )
    .await?;
    let delivered = std::sync::Mutex::new(Vec::<String>::new());
    let report = esm
        .drain(|event: KinesisEvent| {
            let poisoned = event
                .records
                .iter()
                .any(|r| r.kinesis.sequence_number == poison);
            if !poisoned {
                delivered.lock().unwrap().extend(
                    event
                        .records
                        .iter()
                        .map(|r| r.kinesis.sequence_number.clone()),
                );
            }
            async move {
                if poisoned {
                    Err("poison record")
                } else {
                    Ok(KinesisEventResponse::default())
                }
            }
        })
        .await?;
    assert_eq!(report.discarded.len(), 1, "{report:?}");
    let mut others = seqs.clone();
    others.remove(3);
    assert_eq!(*delivered.lock().unwrap(), others);
    assert_eq!(esm.checkpoints().values().next(), seqs.last());
    let msgs = sqs
        .receive_message()
        .queue_url(&queue)
        .wait_time_seconds(1)
        .send()
        .await?;
    let body: serde_json::Value = serde_json::from_str(msgs.messages()[0].body().unwrap())?;
    let info = &body["KinesisBatchInfo"];
    assert_eq!(info["startSequenceNumber"], poison.as_str());
    assert_eq!(info["endSequenceNumber"], poison.as_str());
    assert_eq!(info["batchSize"], 1);
    assert_eq!(
        body["requestContext"]["condition"],
        "RetryAttemptsExhausted"
    );
    sqs.delete_queue().queue_url(&queue).send().await?;
    Ok(())
}
