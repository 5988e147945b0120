//! Property tests: packing and call limits, and collapse conserving quantities through the
//! producer (the collapse oracle's own property test is in `src/fold/oracle.rs`).

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use awsmp_contract::limits::kinesis::{MAX_BYTES_PER_PUT, MAX_RECORD_BYTES, MAX_RECORDS_PER_PUT};
use awsmp_contract::wire::deaggregate;
use awsmp_producer::batch::{UserRec, pack};
use awsmp_producer::partition::{ShardMap, partition_hash};
use awsmp_producer::{Event, MemoryRecordSink, Producer, StaticShardMapSource};
use bytes::Bytes;
use chrono::Duration as ChronoDuration;
use proptest::prelude::*;

/// An event of group `group`, `pad` bytes larger by its producer id (a group's fields are
/// bounded: a dimension is at most 255 bytes).
fn event(group: usize, ms: i64, quantity: u64, pad: usize, id: String) -> Event {
    let mut e = Event::new(
        common::arn(group),
        "123456789012",
        format!("d{group}"),
        quantity,
        common::t0() + ChronoDuration::milliseconds(ms),
    )
    .with_event_id(id);
    e.producer_id = Some(format!("p{}", "p".repeat(pad)));
    e
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, .. ProptestConfig::default() })]

    /// Whatever the sizes, no record exceeds 1 MiB, no aggregate exceeds the configured size
    /// (a lone oversized user record goes plain), every aggregate's user records route to the
    /// aggregate's shard, and every user record comes out exactly once, in order per shard.
    #[test]
    fn packing_respects_sizes_and_shards(
        sizes in prop::collection::vec((0usize..8, 10usize..120_000), 1..80),
        shards in 1usize..6,
        max_agg in 1024usize..200_000,
    ) {
        let map = ShardMap::uniform(shards);
        let users: Vec<UserRec<usize>> = sizes.iter().enumerate().map(|(i, (g, len))| {
            let pk = format!("group-{g}");
            UserRec { payload: Bytes::from(vec![b'x'; *len]), split: None, hash: partition_hash(&pk), partition_key: pk.into(), meta: i }
        }).collect();
        let packed = pack(users, |h| map.shard_index(h), true, max_agg);
        let mut seen = Vec::new();
        for p in &packed {
            prop_assert!(p.entry.billed_size() <= MAX_RECORD_BYTES);
            let us = deaggregate(&p.entry.data).unwrap();
            if us.len() > 1 {
                prop_assert!(p.entry.data.len() <= max_agg, "aggregate {} > {max_agg}", p.entry.data.len());
            }
            let route = p.entry.explicit_hash_key.as_ref().map(|k| k.parse::<u128>().unwrap()).unwrap_or_else(|| partition_hash(&p.entry.partition_key));
            prop_assert_eq!(route, p.route_hash);
            let shard = map.shard_index(route);
            for (u, &i) in us.iter().zip(&p.users) {
                let pk = u.partition_key.clone().unwrap_or(p.entry.partition_key.clone());
                prop_assert_eq!(map.shard_index(partition_hash(&pk)), shard);
                prop_assert_eq!(u.data.len(), sizes[i].1);
                seen.push(i);
            }
        }
        seen.sort();
        prop_assert_eq!(seen, (0..sizes.len()).collect::<Vec<_>>());
    }

    /// Through the whole producer: no PutRecords call over 500 records or 5 MiB, no record
    /// over 1 MiB, and every event arrives. (Many small events fill the record limit of a
    /// call; large ones its byte limit.)
    #[test]
    fn producer_calls_stay_within_kinesis_limits(
        small in prop::collection::vec((0usize..6, 0usize..200), 0..1_200),
        large in prop::collection::vec((0usize..6, 20_000usize..60_000), 0..100),
        aggregation in any::<bool>(),
        max_agg in 1024usize..500_000,
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
        rt.block_on(async {
            let map = ShardMap::uniform(3);
            let sink = MemoryRecordSink::new(map.clone());
            let p = Producer::builder("s")
                .aggregation(aggregation)
                .max_aggregate_bytes(max_agg)
                .linger(Duration::from_millis(20))
                .max_buffered_bytes(16 * 1024 * 1024)
                .start_with(sink.clone(), StaticShardMapSource::new(map.clone()))
                .unwrap();
            // Interleave the large events among the small ones.
            let mut specs = small.clone();
            for (k, l) in large.iter().enumerate() {
                specs.insert((k * 13) % (specs.len() + 1), *l);
            }
            for (i, (g, pad)) in specs.iter().enumerate() {
                p.record(event(*g, i as i64, 1, *pad, format!("e{i}"))).await.unwrap();
            }
            prop_assert!(p.shutdown().await.unwrap().is_complete());
            for (entries, bytes) in sink.calls() {
                prop_assert!(entries <= MAX_RECORDS_PER_PUT && bytes <= MAX_BYTES_PER_PUT, "{entries} / {bytes}");
            }
            let records = sink.records();
            for r in &records {
                prop_assert!(r.entry.billed_size() <= MAX_RECORD_BYTES);
            }
            prop_assert_eq!(common::stored_events(&records, &map).len(), specs.len());
            Ok(())
        })?;
    }
}

#[tokio::test(start_paused = true)]
async fn collapse_cuts_records_for_hot_groups_and_conserves_units() {
    let map = ShardMap::uniform(2);
    let sink = MemoryRecordSink::new(map.clone());
    let p = Producer::builder("s")
        .collapse(true)
        .linger(Duration::from_millis(200))
        .start_with(sink.clone(), StaticShardMapSource::new(map.clone()))
        .unwrap();
    // 4 groups × 5,000 events inside two seconds.
    let mut total: HashMap<(String, i64), u64> = HashMap::new();
    for i in 0..20_000u64 {
        // Recorded without ids, as a caller that lets the producer generate them does.
        let e = event(
            (i % 4) as usize,
            (i % 2_000) as i64,
            i % 7,
            0,
            String::new(),
        );
        *total
            .entry((e.dimension.clone(), e.timestamp.timestamp()))
            .or_default() += e.quantity;
        p.record(e).await.unwrap();
    }
    assert!(p.shutdown().await.unwrap().is_complete());
    let delivered = common::stored_events(&sink.records(), &map);
    assert!(
        delivered.len() <= 64,
        "collapsed to a few events: {}",
        delivered.len()
    );
    let mut got: HashMap<(String, i64), u64> = HashMap::new();
    for e in &delivered {
        *got.entry((e.dimension.clone(), e.timestamp.timestamp()))
            .or_default() += e.quantity;
    }
    assert_eq!(got, total);
    assert_eq!(
        p.stats().events_acked,
        20_000,
        "acks count the collapsed constituents"
    );
}

/// Under collapse, an event recorded with an id of its own travels alone under that id, and
/// each sum of events recorded without one is named by one generated id of its own (what the
/// consumer deduplicates by its lane's sequences). A sum handed back and recorded again keeps
/// its id and is merged with nothing, so a consumer that applied it once drops it.
#[tokio::test(start_paused = true)]
async fn collapse_merges_only_events_without_an_id_and_names_each_sum() {
    use awsmp_contract::event_id::GeneratedId;
    let map = ShardMap::uniform(2);
    let sink = MemoryRecordSink::new(map.clone());
    let p = Producer::builder("s")
        .collapse(true)
        .linger(Duration::from_millis(200))
        .start_with(sink.clone(), StaticShardMapSource::new(map.clone()))
        .unwrap();
    for (g, ms, q, id) in [
        (0, 10, 5, "order-17"),
        (0, 20, 3, ""),
        (0, 30, 4, ""),
        (0, 40, 6, "order-18"),
        (1, 50, 2, ""),
    ] {
        p.record(event(g, ms, q, 0, id.into())).await.unwrap();
    }
    assert!(p.flush().await.unwrap().is_complete());
    let first = common::stored_events(&sink.records(), &map);
    let by_quantity = |events: &[Event], q: u64| -> Vec<Event> {
        events.iter().filter(|e| e.quantity == q).cloned().collect()
    };
    assert_eq!(first.len(), 4, "{first:?}");
    assert_eq!(by_quantity(&first, 5)[0].event_id, "order-17");
    assert_eq!(by_quantity(&first, 6)[0].event_id, "order-18");
    let sum = by_quantity(&first, 7)
        .pop()
        .expect("the two events without an id, summed");
    assert_eq!(
        sum.timestamp,
        common::t0() + ChronoDuration::milliseconds(20)
    );
    let lone = by_quantity(&first, 2).pop().expect("group 1's event");
    let (a, b) = (
        GeneratedId::parse(&sum.event_id).expect("a sum's id is a generated one"),
        GeneratedId::parse(&lone.event_id).expect("so is a lone event's"),
    );
    assert_ne!((a.lane, a.seq), (b.lane, b.seq));

    // The sum re-recorded (as a caller does with a `maybe_delivered` hand-back), in a window
    // where another event of its group and second is recorded without an id.
    let before = sink.records().len();
    p.record(sum.clone()).await.unwrap();
    p.record(event(0, 25, 9, 0, String::new())).await.unwrap();
    assert!(p.shutdown().await.unwrap().is_complete());
    let second = common::stored_events(&sink.records()[before..], &map);
    assert_eq!(second.len(), 2, "{second:?}");
    assert_eq!(
        by_quantity(&second, 7),
        vec![sum.clone()],
        "the sum, as it was"
    );
    let new = by_quantity(&second, 9).pop().expect("the new event, apart");
    assert_ne!(new.event_id, sum.event_id);
    assert!(GeneratedId::parse(&new.event_id).is_some());
}
