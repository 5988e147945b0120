//! A bound group handle's (or a thread's) hold on its group's open sum ([`FoldSlot`]), and
//! how the table attaches and detaches it under a shard's lock.

use std::sync::Arc;

use chrono::{DateTime, NaiveDate, Timelike, Utc};

use super::Bucket;
use crate::metrics::StatCounters;
use awsmp_contract::event::truncate_to_millis;

/// A bound group handle's hold on its group's open sum ([`crate::Meter`], collapse): once
/// attached to the sum of a second, the handle's later events of that second are added here
/// under the handle's own lock — no key hash, no shard lock, no table lookup. The sum's
/// quantity, plain constituents and earliest timestamp then live in the slot; whoever next
/// touches the sum under its shard's lock (another event of its key, the window's drain)
/// takes them back into it first and detaches the slot ([`detach`]). Locks are taken shard
/// first, slot second; the handle's fast path takes the slot's alone.
///
/// The events added here are counted as recorded ([`Counted`]) when the slot is detached,
/// not one by one: [`FoldTable::recorded`] adds those of the attached slots to the count.
///
/// The lock is a spin lock whose release is a plain store, not an atomic exchange as a
/// futex-backed mutex's is: the handle's fast path pays one atomic operation an event, not
/// two. Every hold is a few field updates with no call out, so a waiter (another thread
/// recording through the same handle at the same instant, or the window's drain) waits for
/// that long, yielding its thread between tries should the holder have been preempted.
#[derive(Default)]
pub(crate) struct FoldSlot(SlotLock<SlotState>);

/// [`FoldSlot`]'s lock.
type SlotLock<T> = spin::mutex::SpinMutex<T, spin::relax::Yield>;

#[derive(Default)]
pub(super) struct SlotState {
    /// Attached to `buckets[ix]` of its group's shard, the open sum of the UTC second that
    /// starts at `secs` seconds past midnight of `date`.
    live: bool,
    ix: usize,
    date: NaiveDate,
    secs: u32,
    /// The attached sum's whole quantity.
    quantity: u64,
    /// Constituents without id or allocations added here since it was attached: events
    /// accepted and not counted yet ([`Counted`]).
    pub(super) added: u64,
    /// The earliest timestamp added here (the sum's own when attached).
    earliest: DateTime<Utc>,
}

impl FoldSlot {
    pub(super) fn lock(&self) -> spin::mutex::SpinMutexGuard<'_, SlotState> {
        self.0.lock()
    }

    /// Adds an event without id or allocations — `quantity` at `timestamp` — to the attached
    /// sum when that is of `timestamp`'s UTC second and the quantity fits: what
    /// [`FoldTable::absorb`] would do with the event, its timestamp truncated to whole
    /// milliseconds. False leaves everything as it was.
    ///
    /// The second is compared as the naive UTC date and seconds past midnight (a leap second
    /// is its minute's last second, as `timestamp()` counts it), so no epoch second is
    /// computed; a timestamp of an attached sum's second is in the range a meter checks, as
    /// the event that opened the sum was. The earliest timestamp, in whole milliseconds, is
    /// passed by `timestamp` exactly when it is passed by its truncation, so `timestamp` is
    /// truncated only when it is the new earliest.
    ///
    /// A fast path (docs/producer-internals.md, "The fast-path rule"): false declines. Equivalence test:
    /// `fold::tests::slots_change_nothing` (the same steps with and without slots, every
    /// drain compared).
    pub fn try_add(&self, timestamp: DateTime<Utc>, quantity: u64) -> bool {
        let naive = timestamp.naive_utc();
        let (date, secs) = (naive.date(), naive.time().num_seconds_from_midnight());
        let mut s = self.lock();
        if !s.live || s.date != date || s.secs != secs {
            return false;
        }
        let Some(sum) = s.quantity.checked_add(quantity) else {
            return false;
        };
        s.quantity = sum;
        s.added += 1;
        if timestamp < s.earliest {
            s.earliest = truncate_to_millis(timestamp);
        }
        true
    }
}

/// Where the events a slot took are counted as recorded: the `metrics` counter and the
/// producer's own ([`crate::Producer::stats`]), as `Producer::accepted` counts an event.
#[derive(Clone)]
pub(crate) struct Counted {
    pub metric: metrics::Counter,
    pub stats: Arc<StatCounters>,
}

impl Default for Counted {
    /// Counters nobody reads (tests of the table alone).
    fn default() -> Self {
        Counted {
            metric: metrics::Counter::noop(),
            stats: Arc::default(),
        }
    }
}

impl Counted {
    fn add(&self, n: u64) {
        if n > 0 {
            self.metric.increment(n);
            self.stats.events_recorded.add(n);
        }
    }
}

/// Takes the slot attached to `buckets[i]` (if any) back into the bucket, counts the events
/// it took as recorded and detaches it. Called under the shard's lock.
pub(super) fn detach(buckets: &mut [Bucket], i: usize, counted: &Counted) {
    let b = &mut buckets[i];
    let Some(slot) = b.slot.take() else { return };
    let mut s = slot.lock();
    debug_assert!(s.live && s.ix == i, "an attached slot points at its bucket");
    give_back(b, &mut s, counted);
}

/// What the slot whose state is `s` took, back into its bucket `b`, counted as recorded;
/// the slot is left detached.
fn give_back(b: &mut Bucket, s: &mut SlotState, counted: &Counted) {
    b.sum.set_plain(s.quantity, s.earliest);
    b.constituents += s.added;
    counted.add(s.added);
    s.live = false;
    s.added = 0;
}

/// Attaches `slot` to `buckets[i]`, detaching `buckets[i]` from its own slot and `slot`
/// from the bucket it was attached to first. Called under the shard's lock. One hold of
/// `slot`'s lock, and the reference its last bucket held moves to `buckets[i]`: no count is
/// taken or given back when a handle moves on from one sum to the next.
pub(super) fn attach(buckets: &mut [Bucket], i: usize, slot: &Arc<FoldSlot>, counted: &Counted) {
    detach(buckets, i, counted);
    let mut s = slot.lock();
    let held = if s.live {
        let last = &mut buckets[s.ix];
        let held = last.slot.take();
        debug_assert!(
            held.as_ref().is_some_and(|h| Arc::ptr_eq(h, slot)),
            "an attached slot's bucket holds it"
        );
        give_back(last, &mut s, counted);
        held
    } else {
        None
    };
    let b = &mut buckets[i];
    // The sum's earliest timestamp is of its second: the slot compares that second as its
    // naive date and seconds past midnight.
    let earliest = b.sum.template().timestamp;
    let naive = earliest.naive_utc();
    *s = SlotState {
        live: true,
        ix: i,
        date: naive.date(),
        secs: naive.time().num_seconds_from_midnight(),
        quantity: b.sum.quantity(),
        added: 0,
        earliest,
    };
    drop(s);
    b.slot = Some(held.unwrap_or_else(|| slot.clone()));
}
