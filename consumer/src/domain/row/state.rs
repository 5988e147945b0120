//! What the consumer reads from a stored row.

use std::collections::{BTreeMap, HashMap};

use awsmp_contract::attrs::{self, ROW_VERSION, WATERMARK_ATTR_PREFIX};
use awsmp_contract::row::{AttrValue, RawUsageRow, Tag, parse_non_negative_integer};

use crate::domain::seq::{Lane, SeqNum};
use crate::domain::verify::Kind;

use super::coverage::{COVERAGE_ATTR_PREFIX, Coverage, Proof};

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
    /// The records each lane's writes covered ([`Coverage`]); a lane with a watermark and no
    /// spans (a row written before spans) covers the prefix up to its watermark.
    pub coverage: HashMap<Lane, Coverage>,
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
            } else if let Some(lane) = k.strip_prefix(COVERAGE_ATTR_PREFIX) {
                match Coverage::decode(v) {
                    Ok(c) => {
                        st.coverage.insert(Lane::from_name(lane), c);
                    }
                    Err(e) => bad(format!("coverage {k}: {e}")),
                }
            }
        }
        for (lane, wm) in &st.watermarks {
            st.coverage
                .entry(lane.clone())
                .or_insert_with(|| Coverage::prefix(wm));
        }
        // A watermark says the row holds the lane's parts up to it: only the consumer's own
        // conditional write sets one, and that write always sets `rowVersion`. On a row without
        // it the watermark proves nothing, and trusting it would skip the parts as replays
        // while no row holds their units: the row is one the consumer cannot add to.
        if st.version.is_none() && !(st.watermarks.is_empty() && st.coverage.is_empty()) {
            st.watermarks.clear();
            st.coverage.clear();
            bad(format!(
                "{WATERMARK_ATTR_PREFIX}… watermarks without {ROW_VERSION}: not a row the consumer wrote"
            ));
        }
        st
    }

    /// Whether the row holds record `seq` of `lane`.
    pub fn proof(&self, lane: &Lane, seq: &SeqNum) -> Proof {
        let wm = self.watermarks.get(lane);
        match self.coverage.get(lane) {
            Some(c) => c.proof(seq, wm),
            None => Proof::NotApplied,
        }
    }

    /// The kind of usage the row holds, if decided.
    pub(super) fn kind(&self) -> Option<Kind> {
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
