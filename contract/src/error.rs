//! The contract's errors: what the pure rules refuse ([`DomainError`]: a malformed bucket
//! string, an invalid configuration, an adapter feeding the same row twice), why an event
//! breaks the event rules ([`ValidationError`]) and why a record does not decode
//! ([`DecodeError`], [`V2Error`]). Every error that concerns one event carries a stable reason
//! code (`reason()`), the same strings the consumer records for rejected events. None is
//! retryable by waiting.

use thiserror::Error;

/// Everything the pure domain can refuse.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DomainError {
    /// Not an hour bucket of the exact form `YYYY-MM-DDTHH`.
    #[error("invalid hour bucket {0:?}: expected YYYY-MM-DDTHH (UTC)")]
    InvalidHourBucket(String),
    /// Not a whole-second UTC timestamp of the exact form `YYYY-MM-DDTHH:MM:SS`.
    #[error(
        "invalid timestamp {0:?}: expected whole-second YYYY-MM-DDTHH:MM:SS (UTC, no fraction, no zone)"
    )]
    InvalidTimestamp(String),
    /// A time configuration outside its documented bounds.
    #[error("invalid time configuration: {0}")]
    InvalidTimeConfig(String),
    /// An age-out shard outside `0..AGEOUT_SHARDS`.
    #[error("invalid age-out shard {0}: expected 0..=6")]
    InvalidShard(u32),
    /// A meter-mode hour offset outside `1..=23`.
    #[error("invalid hour offset {0}: expected 1..=23")]
    InvalidHourOffset(u32),
    /// A stored seconds bitmap of the wrong length.
    #[error("invalid contributed-seconds bitmap: {0} bytes, expected 450")]
    InvalidSecondSet(usize),
    /// Stored per-second quantities that do not match the record's contributing seconds.
    #[error("invalid contributed quantities: {bytes} bytes for {seconds} contributing seconds")]
    InvalidSecondQuantities {
        /// Bytes stored.
        bytes: usize,
        /// Contributing seconds in the bitmap.
        seconds: u32,
    },
    /// The same raw row (same sort key) was fed to one fold twice: an adapter bug (DynamoDB
    /// cannot hold two items with one key), refused rather than counted twice.
    #[error("raw row {0:?} was pushed into the fold twice")]
    DuplicateRow(String),
    /// A bisection report for a call that is not in flight.
    #[error("invalid bisection report: {0}")]
    InvalidBisection(String),
    /// A work message that is not valid JSON of the documented shape.
    #[error("invalid work message: {0}")]
    InvalidWorkMessage(String),
    /// An update expression DynamoDB would refuse for this item (`ValidationException`):
    /// `ADD` to an attribute that is not a number, a sum past 38 digits, two actions on one
    /// attribute.
    #[error("invalid update: {0}")]
    InvalidUpdate(String),
}

/// Why an event breaks the v1 event rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    /// Empty or overlong event id.
    #[error("invalid eventId: {0}")]
    InvalidEventId(String),
    /// Not `arn:<partition>:license-manager::<12 digits>:license:l-<32 lowercase hex>`.
    #[error(
        "licenseArn {0:?} is not arn:<partition>:license-manager::<12 digits>:license:l-<32 lowercase hex>"
    )]
    InvalidLicenseArn(String),
    /// Not exactly 12 ASCII digits.
    #[error("customerAWSAccountId {0:?} is not 12 digits")]
    InvalidAccountId(String),
    /// Empty dimension.
    #[error("dimension is empty")]
    EmptyDimension,
    /// A dimension longer than [`MAX_DIMENSION_BYTES`](crate::event::MAX_DIMENSION_BYTES).
    #[error("dimension is {0} bytes, more than {max}", max = crate::event::MAX_DIMENSION_BYTES)]
    DimensionTooLong(usize),
    /// Timestamp that cannot be carried (year outside 1970–9999).
    #[error("malformed timestamp: {0}")]
    MalformedTimestamp(String),
    /// `producerId: ""`.
    #[error("producerId is empty (omit it instead)")]
    EmptyProducerId,
    /// Allocation list structure is wrong (empty list, allocation without tags, bad JSON shape).
    #[error("malformed usageAllocations: {0}")]
    MalformedAllocations(String),
    /// More than 5 tags on one allocation.
    #[error("allocation {allocation} has {tags} tags, more than 5")]
    TooManyTags {
        /// Index of the allocation.
        allocation: usize,
        /// Its tag count.
        tags: usize,
    },
    /// A tag with an empty key or value.
    #[error("allocation {allocation} has a tag with an empty key or value")]
    MissingTagKeyOrValue {
        /// Index of the allocation.
        allocation: usize,
    },
    /// More than 2,500 allocations.
    #[error("{0} allocations, more than 2500")]
    TooManyAllocations(usize),
    /// Allocated quantities do not add up to the event quantity.
    #[error("allocations sum to {sum}, quantity is {quantity}")]
    AllocationSumMismatch {
        /// Sum of allocated quantities.
        sum: u128,
        /// The event quantity.
        quantity: u64,
    },
    /// The encoded record (payload + partition key) would exceed a size limit.
    #[error("encoded event is {bytes} bytes, more than the limit of {limit}")]
    EventTooLarge {
        /// Encoded size.
        bytes: usize,
        /// The limit it breaks (the Kinesis record limit or the producer's buffer bound).
        limit: usize,
    },
}

impl ValidationError {
    /// Stable reason code.
    pub fn reason(&self) -> &'static str {
        match self {
            ValidationError::InvalidEventId(_) => "InvalidEventId",
            ValidationError::InvalidLicenseArn(_) => "InvalidLicenseArn",
            ValidationError::InvalidAccountId(_) => "InvalidAccountId",
            ValidationError::EmptyDimension => "EmptyDimension",
            ValidationError::DimensionTooLong(_) => "DimensionTooLong",
            ValidationError::MalformedTimestamp(_) => "MalformedTimestamp",
            ValidationError::EmptyProducerId => "EmptyProducerId",
            ValidationError::MalformedAllocations(_) => "MalformedAllocations",
            ValidationError::TooManyTags { .. } => "TooManyTags",
            ValidationError::MissingTagKeyOrValue { .. } => "MissingTagKeyOrValue",
            ValidationError::TooManyAllocations(_) => "TooManyAllocations",
            ValidationError::AllocationSumMismatch { .. } => "AllocationSumMismatch",
            ValidationError::EventTooLarge { .. } => "EventTooLarge",
        }
    }
}

/// Why bytes from the stream could not be turned into user records or events.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Data does not start with the KPL magic bytes (only from [`crate::wire::decode_aggregated`]).
    #[error("not a KPL aggregated record (magic bytes missing)")]
    BadMagic,
    /// Magic present but the record is too short to hold a protobuf body and an MD5 trailer.
    #[error("aggregated record truncated: {0} bytes")]
    Truncated(usize),
    /// The MD5 trailer does not match the protobuf body.
    #[error("aggregated record MD5 trailer does not match its body")]
    Md5Mismatch,
    /// The protobuf body does not decode, or indexes outside its tables.
    #[error("malformed aggregated record protobuf: {0}")]
    MalformedProtobuf(String),
    /// A well-formed aggregate holding no user records.
    #[error("aggregated record holds no user records")]
    EmptyAggregate,
    /// Not UTF-8 JSON, not an object, or trailing bytes.
    #[error("invalid JSON: {0}")]
    InvalidJson(String),
    /// `v` is missing from the known set (only 1 is known).
    #[error("unknown payload version {0}")]
    UnknownVersion(String),
    /// A field the version does not define.
    #[error("unknown field {0:?}")]
    UnknownField(String),
    /// The same field twice in one object.
    #[error("duplicate field {0:?}")]
    DuplicateField(String),
    /// A required field is absent.
    #[error("missing field {0}")]
    MissingField(&'static str),
    /// A field of the wrong JSON type (e.g. a number for a string field).
    #[error("field {field} must be {expected}")]
    WrongFieldType {
        /// The field.
        field: &'static str,
        /// What it must be.
        expected: &'static str,
    },
    /// `quantity` is a fraction, a string, or too large for a u64.
    #[error("quantity {0} is not a non-negative integer")]
    NonIntegerQuantity(String),
    /// `quantity` is a negative integer.
    #[error("quantity {0} is negative")]
    NegativeQuantity(String),
    /// An allocation quantity that is negative, fractional or not a number.
    #[error("AllocatedUsageQuantity {0} is not a non-negative integer")]
    NegativeOrNonIntegerAllocation(String),
    /// `timestamp` is not an RFC 3339 UTC instant.
    #[error("malformed timestamp: {0}")]
    MalformedTimestamp(String),
    /// The event decoded but breaks an event rule.
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    /// A binary (v2) user record that does not decode (docs/wire-format.md).
    #[error(transparent)]
    V2(#[from] V2Error),
}

/// Why a binary user record does not decode (docs/wire-format.md, "Refusals").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum V2Error {
    /// The first byte is a binary version other than 2.
    #[error("unknown wire version byte {0:#04x}")]
    UnknownVersion(u8),
    /// A varint or a length-delimited field runs past the end of the record.
    #[error("v2 record truncated: {0}")]
    Truncated(String),
    /// A varint longer than 10 bytes or above 64 bits.
    #[error("v2 record has a bad varint: {0}")]
    BadVarint(String),
    /// A ref whose entry index is outside the aggregate's table (or there is no table).
    #[error("v2 event refers to an unknown group: {0}")]
    UnknownGroup(String),
    /// Anything else: an unknown kind or field, a field twice, a missing field, not UTF-8.
    #[error("malformed v2 record: {0}")]
    Malformed(String),
}

impl V2Error {
    /// Stable reason code.
    pub fn reason(&self) -> &'static str {
        match self {
            V2Error::UnknownVersion(_) => "UnknownWireVersion",
            V2Error::Truncated(_) => "V2Truncated",
            V2Error::BadVarint(_) => "V2BadVarint",
            V2Error::UnknownGroup(_) => "V2UnknownGroup",
            V2Error::Malformed(_) => "V2Malformed",
        }
    }
}

impl DecodeError {
    /// Stable reason code.
    pub fn reason(&self) -> &'static str {
        match self {
            DecodeError::BadMagic => "BadMagic",
            DecodeError::Truncated(_) => "Truncated",
            DecodeError::Md5Mismatch => "Md5Mismatch",
            DecodeError::MalformedProtobuf(_) => "MalformedProtobuf",
            DecodeError::EmptyAggregate => "EmptyAggregate",
            DecodeError::InvalidJson(_) => "InvalidJson",
            DecodeError::UnknownVersion(_) => "UnknownVersion",
            DecodeError::UnknownField(_) => "UnknownField",
            DecodeError::DuplicateField(_) => "DuplicateField",
            DecodeError::MissingField(_) => "MissingField",
            DecodeError::WrongFieldType { .. } => "WrongFieldType",
            DecodeError::NonIntegerQuantity(_) => "NonIntegerQuantity",
            DecodeError::NegativeQuantity(_) => "NegativeQuantity",
            DecodeError::NegativeOrNonIntegerAllocation(_) => "NegativeOrNonIntegerAllocation",
            DecodeError::MalformedTimestamp(_) => "MalformedTimestamp",
            DecodeError::Invalid(v) => v.reason(),
            DecodeError::V2(v) => v.reason(),
        }
    }
}
