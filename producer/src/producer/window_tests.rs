//! A window packed while it is open (a take every [`PACK_STEP_BYTES`] staged) sends what the
//! same window packed in one take at its close sends: every event once, each partition key's
//! in recorded order, in aggregates filled to the limit.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{TimeZone, Utc};

use crate::handoff::PACK_STEP_BYTES;
use crate::partition::ShardMap;
use crate::sink::StoredRecord;
use crate::test_support::paused_runtime;
use crate::{Event, MemoryRecordSink, Producer, StaticShardMapSource};

const EPOCH: u128 = 0x0fed_cba9_8765_4321_0fed_cba9_8765_4321;
/// The aggregates' limit: small, so each shard's window fills several.
const AGGREGATE_BYTES: usize = 8 * 1024;
/// Events of one window: several pack steps' worth (about 220 bytes charged each).
const EVENTS: usize = 6_000;

fn event(i: usize) -> Event {
    let g = (i * 7919) % 40;
    Event::new(
        format!("arn:aws:license-manager::123456789012:license:l-{g:032x}"),
        format!("{:012}", 100_000_000_000u64 + g as u64),
        ["requests", "seats"][g % 2],
        1 + (i % 13) as u64,
        Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap()
            + chrono::Duration::milliseconds(i as i64),
    )
}

/// Records `EVENTS` events in one window (the linger never passes: time is paused and the
/// caller never sleeps) and flushes. With `yield_every`, the caller lets the task run that
/// often, and checks it took what was staged once a step was crossed; without, the task
/// takes nothing before the flush. The records the sink got, and the takes seen.
fn run(yield_every: Option<usize>) -> (Vec<StoredRecord>, usize) {
    paused_runtime().block_on(async {
        let sink = MemoryRecordSink::new(ShardMap::uniform(3));
        let p = Producer::builder("s")
            .linger(Duration::from_secs(3600))
            .max_aggregate_bytes(AGGREGATE_BYTES)
            .id_epoch(EPOCH)
            .jitter_seed(7)
            .start_with(
                sink.clone(),
                StaticShardMapSource::new(ShardMap::uniform(3)),
            )
            .unwrap();
        // The shard map is listed before the first event, in both runs.
        tokio::time::sleep(Duration::from_millis(1)).await;
        let mut takes = 0;
        for i in 0..EVENTS {
            p.try_record(event(i)).unwrap();
            if let Some(k) = yield_every
                && i % k == k - 1
            {
                let staged = p.shared.staging.bytes();
                tokio::task::yield_now().await;
                if staged >= PACK_STEP_BYTES {
                    assert_eq!(p.shared.staging.bytes(), 0, "a crossed step wakes the task");
                    takes += 1;
                }
            }
        }
        if yield_every.is_none() {
            assert!(
                p.shared.staging.bytes() >= EVENTS * 200,
                "nothing taken before the flush"
            );
        }
        assert!(p.flush().await.unwrap().is_complete());
        p.shutdown().await.unwrap();
        (sink.records(), takes)
    })
}

/// Each partition key's event ids, in the order its records carry them.
fn ids_by_key(records: &[StoredRecord]) -> BTreeMap<String, Vec<String>> {
    let mut by_key: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in records {
        for u in awsmp_contract::wire::decode_events(&r.entry.data).unwrap() {
            let key = u
                .partition_key
                .unwrap_or_else(|| r.entry.partition_key.clone());
            by_key
                .entry(key)
                .or_default()
                .push(u.event.unwrap().event_id);
        }
    }
    by_key
}

#[test]
fn a_window_packed_while_open_sends_what_one_packed_at_its_close_sends() {
    let (in_steps, takes) = run(Some(250));
    let (at_close, _) = run(None);
    assert!(
        takes >= 3,
        "the window was packed in {takes} takes before its close"
    );
    // The same events, each key's in recorded order (the keys interleave as the takes
    // found them, so the aggregates may hold them differently).
    let ids = ids_by_key(&in_steps);
    assert_eq!(ids, ids_by_key(&at_close));
    assert_eq!(ids.values().map(Vec::len).sum::<usize>(), EVENTS);
    // Packed as full either way: every aggregate of a shard but its last is within one
    // user record of the limit.
    for records in [&in_steps, &at_close] {
        let mut by_shard: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for r in records.iter() {
            by_shard
                .entry(&r.shard_id)
                .or_default()
                .push(r.entry.data.len());
        }
        assert_eq!(by_shard.len(), 3);
        for lens in by_shard.values() {
            assert!(lens.len() > 2, "several aggregates per shard");
            for &len in &lens[..lens.len() - 1] {
                assert!(
                    (AGGREGATE_BYTES - 200..=AGGREGATE_BYTES).contains(&len),
                    "{lens:?}"
                );
            }
        }
    }
}

/// A shard map listed only after `delay` (paused time).
struct SlowShardMap {
    delay: Duration,
    map: ShardMap,
}

impl crate::ShardMapSource for SlowShardMap {
    async fn shard_map(&self) -> Result<ShardMap, crate::shards::ShardMapError> {
        tokio::time::sleep(self.delay).await;
        Ok(self.map.clone())
    }
}

/// Events taken before the first shard map arrives are kept aside and, once it has arrived,
/// packed by it: at the window's close they share their shard's aggregates (mixed keys, routed
/// by an explicit hash key), not one aggregate per partition key.
#[test]
fn events_taken_before_the_shard_map_are_packed_by_it_once_it_arrives() {
    let records = paused_runtime().block_on(async {
        let sink = MemoryRecordSink::new(ShardMap::uniform(2));
        let p = Producer::builder("s")
            .linger(Duration::from_secs(3600))
            .id_epoch(EPOCH)
            .start_with(
                sink.clone(),
                SlowShardMap {
                    delay: Duration::from_millis(50),
                    map: ShardMap::uniform(2),
                },
            )
            .unwrap();
        for i in 0..EVENTS {
            p.try_record(event(i)).unwrap();
            if i % 250 == 249 {
                tokio::task::yield_now().await;
            }
        }
        // Every crossed step was taken with no map yet (no time passed); the map arrives,
        // then the window closes.
        assert!(p.shared.staging.bytes() < PACK_STEP_BYTES);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(p.flush().await.unwrap().is_complete());
        p.shutdown().await.unwrap();
        sink.records()
    });
    let ids = ids_by_key(&records);
    assert_eq!(ids.values().map(Vec::len).sum::<usize>(), EVENTS);
    // 40 keys over 2 shards: about a dozen records per shard, not one or more per key.
    assert!(records.len() < 40, "{} records", records.len());
    assert!(records.iter().all(|r| r.entry.explicit_hash_key.is_some()));
}
