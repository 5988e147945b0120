//! The pipeline's error type.

use awsmp_contract::DomainError;
use awsmp_contract::keys::GroupKey;
use awsmp_contract::status::AggregatedStatus;

/// Boxed SDK error, kept as the source (never stringified) so callers can classify it.
pub type SdkError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong in a pipeline stage.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// A DynamoDB call failed.
    #[error("DynamoDB {operation} on {resource} failed")]
    DynamoDb {
        /// The API operation.
        operation: &'static str,
        /// Table (and index) name.
        resource: String,
        /// The SDK error.
        #[source]
        source: SdkError,
        /// Whether retrying later may succeed (throttling, 5xx, transport).
        retryable: bool,
    },
    /// An SQS call failed, or some entries of a batch call failed.
    #[error("SQS {operation} on {queue} failed: {detail}")]
    Sqs {
        /// The API operation.
        operation: &'static str,
        /// Queue URL.
        queue: String,
        /// What failed (e.g. the failed batch entry ids).
        detail: String,
        /// The SDK error, if the whole call failed.
        #[source]
        source: Option<SdkError>,
    },
    /// A stored item does not have the shape awsmp writes.
    #[error("malformed item in {table}: {detail}")]
    MalformedItem {
        /// Table name.
        table: String,
        /// What is wrong.
        detail: String,
    },
    /// A domain rule was violated (bad configuration, malformed message…).
    #[error(transparent)]
    Domain(#[from] DomainError),
    /// Configuration missing or invalid.
    #[error("configuration: {0}")]
    Config(String),
    /// A message does not have the shape its stage expects.
    #[error("bad message: {0}")]
    BadMessage(String),
    /// A message is not the JSON its stage expects.
    #[error("bad message: {what} is not valid JSON of its shape")]
    UndecodableMessage {
        /// Which message (e.g. `cleanup message`).
        what: &'static str,
        /// The decoding error.
        #[source]
        source: serde_json::Error,
    },
    /// The submitter stopped its run: `DisabledApiException` (a whole-region failure) or an
    /// exception that is neither poison nor transient (credentials, permissions).
    #[error("metering halted by {exception}; {left_pending} records left pending for the next run")]
    MeteringHalted {
        /// The exception name.
        exception: String,
        /// Records the run read and did not finalize: the halted call's unanswered records and
        /// every later call's (they stay pending, and the next run sends them).
        left_pending: usize,
    },
    /// A submitter write-back found its record already finalized with another outcome (expiry's
    /// `NeedsReconciliation` for the very attempt in flight, or some other writer): AWS's answer
    /// is not on the record. Never dropped: the run fails with it, logged with the
    /// `MeteringRecordId`, on the `WriteBackConflict` metric (alarmed; docs/operations.md).
    #[error(
        "write-back of {status} (MeteringRecordId {}) for {group} found the record already \
         finalized as {}: reconcile it with AWS's records",
        .metering_record_id.as_deref().unwrap_or("none"),
        .stored.map_or("nothing (no record)", AggregatedStatus::as_str)
    )]
    WriteBackConflict {
        /// The record's group-hour.
        group: GroupKey,
        /// The outcome AWS's answer gave (e.g. `Success`).
        status: AggregatedStatus,
        /// The `MeteringRecordId` AWS returned, if any.
        metering_record_id: Option<String>,
        /// The status found on the record (`None`: no record at all).
        stored: Option<AggregatedStatus>,
    },
}

impl PipelineError {
    /// Whether the failed operation may succeed if retried later.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::DynamoDb { retryable, .. } => *retryable,
            Self::Sqs { .. } => true,
            Self::MalformedItem { .. }
            | Self::Domain(_)
            | Self::Config(_)
            | Self::BadMessage(_)
            | Self::UndecodableMessage { .. }
            | Self::MeteringHalted { .. }
            | Self::WriteBackConflict { .. } => false,
        }
    }
}

impl awsmp_contract::retry::Retryable for PipelineError {
    fn is_retryable(&self) -> bool {
        PipelineError::is_retryable(self)
    }
}

impl From<awsmp_aws::error::StoreError> for PipelineError {
    /// A shared store's error is the pipeline error of the same name (same message, same source,
    /// same retryability).
    fn from(e: awsmp_aws::error::StoreError) -> Self {
        use awsmp_aws::error::StoreError;
        match e {
            StoreError::DynamoDb {
                operation,
                resource,
                source,
                retryable,
            } => Self::DynamoDb {
                operation,
                resource,
                source,
                retryable,
            },
            StoreError::MalformedItem { table, detail } => Self::MalformedItem { table, detail },
        }
    }
}

/// Result alias.
pub type Result<T, E = PipelineError> = std::result::Result<T, E>;

impl PipelineError {
    /// Stable name of the error kind, reported as the Lambda `errorType`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::DynamoDb { .. } => "DynamoDbError",
            Self::Sqs { .. } => "SqsError",
            Self::MalformedItem { .. } => "MalformedItem",
            Self::Domain(_) => "DomainError",
            Self::Config(_) => "ConfigError",
            Self::BadMessage(_) | Self::UndecodableMessage { .. } => "BadMessage",
            Self::MeteringHalted { .. } => "MeteringHalted",
            Self::WriteBackConflict { .. } => "WriteBackConflict",
        }
    }
}

impl From<PipelineError> for lambda_runtime::Diagnostic {
    fn from(e: PipelineError) -> Self {
        // The whole source chain: the SDK error usually holds the actionable part.
        let mut message = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            message.push_str(": ");
            message.push_str(&s.to_string());
            source = s.source();
        }
        lambda_runtime::Diagnostic {
            error_type: e.kind().into(),
            error_message: message,
        }
    }
}
