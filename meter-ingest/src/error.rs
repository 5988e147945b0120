//! The crate's error type.

use awsmp_consumer::ConsumerError;
use awsmp_contract::retry::Retryable;

/// A boxed error kept as the source (never stringified), so callers can walk the chain.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Errors of meter-ingest. A refused event is never an error: it is held or rejected with its
/// reason. Errors are a malformed payload and store failures; [`Retryable::is_retryable`]
/// tells transient from fatal, [`IngestError::failure_type`] names it for Lambda.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// Missing or invalid configuration (fail fast at start-up).
    #[error("configuration: {0}")]
    Config(String),
    /// The dedup store meter-ingest shares with the kinesis-consumer failed (its event-id
    /// claims and "first seen" records).
    #[error(transparent)]
    Dedup(#[from] ConsumerError),
    /// A DynamoDB call of the mapping, rate-counter or held-events adapters failed.
    #[error("DynamoDB {operation} on {resource} failed")]
    DynamoDb {
        /// The operation.
        operation: &'static str,
        /// Table name.
        resource: String,
        /// The SDK error.
        #[source]
        source: BoxError,
        /// Throttling, 5xx or transport: worth retrying.
        retryable: bool,
    },
    /// An item in a store meter-ingest cannot interpret.
    #[error("malformed item in {table}: {detail}")]
    MalformedItem {
        /// Table.
        table: String,
        /// What is wrong.
        detail: String,
    },
    /// The invocation's payload is not a valid event batch (reason `MalformedPayload`);
    /// nothing of it was applied.
    #[error("MalformedPayload: {detail}")]
    MalformedPayload {
        /// What is wrong.
        detail: String,
    },
    /// Some records could not be put on the usage stream.
    #[error("PutRecords to {stream} failed")]
    StreamPut {
        /// Stream name.
        stream: String,
        /// The sink's error, or the failed entries' codes.
        #[source]
        source: BoxError,
        /// Whether a retry may succeed.
        retryable: bool,
    },
    /// A store implemented outside this crate's adapters failed (for instance a
    /// fault-injecting wrapper of the simulation).
    #[error("{store} store call failed")]
    Store {
        /// Which store.
        store: &'static str,
        /// The store's error.
        #[source]
        source: BoxError,
        /// Whether a retry may succeed.
        retryable: bool,
    },
}

impl Retryable for IngestError {
    /// True for errors a retry may cure (throttling, 5xx, transport, the dedup store's own).
    fn is_retryable(&self) -> bool {
        match self {
            IngestError::Dedup(e) => e.is_retryable(),
            IngestError::DynamoDb { retryable, .. }
            | IngestError::StreamPut { retryable, .. }
            | IngestError::Store { retryable, .. } => *retryable,
            IngestError::Config(_)
            | IngestError::MalformedItem { .. }
            | IngestError::MalformedPayload { .. } => false,
        }
    }
}

impl IngestError {
    /// The `errorType` the Lambda reports for this error: the reason code of a malformed
    /// payload, else `StoreFailure` (retried by Lambda).
    pub fn failure_type(&self) -> &'static str {
        match self {
            IngestError::MalformedPayload { .. } => awsmp_contract::reasons::MALFORMED_PAYLOAD,
            _ => "StoreFailure",
        }
    }
}

/// Result alias.
pub type Result<T, E = IngestError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn the_dedup_stores_error_keeps_its_message_source_and_classification() {
        let dedup = |retryable| {
            IngestError::from(ConsumerError::DynamoDb {
                operation: "PutItem",
                resource: "dedup".into(),
                source: "throttled".into(),
                retryable,
            })
        };
        let e = dedup(true);
        assert_eq!(e.to_string(), "DynamoDB PutItem on dedup failed");
        assert_eq!(
            e.source().map(ToString::to_string).as_deref(),
            Some("throttled")
        );
        assert!(e.is_retryable());
        assert!(!dedup(false).is_retryable());
        assert_eq!(e.failure_type(), "StoreFailure");
    }

    #[test]
    fn a_malformed_payload_is_fatal_and_named_by_its_reason() {
        let e = IngestError::MalformedPayload {
            detail: "events missing".into(),
        };
        assert!(!e.is_retryable());
        assert_eq!(e.failure_type(), awsmp_contract::reasons::MALFORMED_PAYLOAD);
        assert_eq!(e.to_string(), "MalformedPayload: events missing");
    }

    #[test]
    fn stream_and_store_failures_are_retried_as_they_say() {
        let put = |retryable| IngestError::StreamPut {
            stream: "usage".into(),
            source: "1 of the entries failed".into(),
            retryable,
        };
        assert!(put(true).is_retryable());
        assert!(!put(false).is_retryable());
        let store = IngestError::Store {
            store: "ingest-held-put",
            source: "throttled".into(),
            retryable: true,
        };
        assert!(store.is_retryable());
        assert!(!IngestError::Config("x".into()).is_retryable());
        assert!(
            !IngestError::MalformedItem {
                table: "held events".into(),
                detail: "no heldKey".into(),
            }
            .is_retryable()
        );
    }
}
