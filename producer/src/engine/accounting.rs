//! Flush accounting: every recorded event is outstanding in the flush epoch it arrived in until
//! Kinesis acknowledges it or it is handed back; a flush is answered once its epoch and every
//! earlier one are settled.

use tokio::time::Instant;
use tracing::{error, warn};

use super::Engine;
use super::record::{KRecord, UserAck};
use crate::handoff::Reservation;
use crate::metrics::StatCounters;
use crate::outcome::{FlushOutcome, Undelivered, UndeliveredReason};
use crate::partition::partition_key;
use crate::shards::ShardMapSource;
use crate::sink::RecordSink;
use awsmp_contract::wire::decode_events;

impl<S: RecordSink, M: ShardMapSource> Engine<S, M> {
    /// Settles the users of one record, one map update per run of equal epochs.
    fn settle_users(&mut self, users: &[UserAck]) {
        let mut run: Option<(u64, u64)> = None;
        for u in users {
            run = match run {
                Some((e, n)) if e == u.epoch => Some((e, n + u.constituents)),
                Some((e, n)) => {
                    self.settle(e, n);
                    Some((u.epoch, u.constituents))
                }
                None => Some((u.epoch, u.constituents)),
            };
        }
        if let Some((e, n)) = run {
            self.settle(e, n);
        }
    }

    fn settle(&mut self, epoch: u64, constituents: u64) {
        if let Some(n) = self.outstanding.get_mut(&epoch) {
            *n -= constituents.min(*n);
            if *n == 0 {
                self.outstanding.remove(&epoch);
            }
        }
    }

    /// Kinesis stored `r`.
    pub(super) fn ack(&mut self, r: KRecord, now: Instant) {
        let m = &self.parts.metrics;
        m.records_acked.increment(1);
        m.bytes_acked.increment(r.size as u64);
        StatCounters::add(&self.parts.stats.records_acked, 1);
        StatCounters::add(&self.parts.stats.bytes_acked, r.size as u64);
        let mut events = 0;
        for u in &r.users {
            self.parts
                .metrics
                .record_to_ack
                .record(now.saturating_duration_since(u.enqueued_at).as_secs_f64());
            events += u.constituents;
        }
        self.settle_users(&r.users);
        // `r.reservation` drops here: the record's bytes return to the buffer.
        self.parts.metrics.events_acked.increment(events);
        StatCounters::add(&self.parts.stats.events_acked, events);
    }

    /// Gives the record's events back to the caller: to the callback now, else held (still
    /// charged against the buffer) for the next flush/shutdown/take_undelivered.
    pub(super) fn hand_back(
        &mut self,
        r: KRecord,
        reason: impl Fn(&KRecord) -> UndeliveredReason,
        code: &'static str,
    ) {
        let why = reason(&r);
        self.settle_users(&r.users);
        let (out, events) = self.undelivered(&r, &why);
        warn!(
            events,
            reason = code,
            attempts = r.attempts,
            "events handed back undelivered"
        );
        self.parts.metrics.undelivered(code, events);
        StatCounters::add(&self.parts.stats.events_undelivered, events);
        self.give_back(out, r.reservation);
    }

    /// The events inside `r`, decoded back from the bytes sent, and how many recorded events
    /// they stand for.
    fn undelivered(&self, r: &KRecord, why: &UndeliveredReason) -> (Vec<Undelivered>, u64) {
        let mut payloads: Vec<Option<crate::Event>> = match decode_events(&r.entry.data) {
            Ok(us) => us.into_iter().map(|u| u.event.ok()).collect(),
            Err(_) => Vec::new(),
        };
        let mut out = Vec::with_capacity(r.users.len());
        let mut events = 0u64;
        for (i, u) in r.users.iter().enumerate() {
            events += u.constituents;
            match payloads.get_mut(i).and_then(Option::take) {
                Some(event) => {
                    let partition_key = partition_key(
                        &event.license_arn,
                        &event.customer_aws_account_id,
                        &event.dimension,
                    );
                    out.push(Undelivered {
                        event,
                        partition_key,
                        reason: why.clone(),
                        attempts: r.attempts,
                        maybe_delivered: r.maybe_delivered,
                        constituents: u.constituents as usize,
                    });
                }
                None => {
                    // Our own encoding failed to decode: a bug, never expected (round trips are
                    // property-tested). Say so loudly rather than pretend.
                    error!(
                        events = u.constituents,
                        "internal error: an undelivered record could not be decoded"
                    );
                    self.parts
                        .metrics
                        .undelivered("InternalDecode", u.constituents);
                }
            }
        }
        (out, events)
    }

    /// Hands `out` to the callback (then `reservation` is released), or holds both.
    fn give_back(&mut self, out: Vec<Undelivered>, reservation: Reservation) {
        match &self.parts.on_undelivered {
            // The record's reservation drops after the callback has the events.
            Some(cb) => {
                // A panicking callback must not take the background task (and every buffered
                // event) down with it.
                let n = out.len();
                let cb = cb.clone();
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || cb(out))).is_err()
                {
                    error!(
                        events = n,
                        "on_undelivered callback panicked; those events were handed to it"
                    );
                }
                drop(reservation);
            }
            None => {
                self.held.extend(out);
                match &mut self.held_reservation {
                    Some(h) => h.merge(reservation),
                    None => self.held_reservation = Some(reservation),
                }
            }
        }
    }

    /// Hands the held undelivered events over; their bytes are released.
    pub(super) fn take_held(&mut self) -> Vec<Undelivered> {
        self.held_reservation = None;
        std::mem::take(&mut self.held)
    }

    /// Answers every flush whose epoch and earlier ones have nothing outstanding.
    pub(super) fn answer_flushes(&mut self) {
        if self.flush_waiters.is_empty() {
            return;
        }
        let oldest_open = self.outstanding.keys().next().copied();
        let (done, pending): (Vec<_>, Vec<_>) = self
            .flush_waiters
            .drain(..)
            .partition(|(epoch, _)| oldest_open.is_none_or(|o| o > *epoch));
        self.flush_waiters = pending;
        for (_, tx) in done {
            let undelivered = self.take_held();
            let _ = tx.send(FlushOutcome { undelivered });
        }
    }
}
