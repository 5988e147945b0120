//! Reason codes other than the guardrails' [`RejectReason`]: the ones the pipeline stamps in
//! `meteringStatusReason`, and the ones the consumer records with a rejected event (the
//! rejected-events store's `reason`, the `EventRejected` metric's `Reason` dimension).
//!
//! Where the consumer refuses usage for the same cause as a guardrail, it uses the
//! guardrail's own spelling. Decode failures use the producer's stable codes
//! ([`awsmp_contract::DecodeError::reason`]: `Md5Mismatch`, `InvalidJson`, `UnknownVersion`,
//! `NonIntegerQuantity`, …; for a binary user record `UnknownWireVersion`, `V2Truncated`,
//! `V2BadVarint`, `V2UnknownGroup`, `V2Malformed`, docs/wire-format.md).

use super::status::RejectReason;

/// Usage that arrived after its group-hour was aggregated (the hour is committed,
/// first-write-wins). The pipeline stamps it on such a raw row (with status
/// `RejectedClientSide`); the consumer records it with an event whose row is already
/// finalized. Either way the `LateUsage` metric carries the quantity.
pub const LATE_USAGE: &str = "LateUsage";

/// Stamped on a raw row aged out before aggregation (`AggregationExpired`) and on an
/// aggregated record expired before submission (`SubmissionExpired`).
pub const PENDING_PAST_BILLABLE_WINDOW: &str = "PendingPastBillableWindow";

/// Stamped on a `DuplicateRecordQuantityMismatch`: the billed quantity differs from ours.
pub const ATTEMPTED_QUANTITY_CHANGED: &str = "AttemptedQuantityChanged";

/// Stamped with `NeedsReconciliation`: an attempt that may have been applied was on file when
/// the hour left the window (or AWS refused the hour), its outcome never seen.
pub const ATTEMPT_UNRESOLVED_AT_WINDOW_CLOSE: &str = "AttemptUnresolvedAtWindowClose";

/// Stamped with `Success` when a `DuplicateRecord` was recognised as our own replay.
pub const DUPLICATE_RECORD_OF_OWN_ATTEMPT: &str = "DuplicateRecordOfOwnAttempt";

/// Stamped with `Error` on a record that alone exceeds the request size limit.
pub const RECORD_EXCEEDS_REQUEST_SIZE_LIMIT: &str = "RecordExceedsRequestSizeLimit";

/// Consumer: the stream record itself is unusable (no shard id in its event id, a malformed
/// sequence number).
pub const MALFORMED_STREAM_RECORD: &str = "MalformedStreamRecord";
/// Consumer: client time more than the allowed skew before the arrival time.
pub const STALE_TIMESTAMP: &str = "StaleTimestamp";
/// Consumer: client time more than the allowed skew after the arrival time.
pub const FUTURE_TIMESTAMP: &str = "FutureTimestamp";
/// Consumer, trusted-client policy: the client's hour is outside the billable window at
/// arrival (the guardrail's reason).
pub const TIMESTAMP_OUT_OF_WINDOW: &str = RejectReason::TimestampOutOfWindow.as_str();
/// Consumer: a producer allowlist is configured and the event's producer is not on it.
pub const UNKNOWN_PRODUCER: &str = "UnknownProducer";
/// Consumer: an event, or a row with it, would exceed the `BatchMeterUsage` quantity maximum
/// (the guardrail's reason).
pub const QUANTITY_OVERFLOW: &str = RejectReason::QuantityOverflow.as_str();
/// Consumer: the row already holds non-zero usage of the other kind (allocated vs
/// unallocated; the guardrail's reason).
pub const MIXED_ALLOCATED_AND_UNALLOCATED: &str =
    RejectReason::MixedAllocatedAndUnallocated.as_str();
/// Consumer: the row would carry more than
/// [`MAX_ALLOCATIONS_PER_RECORD`](super::limits::MAX_ALLOCATIONS_PER_RECORD) distinct tag sets
/// (the guardrail's reason).
pub const TOO_MANY_ALLOCATIONS: &str = RejectReason::TooManyAllocations.as_str();
/// Consumer: the row's allocations would pass DynamoDB's 400 KB item limit
/// (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html>), so
/// the row could never be written; the part is recorded instead, before any write.
pub const ROW_ITEM_TOO_LARGE: &str = "RowItemTooLarge";
/// Pipeline: the part of a group-hour's sum above the `BatchMeterUsage` `Quantity` maximum
/// (<https://docs.aws.amazon.com/marketplacemetering/latest/APIReference/API_UsageRecord.html>):
/// the maximum is billed, the remainder recorded on the aggregated record
/// (`overflowQuantity`, `overflowReason`) and on the `UsageQuantityAboveApiMaximum` metric.
pub const QUANTITY_ABOVE_API_MAXIMUM: &str = "QuantityAboveApiMaximum";
/// Consumer: a row not written by the consumer holds a quantity or allocations it cannot add
/// to.
pub const EXISTING_ROW_MALFORMED: &str = "ExistingRowMalformed";
/// Consumer: a delivered record (a re-drive) falls where the row's coverage of its lane was
/// compacted away, so whether the row holds it can be proved neither way; recorded instead of
/// guessed.
pub const REDRIVE_UNPROVEN: &str = "RedriveUnproven";

/// Subscription Lambda: the message body is not a JSON EventBridge event.
pub const EVENT_NOT_JSON: &str = "EventNotJson";
/// Subscription Lambda: the event's `source` is not `aws.agreement-marketplace`.
pub const UNEXPECTED_EVENT_SOURCE: &str = "UnexpectedEventSource";
/// Subscription Lambda: a field the event type needs is absent or not a string.
pub const MISSING_EVENT_FIELD: &str = "MissingEventField";
/// Subscription Lambda: `detail.license.arn` is not a license ARN, even once normalized.
pub const MALFORMED_LICENSE_ARN: &str = "MalformedLicenseArn";
/// Subscription Lambda: `detail.acceptor.accountId` is not a 12-digit account id.
pub const MALFORMED_ACCOUNT_ID: &str = "MalformedAccountId";
/// Subscription Lambda: `time` is not an RFC 3339 instant.
pub const MALFORMED_EVENT_TIME: &str = "MalformedEventTime";
/// Register Lambda: `ResolveCustomer` answered `ExpiredTokenException`.
pub const EXPIRED_TOKEN: &str = "ExpiredToken";
/// Register Lambda: `ResolveCustomer` answered `InvalidTokenException`.
pub const INVALID_TOKEN: &str = "InvalidToken";
/// Register Lambda: the form carries no `x-amzn-marketplace-token`.
pub const MISSING_TOKEN: &str = "MissingToken";
/// Register Lambda: the token resolved to another product than this stack's.
pub const PRODUCT_MISMATCH: &str = "ProductMismatch";
/// Register Lambda: the body is not a well-formed form of the allowlisted fields.
pub const MALFORMED_FORM: &str = "MalformedForm";
/// Register Lambda: the body is larger than the register Lambda reads.
pub const BODY_TOO_LARGE: &str = "BodyTooLarge";
/// Register Lambda: `ResolveCustomer` failed for another reason (throttled, AWS-side error).
pub const RESOLVE_CUSTOMER_FAILED: &str = "ResolveCustomerFailed";
/// Register Lambda: the customer-profile or subscribers write failed.
pub const REGISTRATION_NOT_STORED: &str = "RegistrationNotStored";
/// meter-ingest: the invoked function ARN names no alias or version (or `$LATEST`, or is not a
/// Lambda function ARN): it carries no module identity (docs/meter-ingest.md, "Identity").
pub const UNQUALIFIED_INVOKER: &str = "UnqualifiedInvoker";
/// meter-ingest: no mapping entry for the invoked ARN yet; the events are held, not billed and
/// not lost, until the entry exists and they are released (docs/meter-ingest.md, "Deploy ordering").
pub const UNKNOWN_INVOKER: &str = "UnknownInvoker";
/// meter-ingest: the invoked ARN's account is not in the environment's allowlist, or its mapping
/// entry belongs to another environment (a staging module against prod).
pub const ACCOUNT_NOT_ALLOWLISTED: &str = "AccountNotAllowlisted";
/// meter-ingest: the event names a license or buyer account its module's mapping entry does not
/// grant (a sibling module's customer).
pub const UNAUTHORIZED_LICENSE: &str = "UnauthorizedLicense";
/// meter-ingest: the event's dimension is not one its module's mapping entry grants.
pub const UNAUTHORIZED_DIMENSION: &str = "UnauthorizedDimension";
/// meter-ingest: the module's events in one second exceed its mapping entry's
/// `maxEventsPerSecond`; the excess is held.
pub const RATE_LIMITED: &str = "RateLimited";
/// meter-ingest: the event's quantity exceeds its module's mapping entry's `maxQuantity`; held.
pub const QUANTITY_OUT_OF_BOUNDS: &str = "QuantityOutOfBounds";
/// meter-ingest: the invocation's payload is not a valid event batch; the invocation fails and
/// Lambda routes it to the function's on-failure destination.
pub const MALFORMED_PAYLOAD: &str = "MalformedPayload";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumer_reasons_shared_with_the_guardrails_keep_their_spelling() {
        assert_eq!(TIMESTAMP_OUT_OF_WINDOW, "TimestampOutOfWindow");
        assert_eq!(QUANTITY_OVERFLOW, "QuantityOverflow");
        assert_eq!(
            MIXED_ALLOCATED_AND_UNALLOCATED,
            "MixedAllocatedAndUnallocated"
        );
        assert_eq!(TOO_MANY_ALLOCATIONS, "TooManyAllocations");
    }
}
