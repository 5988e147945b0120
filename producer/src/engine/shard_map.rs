//! The shard map and per-shard budgets: periodic and on-demand ListShards refreshes, rerouting
//! queued records when the map changes, and the token buckets that keep each shard within its
//! write limits.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use awsmp_contract::retry::RetryPolicy;
use tokio::task::JoinError;
use tokio::time::Instant;
use tracing::{Instrument, debug, info_span, warn};

use super::Engine;
use super::record::KRecord;
use crate::budget::ShardBudget;
use crate::error::error_chain;
use crate::metrics::StatCounters;
use crate::partition::ShardMap;
use crate::shards::{ShardMapError, ShardMapSource};
use crate::sink::RecordSink;

/// Waits after failed listings: 2 s, 4 s … 64 s (never longer than the refresh interval).
/// Without jitter: one listing at a time per producer.
const SHARD_REFRESH_BACKOFF: RetryPolicy =
    RetryPolicy::new(u32::MAX, Duration::from_secs(1), Duration::from_secs(64));

/// How soon the map is listed again once a record landed on an unexpected shard.
const STALE_MAP_RELIST: Duration = Duration::from_millis(100);

impl<S: RecordSink, M: ShardMapSource> Engine<S, M> {
    /// Starts a listing when one is due and none is running.
    pub(super) fn maybe_refresh(&mut self, now: Instant) {
        if self.refresh_task.is_none() && now >= self.next_refresh {
            let source = self.parts.shards.clone();
            self.refresh_task = Some(tokio::spawn(
                async move { source.shard_map().await }.instrument(info_span!("list_shards")),
            ));
            // Pushed further on completion; this stops a second spawn meanwhile.
            self.next_refresh = now + self.parts.config.shard_refresh_interval;
        }
    }

    pub(super) fn on_refresh(&mut self, r: Result<Result<ShardMap, ShardMapError>, JoinError>) {
        let now = Instant::now();
        let reason = match r {
            Ok(Ok(map)) => return self.on_new_map(map, now),
            Ok(Err(e)) => error_chain(&e),
            Err(e) => error_chain(&e),
        };
        self.parts.metrics.shard_refresh("error");
        self.refresh_failures += 1;
        let wait = SHARD_REFRESH_BACKOFF
            .ceiling(self.refresh_failures)
            .min(self.parts.config.shard_refresh_interval);
        self.next_refresh = now + wait;
        warn!(error = %reason, retry_in_ms = wait.as_millis() as u64, "ListShards failed; keeping the previous shard map");
    }

    fn on_new_map(&mut self, map: ShardMap, now: Instant) {
        self.parts.metrics.shard_refresh("ok");
        StatCounters::add(&self.parts.stats.shard_refreshes, 1);
        self.parts.metrics.shards.set(map.len() as f64);
        self.refresh_failures = 0;
        self.next_refresh = now + self.parts.config.shard_refresh_interval;
        if self.shard_map.as_deref() != Some(&map) {
            debug!(shards = map.len(), "shard map updated");
            self.budgets
                .retain(|id, _| map.shards().iter().any(|s| &s.shard_id == id));
            self.shard_map = Some(Arc::new(map));
            self.reroute();
        }
    }

    /// The map is stale (a record landed on another shard than predicted): list again soon.
    pub(super) fn shard_map_stale(&mut self) {
        let soon = Instant::now() + STALE_MAP_RELIST;
        if self.refresh_task.is_none() && self.next_refresh > soon {
            self.next_refresh = soon;
        }
    }

    fn reroute(&mut self) {
        let mut all: Vec<KRecord> = self.ready_unknown.drain(..).collect();
        for q in &mut self.ready {
            all.extend(q.drain(..));
        }
        let n = self.shard_map.as_ref().map_or(0, |m| m.len());
        self.ready = (0..n).map(|_| VecDeque::new()).collect();
        self.rr = 0;
        for r in all {
            self.enqueue_ready(r);
        }
    }

    /// Spends `size` bytes of `shard`'s budget now, or notes when it will allow them and
    /// returns false. Records of unknown shard are not budgeted.
    pub(super) fn take_budget(&mut self, shard: Option<String>, size: usize, now: Instant) -> bool {
        let Some(shard) = shard else { return true };
        let budget = self
            .budgets
            .entry(shard)
            .or_insert_with(|| ShardBudget::new(now));
        match budget.try_take(now, size) {
            Ok(()) => true,
            Err(wait) => {
                let at = now + wait;
                self.budget_wake = Some(self.budget_wake.map_or(at, |w| w.min(at)));
                false
            }
        }
    }

    /// Kinesis throttled `r`: count it and empty the budget of the shard it went to.
    pub(super) fn throttled(&mut self, r: &KRecord, now: Instant) {
        self.parts.metrics.throttles.increment(1);
        StatCounters::add(&self.parts.stats.throttles, 1);
        if let Some(shard) = &r.predicted_shard
            && let Some(b) = self.budgets.get_mut(shard)
        {
            b.exhaust(now);
        }
    }
}
