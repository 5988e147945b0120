//! One conditional `UpdateItem` on a usage row, in domain terms: its guard — the condition
//! expression the DynamoDB adapter sends and the in-memory store evaluates — its change, and
//! the row it produces (what the in-memory store applies and the DynamoDB adapter's update
//! expression implements).

use awsmp_contract::attrs::{self, ROW_VERSION};
use awsmp_contract::condition::{Attr, Cmp, Condition, Value};
use awsmp_contract::keys::RowKey;
use awsmp_contract::row::{Allocation, AttrValue, RawUsageRow, parse_non_negative_integer};

use crate::domain::fold::RowId;
use crate::domain::seq::{Lane, SeqNum};

use super::WritePlan;
use super::coverage::{self, MAX_LANE_SPANS};

/// The condition of a row write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Guard {
    /// Optimistic first write: the row is absent or pending; each lane has neither watermark
    /// nor spans, or a watermark below the given (first) sequence number and a list of fewer
    /// than [`MAX_LANE_SPANS`] spans (a row written before spans is read once instead, so its
    /// prefix becomes a span); the stored quantity is at most
    /// `max_quantity_before`; `rowVersion` is absent or a number (the write adds 1 to it); and,
    /// when `require_unallocated`, the row has no allocations.
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

/// A lane's part of [`Guard::Fresh`]: neither watermark nor spans, or a watermark below the
/// first part and a list with room.
fn lane_fresh(
    lane_token: &mut dyn FnMut(String) -> String,
    i: usize,
    lane: &Lane,
    first: &SeqNum,
) -> Condition {
    let (wm, cov) = (lane.attribute(), coverage::attribute(lane));
    let wm = Attr::token(lane_token(wm.clone()), wm);
    let cov = Attr::token(lane_token(cov.clone()), cov);
    let neither = Condition::not_exists(wm.clone()).and(Condition::not_exists(cov.clone()));
    let below = Condition::lt(wm, Value::s(format!(":first{i}"), first.sortable()))
        .and(Condition::has_type(cov.clone(), Value::s(":ltype", "L")))
        .and(Condition::size(
            cov,
            Cmp::Lt,
            Value::n(":spans", MAX_LANE_SPANS),
        ));
    neither.or(below)
}

/// How a lane's spans ([`coverage::Coverage`]) change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpanWrite {
    /// Append one span (the optimistic write: it starts above the watermark, so above every
    /// stored span).
    Append(String),
    /// Replace the list (a write decided on the row as read).
    Replace(Vec<String>),
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
    /// New spans per lane (`cov#<lane>`).
    pub spans: Vec<(Lane, SpanWrite)>,
}

impl RowWrite {
    /// True when `guard` holds for `row` (`None` = absent): [`RowWrite::condition`], the
    /// condition expression the DynamoDB adapter sends, evaluated on the row.
    pub fn guard_holds(&self, row: Option<&RawUsageRow>) -> bool {
        // The tokens do not matter here: evaluation reads attribute names.
        self.condition(&mut |attr| attr).holds_for(row)
    }

    /// The condition expression of this write's guard. `lane_token` names the `#token` of a
    /// lane attribute (`seq#…`, `cov#…`), which the adapter shares with its update expression.
    pub fn condition(&self, lane_token: &mut dyn FnMut(String) -> String) -> Condition {
        let la = || Attr::token("#la", attrs::LICENSE_ARN);
        let mp = || Attr::token("#mp", attrs::METERING_PENDING);
        let rv = || Attr::token("#rv", ROW_VERSION);
        match &self.guard {
            Guard::Absent => Condition::not_exists(la()),
            Guard::Version(None) => Condition::exists(mp()).and(Condition::not_exists(rv())),
            Guard::Version(Some(v)) => {
                Condition::exists(mp()).and(Condition::eq(rv(), Value::n(":v", v)))
            }
            Guard::Fresh {
                lanes,
                max_quantity_before,
                require_unallocated,
            } => {
                let mut parts = vec![Condition::not_exists(la()).or(Condition::exists(mp()))];
                for (i, (lane, first)) in lanes.iter().enumerate() {
                    parts.push(lane_fresh(lane_token, i, lane, first));
                }
                let q = Attr::token("#q", attrs::QUANTITY);
                let room = Value::n(":room", max_quantity_before);
                parts.push(Condition::not_exists(q.clone()).or(Condition::compare(
                    q,
                    Cmp::Le,
                    room,
                )));
                // `ADD #rv :one` on a `rowVersion` of another type would be refused on every
                // retry: such a row fails the condition and is read, and found malformed.
                let number = Value::s(":ntype", "N");
                parts.push(Condition::not_exists(rv()).or(Condition::has_type(rv(), number)));
                if *require_unallocated {
                    let al = Attr::token("#al", attrs::USAGE_ALLOCATIONS);
                    parts.push(Condition::not_exists(al));
                }
                Condition::all(parts)
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
        self.apply_spans(&mut r)?;
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

impl RowWrite {
    /// Set each lane's spans on `r`; `None` when an appended list is not a list.
    fn apply_spans(&self, r: &mut RawUsageRow) -> Option<()> {
        for (lane, spans) in &self.spans {
            let name = coverage::attribute(lane);
            let list = match spans {
                SpanWrite::Append(item) => {
                    // `list_append(if_not_exists(…, []), [item])`.
                    let mut list = match r.get(&name) {
                        None => Vec::new(),
                        Some(AttrValue::L(l)) => l.clone(),
                        Some(_) => return None,
                    };
                    list.push(AttrValue::s(item));
                    list
                }
                SpanWrite::Replace(items) => items.iter().map(AttrValue::s).collect(),
            };
            r.insert(name, AttrValue::L(list));
        }
        Some(())
    }
}

/// The [`RowWrite`] for `row` with the decided guard, change and watermarks.
pub fn row_write(
    id: &RowId,
    (guard, change, watermarks, spans): WritePlan,
    ttl: Option<i64>,
    now: String,
) -> RowWrite {
    RowWrite {
        key: id.key(),
        customer_aws_account_id: id.customer_aws_account_id().to_owned(),
        dimension: id.dimension().to_owned(),
        timestamp: id.timestamp(),
        metering_pending: id.hour().to_string(),
        ttl,
        now,
        guard,
        change,
        watermarks,
        spans,
    }
}
