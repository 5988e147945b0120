//! The crate's one error type.

use awsmp_pipeline::PipelineError;

/// What can fail in `meterctl`'s logic: reading the audit trail (CloudTrail), or a store.
#[derive(Debug, thiserror::Error)]
pub enum MeterctlError {
    /// CloudTrail answered with an error (throttling beyond the retries, access denied, …).
    #[error("LookupEvents failed")]
    Lookup(#[source] awsmp_pipeline::error::SdkError),
    /// An event could not be read as a `BatchMeterUsage` record.
    #[error("CloudTrail event {event_id}: {detail}")]
    Malformed {
        /// The event's id.
        event_id: String,
        /// What was wrong.
        detail: String,
    },
    /// A store could not be read or written.
    #[error(transparent)]
    Store(#[from] PipelineError),
}

/// Result alias.
pub type Result<T, E = MeterctlError> = std::result::Result<T, E>;
