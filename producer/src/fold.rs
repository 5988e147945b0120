//! The collapse path of `record()` (docs/row-contract.md, "Collapse"): each event recorded
//! without an id is added at once to its window's sum in a sharded table, found by a hash of
//! its group, UTC second, producer id and kind, comparing the borrowed fields — no
//! partition-key string, no id, no encoding per event. The window's sums get their ids (one
//! generated id each), partition keys and encoding when the window closes (`engine::window`).
//! An event with an id of its own never joins a sum: its id is its caller's idempotency key,
//! and a sum carrying it under another id would be applied again when the caller re-records
//! the event; it is staged as it is. This table is the producer's one collapse
//! implementation; a test oracle (`oracle::Collapser`, test-only) sums the same events the
//! plainest way, and `fold::tests::the_table_sums_as_the_collapser` checks the two agree.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use crossbeam_utils::CachePadded;
use hashbrown::HashTable;
use tokio::time::Instant;

use awsmp_contract::event::{Event, GroupRef, UsageAllocation};

mod key;
#[cfg(test)]
mod oracle;
mod slot;
mod sum;

pub(crate) use key::{FoldKey, GroupHash};
pub(crate) use slot::{Counted, FoldSlot};
use slot::{attach, detach};
use sum::Sum;

/// Table shards: a power of two, picked by the group's hash, so one group's sums stay in one
/// shard (in the order they were opened) and callers recording different groups rarely meet
/// on a lock.
const FOLD_SHARDS: usize = 16;

/// What [`FoldTable::absorb`] did with an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Absorbed {
    /// Added to its open sum, at no charge (the sum needs no more bytes).
    Yes,
    /// No open sum takes it: it is charged and added as a new one ([`FoldTable::add`]).
    No,
    /// The table is sealed (shutdown).
    Sealed,
}

/// What an event that may open a sum is charged ([`FoldTable::add_opening`]): `bytes` of
/// buffer, its payload about `payload_len` bytes; `keyed` is its group's partition key and
/// hash when known.
pub(crate) struct Charged {
    pub bytes: usize,
    pub payload_len: usize,
    pub keyed: Option<(Arc<str>, u128)>,
    /// The group's v2 single head, when the opener keeps one: the sum is written from it.
    pub head: Option<SumHead>,
}

/// A sum's v2 single head, kept by its opener (a bound group handle, or the thread's key
/// cache): the group, the producer id written and the instance's id epoch, encoded, and
/// where a single written from it splits for an aggregate. The window's close writes the sum
/// as the head and its fields (`wire::v2::put_generated_single`) instead of laying it out
/// from the template's strings: the same bytes.
#[derive(Clone)]
pub(crate) struct SumHead {
    pub bytes: Arc<[u8]>,
    pub epoch: u128,
    pub split: Option<(u32, u32)>,
    /// The sum's group and producer id, when its template is hollow ([`GroupFields`]).
    pub fields: Option<Arc<GroupFields>>,
}

/// A bound group handle's group and the producer id it writes, owned once by the handle
/// and shared by the sums it opens (through their [`SumHead`]). Such a sum's template is
/// hollow ([`GroupFields::hollow`]): its quantity and timestamp, none of these strings. So
/// opening a sum builds no string on the caller's core, and closing it frees none on the
/// task's; the fields are written into the template only where a sum is not written from
/// its head ([`GroupFields::fill`]).
#[derive(Debug)]
pub(crate) struct GroupFields {
    pub license_arn: String,
    pub customer_aws_account_id: String,
    pub dimension: String,
    pub producer_id: Option<String>,
}

impl GroupFields {
    pub fn group(&self) -> GroupRef<'_> {
        GroupRef {
            license_arn: &self.license_arn,
            customer_aws_account_id: &self.customer_aws_account_id,
            dimension: &self.dimension,
        }
    }

    /// The template of a sum of these fields: `quantity` at `timestamp`, no string.
    pub fn hollow(quantity: u64, timestamp: DateTime<Utc>) -> Event {
        Event::new(
            String::new(),
            String::new(),
            String::new(),
            quantity,
            timestamp,
        )
    }

    /// Writes these fields into `event`, a hollow template (or the sum it became).
    pub fn fill(&self, event: &mut Event) {
        debug_assert!(event.license_arn.is_empty() && event.producer_id.is_none());
        event.license_arn.clone_from(&self.license_arn);
        event
            .customer_aws_account_id
            .clone_from(&self.customer_aws_account_id);
        event.dimension.clone_from(&self.dimension);
        event.producer_id.clone_from(&self.producer_id);
    }
}

/// What [`FoldTable::join_or_open`] did with a bound group handle's event.
pub(crate) enum Joined {
    /// Added to its open sum at no charge: the template goes back (to be freed outside the
    /// lock, and its charge given back).
    Absorbed(Event),
    /// Opened a sum with the template, charged; the staged byte count before.
    Opened(usize),
    /// No open sum takes it and there is no buffer space now to open one: the template
    /// goes back (to wait for space).
    NoSpace(Event),
    /// The table is sealed (shutdown): the template goes back.
    Sealed(Event),
}

struct Bucket {
    hash: u64,
    second: i64,
    /// The group's partition key and its hash, when the event that opened it came with them.
    keyed: Option<(Arc<str>, u128)>,
    /// The group's v2 single head, when the event that opened it came with one.
    head: Option<SumHead>,
    /// The template carries the producer id written (and no id: the sum is named when the
    /// window closes).
    sum: Sum,
    /// Events recorded into the sum (none with an id of its own).
    constituents: u64,
    /// When the first constituent was recorded (the earliest).
    enqueued_at: Instant,
    /// Buffer bytes the constituents were charged.
    bytes: usize,
    /// The bound group handle's slot attached to it, holding its plain constituents.
    slot: Option<Arc<FoldSlot>>,
}

#[derive(Default)]
struct Shard {
    /// The open sum of each key, as an index into `buckets`.
    index: HashTable<usize>,
    /// Every sum of the window, in the order opened.
    buckets: Vec<Bucket>,
    /// The vector `buckets` was before the last drain, emptied: the next window's.
    spare: Vec<Bucket>,
    /// Set by the task's last take (shutdown): later adds are refused.
    sealed: bool,
}

/// One sum of a closed window.
pub(crate) struct Folded {
    /// The sum's partition key and its hash, when known (else computed from the event).
    pub keyed: Option<(Arc<str>, u128)>,
    /// The group's v2 single head, when its opener kept one.
    pub head: Option<SumHead>,
    /// The summed event (its producer id filled in), without an id: the caller of
    /// [`FoldTable::drain`] names it. Hollow when `head` holds its fields
    /// ([`GroupFields`]): then it is written from the head, or filled in first.
    pub event: Event,
    /// How many recorded events the sum stands for (at least one).
    pub constituents: u64,
    pub enqueued_at: Instant,
    pub bytes: usize,
}

/// The open window's sums, sharded.
pub(crate) struct FoldTable {
    /// Each on cache lines of its own (callers of different shards pass no line around).
    shards: [CachePadded<Mutex<Shard>>; FOLD_SHARDS],
    /// Where the events its slots took are counted when they are detached.
    counted: Counted,
}

impl FoldTable {
    pub fn new(counted: Counted) -> Self {
        FoldTable {
            shards: std::array::from_fn(|_| CachePadded::new(Mutex::default())),
            counted,
        }
    }

    /// Events recorded: the producer's count, with the events the attached slots took and
    /// have not counted yet. Exact: every shard's lock is held (taken in order) while both
    /// are read, so no slot is detached — and its events counted — in between.
    pub fn recorded(&self) -> u64 {
        let shards: Vec<_> = self.shards.iter().map(|s| Self::lock(s)).collect();
        let held: u64 = shards
            .iter()
            .flat_map(|s| s.buckets.iter())
            .filter_map(|b| b.slot.as_ref())
            .map(|slot| slot.lock().added)
            .sum();
        self.counted.stats.events_recorded.get() + held
    }

    fn lock(shard: &Mutex<Shard>) -> std::sync::MutexGuard<'_, Shard> {
        // No add panics half-way; a poisoned shard's data is whole.
        shard
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds one event of `key`'s group and second with no id of its own and no allocations
    /// — `quantity` at `timestamp` — to its open sum, if there is one that stays within its
    /// limits. Such an event adds nothing the sum must hold (the sum is named by one generated
    /// id when the window closes), so it is not charged: no buffer bytes, no
    /// staged-byte count, no wake-up.
    ///
    /// With `slot` (a bound group handle's, of `key`'s group), the sum that took the event
    /// gets the slot attached: the handle's next events of that second go there
    /// ([`FoldSlot::try_add`]).
    pub fn absorb(
        &self,
        key: &FoldKey<'_>,
        quantity: u64,
        timestamp: DateTime<Utc>,
        slot: Option<&Arc<FoldSlot>>,
    ) -> Absorbed {
        debug_assert!(
            !key.allocated,
            "only events without allocations are absorbed free"
        );
        let mut s = Self::lock(&self.shards[key.shard()]);
        if s.sealed {
            return Absorbed::Sealed;
        }
        let Shard { index, buckets, .. } = &mut *s;
        let Some(&i) = index.find(key.hash, |&i| key.matches(&buckets[i])) else {
            return Absorbed::No;
        };
        detach(buckets, i, &self.counted);
        let b = &mut buckets[i];
        if !b.sum.try_absorb_plain(quantity, timestamp) {
            return Absorbed::No;
        }
        b.constituents += 1;
        if let Some(slot) = slot {
            attach(buckets, i, slot, &self.counted);
        }
        Absorbed::Yes
    }

    /// Adds one validated event of `key`'s group and second with no id of its own and
    /// allocations — `quantity` at `timestamp` (whole milliseconds) — to its open sum, if
    /// there is one that stays within its limits: what [`FoldTable::add`] does with such an
    /// event when its sum is open, from its borrowed parts. Unlike [`FoldTable::absorb`]'s,
    /// the event is charged `bytes` (its allocations can add tag sets to the sum), counted
    /// into `staged` under the shard's lock; the count before is returned. `Err(No)` when no
    /// open sum takes it (nothing is changed: [`FoldTable::add`] opens one), `Err(Sealed)`
    /// once the table is sealed.
    pub fn absorb_allocated(
        &self,
        key: &FoldKey<'_>,
        quantity: u64,
        allocations: &[UsageAllocation],
        timestamp: DateTime<Utc>,
        bytes: usize,
        staged: &AtomicUsize,
    ) -> Result<usize, Absorbed> {
        debug_assert!(
            key.allocated,
            "an event with allocations joins an allocated sum"
        );
        let mut s = Self::lock(&self.shards[key.shard()]);
        if s.sealed {
            return Err(Absorbed::Sealed);
        }
        let Shard { index, buckets, .. } = &mut *s;
        let Some(&i) = index.find(key.hash, |&i| key.matches(&buckets[i])) else {
            return Err(Absorbed::No);
        };
        let b = &mut buckets[i];
        // Slots attach to sums without allocations only.
        debug_assert!(b.slot.is_none(), "no slot on an allocated sum");
        if !b
            .sum
            .try_absorb_parts(quantity, Some(allocations), timestamp)
        {
            return Err(Absorbed::No);
        }
        b.bytes += bytes;
        b.constituents += 1;
        Ok(staged.fetch_add(bytes, Ordering::SeqCst))
    }

    /// A bound group handle's event that its slot did not take — `quantity` at `timestamp`,
    /// no id or allocations, of `key` — added to its open sum at no charge, as
    /// [`FoldTable::absorb`] adds it, or, when no open sum takes it, opening one as
    /// [`FoldTable::add`] opens it: `template` (the event, its producer id written, in whole
    /// milliseconds), `charged` (`charge` takes its bytes, under the lock, only to open; no
    /// buffer space gives the template back). Either way `slot` is attached to
    /// the sum that took the event, so the handle's next events of the second go there: one
    /// lock and one lookup, where an absorb that misses, an add and the next event's absorb
    /// take three of each.
    #[allow(clippy::too_many_arguments)]
    pub fn join_or_open(
        &self,
        key: &FoldKey<'_>,
        quantity: u64,
        timestamp: DateTime<Utc>,
        slot: &Arc<FoldSlot>,
        template: Event,
        charged: Charged,
        staged: &AtomicUsize,
        charge: impl FnOnce() -> bool,
    ) -> Joined {
        debug_assert!(!key.allocated && template.usage_allocations.is_none());
        let fields = charged.head.as_ref().and_then(|h| h.fields.as_deref());
        debug_assert!(
            template.event_id.is_empty()
                && fields.map_or(template.producer_id.as_deref(), |f| f
                    .producer_id
                    .as_deref())
                    == key.producer_id
        );
        debug_assert!(fields.is_none_or(|_| template.license_arn.is_empty()));
        let mut s = Self::lock(&self.shards[key.shard()]);
        if s.sealed {
            drop(s);
            return Joined::Sealed(template);
        }
        let Shard { index, buckets, .. } = &mut *s;
        let open = index.find_mut(key.hash, |&i| key.matches(&buckets[i]));
        if let Some(&mut i) = open {
            detach(buckets, i, &self.counted);
            let b = &mut buckets[i];
            if b.sum.try_absorb_plain(quantity, timestamp) {
                b.constituents += 1;
                attach(buckets, i, slot, &self.counted);
                drop(s);
                return Joined::Absorbed(template);
            }
        }
        // A new key, or its sum is full (a quantity overflow): a new sum, which later events
        // of the key join.
        if !charge() {
            drop(s);
            return Joined::NoSpace(template);
        }
        let before = staged.fetch_add(charged.bytes, Ordering::SeqCst);
        let new = buckets.len();
        match open {
            Some(i) => *i = new,
            None => {
                index.insert_unique(key.hash, new, |&i| buckets[i].hash);
            }
        }
        buckets.push(Bucket::opened(key.hash, key.second, template, charged));
        attach(buckets, new, slot, &self.counted);
        Joined::Opened(before)
    }

    /// Adds the validated `event`, which has no id of its own (written with
    /// `default_producer_id` when it has no producer id of its own), charged `bytes`, whose payload is about `payload_len` bytes;
    /// counts `bytes` into `staged` under the shard's lock and returns the count before.
    /// Gives the event back once the table is sealed. The event is dropped (when its sum
    /// absorbed it) after the lock is released.
    // Refusal is rare (after shutdown); boxing would cost an allocation per event.
    #[allow(clippy::result_large_err)]
    pub fn add(
        &self,
        event: Event,
        default_producer_id: Option<&str>,
        bytes: usize,
        payload_len: usize,
        staged: &AtomicUsize,
        keyed: Option<(Arc<str>, u128)>,
    ) -> Result<usize, Event> {
        let charged = Charged {
            bytes,
            payload_len,
            keyed,
            head: None,
        };
        self.add_opening(event, default_producer_id, charged, staged, None)
    }

    /// [`FoldTable::add`], `opener` — when given — the group's hash with the default
    /// producer id (the event has none of its own) and the slot of the thread recording it:
    /// the group is not hashed again, and a sum the event opens gets the slot attached, so
    /// the thread's next events of the second go there.
    #[allow(clippy::result_large_err)]
    pub fn add_opening(
        &self,
        mut event: Event,
        default_producer_id: Option<&str>,
        charged: Charged,
        staged: &AtomicUsize,
        opener: Option<(GroupHash, &Arc<FoldSlot>)>,
    ) -> Result<usize, Event> {
        debug_assert!(
            event.event_id.is_empty(),
            "an event with an id of its own never joins a sum"
        );
        let bytes = charged.bytes;
        let producer_id = event.producer_id.as_deref().or(default_producer_id);
        let key = match opener {
            Some((pre, _)) => {
                debug_assert!(event.producer_id.is_none() && event.usage_allocations.is_none());
                let second = event.timestamp.timestamp();
                FoldKey::with(pre, event.group(), producer_id, second, false)
            }
            None => FoldKey::new(&event, producer_id),
        }
        .from(charged.keyed.as_ref().map(|k| &k.0));
        let (hash, second, ix) = (key.hash, key.second, key.shard());
        let mut s = Self::lock(&self.shards[ix]);
        if s.sealed {
            drop(s);
            return Err(event);
        }
        let Shard { index, buckets, .. } = &mut *s;
        let open = index.find_mut(hash, |&i| key.matches(&buckets[i]));
        let absorbed = match &open {
            Some(i) => {
                // The sum's whole quantity first, and no slot left on a sum this may
                // replace as its key's open one.
                detach(buckets, **i, &self.counted);
                buckets[**i].sum.try_absorb(&event)
            }
            None => false,
        };
        let before = staged.fetch_add(bytes, Ordering::SeqCst);
        if absorbed {
            let b = &mut buckets[*open.expect("found above")];
            b.bytes += bytes;
            b.constituents += 1;
            drop(s);
            // The event's strings are freed outside the lock.
            drop(event);
            return Ok(before);
        }
        // A new key, or its sum is full (a quantity overflow, the allocation limits): a new
        // sum, which later events of the key join.
        let new = buckets.len();
        match open {
            Some(i) => *i = new,
            None => {
                index.insert_unique(hash, new, |&i| buckets[i].hash);
            }
        }
        if event.producer_id.is_none() {
            event.producer_id = default_producer_id.map(str::to_owned);
        }
        buckets.push(Bucket::opened(hash, second, event, charged));
        if let Some((_, slot)) = opener {
            attach(buckets, new, slot, &self.counted);
        }
        Ok(before)
    }

    /// Takes every sum, shard by shard, into `f` (a shard's in the order opened), counting
    /// their bytes out of `staged`; with `seal`, refuses later adds.
    pub fn drain(&self, seal: bool, staged: &AtomicUsize, mut f: impl FnMut(Folded)) {
        for shard in &self.shards {
            let mut buckets = {
                let mut s = Self::lock(shard);
                s.sealed |= seal;
                s.index.clear();
                if s.buckets.is_empty() {
                    continue;
                }
                // Every slot's events back into their sums: a handle's later event finds
                // its slot detached and opens the next window's sum.
                for i in 0..s.buckets.len() {
                    detach(&mut s.buckets, i, &self.counted);
                }
                // The next window's sums go into the vector emptied by the last drain:
                // memory already touched, no regrowth, no fresh page per window.
                let spare = std::mem::take(&mut s.spare);
                let buckets = std::mem::replace(&mut s.buckets, spare);
                let taken: usize = buckets.iter().map(|b| b.bytes).sum();
                staged.fetch_sub(taken, Ordering::SeqCst);
                buckets
            };
            for b in buckets.drain(..) {
                f(b.into_folded());
            }
            let mut s = Self::lock(shard);
            if s.spare.capacity() < buckets.capacity() {
                s.spare = buckets;
            }
        }
    }
}

impl Bucket {
    /// The sum's group and the producer id it is written with: its hollow template's
    /// shared fields, else its template's own.
    fn fields(&self) -> (GroupRef<'_>, Option<&str>) {
        match self.head.as_ref().and_then(|h| h.fields.as_deref()) {
            Some(f) => (f.group(), f.producer_id.as_deref()),
            None => {
                let t = self.sum.template();
                (t.group(), t.producer_id.as_deref())
            }
        }
    }

    /// A new sum of key `hash` and UTC second `second`, opened by `event`, which was
    /// `charged`.
    fn opened(hash: u64, second: i64, event: Event, charged: Charged) -> Self {
        let Charged {
            bytes,
            payload_len,
            keyed,
            head,
        } = charged;
        Bucket {
            hash,
            second,
            keyed,
            head,
            sum: Sum::new(event, payload_len),
            constituents: 1,
            enqueued_at: Instant::now(),
            bytes,
            slot: None,
        }
    }

    fn into_folded(self) -> Folded {
        let Bucket {
            keyed,
            head,
            sum,
            constituents,
            enqueued_at,
            bytes,
            ..
        } = self;
        Folded {
            keyed,
            head,
            event: sum.finish(constituents > 1),
            constituents,
            enqueued_at,
            bytes,
        }
    }
}

#[cfg(test)]
mod tests;
