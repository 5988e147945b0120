//! The error of the shared stores ([`crate::watermark`], [`crate::deprovisioning`]).

use awsmp_contract::retry::Retryable;

/// A boxed SDK error, kept as the source (never stringified) so callers can classify it.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything a shared store can fail with; each crate turns it into its own error (the
/// pipeline into the `PipelineError` variants of the same names).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A DynamoDB call failed.
    #[error("DynamoDB {operation} on {resource} failed")]
    DynamoDb {
        /// The API operation.
        operation: &'static str,
        /// Table (and index) name.
        resource: String,
        /// The SDK error.
        #[source]
        source: BoxError,
        /// Whether retrying later may succeed (throttling, 5xx, transport).
        retryable: bool,
    },
    /// A stored item does not have the shape awsmp writes.
    #[error("malformed item in {table}: {detail}")]
    MalformedItem {
        /// Table name.
        table: String,
        /// What is wrong.
        detail: String,
    },
}

impl StoreError {
    /// Whether the failed operation may succeed if retried later.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::DynamoDb { retryable, .. } => *retryable,
            Self::MalformedItem { .. } => false,
        }
    }
}

impl Retryable for StoreError {
    fn is_retryable(&self) -> bool {
        StoreError::is_retryable(self)
    }
}

/// Result alias.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
