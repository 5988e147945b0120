//! Errors of the pure domain. These are input errors (a malformed bucket string, an invalid
//! configuration, an adapter feeding the same row twice); none is retryable by waiting.

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
}
