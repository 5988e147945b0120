//! The usage row as the consumer sees it, its conditional write, and the decision that keeps
//! replays exact.
//!
//! **Watermarks.** Each row stores, per lane (shard + Kinesis partition key, see
//! [`Lane`]), the highest sequence number whose contribution it holds (`seq#<lane>`
//! attributes, sortable strings). Lambda delivers a lane in order and only ever replays a
//! suffix of it, so the parts a row holds are always a prefix of its lane: a part is applied
//! exactly when its sequence number is at or below the watermark. The first write of a batch
//! is optimistic ([`Guard::Fresh`]: every lane's watermark below the batch's first part); on a
//! conflict the row is read and [`resolve`] decides part by part, then writes with
//! [`Guard::Version`] (compare-and-set on `rowVersion`).
//!
//! **Decisions that are final.** Late usage (the group-hour is finalized), mixing allocated and
//! unallocated usage in one row, a row total above the API maximum and too many tag sets are
//! recorded as rejected parts *before* the write that advances the watermark past them; each
//! condition is sticky (quantities only grow, a finalized row stays finalized), so a replay
//! never accepts a part it once rejected.

use std::collections::{BTreeMap, HashMap};

use awsmp_pipeline::contract::attrs::{self, ROW_VERSION, WATERMARK_ATTR_PREFIX};
use awsmp_pipeline::contract::limits::{MAX_ALLOCATIONS_PER_RECORD, MAX_USAGE_QUANTITY};
use awsmp_pipeline::contract::reasons;
use awsmp_pipeline::domain::keys::RowKey;
use awsmp_pipeline::domain::row::{
    Allocation, AttrValue, RawUsageRow, Tag, parse_non_negative_integer,
};

use super::fold::{Part, RowContribution, RowId};
use super::seq::{Lane, SeqNum};
use super::verify::Kind;

/// What the consumer reads from a stored row.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RowState {
    /// `meteringPending` present (the pipeline has not finalized the row).
    pub pending: bool,
    /// The quantity (0 when the attribute is absent).
    pub quantity: u64,
    /// Merged allocations, if the row has any.
    pub allocations: Option<BTreeMap<Vec<Tag>, u64>>,
    /// `rowVersion`, if present.
    pub version: Option<u64>,
    /// Watermark per lane.
    pub watermarks: HashMap<Lane, SeqNum>,
    /// Why the consumer cannot add to this row (a quantity, allocation list or watermark it
    /// did not write and cannot read).
    pub malformed: Option<String>,
}

impl RowState {
    /// Read the consumer's view of a stored row.
    pub fn from_row(row: &RawUsageRow) -> Self {
        let mut st = RowState {
            pending: row
                .get(attrs::METERING_PENDING)
                .is_some_and(|v| !matches!(v, AttrValue::Null)),
            ..RowState::default()
        };
        let mut bad = |m: String| {
            st.malformed.get_or_insert(m);
        };
        match row.get(attrs::QUANTITY) {
            None => {}
            Some(AttrValue::N(n)) => match parse_non_negative_integer(n) {
                Ok(q) => st.quantity = q,
                Err(e) => bad(format!("quantity {n:?}: {e:?}")),
            },
            Some(other) => bad(format!("quantity {other:?} is not a number")),
        }
        match row.get(attrs::USAGE_ALLOCATIONS) {
            None | Some(AttrValue::Null) => {}
            Some(v) => match parse_allocations(v) {
                Some(m) => st.allocations = Some(m),
                None => bad(format!("usageAllocations {v:?} cannot be merged into")),
            },
        }
        match row.get(ROW_VERSION) {
            None => {}
            Some(AttrValue::N(n)) => match n.parse() {
                Ok(v) => st.version = Some(v),
                Err(_) => bad(format!("{ROW_VERSION} {n:?}")),
            },
            Some(other) => bad(format!("{ROW_VERSION} {other:?}")),
        }
        for (k, v) in row {
            if let Some(lane) = k.strip_prefix(WATERMARK_ATTR_PREFIX) {
                match v.as_s().map(SeqNum::from_sortable) {
                    Some(Ok(seq)) => {
                        st.watermarks.insert(Lane::from_name(lane), seq);
                    }
                    _ => bad(format!("watermark {k} = {v:?}")),
                }
            }
        }
        st
    }

    /// The kind of usage the row holds, if decided.
    fn kind(&self) -> Option<Kind> {
        if self.allocations.is_some() {
            Some(Kind::Allocated)
        } else if self.quantity > 0 {
            Some(Kind::Unallocated)
        } else {
            None
        }
    }
}

fn parse_allocations(v: &AttrValue) -> Option<BTreeMap<Vec<Tag>, u64>> {
    let mut out = BTreeMap::new();
    for item in v.as_l()? {
        let m = item.as_m()?;
        let q = parse_non_negative_integer(m.get(attrs::ALLOCATED_USAGE_QUANTITY)?.as_n()?).ok()?;
        let mut tags = Vec::new();
        if let Some(t) = m.get(attrs::TAGS) {
            for tag in t.as_l()? {
                let tm = tag.as_m()?;
                tags.push(Tag::new(
                    tm.get(attrs::TAG_KEY)?.as_s()?,
                    tm.get(attrs::TAG_VALUE)?.as_s()?,
                ));
            }
        }
        tags.sort_unstable();
        let e: &mut u64 = out.entry(tags).or_default();
        *e = e.checked_add(q)?;
    }
    Some(out)
}

/// The condition of a row write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Guard {
    /// Optimistic first write: the row is absent or pending; each lane's watermark is absent or
    /// below the given (first) sequence number; the stored quantity is at most
    /// `max_quantity_before`; and, when `require_unallocated`, the row has no allocations.
    Fresh {
        /// (lane, first sequence number of the batch's parts in that lane).
        lanes: Vec<(Lane, SeqNum)>,
        /// Largest stored quantity the addition still fits on.
        max_quantity_before: u64,
        /// The addition is non-zero unallocated usage.
        require_unallocated: bool,
    },
    /// The row must not exist.
    Absent,
    /// The row must be pending and carry this `rowVersion` (`None`: no version attribute).
    Version(Option<u64>),
}

/// How the quantity changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// `ADD quantity :q`.
    Add(u64),
    /// `SET quantity = :q` (and `usageAllocations = :list` when given).
    Set {
        /// The new quantity.
        quantity: u64,
        /// The new allocation list (merged, in the contract shape).
        allocations: Option<Vec<Allocation>>,
    },
}

/// One conditional `UpdateItem` on a usage row, in domain terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowWrite {
    /// Primary key.
    pub key: RowKey,
    /// `customerAWSAccountId`.
    pub customer_aws_account_id: String,
    /// `dimension`.
    pub dimension: String,
    /// `timestamp` (`YYYY-MM-DDTHH:MM:SS`).
    pub timestamp: String,
    /// `meteringPending` (`YYYY-MM-DDTHH`, the hour of the row's own second).
    pub metering_pending: String,
    /// `ttl` (epoch seconds), when the table has a TTL.
    pub ttl: Option<i64>,
    /// ISO-8601 UTC write time (`updatedAt`, and `createdAt` once).
    pub now: String,
    /// Condition.
    pub guard: Guard,
    /// Quantity change.
    pub change: Change,
    /// New watermark per lane.
    pub watermarks: Vec<(Lane, SeqNum)>,
}

impl RowWrite {
    /// True when `guard` holds for `row` (`None` = absent). The DynamoDB adapter's condition
    /// expression implements exactly this.
    pub fn guard_holds(&self, row: Option<&RawUsageRow>) -> bool {
        let Some(row) = row else {
            return !matches!(self.guard, Guard::Version(_));
        };
        let pending = row.contains_key(attrs::METERING_PENDING);
        match &self.guard {
            Guard::Absent => false,
            Guard::Version(v) => {
                pending
                    && match (v, row.get(ROW_VERSION)) {
                        (None, None) => true,
                        (Some(v), Some(AttrValue::N(n))) => n.parse::<u64>().ok() == Some(*v),
                        _ => false,
                    }
            }
            Guard::Fresh {
                lanes,
                max_quantity_before,
                require_unallocated,
            } => {
                pending
                    && lanes
                        .iter()
                        .all(|(lane, first)| match row.get(&lane.attribute()) {
                            None => true,
                            Some(AttrValue::S(s)) => s.as_str() < first.sortable(),
                            Some(_) => false,
                        })
                    && match row.get(attrs::QUANTITY) {
                        None => true,
                        Some(AttrValue::N(n)) => {
                            parse_non_negative_integer(n).is_ok_and(|q| q <= *max_quantity_before)
                        }
                        Some(_) => false,
                    }
                    && !(*require_unallocated && row.contains_key(attrs::USAGE_ALLOCATIONS))
            }
        }
    }

    /// The row after this write, or `None` when the guard fails. The in-memory store applies
    /// writes with this; the DynamoDB adapter's update expression does the same.
    pub fn apply(&self, row: Option<&RawUsageRow>) -> Option<RawUsageRow> {
        if !self.guard_holds(row) {
            return None;
        }
        let mut r = row.cloned().unwrap_or_default();
        let set = |r: &mut RawUsageRow, k: &str, v: AttrValue| {
            r.insert(k.to_owned(), v);
        };
        set(
            &mut r,
            attrs::LICENSE_ARN,
            AttrValue::s(&self.key.license_arn),
        );
        set(
            &mut r,
            attrs::USAGE_SORT_KEY,
            AttrValue::s(&self.key.sort_key),
        );
        set(
            &mut r,
            attrs::CUSTOMER_AWS_ACCOUNT_ID,
            AttrValue::s(&self.customer_aws_account_id),
        );
        set(&mut r, attrs::DIMENSION, AttrValue::s(&self.dimension));
        set(&mut r, attrs::TIMESTAMP, AttrValue::s(&self.timestamp));
        set(
            &mut r,
            attrs::METERING_PENDING,
            AttrValue::s(&self.metering_pending),
        );
        if let Some(ttl) = self.ttl {
            set(&mut r, attrs::TTL, AttrValue::N(ttl.to_string()));
        }
        r.entry(attrs::CREATED_AT.to_owned())
            .or_insert_with(|| AttrValue::s(&self.now));
        set(&mut r, attrs::UPDATED_AT, AttrValue::s(&self.now));
        for (lane, seq) in &self.watermarks {
            set(&mut r, &lane.attribute(), AttrValue::s(seq.sortable()));
        }
        match &self.change {
            Change::Add(q) => {
                let old = match r.get(attrs::QUANTITY) {
                    Some(AttrValue::N(n)) => parse_non_negative_integer(n).ok()?,
                    _ => 0,
                };
                set(&mut r, attrs::QUANTITY, AttrValue::n(old.checked_add(*q)?));
            }
            Change::Set {
                quantity,
                allocations,
            } => {
                set(&mut r, attrs::QUANTITY, AttrValue::n(*quantity));
                if let Some(a) = allocations {
                    set(
                        &mut r,
                        attrs::USAGE_ALLOCATIONS,
                        AttrValue::L(a.iter().map(Allocation::to_attr).collect()),
                    );
                }
            }
        }
        let version = match r.get(ROW_VERSION) {
            Some(AttrValue::N(n)) => n.parse::<u64>().ok()?,
            _ => 0,
        };
        set(&mut r, ROW_VERSION, AttrValue::n(version + 1));
        Some(r)
    }
}

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

/// Row-level limits (the aggregator's guardrails; tests may shrink them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowLimits {
    /// Largest row quantity (BatchMeterUsage maximum).
    pub max_quantity: u64,
    /// Most distinct tag sets in one row.
    pub max_allocations: usize,
}

impl Default for RowLimits {
    fn default() -> Self {
        Self {
            max_quantity: MAX_USAGE_QUANTITY,
            max_allocations: MAX_ALLOCATIONS_PER_RECORD,
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

/// A decided write: its guard, its change and the new watermark per lane.
pub type WritePlan = (Guard, Change, Vec<(Lane, SeqNum)>);

/// The write decision for one row.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Decision {
    /// Parts the row already holds (a replay).
    pub applied: Vec<usize>,
    /// Parts (or kinds of usage in them) recorded instead of written.
    pub rejected: Vec<PartRejection>,
    /// Quantity this decision adds to the row.
    pub accepted_quantity: u64,
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
    if kinds.first() == Some(&Kind::Allocated) {
        let mut merged: BTreeMap<Vec<Tag>, u64> = BTreeMap::new();
        for p in &row.parts {
            for (t, q) in &p.allocated {
                *merged.entry(t.clone()).or_default() += q;
            }
        }
        if merged.len() > limits.max_allocations {
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
            )),
            ..Decision::default()
        });
    }
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
        if st.watermarks.get(&m.lane).is_some_and(|wm| *wm >= m.seq) {
            d.applied.push(i);
        } else {
            pending.push(i);
        }
    }
    if pending.is_empty() {
        return d;
    }
    let whole = |reason: &'static str| -> Vec<PartRejection> {
        pending
            .iter()
            .map(|&i| PartRejection {
                part: i,
                reason,
                quantity: row.parts[i].quantity(),
                kind: None,
            })
            .collect()
    };
    if finalized || (present && !st.pending) {
        d.rejected = whole(reasons::LATE_USAGE);
        return d;
    }
    if present && st.malformed.is_some() {
        d.rejected = whole(reasons::EXISTING_ROW_MALFORMED);
        return d;
    }
    let mut kind = st.kind();
    let mut quantity = st.quantity;
    let mut merged = st.allocations.clone().unwrap_or_default();
    let mut any_written = false;
    for &i in &pending {
        let p = &row.parts[i];
        if p.quantity() == 0 {
            any_written = true;
            continue;
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
            let mut reject = |reason| {
                d.rejected.push(PartRejection {
                    part: i,
                    reason,
                    quantity: q,
                    kind: Some(k),
                })
            };
            if kind.is_some_and(|have| have != k) {
                reject(reasons::MIXED_ALLOCATED_AND_UNALLOCATED);
                continue;
            }
            if quantity + q > limits.max_quantity {
                reject(reasons::QUANTITY_OVERFLOW);
                continue;
            }
            if k == Kind::Allocated {
                let new_sets = p
                    .allocated
                    .keys()
                    .filter(|t| !merged.contains_key(*t))
                    .count();
                if merged.len() + new_sets > limits.max_allocations {
                    reject(reasons::TOO_MANY_ALLOCATIONS);
                    continue;
                }
                for (t, a) in &p.allocated {
                    *merged.entry(t.clone()).or_default() += a;
                }
            }
            kind = Some(k);
            quantity += q;
            d.accepted_quantity += q;
            any_written = true;
        }
    }
    if any_written {
        let watermarks = lane_bounds(pending.iter().map(|&i| &row.parts[i]), records)
            .into_iter()
            .map(|(l, (_, hi))| (l, hi))
            .collect();
        let guard = if present {
            Guard::Version(st.version)
        } else {
            Guard::Absent
        };
        let allocations = (kind == Some(Kind::Allocated)).then(|| to_allocations(merged));
        d.write = Some((
            guard,
            Change::Set {
                quantity,
                allocations,
            },
            watermarks,
        ));
    }
    d
}

/// The [`RowWrite`] for `row` with the decided guard, change and watermarks.
pub fn row_write(
    id: &RowId,
    (guard, change, watermarks): WritePlan,
    ttl: Option<i64>,
    now: String,
) -> RowWrite {
    RowWrite {
        key: id.key(),
        customer_aws_account_id: id.customer_aws_account_id.clone(),
        dimension: id.dimension.clone(),
        timestamp: id.timestamp(),
        metering_pending: id.hour().to_string(),
        ttl,
        now,
        guard,
        change,
        watermarks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::fold::BatchFold;
    use crate::domain::verify::VerifiedEvent;

    const ARN: &str =
        "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";

    fn ev(q: u64, tags: Option<&str>) -> VerifiedEvent {
        VerifiedEvent {
            license_arn: ARN.into(),
            customer_aws_account_id: "210987654321".into(),
            dimension: "api".into(),
            second: 1_796_040_007,
            quantity: q,
            allocations: tags.map(|t| BTreeMap::from([(vec![Tag::new("team", t)], q)])),
            event_id: "e".into(),
            producer_id: None,
        }
    }

    fn metas(n: usize) -> Vec<RecordMeta> {
        (0..n)
            .map(|i| RecordMeta {
                lane: Lane::new("shardId-000000000000", "pk"),
                seq: SeqNum::parse(&(100 + i).to_string()).unwrap(),
            })
            .collect()
    }

    fn contribution(events: &[(u32, VerifiedEvent)]) -> RowContribution {
        let mut f = BatchFold::new();
        for (r, e) in events {
            f.add(*r, 0, e.clone());
        }
        f.into_rows().remove(0)
    }

    fn apply(
        row: &RowContribution,
        m: &[RecordMeta],
        stored: Option<&RawUsageRow>,
    ) -> (Decision, Option<RawUsageRow>) {
        let st = stored.map(RowState::from_row);
        let obs = match &st {
            None => Observation::Absent,
            Some(s) => Observation::Present(s),
        };
        let Resolve::Decided(d) = resolve(row, m, obs, false, RowLimits::default()) else {
            panic!("a read row is always decided")
        };
        let written = d.write.clone().and_then(|plan| {
            row_write(&row.id, plan, None, "2026-11-30T12:00:08.000Z".into()).apply(stored)
        });
        (d, written)
    }

    #[test]
    fn the_optimistic_write_refuses_an_applied_lane() {
        let m = metas(3);
        let row = contribution(&[(0, ev(5, None)), (1, ev(6, None))]);
        let Resolve::Decided(d) =
            resolve(&row, &m, Observation::Unknown, false, RowLimits::default())
        else {
            panic!("plain usage goes optimistic")
        };
        let w = row_write(&row.id, d.write.unwrap(), None, "now".into());
        let stored = w.apply(None).unwrap();
        assert_eq!(stored[attrs::QUANTITY], AttrValue::n(11));
        assert!(
            w.apply(Some(&stored)).is_none(),
            "same parts again: guard fails"
        );
    }

    #[test]
    fn a_replay_writes_only_the_parts_above_the_watermark() {
        let m = metas(3);
        let first = contribution(&[(0, ev(5, None)), (1, ev(6, None))]);
        let (_, stored) = apply(&first, &m, None);
        let stored = stored.unwrap();
        // The replayed batch holds records 0..=2; 0 and 1 are already in the row.
        let replay = contribution(&[(0, ev(5, None)), (1, ev(6, None)), (2, ev(7, None))]);
        let (d, after) = apply(&replay, &m, Some(&stored));
        assert_eq!(d.applied, vec![0, 1]);
        assert_eq!(d.accepted_quantity, 7);
        assert_eq!(after.unwrap()[attrs::QUANTITY], AttrValue::n(18));
    }

    #[test]
    fn mixed_usage_keeps_the_first_kind_and_records_the_other() {
        let m = metas(2);
        let row = contribution(&[
            (0, ev(4, Some("a"))),
            (1, ev(9, None)),
            (1, ev(2, Some("b"))),
        ]);
        let (d, after) = apply(&row, &m, None);
        assert_eq!(
            d.rejected,
            vec![PartRejection {
                part: 1,
                reason: reasons::MIXED_ALLOCATED_AND_UNALLOCATED,
                quantity: 9,
                kind: Some(Kind::Unallocated),
            }]
        );
        let after = after.unwrap();
        assert_eq!(after[attrs::QUANTITY], AttrValue::n(6));
        assert_eq!(after[attrs::USAGE_ALLOCATIONS].as_l().unwrap().len(), 2);
    }

    #[test]
    fn a_row_total_beyond_the_api_maximum_is_recorded_not_written() {
        let m = metas(2);
        let big = MAX_USAGE_QUANTITY - 10;
        let row = contribution(&[(0, ev(big, None)), (1, ev(11, None))]);
        assert_eq!(
            resolve(&row, &m, Observation::Unknown, false, RowLimits::default()),
            Resolve::NeedsRead
        );
        let (d, after) = apply(&row, &m, None);
        assert_eq!(d.rejected[0].reason, reasons::QUANTITY_OVERFLOW);
        assert_eq!(d.rejected[0].quantity, 11);
        assert_eq!(after.unwrap()[attrs::QUANTITY], AttrValue::n(big));
    }

    #[test]
    fn finalized_and_unreadable_rows_are_never_written() {
        let m = metas(1);
        let row = contribution(&[(0, ev(3, None))]);
        let Resolve::Decided(d) =
            resolve(&row, &m, Observation::Absent, true, RowLimits::default())
        else {
            panic!()
        };
        assert_eq!((d.rejected[0].reason, d.write), (reasons::LATE_USAGE, None));

        let mut seller = RawUsageRow::new();
        seller.insert(
            attrs::METERING_PENDING.into(),
            AttrValue::s("2026-11-30T12"),
        );
        seller.insert(attrs::QUANTITY.into(), AttrValue::s("7"));
        let (d, after) = apply(&row, &m, Some(&seller));
        assert_eq!(d.rejected[0].reason, reasons::EXISTING_ROW_MALFORMED);
        assert!(after.is_none());

        let mut finalized = seller.clone();
        finalized.remove(attrs::METERING_PENDING);
        finalized.insert(attrs::QUANTITY.into(), AttrValue::n(7));
        let (d, _) = apply(&row, &m, Some(&finalized));
        assert_eq!(d.rejected[0].reason, reasons::LATE_USAGE);
    }
}
