//! Writes what the producer puts on a stream, for an independent deaggregator to check.
//!
//! `cargo run -q -p awsmp-producer --example encode_fixture -- OUT.json [--stream NAME] [--wire 1|2]`
//!
//! Runs the real producer (aggregation on, small aggregates) against an in-memory stream of four
//! shards and writes JSON: the shard map, every Kinesis record exactly as put (partition key,
//! explicit hash key, base64 data, shard) and every recorded event as its v1 payload.
//! With `--stream NAME` it writes to that Kinesis stream instead (endpoint, region and
//! credentials from the environment) and the JSON holds only the events. `--wire` picks the
//! encoding the producer writes (default: the producer's default, v2; docs/wire-format.md).

use std::time::Duration;

use awsmp_contract::wire::{WireVersion, encode_event};
use awsmp_producer::partition::ShardMap;
use awsmp_producer::{
    Event, MemoryRecordSink, Producer, StaticShardMapSource, Tag, UsageAllocation,
};
use base64::Engine as _;
use chrono::{TimeZone, Utc};

fn events() -> Vec<Event> {
    let dims = [
        "requests",
        "gb-hours",
        "caf\u{e9}-\u{fc}nits \u{2603}",
        // 255 bytes: the longest dimension the producer accepts (BatchMeterUsage takes 255).
        &"long-dimension-".repeat(17),
    ];
    (0..120u64)
        .map(|i| {
            let g = (i % 13) as usize;
            let e = Event::new(
                format!("arn:aws:license-manager::123456789012:license:l-{:032x}", g),
                format!("{:012}", 200_000_000_000u64 + (g % 5) as u64),
                dims[g % dims.len()],
                [0, 1, 42, u64::MAX][(i % 4) as usize],
                Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap()
                    + chrono::Duration::milliseconds((i * 137) as i64),
            )
            .with_event_id(format!("rust-{i:04}"));
            let e = if i % 3 == 0 {
                e.with_producer_id("encode-fixture")
            } else {
                e
            };
            if g % 4 == 1 && e.quantity >= 2 {
                let q = e.quantity;
                e.with_allocations(vec![
                    UsageAllocation::new(q / 2, vec![Tag::new("team", "a")]),
                    UsageAllocation::new(
                        q - q / 2,
                        vec![Tag::new("team", "b"), Tag::new("env", "prod")],
                    ),
                ])
            } else {
                e
            }
        })
        .collect()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let out = args
        .first()
        .ok_or("usage: encode_fixture OUT.json [--stream NAME]")?
        .clone();
    let wire: WireVersion = match args.iter().position(|a| a == "--wire") {
        Some(i) => args.get(i + 1).ok_or("--wire needs 1 or 2")?.parse()?,
        None => WireVersion::default(),
    };
    let evs = events();
    let payloads = evs
        .iter()
        .map(|e| serde_json::from_slice::<serde_json::Value>(&encode_event(e)))
        .collect::<Result<Vec<_>, _>>()?;
    if let (Some("--stream"), Some(stream)) = (args.get(1).map(String::as_str), args.get(2)) {
        let producer = Producer::builder(stream.clone())
            .wire_version(wire)
            .max_aggregate_bytes(4096)
            .build()
            .await?;
        for e in &evs {
            producer.record(e.clone()).await?;
        }
        let outcome = producer.shutdown().await?;
        if !outcome.is_complete() {
            return Err(format!("{} events undelivered", outcome.undelivered_events()).into());
        }
        let json = serde_json::json!({ "events": payloads });
        std::fs::write(&out, serde_json::to_vec_pretty(&json)?)?;
        println!("{} events -> stream {stream}", evs.len());
        return Ok(());
    }
    let map = ShardMap::uniform(4);
    let sink = MemoryRecordSink::new(map.clone());
    let producer = Producer::builder("fixture-stream")
        .wire_version(wire)
        .max_aggregate_bytes(4096)
        .linger(Duration::from_millis(10))
        .start_with(sink.clone(), StaticShardMapSource::new(map.clone()))?;
    for e in &evs {
        producer.record(e.clone()).await?;
    }
    let outcome = producer.shutdown().await?;
    if !outcome.is_complete() {
        return Err(format!("{} events undelivered", outcome.undelivered_events()).into());
    }
    let b64 = base64::engine::general_purpose::STANDARD;
    let json = serde_json::json!({
        "shards": map.shards().iter().map(|s| serde_json::json!({
            "shardId": s.shard_id,
            "startingHashKey": s.starting_hash_key.to_string(),
            "endingHashKey": s.ending_hash_key.to_string(),
        })).collect::<Vec<_>>(),
        "records": sink.records().iter().map(|r| serde_json::json!({
            "partitionKey": r.entry.partition_key,
            "explicitHashKey": r.entry.explicit_hash_key,
            "shardId": r.shard_id,
            "data": b64.encode(&r.entry.data),
        })).collect::<Vec<_>>(),
        "events": payloads,
    });
    std::fs::write(&out, serde_json::to_vec_pretty(&json)?)?;
    println!(
        "{} events in {} records -> {out}",
        evs.len(),
        sink.records().len()
    );
    Ok(())
}
