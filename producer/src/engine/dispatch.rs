//! PutRecords calls: per-shard ready queues, batches taken round-robin within the call limits
//! and shard budgets, concurrent calls under a timeout, and what each answer means for its
//! records (acknowledge, retry, hand back).

use std::collections::VecDeque;

use tokio::task::JoinError;
use tokio::time::{Instant, timeout};
use tracing::{Instrument, error, info_span, warn};

use super::Engine;
use super::record::KRecord;
use crate::batch::CallLimits;
use crate::error::error_chain;
use crate::metrics::StatCounters;
use crate::outcome::UndeliveredReason;
use crate::shards::ShardMapSource;
use crate::sink::{EntryOutcome, PutEntry, RecordSink, SinkError};

/// What a call task returns: the sink's answer, or the put timeout.
pub(super) type CallResult =
    Result<Result<Vec<EntryOutcome>, SinkError>, tokio::time::error::Elapsed>;

/// The records of one call in flight.
pub(super) struct InFlightCall {
    records: Vec<KRecord>,
    started: Instant,
}

impl<S: RecordSink, M: ShardMapSource> Engine<S, M> {
    /// Queues `r` for the shard the current map routes it to (or the unknown-shard queue).
    pub(super) fn enqueue_ready(&mut self, mut r: KRecord) {
        let idx = self.shard_map.as_ref().and_then(|m| {
            m.shard_index(r.route_hash)
                .map(|i| (i, m.shards()[i].shard_id.clone()))
        });
        match idx {
            Some((i, id)) if i < self.ready.len() => {
                r.predicted_shard = Some(id);
                self.ready[i].push_back(r);
            }
            _ => {
                r.predicted_shard = None;
                self.ready_unknown.push_back(r);
            }
        }
    }

    /// Starts calls while fewer than `max_in_flight` are running and records are ready.
    pub(super) fn dispatch(&mut self, now: Instant) {
        let max = self.parts.config.max_in_flight;
        while self.in_flight.len() < max {
            let batch = self.next_batch(now);
            if batch.is_empty() {
                break;
            }
            self.spawn_call(batch, now);
        }
    }

    /// One call's worth of records, taken round-robin over the shard queues (the unknown-shard
    /// queue last), starting one queue further each call.
    fn next_batch(&mut self, now: Instant) -> Vec<KRecord> {
        let nq = self.ready.len() + 1;
        let mut limits = CallLimits::default();
        let mut batch = Vec::new();
        for k in 0..nq {
            self.take_from_queue((self.rr + k) % nq, now, &mut limits, &mut batch);
            if limits.is_full() {
                break;
            }
        }
        self.rr = (self.rr + 1) % nq;
        batch
    }

    fn queue(&mut self, qi: usize) -> &mut VecDeque<KRecord> {
        if qi < self.ready.len() {
            &mut self.ready[qi]
        } else {
            &mut self.ready_unknown
        }
    }

    /// Moves records from queue `qi` into `batch` while they fit the call and their shard's
    /// budget; expired records met on the way are handed back.
    fn take_from_queue(
        &mut self,
        qi: usize,
        now: Instant,
        limits: &mut CallLimits,
        batch: &mut Vec<KRecord>,
    ) {
        while let Some(front) = self.queue(qi).front() {
            if now >= front.deadline {
                let r = self.queue(qi).pop_front().expect("front exists");
                self.hand_back(r, KRecord::expired, "RecordTtlExpired");
                continue;
            }
            let size = front.size;
            if !limits.fits(size) {
                break;
            }
            let shard = front.predicted_shard.clone();
            if !self.take_budget(shard, size, now) {
                break;
            }
            limits.add(size);
            batch.push(self.queue(qi).pop_front().expect("front exists"));
            if limits.is_full() {
                break;
            }
        }
    }

    fn spawn_call(&mut self, records: Vec<KRecord>, now: Instant) {
        let entries: Vec<PutEntry> = records.iter().map(|r| r.entry.clone()).collect();
        let bytes: usize = records.iter().map(|r| r.size).sum();
        let span = info_span!("put_records", entries = entries.len(), bytes);
        let sink = self.parts.sink.clone();
        let limit = self.parts.config.put_timeout;
        let handle = self
            .in_flight
            .spawn(async move { timeout(limit, sink.put_records(entries)).await }.instrument(span));
        StatCounters::add(&self.parts.stats.put_calls, 1);
        self.calls.insert(
            handle.id(),
            InFlightCall {
                records,
                started: now,
            },
        );
    }

    pub(super) fn on_call_done(&mut self, done: Result<(tokio::task::Id, CallResult), JoinError>) {
        let now = Instant::now();
        let (id, result) = match done {
            Ok((id, r)) => (id, Ok(r)),
            Err(e) => (e.id(), Err(e)),
        };
        let Some(call) = self.calls.remove(&id) else {
            error!("completed PutRecords call is unknown");
            return;
        };
        self.parts
            .metrics
            .put_latency
            .record(now.saturating_duration_since(call.started).as_secs_f64());
        let records = call.records;
        match result {
            Ok(Ok(Ok(outcomes))) if outcomes.len() == records.len() => {
                self.parts.metrics.call("ok");
                for (r, o) in records.into_iter().zip(outcomes) {
                    self.on_entry_outcome(r, o, now);
                }
            }
            Ok(Ok(Ok(outcomes))) => {
                self.parts.metrics.call("transient");
                let msg = format!(
                    "sink answered {} outcomes for {} entries",
                    outcomes.len(),
                    records.len()
                );
                self.retry_all(records, msg, true, now);
            }
            Ok(Ok(Err(e))) => self.on_call_error(records, &e, now),
            Ok(Err(_elapsed)) => {
                self.parts.metrics.call("timeout");
                let msg = format!(
                    "PutRecords timed out after {:?}",
                    self.parts.config.put_timeout
                );
                self.retry_all(records, msg, true, now);
            }
            Err(join) => {
                self.parts.metrics.call("transient");
                error!(error = %join, "PutRecords task failed");
                self.retry_all(records, format!("sink task failed: {join}"), true, now);
            }
        }
    }

    /// One entry of a call that was answered.
    fn on_entry_outcome(&mut self, r: KRecord, outcome: EntryOutcome, now: Instant) {
        match outcome {
            EntryOutcome::Ok { shard_id, .. } => {
                if r.predicted_shard.as_ref().is_some_and(|p| *p != shard_id) {
                    self.shard_map_stale();
                }
                self.ack(r, now);
            }
            EntryOutcome::Throttled => {
                self.throttled(&r, now);
                self.retry(r, "ProvisionedThroughputExceededException".into(), now);
            }
            EntryOutcome::Failed {
                code,
                message,
                retryable: true,
            } => self.retry(r, format!("{code}: {message}"), now),
            EntryOutcome::Failed {
                code,
                message,
                retryable: false,
            } => self.hand_back(
                r,
                |_| UndeliveredReason::Rejected {
                    code: code.clone(),
                    message: message.clone(),
                },
                "Rejected",
            ),
        }
    }

    /// A call that failed as a whole: retried when [`SinkError::is_retryable`], else its
    /// records go back to the caller.
    fn on_call_error(&mut self, records: Vec<KRecord>, e: &SinkError, now: Instant) {
        let text = error_chain(e);
        if e.is_retryable() {
            if matches!(e, SinkError::Throttled { .. }) {
                self.parts.metrics.call("throttled");
                for r in &records {
                    self.throttled(r, now);
                }
            } else {
                self.parts.metrics.call("transient");
            }
            self.retry_all(records, text, e.may_have_been_applied(), now);
            return;
        }
        self.parts.metrics.call("rejected");
        let code = if matches!(e, SinkError::ResourceNotFound { .. }) {
            warn!(error = %text, "stream not found; handing records back");
            self.shard_map_stale();
            "ResourceNotFoundException"
        } else {
            warn!(error = %text, "PutRecords rejected; handing records back");
            "Rejected"
        };
        for r in records {
            self.hand_back(
                r,
                |_| UndeliveredReason::Rejected {
                    code: code.into(),
                    message: text.clone(),
                },
                "Rejected",
            );
        }
    }
}
