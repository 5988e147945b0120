//! The row-level guardrails, in [`RejectReason`] order: sort key, timestamp, quantity,
//! allocations, dimension, time window, identity. The group-level checks are in
//! [`super::group`].

use chrono::{DateTime, Utc};

use super::RowView;
use super::allocations::{BorrowedTags, parse_allocations};
use awsmp_contract::attrs;
use awsmp_contract::ids::{is_valid_account_id, is_valid_license_arn, is_valid_product_code};
use awsmp_contract::keys::{GroupKey, LICENSE_ARN_PREFIX, SortKeySegments};
use awsmp_contract::limits::marketplace::MAX_USAGE_QUANTITY;
use awsmp_contract::row::{AttrValue, NumberError, parse_non_negative_integer};
use awsmp_contract::status::RejectReason::{self, *};
use awsmp_contract::time::{TimeConfig, is_billable};

/// A reason with its detail, as found on one row or the group.
#[derive(Debug)]
pub(super) struct Finding {
    pub(super) reason: RejectReason,
    pub(super) detail: String,
}

pub(super) fn finding(reason: RejectReason, detail: impl Into<String>) -> Finding {
    Finding {
        reason,
        detail: detail.into(),
    }
}

/// Per-row facts once the row passed every row-level check up to identity.
pub(super) struct RowFacts<'r> {
    pub(super) quantity: u64,
    pub(super) allocations: Option<Vec<(BorrowedTags<'r>, u64)>>,
    /// The row's allocations do not sum to its quantity (ranked after the group-level checks).
    pub(super) sum_mismatch: Option<String>,
}

/// Pre-computed identity verdict for the group's partition key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PartitionKind {
    ConcurrentAgreements,
    Legacy,
    Invalid,
}

impl PartitionKind {
    fn of(partition_key: &str) -> Self {
        if partition_key.starts_with(LICENSE_ARN_PREFIX) {
            if is_valid_license_arn(partition_key) {
                Self::ConcurrentAgreements
            } else {
                Self::Invalid
            }
        } else if is_valid_product_code(partition_key) {
            Self::Legacy
        } else {
            Self::Invalid
        }
    }
}

/// Whether rows of the partition `partition_key` name their customer by `customerIdentifier`
/// (a product code, `Some(true)`) or `customerAWSAccountId` (a license ARN, `Some(false)`);
/// `None` for a partition key that is neither.
pub(super) fn partition_is_legacy(partition_key: &str) -> Option<bool> {
    match PartitionKind::of(partition_key) {
        PartitionKind::Legacy => Some(true),
        PartitionKind::ConcurrentAgreements => Some(false),
        PartitionKind::Invalid => None,
    }
}

/// What the row checks know about the group, evaluated once at `now`.
#[derive(Debug)]
pub(super) struct RowChecks {
    now: DateTime<Utc>,
    /// Whole seconds from the group's hour start to `now`, floored: a whole-second timestamp
    /// `second` into the hour is after `now` exactly when `second > now_second`.
    now_second: i64,
    kind: PartitionKind,
    bucket_billable: bool,
}

impl RowChecks {
    pub(super) fn new(group: &GroupKey, now: DateTime<Utc>, cfg: &TimeConfig) -> Self {
        Self {
            now,
            now_second: now.timestamp() - group.hour.start().timestamp(),
            kind: PartitionKind::of(&group.license_arn),
            bucket_billable: is_billable(group.hour, now, cfg),
        }
    }

    /// Whether the partition is a product code (`Some(true)`) or a license ARN
    /// (`Some(false)`); `None` for a partition key that is neither.
    pub(super) fn is_legacy(&self) -> Option<bool> {
        match self.kind {
            PartitionKind::Legacy => Some(true),
            PartitionKind::ConcurrentAgreements => Some(false),
            PartitionKind::Invalid => None,
        }
    }

    /// The hour's bucket is inside the billable window at `now`.
    pub(super) fn bucket_billable(&self) -> bool {
        self.bucket_billable
    }

    /// Whole seconds from the hour's start to `now`, floored.
    pub(super) fn now_second(&self) -> i64 {
        self.now_second
    }

    /// The row-level checks, in reason order, up to (not including) the group-level ones.
    pub(super) fn check<'r>(
        &self,
        group: &GroupKey,
        row: &RowView<'r>,
        segments: &SortKeySegments<'_>,
        second: Option<u32>,
    ) -> Result<RowFacts<'r>, Finding> {
        self.check_sort_key(row, segments)?;
        let Some(second) = second else {
            return Err(finding(
                MalformedTimestamp,
                format!(
                    "timestamp segment {:?} is not whole-second YYYY-MM-DDTHH:MM:SS",
                    segments.timestamp
                ),
            ));
        };
        let quantity = check_quantity(row.quantity)?;
        let allocations = match row.allocations {
            None => None,
            Some(v) => Some(parse_allocations(v)?),
        };
        self.check_placement(group, row, segments, second)?;
        self.check_identity(group, row)?;
        let sum_mismatch = allocations
            .as_deref()
            .and_then(|allocs| sum_mismatch(quantity, allocs));
        Ok(RowFacts {
            quantity,
            allocations,
            sum_mismatch,
        })
    }

    /// SortKeyMismatch: a present attribute must equal its segment (an absent one is
    /// reported by its own Missing* reason further down).
    fn check_sort_key(
        &self,
        row: &RowView<'_>,
        segments: &SortKeySegments<'_>,
    ) -> Result<(), Finding> {
        let (account_attr, account) = if self.kind == PartitionKind::Legacy {
            (attrs::CUSTOMER_IDENTIFIER, row.customer_identifier)
        } else {
            (attrs::CUSTOMER_AWS_ACCOUNT_ID, row.account)
        };
        if let Some(v) = account
            && v.as_s() != Some(segments.account)
        {
            return Err(finding(
                SortKeyMismatch,
                format!(
                    "{account_attr} {v:?} differs from sort-key segment {:?}",
                    segments.account
                ),
            ));
        }
        if let Some(v) = row.dimension
            && v.as_s() != Some(segments.dimension)
        {
            return Err(finding(
                SortKeyMismatch,
                format!(
                    "dimension {v:?} differs from sort-key segment {:?}",
                    segments.dimension
                ),
            ));
        }
        Ok(())
    }

    /// MissingDimension, TimestampInFuture, TimestampOutOfWindow.
    fn check_placement(
        &self,
        group: &GroupKey,
        row: &RowView<'_>,
        segments: &SortKeySegments<'_>,
        second: u32,
    ) -> Result<(), Finding> {
        if row
            .dimension
            .and_then(AttrValue::as_s)
            .is_none_or(str::is_empty)
        {
            return Err(finding(MissingDimension, "dimension is missing or empty"));
        }
        if i64::from(second) > self.now_second {
            return Err(finding(
                TimestampInFuture,
                format!(
                    "timestamp {} is after now {}",
                    segments.timestamp,
                    self.now.format("%Y-%m-%dT%H:%M:%S")
                ),
            ));
        }
        if !self.bucket_billable {
            return Err(finding(
                TimestampOutOfWindow,
                format!(
                    "hour {} is outside the billable window at {}",
                    group.hour,
                    self.now.format("%Y-%m-%dT%H:%M:%S")
                ),
            ));
        }
        Ok(())
    }

    /// InvalidLicenseArn, MissingCustomerAWSAccountId, MissingLegacyIdentifier.
    fn check_identity(&self, group: &GroupKey, row: &RowView<'_>) -> Result<(), Finding> {
        match self.kind {
            PartitionKind::Invalid => Err(finding(
                InvalidLicenseArn,
                format!(
                    "partition key {:?} is neither a license ARN nor a product code",
                    group.license_arn
                ),
            )),
            PartitionKind::ConcurrentAgreements => {
                let account = row.account.and_then(AttrValue::as_s);
                if account.is_some_and(is_valid_account_id) {
                    Ok(())
                } else {
                    Err(finding(
                        MissingCustomerAWSAccountId,
                        format!("customerAWSAccountId {account:?} is not a 12-digit account id"),
                    ))
                }
            }
            PartitionKind::Legacy => {
                if row
                    .customer_identifier
                    .and_then(AttrValue::as_s)
                    .is_none_or(str::is_empty)
                {
                    Err(finding(
                        MissingLegacyIdentifier,
                        "legacy (product-code) row without a customerIdentifier",
                    ))
                } else {
                    Ok(())
                }
            }
        }
    }
}

/// NonNumericQuantity, NonIntegerQuantity, NegativeQuantity, QuantityOverflow.
fn check_quantity(v: Option<&AttrValue>) -> Result<u64, Finding> {
    match v {
        None => Err(finding(NonNumericQuantity, "quantity is missing")),
        Some(AttrValue::N(n)) => match parse_non_negative_integer(n) {
            Ok(q) if q <= MAX_USAGE_QUANTITY => Ok(q),
            Ok(_) | Err(NumberError::Overflow) => Err(finding(
                QuantityOverflow,
                format!("quantity {n} exceeds the BatchMeterUsage maximum {MAX_USAGE_QUANTITY}"),
            )),
            Err(NumberError::NonNumeric) => Err(finding(
                NonNumericQuantity,
                format!("quantity {n:?} is not a number"),
            )),
            Err(NumberError::NonInteger) => Err(finding(
                NonIntegerQuantity,
                format!("quantity {n} is not an integer"),
            )),
            Err(NumberError::Negative) => Err(finding(
                NegativeQuantity,
                format!("quantity {n} is negative"),
            )),
        },
        Some(other) => Err(finding(
            NonNumericQuantity,
            format!("quantity {other:?} is not a number"),
        )),
    }
}

/// The detail of a row whose allocations do not sum to its quantity.
fn sum_mismatch(quantity: u64, allocations: &[(BorrowedTags<'_>, u64)]) -> Option<String> {
    let sum = allocations
        .iter()
        .try_fold(0u64, |acc, (_, q)| acc.checked_add(*q));
    (sum != Some(quantity)).then(|| match sum {
        Some(s) => format!("allocations sum to {s}, quantity is {quantity}"),
        None => format!("allocations overflow, quantity is {quantity}"),
    })
}
