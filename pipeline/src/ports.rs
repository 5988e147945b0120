//! Ports: the small capabilities the pipeline stages need from the outside world. Adapters
//! over `aws-sdk-*` live in [`crate::adapters`]; handlers only see these traits.

use crate::domain::fold::UsageRow;
use crate::error::Result;
use async_trait::async_trait;
use awsmp_contract::keys::{GroupKey, HourBucket, RowKey};
use awsmp_contract::row::Allocation;
use awsmp_contract::status::{AggregatedStatus, RawStatus};
use chrono::{DateTime, Utc};

/// One aggregated-usage record as stored (`awsmp-aggregated-usage`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggregatedItem {
    /// The group: license, account, dimension, hour.
    pub group: GroupKey,
    /// Summed quantity.
    pub quantity: u64,
    /// Merged VMT allocations, if the group's rows carried any.
    pub allocations: Option<Vec<Allocation>>,
    /// Raw rows folded in (0 for direct-submit records).
    pub row_count: u32,
    /// Seconds of the hour that contributed, as a 3,600-bit bitmap (450 bytes), so a re-visit
    /// can tell a lost cleanup from a late row. Empty for direct-submit records.
    pub contributed_seconds: Vec<u8>,
    /// The folded quantity of each contributing second
    /// ([`SecondQuantities::to_bytes`](crate::domain::fold::SecondQuantities::to_bytes)), so a
    /// re-visit tells a row that grew after the fold. Empty for direct-submit records and
    /// records written before it existed.
    pub contributed_quantities: Vec<u8>,
    /// The part of the group-hour's sum above the API maximum (not billed; `quantity` is the
    /// maximum then), stored as `overflowQuantity`, `overflowAllocations`, `overflowReason`.
    pub overflow: Option<crate::domain::fold::Overflow>,
    /// Legacy (pre-Concurrent-Agreements) customer identifier; `group.license_arn` then holds
    /// the product code.
    pub customer_identifier: Option<String>,
    /// Still discoverable by the submitter.
    pub pending: bool,
    /// Terminal status, once written back.
    pub status: Option<AggregatedStatus>,
    /// Reason text accompanying the status.
    pub status_reason: Option<String>,
    /// MeteringRecordId returned by AWS.
    pub metering_record_id: Option<String>,
    /// Quantity of our last BatchMeterUsage attempt, persisted before the call so a replay
    /// after a crash is recognised.
    pub attempted_quantity: Option<u64>,
    /// When that attempt was made.
    pub submission_attempted_at: Option<DateTime<Utc>>,
    /// How many attempt marks were written (`attemptNumber`); absent on records never marked
    /// (and on records marked before it existed).
    pub attempt_number: Option<u64>,
}

impl AggregatedItem {
    /// A fresh pending record.
    pub fn new(group: GroupKey, quantity: u64, allocations: Option<Vec<Allocation>>) -> Self {
        Self {
            group,
            quantity,
            allocations,
            row_count: 0,
            contributed_seconds: Vec::new(),
            contributed_quantities: Vec::new(),
            overflow: None,
            customer_identifier: None,
            pending: true,
            status: None,
            status_reason: None,
            metering_record_id: None,
            attempted_quantity: None,
            submission_attempted_at: None,
            attempt_number: None,
        }
    }

    /// The attempt on file, if any: what expiry conditions its write on
    /// ([`AttemptCondition`]).
    pub fn attempt(&self) -> Option<Attempt> {
        self.attempted_quantity.map(|quantity| Attempt {
            quantity,
            number: self.attempt_number,
        })
    }
}

/// One attempt mark as read: a call of `quantity` that AWS may have applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    /// `attemptedQuantity`.
    pub quantity: u64,
    /// `attemptNumber` (`None` on a record marked before it existed).
    pub number: Option<u64>,
}

/// What a write-back requires of the record's attempt mark, on top of the record still being
/// pending: a writer that decided from a snapshot names the attempt it saw, so a mark written
/// since (a call that may since have been billed) makes its write fail instead of landing
/// (docs/guarantees.md, "Submitter and expiry").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AttemptCondition {
    /// No requirement: the submitter writing back the answer to its own call.
    #[default]
    Any,
    /// No attempt on file (`attemptedQuantity` absent): expiry's `SubmissionExpired`.
    NoAttempt,
    /// Exactly this attempt on file, quantity and number: expiry's `NeedsReconciliation`.
    Exactly(Attempt),
}

/// A terminal write-back onto an aggregated record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteBack {
    /// Status to record.
    pub status: AggregatedStatus,
    /// Reason text (exception name for `Error`).
    pub reason: Option<String>,
    /// MeteringRecordId, when AWS returned one.
    pub metering_record_id: Option<String>,
    /// Epoch-seconds TTL to set (only on `Success`, only when configured).
    pub ttl: Option<i64>,
    /// What the record's attempt mark must be for the write to land.
    pub if_attempt: AttemptCondition,
}

/// A raw row the age-out sweep expired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredRow {
    /// Its key.
    pub key: RowKey,
    /// Its quantity, when numeric (what revenue the expiry lost).
    pub quantity: Option<u64>,
}

/// How [`UsageStore::finalize_folded`] left a raw row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FoldedFinalize {
    /// The row is gone (nothing created).
    Gone,
    /// The row held what was folded: stamped as billed.
    Stamped,
    /// The row held more than was folded: stamped as billed for the folded part, with the
    /// difference recorded on the row as late usage.
    Late {
        /// The late quantity (exact).
        quantity: u64,
        /// False when an earlier delivery had already recorded it (the call is idempotent).
        recorded_now: bool,
    },
}

/// The raw usage table.
#[async_trait]
pub trait UsageStore: Send + Sync {
    /// Distinct groups with pending rows in `bucket` (paginated sparse-GSI query), optionally
    /// only for one license (the GSI sort key).
    async fn pending_groups(
        &self,
        bucket: HourBucket,
        license: Option<&str>,
    ) -> Result<Vec<GroupKey>>;
    /// Every still-pending row of `group` (targeted `begins_with` read), page by page; a row
    /// exactly as the writer contract makes it may be handed compacted ([`UsageRow::Compact`],
    /// of [`RowShape::of`](crate::domain::fold::RowShape::of) `group`).
    async fn read_pending_rows(
        &self,
        group: &GroupKey,
        each: &mut (dyn FnMut(UsageRow) + Send),
    ) -> Result<()>;
    /// Finalize one row: remove `meteringPending` and, with a status, stamp it. Idempotent;
    /// never creates a row that does not exist. Returns false when the row is gone.
    async fn finalize_row(
        &self,
        key: &RowKey,
        status: Option<(RawStatus, &str)>,
        now: DateTime<Utc>,
    ) -> Result<bool>;
    /// Finalize a folded row `Aggregated` with `reason` only if it still holds `folded`;
    /// otherwise (a contribution landed after the fold) stamp it with `foldedQuantity`,
    /// `lateQuantity` (the exact difference) and `lateReason` `LateUsage`, conditioned on the
    /// quantity it was read with, so nothing is lost and a redelivery records nothing twice.
    async fn finalize_folded(
        &self,
        key: &RowKey,
        folded: u64,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<FoldedFinalize>;
    /// Expire every row still pending in `bucket` (`AggregationExpired`).
    async fn expire_bucket(
        &self,
        bucket: HourBucket,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<Vec<ExpiredRow>>;
}

/// The aggregated-usage table: the source of truth for submission.
#[async_trait]
pub trait AggregatedStore: Send + Sync {
    /// The commit point: write `item` unless its group already has a record. True when written.
    async fn put_if_absent(&self, item: &AggregatedItem, now: DateTime<Utc>) -> Result<bool>;
    /// The record of `group`, if any.
    async fn get(&self, group: &GroupKey) -> Result<Option<AggregatedItem>>;
    /// Pending records of `bucket` (sparse GSI), optionally for one license.
    async fn pending(
        &self,
        bucket: HourBucket,
        license: Option<&str>,
    ) -> Result<Vec<AggregatedItem>>;
    /// Persist that we are about to submit `quantity` (before calling BatchMeterUsage):
    /// `attemptedQuantity`, `submissionAttemptedAt`, and `attemptNumber` one higher. Only while
    /// the record is pending; false when it no longer is (finalized meanwhile, e.g. expired):
    /// the caller must not send it then.
    async fn mark_attempted(
        &self,
        group: &GroupKey,
        quantity: u64,
        now: DateTime<Utc>,
    ) -> Result<bool>;
    /// Take back the mark of an attempt of `quantity` that AWS provably did not apply
    /// (throttled, refused, unprocessed): `attemptedQuantity` goes back to `previous` (removed,
    /// with `submissionAttemptedAt`, when `None`). Only while the record is pending and the
    /// mark is still `quantity`; otherwise nothing changes.
    async fn retract_attempt(
        &self,
        group: &GroupKey,
        quantity: u64,
        previous: Option<u64>,
        now: DateTime<Utc>,
    ) -> Result<()>;
    /// Record a terminal outcome and clear `meteringPending`, only while the record is pending
    /// and its attempt mark meets `outcome.if_attempt`. False when it was no longer pending
    /// (finalized, by someone else or by an earlier delivery of this very write) or its attempt
    /// mark was not the one required.
    async fn write_back(
        &self,
        group: &GroupKey,
        outcome: &WriteBack,
        now: DateTime<Utc>,
    ) -> Result<bool>;
}

/// An SQS queue the pipeline sends to.
#[async_trait]
pub trait MessageQueue: Send + Sync {
    /// Send every body (batched ≤10 per call). Any entry that fails is an error naming it:
    /// partial `SendMessageBatch` failures are never ignored.
    async fn send_all(&self, bodies: &[String]) -> Result<()>;
}

/// A failed `BatchMeterUsage` call.
#[derive(Debug, thiserror::Error)]
pub enum MeterCallError {
    /// AWS answered with an exception (request-level validation, throttling, internal error,
    /// disabled API, …); classify by name with [`crate::domain::bisect::classify_exception`].
    /// The SDK's error is kept as the source, so its message and request id reach the logs.
    #[error("BatchMeterUsage answered {name}")]
    Exception {
        /// Exception name, e.g. `InvalidUsageDimensionException`.
        name: String,
        /// Its message.
        message: String,
        /// The SDK error (none for an answer an in-memory adapter made up).
        #[source]
        source: Option<crate::error::SdkError>,
    },
    /// No answer (timeout, connection, unparseable response): the call may or may not have
    /// been applied, so it is retried like a transient error and a replay is recognised.
    #[error("no response from BatchMeterUsage")]
    Transport(#[source] crate::error::SdkError),
    /// A record could not be built into the SDK's request shape: nothing was sent. Treated
    /// like AWS's own `ValidationException`, so bisection isolates the record.
    #[error("BatchMeterUsage request could not be built")]
    Build(#[source] crate::error::SdkError),
}

impl MeterCallError {
    /// The exception name a request-level error counts as: AWS's own, or
    /// `ValidationException` for a request that could not be built. `None` when no answer
    /// came back.
    pub fn exception_name(&self) -> Option<&str> {
        match self {
            Self::Exception { name, .. } => Some(name),
            Self::Build(_) => Some(BUILD_FAILURE_EXCEPTION),
            Self::Transport(_) => None,
        }
    }
}

/// What a request that could not be built counts as: the common error AWS answers a malformed
/// request with (<https://docs.aws.amazon.com/marketplacemetering/latest/APIReference/CommonErrors.html>).
pub const BUILD_FAILURE_EXCEPTION: &str = "ValidationException";

/// The Marketplace Metering `BatchMeterUsage` capability.
#[async_trait]
pub trait MeteringApi: Send + Sync {
    /// One call with `records` (already planned: ≤25, ≤1 MB, one kind). Each record's
    /// timestamp is the start of its hour.
    async fn batch_meter_usage(
        &self,
        kind: &crate::domain::batch::CallKind,
        records: &[crate::domain::batch::SubmitRecord],
    ) -> std::result::Result<crate::domain::results::ApiResponse, MeterCallError>;
}
