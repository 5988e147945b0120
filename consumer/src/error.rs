//! The crate's error type.

/// Errors of the consumer. Per-record problems are never errors: they are rejected events.
/// Errors are about the stores; [`ConsumerError::is_retryable`] tells transient from fatal.
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    /// Missing or invalid configuration (fail fast at start-up).
    #[error("configuration: {0}")]
    Config(String),
    /// A DynamoDB call failed.
    #[error("DynamoDB {operation} on {resource} failed: {source}")]
    DynamoDb {
        /// The operation.
        operation: &'static str,
        /// Table name.
        resource: String,
        /// The SDK error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
        /// Throttling, 5xx or transport: worth retrying.
        retryable: bool,
    },
    /// An item in a store the consumer cannot interpret.
    #[error("malformed item in {table}: {detail}")]
    MalformedItem {
        /// Table.
        table: String,
        /// What is wrong.
        detail: String,
    },
    /// A row kept changing under the compare-and-set write.
    #[error("row {0} kept changing under the consumer's conditional write")]
    Contention(String),
    /// A fault injected by a test store.
    #[error("injected fault ({what})")]
    Injected {
        /// Which fault.
        what: &'static str,
        /// Whether a retry may succeed.
        retryable: bool,
    },
}

impl ConsumerError {
    /// True for errors a retry may cure (throttling, 5xx, transport, contention).
    pub fn is_retryable(&self) -> bool {
        match self {
            ConsumerError::DynamoDb { retryable, .. }
            | ConsumerError::Injected { retryable, .. } => *retryable,
            ConsumerError::Contention(_) => true,
            ConsumerError::Config(_) | ConsumerError::MalformedItem { .. } => false,
        }
    }
}

/// Result alias.
pub type Result<T, E = ConsumerError> = std::result::Result<T, E>;
