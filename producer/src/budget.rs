//! Per-shard write budget: token buckets for bytes and records refilled at the Kinesis shard
//! limits, so the producer slows down before Kinesis has to throttle it. Pure: time is passed in.

use std::time::Duration;

use tokio::time::Instant;

use awsmp_contract::limits::kinesis::{SHARD_BYTES_PER_SECOND, SHARD_RECORDS_PER_SECOND};

/// Token buckets of one shard, holding at most one second of budget.
#[derive(Debug, Clone)]
pub struct ShardBudget {
    bytes: f64,
    records: f64,
    last: Instant,
}

impl ShardBudget {
    /// A full budget.
    pub fn new(now: Instant) -> Self {
        ShardBudget {
            bytes: SHARD_BYTES_PER_SECOND as f64,
            records: SHARD_RECORDS_PER_SECOND as f64,
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.bytes =
            (self.bytes + dt * SHARD_BYTES_PER_SECOND as f64).min(SHARD_BYTES_PER_SECOND as f64);
        self.records = (self.records + dt * SHARD_RECORDS_PER_SECOND as f64)
            .min(SHARD_RECORDS_PER_SECOND as f64);
    }

    /// Spends one record of `bytes` if the budget allows it now; otherwise returns how long
    /// until it will.
    pub fn try_take(&mut self, now: Instant, bytes: usize) -> Result<(), Duration> {
        self.refill(now);
        let need_bytes = bytes.min(SHARD_BYTES_PER_SECOND) as f64;
        if self.bytes >= need_bytes && self.records >= 1.0 {
            self.bytes -= need_bytes;
            self.records -= 1.0;
            return Ok(());
        }
        let wait_bytes = (need_bytes - self.bytes).max(0.0) / SHARD_BYTES_PER_SECOND as f64;
        let wait_records = (1.0 - self.records).max(0.0) / SHARD_RECORDS_PER_SECOND as f64;
        // Round up a little so the retry finds the budget there.
        Err(Duration::from_secs_f64(wait_bytes.max(wait_records)) + Duration::from_micros(100))
    }

    /// Kinesis throttled this shard: our view of its budget was too generous (another writer
    /// shares it). Empty the buckets so the next second refills before we send again.
    pub fn exhaust(&mut self, now: Instant) {
        self.refill(now);
        self.bytes = 0.0;
        self.records = 0.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_second_of_records_then_waits() {
        let t0 = Instant::now();
        let mut b = ShardBudget::new(t0);
        for _ in 0..SHARD_RECORDS_PER_SECOND {
            assert!(b.try_take(t0, 10).is_ok());
        }
        let wait = b.try_take(t0, 10).unwrap_err();
        assert!(wait <= Duration::from_millis(2), "{wait:?}");
        assert!(b.try_take(t0 + wait, 10).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn bytes_are_limited_to_a_mebibyte_per_second() {
        let t0 = Instant::now();
        let mut b = ShardBudget::new(t0);
        assert!(b.try_take(t0, 600 * 1024).is_ok());
        let wait = b.try_take(t0, 600 * 1024).unwrap_err();
        // 176 KiB of 1 MiB/s is missing: ~172 ms.
        assert!(
            wait > Duration::from_millis(150) && wait < Duration::from_millis(200),
            "{wait:?}"
        );
        assert!(b.try_take(t0 + wait, 600 * 1024).is_ok());
        // Over a long run the rate is the limit: 10 s of 100 KiB records ≈ 10 MiB.
        let mut now = t0 + wait;
        let mut sent = 0usize;
        let end = now + Duration::from_secs(10);
        while now < end {
            match b.try_take(now, 100 * 1024) {
                Ok(()) => sent += 100 * 1024,
                Err(w) => now += w,
            }
        }
        let mib = sent as f64 / SHARD_BYTES_PER_SECOND as f64;
        assert!((9.5..=11.0).contains(&mib), "{mib}");
    }

    #[tokio::test(start_paused = true)]
    async fn throttling_empties_the_budget() {
        let t0 = Instant::now();
        let mut b = ShardBudget::new(t0);
        b.exhaust(t0);
        assert!(b.try_take(t0, 1).is_err());
    }
}
