//! [`RecordSink`] over `aws-sdk-kinesis` PutRecords. Holds only a client and a stream name; the
//! response interpretation is a pure function ([`interpret_put_records_output`]).

use aws_sdk_kinesis::Client;
use aws_sdk_kinesis::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_kinesis::operation::put_records::{PutRecordsError, PutRecordsOutput};
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;

use super::{BoxError, EntryOutcome, PutEntry, RecordSink, SinkError};

/// Per-entry code Kinesis uses for throttling.
const THROTTLED_CODE: &str = "ProvisionedThroughputExceededException";

/// PutRecords to one stream.
#[derive(Debug, Clone)]
pub struct KinesisRecordSink {
    client: Client,
    stream_name: String,
}

impl KinesisRecordSink {
    /// A sink writing to `stream_name` through `client`.
    pub fn new(client: Client, stream_name: impl Into<String>) -> Self {
        KinesisRecordSink {
            client,
            stream_name: stream_name.into(),
        }
    }
}

impl RecordSink for KinesisRecordSink {
    async fn put_records(&self, entries: Vec<PutEntry>) -> Result<Vec<EntryOutcome>, SinkError> {
        let n = entries.len();
        let records = entries
            .into_iter()
            .map(|e| {
                PutRecordsRequestEntry::builder()
                    .data(Blob::new(e.data.to_vec()))
                    .partition_key(e.partition_key)
                    .set_explicit_hash_key(e.explicit_hash_key)
                    .build()
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| SinkError::Rejected {
                message: "could not build PutRecords entries".into(),
                source: Some(Box::new(e)),
            })?;
        let out = self
            .client
            .put_records()
            .stream_name(&self.stream_name)
            .set_records(Some(records))
            .send()
            .await
            .map_err(classify_put_records_error)?;
        interpret_put_records_output(&out, n)
    }
}

/// Turns a PutRecords response into one outcome per entry. A response whose record count does
/// not match the request cannot be attributed, so it is a transient failure of the whole call
/// (everything is resent; duplicates are removed downstream).
pub fn interpret_put_records_output(
    out: &PutRecordsOutput,
    sent: usize,
) -> Result<Vec<EntryOutcome>, SinkError> {
    let records = out.records();
    if records.len() != sent {
        return Err(SinkError::transient(format!(
            "PutRecords answered {} entries for {sent} sent",
            records.len()
        )));
    }
    Ok(records
        .iter()
        .map(
            |r| match (r.error_code(), r.shard_id(), r.sequence_number()) {
                (None, Some(shard), Some(seq)) => EntryOutcome::Ok {
                    shard_id: shard.to_owned(),
                    sequence_number: seq.to_owned(),
                },
                (None, _, _) => EntryOutcome::Failed {
                    code: "MissingSequenceNumber".into(),
                    message: "entry has neither an error code nor a sequence number".into(),
                    retryable: true,
                },
                (Some(THROTTLED_CODE), _, _) => EntryOutcome::Throttled,
                (Some(code), _, _) => EntryOutcome::Failed {
                    code: code.to_owned(),
                    message: r.error_message().unwrap_or_default().to_owned(),
                    // Documented per-entry codes are throttling and InternalFailure, both
                    // transient; an unknown code is retried until the record TTL too, since giving
                    // up early on a transient fault would hand back deliverable usage.
                    retryable: true,
                },
            },
        )
        .collect())
}

/// Classifies a failed PutRecords call.
pub fn classify_put_records_error(err: SdkError<PutRecordsError>) -> SinkError {
    match err {
        SdkError::ServiceError(ctx) => {
            let status = ctx.raw().status().as_u16();
            classify_service_error(ctx.into_err(), status)
        }
        SdkError::ConstructionFailure(_) => SinkError::Rejected {
            message: "PutRecords request could not be built".into(),
            source: Some(Box::new(err)),
        },
        // Timeouts, dispatch and response errors: the request may have been applied.
        other => SinkError::Transient {
            message: "PutRecords did not complete".into(),
            source: Some(Box::new(other)),
        },
    }
}

/// Classifies a service error of PutRecords (pure, testable with SDK builders). The error
/// itself becomes the source.
pub fn classify_service_error(err: PutRecordsError, http_status: u16) -> SinkError {
    let make = service_error_kind(&err, http_status);
    make(
        format!("service error, HTTP {http_status}"),
        Some(Box::new(err)),
    )
}

type MakeSinkError = fn(String, Option<BoxError>) -> SinkError;

/// Which [`SinkError`] a service error is.
fn service_error_kind(err: &PutRecordsError, http_status: u16) -> MakeSinkError {
    let throttled: MakeSinkError = |message, source| SinkError::Throttled { message, source };
    let transient: MakeSinkError = |message, source| SinkError::Transient { message, source };
    let rejected: MakeSinkError = |message, source| SinkError::Rejected { message, source };
    if err.is_provisioned_throughput_exceeded_exception() || err.is_kms_throttling_exception() {
        return throttled;
    }
    if err.is_resource_not_found_exception() {
        return |message, source| SinkError::ResourceNotFound { message, source };
    }
    if err.is_internal_failure_exception() {
        return transient;
    }
    if err.is_access_denied_exception()
        || err.is_invalid_argument_exception()
        || err.is_kms_access_denied_exception()
        || err.is_kms_disabled_exception()
        || err.is_kms_invalid_state_exception()
        || err.is_kms_not_found_exception()
        || err.is_kms_opt_in_required()
        || err.is_dry_run_operation_exception()
    {
        return rejected;
    }
    match err.code() {
        Some("ThrottlingException" | "LimitExceededException" | "RequestLimitExceeded") => {
            throttled
        }
        _ if http_status >= 500 || http_status == 429 => transient,
        // An unknown 4xx: permanent as far as we can tell.
        _ => rejected,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_kinesis::types::PutRecordsResultEntry;
    use aws_sdk_kinesis::types::error::{
        AccessDeniedException, InternalFailureException, KmsThrottlingException,
        ProvisionedThroughputExceededException, ResourceNotFoundException,
    };

    fn ok(shard: &str, seq: &str) -> PutRecordsResultEntry {
        PutRecordsResultEntry::builder()
            .shard_id(shard)
            .sequence_number(seq)
            .build()
    }

    fn failed(code: &str) -> PutRecordsResultEntry {
        PutRecordsResultEntry::builder()
            .error_code(code)
            .error_message("msg")
            .build()
    }

    #[test]
    fn per_entry_outcomes_are_kept_in_order() {
        let out = PutRecordsOutput::builder()
            .records(ok("shardId-000000000001", "49"))
            .records(failed("ProvisionedThroughputExceededException"))
            .records(failed("InternalFailure"))
            .failed_record_count(2)
            .build()
            .unwrap();
        let got = interpret_put_records_output(&out, 3).unwrap();
        assert_eq!(
            got,
            vec![
                EntryOutcome::Ok {
                    shard_id: "shardId-000000000001".into(),
                    sequence_number: "49".into()
                },
                EntryOutcome::Throttled,
                EntryOutcome::Failed {
                    code: "InternalFailure".into(),
                    message: "msg".into(),
                    retryable: true
                },
            ]
        );
    }

    #[test]
    fn a_response_of_the_wrong_length_is_a_transient_failure() {
        let out = PutRecordsOutput::builder()
            .records(ok("s", "1"))
            .build()
            .unwrap();
        let err = interpret_put_records_output(&out, 2).unwrap_err();
        assert!(err.is_retryable() && err.may_have_been_applied(), "{err}");
    }

    #[test]
    fn an_entry_without_sequence_number_is_not_taken_as_success() {
        let out = PutRecordsOutput::builder()
            .records(PutRecordsResultEntry::builder().shard_id("s").build())
            .build()
            .unwrap();
        assert!(matches!(
            interpret_put_records_output(&out, 1).unwrap()[0],
            EntryOutcome::Failed {
                retryable: true,
                ..
            }
        ));
    }

    #[test]
    fn call_errors_are_classified() {
        let c = |e, s| classify_service_error(e, s).reason();
        assert_eq!(
            c(
                PutRecordsError::ProvisionedThroughputExceededException(
                    ProvisionedThroughputExceededException::builder()
                        .message("slow down")
                        .build()
                ),
                400
            ),
            "Throttled"
        );
        assert_eq!(
            c(
                PutRecordsError::KmsThrottlingException(KmsThrottlingException::builder().build()),
                400
            ),
            "Throttled"
        );
        assert_eq!(
            c(
                PutRecordsError::ResourceNotFoundException(
                    ResourceNotFoundException::builder().build()
                ),
                400
            ),
            "ResourceNotFound"
        );
        assert_eq!(
            c(
                PutRecordsError::InternalFailureException(
                    InternalFailureException::builder().build()
                ),
                500
            ),
            "Transient"
        );
        assert_eq!(
            c(
                PutRecordsError::AccessDeniedException(AccessDeniedException::builder().build()),
                400
            ),
            "Rejected"
        );
        assert_eq!(c(PutRecordsError::unhandled("boom"), 503), "Transient");
        assert_eq!(c(PutRecordsError::unhandled("boom"), 400), "Rejected");
    }

    #[test]
    fn the_sdk_error_is_the_source_and_is_not_repeated_in_the_message() {
        let err = classify_service_error(
            PutRecordsError::ProvisionedThroughputExceededException(
                ProvisionedThroughputExceededException::builder()
                    .message("slow down")
                    .build(),
            ),
            400,
        );
        assert_eq!(
            err.to_string(),
            "PutRecords throttled: service error, HTTP 400"
        );
        let source = std::error::Error::source(&err).expect("the SDK error is kept");
        assert!(source.to_string().contains("slow down"), "{source}");
        assert!(!err.to_string().contains("slow down"));
    }
}
