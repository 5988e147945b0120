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
//! assert_eq!(rows[0].parts.len(), 2, "one part per stream record");
//! assert_eq!(rows[0].quantity(), 9);
//! ```

use std::collections::BTreeMap;
use std::ops::Deref;
use std::sync::Arc;

use awsmp_pipeline::domain::keys::{GroupKey, HourBucket, RowKey, format_usage_timestamp};
use awsmp_pipeline::domain::row::Tag;
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

/// Everything a batch contributes to one row, one part per stream record, in record order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowContribution {
    /// The row.
    pub id: RowId,
    /// Parts in record order.
    pub parts: Vec<Part>,
}

impl RowContribution {
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

/// The in-memory fold of one batch: one [`RowContribution`] per distinct (group, second), so
/// the batch writes each row once (write amplification 1). Keyed by the interned group and
/// the second: a lookup hashes two integers (the group's hash is computed when it is
/// interned) and compares pointers, never the strings, unless two interners made the names.
/// The parts are kept in one batch-wide list while folding (a row points at its latest), and
/// each row's list is allocated once, at its exact length, by [`BatchFold::into_rows`].
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
    pub fn into_rows(mut self) -> Vec<RowContribution> {
        let mut out: Vec<RowContribution> = self
            .rows
            .drain(..)
            .map(|r| RowContribution {
                id: r.id,
                parts: Vec::with_capacity(r.parts as usize),
            })
            .collect();
        // Opened in batch order, so each row's parts arrive in record order.
        for (row, part) in self.parts.drain(..) {
            out[row as usize].parts.push(part);
        }
        self.keep();
        out
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
        if self.rows.capacity() <= MAX_PRESIZED_ROWS && self.parts.capacity() <= MAX_PRESIZED_ROWS {
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
    ) -> Vec<RowContribution> {
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
