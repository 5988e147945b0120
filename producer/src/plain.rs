//! The plain event's fast path (`Producer::plain`): an event with no id or producer id of its
//! own, of a group this thread has checked and keeps, is taken as a meter takes its events —
//! staged from its group's cached head (no collapse), or joined to or opening its sum
//! (collapse) — with what the checked path (`prepare.rs`) would do with it, and nothing more.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use chrono::{DateTime, Utc};

use super::Producer;
use super::prepare::{Keyed, Payload, Prepared, Route, quantity_slack};
use crate::event::{
    Event, UsageAllocation, second_in_range, truncate_to_millis, validate_allocations,
};
use crate::event_id::GeneratedId;
use crate::fold::{Absorbed, Charged, FoldKey, FoldSlot, GroupFields, GroupHash, Joined, SumHead};
use crate::limits::MAX_RECORD_BYTES;
use crate::partition::{CachedSlot, SlotOpener, with_cached_head, with_cached_slot};
use crate::wire::v2::{allocations_len, generated_single_len, put_single_from_head};
use crate::wire::{WireVersion, single_len_as};

#[cfg(test)]
thread_local! {
    /// Events this thread staged through [`Producer::stage_plain`] (tests: which path ran).
    pub(super) static PLAIN_STAGED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Events this thread added to open sums through [`Producer::absorb_plain`].
    pub(super) static PLAIN_ABSORBED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// What [`Producer::stage_plain`] did with a plain event.
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
        route: Route,
        cost: usize,
    },
    /// The producer closed (the buffer's bound closed, or the task took its last): the event
    /// goes back with this id.
    Closed(GeneratedId),
    /// Collapse: no open sum takes the event; it opens one ([`Producer::open`]).
    Open(Opening),
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
    /// else through the table, which then attaches the slot to the sum. In v2, an event the
    /// slot misses joins or opens its sum in one step of the table, as a meter's does
    /// ([`Producer::join_or_open`]). `None` when no sum takes it in v1, or the group is not
    /// kept yet, or is too large to open a sum: the checked path decides.
    fn absorb_plain(&self, event: &Event, timestamp: DateTime<Utc>, second: i64) -> Option<Plain> {
        let shared = &self.shared;
        let producer_id = shared.config.producer_id.as_deref();
        let group = event.group();
        let quantity = event.quantity;
        let epoch =
            (shared.config.wire_version == WireVersion::V2).then(|| shared.ids.longest_id().epoch);
        with_cached_slot(
            group,
            shared.instance,
            producer_id,
            epoch,
            |pk, hash, cached| {
                if cached.slot.try_add(event.timestamp, quantity) {
                    #[cfg(test)]
                    PLAIN_ABSORBED.with(|n| n.set(n.get() + 1));
                    return Some(Plain::Slot);
                }
                let key =
                    FoldKey::with(cached.fold, group, producer_id, second, false).from(Some(pk));
                if let Some(opener) = &cached.opener {
                    let size = self.opening_size(event, pk.len())?;
                    let at = (quantity, timestamp);
                    return Some(self.join_or_open(&key, at, (pk, hash), cached, opener, size));
                }
                match shared
                    .staging
                    .absorb(&key, quantity, timestamp, Some(&cached.slot))
                {
                    Absorbed::Yes => {
                        #[cfg(test)]
                        PLAIN_ABSORBED.with(|n| n.set(n.get() + 1));
                        Some(Plain::Staged)
                    }
                    // No open sum takes it (v1): the checked path opens one.
                    Absorbed::No => None,
                    Absorbed::Sealed => Some(Plain::Sealed),
                }
            },
        )
        .flatten()
    }

    /// Collapse, v2: a plain event its slot missed — `quantity` at `timestamp` — joins its
    /// open sum at no charge, or opens one with a hollow template sharing the slot's fields
    /// (`opener`), charged what [`Producer::prepare`] charges it (`size`: payload length and
    /// charge) — one step of the table (`FoldTable::join_or_open`), as a meter's event.
    /// Without buffer space now, it opens its sum through [`Producer::open`], which waits for
    /// space.
    fn join_or_open(
        &self,
        key: &FoldKey<'_>,
        (quantity, timestamp): (u64, DateTime<Utc>),
        (pk, hash): (&Arc<str>, u128),
        cached: &CachedSlot,
        opener: &SlotOpener,
        (payload_len, cost): (usize, usize),
    ) -> Plain {
        let shared = &self.shared;
        let charge = || match shared.sem.try_acquire_many(cost as u32) {
            Ok(permit) => {
                permit.forget();
                true
            }
            Err(_) => false,
        };
        let head = |fields| SumHead {
            bytes: opener.head.bytes.clone(),
            epoch: opener.epoch,
            split: Payload::split_of(&opener.head),
            fields,
        };
        let charged = Charged {
            bytes: cost,
            payload_len,
            keyed: Some((pk.clone(), hash)),
            head: Some(head(Some(opener.fields.clone()))),
        };
        let template = GroupFields::hollow(quantity, timestamp);
        let slot = &cached.slot;
        match shared
            .staging
            .join_or_open(key, quantity, timestamp, slot, template, charged, charge)
        {
            Joined::Opened(_) | Joined::Absorbed(_) => {
                #[cfg(test)]
                PLAIN_ABSORBED.with(|n| n.set(n.get() + 1));
                Plain::Staged
            }
            Joined::NoSpace(_) => Plain::Open(Opening {
                fold: cached.fold,
                keyed: (pk.clone(), hash),
                slot: slot.clone(),
                head: Some(head(None)),
                payload_len,
                cost,
            }),
            Joined::Sealed(_) => Plain::Sealed,
        }
    }

    /// Collapse, v2: the size and charge of the sum a plain event without allocations opens
    /// — as [`Producer::prepare`] sizes and charges it, for the longest id and quantity.
    /// `None` for a size the checked path refuses (it refuses it, with its reason).
    fn opening_size(&self, event: &Event, pk_len: usize) -> Option<(usize, usize)> {
        let config = &self.shared.config;
        let producer_id = config.producer_id.as_deref();
        let longest = self.shared.ids.longest_id();
        let payload_len = single_len_as(event, producer_id, Some(longest));
        if payload_len + pk_len > MAX_RECORD_BYTES {
            return None;
        }
        let slack = quantity_slack(event.quantity, WireVersion::V2);
        let cost = Self::buffer_cost(payload_len + slack, pk_len);
        (cost <= config.max_buffered_bytes).then_some((payload_len, cost))
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
        let epoch = Some(shared.ids.longest_id().epoch);
        with_cached_slot(
            group,
            shared.instance,
            producer_id,
            epoch,
            |pk, _, cached| {
                // `Producer::prepare`'s size, checks and charge for the event joining a sum.
                let longest = shared.ids.longest_id();
                let payload_len = single_len_as(event, producer_id, Some(longest));
                if payload_len + pk.len() > MAX_RECORD_BYTES {
                    return None;
                }
                let slack = quantity_slack(quantity, WireVersion::V2);
                let cost = Self::buffer_cost(payload_len + slack, pk.len());
                if cost > config.max_buffered_bytes {
                    return None;
                }
                shared.sem.try_acquire_many(cost as u32).ok()?.forget();
                let key =
                    FoldKey::with(cached.fold, group, producer_id, second, true).from(Some(pk));
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
            },
        )
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
                if most + pk.len() > MAX_RECORD_BYTES
                    || Self::buffer_cost(most, pk.len()) > config.max_buffered_bytes
                {
                    return None;
                }
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
                            route,
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
