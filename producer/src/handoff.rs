//! What passes between the producer handle and the background task: the control commands, the
//! staging area events are left in ([`Staging`]), the validated event on its way
//! ([`Incoming`]) and the buffer bytes it holds ([`Reservation`]).
//! Both sides import this module; neither imports the other's internals.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use chrono::{DateTime, Utc};
use crossbeam_utils::CachePadded;
use hashbrown::HashTable;
use tokio::sync::{Notify, Semaphore, mpsc, oneshot};
use tokio::time::Instant;

use crate::config::ProducerConfig;
use crate::event_id::IdGenerator;
use crate::fold::{
    Absorbed, Charged, Counted, FoldKey, FoldSlot, FoldTable, Folded, GroupHash, Joined,
};
use crate::metrics::{Metrics, StatCounters};
use crate::outcome::{FlushOutcome, Undelivered, UndeliveredCallback};
use awsmp_contract::event::{Event, UsageAllocation};

/// Bytes charged per user record on top of its payload and partition key: the bookkeeping the
/// producer keeps for it while it is held.
pub const RECORD_OVERHEAD_BYTES: usize = 96;

/// Control commands from producer handles (events go through [`Staging`]).
pub(crate) enum Command {
    Flush(oneshot::Sender<FlushOutcome>),
    TakeUndelivered(oneshot::Sender<Vec<Undelivered>>),
    Shutdown(oneshot::Sender<FlushOutcome>),
}

/// Staging shards: one per recording thread (threads numbered as they first push, the
/// number taken modulo the shards), so two callers on two cores never write one shard's lock,
/// vectors or buffer, and a thread's events stay in one shard in the order it recorded them.
/// The take merges the shards by the time each event was staged ([`Staging::take`]), so each
/// group's events, and each id lane's sequences, still reach the stream in the order they
/// were recorded.
const STAGING_SHARDS: usize = 16;

/// The staging shard of the calling thread ([`STAGING_SHARDS`]).
fn this_threads_shard() -> usize {
    static THREADS: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = THREADS.fetch_add(1, Ordering::Relaxed) % STAGING_SHARDS;
    }
    SHARD.with(|s| *s)
}

/// A shard's payload buffer is at least this big; a full one is kept as it is (frozen, no
/// copy) and a new one started.
const STAGING_BUFFER_BYTES: usize = 64 * 1024;

/// The most a shard's ready buffer (four pack steps, [`PACK_STEP_BYTES`]) and item vector
/// (16,384 items of 80 bytes) are made for, so that a take that found far more (the task held
/// up) does not keep that much memory ready for good.
const MOST_READY_BYTES: usize = 4 * PACK_STEP_BYTES;
const MOST_READY_ITEMS: usize = 16 * 1024;

/// An empty staging buffer of `bytes` (at least [`STAGING_BUFFER_BYTES`]) whose pages are
/// touched (written once), so that the payloads later written into it fault in no page.
fn ready_buffer(bytes: usize) -> BytesMut {
    let bytes = bytes.max(STAGING_BUFFER_BYTES);
    let mut b = BytesMut::with_capacity(bytes);
    b.resize(bytes, 0);
    b.clear();
    b
}

/// An empty item vector with room for `n` items, its pages touched as [`ready_buffer`]'s.
fn ready_items(n: usize) -> Vec<Staged> {
    let blank = Staged {
        at: 0,
        len: 0,
        split: None,
        chunk: 0,
        key: 0,
        hash: 0,
        enqueued_at: Instant::now(),
        bytes: 0,
    };
    let mut v = vec![blank; n];
    v.clear();
    v
}

/// Staged bytes (as charged) between the task's wake-ups while a window is open, so that it
/// packs the window as it fills (`engine::window`) rather than all at its close: a power of
/// two, crossed about every thousand v2 events, so a wake-up's cost is spread over many.
pub(crate) const PACK_STEP_BYTES: usize = 256 * 1024;

/// Where `record()` leaves validated events for the background task: per-shard vectors
/// behind short locks (a push, nothing else), and one wake-up for the task when the first
/// bytes arrive and another when they pass the size trigger — not one per event.
pub(crate) struct Staging {
    /// Each on cache lines of its own: callers on two cores recording groups of different
    /// shards do not pass a line back and forth.
    shards: [CachePadded<Mutex<StagingShard>>; STAGING_SHARDS],
    /// Bytes pushed and not yet taken (on lines of its own, apart from the shards).
    bytes: CachePadded<AtomicUsize>,
    /// Staged bytes at which the task is woken to close its window early.
    trigger: usize,
    /// Bytes were staged into an empty staging area.
    first: Notify,
    /// The staged bytes crossed `trigger`.
    full: Notify,
    /// The staged bytes crossed a multiple of [`PACK_STEP_BYTES`] (pushes only).
    step: Notify,
    /// The open window's sums (collapse): events are added there instead of pushed.
    folds: FoldTable,
}

#[derive(Default)]
struct StagingShard {
    items: Vec<Staged>,
    /// The vector `items` was before the last take, emptied: the next take's `items`.
    spare: Vec<Staged>,
    /// The staged events' payloads, back to back, since the last full buffer.
    buffer: BytesMut,
    /// The full buffers of this take, in order: a payload in `chunks[i]` was written before
    /// `buffer`'s (a buffer is never regrown, so no staged byte is copied).
    chunks: Vec<Bytes>,
    /// The next buffer, made ready by the task ([`ready_buffer`]): when `buffer` fills, a
    /// push goes on in memory already touched, so the caller never faults in a fresh page
    /// (about one call in a hundred would, one per 4 KiB of payloads).
    ready: BytesMut,
    /// The staged events' partition keys, one entry per key (by pointer) and take: a push of
    /// a key already there takes no reference, so no reference count passes between the
    /// caller's core and the task's per event.
    keys: Vec<Arc<str>>,
    /// `keys`' positions by the key's address.
    key_index: HashTable<usize>,
    /// Set by the task's last take (shutdown): later pushes are refused.
    sealed: bool,
    /// What `items` were charged, summed: the take reads it instead of adding them up
    /// under the lock.
    bytes: usize,
    /// The most events, and payload bytes, one take has found here: what the task makes the
    /// next vector and buffer ready for (twice over, up to [`MOST_READY_ITEMS`] and
    /// [`MOST_READY_BYTES`]).
    most_items: usize,
    most_bytes: usize,
}

/// The hash of a staged key: its address (keys are told apart by pointer).
fn key_hash(key: &Arc<str>) -> u64 {
    // Fibonacci hashing spreads the (aligned) addresses over the table's top bits.
    (Arc::as_ptr(key).cast::<u8>() as usize as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

impl StagingShard {
    /// The position of `key` in `keys`, added if it is not there yet.
    fn key_of(&mut self, key: &Arc<str>) -> usize {
        let StagingShard {
            keys, key_index, ..
        } = self;
        let h = key_hash(key);
        if let Some(&i) = key_index.find(h, |&i| Arc::ptr_eq(&keys[i], key)) {
            return i;
        }
        let i = keys.len();
        keys.push(key.clone());
        key_index.insert_unique(h, i, |&j| key_hash(&keys[j]));
        i
    }
}

impl Staging {
    /// An empty staging area: the task is woken when `trigger` bytes are staged; the events
    /// a bound handle's slot takes are counted into `counted` ([`FoldTable::new`]).
    pub fn new(trigger: usize, counted: Counted) -> Self {
        Staging {
            shards: std::array::from_fn(|_| CachePadded::new(Mutex::default())),
            bytes: CachePadded::new(AtomicUsize::new(0)),
            trigger,
            first: Notify::new(),
            full: Notify::new(),
            step: Notify::new(),
            folds: FoldTable::new(counted),
        }
    }

    fn lock(shard: &Mutex<StagingShard>) -> std::sync::MutexGuard<'_, StagingShard> {
        // A push cannot panic half-way; a poisoned shard's data is whole.
        shard
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Leaves an encoded event for the task, charged `bytes`: `write` appends its payload,
    /// `len` bytes, to the shard's buffer (one buffer per shard and window, not one per
    /// event); `split` is where the payload, a v2 single, splits for an aggregate when known
    /// ([`crate::batch::UserRec::split`]). False once the task has taken its last (nothing
    /// written).
    pub fn push(
        &self,
        len: usize,
        write: impl FnOnce(&mut BytesMut),
        split: Option<(u32, u32)>,
        partition_key: &Arc<str>,
        hash: u128,
        bytes: usize,
    ) -> bool {
        let ix = this_threads_shard();
        // Read before the lock: the clock is no part of what the lock orders.
        let enqueued_at = Instant::now();
        let before = {
            let mut s = Self::lock(&self.shards[ix]);
            if s.sealed {
                return false;
            }
            if s.buffer.capacity() - s.buffer.len() < len {
                if !s.buffer.is_empty() {
                    let full = s.buffer.split().freeze();
                    s.chunks.push(full);
                }
                let ready = std::mem::take(&mut s.ready);
                s.buffer = if ready.capacity() >= len {
                    ready
                } else {
                    BytesMut::with_capacity(len.max(STAGING_BUFFER_BYTES))
                };
            }
            let at = s.buffer.len();
            let chunk = s.chunks.len() as u32;
            write(&mut s.buffer);
            debug_assert_eq!(s.buffer.len() - at, len, "the payload is as long as sized");
            let key = s.key_of(partition_key);
            s.items.push(Staged {
                at,
                len,
                split,
                chunk,
                key,
                hash,
                enqueued_at,
                bytes,
            });
            s.bytes += bytes;
            // Counted under the shard's lock: the count never runs ahead of or behind what
            // the task can take.
            self.bytes.fetch_add(bytes, Ordering::SeqCst)
        };
        self.wake(before, bytes);
        if before / PACK_STEP_BYTES != (before + bytes) / PACK_STEP_BYTES {
            self.step.notify_one();
        }
        true
    }

    /// Adds the validated `event` to its window's sum (collapse), charged `bytes`; gives it
    /// back once the task has taken its last. `default_producer_id` is written for an event
    /// without a producer id; `keyed` is its group's partition key and hash when known.
    #[allow(clippy::result_large_err)]
    pub fn fold(
        &self,
        event: Event,
        default_producer_id: Option<&str>,
        bytes: usize,
        payload_len: usize,
        keyed: Option<(Arc<str>, u128)>,
    ) -> Result<(), Event> {
        let folds = &self.folds;
        let before = folds.add(
            event,
            default_producer_id,
            bytes,
            payload_len,
            &self.bytes,
            keyed,
        )?;
        self.wake(before, bytes);
        Ok(())
    }

    /// [`Staging::fold`] with the opener's group hash and slot ([`FoldTable::add_opening`]).
    #[allow(clippy::result_large_err)]
    pub fn fold_opening(
        &self,
        event: Event,
        default_producer_id: Option<&str>,
        charged: Charged,
        opener: Option<(GroupHash, &Arc<FoldSlot>)>,
    ) -> Result<(), Event> {
        let bytes = charged.bytes;
        let folds = &self.folds;
        let before = folds.add_opening(event, default_producer_id, charged, &self.bytes, opener)?;
        self.wake(before, bytes);
        Ok(())
    }

    /// Adds an event without id or allocations to its open sum at no charge, attaching
    /// `slot` to it when given ([`FoldTable::absorb`]).
    pub fn absorb(
        &self,
        key: &FoldKey<'_>,
        quantity: u64,
        timestamp: DateTime<Utc>,
        slot: Option<&Arc<FoldSlot>>,
    ) -> Absorbed {
        self.folds.absorb(key, quantity, timestamp, slot)
    }

    /// Adds an event without id, with allocations, to its open sum, charged `bytes`
    /// ([`FoldTable::absorb_allocated`]), waking the task as [`Staging::fold`] does.
    pub fn absorb_allocated(
        &self,
        key: &FoldKey<'_>,
        quantity: u64,
        allocations: &[UsageAllocation],
        timestamp: DateTime<Utc>,
        bytes: usize,
    ) -> Absorbed {
        let folds = &self.folds;
        match folds.absorb_allocated(key, quantity, allocations, timestamp, bytes, &self.bytes) {
            Ok(before) => {
                self.wake(before, bytes);
                Absorbed::Yes
            }
            Err(refused) => refused,
        }
    }

    /// A bound group handle's event its slot did not take: joins its open sum or opens one
    /// `charged` (its bytes taken by `charge`), the slot attached ([`FoldTable::join_or_open`]); an opening wakes
    /// the task as [`Staging::fold`] does.
    #[allow(clippy::too_many_arguments)]
    pub fn join_or_open(
        &self,
        key: &FoldKey<'_>,
        quantity: u64,
        timestamp: DateTime<Utc>,
        slot: &Arc<FoldSlot>,
        template: Event,
        charged: Charged,
        charge: impl FnOnce() -> bool,
    ) -> Joined {
        let bytes = charged.bytes;
        let joined = self.folds.join_or_open(
            key,
            quantity,
            timestamp,
            slot,
            template,
            charged,
            &self.bytes,
            charge,
        );
        if let Joined::Opened(before) = joined {
            self.wake(before, bytes);
        }
        joined
    }

    /// Wakes the task when `bytes` staged onto `before` make the staging area non-empty or
    /// cross the size trigger: at most twice per window, never per event.
    fn wake(&self, before: usize, bytes: usize) {
        // A wake-up with nobody waiting is kept for the task's next wait.
        if before == 0 {
            self.first.notify_one();
        }
        if before < self.trigger && before + bytes >= self.trigger {
            self.full.notify_one();
        }
    }

    /// Events recorded, with those the bound handles' slots hold ([`FoldTable::recorded`]).
    pub fn recorded(&self) -> u64 {
        self.folds.recorded()
    }

    /// Takes the window's sums into `f`; with `seal`, refuses later adds.
    pub fn take_folded(&self, seal: bool, f: impl FnMut(Folded)) {
        self.folds.drain(seal, &self.bytes, f);
    }

    /// Takes everything staged into `f`; with `seal`, refuses later pushes.
    ///
    /// One shard's events are handed over in the order they were pushed. When several
    /// threads' shards hold events, they are merged by the time each was staged (its
    /// `enqueued_at`, read before its shard's lock): a task that moved between threads
    /// keeps the order it recorded in, each group's events arrive in recorded order, and an
    /// id lane's sequences (taken from one counter by all threads) arrive in order but for
    /// two calls that raced each other. So the consumer's applied ranges of a lane stay few
    /// however many threads record, as they do with one shard per lane.
    ///
    /// The per-thread shards are a fast path (docs/producer-internals.md, "The fast-path rule") over one queue;
    /// equivalence tests: `handoff::tests::a_take_merges_the_threads_shards_in_the_order_they_were_pushed`
    /// and `handoff::tests::a_caller_that_moves_between_threads_keeps_its_order`.
    pub fn take(&self, seal: bool, mut f: impl FnMut(Incoming)) {
        // Nothing staged (a push not counted yet is taken next time: its count wakes the
        // task): no lock taken, so a task woken for other reasons never meets record().
        if !seal && self.bytes.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut taken = Vec::new();
        for (n, shard) in self.shards.iter().enumerate() {
            let mut s = Self::lock(shard);
            s.sealed |= seal;
            if s.items.is_empty() {
                continue;
            }
            // Pushes go on into the vector emptied by the last take: memory already
            // touched, so a push neither regrows a vector nor faults in a fresh page.
            let spare = std::mem::take(&mut s.spare);
            let items = std::mem::replace(&mut s.items, spare);
            debug_assert_eq!(s.bytes, items.iter().map(|i| i.bytes).sum::<usize>());
            self.bytes
                .fetch_sub(std::mem::take(&mut s.bytes), Ordering::SeqCst);
            let keys = std::mem::take(&mut s.keys);
            s.key_index.clear();
            let mut payloads = std::mem::take(&mut s.chunks);
            payloads.push(s.buffer.split().freeze());
            taken.push(Taken {
                shard: n,
                items,
                payloads,
                keys,
            });
        }
        // Each shard's next event to hand over (one shard: in push order).
        let mut next = [0usize; STAGING_SHARDS];
        while let Some(t) = earliest(&taken, &next) {
            f(taken[t].incoming(next[t]));
            next[t] += 1;
        }
        for Taken {
            shard,
            mut items,
            payloads,
            ..
        } in taken
        {
            let (n, used) = (items.len(), payloads.iter().map(Bytes::len).sum::<usize>());
            items.clear();
            let shard = &self.shards[shard];
            let (grew, want_items, want_bytes, ready_now) = {
                let mut s = Self::lock(shard);
                let grew = n > s.most_items;
                s.most_items = s.most_items.max(n);
                s.most_bytes = s.most_bytes.max(used);
                let want_items = (2 * s.most_items).min(MOST_READY_ITEMS);
                let want_bytes = (2 * s.most_bytes).min(MOST_READY_BYTES);
                (grew, want_items, want_bytes, s.ready.capacity())
            };
            // A shard in use gets its next vector and buffer made ready here, on the task's
            // core (not under the lock: touching their pages takes microseconds), with room
            // for twice the most a take found in it, so the caller's pushes write memory
            // already touched: a vector that grew on the caller (its new pages untouched
            // past this take's events) or is short is replaced by one touched here.
            if grew || items.capacity() < want_items {
                // Never less than this take held: past the cap, what was used stays ready.
                items = ready_items(want_items.max(n));
            }
            let ready = (ready_now < want_bytes).then(|| ready_buffer(want_bytes));
            let mut s = Self::lock(shard);
            if s.spare.capacity() < items.capacity() {
                s.spare = items;
            }
            if let Some(ready) = ready
                && s.ready.capacity() < ready.capacity()
            {
                s.ready = ready;
            }
        }
    }

    /// Bytes staged and not yet taken.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::SeqCst)
    }

    /// Resolves once events were staged into an empty staging area since the last time.
    pub async fn first_staged(&self) {
        self.first.notified().await;
    }

    /// Resolves once the staged bytes crossed the size trigger since the last time.
    pub async fn trigger_crossed(&self) {
        self.full.notified().await;
    }

    /// Resolves once pushes crossed a multiple of [`PACK_STEP_BYTES`] since the last time.
    pub async fn step_crossed(&self) {
        self.step.notified().await;
    }
}

/// Everything the background task is started with.
pub(crate) struct EngineParts<S, M> {
    pub config: Arc<ProducerConfig>,
    pub sink: Arc<S>,
    pub shards: Arc<M>,
    pub rx: mpsc::Receiver<Command>,
    pub staging: Arc<Staging>,
    pub sem: Arc<Semaphore>,
    pub on_undelivered: Option<UndeliveredCallback>,
    pub metrics: Metrics,
    pub stats: Arc<StatCounters>,
    /// The instance's id generator: collapse names its sums when their window closes.
    pub ids: Arc<IdGenerator>,
}

/// Bytes held against the buffer bound; released when dropped.
pub(crate) struct Reservation {
    sem: Arc<Semaphore>,
    bytes: usize,
}

impl Reservation {
    /// Takes charge of `bytes` already acquired (and forgotten) from `sem`.
    pub fn new(sem: Arc<Semaphore>, bytes: usize) -> Self {
        Reservation { sem, bytes }
    }

    /// Takes over `other`'s bytes.
    pub fn merge(&mut self, mut other: Reservation) {
        self.bytes += other.bytes;
        other.bytes = 0;
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.sem.add_permits(self.bytes);
        }
    }
}

/// Of the shards' next events (`next[t]` of `taken[t]`), the shard of the one staged first
/// (the first such shard on a tie); `None` when every shard is handed over. A merge of the
/// shards by this keeps each shard's own order, whatever order its events' clocks read (two
/// threads can share a shard), and allocates nothing: a take merges its few shards (one a
/// recording thread) in a comparison or two an event.
fn earliest(taken: &[Taken], next: &[usize; STAGING_SHARDS]) -> Option<usize> {
    let mut first: Option<(Instant, usize)> = None;
    for (t, shard) in taken.iter().enumerate() {
        if let Some(s) = shard.items.get(next[t])
            && first.is_none_or(|(at, _)| s.enqueued_at < at)
        {
            first = Some((s.enqueued_at, t));
        }
    }
    first.map(|(_, t)| t)
}

/// A staged event: its payload is `[at..at + len]` of its shard's buffer `chunk`, its partition key
/// `keys[key]`.
#[derive(Clone)]
struct Staged {
    at: usize,
    len: usize,
    split: Option<(u32, u32)>,
    /// Its buffer: `chunks[chunk]`, or the current one when `chunk` is `chunks.len()`.
    chunk: u32,
    key: usize,
    hash: u128,
    enqueued_at: Instant,
    bytes: usize,
}

/// One shard's take: its events, their payload buffers and their keys.
struct Taken {
    shard: usize,
    items: Vec<Staged>,
    payloads: Vec<Bytes>,
    keys: Vec<Arc<str>>,
}

impl Taken {
    /// The `i`th event, handed over.
    fn incoming(&self, i: usize) -> Incoming {
        let s = &self.items[i];
        Incoming {
            payload: self.payloads[s.chunk as usize].slice(s.at..s.at + s.len),
            split: s.split,
            partition_key: self.keys[s.key].clone(),
            hash: s.hash,
            enqueued_at: s.enqueued_at,
            bytes: s.bytes,
        }
    }
}

/// A validated, encoded event on its way to the background task (no collapse).
pub(crate) struct Incoming {
    pub payload: Bytes,
    /// Where the payload splits for an aggregate, when known ([`crate::batch::UserRec::split`]).
    pub split: Option<(u32, u32)>,
    pub partition_key: Arc<str>,
    pub hash: u128,
    pub enqueued_at: Instant,
    /// Buffer bytes acquired (and forgotten) for it: the task takes charge of them.
    pub bytes: usize,
}

#[cfg(test)]
mod tests;
