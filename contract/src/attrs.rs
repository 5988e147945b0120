//! DynamoDB attribute and index names of the usage and aggregated-usage tables
//! (docs/row-contract.md), and the format of their audit stamps. Spelled once here so the
//! pipeline's adapters and the consumer (the row writer) cannot drift apart.

use chrono::{DateTime, SecondsFormat, Utc};

/// Partition key of the usage and aggregated-usage tables.
pub const LICENSE_ARN: &str = "licenseArn";
/// Sort key of the usage table: `{account}#{dimension}#{YYYY-MM-DDTHH:MM:SS}`.
pub const USAGE_SORT_KEY: &str = "customerAWSAccountId_dimension_timestamp";
/// Sort key of the aggregated-usage table: `{account}#{dimension}#{YYYY-MM-DDTHH}`.
pub const AGGREGATED_SORT_KEY: &str = "account_dimension_hour";
/// Buyer account id (Concurrent Agreements), also a top-level attribute of every row.
pub const CUSTOMER_AWS_ACCOUNT_ID: &str = "customerAWSAccountId";
/// Legacy (pre-Concurrent-Agreements) customer identifier; only on rows whose partition key is
/// a product code rather than a license ARN.
pub const CUSTOMER_IDENTIFIER: &str = "customerIdentifier";
/// Pricing dimension.
pub const DIMENSION: &str = "dimension";
/// Whole-second UTC timestamp of a raw row (`YYYY-MM-DDTHH:MM:SS`).
pub const TIMESTAMP: &str = "timestamp";
/// Non-negative integer quantity.
pub const QUANTITY: &str = "quantity";
/// Optional Vendor Metered Tagging allocations in the `BatchMeterUsage` `UsageAllocation` shape.
pub const USAGE_ALLOCATIONS: &str = "usageAllocations";
/// Key of one allocation's quantity inside [`USAGE_ALLOCATIONS`].
pub const ALLOCATED_USAGE_QUANTITY: &str = "AllocatedUsageQuantity";
/// Key of one allocation's tag list inside [`USAGE_ALLOCATIONS`].
pub const TAGS: &str = "Tags";
/// Key of a tag's key.
pub const TAG_KEY: &str = "Key";
/// Key of a tag's value.
pub const TAG_VALUE: &str = "Value";
/// Sparse hour-bucket marker (`YYYY-MM-DDTHH`): present while a row / record is pending.
pub const METERING_PENDING: &str = "meteringPending";
/// Terminal status (see [`crate::status`]).
pub const METERING_STATUS: &str = "meteringStatus";
/// Reason text for [`METERING_STATUS`].
pub const METERING_STATUS_REASON: &str = "meteringStatusReason";
/// Hour bucket of an aggregated record (`YYYY-MM-DDTHH`).
pub const HOUR_BUCKET: &str = "hourBucket";
/// `MeteringRecordId` returned by `BatchMeterUsage`.
pub const METERING_RECORD_ID: &str = "meteringRecordId";
/// ISO-8601 UTC audit stamp ([`audit_timestamp`]), set once.
pub const CREATED_AT: &str = "createdAt";
/// ISO-8601 UTC audit stamp ([`audit_timestamp`]), refreshed on every write.
pub const UPDATED_AT: &str = "updatedAt";
/// Epoch-seconds TTL.
pub const TTL: &str = "ttl";
/// Consumer-owned usage-row attribute: incremented by every consumer write (its
/// compare-and-set guard). The pipeline never writes it.
pub const ROW_VERSION: &str = "rowVersion";
/// Prefix of the consumer-owned usage-row attributes that hold a lane's sequence watermark
/// (`seq#<lane>`). The pipeline never writes them.
pub const WATERMARK_ATTR_PREFIX: &str = "seq#";
/// Sparse GSI over [`METERING_PENDING`] on both the usage and the aggregated-usage table.
pub const METERING_PENDING_INDEX: &str = "metering_pending";

/// Aggregated record: number of raw rows folded into it.
pub const ROW_COUNT: &str = "rowCount";
/// Aggregated record: 450-byte bitmap of the seconds of the hour that contributed
/// (`awsmp_pipeline::domain::fold::SecondSet::to_bytes`), so a re-visit can tell a lost cleanup from
/// late usage.
pub const CONTRIBUTED_SECONDS: &str = "contributedSeconds";
/// Aggregated record: the folded quantity of each contributing second, ascending by second,
/// each an unsigned LEB128 varint (`awsmp_pipeline::domain::fold::SecondQuantities`); absent on records
/// written before it existed (docs/row-contract.md, "Aggregated record").
pub const CONTRIBUTED_QUANTITIES: &str = "contributedQuantities";
/// Aggregated record: the part of the group-hour's sum above the `BatchMeterUsage` `Quantity`
/// maximum, not billed, with reason [`crate::reasons::QUANTITY_ABOVE_API_MAXIMUM`].
pub const OVERFLOW_QUANTITY: &str = "overflowQuantity";
/// Aggregated record: the allocations of [`OVERFLOW_QUANTITY`] (same shape as `usageAllocations`).
pub const OVERFLOW_ALLOCATIONS: &str = "overflowAllocations";
/// Aggregated record: the reason of [`OVERFLOW_QUANTITY`].
pub const OVERFLOW_REASON: &str = "overflowReason";
/// Raw row, stamped by cleanup or a re-visit when the row holds more than was folded: the
/// quantity the aggregated record contains.
pub const FOLDED_QUANTITY: &str = "foldedQuantity";
/// Raw row: the quantity it holds beyond [`FOLDED_QUANTITY`], not billed (late usage).
pub const LATE_QUANTITY: &str = "lateQuantity";
/// Raw row: the reason of [`LATE_QUANTITY`] ([`crate::reasons::LATE_USAGE`]).
pub const LATE_REASON: &str = "lateReason";
/// Aggregated record: when the submitter last sent it ([`audit_timestamp`]), persisted *before* the
/// `BatchMeterUsage` call so a replay after a crash is recognised.
pub const SUBMISSION_ATTEMPTED_AT: &str = "submissionAttemptedAt";
/// Aggregated record: the quantity sent in that attempt.
pub const ATTEMPTED_QUANTITY: &str = "attemptedQuantity";
/// Aggregated record: how many attempt marks were written (1, 2, …; never decreases, a taken
/// back mark included), so a writer that read one attempt can require exactly that one.
pub const ATTEMPT_NUMBER: &str = "attemptNumber";

/// The value of [`CREATED_AT`], [`UPDATED_AT`] and [`SUBMISSION_ATTEMPTED_AT`]: ISO-8601 UTC
/// with milliseconds, every writer alike.
///
/// ```
/// use chrono::{TimeZone, Utc};
/// let t = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 9).unwrap();
/// assert_eq!(awsmp_contract::attrs::audit_timestamp(t), "2026-11-30T12:00:09.000Z");
/// ```
pub fn audit_timestamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}
