//! The producer reports through the `metrics` facade and `tracing`, and installs neither a
//! recorder nor a subscriber itself. (One test per binary: it installs a global recorder.)

use std::time::Duration;

use awsmp_producer::metrics::names;
use awsmp_producer::partition::ShardMap;
use awsmp_producer::{
    FaultConfig, FaultInjectingRecordSink, MemoryRecordSink, Producer, StaticShardMapSource,
};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

/// `n` events over `groups` groups, each with an id of its own.
fn events(n: usize, groups: usize) -> Vec<awsmp_producer::Event> {
    let t0 = chrono::DateTime::from_timestamp(1_796_040_000, 0).unwrap();
    (0..n)
        .map(|i| {
            let g = i % groups;
            let arn = format!("arn:aws:license-manager::123456789012:license:l-{g:032x}");
            awsmp_producer::Event::new(arn, "123456789012", format!("dim-{}", g % 3), 7, t0)
                .with_event_id(format!("ev-{i}"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_flow_through_the_facade_and_nothing_global_is_installed() {
    let map = ShardMap::uniform(2);
    // A producer runs without any recorder or subscriber…
    let p = Producer::builder("obs")
        .start_with(
            MemoryRecordSink::new(map.clone()),
            StaticShardMapSource::new(map.clone()),
        )
        .unwrap();
    for e in events(50, 5) {
        p.record(e).await.unwrap();
    }
    p.shutdown().await.unwrap();
    // …and has installed neither: both can still be installed by the application.
    assert!(
        !tracing::dispatcher::has_been_set(),
        "no global tracing subscriber"
    );
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("no global metrics recorder was installed by the library");

    let sink = FaultInjectingRecordSink::new(
        MemoryRecordSink::new(map.clone()),
        FaultConfig {
            entry_throttle_rate: 0.5,
            ..FaultConfig::default()
        },
    );
    let p = Producer::builder("obs")
        .linger(Duration::from_millis(5))
        .jitter_seed(3)
        .retry(awsmp_producer::RetryPolicy::new(
            u32::MAX,
            Duration::from_millis(5),
            Duration::from_millis(50),
        ))
        .start_with(sink, StaticShardMapSource::new(map))
        .unwrap();
    // In waves past the linger, so the run puts many records (v2 packs 500 events into very
    // few) and some of them are throttled.
    for wave in events(500, 10).chunks(20) {
        for e in wave {
            p.record(e.clone()).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    assert!(p.shutdown().await.unwrap().is_complete());

    let snap = snapshotter.snapshot().into_vec();
    let counter = |name: &str| -> u64 {
        snap.iter()
            .filter(|(k, ..)| k.key().name() == name)
            .map(|(.., v)| match v {
                DebugValue::Counter(c) => *c,
                _ => 0,
            })
            .sum()
    };
    let histogram_len = |name: &str| -> usize {
        snap.iter()
            .filter(|(k, ..)| k.key().name() == name)
            .map(|(.., v)| match v {
                DebugValue::Histogram(h) => h.len(),
                _ => 0,
            })
            .sum()
    };
    assert_eq!(counter(names::EVENTS_RECORDED), 500);
    assert_eq!(counter(names::EVENTS_ACKED), 500);
    assert!(counter(names::PUT_CALLS) > 0);
    assert!(counter(names::THROTTLES) > 0);
    assert!(counter(names::RETRIES) > 0);
    assert!(counter(names::BYTES_ACKED) > 0);
    assert!(histogram_len(names::RECORD_TO_ACK) > 0);
    assert!(histogram_len(names::PUT_LATENCY) > 0);
    assert!(
        snap.iter()
            .any(|(k, ..)| k.key().name() == names::BUFFER_FILL)
    );
    assert!(snap.iter().all(|(k, ..)| {
        k.key()
            .labels()
            .any(|l| l.key() == "stream" && l.value() == "obs")
    }));
}
