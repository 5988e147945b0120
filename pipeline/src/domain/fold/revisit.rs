//! Re-visiting a group whose aggregated record already exists: lost cleanups vs late usage.

use super::membership::{MemberPrefix, Membership, membership};
use super::seconds::SecondSet;
use super::{RowView, present};
use awsmp_contract::attrs;
use awsmp_contract::keys::{GroupKey, RowKey};
use awsmp_contract::limits::marketplace::MAX_USAGE_QUANTITY;
use awsmp_contract::row::{AttrValue, RawUsageRow, parse_non_negative_integer};

/// A raw row seen on a re-visit of a group whose aggregated record already exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RevisitRow {
    /// Not pending: nothing to do.
    NotPending,
    /// Belongs to another group: ignore.
    Foreign,
    /// Its second is in the stored record: its cleanup was lost. Clear `meteringPending`
    /// (without restamping a sum from this visit).
    AlreadyAggregated(RowKey),
    /// Written after aggregation: terminal `RejectedClientSide` + [`LATE_USAGE`](awsmp_contract::reasons::LATE_USAGE),
    /// `LateUsage` metric carrying its quantity.
    Late(LateRow),
}

/// A late raw row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LateRow {
    /// Its key.
    pub row_key: RowKey,
    /// Its second of the hour, when its key is well-formed.
    pub second: Option<u32>,
    /// Its quantity when it is a valid one; `None` for a non-numeric / invalid quantity (the
    /// row keeps its own attribute, nothing is defaulted).
    pub quantity: Option<u64>,
}

/// Classify a pending row found when re-visiting `group`, whose aggregated record stores the
/// contributing seconds `stored`. Rows without a sort key cannot exist in DynamoDB and are
/// reported as [`RevisitRow::Foreign`].
pub fn classify_revisit(group: &GroupKey, stored: &SecondSet, row: &RawUsageRow) -> RevisitRow {
    let prefix = MemberPrefix::of(group);
    let (sort_key, second) = match membership(group, &prefix, &RowView::of(row)) {
        Membership::NotPending => return RevisitRow::NotPending,
        Membership::Foreign | Membership::Unkeyed => return RevisitRow::Foreign,
        Membership::Malformed(sk) => (sk, None),
        Membership::Member {
            sort_key, second, ..
        } => (sort_key, second),
    };
    let row_key = RowKey {
        license_arn: group.license_arn.clone(),
        sort_key: sort_key.to_owned(),
    };
    if second.is_some_and(|s| stored.contains(s)) {
        return RevisitRow::AlreadyAggregated(row_key);
    }
    let quantity = present(row, attrs::QUANTITY)
        .and_then(AttrValue::as_n)
        .and_then(|n| parse_non_negative_integer(n).ok())
        .filter(|q| *q <= MAX_USAGE_QUANTITY);
    RevisitRow::Late(LateRow {
        row_key,
        second,
        quantity,
    })
}

/// The second of the hour of a raw row of `group`, from its key (as [`classify_revisit`] reads
/// it); `None` for a key that is not a well-formed whole second of the group's hour.
pub fn folded_second(group: &GroupKey, key: &RowKey) -> Option<u32> {
    let segments = awsmp_contract::keys::split_usage_sort_key(&key.sort_key)?;
    let t = awsmp_contract::keys::parse_usage_timestamp(segments.timestamp).ok()?;
    group.hour.second_of(t)
}

/// What a raw row holds beyond the `folded` quantity its aggregated record contains: the exact
/// late usage. `None` when the row's quantity is not a valid one or is *smaller* than what was
/// folded (no writer shrinks a pending row; such a row is stamped as billed, as it was folded).
pub fn late_difference(folded: u64, row: &RawUsageRow) -> Option<u64> {
    present(row, attrs::QUANTITY)
        .and_then(AttrValue::as_n)
        .and_then(|n| parse_non_negative_integer(n).ok())
        .and_then(|current| current.checked_sub(folded))
}
