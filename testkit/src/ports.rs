//! One fault wrapper, [`Faulty<T>`], around every port the consumer, the pipeline,
//! meter-ingest and the lifecycle use, over their in-memory adapters ([`crate::memory`]) or
//! their AWS adapters alike. Each call asks the [`FaultPlan`] whether to fail before applying
//! (throttled, a server error, or the invocation crashes), to apply and then fail (a lost
//! response, or a crash after the write), or to let another stage run first
//! ([`Interleaver`]); the port's error type says how an injected fault reads ([`Injected`]).
//! A port's impl for `Faulty<T>` only names each call: its operation, the key its decision is
//! made on, and whether it writes.
//!
//! The consumer and the pipeline share one raw usage table ([`ConsumerRows`] writes the
//! consumer's conditional row writes into the pipeline's `MemoryUsageStore`), and the
//! consumer's finalized-group check reads the aggregated table ([`AggregatedFinalized`]), as
//! in AWS. `BatchMeterUsage` ([`FaultyMetering`]) is not a pass-or-fail call: its faults are
//! the in-memory API's own (throttling, no answer, applied then lost, unprocessed records).

use crate::faults::{Fault, FaultPlan};
use crate::interleave::Interleaver;
use async_trait::async_trait;
use awsmp_aws::watermark::MemoryWatermarkStore;
use awsmp_consumer::error::ConsumerError;
use awsmp_contract::keys::{GroupKey, HourBucket, RowKey};
use awsmp_contract::status::RawStatus;
use awsmp_meter_ingest::IngestError;
use awsmp_pipeline::adapters::memory::{
    CallFault, InjectedFault, MemoryAggregatedStore, MemoryMeteringApi, MemoryUsageStore,
};
use awsmp_pipeline::domain::batch::{CallKind, SubmitRecord};
use awsmp_pipeline::domain::results::ApiResponse;
use awsmp_pipeline::error::PipelineError;
use awsmp_pipeline::ports::{
    AggregatedItem, AggregatedStore, ExpiredRow, FoldedFinalize, MessageQueue, MeterCallError,
    MeteringApi, UsageStore, WriteBack,
};
use chrono::{DateTime, Utc};
use std::future::Future;
use std::sync::Arc;

mod consumer;
mod lifecycle;
mod metering;
mod shared;
pub use consumer::{AggregatedFinalized, ConsumerRows};
pub use lifecycle::{FaultyIndex, FaultySubscribers};
pub use shared::injected_store;

/// What every wrapper shares: the plan and the interleaver.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The fault plan.
    pub faults: Arc<FaultPlan>,
    /// Runs another stage at a preemption point.
    pub interleaver: Arc<Interleaver>,
}

impl Ctx {
    /// Wrappers under `plan`, with no other stage to run at a preemption point (a test of one
    /// component, the load test).
    pub fn new(plan: impl Into<Arc<FaultPlan>>) -> Self {
        Self {
            faults: plan.into(),
            interleaver: Arc::default(),
        }
    }
}

/// DynamoDB's answers to a call refused before applying: throttles and 5xx, each retryable
/// (`awsmp_aws::dynamodb::RETRYABLE_CODES`).
const REFUSED_CODES: [&str; 5] = [
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "InternalServerError",
    "ServiceUnavailable",
];
/// What a store call whose answer was lost after it applied reads as: the SDK's timeout.
const TIMED_OUT: &str = "TimeoutError";
/// What a call of an invocation that crashed reads as (it never returns in AWS).
const CRASHED: &str = "InvocationCrashed";

/// An injected server error refused before applying: the 5xx codes of [`REFUSED_CODES`].
const SERVER_ERRORS: usize = 3;

/// An injected failure as a port's error reads it: the fault (`None` as a crash) and the
/// call's variant ([`crate::faults::Call::variant`]), which picks its error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failed {
    /// The fault.
    pub fault: Option<Fault>,
    /// Picks among the codes of the fault's kind.
    pub variant: u64,
}

impl Failed {
    /// A failure of `fault` with the first code of its kind.
    pub fn of(fault: Option<Fault>) -> Self {
        Self { fault, variant: 0 }
    }

    /// Its DynamoDB error code.
    pub fn code(self) -> &'static str {
        match self.fault {
            Some(Fault::Throttle) => REFUSED_CODES[(self.variant % 5) as usize],
            Some(Fault::FailBeforeApply) => {
                REFUSED_CODES[SERVER_ERRORS + (self.variant % 2) as usize]
            }
            Some(Fault::LoseResponse) => TIMED_OUT,
            _ => CRASHED,
        }
    }

    /// Whether the real DynamoDB adapters mark it retryable (`awsmp_aws::dynamodb::is_retryable`):
    /// a throttle or a 5xx by its code, a timeout always; a crash never (the invocation is
    /// over, nothing retries).
    pub fn retryable(self) -> bool {
        match self.fault {
            Some(Fault::Throttle | Fault::FailBeforeApply) => {
                awsmp_aws::dynamodb::is_retryable_code(self.code())
            }
            Some(Fault::LoseResponse) => true,
            _ => false,
        }
    }
}

/// The error the DynamoDB adapter returns for an injected failure of `operation`, marked
/// retryable as the adapter marks it, so the handler's retry loop (`awsmp_aws::retry`) runs;
/// its delays are seeded per schedule (`awsmp_aws::retry::seed_delays`), so retries that run
/// side by side (cleanup, expiry, age-out, the submitter's marks) wake in the same order on
/// every replay.
pub fn injected_dynamodb(operation: &'static str, failed: Failed) -> PipelineError {
    // The shared stores' error of the same name, through the pipeline's conversion of it.
    shared::injected_store(operation, failed).into()
}

/// The error the SQS adapter returns for an injected fault of a send to `queue`.
pub fn injected_sqs(queue: &'static str, fault: Option<Fault>) -> PipelineError {
    PipelineError::Sqs {
        operation: "SendMessageBatch",
        queue: queue.to_owned(),
        detail: Failed::of(fault).code().to_owned(),
        source: Some(Box::new(InjectedFault {
            operation: "send_all",
            code: Failed::of(fault).code(),
        })),
    }
}

/// How a port's error type reads an injected failure of `operation`.
pub trait Injected {
    /// The error for `failed`.
    fn injected(operation: &'static str, failed: Failed) -> Self;
}

impl Injected for PipelineError {
    fn injected(operation: &'static str, failed: Failed) -> Self {
        injected_dynamodb(operation, failed)
    }
}

impl Injected for ConsumerError {
    fn injected(store: &'static str, failed: Failed) -> Self {
        ConsumerError::Store {
            store,
            source: Box::new(InjectedFault {
                operation: store,
                code: failed.code(),
            }),
            retryable: failed.retryable(),
        }
    }
}

impl Injected for IngestError {
    fn injected(store: &'static str, failed: Failed) -> Self {
        IngestError::Store {
            store,
            source: Box::new(InjectedFault {
                operation: store,
                code: failed.code(),
            }),
            retryable: failed.retryable(),
        }
    }
}

/// Let another stage run one step before the call at `site`.
pub async fn preempt(interleaver: &Interleaver, site: &'static str) {
    interleaver.run(site).await;
}

/// Yield to the other invocation of a race `n` times (the scheduler polls it meanwhile).
pub async fn yield_times(n: u32) {
    for _ in 0..n {
        tokio::task::yield_now().await;
    }
}

/// A port under the fault plan.
pub struct Faulty<T: ?Sized> {
    /// The port.
    pub inner: Arc<T>,
    /// Plan and interleaver.
    pub ctx: Ctx,
}

impl<T: ?Sized> Faulty<T> {
    /// `inner` under `ctx`'s plan.
    pub fn new(inner: impl Into<Arc<T>>, ctx: &Ctx) -> Self {
        Self {
            inner: inner.into(),
            ctx: ctx.clone(),
        }
    }

    /// Run `call` under the plan's decision for (`op`, `key`); `write` calls may also lose
    /// their response or crash after applying.
    pub async fn call<R, E: Injected>(
        &self,
        op: &'static str,
        key: &str,
        write: bool,
        call: impl Future<Output = Result<R, E>>,
    ) -> Result<R, E> {
        let decided = self.ctx.faults.call(op, key, write);
        if decided.stopped {
            // The invocation crashed at an earlier call: nothing after it applies.
            return Err(E::injected(op, Failed::of(Some(Fault::Crash))));
        }
        yield_times(decided.yields).await;
        let fault = decided.fault;
        let failed = Failed {
            fault,
            variant: decided.variant,
        };
        match fault {
            Some(Fault::Throttle | Fault::FailBeforeApply | Fault::Crash) => {
                return Err(E::injected(op, failed));
            }
            Some(Fault::Preempt) => preempt(&self.ctx.interleaver, op).await,
            _ => {}
        }
        let out = call.await?;
        match fault {
            Some(Fault::LoseResponse | Fault::ApplyThenFail) => Err(E::injected(op, failed)),
            _ => Ok(out),
        }
    }

    /// [`Faulty::call`] with a key that is costly to name (a bucket's or a group's text):
    /// named only when the plan may decide something ([`FaultPlan::quiet`]); a quiet call
    /// runs as [`Faulty::call`] runs it, with no fault and no yield.
    pub async fn call_keyed<R, E: Injected>(
        &self,
        op: &'static str,
        key: impl FnOnce() -> String,
        write: bool,
        call: impl Future<Output = Result<R, E>>,
    ) -> Result<R, E> {
        if self.ctx.faults.quiet() {
            return call.await;
        }
        self.call(op, &key(), write, call).await
    }
}

/// The raw usage table, faulty.
pub type FaultyUsage = Faulty<MemoryUsageStore>;
/// The aggregated-usage table, faulty.
pub type FaultyAggregated = Faulty<MemoryAggregatedStore>;
/// The ingest-watermark table, faulty.
pub type FaultyWatermarks = Faulty<MemoryWatermarkStore>;

type PResult<T> = awsmp_pipeline::error::Result<T>;

#[async_trait]
impl<T: UsageStore + ?Sized> UsageStore for Faulty<T> {
    async fn pending_groups(
        &self,
        bucket: HourBucket,
        license: Option<&str>,
    ) -> PResult<Vec<GroupKey>> {
        if self.ctx.faults.empty_tables().usage {
            return Ok(Vec::new());
        }
        let call = self.inner.pending_groups(bucket, license);
        self.call_keyed("pending_groups", || bucket.to_string(), false, call)
            .await
    }

    async fn read_pending_rows(
        &self,
        group: &GroupKey,
        each: &mut (dyn FnMut(awsmp_pipeline::domain::fold::UsageRow) + Send),
    ) -> PResult<()> {
        let call = self.inner.read_pending_rows(group, each);
        self.call_keyed("read_pending_rows", || group.to_string(), false, call)
            .await
    }

    async fn finalize_row(
        &self,
        key: &RowKey,
        status: Option<(RawStatus, &str)>,
        now: DateTime<Utc>,
    ) -> PResult<bool> {
        let call = self.inner.finalize_row(key, status, now);
        self.call("finalize_row", &key.sort_key, true, call).await
    }

    async fn finalize_folded(
        &self,
        key: &RowKey,
        folded: u64,
        reason: &str,
        now: DateTime<Utc>,
    ) -> PResult<FoldedFinalize> {
        let call = self.inner.finalize_folded(key, folded, reason, now);
        self.call("finalize_folded", &key.sort_key, true, call)
            .await
    }

    async fn expire_bucket(
        &self,
        bucket: HourBucket,
        reason: &str,
        now: DateTime<Utc>,
    ) -> PResult<Vec<ExpiredRow>> {
        if self.ctx.faults.empty_tables().usage {
            return Ok(Vec::new());
        }
        let call = self.inner.expire_bucket(bucket, reason, now);
        self.call_keyed("expire_bucket", || bucket.to_string(), true, call)
            .await
    }
}

#[async_trait]
impl<T: AggregatedStore + ?Sized> AggregatedStore for Faulty<T> {
    async fn put_if_absent(&self, item: &AggregatedItem, now: DateTime<Utc>) -> PResult<bool> {
        let call = self.inner.put_if_absent(item, now);
        self.call_keyed("put_if_absent", || item.group.to_string(), true, call)
            .await
    }

    async fn get(&self, group: &GroupKey) -> PResult<Option<AggregatedItem>> {
        let call = self.inner.get(group);
        self.call_keyed("get", || group.to_string(), false, call)
            .await
    }

    async fn pending(
        &self,
        bucket: HourBucket,
        license: Option<&str>,
    ) -> PResult<Vec<AggregatedItem>> {
        if self.ctx.faults.empty_tables().aggregated {
            return Ok(Vec::new());
        }
        let call = self.inner.pending(bucket, license);
        self.call_keyed("pending", || bucket.to_string(), false, call)
            .await
    }

    async fn mark_attempted(
        &self,
        group: &GroupKey,
        quantity: u64,
        now: DateTime<Utc>,
    ) -> PResult<bool> {
        let call = self.inner.mark_attempted(group, quantity, now);
        self.call_keyed("mark_attempted", || group.to_string(), true, call)
            .await
    }

    async fn retract_attempt(
        &self,
        group: &GroupKey,
        quantity: u64,
        previous: Option<u64>,
        now: DateTime<Utc>,
    ) -> PResult<()> {
        let call = self.inner.retract_attempt(group, quantity, previous, now);
        self.call_keyed("retract_attempt", || group.to_string(), true, call)
            .await
    }

    async fn write_back(
        &self,
        group: &GroupKey,
        outcome: &WriteBack,
        now: DateTime<Utc>,
    ) -> PResult<bool> {
        let call = self.inner.write_back(group, outcome, now);
        self.call_keyed("write_back", || group.to_string(), true, call)
            .await
    }
}

#[async_trait]
impl<T: MessageQueue + ?Sized> MessageQueue for Faulty<T> {
    async fn send_all(&self, bodies: &[String]) -> PResult<()> {
        let key = bodies.first().map_or("", String::as_str);
        let decided = self.ctx.faults.call("send_all", key, true);
        let fault = if decided.stopped {
            Some(Fault::Crash)
        } else {
            decided.fault
        };
        match fault {
            Some(Fault::Throttle | Fault::FailBeforeApply | Fault::Crash) => {
                return Err(injected_sqs("queue", fault));
            }
            Some(Fault::Preempt) => preempt(&self.ctx.interleaver, "send_all").await,
            _ => {}
        }
        self.inner.send_all(bodies).await?;
        match fault {
            Some(Fault::LoseResponse | Fault::ApplyThenFail) => Err(injected_sqs("queue", fault)),
            _ => Ok(()),
        }
    }
}

/// `BatchMeterUsage`'s 5xx (retryable, proving nothing about whether the call applied).
const INTERNAL_ERROR: &str = "InternalServiceErrorException";

/// `BatchMeterUsage`, faulty: each call may be throttled, lost before or after AWS applied
/// it, or answered with some records unprocessed (the in-memory API's own fault script).
pub struct FaultyMetering {
    /// The API and its ledger.
    pub inner: Arc<MemoryMeteringApi>,
    /// Plan and interleaver.
    pub ctx: Ctx,
    /// An outage: every call in `[from, until)` is applied and its answer lost.
    pub outage: Option<(DateTime<Utc>, DateTime<Utc>)>,
    /// In the outage every call is answered `InternalServiceErrorException` after it applied,
    /// instead of getting no answer.
    pub outage_5xx: bool,
    /// The virtual clock.
    pub clock: Arc<awsmp_contract::clock::FixedClock>,
}

#[async_trait]
impl MeteringApi for FaultyMetering {
    async fn batch_meter_usage(
        &self,
        kind: &CallKind,
        records: &[SubmitRecord],
    ) -> Result<ApiResponse, MeterCallError> {
        if records.len() == awsmp_contract::limits::marketplace::MAX_USAGE_RECORDS_PER_CALL {
            self.ctx.faults.count("limit-25-record-call");
        }
        let groups: Vec<String> = records.iter().map(|r| r.group.to_string()).collect();
        let note = || {
            self.ctx
                .faults
                .note_attempt_faults(groups.iter().map(String::as_str));
        };
        if self.ctx.faults.crashed() {
            // The run crashed at an earlier call: this one never reaches AWS.
            note();
            self.inner.script([CallFault::NoResponse]);
            return self.inner.batch_meter_usage(kind, records).await;
        }
        let now = awsmp_contract::clock::Clock::now(self.clock.as_ref());
        if self
            .outage
            .is_some_and(|(from, until)| from <= now && now < until)
        {
            self.ctx.faults.count("marketplace-outage");
            note();
            if self.outage_5xx {
                self.ctx.faults.count("marketplace-5xx-after-applying");
                self.inner
                    .script([CallFault::ApplyThenException(INTERNAL_ERROR.into())]);
            } else {
                self.inner.script([CallFault::ApplyThenLoseResponse]);
            }
            return self.inner.batch_meter_usage(kind, records).await;
        }
        let key = records
            .first()
            .map(|r| r.group.to_string())
            .unwrap_or_default();
        let decided = self.ctx.faults.call("batch_meter_usage", &key, true);
        if decided.stopped {
            note();
            self.inner.script([CallFault::NoResponse]);
            return self.inner.batch_meter_usage(kind, records).await;
        }
        yield_times(decided.yields).await;
        let fault = decided.fault;
        if fault.is_some_and(|f| f != Fault::Preempt) {
            note();
        }
        // A refused call is throttled or a 5xx that applied nothing; a lost one was applied and
        // its answer lost, or answered with a 5xx after AWS applied it (a 5xx proves nothing:
        // docs/metering-api.md).
        let five_xx = decided.variant % 2 == 1;
        let scripted = match fault {
            Some(Fault::Throttle) if five_xx => Some(CallFault::Exception(INTERNAL_ERROR.into())),
            Some(Fault::Throttle) => Some(CallFault::Exception("ThrottlingException".into())),
            Some(Fault::FailBeforeApply) => Some(CallFault::Exception(INTERNAL_ERROR.into())),
            Some(Fault::Crash) => Some(CallFault::NoResponse),
            Some(Fault::LoseResponse) if five_xx => {
                self.ctx.faults.count("marketplace-5xx-after-applying");
                Some(CallFault::ApplyThenException(INTERNAL_ERROR.into()))
            }
            Some(Fault::LoseResponse | Fault::ApplyThenFail) => {
                Some(CallFault::ApplyThenLoseResponse)
            }
            Some(Fault::Preempt) => {
                preempt(&self.ctx.interleaver, "batch_meter_usage").await;
                (records.len() > 1).then_some(CallFault::Unprocessed(records.len() / 2))
            }
            None => None,
        };
        if let Some(s) = scripted {
            self.inner.script([s]);
        }
        self.inner.batch_meter_usage(kind, records).await
    }
}

#[cfg(test)]
mod tests;
