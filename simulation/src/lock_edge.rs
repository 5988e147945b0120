//! The metering lock's edge with pending work (docs/time-rules.md, "Metering lock"): the
//! first discoverer run that may aggregate an hour (its offset equal to the lock) comes
//! seconds after the hour ended, while the hour still has raw rows pending or a shard the
//! consumer has not read past the hour's end. The fence must hold such an hour until the
//! consumer caught up, and then aggregate it whole.
//!
//! The **lock-edge class** puts usage there on purpose: at an active step within
//! [`LEAD_SECS`] of an hour's end, the clock goes to seconds before it, usage is recorded,
//! the clock goes seconds past it, and the discoverer runs at the lock's offset before any
//! consumer batch. Every schedule counts the runs that met the edge with work pending
//! (`limit-lock-edge-pending`; `limit-lock-edge-unread` when a shard was not read past the
//! hour), whatever put it there; `limit-lock-edge-aimed` counts the class's aims and
//! `limit-lock-edge-pending-in-class` what it reached.

use crate::faults::mix;
use crate::world::{Setup, World, lock};
use awsmp_aws::watermark::WatermarkStore;
use awsmp_contract::clock::Clock;
use awsmp_contract::keys::HourBucket;
use awsmp_contract::time::{EffectiveLock, effective_lock, meter_mode_bucket};
use awsmp_pipeline::handlers::discoverer::DiscovererInput;
use awsmp_pipeline::ports::UsageStore;
use chrono::{Duration, Timelike};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Schedules of the lock-edge class, per thousand.
const LOCK_EDGE_PER_MILLE: u32 = 120;
/// How close to an hour's end an active step must be for the class to aim at the edge.
const LEAD_SECS: i64 = 360;
/// A discoverer run this soon after its hour ended is at the lock's edge.
const EDGE_SECS: i64 = 300;

/// The lock-edge class, drawn from an RNG of its own so every other schedule stays as it was.
pub(crate) fn lock_edge_class(seed: u64, mut setup: Setup) -> Setup {
    let mut r = StdRng::seed_from_u64(mix(seed ^ 0x10c_ed9e));
    setup.lock_edge = r.random_range(0..1000) < LOCK_EDGE_PER_MILLE;
    setup
}

impl World {
    /// In the lock-edge class, at an active step within [`LEAD_SECS`] of an hour's end while
    /// usage flows: usage recorded seconds before the hour ends, the discoverer run at the
    /// lock's offset seconds after it. True when it ran (the step is spent).
    pub(crate) async fn lock_edge_step(&self, producing: bool) -> bool {
        let now = self.clock.now();
        let to_end = 3600 - i64::from(now.minute() * 60 + now.second());
        if !self.setup.lock_edge || !producing || to_end > LEAD_SECS {
            return false;
        }
        let (before, n, after) = {
            let mut rng = lock(&self.rng);
            (
                rng.random_range(5..=45i64),
                rng.random_range(1..=8),
                rng.random_range(1..=60i64),
            )
        };
        if to_end > before {
            self.advance(Duration::seconds(to_end - before));
        }
        self.faults.count("limit-lock-edge-aimed");
        self.log("lock edge: usage seconds before the hour ends");
        self.produce(n).await;
        let to_end = 3600 - i64::from(self.clock.now().minute() * 60 + self.clock.now().second());
        self.advance(Duration::seconds(to_end + after));
        let lock_hours = self.svc.config.time.metering_lock_hours();
        self.discover(DiscovererInput::Meter {
            hour_offset: lock_hours,
        })
        .await;
        true
    }

    /// Count a discoverer run of `input` that meets an hour at the lock's edge with work
    /// pending: its first offset that may aggregate the hour, within [`EDGE_SECS`] of the
    /// hour's end, with raw rows of the hour pending or a shard not read past its end.
    pub(crate) async fn note_lock_edge(&self, input: DiscovererInput) {
        let DiscovererInput::Meter { hour_offset } = input else {
            return;
        };
        let now = self.clock.now();
        let time = &self.svc.config.time;
        let Ok(Some(bucket)) = meter_mode_bucket(hour_offset, now, time) else {
            return;
        };
        let first = match effective_lock(bucket, now, time) {
            EffectiveLock::Hours(lock) => lock.max(1) == hour_offset,
            EffectiveLock::Closed => false,
        };
        if !first || now - bucket.end() > Duration::seconds(EDGE_SECS) {
            return;
        }
        let unread = self.unread_past(bucket).await;
        let rows = UsageStore::pending_groups(self.usage.as_ref(), bucket, None)
            .await
            .is_ok_and(|g| !g.is_empty());
        if unread || rows {
            self.faults.count("limit-lock-edge-pending");
            if self.setup.lock_edge {
                self.faults.count("limit-lock-edge-pending-in-class");
            }
        }
        if unread {
            self.faults.count("limit-lock-edge-unread");
        }
    }

    /// Whether some shard not marked drained has not been read past `bucket`'s end.
    async fn unread_past(&self, bucket: HourBucket) -> bool {
        let marks = self
            .watermarks
            .shards(crate::esm::STREAM_NAME)
            .await
            .unwrap_or_default();
        marks
            .iter()
            .any(|w| !w.drained && w.applied_through < bucket.end())
    }
}
