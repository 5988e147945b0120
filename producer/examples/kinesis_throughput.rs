//! The Rust side of `scripts/bench`'s Python producer rows (docs/benchmarks.md, "The Python
//! producer"): the same workload the Python bench records, from one thread of Rust, into a
//! real Kinesis stream (the bench stack's).
//!
//! `cargo run --release -p awsmp-producer --example kinesis_throughput -- STREAM EVENTS [meter]`
//!
//! `EVENTS` events over 300 groups (quantity `i % 97 + 1`, timestamped now), through
//! `Producer::record(Event)` (or, with `meter`, through one `Meter` per group), in two passes
//! of half each: the first timed as a whole (`loop_seconds` for `loop_events`), the second
//! call by call; then `shutdown()`. Endpoint, region and credentials from the environment. Prints one JSON object:
//! the recording loop's seconds, the p50/p99 of a call (a second pass of the same loop, each
//! call timed), the bytes Kinesis acknowledged and the events delivered. The caller measures
//! the process's CPU time.

use std::time::Instant;

use awsmp_producer::{Event, Producer};
use chrono::Utc;
use hdrhistogram::Histogram;

const GROUPS: u64 = 300;

fn group(g: u64) -> (String, String, &'static str) {
    (
        format!(
            "arn:aws:license-manager::123456789012:license:l-{:032x}",
            g / 3
        ),
        format!("{:012}", 210_987_654_321 + g / 3),
        ["dim0", "dim1", "dim2"][(g % 3) as usize],
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [stream, events, rest @ ..] = args.as_slice() else {
        anyhow::bail!("usage: kinesis_throughput STREAM EVENTS [meter]");
    };
    let events: u64 = events.parse()?;
    let meter = rest.first().is_some_and(|a| a == "meter");
    let producer = Producer::builder(stream.as_str())
        .producer_id("bench")
        .build()
        .await?;
    let groups: Vec<_> = (0..GROUPS).map(group).collect();
    let meters = groups
        .iter()
        .map(|(l, a, d)| producer.meter(l.as_str(), a.as_str(), *d))
        .collect::<Result<Vec<_>, _>>()?;
    let mut latency = Histogram::<u64>::new(3)?;
    let mut loop_seconds = 0.0;
    for timed in [false, true] {
        let start = Instant::now();
        for i in 0..events / 2 {
            let g = (i % GROUPS) as usize;
            let q = i % 97 + 1;
            let t0 = timed.then(Instant::now);
            if meter {
                meters[g].record(Utc::now(), q).await?;
            } else {
                let (l, a, d) = &groups[g];
                let e = Event::new(l.as_str(), a.as_str(), *d, q, Utc::now());
                producer.record(e).await?;
            }
            if let Some(t0) = t0 {
                latency.record(t0.elapsed().as_nanos() as u64)?;
            }
        }
        if !timed {
            loop_seconds = start.elapsed().as_secs_f64();
        }
    }
    drop(meters);
    let outcome = producer.shutdown().await?;
    anyhow::ensure!(
        outcome.is_complete(),
        "undelivered: {:?}",
        outcome.undelivered
    );
    let stats = producer.stats();
    println!(
        "{{\"loop_events\": {}, \"loop_seconds\": {loop_seconds}, \"p50_ns\": {}, \"p99_ns\": {}, \"bytes_acked\": {}, \"events_acked\": {}}}",
        events / 2,
        latency.value_at_quantile(0.5),
        latency.value_at_quantile(0.99),
        stats.bytes_acked,
        stats.events_acked,
    );
    Ok(())
}
