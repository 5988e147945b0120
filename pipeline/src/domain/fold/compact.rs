//! The compact form of a row exactly as the writer contract makes it (docs/row-contract.md):
//! the store's adapter compares a row's attributes with the group's strings (evaluated once,
//! in a [`RowShape`]) as it reads the row, and hands the fold two integers instead of a map of
//! owned strings. The fold then touches 16 bytes per conforming row.
//!
//! **Nothing is lost.** A row is compacted only when every attribute the fold reads (see
//! `RowView`) is determined by the group, the second and the quantity: `meteringPending`
//! present, the group's `licenseArn`, a sort key of the group's prefix and `:MM:SS`, the
//! group's identity attribute (and not the other one), dimension and a canonical whole
//! `quantity`, no `usageAllocations`. [`CompactRow::to_raw`] rebuilds a row the fold cannot
//! tell from the original, so a compact row the fast path does not take (a second after
//! `now`, a bucket outside the window, ...) is decided by the general path with the same
//! reason and detail. `tests_equivalence.rs` folds arbitrary rows, bad ones included, both ways.

use super::checks::partition_is_legacy;
use super::conforming::same_bytes;
use awsmp_contract::attrs;
use awsmp_contract::keys::GroupKey;
use awsmp_contract::limits::marketplace::MAX_USAGE_QUANTITY;
use awsmp_contract::row::{AttrValue, RawUsageRow};

/// A pending row as a usage store hands it to the fold ([`super::GroupFold::push_row`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UsageRow {
    /// Any row, as read.
    Raw(RawUsageRow),
    /// A row of the group it was read for, exactly as the writer contract makes it.
    Compact(CompactRow),
}

impl UsageRow {
    /// The row as a map of attributes (a compact row rebuilt for `group`, the group it was
    /// read for).
    pub fn into_raw(self, group: &GroupKey) -> RawUsageRow {
        match self {
            Self::Raw(row) => row,
            Self::Compact(c) => c.to_raw(group),
        }
    }
}

/// A conforming row of a known group: its second of the hour and its quantity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactRow {
    /// Second of the hour (0–3599) of its sort key.
    pub second: u32,
    /// Its quantity (at most [`MAX_USAGE_QUANTITY`]).
    pub quantity: u64,
    /// Its identity attribute is `customerIdentifier` (a product-code partition).
    pub legacy: bool,
}

impl CompactRow {
    /// The row's attributes as the fold reads them, for `group` (the group it was read for).
    pub fn to_raw(&self, group: &GroupKey) -> RawUsageRow {
        let identity = if self.legacy {
            attrs::CUSTOMER_IDENTIFIER
        } else {
            attrs::CUSTOMER_AWS_ACCOUNT_ID
        };
        [
            (
                attrs::METERING_PENDING,
                AttrValue::s(group.hour.to_string()),
            ),
            (attrs::LICENSE_ARN, AttrValue::s(&group.license_arn)),
            (
                attrs::USAGE_SORT_KEY,
                AttrValue::s(group.usage_sort_key_at(self.second)),
            ),
            (identity, AttrValue::s(&group.customer_aws_account_id)),
            (attrs::DIMENSION, AttrValue::s(&group.dimension)),
            (attrs::QUANTITY, AttrValue::n(self.quantity)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }
}

/// A borrowed look at one attribute value, whatever the store's own value type.
#[derive(Debug, Clone, Copy)]
pub enum AttrRef<'a> {
    /// A string.
    S(&'a str),
    /// A number, as its decimal text.
    N(&'a str),
    /// NULL (counts as absent).
    Null,
    /// Any other type.
    Other,
}

impl<'a> AttrRef<'a> {
    /// A look at a domain value.
    pub fn of(v: &'a AttrValue) -> Self {
        match v {
            AttrValue::S(s) => Self::S(s),
            AttrValue::N(n) => Self::N(n),
            AttrValue::Null => Self::Null,
            _ => Self::Other,
        }
    }
}

/// What a compactable row of one group holds, evaluated once per group.
#[derive(Debug, Clone)]
pub struct RowShape {
    license_arn: String,
    /// `account#dimension#YYYY-MM-DDTHH`.
    prefix: String,
    account: String,
    dimension: String,
    legacy: bool,
}

/// Which attribute the fold reads a name is, if any.
#[derive(Clone, Copy)]
enum Slot {
    Pending,
    License,
    SortKey,
    Account,
    Identifier,
    Dimension,
    Quantity,
    Allocations,
}

fn slot(name: &str) -> Option<Slot> {
    // The eight names have eight different lengths (as in `RowView::of`).
    const PENDING: usize = attrs::METERING_PENDING.len();
    const LICENSE: usize = attrs::LICENSE_ARN.len();
    const SORT_KEY: usize = attrs::USAGE_SORT_KEY.len();
    const ACCOUNT: usize = attrs::CUSTOMER_AWS_ACCOUNT_ID.len();
    const IDENTIFIER: usize = attrs::CUSTOMER_IDENTIFIER.len();
    const DIMENSION: usize = attrs::DIMENSION.len();
    const QUANTITY: usize = attrs::QUANTITY.len();
    const ALLOCATIONS: usize = attrs::USAGE_ALLOCATIONS.len();
    let (wanted, slot) = match name.len() {
        PENDING => (attrs::METERING_PENDING, Slot::Pending),
        LICENSE => (attrs::LICENSE_ARN, Slot::License),
        SORT_KEY => (attrs::USAGE_SORT_KEY, Slot::SortKey),
        ACCOUNT => (attrs::CUSTOMER_AWS_ACCOUNT_ID, Slot::Account),
        IDENTIFIER => (attrs::CUSTOMER_IDENTIFIER, Slot::Identifier),
        DIMENSION => (attrs::DIMENSION, Slot::Dimension),
        QUANTITY => (attrs::QUANTITY, Slot::Quantity),
        ALLOCATIONS => (attrs::USAGE_ALLOCATIONS, Slot::Allocations),
        _ => return None,
    };
    same_bytes(name.as_bytes(), wanted.as_bytes()).then_some(slot)
}

impl RowShape {
    /// The shape of `group`'s conforming rows; `None` when its rows are never compacted (a
    /// partition key that is neither a license ARN nor a product code, or a `#` in the
    /// account, where a key's segments are not the prefix's).
    pub fn of(group: &GroupKey) -> Option<Self> {
        let legacy = partition_is_legacy(&group.license_arn)?;
        (!group.customer_aws_account_id.contains('#')).then(|| Self {
            license_arn: group.license_arn.clone(),
            prefix: group.usage_prefix(),
            account: group.customer_aws_account_id.clone(),
            dimension: group.dimension.clone(),
            legacy,
        })
    }

    /// The compact form of the row with these attributes, when it has one.
    pub fn compact<'a>(
        &self,
        attributes: impl IntoIterator<Item = (&'a str, AttrRef<'a>)>,
    ) -> Option<CompactRow> {
        let (mut pending, mut license, mut identity, mut dimension) = (false, false, false, false);
        let (mut second, mut quantity) = (None, None);
        for (name, value) in attributes {
            if matches!(value, AttrRef::Null) {
                continue;
            }
            let Some(slot) = slot(name) else { continue };
            let s = match value {
                AttrRef::S(s) => Some(s),
                _ => None,
            };
            let is = |want: &str| s.is_some_and(|s| same_bytes(s.as_bytes(), want.as_bytes()));
            let ok = match slot {
                Slot::Pending => {
                    pending = true;
                    true
                }
                Slot::License => {
                    license = true;
                    is(&self.license_arn)
                }
                Slot::SortKey => {
                    second = Some(self.second_of(s?)?);
                    true
                }
                Slot::Account | Slot::Identifier => {
                    identity = true;
                    matches!(slot, Slot::Identifier) == self.legacy && is(&self.account)
                }
                Slot::Dimension => {
                    dimension = true;
                    is(&self.dimension)
                }
                Slot::Quantity => {
                    let AttrRef::N(n) = value else { return None };
                    quantity = Some(canonical_quantity(n)?);
                    true
                }
                Slot::Allocations => false,
            };
            if !ok {
                return None;
            }
        }
        (pending && license && identity && dimension).then_some(())?;
        Some(CompactRow {
            second: second?,
            quantity: quantity?,
            legacy: self.legacy,
        })
    }

    /// `row` compacted when it can be, else as it is.
    pub fn usage_row(shape: Option<&Self>, row: RawUsageRow) -> UsageRow {
        let compact =
            shape.and_then(|s| s.compact(row.iter().map(|(k, v)| (k.as_str(), AttrRef::of(v)))));
        match compact {
            Some(c) => UsageRow::Compact(c),
            None => UsageRow::Raw(row),
        }
    }

    /// The second of `prefix:MM:SS`.
    fn second_of(&self, sort_key: &str) -> Option<u32> {
        super::conforming::second_of(&self.prefix, sort_key)
    }
}

/// The value of `n` when it is written as [`AttrValue::n`] writes it (plain digits, no
/// leading zero) and at most [`MAX_USAGE_QUANTITY`]: then the rebuilt row holds the same text.
fn canonical_quantity(n: &str) -> Option<u64> {
    let b = n.as_bytes();
    let plain = !b.is_empty() && b.len() <= 10 && b.iter().all(u8::is_ascii_digit);
    if !plain || (b.len() > 1 && b[0] == b'0') {
        return None;
    }
    let q = b
        .iter()
        .fold(0u64, |acc, &c| acc * 10 + u64::from(c - b'0'));
    (q <= MAX_USAGE_QUANTITY).then_some(q)
}
