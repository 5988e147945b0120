//! The producer against in-memory and fault-injecting sinks (seeded; virtual time).
//! Every test checks conservation: each recorded event is delivered at least once or handed
//! back to the caller.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use awsmp_contract::wire::deaggregate;
use awsmp_producer::partition::ShardMap;
use awsmp_producer::{
    Event, FaultConfig, FaultInjectingRecordSink, MemoryRecordSink, Producer, ProducerBuilder,
    StaticShardMapSource, Undelivered,
};
use common::{assert_conserved, events, stored_events};

fn builder() -> ProducerBuilder {
    Producer::builder("test-stream")
        .linger(Duration::from_millis(50))
        .jitter_seed(7)
}

async fn record_all(p: &Producer, evs: &[Event]) {
    for e in evs {
        p.record(e.clone()).await.expect("recorded");
    }
}

#[tokio::test(start_paused = true)]
async fn every_event_arrives_aggregated_on_its_groups_shard() {
    let map = ShardMap::uniform(4);
    let sink = MemoryRecordSink::new(map.clone());
    let p = builder()
        .start_with(sink.clone(), StaticShardMapSource::new(map.clone()))
        .unwrap();
    let evs = events(3_000, 40, 1);
    record_all(&p, &evs).await;
    let outcome = p.shutdown().await.unwrap();
    assert!(outcome.is_complete());

    let delivered = stored_events(&sink.records(), &map);
    let (ids, dups) = assert_conserved(&evs, &delivered, &outcome);
    assert_eq!((ids, dups), (3_000, 0), "no fault, no duplicate");
    let records = sink.records();
    assert!(
        records.len() < 300,
        "aggregation packs many events per record: {} records",
        records.len()
    );
    // Aggregates mixing groups carry an explicit hash key inside their shard.
    assert!(records.iter().any(|r| r.entry.explicit_hash_key.is_some()));
    let stats = p.stats();
    assert_eq!(stats.events_recorded, 3_000);
    assert_eq!(stats.events_acked, 3_000);
    assert_eq!(stats.events_undelivered, 0);
    assert_eq!(p.buffered_bytes(), 0, "everything acknowledged is released");
}

#[tokio::test(start_paused = true)]
async fn plain_records_when_aggregation_is_off() {
    let map = ShardMap::uniform(2);
    let sink = MemoryRecordSink::new(map.clone());
    let p = builder()
        .aggregation(false)
        .start_with(sink.clone(), StaticShardMapSource::new(map.clone()))
        .unwrap();
    let evs = events(500, 10, 2);
    record_all(&p, &evs).await;
    let outcome = p.shutdown().await.unwrap();
    let records = sink.records();
    assert_eq!(records.len(), 500);
    assert!(
        records
            .iter()
            .all(|r| !deaggregate(&r.entry.data).unwrap()[0].aggregated)
    );
    let delivered = stored_events(&records, &map);
    assert_eq!(assert_conserved(&evs, &delivered, &outcome), (500, 0));
}

async fn run_with_faults(
    faults: FaultConfig,
    n: usize,
) -> (
    Vec<Event>,
    Vec<Event>,
    awsmp_producer::FlushOutcome,
    Arc<FaultInjectingRecordSink<MemoryRecordSink>>,
    Producer,
) {
    let map = ShardMap::uniform(3);
    let mem = MemoryRecordSink::new(map.clone());
    let sink = Arc::new(FaultInjectingRecordSink::new(mem.clone(), faults));
    let p = builder()
        .max_buffered_bytes(512 * 1024)
        .start_with(sink.clone(), StaticShardMapSource::new(map.clone()))
        .unwrap();
    let evs = events(n, 25, 3);
    record_all(&p, &evs).await;
    let outcome = p.shutdown().await.unwrap();
    let delivered = stored_events(&mem.records(), &map);
    (evs, delivered, outcome, sink, p)
}

#[tokio::test(start_paused = true)]
async fn per_record_failures_are_retried_until_delivered() {
    let (evs, delivered, outcome, sink, p) = run_with_faults(
        FaultConfig {
            entry_failure_rate: 0.3,
            ..FaultConfig::default()
        },
        2_000,
    )
    .await;
    assert!(sink.counts().entries_failed > 0);
    assert!(
        outcome.is_complete(),
        "TTL is ample: everything gets through"
    );
    let (ids, dups) = assert_conserved(&evs, &delivered, &outcome);
    assert_eq!(
        (ids, dups),
        (2_000, 0),
        "failed entries were not applied: no duplicates"
    );
    assert!(p.stats().retries > 0);
}

#[tokio::test(start_paused = true)]
async fn throttling_is_absorbed_not_reported() {
    let (evs, delivered, outcome, sink, p) = run_with_faults(
        FaultConfig {
            entry_throttle_rate: 0.4,
            call_throttle_rate: 0.2,
            ..FaultConfig::default()
        },
        2_000,
    )
    .await;
    let c = sink.counts();
    assert!(c.entries_throttled > 0 && c.calls_throttled > 0, "{c:?}");
    assert!(outcome.is_complete());
    assert_eq!(assert_conserved(&evs, &delivered, &outcome), (2_000, 0));
    assert!(p.stats().throttles >= c.entries_throttled);
}

#[tokio::test(start_paused = true)]
async fn lost_responses_give_duplicates_never_losses() {
    let (evs, delivered, outcome, sink, _p) = run_with_faults(
        FaultConfig {
            lost_response_rate: 0.3,
            ..FaultConfig::default()
        },
        2_000,
    )
    .await;
    assert!(sink.counts().responses_lost > 0);
    assert!(outcome.is_complete());
    let (ids, dups) = assert_conserved(&evs, &delivered, &outcome);
    assert_eq!(ids, 2_000);
    assert!(dups > 0, "the applied-then-failed calls were resent");
}

#[tokio::test(start_paused = true)]
async fn failing_and_slow_calls_are_retried() {
    let (evs, delivered, outcome, sink, _p) = run_with_faults(
        FaultConfig {
            call_failure_rate: 0.3,
            max_latency: Duration::from_millis(400),
            ..FaultConfig::default()
        },
        2_000,
    )
    .await;
    assert!(sink.counts().calls_failed > 0);
    assert!(outcome.is_complete());
    assert_eq!(assert_conserved(&evs, &delivered, &outcome).0, 2_000);
}

#[tokio::test(start_paused = true)]
async fn calls_slower_than_the_timeout_are_resent() {
    let map = ShardMap::uniform(1);
    let mem = MemoryRecordSink::new(map.clone());
    // Every call takes up to 2 s; the timeout is 1 s: about half the calls time out (their
    // outcome is unknown, so they are resent and flagged as possibly delivered).
    let sink = FaultInjectingRecordSink::new(
        mem.clone(),
        FaultConfig {
            max_latency: Duration::from_secs(2),
            ..FaultConfig::default()
        },
    );
    let p = builder()
        .put_timeout(Duration::from_secs(1))
        .start_with(sink, StaticShardMapSource::new(map.clone()))
        .unwrap();
    let evs = events(300, 5, 4);
    record_all(&p, &evs).await;
    let outcome = p.shutdown().await.unwrap();
    let delivered = stored_events(&mem.records(), &map);
    assert_eq!(assert_conserved(&evs, &delivered, &outcome).0, 300);
    assert!(p.stats().retries > 0, "timed-out calls were retried");
}

#[tokio::test(start_paused = true)]
async fn every_fault_class_at_once_loses_nothing() {
    let (evs, delivered, outcome, sink, _p) = run_with_faults(
        FaultConfig {
            seed: 99,
            entry_throttle_rate: 0.2,
            entry_failure_rate: 0.1,
            call_throttle_rate: 0.1,
            call_failure_rate: 0.1,
            lost_response_rate: 0.1,
            call_reject_rate: 0.05,
            max_latency: Duration::from_millis(200),
        },
        3_000,
    )
    .await;
    let c = sink.counts();
    assert!(
        c.calls_rejected > 0 && c.responses_lost > 0 && c.entries_throttled > 0,
        "{c:?}"
    );
    let (ids, _dups) = assert_conserved(&evs, &delivered, &outcome);
    let handed_back: usize = outcome.undelivered_events();
    assert!(handed_back > 0, "rejected calls hand their events back");
    assert!(ids + handed_back >= 3_000);
    assert!(
        outcome
            .undelivered
            .iter()
            .all(|u| u.reason.code() == "Rejected" || u.reason.code() == "RecordTtlExpired")
    );
}

#[tokio::test(start_paused = true)]
async fn events_outliving_their_ttl_are_handed_back() {
    let map = ShardMap::uniform(2);
    let mem = MemoryRecordSink::new(map.clone());
    let sink = FaultInjectingRecordSink::new(
        mem.clone(),
        FaultConfig {
            entry_throttle_rate: 1.0,
            ..FaultConfig::default()
        },
    );
    let p = builder()
        .record_ttl(Duration::from_secs(3))
        .start_with(sink, StaticShardMapSource::new(map.clone()))
        .unwrap();
    let evs = events(200, 5, 5);
    record_all(&p, &evs).await;
    let started = tokio::time::Instant::now();
    let outcome = p.shutdown().await.unwrap();
    assert!(
        started.elapsed() <= Duration::from_secs(4),
        "shutdown is bounded by the TTL"
    );
    assert!(mem.records().is_empty());
    assert_eq!(outcome.undelivered_events(), 200);
    assert_conserved(&evs, &[], &outcome);
    for u in &outcome.undelivered {
        assert_eq!(u.reason.code(), "RecordTtlExpired");
        assert!(!u.maybe_delivered, "throttled entries were never applied");
        assert!(u.attempts > 0);
    }
    assert_eq!(p.buffered_bytes(), 0, "handed back: released");
}

#[tokio::test(start_paused = true)]
async fn a_retry_policy_with_few_attempts_hands_back_when_they_are_used_up() {
    let map = ShardMap::uniform(2);
    let mem = MemoryRecordSink::new(map.clone());
    let sink = FaultInjectingRecordSink::new(
        mem.clone(),
        FaultConfig {
            entry_throttle_rate: 1.0,
            ..FaultConfig::default()
        },
    );
    let p = builder()
        .retry(awsmp_producer::DEFAULT_RETRY_POLICY.with_attempts(3))
        .start_with(sink, StaticShardMapSource::new(map.clone()))
        .unwrap();
    let evs = events(100, 5, 6);
    record_all(&p, &evs).await;
    let started = tokio::time::Instant::now();
    let outcome = p.shutdown().await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "three attempts end well before the 30 s TTL"
    );
    assert_eq!(outcome.undelivered_events(), 100);
    assert_conserved(&evs, &[], &outcome);
    for u in &outcome.undelivered {
        assert_eq!(u.reason.code(), "RecordTtlExpired");
        assert_eq!(u.attempts, 3, "max_attempts counts every call made");
    }
    assert_eq!(p.buffered_bytes(), 0, "handed back: released");
}

#[tokio::test(start_paused = true)]
async fn the_callback_receives_undelivered_events_as_they_happen() {
    let map = ShardMap::uniform(1);
    let mem = MemoryRecordSink::new(map.clone());
    let sink = FaultInjectingRecordSink::new(
        mem.clone(),
        FaultConfig {
            call_reject_rate: 1.0,
            ..FaultConfig::default()
        },
    );
    let got: Arc<Mutex<Vec<Undelivered>>> = Arc::default();
    let got2 = got.clone();
    let p = builder()
        .on_undelivered(move |batch| got2.lock().unwrap().extend(batch))
        .start_with(sink, StaticShardMapSource::new(map))
        .unwrap();
    let evs = events(100, 5, 6);
    record_all(&p, &evs).await;
    let outcome = p.flush().await.unwrap();
    assert!(outcome.is_complete(), "the callback got them instead");
    let got = got.lock().unwrap().clone();
    assert_eq!(got.len(), 100);
    assert!(
        got.iter()
            .all(|u| u.reason.code() == "Rejected" && !u.maybe_delivered)
    );
    let fake = awsmp_producer::FlushOutcome { undelivered: got };
    assert_conserved(&evs, &[], &fake);
    p.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn memory_bound_holds_and_back_pressure_is_applied() {
    let map = ShardMap::uniform(2);
    let sink = MemoryRecordSink::new(map.clone());
    sink.pause();
    let bound = 128 * 1024;
    let p = builder()
        .max_buffered_bytes(bound)
        .start_with(sink.clone(), StaticShardMapSource::new(map.clone()))
        .unwrap();
    let evs = events(5_000, 20, 7);
    let mut accepted = Vec::new();
    let mut full = None;
    for e in &evs {
        match p.try_record(e.clone()) {
            Ok(()) => accepted.push(e.clone()),
            Err(err) => {
                assert!(err.is_full(), "{err}");
                full = Some(err.into_event().unwrap());
                break;
            }
        }
        assert!(p.buffered_bytes() <= bound);
        // Let the engine move events into calls (which the paused sink holds in flight).
        tokio::task::yield_now().await;
    }
    let full = full.expect("the buffer filled up");
    assert_eq!(
        full.event_id,
        evs[accepted.len()].event_id,
        "Full gives the event back"
    );
    let charged: usize = accepted
        .iter()
        .map(|e| {
            let payload = p.config().wire_version.encode(e).len();
            let pk = awsmp_producer::partition::partition_key(
                &e.license_arn,
                &e.customer_aws_account_id,
                &e.dimension,
            );
            Producer::buffer_cost(payload, pk.len())
        })
        .sum();
    assert!(charged <= bound, "{charged} > {bound}");
    assert!(charged > bound - 2_000, "filled to the bound: {charged}");

    // record() waits while full…
    let waiting = tokio::time::timeout(Duration::from_secs(5), p.record(full.clone())).await;
    assert!(waiting.is_err(), "record() must wait for space");
    // …and completes once the sink drains.
    sink.resume();
    p.record(full.clone()).await.unwrap();
    accepted.push(full);
    let outcome = p.shutdown().await.unwrap();
    let delivered = stored_events(&sink.records(), &map);
    assert_eq!(
        assert_conserved(&accepted, &delivered, &outcome),
        (accepted.len(), 0)
    );
    assert_eq!(p.buffered_bytes(), 0);
}

#[tokio::test(start_paused = true)]
async fn flush_waits_for_acknowledgement_and_keeps_the_producer_open() {
    let map = ShardMap::uniform(1);
    let sink = MemoryRecordSink::new(map.clone());
    let p = builder()
        .linger(Duration::from_secs(60))
        .start_with(sink.clone(), StaticShardMapSource::new(map.clone()))
        .unwrap();
    assert!(
        p.flush().await.unwrap().is_complete(),
        "empty flush returns"
    );
    let evs = events(50, 3, 8);
    record_all(&p, &evs).await;
    assert!(sink.records().is_empty(), "still lingering");
    p.flush().await.unwrap();
    assert_eq!(
        stored_events(&sink.records(), &map).len(),
        50,
        "flush sent everything"
    );
    // Still usable after a flush.
    let more = events(10, 3, 9)
        .into_iter()
        .map(|e| e.with_event_id(format!("more-{}", uuid::Uuid::new_v4())))
        .collect::<Vec<_>>();
    record_all(&p, &more).await;
    p.shutdown().await.unwrap();
    assert_eq!(stored_events(&sink.records(), &map).len(), 60);
}

#[tokio::test(start_paused = true)]
async fn errors_give_the_event_back_with_a_reason() {
    let map = ShardMap::uniform(1);
    let p = builder()
        .start_with(
            MemoryRecordSink::new(map.clone()),
            StaticShardMapSource::new(map),
        )
        .unwrap();
    let mut bad = events(1, 1, 10).remove(0);
    bad.customer_aws_account_id = "42".into();
    let err = p.record(bad.clone()).await.unwrap_err();
    assert_eq!(err.reason(), "InvalidAccountId");
    assert_eq!(err.into_event().unwrap(), bad);

    let mut huge = events(1, 1, 11).remove(0);
    huge.producer_id = Some("x".repeat(2 * 1024 * 1024));
    assert_eq!(p.record(huge).await.unwrap_err().reason(), "EventTooLarge");

    p.shutdown().await.unwrap();
    let e = events(1, 1, 12).remove(0);
    let err = p.record(e.clone()).await.unwrap_err();
    assert_eq!(err.reason(), "Closed");
    assert_eq!(err.into_event().unwrap(), e);
    assert_eq!(p.try_record(e).unwrap_err().reason(), "Closed");
}

#[tokio::test(start_paused = true)]
async fn ids_are_generated_once_and_producer_id_is_stamped() {
    let map = ShardMap::uniform(1);
    let sink = MemoryRecordSink::new(map.clone());
    sink.pause();
    let p = builder()
        .producer_id("svc-1")
        .max_buffered_bytes(64 * 1024)
        .start_with(sink.clone(), StaticShardMapSource::new(map.clone()))
        .unwrap();
    let template = events(1, 1, 13).remove(0);
    // Fill the buffer with id-less events until one comes back Full, carrying its new id.
    let mut returned = None;
    for _ in 0..10_000 {
        let mut e = template.clone();
        e.event_id.clear();
        if let Err(err) = p.try_record(e) {
            returned = err.into_event();
            break;
        }
        tokio::task::yield_now().await;
    }
    let returned = returned.expect("buffer filled");
    assert!(!returned.event_id.is_empty(), "id assigned at record()");
    assert_eq!(returned.producer_id.as_deref(), Some("svc-1"));
    sink.resume();
    p.record(returned.clone()).await.unwrap();
    p.shutdown().await.unwrap();
    let delivered = stored_events(&sink.records(), &map);
    assert_eq!(
        delivered
            .iter()
            .filter(|e| e.event_id == returned.event_id)
            .count(),
        1,
        "the retried event kept its id"
    );
    assert!(
        delivered
            .iter()
            .all(|e| e.producer_id.as_deref() == Some("svc-1"))
    );
    let mut ids: Vec<_> = delivered.iter().map(|e| e.event_id.clone()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), delivered.len(), "every generated id is distinct");
}

#[tokio::test(start_paused = true)]
async fn per_shard_budget_paces_a_hot_shard() {
    let map = ShardMap::uniform(1);
    let sink = MemoryRecordSink::new(map.clone());
    let p = builder()
        .aggregation(false)
        .start_with(sink.clone(), StaticShardMapSource::new(map.clone()))
        .unwrap();
    let evs = events(3_000, 1, 14);
    let started = tokio::time::Instant::now();
    record_all(&p, &evs).await;
    p.shutdown().await.unwrap();
    let elapsed = started.elapsed();
    // 1,000 records/s per shard with a one-second burst: 3,000 plain records need ≥ 2 s.
    assert!(elapsed >= Duration::from_millis(1_900), "{elapsed:?}");
    assert_eq!(sink.records().len(), 3_000);
}

#[tokio::test(start_paused = true)]
async fn resharding_is_learned_and_routing_follows() {
    let before = ShardMap::uniform(2);
    let after = ShardMap::uniform(5);
    // The stream has already been resharded; the producer starts with the old listing.
    let sink = MemoryRecordSink::new(after.clone());
    let source = StaticShardMapSource::new(before);
    let p = builder().start_with(sink.clone(), source.clone()).unwrap();
    let evs = events(1_000, 30, 15);
    record_all(&p, &evs[..500]).await;
    p.flush().await.unwrap();
    source.set(after.clone());
    // Records landing on unexpected shards make the producer list again.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(source.lookups() >= 2, "re-listed shards");
    let n_before = sink.records().len();
    record_all(&p, &evs[500..]).await;
    let outcome = p.shutdown().await.unwrap();
    let records = sink.records();
    // Records written after the refresh route every group to its shard in the new map.
    let delivered_after = stored_events(&records[n_before..], &after);
    assert!(!delivered_after.is_empty());
    let mut all = Vec::new();
    for r in &records {
        for u in awsmp_contract::wire::decode_events(&r.entry.data).unwrap() {
            all.push(u.event.unwrap());
        }
    }
    assert_eq!(assert_conserved(&evs, &all, &outcome), (1_000, 0));
}

#[tokio::test(start_paused = true)]
async fn dropping_every_handle_still_delivers() {
    let map = ShardMap::uniform(1);
    let sink = MemoryRecordSink::new(map.clone());
    {
        let p = builder()
            .start_with(sink.clone(), StaticShardMapSource::new(map.clone()))
            .unwrap();
        record_all(&p, &events(100, 4, 16)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(stored_events(&sink.records(), &map).len(), 100);
}

#[tokio::test(start_paused = true)]
async fn calls_fill_up_to_the_put_records_limits_and_no_further() {
    use awsmp_contract::limits::kinesis::{MAX_BYTES_PER_PUT, MAX_RECORDS_PER_PUT};
    // Record limit: 1,500 plain records in one window go out as calls of at most 500.
    let map = ShardMap::uniform(8);
    let sink = MemoryRecordSink::new(map.clone());
    let p = builder()
        .aggregation(false)
        .start_with(sink.clone(), StaticShardMapSource::new(map.clone()))
        .unwrap();
    record_all(&p, &events(1_500, 200, 17)).await;
    p.shutdown().await.unwrap();
    let calls = sink.calls();
    assert_eq!(calls.iter().map(|c| c.0).max(), Some(MAX_RECORDS_PER_PUT));
    assert_eq!(calls.iter().map(|c| c.0).sum::<usize>(), 1_500);

    // Byte limit: ~900 KB records, five fit in 5 MiB, six do not.
    let map = ShardMap::uniform(16);
    let sink = MemoryRecordSink::new(map.clone());
    let p = builder()
        .aggregation(false)
        .max_buffered_bytes(64 * 1024 * 1024)
        .start_with(sink.clone(), StaticShardMapSource::new(map.clone()))
        .unwrap();
    let big: Vec<Event> = events(24, 24, 18)
        .into_iter()
        .map(|mut e| {
            e.producer_id = Some(format!("big-{}", "x".repeat(900_000)));
            e
        })
        .collect();
    record_all(&p, &big).await;
    assert!(p.shutdown().await.unwrap().is_complete());
    let calls = sink.calls();
    assert!(calls.iter().all(|c| c.1 <= MAX_BYTES_PER_PUT), "{calls:?}");
    assert_eq!(calls.iter().map(|c| c.0).max(), Some(5), "{calls:?}");
    assert_eq!(stored_events(&sink.records(), &map).len(), 24);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_callback_does_not_stop_delivery() {
    let map = ShardMap::uniform(1);
    let mem = MemoryRecordSink::new(map.clone());
    let sink = Arc::new(FaultInjectingRecordSink::new(
        mem.clone(),
        FaultConfig {
            call_reject_rate: 1.0,
            ..FaultConfig::default()
        },
    ));
    let p = builder()
        .on_undelivered(|_| panic!("callback bug"))
        .start_with(sink.clone(), StaticShardMapSource::new(map.clone()))
        .unwrap();
    record_all(&p, &events(20, 2, 19)).await;
    p.flush().await.unwrap();
    // The producer is still alive: once the stream accepts again, events get through.
    sink.set_config(FaultConfig::default());
    let later = events(30, 2, 20)
        .into_iter()
        .map(|e| e.with_event_id(format!("later-{}", uuid::Uuid::new_v4())))
        .collect::<Vec<_>>();
    record_all(&p, &later).await;
    assert!(p.shutdown().await.unwrap().is_complete());
    assert_eq!(stored_events(&mem.records(), &map).len(), 30);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_racing_eight_recording_tasks_loses_nothing_and_gives_refused_events_back() {
    // GIVEN eight tasks recording as fast as they can on two threads
    let map = ShardMap::uniform(4);
    let sink = MemoryRecordSink::new(map.clone());
    let p = builder()
        .start_with(sink.clone(), StaticShardMapSource::new(map.clone()))
        .unwrap();
    let tasks: Vec<_> = (0..8u64)
        .map(|t| {
            let p = p.clone();
            tokio::spawn(async move {
                let (mut accepted, mut refused) = (Vec::new(), 0);
                for e in events(5_000, 20, 100 + t) {
                    match p.record(e.clone()).await {
                        Ok(()) => accepted.push(e),
                        Err(err) => {
                            // THEN a refused event is Closed and comes back whole
                            assert_eq!(err.reason(), "Closed");
                            assert_eq!(err.into_event().unwrap().quantity, e.quantity);
                            refused += 1;
                        }
                    }
                }
                (accepted, refused)
            })
        })
        .collect();
    // WHEN the producer shuts down while they record
    tokio::time::sleep(Duration::from_millis(20)).await;
    let outcome = p.shutdown().await.unwrap();
    let (mut accepted, mut refused) = (Vec::new(), 0);
    for t in tasks {
        let (a, r) = t.await.unwrap();
        accepted.extend(a);
        refused += r;
    }
    // THEN every accepted event was delivered or handed back, and nothing else was
    let delivered = stored_events(&sink.records(), &map);
    let handed_back: usize = outcome.undelivered.iter().map(|u| u.constituents).sum();
    assert_eq!(accepted.len() + refused, 40_000);
    assert_eq!(delivered.len() + handed_back, accepted.len());
    assert_eq!(p.stats().events_recorded as usize, accepted.len());
    assert_eq!(p.buffered_bytes(), 0, "every reservation released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_call_in_flight_each_groups_events_arrive_in_the_order_they_were_recorded() {
    // Concurrent PutRecords calls may land in any order (the consumer's fold does not care,
    // docs/guarantees.md); staging and packing keep each group's order.
    let map = ShardMap::uniform(2);
    let sink = MemoryRecordSink::new(map.clone());
    let p = builder()
        .max_in_flight(1)
        .start_with(sink.clone(), StaticShardMapSource::new(map.clone()))
        .unwrap();
    // Eight tasks, each recording its own groups in quantity order 1, 2, 3, …
    let tasks: Vec<_> = (0..8usize)
        .map(|t| {
            let p = p.clone();
            tokio::spawn(async move {
                for (i, mut e) in events(2_000, 1, 0).into_iter().enumerate() {
                    e.license_arn = common::arn(t);
                    e.quantity = i as u64 + 1;
                    e.usage_allocations = None;
                    p.record(e).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    p.shutdown().await.unwrap();
    let mut last: std::collections::HashMap<String, u64> = Default::default();
    let delivered = stored_events(&sink.records(), &map);
    assert_eq!(delivered.len(), 16_000);
    for e in delivered {
        let prev = last.insert(e.license_arn.clone(), e.quantity).unwrap_or(0);
        assert_eq!(e.quantity, prev + 1, "{} out of order", e.license_arn);
    }
}

/// Eight tasks on two threads share four meters (collapse), each event added under a meter's
/// slot lock while windows close every few milliseconds and take the slots' sums back on the
/// task: every unit and every event is counted exactly once, per group and second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn meters_shared_by_tasks_on_two_threads_collapse_every_unit_exactly_once() {
    let map = ShardMap::uniform(2);
    let sink = MemoryRecordSink::new(map.clone());
    let p = builder()
        .collapse(true)
        .linger(Duration::from_millis(2))
        .start_with(sink.clone(), StaticShardMapSource::new(map.clone()))
        .unwrap();
    let meters: Vec<_> = (0..4)
        .map(|g| p.meter(common::arn(g), "210987654321", "requests").unwrap())
        .collect();
    let per_task = 20_000u64;
    // Ten event seconds, each group's events in order of time per task.
    let at = |i: u64| common::t0() + chrono::Duration::milliseconds((i / 200) as i64 * 100);
    let tasks: Vec<_> = (0..8u64)
        .map(|t| {
            let meters = meters.clone();
            tokio::spawn(async move {
                for i in 0..per_task {
                    let m = &meters[((t + i) % 4) as usize];
                    m.record(at(i), 1 + (i % 3)).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    drop(meters);
    assert!(p.shutdown().await.unwrap().is_complete());
    let mut want = std::collections::HashMap::<(String, i64), u64>::new();
    for t in 0..8u64 {
        for i in 0..per_task {
            let g = ((t + i) % 4) as usize;
            *want.entry((common::arn(g), at(i).timestamp())).or_default() += 1 + (i % 3);
        }
    }
    let mut got = std::collections::HashMap::<(String, i64), u64>::new();
    let delivered = stored_events(&sink.records(), &map);
    for e in &delivered {
        *got.entry((e.license_arn.clone(), e.timestamp.timestamp()))
            .or_default() += e.quantity;
    }
    assert_eq!(got, want);
    assert!(
        delivered.len() < 8 * per_task as usize / 10,
        "events collapsed"
    );
    assert_eq!(p.stats().events_recorded, 8 * per_task);
    assert_eq!(p.buffered_bytes(), 0, "every reservation released");
}
