//! The collapse path of `record()` (docs/row-contract.md, "Collapse"): each event recorded
//! without an id is added at once to its window's sum in a sharded table, found by a hash of
//! its group, UTC second, producer id and kind, comparing the borrowed fields — no
//! partition-key string, no id, no encoding per event. The window's sums get their ids (one
//! generated id each), partition keys and encoding when the window closes (`engine::window`).
//! An event with an id of its own never joins a sum: it is staged as it is. They are [`crate::collapse::Collapser`]'s sums: both add
//! through [`Sum`], and the tests below check the two agree.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, NaiveDate, Timelike, Utc};
use crossbeam_utils::CachePadded;
use foldhash::fast::FixedState;
use hashbrown::HashTable;
use tokio::time::Instant;

use crate::collapse::Sum;
use crate::event::{Event, GroupRef, UsageAllocation, truncate_to_millis};
use crate::metrics::StatCounters;

/// Table shards: a power of two, picked by the group's hash, so one group's sums stay in one
/// shard (in the order they were opened) and callers recording different groups rarely meet
/// on a lock.
const FOLD_SHARDS: usize = 16;

/// Fixed seed: a sum's place depends on its key only.
const KEY_HASHER: FixedState = FixedState::with_seed(0x666f_6c64_5f6b_6579);

/// What a group (with the producer id it is written with) contributes to its sums' keys,
/// hashed once: a bound group handle ([`crate::Meter`]) keeps it, so an event of its group
/// hashes only its second.
#[derive(Clone, Copy)]
pub(crate) struct GroupHash {
    group: u64,
    producer: u64,
}

impl GroupHash {
    pub fn new(group: GroupRef<'_>, producer_id: Option<&str>) -> Self {
        let mut p = KEY_HASHER.build_hasher();
        match producer_id {
            Some(id) => {
                p.write_u8(1);
                p.write(id.as_bytes());
            }
            None => p.write_u8(0),
        }
        GroupHash {
            group: group.hash_with(&KEY_HASHER),
            producer: p.finish(),
        }
    }
}

/// What a sum is found by, borrowed from the event being recorded (or the bound handle).
#[derive(Clone, Copy)]
pub(crate) struct FoldKey<'a> {
    group: GroupRef<'a>,
    /// The group's partition key as its caller holds it (a meter's, or the per-thread key
    /// cache's): a sum opened with the same one is of this group, without comparing strings.
    origin: Option<&'a Arc<str>>,
    /// The producer id written: the event's, else the producer's default.
    producer_id: Option<&'a str>,
    allocated: bool,
    second: i64,
    group_hash: u64,
    hash: u64,
}

impl<'a> FoldKey<'a> {
    pub fn new(event: &'a Event, producer_id: Option<&'a str>) -> Self {
        let group = event.group();
        let pre = GroupHash::new(group, producer_id);
        let allocated = event.usage_allocations.is_some();
        Self::with(
            pre,
            group,
            producer_id,
            event.timestamp.timestamp(),
            allocated,
        )
    }

    /// This key, with the group's partition key as its caller holds it.
    pub fn from(mut self, origin: Option<&'a Arc<str>>) -> Self {
        self.origin = origin;
        self
    }

    /// The key of `group`'s sum of UTC second `second`, `pre` hashed from `group` and
    /// `producer_id`.
    pub fn with(
        pre: GroupHash,
        group: GroupRef<'a>,
        producer_id: Option<&'a str>,
        second: i64,
        allocated: bool,
    ) -> Self {
        let mut h = KEY_HASHER.build_hasher();
        h.write_u64(pre.group);
        h.write_u64(pre.producer);
        h.write_i64(second);
        h.write_u8(u8::from(allocated));
        FoldKey {
            group,
            origin: None,
            producer_id,
            allocated,
            second,
            group_hash: pre.group,
            hash: h.finish(),
        }
    }

    fn shard(&self) -> usize {
        (self.group_hash >> (64 - FOLD_SHARDS.trailing_zeros())) as usize
    }

    fn matches(&self, b: &Bucket) -> bool {
        let t = b.sum.template();
        // The bucket holds its origin, so one still pointing there is the same key's.
        let same_origin = match (self.origin, &b.keyed) {
            (Some(k), Some((o, _))) => Arc::ptr_eq(k, o),
            _ => false,
        };
        b.hash == self.hash
            && b.second == self.second
            && (same_origin
                || (t.license_arn == self.group.license_arn
                    && t.customer_aws_account_id == self.group.customer_aws_account_id
                    && t.dimension == self.group.dimension))
            && t.producer_id.as_deref() == self.producer_id
            && t.usage_allocations.is_some() == self.allocated
    }
}

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
#[derive(Default)]
pub(crate) struct FoldSlot(Mutex<SlotState>);

#[derive(Default)]
struct SlotState {
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
    added: u64,
    /// The earliest timestamp added here (the sum's own when attached).
    earliest: DateTime<Utc>,
}

impl FoldSlot {
    fn lock(&self) -> std::sync::MutexGuard<'_, SlotState> {
        // No add panics half-way; a poisoned slot's data is whole.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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

/// UTC second `second` as the naive date and seconds past midnight [`FoldSlot::try_add`]
/// compares (`None` out of `chrono`'s range: never for a validated timestamp).
fn date_and_secs(second: i64) -> Option<(NaiveDate, u32)> {
    let t = DateTime::from_timestamp(second, 0)?.naive_utc();
    Some((t.date(), t.time().num_seconds_from_midnight()))
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
fn detach(buckets: &mut [Bucket], i: usize, counted: &Counted) {
    let b = &mut buckets[i];
    let Some(slot) = b.slot.take() else { return };
    let mut s = slot.lock();
    debug_assert!(s.live && s.ix == i, "an attached slot points at its bucket");
    b.sum.set_plain(s.quantity, s.earliest);
    b.constituents += s.added;
    counted.add(s.added);
    s.live = false;
    s.added = 0;
}

/// Attaches `slot` to `buckets[i]` (of `second`), detaching it from the bucket it was
/// attached to and `buckets[i]` from its own slot first. Called under the shard's lock.
fn attach(buckets: &mut [Bucket], i: usize, slot: &Arc<FoldSlot>, second: i64, counted: &Counted) {
    let was = {
        let s = slot.lock();
        s.live.then_some(s.ix)
    };
    if let Some(j) = was {
        detach(buckets, j, counted);
    }
    detach(buckets, i, counted);
    // A second out of range (never validated) leaves the slot detached.
    let Some((date, secs)) = date_and_secs(second) else {
        return;
    };
    let b = &mut buckets[i];
    let mut s = slot.lock();
    *s = SlotState {
        live: true,
        ix: i,
        date,
        secs,
        quantity: b.sum.quantity(),
        added: 0,
        earliest: b.sum.template().timestamp,
    };
    b.slot = Some(slot.clone());
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
    /// [`FoldTable::drain`] names it.
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
            attach(buckets, i, slot, key.second, &self.counted);
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
        debug_assert!(
            template.event_id.is_empty() && template.producer_id.as_deref() == key.producer_id
        );
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
                attach(buckets, i, slot, key.second, &self.counted);
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
        let Charged {
            bytes,
            payload_len,
            keyed,
            head,
        } = charged;
        let before = staged.fetch_add(bytes, Ordering::SeqCst);
        let new = buckets.len();
        match open {
            Some(i) => *i = new,
            None => {
                index.insert_unique(key.hash, new, |&i| buckets[i].hash);
            }
        }
        buckets.push(Bucket {
            hash: key.hash,
            second: key.second,
            keyed,
            head,
            sum: Sum::new(template, payload_len),
            constituents: 1,
            enqueued_at: Instant::now(),
            bytes,
            slot: None,
        });
        attach(buckets, new, slot, key.second, &self.counted);
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
        let Charged {
            bytes,
            payload_len,
            keyed,
            head,
        } = charged;
        let producer_id = event.producer_id.as_deref().or(default_producer_id);
        let key = match opener {
            Some((pre, _)) => {
                debug_assert!(event.producer_id.is_none() && event.usage_allocations.is_none());
                let second = event.timestamp.timestamp();
                FoldKey::with(pre, event.group(), producer_id, second, false)
            }
            None => FoldKey::new(&event, producer_id),
        }
        .from(keyed.as_ref().map(|k| &k.0));
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
        buckets.push(Bucket {
            hash,
            second,
            keyed,
            head,
            sum: Sum::new(event, payload_len),
            constituents: 1,
            enqueued_at: Instant::now(),
            bytes,
            slot: None,
        });
        if let Some((_, slot)) = opener {
            attach(buckets, new, slot, second, &self.counted);
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
#[path = "fold_tests.rs"]
mod tests;
