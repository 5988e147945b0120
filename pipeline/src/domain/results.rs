//! Mapping `BatchMeterUsage` results back to per-record write-back decisions (docs/metering-api.md,
//! "DuplicateRecord", "CustomerNotSubscribed", "UnprocessedRecords").
//!
//! The adapter converts the SDK output into an [`ApiResponse`] (each echoed `UsageRecord`
//! identified by its [`GroupKey`]: `LicenseArn` + `CustomerAWSAccountId`, or for legacy calls
//! the request's `ProductCode` + `CustomerIdentifier`; hour = the echoed `Timestamp` floored),
//! then [`map_response`] yields one [`Decision`] per submitted record.
//!
//! **Replays.** The real API does not say which quantity a `DuplicateRecord` billed. Before
//! every call the submitter persists `attemptedQuantity` on the aggregated record (and calls
//! [`SubmitRecord::mark_sent`] before any in-run retry); a `DuplicateRecord` for a record
//! previously sent with the *same* quantity is our own accepted attempt coming back (e.g.
//! after a crash or a lost response) and counts as billed `Success`; with a *different*
//! quantity it is `DuplicateRecordQuantityMismatch`; for a record never sent before it is
//! `DuplicateRecord` — someone else billed that hour, flagged.
//!
//! ```
//! use awsmp_pipeline::domain::batch::SubmitRecord;
//! use awsmp_contract::keys::GroupKey;
//! use awsmp_pipeline::domain::results::{decide, ApiResult, ApiStatus, Decision};
//! use awsmp_contract::status::AggregatedStatus;
//! let group = GroupKey::new("arn:aws:license-manager::123456789012:license:l-0", "123456789012", "api",
//!     "2026-11-30T11".parse().unwrap());
//! let mut record = SubmitRecord::new(group.clone(), 42, None);
//! record.mark_sent(); // sent once already, response lost
//! let dup = ApiResult { group, status: ApiStatus::DuplicateRecord, metering_record_id: None };
//! let Decision::Finalize(f) = decide(&record, Some(&dup), false) else { panic!() };
//! assert_eq!(f.status, AggregatedStatus::Success);
//! ```

use std::collections::HashMap;

use super::batch::SubmitRecord;
use awsmp_contract::keys::GroupKey;
use awsmp_contract::metrics::{self, MetricName};
use awsmp_contract::reasons::{
    ATTEMPT_UNRESOLVED_AT_WINDOW_CLOSE, ATTEMPTED_QUANTITY_CHANGED,
    DUPLICATE_RECORD_OF_OWN_ATTEMPT, PENDING_PAST_BILLABLE_WINDOW,
    RECORD_EXCEEDS_REQUEST_SIZE_LIMIT,
};
use awsmp_contract::status::AggregatedStatus;

/// Why a record listed in `UnprocessedRecords` stays pending (AWS did not process it).
pub const UNPROCESSED_RECORDS: &str = "UnprocessedRecords";

/// The exception AWS answers a record whose hour it no longer accepts.
pub const TIMESTAMP_OUT_OF_BOUNDS_EXCEPTION: &str = "TimestampOutOfBoundsException";

/// Per-record status in `BatchMeterUsage` `Results`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiStatus {
    /// `Success`.
    Success,
    /// `DuplicateRecord`.
    DuplicateRecord,
    /// `CustomerNotSubscribed`.
    CustomerNotSubscribed,
    /// A status this version does not know.
    Other(String),
}

impl ApiStatus {
    /// From the wire spelling.
    pub fn parse(s: &str) -> Self {
        match s {
            "Success" => Self::Success,
            "DuplicateRecord" => Self::DuplicateRecord,
            "CustomerNotSubscribed" => Self::CustomerNotSubscribed,
            other => Self::Other(other.to_owned()),
        }
    }
}

/// One entry of `Results`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiResult {
    /// The echoed record's group.
    pub group: GroupKey,
    /// Its status.
    pub status: ApiStatus,
    /// `MeteringRecordId`, when returned.
    pub metering_record_id: Option<String>,
}

/// A `BatchMeterUsage` response, AWS-free.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ApiResponse {
    /// `Results`.
    pub results: Vec<ApiResult>,
    /// Groups of the records in `UnprocessedRecords`.
    pub unprocessed: Vec<GroupKey>,
}

/// A terminal write-back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finalize {
    /// Status to record.
    pub status: AggregatedStatus,
    /// `meteringStatusReason` (the exception name for `Error`).
    pub reason: Option<String>,
    /// `MeteringRecordId`, when AWS returned one.
    pub metering_record_id: Option<String>,
}

/// What to do with one aggregated record after a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Write this terminal outcome and clear `meteringPending`.
    Finalize(Finalize),
    /// Leave the record pending (retry in this run with backoff, else on the next run).
    StayPending {
        /// Why, for logs.
        reason: String,
    },
}

/// A business metric to emit for a decision (value 1 per record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricEvent {
    /// Metric name and unit.
    pub name: MetricName,
    /// Optional `(dimension name, value)`.
    pub dimension: Option<(&'static str, String)>,
}

impl Decision {
    /// The metric this decision emits. For [`Decision::StayPending`] it is
    /// `UsageRecordUnprocessed`, to emit only once the submitter stops retrying the record in
    /// this run.
    pub fn metric(&self) -> Option<MetricEvent> {
        let plain = |name| {
            Some(MetricEvent {
                name,
                dimension: None,
            })
        };
        match self {
            Decision::StayPending { .. } => plain(metrics::USAGE_RECORD_UNPROCESSED),
            Decision::Finalize(f) => match f.status {
                AggregatedStatus::Success | AggregatedStatus::DryRunSubmitted => None,
                AggregatedStatus::DuplicateRecord => plain(metrics::DUPLICATE_RECORD),
                AggregatedStatus::DuplicateRecordQuantityMismatch => {
                    plain(metrics::DUPLICATE_RECORD_QUANTITY_MISMATCH)
                }
                AggregatedStatus::CustomerNotSubscribed => plain(metrics::CUSTOMER_NOT_SUBSCRIBED),
                AggregatedStatus::SubmissionExpired => plain(metrics::USAGE_SUBMISSION_EXPIRED),
                AggregatedStatus::NeedsReconciliation => plain(metrics::USAGE_NEEDS_RECONCILIATION),
                AggregatedStatus::Error => Some(MetricEvent {
                    name: metrics::BATCH_METER_USAGE_EXCEPTION,
                    dimension: Some((metrics::EXCEPTION, f.reason.clone().unwrap_or_default())),
                }),
            },
        }
    }

    /// True when the record's usage now counts as billed.
    pub fn is_billed(&self) -> bool {
        matches!(self, Decision::Finalize(f) if f.status.is_billed())
    }
}

fn finalize(
    status: AggregatedStatus,
    reason: Option<String>,
    metering_record_id: Option<String>,
) -> Decision {
    Decision::Finalize(Finalize {
        status,
        reason,
        metering_record_id,
    })
}

/// Decide one record from its entry in `Results` (if any) and whether it was listed in
/// `UnprocessedRecords`. A `Results` entry wins over an `UnprocessedRecords` listing.
pub fn decide(record: &SubmitRecord, result: Option<&ApiResult>, unprocessed: bool) -> Decision {
    let Some(result) = result else {
        let reason = if unprocessed {
            UNPROCESSED_RECORDS
        } else {
            "absent from the BatchMeterUsage response"
        };
        return Decision::StayPending {
            reason: reason.to_owned(),
        };
    };
    let id = result.metering_record_id.clone();
    match &result.status {
        ApiStatus::Success => finalize(AggregatedStatus::Success, None, id),
        ApiStatus::CustomerNotSubscribed => {
            finalize(AggregatedStatus::CustomerNotSubscribed, None, id)
        }
        ApiStatus::DuplicateRecord => match record.previous_attempt {
            Some(q) if q == record.quantity => finalize(
                AggregatedStatus::Success,
                Some(DUPLICATE_RECORD_OF_OWN_ATTEMPT.to_owned()),
                id,
            ),
            Some(q) => finalize(
                AggregatedStatus::DuplicateRecordQuantityMismatch,
                Some(format!(
                    "{ATTEMPTED_QUANTITY_CHANGED}: sent {q} earlier, now {}",
                    record.quantity
                )),
                id,
            ),
            None => finalize(AggregatedStatus::DuplicateRecord, None, id),
        },
        ApiStatus::Other(s) => Decision::StayPending {
            reason: format!("unknown result status {s:?}"),
        },
    }
}

/// One decision per record of the call, in the call's order.
pub fn map_response(records: &[SubmitRecord], response: &ApiResponse) -> Vec<Decision> {
    let by_group: HashMap<&GroupKey, &ApiResult> =
        response.results.iter().map(|r| (&r.group, r)).collect();
    records
        .iter()
        .map(|r| {
            decide(
                r,
                by_group.get(&r.group).copied(),
                response.unprocessed.contains(&r.group),
            )
        })
        .collect()
}

/// A record isolated by bisection: `Error` with the exception name.
pub fn poison_decision(exception: &str) -> Decision {
    finalize(AggregatedStatus::Error, Some(exception.to_owned()), None)
}

/// A record isolated by bisection, knowing its history: `Error` with the exception name,
/// unless AWS refuses its hour (`TimestampOutOfBoundsException`) while an earlier attempt that
/// may have been applied is on file — then AWS may well have billed it, and it needs
/// reconciliation ([`needs_reconciliation_decision`]), never a plain `Error`.
pub fn poison_decision_for(record: &SubmitRecord, exception: &str) -> Decision {
    if exception == TIMESTAMP_OUT_OF_BOUNDS_EXCEPTION
        && let Some(q) = record.previous_attempt
    {
        return needs_reconciliation_decision(q);
    }
    poison_decision(exception)
}

/// The window closed (or AWS refuses the hour) with an attempt of `attempted` on file whose
/// outcome was never seen: possibly billed, an operator must reconcile it.
pub fn needs_reconciliation_decision(attempted: u64) -> Decision {
    finalize(
        AggregatedStatus::NeedsReconciliation,
        Some(format!(
            "{ATTEMPT_UNRESOLVED_AT_WINDOW_CLOSE}: sent {attempted}, outcome unknown"
        )),
        None,
    )
}

/// A record too large for any request: `Error` with [`RECORD_EXCEEDS_REQUEST_SIZE_LIMIT`].
pub fn oversized_decision() -> Decision {
    finalize(
        AggregatedStatus::Error,
        Some(RECORD_EXCEEDS_REQUEST_SIZE_LIMIT.to_owned()),
        None,
    )
}

/// Dry-run mode: never sent.
pub fn dry_run_decision() -> Decision {
    finalize(AggregatedStatus::DryRunSubmitted, None, None)
}

/// Submission expiry.
pub fn submission_expired_decision() -> Decision {
    finalize(
        AggregatedStatus::SubmissionExpired,
        Some(PENDING_PAST_BILLABLE_WINDOW.to_owned()),
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(account: &str) -> GroupKey {
        GroupKey::new(
            "arn:aws:license-manager::123456789012:license:l-0",
            account,
            "api",
            "2026-11-30T11".parse().unwrap(),
        )
    }
    fn res(account: &str, status: ApiStatus) -> ApiResult {
        ApiResult {
            group: g(account),
            status,
            metering_record_id: Some(format!("id-{account}")),
        }
    }

    #[test]
    fn every_result_kind() {
        let fresh = SubmitRecord::new(g("1"), 5, None);
        let mut replayed = SubmitRecord::new(g("2"), 5, None);
        replayed.mark_sent();
        let mut changed = SubmitRecord::new(g("3"), 5, None);
        changed.previous_attempt = Some(4);
        let cns = SubmitRecord::new(g("4"), 5, None);
        let unprocessed = SubmitRecord::new(g("5"), 5, None);
        let missing = SubmitRecord::new(g("6"), 5, None);
        let success = SubmitRecord::new(g("7"), 5, None);
        let weird = SubmitRecord::new(g("8"), 5, None);
        let records = vec![
            fresh,
            replayed,
            changed,
            cns,
            unprocessed,
            missing,
            success,
            weird,
        ];
        let response = ApiResponse {
            results: vec![
                res("1", ApiStatus::DuplicateRecord),
                res("2", ApiStatus::DuplicateRecord),
                res("3", ApiStatus::DuplicateRecord),
                res("4", ApiStatus::CustomerNotSubscribed),
                res("7", ApiStatus::Success),
                res("8", ApiStatus::parse("NewStatus")),
            ],
            unprocessed: vec![g("5")],
        };
        let d = map_response(&records, &response);
        let status = |i: usize| match &d[i] {
            Decision::Finalize(f) => Some(f.status),
            Decision::StayPending { .. } => None,
        };
        assert_eq!(status(0), Some(AggregatedStatus::DuplicateRecord));
        assert_eq!(status(1), Some(AggregatedStatus::Success));
        assert_eq!(
            status(2),
            Some(AggregatedStatus::DuplicateRecordQuantityMismatch)
        );
        assert_eq!(status(3), Some(AggregatedStatus::CustomerNotSubscribed));
        assert_eq!(status(4), None);
        assert_eq!(status(5), None);
        assert_eq!(status(6), Some(AggregatedStatus::Success));
        assert_eq!(status(7), None);
        assert!(d[1].is_billed() && d[6].is_billed() && !d[0].is_billed() && !d[2].is_billed());
        let Decision::Finalize(f) = &d[6] else {
            panic!()
        };
        assert_eq!(f.metering_record_id.as_deref(), Some("id-7"));
        assert_eq!(d[0].metric().unwrap().name, metrics::DUPLICATE_RECORD);
        assert_eq!(
            d[2].metric().unwrap().name,
            metrics::DUPLICATE_RECORD_QUANTITY_MISMATCH
        );
        assert_eq!(
            d[4].metric().unwrap().name,
            metrics::USAGE_RECORD_UNPROCESSED
        );
        assert_eq!(d[1].metric(), None);
    }

    #[test]
    fn a_refused_hour_with_an_attempt_on_file_needs_reconciliation() {
        let fresh = SubmitRecord::new(g("1"), 5, None);
        let mut tried = SubmitRecord::new(g("2"), 5, None);
        tried.mark_sent();
        let status = |d: Decision| match d {
            Decision::Finalize(f) => f.status,
            Decision::StayPending { .. } => panic!("final"),
        };
        let oob = TIMESTAMP_OUT_OF_BOUNDS_EXCEPTION;
        assert_eq!(
            status(poison_decision_for(&fresh, oob)),
            AggregatedStatus::Error
        );
        let d = poison_decision_for(&tried, oob);
        assert_eq!(
            d.metric().unwrap().name,
            metrics::USAGE_NEEDS_RECONCILIATION
        );
        assert_eq!(status(d), AggregatedStatus::NeedsReconciliation);
        assert_eq!(
            status(poison_decision_for(&tried, "InvalidTagException")),
            AggregatedStatus::Error
        );
    }

    #[test]
    fn terminal_helpers() {
        let e = poison_decision("InvalidUsageDimensionException");
        assert_eq!(
            e.metric(),
            Some(MetricEvent {
                name: metrics::BATCH_METER_USAGE_EXCEPTION,
                dimension: Some((metrics::EXCEPTION, "InvalidUsageDimensionException".into()))
            })
        );
        assert_eq!(
            submission_expired_decision().metric().unwrap().name,
            metrics::USAGE_SUBMISSION_EXPIRED
        );
        assert_eq!(dry_run_decision().metric(), None);
        assert!(matches!(
            oversized_decision(),
            Decision::Finalize(Finalize {
                status: AggregatedStatus::Error,
                ..
            })
        ));
    }
}
