//! The `meteringStatus` domains and the client-side guardrail reasons, exactly as the AWS
//! reference pipeline spells them (docs/operations.md lists each with its meaning), plus awsmp's
//! named additions. Other reason codes are in [`super::reasons`].

use std::fmt;
use std::str::FromStr;

/// Client-side guardrail reason codes, declared in the exact order they are checked: the
/// derived `Ord` *is* the precedence (smaller wins). `QuantityOverflow` is awsmp's addition:
/// a quantity or group sum that does not fit `BatchMeterUsage`'s 32-bit `Quantity` (or `u64`)
/// is rejected by name, never wrapped or clamped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RejectReason {
    /// Sort key empty or fewer than three `#` segments.
    MalformedSortKey,
    /// Account or dimension segment differs from the row's own attribute.
    SortKeyMismatch,
    /// Timestamp segment is not an exact whole-second `YYYY-MM-DDTHH:MM:SS`.
    MalformedTimestamp,
    /// `quantity` absent or not a number.
    NonNumericQuantity,
    /// `quantity` has a fractional part.
    NonIntegerQuantity,
    /// `quantity` is negative.
    NegativeQuantity,
    /// A quantity, allocation or group sum beyond `BatchMeterUsage`'s maximum (awsmp addition).
    QuantityOverflow,
    /// `usageAllocations` not in the `UsageAllocation` shape.
    MalformedAllocations,
    /// An `AllocatedUsageQuantity` that is negative, fractional or not a number.
    NegativeOrNonIntegerAllocation,
    /// More than 5 tags on one allocation.
    TooManyTags,
    /// A tag without a non-empty key or value.
    MissingTagKeyOrValue,
    /// A tag key over 100 or a value over 256 characters (the API's `Tag` lengths).
    TagKeyOrValueTooLong,
    /// A tag key or value with a character outside the API's `Tag` pattern.
    InvalidTagCharacters,
    /// `dimension` absent or empty.
    MissingDimension,
    /// Row timestamp later than now.
    TimestampInFuture,
    /// Row hour outside the billable window (month-end grace included).
    TimestampOutOfWindow,
    /// Partition key is neither a well-formed license ARN nor a legacy product code.
    InvalidLicenseArn,
    /// Concurrent-Agreements row without a valid 12-digit `customerAWSAccountId`.
    MissingCustomerAWSAccountId,
    /// Legacy (product-code partition key) row without a `customerIdentifier`.
    MissingLegacyIdentifier,
    /// Some non-zero rows carry allocations and others do not.
    MixedAllocatedAndUnallocated,
    /// More than 2,500 merged tag sets.
    TooManyAllocations,
    /// A row's allocations do not sum to its quantity (or the merge differs from the total).
    AllocationSumMismatch,
}

impl RejectReason {
    /// Every reason, in check order.
    pub const ALL: [RejectReason; 22] = [
        Self::MalformedSortKey,
        Self::SortKeyMismatch,
        Self::MalformedTimestamp,
        Self::NonNumericQuantity,
        Self::NonIntegerQuantity,
        Self::NegativeQuantity,
        Self::QuantityOverflow,
        Self::MalformedAllocations,
        Self::NegativeOrNonIntegerAllocation,
        Self::TooManyTags,
        Self::MissingTagKeyOrValue,
        Self::TagKeyOrValueTooLong,
        Self::InvalidTagCharacters,
        Self::MissingDimension,
        Self::TimestampInFuture,
        Self::TimestampOutOfWindow,
        Self::InvalidLicenseArn,
        Self::MissingCustomerAWSAccountId,
        Self::MissingLegacyIdentifier,
        Self::MixedAllocatedAndUnallocated,
        Self::TooManyAllocations,
        Self::AllocationSumMismatch,
    ];

    /// The code as stored in `meteringStatusReason` and used as the metric `Reason` dimension.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::MalformedSortKey => "MalformedSortKey",
            Self::SortKeyMismatch => "SortKeyMismatch",
            Self::MalformedTimestamp => "MalformedTimestamp",
            Self::NonNumericQuantity => "NonNumericQuantity",
            Self::NonIntegerQuantity => "NonIntegerQuantity",
            Self::NegativeQuantity => "NegativeQuantity",
            Self::QuantityOverflow => "QuantityOverflow",
            Self::MalformedAllocations => "MalformedAllocations",
            Self::NegativeOrNonIntegerAllocation => "NegativeOrNonIntegerAllocation",
            Self::TooManyTags => "TooManyTags",
            Self::MissingTagKeyOrValue => "MissingTagKeyOrValue",
            Self::TagKeyOrValueTooLong => "TagKeyOrValueTooLong",
            Self::InvalidTagCharacters => "InvalidTagCharacters",
            Self::MissingDimension => "MissingDimension",
            Self::TimestampInFuture => "TimestampInFuture",
            Self::TimestampOutOfWindow => "TimestampOutOfWindow",
            Self::InvalidLicenseArn => "InvalidLicenseArn",
            Self::MissingCustomerAWSAccountId => "MissingCustomerAWSAccountId",
            Self::MissingLegacyIdentifier => "MissingLegacyIdentifier",
            Self::MixedAllocatedAndUnallocated => "MixedAllocatedAndUnallocated",
            Self::TooManyAllocations => "TooManyAllocations",
            Self::AllocationSumMismatch => "AllocationSumMismatch",
        }
    }
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RejectReason {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| format!("unknown reject reason {s:?}"))
    }
}

/// The `meteringStatusReason` for a successfully aggregated raw row (exact reference text).
///
/// ```
/// assert_eq!(
///     awsmp_contract::status::aggregated_reason(42, 3),
///     "Aggregated total quantity 42 from 3 raw usage records"
/// );
/// ```
pub fn aggregated_reason(total: u64, row_count: u32) -> String {
    format!("Aggregated total quantity {total} from {row_count} raw usage records")
}

/// Terminal `meteringStatus` of a raw usage row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RawStatus {
    /// Folded into an aggregated record.
    Aggregated,
    /// Rejected by a guardrail (or late after aggregation); never submitted.
    RejectedClientSide,
    /// Still pending when its hour left the billable window.
    AggregationExpired,
}

impl RawStatus {
    /// Stored spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Aggregated => "Aggregated",
            Self::RejectedClientSide => "RejectedClientSide",
            Self::AggregationExpired => "AggregationExpired",
        }
    }
}

impl fmt::Display for RawStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RawStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            Self::Aggregated,
            Self::RejectedClientSide,
            Self::AggregationExpired,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
        .ok_or_else(|| format!("unknown raw status {s:?}"))
    }
}

/// Terminal `meteringStatus` of an aggregated record. There is no "unprocessed" status:
/// unprocessed records stay pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AggregatedStatus {
    /// Billed (`Success`, or a recognised replay of our own earlier accepted attempt).
    Success,
    /// `DuplicateRecord` for a record we never sent before: someone else billed this hour.
    DuplicateRecord,
    /// `CustomerNotSubscribed`: terminal, not retried.
    CustomerNotSubscribed,
    /// Isolated request-level error; the exception name is in `meteringStatusReason`.
    Error,
    /// Not submitted before the hour left the billable window.
    SubmissionExpired,
    /// Dry-run mode: never sent.
    DryRunSubmitted,
    /// Possibly billed: the hour left the window (or AWS refused it) with an attempt on file
    /// whose outcome was never seen; an operator must reconcile it against AWS's records
    /// (awsmp addition; never reported as billed nor as expired).
    NeedsReconciliation,
    /// `DuplicateRecord` after we had sent a *different* quantity for the hour: the billed
    /// quantity is not ours (awsmp addition; never reported as success).
    DuplicateRecordQuantityMismatch,
}

impl AggregatedStatus {
    /// Stored spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Success => "Success",
            Self::DuplicateRecord => "DuplicateRecord",
            Self::CustomerNotSubscribed => "CustomerNotSubscribed",
            Self::Error => "Error",
            Self::SubmissionExpired => "SubmissionExpired",
            Self::DryRunSubmitted => "DryRunSubmitted",
            Self::NeedsReconciliation => "NeedsReconciliation",
            Self::DuplicateRecordQuantityMismatch => "DuplicateRecordQuantityMismatch",
        }
    }

    /// True when the record's usage counts as billed.
    pub const fn is_billed(self) -> bool {
        matches!(self, Self::Success)
    }
}

impl fmt::Display for AggregatedStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AggregatedStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            Self::Success,
            Self::DuplicateRecord,
            Self::CustomerNotSubscribed,
            Self::Error,
            Self::SubmissionExpired,
            Self::DryRunSubmitted,
            Self::NeedsReconciliation,
            Self::DuplicateRecordQuantityMismatch,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
        .ok_or_else(|| format!("unknown aggregated status {s:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_in_declared_check_order_and_round_trip() {
        let mut sorted = RejectReason::ALL;
        sorted.sort();
        assert_eq!(sorted, RejectReason::ALL);
        for r in RejectReason::ALL {
            assert_eq!(r.as_str().parse::<RejectReason>(), Ok(r));
            assert_eq!(r.to_string(), format!("{r:?}"));
        }
        assert!(RejectReason::MalformedSortKey < RejectReason::AllocationSumMismatch);
        assert!("Unknown".parse::<RejectReason>().is_err());
    }

    #[test]
    fn statuses_round_trip() {
        for s in ["Aggregated", "RejectedClientSide", "AggregationExpired"] {
            assert_eq!(s.parse::<RawStatus>().unwrap().as_str(), s);
        }
        for s in [
            "Success",
            "DuplicateRecord",
            "CustomerNotSubscribed",
            "Error",
            "SubmissionExpired",
            "DryRunSubmitted",
            "NeedsReconciliation",
            "DuplicateRecordQuantityMismatch",
        ] {
            assert_eq!(s.parse::<AggregatedStatus>().unwrap().to_string(), s);
        }
        assert!("Unprocessed".parse::<AggregatedStatus>().is_err());
        assert!(AggregatedStatus::Success.is_billed());
        assert!(!AggregatedStatus::DuplicateRecordQuantityMismatch.is_billed());
    }
}
