//! Business metric names, each with its CloudWatch unit, and their dimension names, as the
//! alarms and dashboards of docs/operations.md expect them. The pipeline and the consumer emit
//! only these (through `awsmp_aws::emf::Metric`), so a name cannot be emitted with two units.
//!
//! Units: a metric whose value is a number of records, events, rows or usage units is
//! [`Unit::Count`] — `LateUsage` too: its value is the late rows' quantity, a whole number of
//! the dimension's units, exactly what `BatchMeterUsage` would have billed. Only a ratio is
//! [`Unit::None`]. CloudWatch units:
//! <https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_MetricDatum.html>.

/// A CloudWatch `StandardUnit`, of the ones awsmp uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// A number of things (records, events, rows, usage units).
    Count,
    /// A plain number (a ratio).
    None,
    /// A duration in seconds.
    Seconds,
}

impl Unit {
    /// The CloudWatch spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Count => "Count",
            Self::None => "None",
            Self::Seconds => "Seconds",
        }
    }
}

/// A business metric: its name and unit, together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MetricName {
    name: &'static str,
    unit: Unit,
}

impl MetricName {
    const fn count(name: &'static str) -> Self {
        Self {
            name,
            unit: Unit::Count,
        }
    }

    const fn seconds(name: &'static str) -> Self {
        Self {
            name,
            unit: Unit::Seconds,
        }
    }

    /// The metric name, e.g. `UsageRecordRejected`.
    pub const fn name(self) -> &'static str {
        self.name
    }

    /// Its unit.
    pub const fn unit(self) -> Unit {
        self.unit
    }
}

/// Pipeline: a group rejected client-side; dimension [`REASON`].
pub const USAGE_RECORD_REJECTED: MetricName = MetricName::count("UsageRecordRejected");
/// Pipeline: raw rows aged out before aggregation.
pub const USAGE_AGGREGATION_EXPIRED: MetricName = MetricName::count("UsageAggregationExpired");
/// Pipeline: aggregated records expired before submission.
pub const USAGE_SUBMISSION_EXPIRED: MetricName = MetricName::count("UsageSubmissionExpired");
/// Pipeline: aggregated records possibly billed, outcome unknown at window close
/// (`NeedsReconciliation`); alarmed.
pub const USAGE_NEEDS_RECONCILIATION: MetricName = MetricName::count("UsageNeedsReconciliation");
/// Submitter: write-backs that found their record already finalized with another outcome
/// (`awsmp_pipeline::PipelineError::WriteBackConflict`): AWS's answer (its `MeteringRecordId` in the
/// log line) is not on the record; alarmed, reconcile by hand (docs/operations.md).
pub const WRITE_BACK_CONFLICT: MetricName = MetricName::count("WriteBackConflict");
/// Pipeline: records still unprocessed after the submitter's retries (they stay pending).
pub const USAGE_RECORD_UNPROCESSED: MetricName = MetricName::count("UsageRecordUnprocessed");
/// Pipeline: `CustomerNotSubscribed` results.
pub const CUSTOMER_NOT_SUBSCRIBED: MetricName = MetricName::count("CustomerNotSubscribed");
/// Pipeline: request-level `BatchMeterUsage` exceptions; dimension [`EXCEPTION`].
pub const BATCH_METER_USAGE_EXCEPTION: MetricName = MetricName::count("BatchMeterUsageException");
/// Pipeline: `DuplicateRecord` results that were not a recognised replay of our own attempt.
pub const DUPLICATE_RECORD: MetricName = MetricName::count("DuplicateRecord");
/// Pipeline: `DuplicateRecord` whose billed quantity differs from ours.
pub const DUPLICATE_RECORD_QUANTITY_MISMATCH: MetricName =
    MetricName::count("DuplicateRecordQuantityMismatch");
/// Pipeline and consumer: usage after its group-hour was aggregated (value: its quantity).
pub const LATE_USAGE: MetricName = MetricName::count("LateUsage");

/// Submitter: `BatchMeterUsage` calls of one run (retries and bisection halves included): the
/// run's use of its quota share, charted against it (docs/deploy.md, "Dashboards").
pub const BATCH_METER_USAGE_CALLS: MetricName = MetricName::count("BatchMeterUsageCalls");
/// Submitter: aggregated records whose final status one run wrote (`Success`, `DuplicateRecord`,
/// `CustomerNotSubscribed`, …): the submitter's throughput.
pub const USAGE_RECORDS_FINALIZED: MetricName = MetricName::count("UsageRecordsFinalized");

/// Pipeline: quantity of a group-hour above the `BatchMeterUsage` maximum, not billed (value:
/// the remainder; reason [`super::reasons::QUANTITY_ABOVE_API_MAXIMUM`]). Alarmed.
pub const USAGE_QUANTITY_ABOVE_API_MAXIMUM: MetricName =
    MetricName::count("UsageQuantityAboveApiMaximum");

/// Consumer: events refused or not written; dimension [`REASON`].
pub const EVENT_REJECTED: MetricName = MetricName::count("EventRejected");
/// Consumer: records or events already applied (duplicates); dimension [`DEDUP_KIND`].
pub const DEDUP_HIT: MetricName = MetricName::count("DedupHit");
/// Dimension of [`DEDUP_HIT`]: how the duplicate was recognised.
pub const DEDUP_KIND: &str = "DedupKind";
/// [`DEDUP_KIND`]: a record with refused items whose record key another record claimed.
pub const DEDUP_KIND_RECORD: &str = "Record";
/// [`DEDUP_KIND`]: a generated id whose sequence its lane already applied.
pub const DEDUP_KIND_SEQUENCE: &str = "Sequence";
/// [`DEDUP_KIND`]: a caller-supplied id another record claimed.
pub const DEDUP_KIND_ID_CLAIM: &str = "IdClaim";
/// Consumer: events folded into rows; dimension [`PRODUCER`].
pub const EVENTS_ACCEPTED: MetricName = MetricName::count("EventsAccepted");
/// Consumer: usage rows written.
pub const ROWS_WRITTEN: MetricName = MetricName::count("RowsWritten");
/// Consumer: `UpdateItem` calls per 1,000 accepted events (a ratio).
pub const WRITE_AMPLIFICATION: MetricName = MetricName {
    name: "WriteAmplification",
    unit: Unit::None,
};

/// Consumer: the largest distance, in seconds, between an event's client timestamp and its
/// arrival on the stream in one batch (either direction). Trusted-path events are billed at
/// arrival whatever this says; a high value means a producer's clock or buffers need attention.
pub const CLIENT_CLOCK_SKEW: MetricName = MetricName::seconds("ClientClockSkew");

/// Discoverer: now − the lowest ingest watermark over the stream's shards, in seconds, each
/// run with a watermark table (docs/guarantees.md, "Ingest watermark").
pub const INGEST_WATERMARK_LAG: MetricName = MetricName::seconds("IngestWatermarkLag");
/// Discoverer: 1 when the lowest watermark lags now by more than the stall threshold (or no
/// shard has published): metering is held back; alarm on it (docs/operations.md).
pub const INGEST_WATERMARK_STALLED: MetricName = MetricName::count("IngestWatermarkStalled");

/// Subscription Lambda: lifecycle events applied to the subscribers table; dimension
/// [`EVENT_TYPE`].
pub const SUBSCRIPTION_EVENT_APPLIED: MetricName = MetricName::count("SubscriptionEventApplied");
/// Subscription Lambda: events read and deliberately not applied (`Purchase Agreement
/// Created`, unknown detail-types); dimension [`EVENT_TYPE`].
pub const SUBSCRIPTION_EVENT_IGNORED: MetricName = MetricName::count("SubscriptionEventIgnored");
/// Subscription Lambda: malformed events sent to the dead-letter queue; dimension [`REASON`].
/// Alarmed.
pub const SUBSCRIPTION_EVENT_REJECTED: MetricName = MetricName::count("SubscriptionEventRejected");
/// Subscription Lambda: agreement events that matched no license yet (left for SQS to
/// redeliver; the dead-letter queue after `maxReceiveCount`); dimension [`EVENT_TYPE`].
pub const SUBSCRIPTION_EVENT_UNRESOLVED: MetricName =
    MetricName::count("SubscriptionEventUnresolved");
/// Deprovision-cleanup Lambda: licenses finalized to `inactive` in one run.
pub const LICENSES_FINALIZED: MetricName = MetricName::count("LicensesFinalized");
/// Register Lambda: buyers registered (a resolved token, profile and subscriber written).
pub const REGISTRATION_SUCCEEDED: MetricName = MetricName::count("RegistrationSucceeded");
/// Register Lambda: registrations refused or failed; dimension [`REASON`].
pub const REGISTRATION_FAILED: MetricName = MetricName::count("RegistrationFailed");
/// meter-ingest: events received, per module; dimension [`MODULE`] (the event rate).
pub const INGEST_EVENTS_RECEIVED: MetricName = MetricName::count("IngestEventsReceived");
/// meter-ingest: events accepted onto the usage stream; dimension [`MODULE`].
pub const INGEST_EVENTS_ACCEPTED: MetricName = MetricName::count("IngestEventsAccepted");
/// meter-ingest: events already applied (a Lambda async retry or a module's replay);
/// dimension [`MODULE`].
pub const INGEST_DEDUP_HIT: MetricName = MetricName::count("IngestDedupHit");
/// meter-ingest: events refused for good; dimensions [`MODULE`], [`REASON`].
pub const INGEST_EVENT_REJECTED: MetricName = MetricName::count("IngestEventRejected");
/// meter-ingest: events held (unknown invoker, rate limit, anomaly bound), not billed and not
/// lost; dimensions [`MODULE`], [`REASON`]. Alarmed.
pub const INGEST_EVENT_HELD: MetricName = MetricName::count("IngestEventHeld");
/// meter-ingest: invocations whose payload was malformed (sent to the on-failure destination);
/// dimension [`MODULE`].
pub const INGEST_MALFORMED_PAYLOAD: MetricName = MetricName::count("IngestMalformedPayload");

/// Dimension carrying a reason code ([`super::status::RejectReason`] or [`super::reasons`]).
pub const REASON: &str = "Reason";
/// Dimension carrying an exception name.
pub const EXCEPTION: &str = "Exception";
/// Dimension carrying the producer id of accepted events.
pub const PRODUCER: &str = "Producer";
/// Dimension carrying a meter-ingest module: the invoked ARN's qualifier (its alias or version).
pub const MODULE: &str = "Module";
/// Dimension every metric carries: the emitting function.
pub const SERVICE: &str = "Service";
/// Dimension carrying a lifecycle event's detail-type without its role suffix.
pub const EVENT_TYPE: &str = "EventType";

/// Every business metric.
pub const ALL: [MetricName; 35] = [
    USAGE_RECORD_REJECTED,
    USAGE_AGGREGATION_EXPIRED,
    USAGE_SUBMISSION_EXPIRED,
    USAGE_NEEDS_RECONCILIATION,
    WRITE_BACK_CONFLICT,
    USAGE_RECORD_UNPROCESSED,
    CUSTOMER_NOT_SUBSCRIBED,
    BATCH_METER_USAGE_EXCEPTION,
    DUPLICATE_RECORD,
    DUPLICATE_RECORD_QUANTITY_MISMATCH,
    LATE_USAGE,
    USAGE_QUANTITY_ABOVE_API_MAXIMUM,
    BATCH_METER_USAGE_CALLS,
    USAGE_RECORDS_FINALIZED,
    EVENT_REJECTED,
    DEDUP_HIT,
    EVENTS_ACCEPTED,
    ROWS_WRITTEN,
    WRITE_AMPLIFICATION,
    CLIENT_CLOCK_SKEW,
    INGEST_WATERMARK_LAG,
    INGEST_WATERMARK_STALLED,
    SUBSCRIPTION_EVENT_APPLIED,
    SUBSCRIPTION_EVENT_IGNORED,
    SUBSCRIPTION_EVENT_REJECTED,
    SUBSCRIPTION_EVENT_UNRESOLVED,
    LICENSES_FINALIZED,
    REGISTRATION_SUCCEEDED,
    REGISTRATION_FAILED,
    INGEST_EVENTS_RECEIVED,
    INGEST_EVENTS_ACCEPTED,
    INGEST_DEDUP_HIT,
    INGEST_EVENT_REJECTED,
    INGEST_EVENT_HELD,
    INGEST_MALFORMED_PAYLOAD,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_defined_once() {
        let mut names: Vec<&str> = ALL.iter().map(|m| m.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
        assert_eq!(LATE_USAGE.unit().as_str(), "Count");
        assert_eq!(WRITE_AMPLIFICATION.unit().as_str(), "None");
    }
}
