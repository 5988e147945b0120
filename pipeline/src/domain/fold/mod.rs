//! The streamed group fold with the client-side guardrails and the VMT merge (docs/row-contract.md,
//! docs/architecture.md "Aggregator").
//!
//! Feed a group's rows one at a time as the adapter pages through its `begins_with` query;
//! memory stays O(distinct tag sets) — plus a fixed 450-byte bitmap of contributing seconds and
//! a fixed 14.4 KB table of their quantities —
//! never O(rows).
//!
//! **Precedence.** Each row is checked in the exact order of
//! [`RejectReason`](awsmp_contract::status::RejectReason); the row's first failing check is its
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
//! | `compact` | [`UsageRow`]: a row as a store hands it, a conforming one compacted by the adapter to its second and quantity ([`RowShape`]) |
//! | `conforming` | the fast path: a row exactly as the writer contract makes it, counted by comparisons against facts of the group evaluated once |
//! | `allocations` | reading a row's `usageAllocations`; the merge per distinct tag set |
//! | `overflow` | [`split_at_api_maximum`]: bill the API maximum, keep the remainder (and its allocations) |
//! | `revisit` | [`classify_revisit`]: a lost cleanup or late usage, once the record exists |
//! | `seconds` | [`SecondSet`] and [`SecondQuantities`], the contributing seconds and their folded quantities an aggregated record stores |
//!
//! ```
//! use awsmp_pipeline::domain::fold::{FoldOutcome, GroupFold};
//! use awsmp_contract::keys::GroupKey;
//! use awsmp_contract::row::conforming_row;
//! use awsmp_contract::time::TimeConfig;
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
mod compact;
mod conforming;
mod group;
mod membership;
mod overflow;
mod revisit;
mod seconds;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_equivalence;

pub use compact::{AttrRef, CompactRow, RowShape, UsageRow};
pub use group::{AggregatedRecord, FoldOutcome, GroupFold, GroupRows, Pushed, Rejection};
pub use overflow::{Overflow, Split, split_at_api_maximum};
pub use revisit::{LateRow, RevisitRow, classify_revisit, folded_second, late_difference};
pub use seconds::{SECOND_QUANTITY_BYTES, SECOND_SET_BYTES, SecondQuantities, SecondSet};

use awsmp_contract::row::{AttrValue, RawUsageRow};

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
        use awsmp_contract::attrs;
        // The eight names have eight different lengths: the length picks the one candidate,
        // and one comparison decides (a shared length would be an unreachable pattern, which
        // the lints refuse).
        const PENDING: usize = attrs::METERING_PENDING.len();
        const LICENSE: usize = attrs::LICENSE_ARN.len();
        const SORT_KEY: usize = attrs::USAGE_SORT_KEY.len();
        const ACCOUNT: usize = attrs::CUSTOMER_AWS_ACCOUNT_ID.len();
        const IDENTIFIER: usize = attrs::CUSTOMER_IDENTIFIER.len();
        const DIMENSION: usize = attrs::DIMENSION.len();
        const QUANTITY: usize = attrs::QUANTITY.len();
        const ALLOCATIONS: usize = attrs::USAGE_ALLOCATIONS.len();
        let mut v = Self::default();
        for (name, value) in row {
            if matches!(value, AttrValue::Null) {
                continue;
            }
            let (wanted, slot) = match name.len() {
                PENDING => (attrs::METERING_PENDING, &mut v.pending),
                LICENSE => (attrs::LICENSE_ARN, &mut v.license_arn),
                SORT_KEY => (attrs::USAGE_SORT_KEY, &mut v.sort_key),
                ACCOUNT => (attrs::CUSTOMER_AWS_ACCOUNT_ID, &mut v.account),
                IDENTIFIER => (attrs::CUSTOMER_IDENTIFIER, &mut v.customer_identifier),
                DIMENSION => (attrs::DIMENSION, &mut v.dimension),
                QUANTITY => (attrs::QUANTITY, &mut v.quantity),
                ALLOCATIONS => (attrs::USAGE_ALLOCATIONS, &mut v.allocations),
                _ => continue,
            };
            if conforming::same_bytes(name.as_bytes(), wanted.as_bytes()) {
                *slot = Some(value);
            }
        }
        v
    }
}

#[cfg(test)]
mod view_tests {
    use super::*;
    use awsmp_contract::attrs;
    use proptest::prelude::*;

    /// The row's attributes and near misses of their names.
    fn names() -> Vec<&'static str> {
        super::tests_equivalence::NAMES
            .into_iter()
            .chain(["quantitx", "meteringPendinG", "licenseArnX"])
            .collect()
    }

    proptest! {
        /// The one-pass view finds exactly what one lookup per attribute finds.
        #[test]
        fn the_view_is_one_lookup_per_attribute(
            row in prop::collection::btree_map(
                prop::sample::select(names()).prop_map(str::to_owned),
                prop_oneof![Just(AttrValue::Null), "[a-z]{0,3}".prop_map(AttrValue::S), "[0-9]{1,3}".prop_map(AttrValue::N)],
                0..12,
            )
        ) {
            let v = RowView::of(&row);
            let looked_up = |name| present(&row, name);
            prop_assert_eq!(v.pending, looked_up(attrs::METERING_PENDING));
            prop_assert_eq!(v.license_arn, looked_up(attrs::LICENSE_ARN));
            prop_assert_eq!(v.sort_key, looked_up(attrs::USAGE_SORT_KEY));
            prop_assert_eq!(v.account, looked_up(attrs::CUSTOMER_AWS_ACCOUNT_ID));
            prop_assert_eq!(v.customer_identifier, looked_up(attrs::CUSTOMER_IDENTIFIER));
            prop_assert_eq!(v.dimension, looked_up(attrs::DIMENSION));
            prop_assert_eq!(v.quantity, looked_up(attrs::QUANTITY));
            prop_assert_eq!(v.allocations, looked_up(attrs::USAGE_ALLOCATIONS));
        }
    }
}
