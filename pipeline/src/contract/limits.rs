//! AWS limits the consumer and the pipeline enforce. One constant per limit; the event-level
//! allocation limits are the producer's own (it validates events against the same API), so
//! the three crates cannot disagree.

/// At most 5 tags per `UsageAllocation` (BatchMeterUsage `Tags`: 1–5 items,
/// <https://docs.aws.amazon.com/marketplacemetering/latest/APIReference/API_UsageAllocation.html>).
pub use awsmp_producer::event::MAX_TAGS_PER_ALLOCATION;

/// At most 2,500 `UsageAllocations` (merged tag sets) per `UsageRecord`
/// (<https://docs.aws.amazon.com/marketplacemetering/latest/APIReference/API_UsageRecord.html>).
pub use awsmp_producer::event::MAX_ALLOCATIONS_PER_RECORD;

/// `UsageRecord.Quantity` and `AllocatedUsageQuantity` are 32-bit integers, 0–2,147,483,647
/// (<https://docs.aws.amazon.com/marketplacemetering/latest/APIReference/API_UsageRecord.html>);
/// a larger event, row or hour total cannot be submitted.
pub const MAX_USAGE_QUANTITY: u64 = i32::MAX as u64;

/// `BatchMeterUsage` accepts up to 25 `UsageRecords` per call
/// (<https://docs.aws.amazon.com/marketplacemetering/latest/APIReference/API_BatchMeterUsage.html>).
pub const MAX_USAGE_RECORDS_PER_CALL: usize = 25;

/// `BatchMeterUsage` quota: about 10 calls per second per account and region, shared by every
/// product metered there (AWS Marketplace Metering Service quotas,
/// <https://docs.aws.amazon.com/marketplace/latest/userguide/metering-service-quotas.html>).
pub const BATCH_METER_USAGE_CALLS_PER_SECOND: u32 = 10;

/// `BatchMeterUsage` rejects request payloads over 1 MB (docs/metering-api.md, "Batch limits").
pub const MAX_REQUEST_BYTES: usize = 1_048_576;

/// Cleanup messages carry at most 100 raw-row keys: our bound, far below SQS's 256 KiB message
/// size (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-messages.html>)
/// even for the longest keys.
pub const MAX_CLEANUP_KEYS_PER_MESSAGE: usize = 100;
