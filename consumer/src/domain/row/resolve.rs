//! The write decision for one row: which parts it already holds, which are refused, and the
//! conditional write for the rest.

use std::collections::BTreeMap;

use awsmp_contract::limits::marketplace::{MAX_ALLOCATIONS_PER_RECORD, MAX_USAGE_QUANTITY};
use awsmp_contract::reasons;
use awsmp_contract::row::{Allocation, Tag};

use crate::domain::fold::{Part, RowContribution};
use crate::domain::seq::{Lane, SeqNum};
use crate::domain::verify::Kind;

use super::coverage::{Coverage, Proof};
use super::state::RowState;
use super::write::{Change, Guard, SpanWrite};

/// Where a part of a row is ordered: its record's lane and sequence number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMeta {
    /// Lane.
    pub lane: Lane,
    /// Sequence number.
    pub seq: SeqNum,
}

/// What is known of the stored row.
#[derive(Debug, Clone, Copy)]
pub enum Observation<'a> {
    /// Nothing read yet.
    Unknown,
    /// Read: no such row.
    Absent,
    /// Read: the row.
    Present(&'a RowState),
}

pub use awsmp_contract::limits::dynamodb::MAX_ITEM_BYTES;

/// The most a row's `usageAllocations` may take: [`MAX_ITEM_BYTES`] less 16 KiB for the row's
/// other attributes (its keys — the sort key at most 1,024 bytes — the audit stamps and a
/// watermark of about 100 bytes per lane). Our bound: a row past the item limit could never
/// be written, and its batch would fail on every retry.
pub const MAX_ROW_ALLOCATION_BYTES: usize = MAX_ITEM_BYTES - 16 * 1024;

/// An upper estimate of the bytes one allocation of `tags` adds to a row, by DynamoDB's item
/// size rules (names and strings by their UTF-8 length, a number at most 21 bytes, a list or
/// map 3 bytes plus 1 per element:
/// <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html>).
pub fn allocation_bytes(tags: &[Tag]) -> usize {
    // The allocation's map (3 + 1 as an element), `AllocatedUsageQuantity` and its number,
    // `Tags` and its list.
    let fixed = 4 + "AllocatedUsageQuantity".len() + 21 + "Tags".len() + 3;
    // Each tag: its map (3 + 1), `Key` and `Value` with their strings.
    fixed
        + tags
            .iter()
            .map(|t| 4 + "Key".len() + t.key.len() + "Value".len() + t.value.len())
            .sum::<usize>()
}

/// Row-level limits (the aggregator's guardrails; tests may shrink them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowLimits {
    /// Largest row quantity (BatchMeterUsage maximum).
    pub max_quantity: u64,
    /// Most distinct tag sets in one row.
    pub max_allocations: usize,
    /// Most bytes of a row's allocations ([`allocation_bytes`] summed).
    pub max_allocation_bytes: usize,
}

impl Default for RowLimits {
    fn default() -> Self {
        Self {
            max_quantity: MAX_USAGE_QUANTITY,
            max_allocations: MAX_ALLOCATIONS_PER_RECORD,
            max_allocation_bytes: MAX_ROW_ALLOCATION_BYTES,
        }
    }
}

/// A part (or one kind of usage inside it) that is not written to the row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartRejection {
    /// Index into the contribution's parts.
    pub part: usize,
    /// Reason code.
    pub reason: &'static str,
    /// Quantity not written.
    pub quantity: u64,
    /// Which kind of usage (for a part that mixes both); `None` = the whole part.
    pub kind: Option<Kind>,
}

/// A decided write: its guard, its change, the new watermark per lane and the new spans per
/// lane.
pub type WritePlan = (Guard, Change, Vec<(Lane, SeqNum)>, Vec<(Lane, SpanWrite)>);

/// The write decision for one row.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Decision {
    /// Parts the row already holds (a replay).
    pub applied: Vec<usize>,
    /// Parts (or kinds of usage in them) recorded instead of written.
    pub rejected: Vec<PartRejection>,
    /// Quantity this decision adds to the row.
    pub accepted_quantity: u64,
    /// Parts added although their lane's watermark had passed them: records the mapping
    /// skipped (a batch discarded to the on-failure destination) and a re-drive delivered.
    pub behind_watermark: u64,
    /// The conditional write, if any.
    pub write: Option<WritePlan>,
}

/// The result of [`resolve`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolve {
    /// The optimistic write is not safe (the decision depends on the stored row): read it.
    NeedsRead,
    /// Decided.
    Decided(Decision),
}

fn lane_bounds<'a>(
    parts: impl Iterator<Item = &'a Part>,
    records: &[RecordMeta],
) -> BTreeMap<Lane, (SeqNum, SeqNum)> {
    let mut out: BTreeMap<Lane, (SeqNum, SeqNum)> = BTreeMap::new();
    for p in parts {
        let m = &records[p.record as usize];
        out.entry(m.lane.clone())
            .and_modify(|(lo, hi)| {
                if m.seq < *lo {
                    *lo = m.seq.clone();
                }
                if m.seq > *hi {
                    *hi = m.seq.clone();
                }
            })
            .or_insert_with(|| (m.seq.clone(), m.seq.clone()));
    }
    out
}

fn to_allocations(m: BTreeMap<Vec<Tag>, u64>) -> Vec<Allocation> {
    m.into_iter()
        .map(|(tags, quantity)| Allocation { quantity, tags })
        .collect()
}

/// Decide how `row`'s parts reach the stored row. `records` gives each part's lane and
/// sequence number; `finalized` says the group-hour already has an aggregated record.
pub fn resolve(
    row: &RowContribution,
    records: &[RecordMeta],
    observed: Observation<'_>,
    finalized: bool,
    limits: RowLimits,
) -> Resolve {
    match observed {
        Observation::Unknown => optimistic(row, records, finalized, limits),
        Observation::Absent => Resolve::Decided(decide(
            row,
            records,
            &RowState {
                pending: true,
                ..RowState::default()
            },
            false,
            finalized,
            limits,
        )),
        Observation::Present(st) => {
            Resolve::Decided(decide(row, records, st, true, finalized, limits))
        }
    }
}

fn optimistic(
    row: &RowContribution,
    records: &[RecordMeta],
    finalized: bool,
    limits: RowLimits,
) -> Resolve {
    if finalized {
        return Resolve::NeedsRead;
    }
    let kinds: Vec<Kind> = row
        .parts
        .iter()
        .flat_map(|p| {
            [
                (p.unallocated > 0).then_some(Kind::Unallocated),
                (p.allocated_total > 0).then_some(Kind::Allocated),
            ]
        })
        .flatten()
        .collect();
    let mixed = kinds.windows(2).any(|w| w[0] != w[1]);
    let total = row.quantity();
    if mixed || total > limits.max_quantity {
        return Resolve::NeedsRead;
    }
    let bounds = lane_bounds(row.parts.iter(), records);
    let watermarks = bounds
        .iter()
        .map(|(l, (_, hi))| (l.clone(), hi.clone()))
        .collect();
    let span = |append: bool| -> Vec<(Lane, SpanWrite)> {
        bounds
            .iter()
            .map(|(l, (lo, hi))| {
                let item = Coverage::span_item(lo, hi);
                let w = if append {
                    SpanWrite::Append(item)
                } else {
                    SpanWrite::Replace(vec![item])
                };
                (l.clone(), w)
            })
            .collect()
    };
    if kinds.first() == Some(&Kind::Allocated) {
        let mut merged: BTreeMap<Vec<Tag>, u64> = BTreeMap::new();
        for p in &row.parts {
            for (t, q) in p.allocations() {
                *merged.entry(t.clone()).or_default() += q;
            }
        }
        let bytes: usize = merged.keys().map(|t| allocation_bytes(t)).sum();
        if merged.len() > limits.max_allocations || bytes > limits.max_allocation_bytes {
            return Resolve::NeedsRead;
        }
        return Resolve::Decided(Decision {
            accepted_quantity: total,
            write: Some((
                Guard::Absent,
                Change::Set {
                    quantity: total,
                    allocations: Some(to_allocations(merged)),
                },
                watermarks,
                span(false),
            )),
            ..Decision::default()
        });
    }
    let spans = span(true);
    Resolve::Decided(Decision {
        accepted_quantity: total,
        write: Some((
            Guard::Fresh {
                lanes: bounds.into_iter().map(|(l, (lo, _))| (l, lo)).collect(),
                max_quantity_before: limits.max_quantity - total,
                require_unallocated: total > 0,
            },
            Change::Add(total),
            watermarks,
            spans,
        )),
        ..Decision::default()
    })
}

fn decide(
    row: &RowContribution,
    records: &[RecordMeta],
    st: &RowState,
    present: bool,
    finalized: bool,
    limits: RowLimits,
) -> Decision {
    let mut d = Decision::default();
    let mut pending = Vec::new();
    for (i, p) in row.parts.iter().enumerate() {
        let m = &records[p.record as usize];
        match st.proof(&m.lane, &m.seq) {
            Proof::Applied => d.applied.push(i),
            Proof::NotApplied => pending.push(i),
            // Recorded, never guessed: neither skipped as held nor added a second time.
            Proof::Unknown => d.rejected.push(PartRejection {
                part: i,
                reason: reasons::REDRIVE_UNPROVEN,
                quantity: p.quantity(),
                kind: None,
            }),
        }
    }
    if pending.is_empty() {
        return d;
    }
    let whole_row_reason = if finalized || (present && !st.pending) {
        Some(reasons::LATE_USAGE)
    } else if present && st.malformed.is_some() {
        Some(reasons::EXISTING_ROW_MALFORMED)
    } else {
        None
    };
    if let Some(reason) = whole_row_reason {
        d.rejected.extend(pending.iter().map(|&i| PartRejection {
            part: i,
            reason,
            quantity: row.parts[i].quantity(),
            kind: None,
        }));
        return d;
    }
    let merged = st.allocations.clone().unwrap_or_default();
    let mut acc = RowAccumulator {
        kind: st.kind(),
        quantity: st.quantity,
        bytes: merged.keys().map(|t| allocation_bytes(t)).sum(),
        merged,
        any_written: false,
    };
    for &i in &pending {
        acc.add_part(i, &row.parts[i], limits, &mut d);
    }
    d.behind_watermark = pending
        .iter()
        .filter(|&&i| {
            let m = &records[row.parts[i].record as usize];
            st.watermarks.get(&m.lane).is_some_and(|wm| *wm >= m.seq)
        })
        .count() as u64;
    if acc.any_written {
        // Every part of the lane is now held or recorded, so the span runs from the lowest to
        // the highest of them; the watermark never moves back (a re-drive lies below it).
        let (watermarks, spans) = lane_bounds(row.parts.iter(), records)
            .into_iter()
            .map(|(l, (lo, hi))| {
                let wm = st.watermarks.get(&l).filter(|w| **w > hi).unwrap_or(&hi);
                let mut c = st.coverage.get(&l).cloned().unwrap_or_default();
                c.add(&lo, &hi);
                ((l.clone(), wm.clone()), (l, SpanWrite::Replace(c.encode())))
            })
            .unzip();
        let guard = if present {
            Guard::Version(st.version)
        } else {
            Guard::Absent
        };
        let allocations = (acc.kind == Some(Kind::Allocated)).then(|| to_allocations(acc.merged));
        d.write = Some((
            guard,
            Change::Set {
                quantity: acc.quantity,
                allocations,
            },
            watermarks,
            spans,
        ));
    }
    d
}

/// The row as the pending parts are added to it, one kind of usage at a time.
struct RowAccumulator {
    kind: Option<Kind>,
    quantity: u64,
    merged: BTreeMap<Vec<Tag>, u64>,
    /// [`allocation_bytes`] of `merged`.
    bytes: usize,
    any_written: bool,
}

impl RowAccumulator {
    /// Add part `i`: each kind of usage in it is written, or recorded in `d` as rejected.
    fn add_part(&mut self, i: usize, p: &Part, limits: RowLimits, d: &mut Decision) {
        if p.quantity() == 0 {
            self.any_written = true;
            return;
        }
        let order = if p.first_kind == Some(Kind::Allocated) {
            [Kind::Allocated, Kind::Unallocated]
        } else {
            [Kind::Unallocated, Kind::Allocated]
        };
        for k in order {
            let q = match k {
                Kind::Unallocated => p.unallocated,
                Kind::Allocated => p.allocated_total,
            };
            if q == 0 {
                continue;
            }
            match self.refusal(k, q, p, limits) {
                Some(reason) => d.rejected.push(PartRejection {
                    part: i,
                    reason,
                    quantity: q,
                    kind: Some(k),
                }),
                None => {
                    if k == Kind::Allocated {
                        self.bytes += self.new_set_bytes(p);
                        for (t, a) in p.allocations() {
                            *self.merged.entry(t.clone()).or_default() += a;
                        }
                    }
                    self.kind = Some(k);
                    self.quantity += q;
                    d.accepted_quantity += q;
                    self.any_written = true;
                }
            }
        }
    }

    /// Why `q` units of kind `k` from `p` cannot be added, in check order.
    fn refusal(&self, k: Kind, q: u64, p: &Part, limits: RowLimits) -> Option<&'static str> {
        if self.kind.is_some_and(|have| have != k) {
            return Some(reasons::MIXED_ALLOCATED_AND_UNALLOCATED);
        }
        if self.quantity + q > limits.max_quantity {
            return Some(reasons::QUANTITY_OVERFLOW);
        }
        if k == Kind::Allocated {
            let new_sets = p
                .allocations()
                .filter(|(t, _)| !self.merged.contains_key(*t))
                .count();
            if self.merged.len() + new_sets > limits.max_allocations {
                return Some(reasons::TOO_MANY_ALLOCATIONS);
            }
            if self.bytes + self.new_set_bytes(p) > limits.max_allocation_bytes {
                return Some(reasons::ROW_ITEM_TOO_LARGE);
            }
        }
        None
    }

    /// [`allocation_bytes`] of `p`'s tag sets the row does not hold yet.
    fn new_set_bytes(&self, p: &Part) -> usize {
        p.allocations()
            .filter(|(t, _)| !self.merged.contains_key(*t))
            .map(|(t, _)| allocation_bytes(t))
            .sum()
    }
}
