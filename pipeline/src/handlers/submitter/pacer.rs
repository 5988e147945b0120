//! Spacing `BatchMeterUsage` call starts at the quota.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;

/// Spaces call starts at the quota: at most one slot per interval, never banking more than
/// the current slot, so the average stays at the quota and bursts stay at two calls.
///
/// Shared by reference (`ready(&self)`), so a retried send can wait for its slot; the
/// submitter is serial, so slots are taken one at a time.
#[derive(Debug)]
pub(super) struct Pacer {
    interval: Duration,
    next: Mutex<Option<Instant>>,
}

impl Pacer {
    pub(super) fn new(calls_per_second: u32) -> Self {
        Self {
            interval: Duration::from_secs(1) / calls_per_second.max(1),
            next: Mutex::new(None),
        }
    }

    /// Wait for the next slot and take it. The slot after it is one interval later, or now
    /// when the caller was late (one missed slot is made up, never more).
    pub(super) async fn ready(&self) {
        let slot = *self.next();
        if let Some(slot) = slot {
            tokio::time::sleep_until(slot).await;
        }
        let now = Instant::now();
        *self.next() = Some(match slot {
            Some(slot) => (slot + self.interval).max(now),
            None => now + self.interval,
        });
    }

    fn next(&self) -> MutexGuard<'_, Option<Instant>> {
        // A poisoned lock only means a panic elsewhere while holding a plain instant.
        self.next.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn slots_are_one_interval_apart() {
        let pacer = Pacer::new(10);
        let start = Instant::now();
        for _ in 0..5 {
            pacer.ready().await;
        }
        // The first slot is immediate, each later one 100 ms after the previous.
        assert_eq!(start.elapsed(), Duration::from_millis(400));
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_caller_makes_up_one_slot_only() {
        let pacer = Pacer::new(10);
        pacer.ready().await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let late = Instant::now();
        pacer.ready().await;
        pacer.ready().await;
        assert_eq!(
            late.elapsed(),
            Duration::ZERO,
            "the missed slot is taken at once"
        );
        pacer.ready().await;
        assert_eq!(late.elapsed(), Duration::from_millis(100));
    }
}
