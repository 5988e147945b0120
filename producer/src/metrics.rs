//! Metric handles (the `metrics` facade; the application installs the recorder) and the
//! producer's own counters ([`ProducerStats`]).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;
use metrics::{Counter, Gauge, Histogram, counter, gauge, histogram};

/// Metric names, all prefixed `awsmp_producer_` and labelled `stream`.
pub mod names {
    /// Events accepted by `record()`/`try_record()`. Under collapse, the events a meter adds
    /// to the open sum it holds are added here together, when the sum is next touched by
    /// another event or its window closes — at the latest when `flush()` or `shutdown()`
    /// returns; `Producer::stats` counts them at once.
    pub const EVENTS_RECORDED: &str = "awsmp_producer_events_recorded_total";
    /// Events refused by `record()` (label `reason`).
    pub const EVENTS_REFUSED: &str = "awsmp_producer_events_refused_total";
    /// Events acknowledged by Kinesis (a collapsed event counts its constituents).
    pub const EVENTS_ACKED: &str = "awsmp_producer_events_acked_total";
    /// Events handed back to the caller (label `reason`).
    pub const EVENTS_UNDELIVERED: &str = "awsmp_producer_events_undelivered_total";
    /// Events merged away by collapse.
    pub const EVENTS_COLLAPSED: &str = "awsmp_producer_events_collapsed_total";
    /// Kinesis records acknowledged.
    pub const RECORDS_ACKED: &str = "awsmp_producer_records_acked_total";
    /// Bytes (data + partition key) acknowledged.
    pub const BYTES_ACKED: &str = "awsmp_producer_bytes_acked_total";
    /// PutRecords calls (label `outcome`: ok, throttled, transient, rejected, timeout).
    pub const PUT_CALLS: &str = "awsmp_producer_put_records_calls_total";
    /// Kinesis records scheduled for another attempt.
    pub const RETRIES: &str = "awsmp_producer_retries_total";
    /// Throttled Kinesis records (per entry, or every entry of a throttled call).
    pub const THROTTLES: &str = "awsmp_producer_throttles_total";
    /// Shard map refreshes (label `outcome`).
    pub const SHARD_REFRESHES: &str = "awsmp_producer_shard_refreshes_total";
    /// Bytes held against the bound.
    pub const BUFFERED_BYTES: &str = "awsmp_producer_buffered_bytes";
    /// Held bytes / bound.
    pub const BUFFER_FILL: &str = "awsmp_producer_buffer_fill_ratio";
    /// Calls in flight.
    pub const IN_FLIGHT: &str = "awsmp_producer_in_flight_calls";
    /// Open shards known.
    pub const SHARDS: &str = "awsmp_producer_shards";
    /// Seconds from `record()` to Kinesis acknowledgement.
    pub const RECORD_TO_ACK: &str = "awsmp_producer_record_to_ack_seconds";
    /// Seconds per PutRecords call.
    pub const PUT_LATENCY: &str = "awsmp_producer_put_records_seconds";
}

#[derive(Clone)]
pub(crate) struct Metrics {
    pub stream: String,
    pub events_recorded: Counter,
    pub events_acked: Counter,
    pub events_collapsed: Counter,
    pub records_acked: Counter,
    pub bytes_acked: Counter,
    pub retries: Counter,
    pub throttles: Counter,
    pub buffered_bytes: Gauge,
    pub buffer_fill: Gauge,
    pub in_flight: Gauge,
    pub shards: Gauge,
    pub record_to_ack: Histogram,
    pub put_latency: Histogram,
}

impl Metrics {
    pub fn new(stream: &str) -> Self {
        let s = stream.to_owned();
        Metrics {
            events_recorded: counter!(names::EVENTS_RECORDED, "stream" => s.clone()),
            events_acked: counter!(names::EVENTS_ACKED, "stream" => s.clone()),
            events_collapsed: counter!(names::EVENTS_COLLAPSED, "stream" => s.clone()),
            records_acked: counter!(names::RECORDS_ACKED, "stream" => s.clone()),
            bytes_acked: counter!(names::BYTES_ACKED, "stream" => s.clone()),
            retries: counter!(names::RETRIES, "stream" => s.clone()),
            throttles: counter!(names::THROTTLES, "stream" => s.clone()),
            buffered_bytes: gauge!(names::BUFFERED_BYTES, "stream" => s.clone()),
            buffer_fill: gauge!(names::BUFFER_FILL, "stream" => s.clone()),
            in_flight: gauge!(names::IN_FLIGHT, "stream" => s.clone()),
            shards: gauge!(names::SHARDS, "stream" => s.clone()),
            record_to_ack: histogram!(names::RECORD_TO_ACK, "stream" => s.clone()),
            put_latency: histogram!(names::PUT_LATENCY, "stream" => s.clone()),
            stream: s,
        }
    }

    pub fn refused(&self, reason: &'static str) {
        counter!(names::EVENTS_REFUSED, "stream" => self.stream.clone(), "reason" => reason)
            .increment(1);
    }

    pub fn undelivered(&self, reason: &'static str, n: u64) {
        counter!(names::EVENTS_UNDELIVERED, "stream" => self.stream.clone(), "reason" => reason)
            .increment(n);
    }

    pub fn call(&self, outcome: &'static str) {
        counter!(names::PUT_CALLS, "stream" => self.stream.clone(), "outcome" => outcome)
            .increment(1);
    }

    pub fn shard_refresh(&self, outcome: &'static str) {
        counter!(names::SHARD_REFRESHES, "stream" => self.stream.clone(), "outcome" => outcome)
            .increment(1);
    }
}

/// Counters of one producer since it started (a snapshot from [`crate::Producer::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProducerStats {
    /// Events accepted.
    pub events_recorded: u64,
    /// Events acknowledged by Kinesis (collapsed events count their constituents).
    pub events_acked: u64,
    /// Events handed back (collapsed events count their constituents).
    pub events_undelivered: u64,
    /// Kinesis records acknowledged.
    pub records_acked: u64,
    /// Bytes (data + partition key) acknowledged.
    pub bytes_acked: u64,
    /// PutRecords calls made.
    pub put_calls: u64,
    /// Kinesis records retried.
    pub retries: u64,
    /// Kinesis records throttled.
    pub throttles: u64,
    /// Shard map listings that succeeded.
    pub shard_refreshes: u64,
}

/// Counter stripes: callers on different threads add to different cache lines.
const STRIPES: usize = 8;

/// A counter every `record()` adds to: striped by thread, so callers on different cores do
/// not pass one cache line back and forth per event; read by summing the stripes.
#[derive(Default)]
pub(crate) struct StripedCounter {
    /// Each stripe on cache lines of its own.
    stripes: [CachePadded<AtomicU64>; STRIPES],
}

thread_local! {
    /// This thread's stripe, handed out round robin as threads first count.
    static STRIPE: usize = {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES
    };
}

impl StripedCounter {
    pub fn add(&self, n: u64) {
        let i = STRIPE.with(|s| *s);
        self.stripes[i].fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.stripes.iter().map(|s| s.load(Ordering::Relaxed)).sum()
    }
}

#[derive(Default)]
pub(crate) struct StatCounters {
    pub events_recorded: StripedCounter,
    pub events_acked: AtomicU64,
    pub events_undelivered: AtomicU64,
    pub records_acked: AtomicU64,
    pub bytes_acked: AtomicU64,
    pub put_calls: AtomicU64,
    pub retries: AtomicU64,
    pub throttles: AtomicU64,
    pub shard_refreshes: AtomicU64,
}

impl StatCounters {
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> ProducerStats {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ProducerStats {
            events_recorded: self.events_recorded.get(),
            events_acked: l(&self.events_acked),
            events_undelivered: l(&self.events_undelivered),
            records_acked: l(&self.records_acked),
            bytes_acked: l(&self.bytes_acked),
            put_calls: l(&self.put_calls),
            retries: l(&self.retries),
            throttles: l(&self.throttles),
            shard_refreshes: l(&self.shard_refreshes),
        }
    }
}
