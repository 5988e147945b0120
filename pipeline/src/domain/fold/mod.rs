//! The streamed group fold with the client-side guardrails and the VMT merge (docs/row-contract.md,
//! docs/architecture.md "Aggregator").
//!
//! Feed a group's rows one at a time as the adapter pages through its `begins_with` query;
//! memory stays O(distinct tag sets) — plus a fixed 450-byte bitmap of contributing seconds and
//! a fixed 14.4 KB table of their quantities —
//! never O(rows).
//!
//! **Precedence.** Each row is checked in the exact order of
//! [`RejectReason`](crate::contract::status::RejectReason); the row's first failing check is its
//! reason. One bad row rejects the whole group-hour, and the group's
//! reason is the earliest-ranked reason over all its rows and the group-level checks
//! (`MixedAllocatedAndUnallocated`, `TooManyAllocations`, merged `AllocationSumMismatch`),
//! ties broken by the smallest sort key. The outcome is
//! therefore independent of row order. A valid group whose total exceeds the API maximum is
//! not rejected: it bills the maximum and carries the remainder ([`Overflow`]).
//!
//! | module | what it owns |
//! |---|---|
//! | `group` | [`GroupFold`]: membership, sums, the group-level checks, the [`FoldOutcome`] |
//! | `checks` | the row-level guardrails, in reason order |
//! | `allocations` | reading a row's `usageAllocations`; the merge per distinct tag set |
//! | `overflow` | [`split_at_api_maximum`]: bill the API maximum, keep the remainder (and its allocations) |
//! | `revisit` | [`classify_revisit`]: a lost cleanup or late usage, once the record exists |
//! | `seconds` | [`SecondSet`] and [`SecondQuantities`], the contributing seconds and their folded quantities an aggregated record stores |
//!
//! ```
//! use awsmp_pipeline::domain::fold::{FoldOutcome, GroupFold};
//! use awsmp_pipeline::domain::keys::GroupKey;
//! use awsmp_pipeline::domain::row::conforming_row;
//! use awsmp_pipeline::domain::time::TimeConfig;
//! use chrono::{TimeZone, Utc};
//!
//! let group = GroupKey::new(
//!     "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef",
//!     "210987654321", "api_calls", "2026-11-30T11".parse().unwrap());
//! let now = Utc.with_ymd_and_hms(2026, 11, 30, 12, 20, 0).unwrap();
//! let mut fold = GroupFold::new(group.clone(), now, &TimeConfig::default());
//! for second in [0, 59, 3599] {
//!     fold.push(&conforming_row(&group, second, 7, None)).unwrap();
//! }
//! let FoldOutcome::Valid(record) = fold.finish() else { panic!("valid group") };
//! assert_eq!(record.quantity, 21);
//! assert_eq!(record.raw_status_reason(), "Aggregated total quantity 21 from 3 raw usage records");
//! ```

mod allocations;
mod checks;
mod group;
mod membership;
mod overflow;
mod revisit;
mod seconds;
#[cfg(test)]
mod tests;

pub use group::{AggregatedRecord, FoldOutcome, GroupFold, GroupRows, Pushed, Rejection};
pub use overflow::{Overflow, Split, split_at_api_maximum};
pub use revisit::{LateRow, RevisitRow, classify_revisit, folded_second, late_difference};
pub use seconds::{SECOND_QUANTITY_BYTES, SECOND_SET_BYTES, SecondQuantities, SecondSet};

use super::row::{AttrValue, RawUsageRow};

/// The attribute `name` of `row`, unless absent or NULL.
fn present<'r>(row: &'r RawUsageRow, name: &str) -> Option<&'r AttrValue> {
    row.get(name).filter(|v| !matches!(v, AttrValue::Null))
}

/// The contract attributes the fold reads of one row, found in one pass over the row (a NULL
/// counts as absent, as in [`present`]): one look at each attribute instead of a map lookup
/// per check.
#[derive(Debug, Default)]
struct RowView<'r> {
    pending: Option<&'r AttrValue>,
    license_arn: Option<&'r AttrValue>,
    sort_key: Option<&'r AttrValue>,
    account: Option<&'r AttrValue>,
    customer_identifier: Option<&'r AttrValue>,
    dimension: Option<&'r AttrValue>,
    quantity: Option<&'r AttrValue>,
    allocations: Option<&'r AttrValue>,
}

impl<'r> RowView<'r> {
    fn of(row: &'r RawUsageRow) -> Self {
        use crate::contract::attrs;
        let mut v = Self::default();
        for (name, value) in row {
            if matches!(value, AttrValue::Null) {
                continue;
            }
            let slot = match name.as_str() {
                attrs::METERING_PENDING => &mut v.pending,
                attrs::LICENSE_ARN => &mut v.license_arn,
                attrs::USAGE_SORT_KEY => &mut v.sort_key,
                attrs::CUSTOMER_AWS_ACCOUNT_ID => &mut v.account,
                attrs::CUSTOMER_IDENTIFIER => &mut v.customer_identifier,
                attrs::DIMENSION => &mut v.dimension,
                attrs::QUANTITY => &mut v.quantity,
                attrs::USAGE_ALLOCATIONS => &mut v.allocations,
                _ => continue,
            };
            *slot = Some(value);
        }
        v
    }
}
