//! Optional per-second collapse (docs/row-contract.md, "Collapse"): inside one linger window, events of the same group
//! and UTC second are summed into one event. Pure; conserves quantity per group-second and per
//! allocation tag set.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

use chrono::{DateTime, Utc};

use foldhash::fast::FixedState;
use hashbrown::HashTable;
use sha1::{Digest, Sha1};
use uuid::Uuid;

use crate::event::{
    Event, MAX_ALLOCATIONS_PER_RECORD, MAX_TAGS_PER_ALLOCATION, Tag, UsageAllocation,
};

/// Namespace of collapsed event ids (UUID v5 over the sorted constituent ids).
pub const COLLAPSE_ID_NAMESPACE: Uuid = Uuid::from_u128(0x6d1f_4a8e_2c57_4b0b_9a7e_52c4_1f3e_8d90);

/// A collapsed event stops growing past this estimated payload size (new events of its
/// group-second start another one), keeping every record far below the 1 MiB Kinesis limit.
pub const MAX_COLLAPSED_PAYLOAD_BYTES: usize = 256 * 1024;

/// Bookkeeping carried along with each event and merged when events collapse.
pub trait CollapseMeta {
    /// Folds `other` (an event that collapsed into this one) into `self`.
    fn absorb(&mut self, other: Self);
}

impl CollapseMeta for () {
    fn absorb(&mut self, _other: Self) {}
}

#[derive(Hash, PartialEq, Eq)]
struct Key {
    partition_key: String,
    second: i64,
    producer_id: Option<String>,
    allocated: bool,
}

/// The running sum of one (group, second, producer, kind): the first event as a template,
/// the summed quantity and the allocations merged by tag set. Shared by [`Collapser`] and
/// the producer's per-shard window table (`crate::fold`), so both sum alike.
pub(crate) struct Sum {
    template: Event,
    quantity: u64,
    allocations: Vec<UsageAllocation>,
    by_tag_set: Option<TagIndex>,
    approx_bytes: usize,
}

struct Bucket<M> {
    sum: Sum,
    ids: Vec<String>,
    meta: M,
}

/// One output of [`Collapser::drain`].
#[derive(Debug)]
pub struct Collapsed<M> {
    /// The (possibly summed) event.
    pub event: Event,
    /// How many recorded events it stands for.
    pub constituents: usize,
    /// The merged bookkeeping.
    pub meta: M,
}

/// Collects the events of one linger window.
pub struct Collapser<M> {
    index: HashMap<Key, usize>,
    buckets: Vec<Bucket<M>>,
}

impl<M> Default for Collapser<M> {
    fn default() -> Self {
        Collapser {
            index: HashMap::new(),
            buckets: Vec::new(),
        }
    }
}

/// Tag sets hashed once per set; the sets themselves are compared sorted, without copies.
const TAG_HASHER: FixedState = FixedState::with_seed(0x7a67_5f73_6574_5f31);

/// `tags` sorted, on the stack for the at most 5 tags of a validated allocation.
fn with_sorted<R>(tags: &[Tag], f: impl FnOnce(&[&Tag]) -> R) -> R {
    if tags.len() <= MAX_TAGS_PER_ALLOCATION && !tags.is_empty() {
        let mut buf = [&tags[0]; MAX_TAGS_PER_ALLOCATION];
        for (slot, t) in buf.iter_mut().zip(tags) {
            *slot = t;
        }
        let sorted = &mut buf[..tags.len()];
        sorted.sort_unstable();
        f(sorted)
    } else {
        let mut v: Vec<&Tag> = tags.iter().collect();
        v.sort_unstable();
        f(&v)
    }
}

fn tag_set_hash(tags: &[Tag]) -> u64 {
    with_sorted(tags, |sorted| {
        let mut h = TAG_HASHER.build_hasher();
        for t in sorted {
            h.write(t.key.as_bytes());
            h.write_u8(0xff);
            h.write(t.value.as_bytes());
            h.write_u8(0xff);
        }
        h.write_usize(sorted.len());
        h.finish()
    })
}

fn same_tag_set(a: &[Tag], b: &[Tag]) -> bool {
    a.len() == b.len() && with_sorted(a, |sa| with_sorted(b, |sb| sa == sb))
}

/// The merged allocations' positions by tag set (the sorted (key, value) pairs).
#[derive(Default)]
struct TagIndex {
    table: HashTable<usize>,
}

impl TagIndex {
    fn find(&self, merged: &[UsageAllocation], a: &UsageAllocation) -> Option<usize> {
        self.table
            .find(tag_set_hash(&a.tags), |&i| {
                same_tag_set(&merged[i].tags, &a.tags)
            })
            .copied()
    }
}

fn allocation_bytes(a: &UsageAllocation) -> usize {
    // {"AllocatedUsageQuantity":N,"Tags":[{"Key":"k","Value":"v"}]} — generous estimate.
    48 + a
        .tags
        .iter()
        .map(|t| 24 + 2 * (t.key.len() + t.value.len()))
        .sum::<usize>()
}

impl<M: CollapseMeta> Collapser<M> {
    /// An empty window.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of events the window will emit.
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// True when nothing was added.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Adds a validated event. `partition_key` must be the event's group key and
    /// `payload_bytes` its encoded size.
    pub fn add(&mut self, mut event: Event, partition_key: String, payload_bytes: usize, meta: M) {
        let key = Key {
            partition_key,
            second: event.timestamp.timestamp(),
            producer_id: event.producer_id.clone(),
            allocated: event.usage_allocations.is_some(),
        };
        if let Some(&i) = self.index.get(&key) {
            let b = &mut self.buckets[i];
            // The key holds the group's partition key, which is a digest for very long groups:
            // compare the group itself so a digest collision can never merge two groups.
            if b.sum.template.group() == event.group() && b.sum.try_absorb(&event) {
                b.ids.push(std::mem::take(&mut event.event_id));
                b.meta.absorb(meta);
                return;
            }
            if b.sum.template.group() != event.group() {
                self.push_bucket(event, payload_bytes, meta);
                return;
            }
        }
        let i = self.push_bucket(event, payload_bytes, meta);
        self.index.insert(key, i);
    }

    fn push_bucket(&mut self, event: Event, payload_bytes: usize, meta: M) -> usize {
        self.buckets.push(Bucket {
            ids: vec![event.event_id.clone()],
            sum: Sum::new(event, payload_bytes),
            meta,
        });
        self.buckets.len() - 1
    }

    /// Emits the window's events (collapsed ones with a deterministic id) and empties it.
    pub fn drain(&mut self) -> Vec<Collapsed<M>> {
        self.index.clear();
        self.buckets
            .drain(..)
            .map(|b| {
                let constituents = b.ids.len();
                let mut event = b.sum.finish(constituents > 1);
                if constituents > 1 {
                    event.event_id = collapsed_id(b.ids).to_string();
                }
                Collapsed {
                    event,
                    constituents,
                    meta: b.meta,
                }
            })
            .collect()
    }
}

impl Sum {
    /// A sum holding `event` alone, whose payload is `payload_bytes` long.
    pub(crate) fn new(event: Event, payload_bytes: usize) -> Self {
        Sum {
            quantity: event.quantity,
            allocations: Vec::new(),
            by_tag_set: None,
            approx_bytes: payload_bytes,
            template: event,
        }
    }

    /// The first event (its group, second, producer id and kind are the sum's).
    pub(crate) fn template(&self) -> &Event {
        &self.template
    }

    /// The first event's id, taken out (the sum keeps its other fields).
    pub(crate) fn take_template_id(&mut self) -> String {
        std::mem::take(&mut self.template.event_id)
    }

    /// Gives the first event its id back.
    pub(crate) fn set_template_id(&mut self, id: String) {
        self.template.event_id = id;
    }

    /// The summed event: the template itself when nothing was `merged` into it, else with
    /// the summed quantity and allocations and the earliest timestamp.
    pub(crate) fn finish(self, merged: bool) -> Event {
        let mut event = self.template;
        if merged {
            event.quantity = self.quantity;
            if event.usage_allocations.is_some() {
                event.usage_allocations = Some(self.allocations);
            }
        }
        event
    }

    /// Merges `e`'s quantity, allocations and timestamp if the result stays within limits;
    /// leaves the sum untouched and returns false otherwise.
    pub(crate) fn try_absorb(&mut self, e: &Event) -> bool {
        let Some(quantity) = self.quantity.checked_add(e.quantity) else {
            return false;
        };
        if let Some(new_allocs) = &e.usage_allocations {
            if self.by_tag_set.is_none() {
                // Second event of the sum: index the first one's allocations.
                let mut index = TagIndex::default();
                let mut merged: Vec<UsageAllocation> = Vec::new();
                for a in self.template.usage_allocations.iter().flatten() {
                    merge_into(&mut merged, &mut index, a);
                }
                self.allocations = merged;
                self.by_tag_set = Some(index);
            }
            let index = self.by_tag_set.as_ref().expect("indexed above");
            let (mut added, mut added_bytes) = (0, 0);
            for a in new_allocs {
                if index.find(&self.allocations, a).is_none() {
                    added += 1;
                    added_bytes += allocation_bytes(a);
                }
            }
            if self.allocations.len() + added > MAX_ALLOCATIONS_PER_RECORD
                || self.approx_bytes + added_bytes > MAX_COLLAPSED_PAYLOAD_BYTES
            {
                return false;
            }
            let index = self.by_tag_set.as_mut().expect("indexed above");
            for a in new_allocs {
                merge_into(&mut self.allocations, index, a);
            }
            self.approx_bytes += added_bytes;
        }
        self.quantity = quantity;
        if e.timestamp < self.template.timestamp {
            self.template.timestamp = e.timestamp;
        }
        true
    }

    /// The summed quantity.
    pub(crate) fn quantity(&self) -> u64 {
        self.quantity
    }

    /// Takes what events without allocations made of the sum elsewhere (a bound group
    /// handle's slot, `crate::fold`): its whole `quantity`, and `earliest` if it is earlier.
    pub(crate) fn set_plain(&mut self, quantity: u64, earliest: DateTime<Utc>) {
        debug_assert!(self.template.usage_allocations.is_none());
        self.quantity = quantity;
        if earliest < self.template.timestamp {
            self.template.timestamp = earliest;
        }
    }

    /// [`Sum::try_absorb`] of an event without allocations: `quantity` at `timestamp`.
    pub(crate) fn try_absorb_plain(&mut self, quantity: u64, timestamp: DateTime<Utc>) -> bool {
        debug_assert!(self.template.usage_allocations.is_none());
        let Some(sum) = self.quantity.checked_add(quantity) else {
            return false;
        };
        self.quantity = sum;
        if timestamp < self.template.timestamp {
            self.template.timestamp = timestamp;
        }
        true
    }
}

fn merge_into(merged: &mut Vec<UsageAllocation>, index: &mut TagIndex, a: &UsageAllocation) {
    match index.find(merged, a) {
        // Allocations sum to their event's quantity, and the sum's quantity did not
        // overflow, so neither can any one tag set's sum.
        Some(i) => merged[i].allocated_usage_quantity += a.allocated_usage_quantity,
        None => {
            let hash = tag_set_hash(&a.tags);
            let i = merged.len();
            merged.push(a.clone());
            index
                .table
                .insert_unique(hash, i, |&j| tag_set_hash(&merged[j].tags));
        }
    }
}

/// UUID v5 over the sorted constituent ids, each length-prefixed so no two id lists encode alike.
pub fn collapsed_id(mut ids: Vec<String>) -> Uuid {
    ids.sort_unstable();
    let mut buf = Vec::with_capacity(ids.iter().map(|i| i.len() + 4).sum());
    for id in &ids {
        buf.extend_from_slice(&(id.len() as u32).to_be_bytes());
        buf.extend_from_slice(id.as_bytes());
    }
    Uuid::new_v5(&COLLAPSE_ID_NAMESPACE, &buf)
}

/// SHA-1 input is handed over in chunks of this size (a bucket may stand for millions of
/// generated ids).
const ID_CHUNK_BYTES: usize = 64 * 1024;

/// [`collapsed_id`] of the caller's `ids` and the generated ids `{prefix}{lane}:{seq}` for
/// each `seq` in `seqs` (`prefix` = `p:{epoch}:`, docs/row-contract.md, "Event ids") — the
/// same UUID, without a string per generated id: within one digit count the ids' string order
/// is their numeric order, so the sorted list is a merge of a few runs.
pub(crate) fn collapsed_id_with_generated(
    prefix: &str,
    lane: u8,
    seqs: std::ops::Range<u64>,
    ids: Vec<String>,
) -> Uuid {
    if !ids.is_empty() {
        // A window mixing the caller's ids and generated ones (rare): the definition itself.
        let mut all = ids;
        all.extend(seqs.map(|s| format!("{prefix}{lane}:{s}")));
        return collapsed_id(all);
    }
    let mut lane_digits = itoa::Buffer::new();
    let lane_digits = lane_digits.format(lane).as_bytes();
    let head = [prefix.as_bytes(), lane_digits, b":"].concat();
    let mut sha = Sha1::new();
    sha.update(COLLAPSE_ID_NAMESPACE.as_bytes());
    if let Some(run) = one_digit_count(&seqs) {
        hash_run(&mut sha, &head, run);
    } else {
        hash_merged(&mut sha, &head, seqs);
    }
    let digest = sha.finalize();
    let mut first = [0u8; 16];
    first.copy_from_slice(&digest[..16]);
    // What `Uuid::new_v5` does with its SHA-1: the first 16 bytes, version and variant set.
    uuid::Builder::from_sha1_bytes(first).into_uuid()
}

/// `seqs` when all its numbers have one decimal digit count (their string order is then
/// their numeric order): the common sum, whose sequences cross no power of ten.
fn one_digit_count(seqs: &std::ops::Range<u64>) -> Option<std::ops::Range<u64>> {
    let digits = |n: u64| n.checked_ilog10().unwrap_or(0);
    match seqs.end.checked_sub(1) {
        Some(last) if seqs.start <= last && digits(seqs.start) == digits(last) => {
            Some(seqs.clone())
        }
        _ => None,
    }
}

/// Hands SHA-1 the entries (length, `head`, digits) of the ids `{head}{n}` for each `n` of
/// `run`, whose numbers have one digit count, in numeric (= string) order. A chunk of
/// entries is laid out once — their lengths and heads are all alike — and only the digits
/// are written per id, counted up in decimal rather than formatted.
fn hash_run(sha: &mut Sha1, head: &[u8], run: std::ops::Range<u64>) {
    let mut first = itoa::Buffer::new();
    let mut digits = first.format(run.start).as_bytes().to_vec();
    let id_len = head.len() + digits.len();
    let entry_len = 4 + id_len;
    let ids = usize::try_from(run.end - run.start).unwrap_or(usize::MAX);
    let per_chunk = (ID_CHUNK_BYTES / entry_len).clamp(1, ids);
    let mut entry = Vec::with_capacity(entry_len);
    entry.extend_from_slice(&(id_len as u32).to_be_bytes());
    entry.extend_from_slice(head);
    entry.extend_from_slice(&digits);
    let mut buf = entry.repeat(per_chunk);
    let mut left = ids;
    while left > 0 {
        let n = left.min(per_chunk);
        for e in buf.chunks_exact_mut(entry_len).take(n) {
            e[4 + head.len()..].copy_from_slice(&digits);
            count_up(&mut digits);
        }
        sha.update(&buf[..n * entry_len]);
        left -= n;
    }
}

/// Adds one to the decimal number `digits` in place (a carry out of the first digit is
/// dropped: the caller stops before its run's numbers gain a digit).
fn count_up(digits: &mut [u8]) {
    for d in digits.iter_mut().rev() {
        if *d == b'9' {
            *d = b'0';
        } else {
            *d += 1;
            return;
        }
    }
}

/// [`hash_run`] for sequences of several digit counts: their ids merged into string order.
fn hash_merged(sha: &mut Sha1, head: &[u8], seqs: std::ops::Range<u64>) {
    // Sized for the ids (length, head, at most 20 digits each), up to one chunk: a small
    // sum does not take (and free) a chunk-sized buffer.
    let per_id = 4 + head.len() + 20;
    let ids_bytes =
        usize::try_from(seqs.end - seqs.start).map_or(usize::MAX, |n| n.saturating_mul(per_id));
    let mut buf = Vec::with_capacity(ids_bytes.min(ID_CHUNK_BYTES + 64));
    for_each_in_string_order(seqs, |digits| {
        buf.extend_from_slice(&((head.len() + digits.len()) as u32).to_be_bytes());
        buf.extend_from_slice(head);
        buf.extend_from_slice(digits);
        if buf.len() >= ID_CHUNK_BYTES {
            sha.update(&buf);
            buf.clear();
        }
    });
    sha.update(&buf);
}

/// Calls `f` with the decimal digits of every number of `range`, in string order.
fn for_each_in_string_order(range: std::ops::Range<u64>, mut f: impl FnMut(&[u8])) {
    // Runs of one digit count each: [1, 10), [10, 100), …
    let mut runs: Vec<std::ops::Range<u64>> = Vec::new();
    let mut start = range.start;
    while start < range.end {
        let end = 10u64
            .checked_pow(start.checked_ilog10().map_or(1, |d| d + 1))
            .map_or(range.end, |p| p.min(range.end));
        runs.push(start..end);
        start = end;
    }
    let mut bufs: Vec<itoa::Buffer> = runs.iter().map(|_| itoa::Buffer::new()).collect();
    if let [run] = &runs[..] {
        for n in run.clone() {
            f(bufs[0].format(n).as_bytes());
        }
        return;
    }
    loop {
        let mut best: Option<(usize, &[u8])> = None;
        for (i, (run, buf)) in runs.iter().zip(bufs.iter_mut()).enumerate() {
            if run.is_empty() {
                continue;
            }
            let s = buf.format(run.start).as_bytes();
            if best.is_none_or(|(_, b)| s < b) {
                best = Some((i, s));
            }
        }
        let Some((i, s)) = best else { return };
        f(s);
        runs[i].start += 1;
    }
}
