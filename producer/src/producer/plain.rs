//! The plain event's fast path (`Producer::plain`): an event with no id or producer id of its
//! own, of a group this thread has checked and keeps, is taken as a meter takes its events —
//! staged from its group's cached head (no collapse), or joined to or opening its sum
//! (collapse) — with what the checked path (`prepare.rs`) would do with it, and nothing more.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use chrono::{DateTime, Utc};

use super::Producer;
use super::prepare::{Keyed, Payload, Prepared, Route, quantity_slack};
use crate::fold::{Absorbed, FoldKey, FoldSlot, GroupHash, SumHead};
use crate::key_cache::{cached_head, with_cached_head, with_cached_slot};
use awsmp_contract::event::{
    Event, UsageAllocation, second_in_range, truncate_to_millis, validate_allocations,
};
use awsmp_contract::event_id::GeneratedId;
use awsmp_contract::wire::v2::{allocations_len, generated_single_len, put_single_from_head};
use awsmp_contract::wire::{WireVersion, single_len_as};

#[cfg(test)]
thread_local! {
    /// Events this thread staged through [`Producer::stage_plain`] (tests: which path ran).
    pub(super) static PLAIN_STAGED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Events this thread added to open sums through [`Producer::absorb_plain`].
    pub(super) static PLAIN_ABSORBED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// What [`Producer::stage_plain`] did with a plain event. The two rare outcomes keep their
/// large parts boxed (the route to wait with, the opening), so the common ones (staged, added
/// to a sum) are returned in a few words instead of being copied out of a 150-byte enum on
/// every call.
pub(super) enum Plain {
    /// Charged and staged, or (collapse) added to its open sum through the table: counted
    /// now.
    Staged,
    /// Collapse: added to its open sum through this thread's slot, counted when the slot is
    /// detached (as a meter's events are).
    Slot,
    /// Collapse: the table is sealed (shutdown).
    Sealed,
    /// No buffer space now: the event's id, route and charge, to wait for space with.
    NoSpace {
        generated: GeneratedId,
        route: Box<Route>,
        cost: usize,
    },
    /// The producer closed (the buffer's bound closed, or the task took its last): the event
    /// goes back with this id.
    Closed(GeneratedId),
    /// Collapse: no open sum takes the event; it opens one ([`Producer::open`]).
    Open(Box<Opening>),
}

/// The sum a plain event opens (collapse): what [`Producer::prepare`] would have found for
/// it, and the thread's slot for its group, attached to the sum.
pub(super) struct Opening {
    pub fold: GroupHash,
    pub keyed: Keyed,
    pub slot: Arc<FoldSlot>,
    /// The group's v2 head: the sum is written from it when its window closes.
    pub head: Option<SumHead>,
    pub payload_len: usize,
    pub cost: usize,
}

impl Plain {
    /// A wait for space: `event` prepared as [`Producer::prepare`] would have prepared it.
    pub fn prepared(event: Event, generated: GeneratedId, route: Route, cost: usize) -> Prepared {
        Prepared {
            event: Self::as_prepared(event),
            generated: Some(generated),
            route,
            cost,
        }
    }

    /// `event` as [`Producer::prepare`] leaves it: its timestamp in whole milliseconds (what
    /// a caller given the event back retries with).
    pub fn as_prepared(mut event: Event) -> Event {
        event.timestamp = truncate_to_millis(event.timestamp);
        event
    }
}

impl Producer {
    /// The common event's fast path: an event with no id or producer id of its own, of a
    /// group this thread has checked and keeps, in the years `validate_timestamp` admits.
    /// Without collapse (v2), it is charged and staged from the group's cached head
    /// ([`with_cached_head`]), its allocations (checked here as the checked path checks them)
    /// written after it; with collapse, it joins its open sum ([`with_cached_slot`]): at no
    /// charge without allocations, charged with them (v2).
    /// Either is what [`Producer::prepare`] and the staging would do with it — the same id,
    /// payload, split, key, charge, sum and counts — with nothing moved, reference-counted or
    /// checked twice: what a [`super::Meter`] does, after one lookup of the group's fields.
    /// `None` leaves the event to the checked path (nothing taken: no id, no charge).
    ///
    /// A fast path (docs/producer-internals.md, "The fast-path rule"): it declines what it does not handle.
    /// Equivalence test: `producer::plain_tests::a_plain_event_is_staged_as_the_checked_path_stages_it`
    /// (the same events through this path and the checked path, the sink's bytes compared).
    pub(super) fn plain(&self, event: &Event) -> Option<Plain> {
        let shared = &self.shared;
        if !super::looks_plain(event) || shared.closed.load(Ordering::Relaxed) {
            return None;
        }
        let timestamp = truncate_to_millis(event.timestamp);
        let second = timestamp.timestamp();
        if !second_in_range(second) {
            return None;
        }
        if shared.config.collapse {
            match event.usage_allocations.as_deref() {
                None => self.absorb_plain(event, timestamp, second),
                Some(allocations) => self.absorb_allocated(event, allocations, timestamp, second),
            }
        } else if shared.config.wire_version == WireVersion::V2 {
            self.stage_plain(event, timestamp)
        } else {
            None
        }
    }

    /// Collapse: a plain event of a group this thread keeps joins its open sum as a meter's
    /// event does — through this thread's slot when the slot holds the sum of its second,
    /// else through the table, which then attaches the slot to the sum. `None` when no sum
    /// takes it (or the group is not kept yet): the checked path opens one.
    fn absorb_plain(&self, event: &Event, timestamp: DateTime<Utc>, second: i64) -> Option<Plain> {
        let shared = &self.shared;
        let producer_id = shared.config.producer_id.as_deref();
        let group = event.group();
        let quantity = event.quantity;
        let found = with_cached_slot(group, shared.instance, producer_id, |pk, hash, cached| {
            if cached.slot.try_add(event.timestamp, quantity) {
                #[cfg(test)]
                PLAIN_ABSORBED.with(|n| n.set(n.get() + 1));
                return Ok(Plain::Slot);
            }
            let key = FoldKey::with(cached.fold, group, producer_id, second, false).from(Some(pk));
            match shared
                .staging
                .absorb(&key, quantity, timestamp, Some(&cached.slot))
            {
                Absorbed::Yes => {
                    #[cfg(test)]
                    PLAIN_ABSORBED.with(|n| n.set(n.get() + 1));
                    Ok(Plain::Staged)
                }
                // No open sum takes it: it opens one (below, out of the cache's borrow).
                Absorbed::No => Err((cached.fold, (pk.clone(), hash), cached.slot.clone())),
                Absorbed::Sealed => Ok(Plain::Sealed),
            }
        })?;
        match found {
            Ok(plain) => Some(plain),
            Err((fold, keyed, slot)) => self.opening(event, fold, keyed, slot),
        }
    }

    /// Collapse, v2: the sum a plain event without allocations opens when no open sum takes
    /// it — sized, checked and charged as [`Producer::prepare`] sizes, checks and charges it,
    /// with its group's key, hash, v2 head and this thread's slot (attached to the sum it
    /// opens). `None` leaves it to the checked path (v1, or a size the checked path refuses).
    fn opening(
        &self,
        event: &Event,
        fold: GroupHash,
        keyed: Keyed,
        slot: Arc<FoldSlot>,
    ) -> Option<Plain> {
        let config = &self.shared.config;
        if config.wire_version != WireVersion::V2 {
            return None;
        }
        let producer_id = config.producer_id.as_deref();
        let longest = self.shared.ids.longest_id();
        let payload_len = single_len_as(event, producer_id, Some(longest));
        let slack = quantity_slack(event.quantity, WireVersion::V2);
        let cost = self.admit(payload_len, slack, keyed.0.len()).ok()?;
        let head = cached_head(event.group(), producer_id, longest.epoch).map(|h| SumHead {
            split: Payload::split_of(&h),
            bytes: h.bytes,
            epoch: longest.epoch,
            fields: None,
        });
        Some(Plain::Open(Box::new(Opening {
            fold,
            keyed,
            slot,
            head,
            payload_len,
            cost,
        })))
    }

    /// Collapse, v2: a plain event with allocations, of a group this thread keeps, joins its
    /// open allocated sum through the table, charged what the checked path charges it (its
    /// allocations can add tag sets to the sum, so it is not free as an event without them
    /// is): its allocations checked as the checked path checks them, its group not checked
    /// or hashed again, nothing of it moved. `None` when the checked path is to decide: its
    /// allocations or size refused (it refuses them, with their reason), v1, no buffer space
    /// now, or no open sum that takes it (it opens one).
    fn absorb_allocated(
        &self,
        event: &Event,
        allocations: &[UsageAllocation],
        timestamp: DateTime<Utc>,
        second: i64,
    ) -> Option<Plain> {
        let shared = &self.shared;
        let config = &shared.config;
        if config.wire_version != WireVersion::V2 {
            return None;
        }
        let quantity = event.quantity;
        validate_allocations(allocations, quantity).ok()?;
        let producer_id = config.producer_id.as_deref();
        let group = event.group();
        with_cached_slot(group, shared.instance, producer_id, |pk, _, cached| {
            // `Producer::prepare`'s size, checks and charge for the event joining a sum.
            let longest = shared.ids.longest_id();
            let payload_len = single_len_as(event, producer_id, Some(longest));
            let slack = quantity_slack(quantity, WireVersion::V2);
            let cost = self.admit(payload_len, slack, pk.len()).ok()?;
            shared.sem.try_acquire_many(cost as u32).ok()?.forget();
            let key = FoldKey::with(cached.fold, group, producer_id, second, true).from(Some(pk));
            match shared
                .staging
                .absorb_allocated(&key, quantity, allocations, timestamp, cost)
            {
                Absorbed::Yes => {
                    #[cfg(test)]
                    PLAIN_ABSORBED.with(|n| n.set(n.get() + 1));
                    Some(Plain::Staged)
                }
                Absorbed::No => {
                    shared.sem.add_permits(cost);
                    None
                }
                Absorbed::Sealed => {
                    shared.sem.add_permits(cost);
                    Some(Plain::Sealed)
                }
            }
        })
        .flatten()
    }

    /// No collapse, v2: the plain event charged and staged from its group's cached head,
    /// with its allocations when it has some. `None` for allocations the checked path
    /// refuses (it refuses them, with their reason).
    fn stage_plain(&self, event: &Event, timestamp: DateTime<Utc>) -> Option<Plain> {
        let shared = &self.shared;
        let config = &shared.config;
        let millis = timestamp.timestamp_millis();
        let ids = &shared.ids;
        let longest = ids.longest_id();
        let producer_id = config.producer_id.as_deref();
        let quantity = event.quantity;
        let allocations = event.usage_allocations.as_deref();
        with_cached_head(
            event.group(),
            producer_id,
            longest.epoch,
            |pk, hash, head| {
                // The checked path's size checks, for the longest id (so none is taken for an
                // event it refuses).
                if let Some(a) = allocations {
                    validate_allocations(a, quantity).ok()?;
                }
                let allocations_len = allocations_len(allocations);
                let most =
                    generated_single_len(&head.bytes, quantity, millis, longest) + allocations_len;
                self.admit(most, 0, pk.len()).ok()?;
                let id = ids.next_id(hash);
                let len = generated_single_len(&head.bytes, quantity, millis, id) + allocations_len;
                let cost = Self::buffer_cost(len, pk.len());
                match shared.sem.try_acquire_many(cost as u32) {
                    Ok(permit) => permit.forget(),
                    Err(tokio::sync::TryAcquireError::NoPermits) => {
                        let route = Route::Encoded {
                            payload: Payload::V2Head {
                                len,
                                head: head.clone(),
                            },
                            partition_key: pk.clone(),
                            hash,
                        };
                        return Some(Plain::NoSpace {
                            generated: id,
                            route: Box::new(route),
                            cost,
                        });
                    }
                    Err(tokio::sync::TryAcquireError::Closed) => return Some(Plain::Closed(id)),
                }
                let write = |buf: &mut bytes::BytesMut| {
                    put_single_from_head(buf, &head.bytes, quantity, millis, id, allocations);
                };
                let split = Payload::split_of(head);
                if shared.staging.push(len, write, split, pk, hash, cost) {
                    #[cfg(test)]
                    PLAIN_STAGED.with(|n| n.set(n.get() + 1));
                    Some(Plain::Staged)
                } else {
                    shared.sem.add_permits(cost);
                    Some(Plain::Closed(id))
                }
            },
        )
        .flatten()
    }
}
