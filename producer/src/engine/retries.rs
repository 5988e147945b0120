//! Re-sending failed entries: the same bytes after a full-jitter delay of the configured
//! [`RetryPolicy`](crate::RetryPolicy), until the policy or the record TTL runs out. Only the
//! failed entries of a PutRecords call come here; the accepted ones are acknowledged.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use tokio::time::Instant;

use super::Engine;
use super::record::KRecord;
use crate::metrics::StatCounters;
use crate::shards::ShardMapSource;
use crate::sink::RecordSink;

/// Records waiting for their next attempt, earliest first (ties in scheduling order).
#[derive(Default)]
pub(super) struct RetryQueue {
    heap: BinaryHeap<Reverse<RetryItem>>,
    seq: u64,
}

struct RetryItem {
    ready_at: Instant,
    seq: u64,
    record: KRecord,
}

impl PartialEq for RetryItem {
    fn eq(&self, other: &Self) -> bool {
        (self.ready_at, self.seq) == (other.ready_at, other.seq)
    }
}
impl Eq for RetryItem {}
impl PartialOrd for RetryItem {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for RetryItem {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.ready_at, self.seq).cmp(&(other.ready_at, other.seq))
    }
}

impl RetryQueue {
    fn push(&mut self, ready_at: Instant, record: KRecord) {
        self.seq += 1;
        self.heap.push(Reverse(RetryItem {
            ready_at,
            seq: self.seq,
            record,
        }));
    }

    /// When the earliest waiting record is due.
    pub fn next_at(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse(top)| top.ready_at)
    }

    /// The earliest record if it is due at `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<KRecord> {
        if self.next_at()? > now {
            return None;
        }
        self.heap.pop().map(|Reverse(item)| item.record)
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

impl<S: RecordSink, M: ShardMapSource> Engine<S, M> {
    /// Retries every record of a call that failed as a whole; `maybe_applied` when the call
    /// may have been applied although it reported failure.
    pub(super) fn retry_all(
        &mut self,
        records: Vec<KRecord>,
        msg: String,
        maybe_applied: bool,
        now: Instant,
    ) {
        for mut r in records {
            r.maybe_delivered |= maybe_applied;
            self.retry(r, msg.clone(), now);
        }
    }

    /// Schedules another attempt of the same bytes after a full-jitter backoff, or hands the
    /// record back when that would outlive its TTL or the policy allows no further attempt.
    pub(super) fn retry(&mut self, mut r: KRecord, error: String, now: Instant) {
        let policy = self.parts.config.retry;
        // `attempts` counts the calls made; the one that just failed has index attempts - 1.
        let failed = r.attempts;
        r.attempts += 1;
        r.last_error = Some(error);
        let ready_at = now + policy.delay(failed, &mut self.rng);
        if ready_at >= r.deadline || !policy.allows_retry(failed) {
            self.hand_back(r, KRecord::expired, "RecordTtlExpired");
            return;
        }
        self.parts.metrics.retries.increment(1);
        StatCounters::add(&self.parts.stats.retries, 1);
        self.retries.push(ready_at, r);
    }
}
