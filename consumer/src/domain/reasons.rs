//! Reason codes the consumer records with a rejected event (the rejected-events store's
//! `reason`, the `EventRejected` metric's `Reason` dimension). Decode failures use the
//! producer's stable codes ([`awsmp_producer::DecodeError::reason`]: `Md5Mismatch`,
//! `InvalidJson`, `UnknownVersion`, `NonIntegerQuantity`, …); these are the consumer's own.

/// The record itself is unusable: no shard id in its event id, a malformed sequence number.
pub const MALFORMED_STREAM_RECORD: &str = "MalformedStreamRecord";
/// Client time more than the allowed skew before the arrival time.
pub const STALE_TIMESTAMP: &str = "StaleTimestamp";
/// Client time more than the allowed skew after the arrival time.
pub const FUTURE_TIMESTAMP: &str = "FutureTimestamp";
/// Trusted-client policy: the client's hour is outside the billable window at arrival.
pub const TIMESTAMP_OUT_OF_WINDOW: &str = "TimestampOutOfWindow";
/// A producer allowlist is configured and the event's producer is not on it.
pub const UNKNOWN_PRODUCER: &str = "UnknownProducer";
/// An event, or a row with it, would exceed the BatchMeterUsage quantity maximum.
pub const QUANTITY_OVERFLOW: &str = "QuantityOverflow";
/// The row's group-hour is already finalized by the pipeline.
pub const LATE_USAGE: &str = "LateUsage";
/// The row already holds non-zero usage of the other kind (allocated vs unallocated).
pub const MIXED_ALLOCATED_AND_UNALLOCATED: &str = "MixedAllocatedAndUnallocated";
/// The row would carry more than 2,500 distinct tag sets.
pub const TOO_MANY_ALLOCATIONS: &str = "TooManyAllocations";
/// A row not written by the consumer holds a quantity or allocations it cannot add to.
pub const EXISTING_ROW_MALFORMED: &str = "ExistingRowMalformed";
