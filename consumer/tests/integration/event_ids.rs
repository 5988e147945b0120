//! An event id is an idempotency key: the same event reaching the stream twice — plain, and
//! re-packed into a KPL aggregate with other events (a caller re-recording an event the
//! producer handed back as `maybe_delivered`) — is billed once, whatever record carries it.

use crate::common;

use std::sync::Arc;

use awsmp_consumer::Settings;
use awsmp_consumer::adapters::memory::MemoryStores;
use awsmp_consumer::handler::kinesis_record;
use awsmp_contract::Event;
use awsmp_contract::clock::FixedClock;
use awsmp_contract::wire::{encode_aggregated, encode_event};
use awsmp_producer::partition::partition_key;
use chrono::{DateTime, TimeZone, Utc};

use common::event;

const ARN: &str =
    "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";
const STREAM: &str = "arn:aws:kinesis:us-east-1:123456789012:stream/awsmp-usage-events";
const SHARD: &str = "shardId-000000000000";

fn at() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 7).unwrap()
}

fn payload(id: &str, quantity: u64) -> Vec<u8> {
    encode_event(&Event::new(ARN, "210987654321", "api", quantity, at()).with_event_id(id))
}

/// Plain `id` (5) on record 1; on record 2 an aggregate of `id` (5) and two new events (2, 3).
fn plain_then_repacked(
    id: &str,
    others: [&str; 2],
) -> aws_lambda_events::event::kinesis::KinesisEvent {
    let pk = partition_key(ARN, "210987654321", "api");
    let plain = kinesis_record(STREAM, SHARD, "1", &pk, at(), payload(id, 5));
    let (a, b, c) = (payload(id, 5), payload(others[0], 2), payload(others[1], 3));
    let agg = encode_aggregated([
        (pk.as_str(), None, &b[..]),
        (pk.as_str(), None, &a[..]),
        (pk.as_str(), None, &c[..]),
    ]);
    let repacked = kinesis_record(STREAM, SHARD, "2", &pk, at(), agg.to_vec());
    event(&[plain, repacked])
}

async fn billed(batches: Vec<aws_lambda_events::event::kinesis::KinesisEvent>) -> u64 {
    let stores = MemoryStores::new();
    let consumer = stores.consumer(Settings::default(), Arc::new(FixedClock::new(at())));
    for b in batches {
        let (response, _) = consumer.process(b).await;
        assert!(response.batch_item_failures.is_empty());
    }
    stores.rows.quantities().values().sum()
}

#[tokio::test]
async fn a_caller_id_re_recorded_inside_an_aggregate_is_billed_once() {
    // GIVEN a caller-supplied id sent plain and again inside an aggregate with two new events,
    // WHEN one batch delivers both records, THEN the id's quantity is billed once.
    let batch = plain_then_repacked("order-17", ["order-18", "order-19"]);
    assert_eq!(billed(vec![batch]).await, 5 + 2 + 3);
}

#[tokio::test]
async fn a_caller_id_re_recorded_in_a_later_batch_is_billed_once() {
    let batch = plain_then_repacked("order-17", ["order-18", "order-19"]);
    let (first, second) = (event(&batch.records[..1]), event(&batch.records[1..]));
    assert_eq!(billed(vec![first, second]).await, 5 + 2 + 3);
}

fn generated(seq: u64) -> String {
    awsmp_contract::event_id::GeneratedId {
        epoch: 0x5eed,
        lane: 3,
        seq,
    }
    .to_string()
}

#[tokio::test]
async fn a_generated_id_re_recorded_inside_an_aggregate_is_billed_once() {
    let batch = plain_then_repacked(&generated(1), [&generated(2), &generated(3)]);
    let (first, second) = (event(&batch.records[..1]), event(&batch.records[1..]));
    assert_eq!(billed(vec![batch]).await, 5 + 2 + 3);
    assert_eq!(billed(vec![first, second]).await, 5 + 2 + 3);
}

#[tokio::test]
async fn a_replayed_batch_applies_its_records_again_exactly_once() {
    // GIVEN a batch applied once, WHEN Lambda delivers it again (a retry after a crash),
    // THEN its own claims pass and the rows do not grow.
    let stores = MemoryStores::new();
    let consumer = stores.consumer(Settings::default(), Arc::new(FixedClock::new(at())));
    let batch = plain_then_repacked(&generated(1), [&generated(2), "order-1"]);
    for _ in 0..2 {
        consumer.process(batch.clone()).await;
    }
    assert_eq!(stores.rows.quantities().values().sum::<u64>(), 10);
    assert_eq!(
        consumer.metrics.total("DedupHit"),
        2.0,
        "only the re-packed copy, once per delivery"
    );
}

#[tokio::test]
async fn generated_ids_cost_one_dedup_write_per_lane_per_batch_caller_ids_one_per_event() {
    let pk = partition_key(ARN, "210987654321", "api");
    let records = |id: &dyn Fn(u64) -> String| {
        let recs: Vec<_> = (0..100u64)
            .map(|r| {
                let p = payload(&id(r + 1), 1);
                kinesis_record(STREAM, SHARD, &(r + 1).to_string(), &pk, at(), p)
            })
            .collect();
        event(&recs)
    };
    let writes = |batch| async move {
        let stores = MemoryStores::new();
        let consumer = stores.consumer(Settings::default(), Arc::new(FixedClock::new(at())));
        consumer.process(batch).await;
        stores.dedup.writes()
    };
    assert_eq!(writes(records(&generated)).await, 1);
    assert_eq!(writes(records(&|s| format!("order-{s}"))).await, 100);
}

/// Through the real producer with collapse: a sum is named by one generated id, so the sum
/// re-recorded after a hand-back (it comes back under that id, and an event with an id of its
/// own joins no sum) is dropped by its lane's sequences — billed once, with no per-id claim.
#[tokio::test]
async fn a_collapsed_sum_re_recorded_after_a_hand_back_is_billed_once_by_its_sequence() {
    use awsmp_contract::wire::decode_events;
    use awsmp_producer::partition::ShardMap;
    use awsmp_producer::{MemoryRecordSink, Producer, StaticShardMapSource};

    let map = ShardMap::uniform(1);
    let sink = MemoryRecordSink::new(map.clone());
    let p = Producer::builder("awsmp-usage-events")
        .collapse(true)
        .linger(std::time::Duration::from_secs(600))
        .start_with(sink.clone(), StaticShardMapSource::new(map))
        .unwrap();
    let usage = |q| Event::new(ARN, "210987654321", "api", q, at());
    for q in [2, 3, 4] {
        p.record(usage(q)).await.unwrap();
    }
    assert!(p.flush().await.unwrap().is_complete());
    let first = sink.records();
    let sent: Vec<Event> = first
        .iter()
        .flat_map(|r| decode_events(&r.entry.data).unwrap())
        .map(|u| u.event.unwrap())
        .collect();
    assert_eq!(sent.len(), 1, "one sum: {sent:?}");
    let sum = sent[0].clone();
    assert_eq!(sum.quantity, 9);
    assert!(awsmp_contract::event_id::GeneratedId::parse(&sum.event_id).is_some());

    // The caller re-records the sum as handed back, beside a new event of its group-second.
    p.record(sum).await.unwrap();
    p.record(usage(5)).await.unwrap();
    assert!(p.shutdown().await.unwrap().is_complete());
    let second = sink.records()[first.len()..].to_vec();

    let as_batch = |records: &[awsmp_producer::sink::StoredRecord], from: u64| {
        let recs: Vec<_> = records
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let seq = (from + i as u64).to_string();
                let pk = &r.entry.partition_key;
                kinesis_record(STREAM, SHARD, &seq, pk, at(), r.entry.data.to_vec())
            })
            .collect();
        event(&recs)
    };
    let stores = MemoryStores::new();
    let consumer = stores.consumer(Settings::default(), Arc::new(FixedClock::new(at())));
    for batch in [as_batch(&first, 1), as_batch(&second, 100)] {
        let (response, _) = consumer.process(batch).await;
        assert!(response.batch_item_failures.is_empty());
    }
    assert_eq!(stores.rows.quantities().values().sum::<u64>(), 9 + 5);
    assert_eq!(
        consumer.metrics.total("DedupHit"),
        1.0,
        "the re-recorded sum"
    );
    assert!(stores.dedup.is_empty(), "no per-id claim: sequences only");
}

/// The duplicates a batch dropped, by how each was recognised: one `DedupHit` point per kind
/// that had any (a batch with none emits none), and their sum in the batch's report.
#[tokio::test]
async fn dedup_hits_are_reported_by_kind_and_a_clean_batch_reports_none() {
    let pk = partition_key(ARN, "210987654321", "api");
    let stores = MemoryStores::new();
    let consumer = stores.consumer(Settings::default(), Arc::new(FixedClock::new(at())));
    let first = event(&[
        kinesis_record(STREAM, SHARD, "1", &pk, at(), payload("order-1", 5)),
        kinesis_record(STREAM, SHARD, "2", &pk, at(), payload(&generated(1), 2)),
    ]);
    let (response, report) = consumer.process(first).await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(report.dedup_hits, 0);
    assert!(
        consumer.metrics.points("DedupHit").is_empty(),
        "nothing dropped, nothing reported"
    );

    // order-1 claimed by record 1, order-2 twice in this record, sequence 1 applied by record 2.
    let events = [
        payload("order-1", 5),
        payload("order-2", 7),
        payload("order-2", 7),
        payload(&generated(1), 2),
        payload(&generated(2), 3),
    ];
    let agg = encode_aggregated(events.iter().map(|p| (pk.as_str(), None, &p[..])));
    let second = event(&[kinesis_record(STREAM, SHARD, "3", &pk, at(), agg.to_vec())]);
    let (response, report) = consumer.process(second).await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(
        stores.rows.quantities().values().sum::<u64>(),
        5 + 2 + 7 + 3
    );
    assert_eq!(report.dedup_hits, 3);
    let mut by_kind: Vec<(String, f64)> = consumer
        .metrics
        .points("DedupHit")
        .iter()
        .map(|p| {
            (
                p["DedupKind"].as_str().unwrap().to_owned(),
                p["DedupHit"].as_f64().unwrap(),
            )
        })
        .collect();
    by_kind.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        by_kind,
        [("IdClaim".to_owned(), 2.0), ("Sequence".to_owned(), 1.0)]
    );
}

/// A lane's state lives for the dedup window (48 hours by default): within it a sequence is
/// applied once, past it the lane starts again (the item's TTL may not have removed it yet).
/// Every write of a lane moves its version, so a writer holding the version it read before
/// another claim's write cannot overwrite that claim.
#[tokio::test]
async fn a_lane_expires_after_the_dedup_window_and_every_write_moves_its_version() {
    use awsmp_consumer::ports::DedupStore;
    let pk = partition_key(ARN, "210987654321", "api");
    let stores = MemoryStores::new();
    let at_hours = |h: i64| at() + chrono::Duration::hours(h);
    let deliver = |hours: i64, record: &str, seq: u64| {
        let t = at_hours(hours);
        let p = encode_event(
            &Event::new(ARN, "210987654321", "api", 1, t).with_event_id(generated(seq)),
        );
        let consumer = stores.consumer(Settings::default(), Arc::new(FixedClock::new(t)));
        let batch = event(&[kinesis_record(STREAM, SHARD, record, &pk, t, p)]);
        async move {
            let (response, report) = consumer.process(batch).await;
            assert!(response.batch_item_failures.is_empty());
            report.dedup_hits
        }
    };
    let key = awsmp_consumer::domain::dedup::lane_key(
        &awsmp_contract::event_id::GeneratedId::parse(&generated(1)).unwrap(),
    );
    assert_eq!(deliver(0, "1", 1).await, 0);
    let read = stores.dedup.read_lane(&key).await.unwrap().unwrap();
    assert_eq!(
        deliver(47, "2", 1).await,
        1,
        "inside the window: a duplicate"
    );
    assert_eq!(deliver(47, "3", 2).await, 0);
    let stale = awsmp_consumer::ports::LaneItem {
        state: String::new(),
        ..read.clone()
    };
    assert!(
        !stores
            .dedup
            .write_lane(&stale, Some(read.version))
            .await
            .unwrap(),
        "a write on the version read before sequence 2's claim must fail"
    );
    assert_eq!(
        deliver(48 + 47 + 1, "4", 1).await,
        0,
        "past the window: new again"
    );
}
