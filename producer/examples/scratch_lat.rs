#![allow(clippy::all)]
use awsmp_producer::partition::ShardMap;
use awsmp_producer::{
    Event, MemoryRecordSink, Producer, StaticShardMapSource, Tag, UsageAllocation,
};
use chrono::{TimeZone, Utc};
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::{Duration, Instant};
fn events(n: usize, seconds: i64, seed: u64) -> Vec<Event> {
    let mut rng = StdRng::seed_from_u64(seed);
    let t0 = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
    (0..n)
        .map(|i| {
            let u: f64 = rng.random();
            let g = ((u * u) * 1000.0) as usize;
            let q = rng.random_range(1..100u64);
            let e = Event::new(
                format!("arn:aws:license-manager::123456789012:license:l-{g:032x}"),
                format!("{:012}", 100_000_000_000u64 + g as u64),
                ["requests", "gb-hours", "seats"][g % 3],
                q,
                t0 + chrono::Duration::milliseconds((i as i64 * seconds * 1000) / n as i64),
            );
            if g % 10 == 0 {
                e.with_allocations(vec![UsageAllocation::new(
                    q,
                    vec![Tag::new("team", "platform")],
                )])
            } else {
                e
            }
        })
        .collect()
}
fn main() {
    let collapse = std::env::args().nth(1).as_deref() == Some("c");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let evs = events(200_000, 20, 3);
    let hist = rt.block_on(async {
        let map = ShardMap::uniform(256);
        let p = Producer::builder("b")
            .collapse(collapse)
            .linger(Duration::from_millis(100))
            .producer_id("bench")
            .start_with(
                MemoryRecordSink::discarding(map.clone()),
                StaticShardMapSource::new(map),
            )
            .unwrap();
        let per = evs.len() / 8;
        let tasks: Vec<_> = (0..8)
            .map(|t| {
                let (p, mine) = (p.clone(), evs[t * per..(t + 1) * per].to_vec());
                tokio::spawn(async move {
                    let mut h = Histogram::<u64>::new(3).unwrap();
                    for e in mine {
                        let s = Instant::now();
                        p.record(e).await.unwrap();
                        h.record(s.elapsed().as_nanos() as u64).unwrap();
                    }
                    h
                })
            })
            .collect();
        let mut all = Histogram::<u64>::new(3).unwrap();
        for t in tasks {
            all.add(t.await.unwrap()).unwrap();
        }
        p.shutdown().await.unwrap();
        all
    });
    println!(
        "p50 {} p90 {} p99 {} p99.9 {} max {}",
        hist.value_at_quantile(0.5),
        hist.value_at_quantile(0.9),
        hist.value_at_quantile(0.99),
        hist.value_at_quantile(0.999),
        hist.max()
    );
}
