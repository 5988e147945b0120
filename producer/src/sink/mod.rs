//! The PutRecords port ([`RecordSink`]) between batching and the SDK, and its adapters:
//! [`KinesisRecordSink`] over `aws-sdk-kinesis`, [`MemoryRecordSink`] that keeps what it is sent,
//! and [`FaultInjectingRecordSink`] that wraps any sink with seeded faults.

mod fault;
mod kinesis;
mod memory;

use std::future::Future;

use bytes::Bytes;

pub use fault::{FaultConfig, FaultCounts, FaultInjectingRecordSink};
pub use kinesis::{KinesisRecordSink, classify_put_records_error, interpret_put_records_output};
pub use memory::{MemoryRecordSink, StoredRecord};

/// One Kinesis record to put.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutEntry {
    /// Record data (an aggregate or one v1 payload).
    pub data: Bytes,
    /// Partition key.
    pub partition_key: String,
    /// Explicit hash key (decimal 128-bit integer) that routes the record to a chosen shard.
    pub explicit_hash_key: Option<String>,
}

impl PutEntry {
    /// Bytes the record counts against Kinesis limits: data plus partition key.
    pub fn billed_size(&self) -> usize {
        self.data.len() + self.partition_key.len()
    }
}

/// What happened to one entry of a PutRecords call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryOutcome {
    /// Stored on `shard_id`.
    Ok {
        /// The shard that took the record.
        shard_id: String,
        /// Its sequence number.
        sequence_number: String,
    },
    /// `ProvisionedThroughputExceededException` for this entry: retry later, not an error.
    Throttled,
    /// Any other per-entry failure.
    Failed {
        /// Error code (e.g. `InternalFailure`).
        code: String,
        /// Error message.
        message: String,
        /// Whether resending can succeed.
        retryable: bool,
    },
}

/// The underlying error of a [`SinkError`] (an SDK error, a parse error…), kept as its source.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a whole PutRecords call failed. `message` says what happened on our side; the error that
/// caused it (an SDK error) is the `source`, never copied into the message.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The call was throttled as a whole (`ProvisionedThroughputExceeded`, `KMSThrottling`, …).
    #[error("PutRecords throttled: {message}")]
    Throttled {
        /// What happened.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
    /// Transient: timeout, connection error, 5xx, a response that could not be read. The call
    /// may or may not have been applied.
    #[error("transient PutRecords failure: {message}")]
    Transient {
        /// What happened.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
    /// The stream does not exist (or is not visible): re-learn shards; the records go back to
    /// the caller.
    #[error("stream not found: {message}")]
    ResourceNotFound {
        /// What happened.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
    /// Permanent: access denied, invalid argument, KMS key disabled…
    #[error("PutRecords rejected: {message}")]
    Rejected {
        /// What happened.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
}

impl SinkError {
    /// Whether resending the same entries can succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            SinkError::Throttled { .. } | SinkError::Transient { .. }
        )
    }

    /// Whether the call may have been applied although it reported failure (a lost response):
    /// resends then create duplicates, which are removed downstream.
    pub fn may_have_been_applied(&self) -> bool {
        matches!(self, SinkError::Transient { .. })
    }

    /// A throttled call, described by `message`, without an underlying error.
    pub fn throttled(message: impl Into<String>) -> Self {
        SinkError::Throttled {
            message: message.into(),
            source: None,
        }
    }

    /// A transient failure, described by `message`, without an underlying error.
    pub fn transient(message: impl Into<String>) -> Self {
        SinkError::Transient {
            message: message.into(),
            source: None,
        }
    }

    /// A permanent refusal, described by `message`, without an underlying error.
    pub fn rejected(message: impl Into<String>) -> Self {
        SinkError::Rejected {
            message: message.into(),
            source: None,
        }
    }

    /// Stable reason code.
    pub fn reason(&self) -> &'static str {
        match self {
            SinkError::Throttled { .. } => "Throttled",
            SinkError::Transient { .. } => "Transient",
            SinkError::ResourceNotFound { .. } => "ResourceNotFound",
            SinkError::Rejected { .. } => "Rejected",
        }
    }
}

/// What to retry is the sink's to say ([`SinkError::is_retryable`]); how, the shared policy's.
impl awsmp_contract::retry::Retryable for SinkError {
    fn is_retryable(&self) -> bool {
        SinkError::is_retryable(self)
    }
}

/// The PutRecords capability: send up to 500 entries, learn each entry's outcome.
///
/// On `Ok`, the vector has exactly one outcome per entry, in order.
pub trait RecordSink: Send + Sync + 'static {
    /// Puts `entries` (≤ [`awsmp_contract::limits::kinesis::MAX_RECORDS_PER_PUT`] entries, ≤
    /// [`awsmp_contract::limits::kinesis::MAX_BYTES_PER_PUT`] bytes).
    fn put_records(
        &self,
        entries: Vec<PutEntry>,
    ) -> impl Future<Output = Result<Vec<EntryOutcome>, SinkError>> + Send;
}

impl<S: RecordSink> RecordSink for std::sync::Arc<S> {
    fn put_records(
        &self,
        entries: Vec<PutEntry>,
    ) -> impl Future<Output = Result<Vec<EntryOutcome>, SinkError>> + Send {
        S::put_records(self, entries)
    }
}
