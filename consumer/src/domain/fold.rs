//! The per-(group, UTC second) fold of one batch.
//!
//! Quantities and allocations are summed per row in memory, but kept apart per stream record
//! (a [`Part`]): the write decision compares each part's sequence number with the row's
//! watermark, so a replayed batch — whole, bisected, or resumed from a checkpoint — adds
//! exactly the parts not yet applied.
//!
//! ```
//! use awsmp_consumer::domain::accepted::{Accepted, EventId};
//! use awsmp_consumer::domain::intern::Interner;
//! use awsmp_consumer::domain::fold::BatchFold;
//! let mut names = Interner::new();
//! let mut ev = |q| Accepted {
//!     group: names.group(
//!         "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef",
//!         "210987654321", "api"),
//!     second: 1_800_000_000, quantity: q, allocations: None, event_id: EventId::parse("e"),
//!     producer_id: None,
//! };
//! let mut fold = BatchFold::new();
//! fold.add(0, 0, ev(2));
//! fold.add(0, 1, ev(3));
//! fold.add(1, 0, ev(4));
//! let rows = fold.into_rows();
//! assert_eq!(rows.len(), 1);
//! let row = rows.get(0).unwrap();
//! assert_eq!(row.parts.len(), 2, "one part per stream record");
//! assert_eq!(row.quantity(), 9);
//! ```

use std::collections::BTreeMap;
use std::ops::Deref;
use std::sync::Arc;

use awsmp_contract::keys::{GroupKey, HourBucket, RowKey, format_usage_timestamp};
use awsmp_contract::row::Tag;
use chrono::{DateTime, TimeZone, Utc};
use hashbrown::HashTable;

use super::accepted::Accepted;
use super::intern::{Group, GroupName};
use super::verify::Kind;

/// One usage row: (license, account, dimension, UTC second). The group's name is the batch's
/// interned one (no copy per row); its fields read through the row id (`id.license_arn()`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RowId {
    /// License ARN, account id, dimension.
    pub group: Group,
    /// Epoch second.
    pub second: i64,
}

impl Deref for RowId {
    type Target = GroupName;
    fn deref(&self) -> &GroupName {
        &self.group
    }
}

impl RowId {
    /// The row's second as an instant.
    pub fn instant(&self) -> DateTime<Utc> {
        Utc.timestamp_opt(self.second, 0)
            .single()
            .unwrap_or(DateTime::<Utc>::MIN_UTC)
    }

    /// The row's UTC hour (its `meteringPending`).
    pub fn hour(&self) -> HourBucket {
        HourBucket::containing(self.instant())
    }

    /// `YYYY-MM-DDTHH:MM:SS`.
    pub fn timestamp(&self) -> String {
        format_usage_timestamp(self.instant())
    }

    /// The group-hour the row belongs to.
    pub fn group(&self) -> GroupKey {
        GroupKey::new(
            self.license_arn(),
            self.customer_aws_account_id(),
            self.dimension(),
            self.hour(),
        )
    }

    /// The row's primary key.
    pub fn key(&self) -> RowKey {
        RowKey {
            license_arn: self.license_arn().to_owned(),
            sort_key: format!(
                "{}#{}#{}",
                self.customer_aws_account_id(),
                self.dimension(),
                self.timestamp()
            ),
        }
    }
}

/// What one stream record contributes to one row.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Part {
    /// Index of the stream record in the batch.
    pub record: u32,
    /// Sum of non-zero unallocated events.
    pub unallocated: u64,
    /// Allocated events merged by tag set; `None` until the part's first allocated event (an
    /// unallocated part, the usual one, has no map to drop).
    pub allocated: Option<BTreeMap<Vec<Tag>, u64>>,
    /// Sum of allocated events.
    pub allocated_total: u64,
    /// Kind of the first non-zero event (decides which kind wins on a fresh row).
    pub first_kind: Option<Kind>,
    /// Positions (sub-sequence numbers) of the events in the record.
    pub subs: Subs,
}

/// A part's sub-sequence numbers, in the order its events were added: a run of consecutive
/// numbers is kept as its start and length (no allocation: one event, or a record whose events
/// of one row are adjacent); any other list spills into a `Vec` the first time it breaks the run.
#[derive(Debug, Clone, Eq)]
pub enum Subs {
    /// `start, start + 1, …, start + len - 1`.
    Run {
        /// The first number.
        start: u32,
        /// How many.
        len: u32,
    },
    /// Any other list.
    List(Vec<u32>),
}

impl Default for Subs {
    fn default() -> Self {
        Self::Run { start: 0, len: 0 }
    }
}

impl Subs {
    /// Append `sub`.
    pub fn push(&mut self, sub: u32) {
        match self {
            Self::Run {
                len: len @ 0,
                start,
            } => {
                *start = sub;
                *len = 1;
            }
            Self::Run { start, len } if start.checked_add(*len) == Some(sub) => *len += 1,
            Self::Run { start, len } => {
                let (start, len) = (*start, *len);
                let mut list: Vec<u32> = (0..len).map(|k| start + k).collect();
                list.push(sub);
                *self = Self::List(list);
            }
            Self::List(list) => list.push(sub),
        }
    }

    /// How many numbers.
    pub fn len(&self) -> usize {
        match self {
            Self::Run { len, .. } => *len as usize,
            Self::List(list) => list.len(),
        }
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The numbers in order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        let (start, run, list) = match self {
            Self::Run { start, len } => (*start, *len, &[][..]),
            Self::List(list) => (0, 0, &list[..]),
        };
        // `start + k` < `start + len`, which `push` kept within u32.
        (0..run).map(move |k| start + k).chain(list.iter().copied())
    }

    /// The numbers as a list.
    pub fn to_vec(&self) -> Vec<u32> {
        self.iter().collect()
    }
}

/// Equal when they list the same numbers, however each keeps them.
impl PartialEq for Subs {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Part {
    /// Total quantity.
    pub fn quantity(&self) -> u64 {
        self.unallocated + self.allocated_total
    }

    /// The allocated quantities by tag set (none for an unallocated part).
    pub fn allocations(&self) -> impl Iterator<Item = (&Vec<Tag>, &u64)> {
        self.allocated.iter().flatten()
    }

    fn add(&mut self, sub: u32, quantity: u64, allocations: Option<BTreeMap<Vec<Tag>, u64>>) {
        self.subs.push(sub);
        if self.first_kind.is_none() && quantity > 0 {
            self.first_kind = Some(if allocations.is_some() {
                Kind::Allocated
            } else {
                Kind::Unallocated
            });
        }
        // Quantities are ≤ 2^31 each and a batch holds far fewer than 2^32 events: u64 cannot overflow.
        match allocations {
            Some(allocs) => {
                self.allocated_total += quantity;
                let merged = self.allocated.get_or_insert_default();
                for (tags, q) in allocs {
                    *merged.entry(tags).or_default() += q;
                }
            }
            None => self.unallocated += quantity,
        }
    }
}

/// Everything a batch contributes to one row, one part per stream record, in record order: a
/// view into the batch's [`FoldedRows`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowContribution<'a> {
    /// The row.
    pub id: &'a RowId,
    /// Parts in record order.
    pub parts: PartList<'a>,
}

impl RowContribution<'_> {
    /// Total quantity of every part.
    pub fn quantity(&self) -> u64 {
        self.parts.iter().map(Part::quantity).sum()
    }

    /// Number of events.
    pub fn events(&self) -> usize {
        self.parts.iter().map(|p| p.subs.len()).sum()
    }

    /// Lowest record index among the parts (the failure point if the row cannot be written).
    pub fn first_record(&self) -> u32 {
        self.parts.iter().map(|p| p.record).min().unwrap_or(0)
    }
}

/// One row's parts, in record order, read from the batch-wide part list by index: indexed
/// (`parts[i]`) and iterated like a slice of [`Part`]s.
#[derive(Clone, Copy)]
pub struct PartList<'a> {
    all: &'a [(u32, Part)],
    order: &'a [u32],
}

impl<'a> PartList<'a> {
    /// How many parts.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// True for a row without parts (a fold never makes one).
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The parts, in record order.
    pub fn iter(&self) -> Parts<'a> {
        Parts {
            all: self.all,
            order: self.order.iter(),
        }
    }
}

impl std::ops::Index<usize> for PartList<'_> {
    type Output = Part;
    fn index(&self, i: usize) -> &Part {
        &self.all[self.order[i] as usize].1
    }
}

impl<'a> IntoIterator for &PartList<'a> {
    type Item = &'a Part;
    type IntoIter = Parts<'a>;
    fn into_iter(self) -> Parts<'a> {
        self.iter()
    }
}

/// The parts of a [`PartList`], in record order.
#[derive(Clone)]
pub struct Parts<'a> {
    all: &'a [(u32, Part)],
    order: std::slice::Iter<'a, u32>,
}

impl<'a> Iterator for Parts<'a> {
    type Item = &'a Part;
    fn next(&mut self) -> Option<&'a Part> {
        self.order.next().map(|&i| &self.all[i as usize].1)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.order.size_hint()
    }
}

impl ExactSizeIterator for Parts<'_> {}

impl PartialEq for PartList<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for PartList<'_> {}

impl std::fmt::Debug for PartList<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// The rows of one folded batch, in first-seen order. Every part stays where the fold put it,
/// in one batch-wide list; each row reads its own through a run of indexes (a counting sort of
/// the parts by row), so making the rows allocates nothing per row. Dropped, the part list goes
/// back to the thread's kept tables ([`BatchFold::for_events`]).
#[derive(Default)]
pub struct FoldedRows {
    rows: Vec<RowSpan>,
    parts: Vec<(u32, Part)>,
    order: Vec<u32>,
}

/// A row of [`FoldedRows`]: its id and its run of `order`.
struct RowSpan {
    id: RowId,
    start: u32,
    len: u32,
}

impl FoldedRows {
    /// How many rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// True when the batch folded no event.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Row `i`.
    pub fn get(&self, i: usize) -> Option<RowContribution<'_>> {
        self.rows.get(i).map(|r| self.view(r))
    }

    /// The rows, in first-seen order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = RowContribution<'_>> + Clone {
        self.rows.iter().map(|r| self.view(r))
    }

    fn view<'a>(&'a self, r: &'a RowSpan) -> RowContribution<'a> {
        let run = r.start as usize..(r.start + r.len) as usize;
        RowContribution {
            id: &r.id,
            parts: PartList {
                all: &self.parts,
                order: &self.order[run],
            },
        }
    }
}

impl PartialEq for FoldedRows {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for FoldedRows {}

impl std::fmt::Debug for FoldedRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Drop for FoldedRows {
    fn drop(&mut self) {
        let mut parts = std::mem::take(&mut self.parts);
        parts.clear();
        if !keepable(parts.capacity()) {
            return;
        }
        KEPT.with_borrow_mut(|kept| {
            if let Some(kept) = kept
                && kept.parts.capacity() < parts.capacity()
            {
                kept.parts = parts;
            }
        });
    }
}

/// The in-memory fold of one batch: one [`RowContribution`] per distinct (group, second), so
/// the batch writes each row once (write amplification 1). Keyed by the interned group and
/// the second: a lookup hashes two integers (the group's hash is computed when it is
/// interned) and compares pointers, never the strings, unless two interners made the names.
/// The parts are kept in one batch-wide list while folding (a row points at its latest), and
/// stay there in the [`FoldedRows`] of [`BatchFold::into_rows`].
#[derive(Debug, Default)]
pub struct BatchFold {
    index: HashTable<u32>,
    rows: Vec<Row>,
    /// Every part, in the order they were opened, with its row's index.
    parts: Vec<(u32, Part)>,
}

/// A row while folding.
#[derive(Debug)]
struct Row {
    id: RowId,
    hash: u64,
    /// Index in [`BatchFold::parts`] of its latest part.
    last: u32,
    /// How many parts it has.
    parts: u32,
}

/// The most rows [`BatchFold::for_events`] reserves room for (about 3 MB); a batch with more
/// rows grows its table as it goes.
pub const MAX_PRESIZED_ROWS: usize = 1 << 16;

/// A table of `capacity` is kept for the thread's next fold: no larger than what a fold
/// presizes (a rare huge batch's memory is not held).
fn keepable(capacity: usize) -> bool {
    capacity <= MAX_PRESIZED_ROWS
}

/// The hash of row (`group`, `second`).
fn row_hash(group: &Group, second: i64) -> u64 {
    // A 64-bit odd constant (2^64 / the golden ratio) spreads the second over every bit.
    group.hash64() ^ (second as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// A row or part index: a batch holds far fewer than 2^32 events (Lambda's 6 MB payload).
fn index(n: usize) -> u32 {
    u32::try_from(n).expect("fewer than 2^32 rows and parts in one batch")
}

impl BatchFold {
    /// An empty fold.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty fold sized for a batch of `events` events: room for as many rows and parts
    /// (at most [`MAX_PRESIZED_ROWS`]), so the fold of a usual batch never grows its tables.
    ///
    /// The tables are this thread's kept ones when it has some (the last fold's, emptied by
    /// [`BatchFold::into_rows`]): a warm process — a Lambda instance between invocations —
    /// writes its batches into memory it has already touched instead of faulting fresh pages
    /// in for every batch (the allocator hands tables this large back to the system when they
    /// are freed).
    pub fn for_events(events: usize) -> Self {
        let rows = events.min(MAX_PRESIZED_ROWS);
        let mut fold = KEPT.with_borrow_mut(Option::take).unwrap_or_default();
        if fold.index.capacity() < rows {
            // Kept tables are empty: nothing to move into the larger one.
            fold.index = HashTable::with_capacity(rows);
        }
        fold.rows.reserve(rows);
        fold.parts.reserve(rows);
        fold
    }

    /// Add event `ev` found at position `sub` of record `record`. Records must be added in
    /// batch order.
    pub fn add(&mut self, record: u32, sub: u32, ev: Accepted) {
        let Accepted {
            group,
            second,
            quantity,
            allocations,
            ..
        } = ev;
        let hash = row_hash(&group, second);
        let rows = &self.rows;
        let same = |ix: &u32| {
            let row = &rows[*ix as usize];
            row.hash == hash
                && row.id.second == second
                && (Arc::ptr_eq(&row.id.group, &group) || *row.id.group == *group)
        };
        let (ix, open) = match self.index.find(hash, same) {
            Some(ix) => {
                let ix = *ix as usize;
                let last = self.rows[ix].last as usize;
                (ix, self.parts[last].1.record != record)
            }
            None => {
                let ix = self.rows.len();
                self.index
                    .insert_unique(hash, index(ix), |i| rows[*i as usize].hash);
                self.rows.push(Row {
                    id: RowId { group, second },
                    hash,
                    last: 0,
                    parts: 0,
                });
                (ix, true)
            }
        };
        if open {
            let row = &mut self.rows[ix];
            row.last = index(self.parts.len());
            row.parts += 1;
            let part = Part {
                record,
                ..Part::default()
            };
            self.parts.push((index(ix), part));
        }
        let last = self.rows[ix].last as usize;
        self.parts[last].1.add(sub, quantity, allocations);
    }

    /// Distinct rows so far.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// True when nothing was added.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The rows, in first-seen order, each with its parts in record order.
    pub fn into_rows(mut self) -> FoldedRows {
        // Each row's run of indexes starts where the runs of the rows before it end.
        let mut start = 0;
        let mut rows: Vec<RowSpan> = Vec::with_capacity(self.rows.len());
        for r in self.rows.drain(..) {
            rows.push(RowSpan {
                id: r.id,
                start,
                len: 0,
            });
            start += r.parts;
        }
        // Opened in batch order, so each row's parts arrive in record order.
        let mut order = vec![0; self.parts.len()];
        for (i, (row, _)) in self.parts.iter().enumerate() {
            let span = &mut rows[*row as usize];
            order[(span.start + span.len) as usize] = index(i);
            span.len += 1;
        }
        let parts = std::mem::take(&mut self.parts);
        self.keep();
        FoldedRows { rows, parts, order }
    }

    /// Drops this thread's kept tables (their memory back to the allocator): the next fold
    /// starts on fresh ones, as a new process's first batch does.
    pub fn release_kept() {
        KEPT.with_borrow_mut(|kept| *kept = None);
    }

    /// Keeps this fold's tables, emptied, for the thread's next [`BatchFold::for_events`],
    /// unless they outgrew what it presizes (a rare huge batch's memory is not held).
    fn keep(mut self) {
        self.index.clear();
        if keepable(self.rows.capacity()) && keepable(self.parts.capacity()) {
            KEPT.with_borrow_mut(|kept| *kept = Some(self));
        }
    }
}

thread_local! {
    /// The tables of this thread's last fold, emptied ([`BatchFold::for_events`]).
    static KEPT: std::cell::RefCell<Option<BatchFold>> = const { std::cell::RefCell::new(None) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Events of `groups` groups over a few seconds and records, some with allocations.
    fn batch(
        n: u32,
        groups: u32,
        seed: u32,
    ) -> Vec<(u32, u32, crate::domain::verify::VerifiedEvent)> {
        (0..n)
            .map(|i| {
                let g = (i * 7 + seed) % groups;
                let q = u64::from(1 + (i * 13 + seed) % 50);
                let ev = crate::domain::verify::VerifiedEvent {
                    license_arn: format!(
                        "arn:aws:license-manager::123456789012:license:l-{g:032x}"
                    ),
                    customer_aws_account_id: "210987654321".into(),
                    dimension: ["api", "seats"][(g % 2) as usize].into(),
                    second: 1_796_040_000 + i64::from((i + seed) % 4),
                    quantity: q,
                    allocations: g
                        .is_multiple_of(5)
                        .then(|| BTreeMap::from([(vec![Tag::new("team", "a")], q)])),
                    event_id: format!("e{i}"),
                    producer_id: None,
                };
                (i / 10, i % 10, ev)
            })
            .collect()
    }

    fn fold(
        mut f: BatchFold,
        events: &[(u32, u32, crate::domain::verify::VerifiedEvent)],
    ) -> FoldedRows {
        let mut names = crate::domain::intern::Interner::new();
        for (record, sub, e) in events {
            f.add(
                *record,
                *sub,
                crate::domain::record::accepted(e.clone(), &mut names),
            );
        }
        f.into_rows()
    }

    /// A fold into the tables this thread kept from its last fold gives the rows a fold into
    /// fresh tables gives, and writes into the kept tables' memory.
    #[test]
    fn a_fold_into_kept_tables_gives_what_a_fresh_fold_gives() {
        let (a, b) = (batch(3_000, 40, 1), batch(2_000, 70, 2));
        let first = BatchFold::for_events(a.len());
        let tables = first.rows.as_ptr();
        let rows_a = fold(first, &a);
        let second = BatchFold::for_events(b.len());
        assert!(second.rows.is_empty() && second.parts.is_empty() && second.index.is_empty());
        assert_eq!(
            second.rows.as_ptr(),
            tables,
            "the first fold's tables, kept"
        );
        let rows_b = fold(second, &b);
        assert_eq!(rows_a, fold(BatchFold::new(), &a));
        assert_eq!(rows_b, fold(BatchFold::new(), &b));
        assert!(!rows_b.is_empty());
    }

    /// Dropped rows hand their part list back to the thread's kept tables: the next fold's
    /// parts go into that memory, with no fresh allocation.
    #[test]
    fn the_part_list_goes_back_to_the_kept_tables_when_the_rows_are_dropped() {
        let a = batch(2_000, 30, 3);
        BatchFold::release_kept();
        let rows = fold(BatchFold::for_events(a.len()), &a);
        let kept = || KEPT.with_borrow(|k| k.as_ref().map(|f| f.parts.capacity()));
        assert_eq!(kept(), Some(0), "the rows hold the part list");
        let parts = rows.parts.as_ptr();
        drop(rows);
        assert!(kept().is_some_and(|c| c >= a.len()), "{:?}", kept());
        let second = BatchFold::for_events(a.len());
        assert!(second.parts.is_empty());
        assert_eq!(second.parts.as_ptr(), parts, "the rows' part list, kept");
        BatchFold::release_kept();
    }

    /// A row as a plain model keeps it: its id, and per part its record, sub-sequence numbers
    /// and quantity.
    type ModelRow = ((String, i64), Vec<(u32, Vec<u32>, u64)>);

    /// The fold as plain lists: rows in first-seen order, each row's parts in record order.
    fn model(events: &[(u32, u32, u8, i64, u64)]) -> Vec<ModelRow> {
        let mut rows: Vec<ModelRow> = Vec::new();
        for &(record, sub, group, second, q) in events {
            let id = (format!("l-{group:032x}"), second);
            let ix = match rows.iter().position(|r| r.0 == id) {
                Some(ix) => ix,
                None => {
                    rows.push((id, Vec::new()));
                    rows.len() - 1
                }
            };
            let parts = &mut rows[ix].1;
            match parts.last_mut() {
                Some(p) if p.0 == record => {
                    p.1.push(sub);
                    p.2 += q;
                }
                _ => parts.push((record, vec![sub], q)),
            }
        }
        rows
    }

    proptest::proptest! {
        /// Every row reads back exactly its own parts, in record order, whether through the
        /// part list's iterator or its index: the rows the fold makes are the model's.
        #[test]
        fn each_row_reads_its_own_parts_in_record_order(
            mut events in proptest::collection::vec(
                (0u32..6, 0u32..40, 0u8..5, 0i64..3, 0u64..100), 0..120)
        ) {
            events.sort_by_key(|e| e.0);
            let mut names = crate::domain::intern::Interner::new();
            let mut f = BatchFold::new();
            for &(record, sub, group, second, quantity) in &events {
                let group = names.group(
                    &format!("arn:aws:license-manager::123456789012:license:l-{group:032x}"),
                    "210987654321",
                    "api",
                );
                f.add(record, sub, Accepted {
                    group,
                    second: 1_796_040_000 + second,
                    quantity,
                    allocations: None,
                    event_id: super::super::accepted::EventId::parse("e"),
                    producer_id: None,
                });
            }
            let rows = f.into_rows();
            let got: Vec<ModelRow> = rows
                .iter()
                .map(|r| {
                    let license = r.id.license_arn().rsplit(':').next().unwrap().to_owned();
                    let parts: Vec<_> = r
                        .parts
                        .iter()
                        .map(|p| (p.record, p.subs.to_vec(), p.quantity()))
                        .collect();
                    for (i, p) in r.parts.iter().enumerate() {
                        assert_eq!(&r.parts[i], p, "index and iterator agree");
                    }
                    assert_eq!(r.parts.iter().len(), r.parts.len());
                    ((license, r.id.second - 1_796_040_000), parts)
                })
                .collect();
            proptest::prop_assert_eq!(got, model(&events));
            proptest::prop_assert!(rows.get(rows.len()).is_none());
            proptest::prop_assert_eq!(rows.iter().len(), rows.len());
        }
    }

    fn subs(of: &[u32]) -> Subs {
        let mut s = Subs::default();
        for &n in of {
            s.push(n);
        }
        s
    }

    #[test]
    fn consecutive_sub_sequence_numbers_stay_a_run_and_any_other_list_is_kept_as_given() {
        assert!(subs(&[]).is_empty());
        assert_eq!(subs(&[7]), Subs::Run { start: 7, len: 1 });
        assert_eq!(subs(&[3, 4, 5]), Subs::Run { start: 3, len: 3 });
        for list in [&[3, 4, 9][..], &[0, 0], &[5, 4], &[2, 3, 4, 1, 2]] {
            let s = subs(list);
            assert!(matches!(s, Subs::List(_)), "{list:?}");
            assert_eq!(s.to_vec(), list);
            assert_eq!(s.len(), list.len());
        }
        // Equal when they list the same numbers, however each keeps them.
        assert_eq!(subs(&[1, 2]), Subs::List(vec![1, 2]));
        assert_ne!(subs(&[1, 2]), Subs::List(vec![1, 3]));
        assert_ne!(subs(&[1, 2]), subs(&[1]));
        let top = subs(&[u32::MAX]);
        assert_eq!(top.to_vec(), [u32::MAX]);
        assert_eq!(subs(&[u32::MAX, 0]).to_vec(), [u32::MAX, 0]);
    }
}
