//! The lifecycle crate's error type.

/// Boxed SDK error, kept as the source (never stringified) so callers can classify it.
pub type SdkError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong in a lifecycle Lambda.
#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    /// A DynamoDB call failed.
    #[error("DynamoDB {operation} on {table} failed")]
    DynamoDb {
        /// The API operation.
        operation: &'static str,
        /// Table (and index) name.
        table: String,
        /// The SDK error.
        #[source]
        source: SdkError,
        /// Whether retrying later may succeed (throttling, 5xx, transport).
        retryable: bool,
    },
    /// An SQS call failed.
    #[error("SQS {operation} on {queue} failed")]
    Sqs {
        /// The API operation.
        operation: &'static str,
        /// Queue URL.
        queue: String,
        /// The SDK error.
        #[source]
        source: SdkError,
    },
    /// A stored item does not have the shape awsmp writes.
    #[error("malformed item in {table}: {detail}")]
    MalformedItem {
        /// Table name.
        table: String,
        /// What is wrong.
        detail: String,
    },
    /// An agreement event matched no license of its buyer yet: left for SQS to redeliver.
    #[error("agreement {agreement_id} has no license of its buyer in the subscribers table yet")]
    UnresolvedAgreement {
        /// The agreement id.
        agreement_id: String,
    },
    /// An event that cannot be read, with no dead-letter queue configured to send it to:
    /// left for SQS to redeliver until `maxReceiveCount` moves it to the DLQ.
    #[error("malformed event")]
    MalformedEvent(#[from] crate::domain::event::MalformedEvent),
    /// Configuration missing or invalid.
    #[error("configuration: {0}")]
    Config(String),
}

impl LifecycleError {
    /// True when the same call may succeed later.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::DynamoDb { retryable, .. } => *retryable,
            Self::Sqs { .. } | Self::UnresolvedAgreement { .. } => true,
            Self::MalformedItem { .. } | Self::MalformedEvent(_) | Self::Config(_) => false,
        }
    }
}

/// Result with [`LifecycleError`].
pub type Result<T, E = LifecycleError> = std::result::Result<T, E>;
