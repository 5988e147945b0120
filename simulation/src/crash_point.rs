//! The consumer crash-point class: a consumer invocation whose batch carries its shard past an
//! hour's fence crashes partway through its row writes, and the rest of the deployment runs
//! before the mapping delivers the batch again.
//!
//! The consumer publishes its shard's ingest watermark only after its batch's rows are written
//! (docs/guarantees.md, "Pipeline: the ingest watermark fences every hour"), so a crash among
//! the row writes leaves the watermark where the last whole batch put it. What tests that
//! order is such a crash while the batch would move the watermark past an hour's end plus the
//! settle margin, then the discoverer and the aggregator running before the retry: in AWS a
//! failed invocation is retried once its failure is known (a timeout comes after up to the
//! function's 60 s), while the heartbeat, the other shards' consumers and the discoverer go on.
//! The ordinary faults seldom crash such a batch there, and the scheduler seldom runs the
//! discoverer at the hour's offset and the aggregator before the lane's next delivery; this
//! class does both.
//!
//! In the class (outside the race class), every active-phase consumer batch whose first
//! record's hour ended more than the settle margin before its last record arrived crashes at
//! one of its first [`ROW_WRITES_BEFORE`] row writes, drawn ([`FaultPlan::crash_at`]; a batch
//! with fewer row writes does not crash). After every consumer invocation that failed as a
//! whole (crashed or timed out) the heartbeat runs, every other ready lane is delivered (up to
//! [`OTHER_LANE_BATCHES`] batches each, without crash points), the discoverer meters the three
//! hours before the current one, and the aggregator and cleanup take what it queued, before the
//! scheduler's next step. The draws come from hashes of their own, so every other schedule
//! stays as it was.
//!
//! [`FaultPlan::crash_at`]: crate::faults::FaultPlan::crash_at

use crate::faults::{hash, mix};
use crate::world::{Setup, World, lock};
use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
use awsmp_contract::clock::Clock;
use awsmp_contract::keys::HourBucket;
use awsmp_pipeline::config::DEFAULT_WATERMARK_SETTLE_SECS;
use awsmp_pipeline::handlers::discoverer::DiscovererInput;
use chrono::Duration;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Schedules of the crash-point class, per thousand.
const CRASH_POINT_PER_MILLE: u32 = 200;
/// The crash point is drawn among an invocation's first this many row writes.
const ROW_WRITES_BEFORE: u64 = 3;
/// The operation of a row write (`testkit/src/ports/consumer.rs`).
const ROW_WRITE: &str = "row-write";
/// Batches of each other lane the catch-up delivers at most.
const OTHER_LANE_BATCHES: usize = 5;
/// Invocations of the aggregator (and of cleanup) the catch-up runs at most.
const CATCH_UP_INVOCATIONS: usize = 10;

/// The crash-point class, drawn from an RNG of its own so every other schedule stays as it was.
pub(crate) fn crash_point_class(seed: u64, mut setup: Setup) -> Setup {
    let mut r = StdRng::seed_from_u64(mix(seed ^ 0xc7a5_4b01));
    // Outside the race class (a crash point is armed on the plan, and a racing expiry's calls
    // run beside the consumer's). Over the scale class it found a submitter starved by its
    // per-run cap (seed 607, docs/simulation.md "What the simulation found").
    let drawn = r.random_range(0..1000) < CRASH_POINT_PER_MILLE;
    setup.crash_point = drawn && !setup.race;
    setup
}

impl World {
    /// In the crash-point class, while faults are on: arm a crash at a seeded row write of the
    /// consumer invocation about to run on `lane` with `event`, when the batch carries its
    /// shard past an hour's fence (its first record's hour ended more than the settle margin
    /// before its last record arrived). True when armed
    /// ([`World::crash_point_end`] disarms it).
    pub(crate) fn crash_point_arm(&self, lane: &str, event: &KinesisEvent) -> bool {
        if !self.setup.crash_point || !self.faults.enabled() {
            return false;
        }
        let arrival = |r: &KinesisEventRecord| r.kinesis.approximate_arrival_timestamp.0;
        let (Some(first), Some(last)) = (event.records.first(), event.records.last()) else {
            return false;
        };
        let settle = Duration::seconds(DEFAULT_WATERMARK_SETTLE_SECS as i64);
        if HourBucket::containing(arrival(first)).end() + settle > arrival(last) {
            return false;
        }
        let now = self.clock.now().to_string();
        let sequence = &first.kinesis.sequence_number;
        let h = hash(self.setup.seed ^ 0xc7a5_4b02, &[lane, sequence, &now]);
        let nth = 1 + (h % ROW_WRITES_BEFORE) as u32;
        self.faults.crash_at(ROW_WRITE, nth);
        self.faults.count("consumer-crash-point");
        self.log(format!("crash point: at row write {nth}"));
        true
    }

    /// After a consumer invocation on `lane`: disarm a crash point it did not reach (`armed`)
    /// and, in the class, when the invocation `failed` as a whole, let the rest of the
    /// deployment run before its retry: a heartbeat, the other lanes' consumers (up to
    /// [`OTHER_LANE_BATCHES`] batches each), the discoverer on the three hours before the
    /// current one, the aggregator and cleanup on what it queued.
    pub(crate) async fn crash_point_end(&self, lane: &(String, u32), armed: bool, failed: bool) {
        if armed {
            // Nothing else runs in between: the next invocation starts with no crash point.
            self.faults.recover();
        }
        if !self.setup.crash_point || !failed || !self.faults.enabled() {
            return;
        }
        self.log("crash point: the deployment runs before the batch is delivered again");
        self.heartbeat();
        let others: Vec<_> = lock(&self.esm)
            .ready(&self.stream, self.clock.now())
            .into_iter()
            .filter(|other| other != lane)
            .collect();
        for other in &others {
            for _ in 0..OTHER_LANE_BATCHES {
                // Boxed: a delivery may end in this catch-up (never for these, which run
                // without crash points).
                if !Box::pin(self.deliver_lane(other, false)).await {
                    break;
                }
            }
        }
        for hour_offset in 1..=3 {
            self.discover(DiscovererInput::Meter { hour_offset }).await;
        }
        for _ in 0..CATCH_UP_INVOCATIONS {
            if !self.aggregate().await {
                break;
            }
        }
        for _ in 0..CATCH_UP_INVOCATIONS {
            if !self.clean().await {
                break;
            }
        }
    }
}
