//! The crate's error type.

use awsmp_contract::DomainError;
use awsmp_contract::retry::Retryable;

/// A boxed error kept as the source (never stringified), so callers can walk the chain.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Errors of the consumer. Per-record problems are never errors: they are rejected events.
/// Errors are about the stores; [`Retryable::is_retryable`] tells transient from fatal.
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    /// Missing or invalid configuration (fail fast at start-up).
    #[error("configuration: {0}")]
    Config(String),
    /// Invalid time settings (billable window, usage-table TTL).
    #[error(transparent)]
    Domain(#[from] DomainError),
    /// A DynamoDB call failed.
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
    /// A Kinesis call of the heartbeat failed.
    #[error("Kinesis {operation} on {stream} failed")]
    Kinesis {
        /// The operation.
        operation: &'static str,
        /// Stream name.
        stream: String,
        /// The SDK error.
        #[source]
        source: BoxError,
    },
    /// A DynamoDB request could not be built (a required field missing).
    #[error("DynamoDB {operation} request for {resource} could not be built")]
    Request {
        /// The operation.
        operation: &'static str,
        /// Table name.
        resource: String,
        /// The SDK's build error.
        #[source]
        source: aws_sdk_dynamodb::error::BuildError,
    },
    /// `BatchGetItem` still returned unprocessed keys after every round.
    #[error("DynamoDB BatchGetItem on {resource} left keys unprocessed after {rounds} rounds")]
    UnprocessedKeys {
        /// Table name.
        resource: String,
        /// Rounds made.
        rounds: u32,
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
    #[error("row {license_arn} {sort_key} kept changing under the consumer's conditional write")]
    Contention {
        /// The row's partition key.
        license_arn: String,
        /// The row's sort key.
        sort_key: String,
    },
    /// A generated-id lane kept changing under the consumer's compare-and-set write.
    #[error("dedup lane {lane} kept changing under the consumer's conditional write")]
    LaneContention {
        /// The lane's dedup key.
        lane: String,
    },
    /// A store implemented outside this crate's DynamoDB adapters failed (for instance the
    /// test kit's fault wrapper, `awsmp_testkit::ports::Faulty`).
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

impl Retryable for ConsumerError {
    /// True for errors a retry may cure (throttling, 5xx, transport, contention).
    fn is_retryable(&self) -> bool {
        match self {
            ConsumerError::DynamoDb { retryable, .. } | ConsumerError::Store { retryable, .. } => {
                *retryable
            }
            ConsumerError::UnprocessedKeys { .. }
            | ConsumerError::Contention { .. }
            | ConsumerError::LaneContention { .. } => true,
            ConsumerError::Config(_)
            | ConsumerError::Kinesis { .. }
            | ConsumerError::Domain(_)
            | ConsumerError::Request { .. }
            | ConsumerError::MalformedItem { .. } => false,
        }
    }
}

/// Result alias.
pub type Result<T, E = ConsumerError> = std::result::Result<T, E>;

/// An error and its sources, `: `-separated (for a log field: each error's `Display` names
/// only itself, so the SDK's detail is in its source).
#[derive(Debug, Clone, Copy)]
pub struct ErrorChain<'a>(pub &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(s) = source {
            write!(f, ": {s}")?;
            source = s.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn a_source_is_printed_once_in_the_chain() {
        let e = ConsumerError::DynamoDb {
            operation: "GetItem",
            resource: "usage".into(),
            source: "throttled".into(),
            retryable: true,
        };
        assert_eq!(e.to_string(), "DynamoDB GetItem on usage failed");
        assert_eq!(
            e.source().map(ToString::to_string).as_deref(),
            Some("throttled")
        );
        assert!(e.is_retryable());
    }

    #[test]
    fn contention_and_unprocessed_keys_are_retryable_configuration_is_not() {
        let contention = ConsumerError::Contention {
            license_arn: "l".into(),
            sort_key: "s".into(),
        };
        assert!(contention.is_retryable());
        let unprocessed = ConsumerError::UnprocessedKeys {
            resource: "agg".into(),
            rounds: 8,
        };
        assert!(unprocessed.is_retryable());
        assert!(!ConsumerError::Config("x".into()).is_retryable());
    }
}
