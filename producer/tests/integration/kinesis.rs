//! Against a Kinesis emulator (kinesalite from the local stack). Each test creates its own
//! uniquely named stream, waits for ACTIVE, writes through the real producer, reads every shard
//! back with GetShardIterator/GetRecords and our deaggregator, and deletes the stream.
//!
//! Run: `awsmp-local up && set -a && . .awsmp-local/env && set +a &&
//! cargo test -p awsmp-producer --test integration kinesis:: -- --include-ignored`

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use aws_sdk_kinesis::Client;
use aws_sdk_kinesis::types::{ShardIteratorType, StreamStatus};
use awsmp_contract::wire::decode_events;
use awsmp_producer::partition::{ShardMap, partition_hash, partition_key};
use awsmp_producer::shards::shard_map_from_listing;
use awsmp_producer::{Event, Producer};

async fn sdk_config() -> aws_config::SdkConfig {
    use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https();
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(http)
        .load()
        .await
}

struct TestStream {
    client: Client,
    name: String,
}

impl TestStream {
    async fn create(cfg: &aws_config::SdkConfig, shards: i32) -> Result<Self> {
        let client = Client::new(cfg);
        let name = format!("awsmp-producer-test-{}", uuid::Uuid::new_v4().simple());
        client
            .create_stream()
            .stream_name(&name)
            .shard_count(shards)
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
                return Ok(TestStream { client, name });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!("stream {name} did not become ACTIVE")
    }

    async fn shard_map(&self) -> Result<ShardMap> {
        let out = self
            .client
            .list_shards()
            .stream_name(&self.name)
            .send()
            .await?;
        Ok(shard_map_from_listing(out.shards())?)
    }

    /// Every user record on every shard: (shard id, Kinesis partition key, event).
    async fn read_all(&self, expected: usize) -> Result<Vec<(String, String, Event)>> {
        let map = self.shard_map().await?;
        let mut out = Vec::new();
        for shard in map.shards() {
            let mut it = self
                .client
                .get_shard_iterator()
                .stream_name(&self.name)
                .shard_id(&shard.shard_id)
                .shard_iterator_type(ShardIteratorType::TrimHorizon)
                .send()
                .await?
                .shard_iterator
                .context("no iterator")?;
            let mut empty_reads = 0;
            while empty_reads < 3 {
                let r = self
                    .client
                    .get_records()
                    .shard_iterator(&it)
                    .limit(10_000)
                    .send()
                    .await?;
                if r.records().is_empty() {
                    empty_reads += 1;
                }
                for rec in r.records() {
                    // Every event, v1 or v2 (a v2 aggregate's group table is not one).
                    for u in decode_events(rec.data().as_ref())? {
                        let event = u.event?;
                        let pk = u
                            .partition_key
                            .unwrap_or_else(|| rec.partition_key().unwrap_or_default().to_owned());
                        out.push((shard.shard_id.clone(), pk, event));
                    }
                }
                let drained = out.len() >= expected && r.records().is_empty();
                match r.next_shard_iterator {
                    Some(n) if !drained => it = n,
                    _ => break,
                }
            }
        }
        Ok(out)
    }

    async fn delete(self) {
        let _ = self
            .client
            .delete_stream()
            .stream_name(&self.name)
            .enforce_consumer_deletion(true)
            .send()
            .await;
    }
}

fn check_routing(read: &[(String, String, Event)], map: &ShardMap) {
    for (shard, pk, e) in read {
        assert_eq!(
            pk,
            &partition_key(&e.license_arn, &e.customer_aws_account_id, &e.dimension)
        );
        let i = map.shard_index(partition_hash(pk)).expect("covered");
        assert_eq!(
            &map.shards()[i].shard_id,
            shard,
            "group {pk} is on its own shard"
        );
    }
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn every_event_arrives_on_its_groups_shard() -> Result<()> {
    let cfg = sdk_config().await;
    let stream = TestStream::create(&cfg, 3).await?;
    let result = async {
        let p = Producer::builder(&stream.name)
            .sdk_config(cfg.clone())
            .producer_id("kinesis-test")
            .max_aggregate_bytes(8 * 1024)
            .build()
            .await?;
        let evs: Vec<Event> = common::events(2_000, 40, 21)
            .into_iter()
            .map(|e| e.with_producer_id("kinesis-test"))
            .collect();
        for e in &evs {
            p.record(e.clone()).await?;
        }
        let outcome = p.shutdown().await?;
        assert!(outcome.is_complete(), "{:?}", outcome.undelivered.first());
        let read = stream.read_all(evs.len()).await?;
        check_routing(&read, &stream.shard_map().await?);
        let delivered: Vec<Event> = read.into_iter().map(|(_, _, e)| e).collect();
        let (ids, _) = common::assert_conserved(&evs, &delivered, &outcome);
        assert_eq!(ids, evs.len());
        let stats = p.stats();
        assert!(stats.records_acked < 2_000, "aggregated");
        assert!(
            stats.shard_refreshes >= 1,
            "ListShards adapter learned the map"
        );
        Ok::<_, anyhow::Error>(())
    }
    .await;
    stream.delete().await;
    result
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn shutdown_flushes_everything_with_collapse() -> Result<()> {
    let cfg = sdk_config().await;
    let stream = TestStream::create(&cfg, 2).await?;
    let result = async {
        // A linger far longer than the test: only shutdown() can have sent the events.
        let p = Producer::builder(&stream.name)
            .sdk_config(cfg.clone())
            .collapse(true)
            .linger(Duration::from_secs(600))
            .build()
            .await?;
        let evs = common::events(3_000, 6, 22);
        let mut want: HashMap<(String, i64), u64> = HashMap::new();
        for e in &evs {
            *want
                .entry((
                    partition_key(&e.license_arn, &e.customer_aws_account_id, &e.dimension),
                    e.timestamp.timestamp(),
                ))
                .or_default() += e.quantity;
            // Without its id: only events the producer names are collapsed.
            let mut e = e.clone();
            e.event_id.clear();
            p.record(e).await?;
        }
        let outcome = p.shutdown().await?;
        assert!(outcome.is_complete());
        let read = stream.read_all(want.len()).await?;
        check_routing(&read, &stream.shard_map().await?);
        assert!(
            read.len() < evs.len() / 10,
            "collapsed: {} events",
            read.len()
        );
        let mut got: HashMap<(String, i64), u64> = HashMap::new();
        for (_, pk, e) in &read {
            *got.entry((pk.clone(), e.timestamp.timestamp()))
                .or_default() += e.quantity;
        }
        assert_eq!(got, want, "every unit of every group-second arrived");
        Ok::<_, anyhow::Error>(())
    }
    .await;
    stream.delete().await;
    result
}
