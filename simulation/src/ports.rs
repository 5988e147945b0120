//! One fault wrapper, [`Faulty<T>`], around every port the consumer, the pipeline and
//! meter-ingest use, over the in-memory adapters of `pipeline/src/adapters/memory.rs`,
//! `consumer/src/adapters/memory.rs` and `meter-ingest/src/adapters/memory.rs`. Each call
//! asks the [`FaultPlan`] whether to fail before applying (throttled, or the invocation
//! crashes), to apply and then fail (a lost response, or a crash after the write), or to let
//! another stage run first ([`Interleaver`]); the port's error type says how an injected fault
//! reads ([`Injected`]). A port's impl for `Faulty<T>` only names each call: its operation,
//! the key its decision is made on, and whether it writes.
//!
//! The consumer and the pipeline share one raw usage table ([`ConsumerRows`] writes the
//! consumer's conditional row writes into the pipeline's `MemoryUsageStore`), and the
//! consumer's finalized-group check reads the aggregated table ([`AggregatedFinalized`]), as
//! in AWS. `BatchMeterUsage` ([`FaultyMetering`]) is not a pass-or-fail call: its faults are
//! the in-memory API's own (throttling, no answer, applied then lost, unprocessed records).

use crate::faults::{Fault, FaultPlan};
use crate::world::Interleaver;
use async_trait::async_trait;
use awsmp_aws::watermark::MemoryWatermarkStore;
use awsmp_consumer::domain::row::RowWrite;
use awsmp_consumer::error::ConsumerError;
use awsmp_consumer::ports::{
    ClaimOutcome, DedupClaim, DedupStore, FinalizedGroups, FirstSeen, LaneItem, RejectedEvent,
    RejectedEventStore, UsageRowWriter,
};
use awsmp_contract::keys::{GroupKey, HourBucket, RowKey};
use awsmp_contract::row::RawUsageRow;
use awsmp_contract::status::RawStatus;
use awsmp_meter_ingest::IngestError;
use awsmp_meter_ingest::mapping::MappingEntry;
use awsmp_meter_ingest::ports::{
    Disposition, HeldEvent, HeldStore, MappingStore, RateCounter, UsageStream,
};
use awsmp_pipeline::adapters::memory::{
    CallFault, InjectedFault, MemoryAggregatedStore, MemoryMeteringApi, MemoryUsageStore,
};
use awsmp_pipeline::domain::batch::{CallKind, SubmitRecord};
use awsmp_pipeline::domain::results::ApiResponse;
use awsmp_pipeline::error::PipelineError;
use awsmp_pipeline::ports::{
    AggregatedItem, AggregatedStore, ExpiredRow, FoldedFinalize, MeterCallError, MeteringApi,
    UsageStore, WriteBack,
};
use awsmp_producer::sink::PutEntry;
use chrono::{DateTime, Utc};
use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;

mod shared;
pub use shared::injected_store;

/// What every wrapper shares: the plan and the interleaver.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The fault plan.
    pub faults: Arc<FaultPlan>,
    /// Runs another stage at a preemption point.
    pub interleaver: Arc<Interleaver>,
}

fn code(fault: Option<Fault>) -> &'static str {
    match fault {
        Some(Fault::Throttle) => "ProvisionedThroughputExceededException",
        Some(Fault::LoseResponse) => "RequestTimeout",
        _ => "InvocationCrashed",
    }
}

fn retryable(fault: Option<Fault>) -> bool {
    matches!(fault, Some(Fault::Throttle) | Some(Fault::LoseResponse))
}

/// The error the DynamoDB adapter returns for an injected fault of `operation`, once the
/// handler's retry policy gave up on it: marked not retryable, so the handler's own retry
/// loop is not entered. That loop sleeps an unseeded full-jitter delay, and some handlers
/// run calls concurrently (cleanup, expiry, age-out): the order in which their retries woke
/// would decide the order of later calls, and a replay could not keep it. A throttle the
/// policy absorbs is only a delay, which the scheduler's interleavings already cover.
pub fn injected_dynamodb(operation: &'static str, fault: Option<Fault>) -> PipelineError {
    PipelineError::DynamoDb {
        operation,
        resource: "simulated".into(),
        source: Box::new(InjectedFault {
            operation,
            code: code(fault),
        }),
        retryable: false,
    }
}

/// The error the SQS adapter returns for an injected fault of a send to `queue`.
pub fn injected_sqs(queue: &'static str, fault: Option<Fault>) -> PipelineError {
    PipelineError::Sqs {
        operation: "SendMessageBatch",
        queue: queue.to_owned(),
        detail: code(fault).to_owned(),
        source: Some(Box::new(InjectedFault {
            operation: "send_all",
            code: code(fault),
        })),
    }
}

/// How a port's error type reads an injected fault of `operation`.
pub trait Injected {
    /// The error for `fault` (`None`: a crash before the call).
    fn injected(operation: &'static str, fault: Option<Fault>) -> Self;
}

impl Injected for PipelineError {
    fn injected(operation: &'static str, fault: Option<Fault>) -> Self {
        injected_dynamodb(operation, fault)
    }
}

impl Injected for ConsumerError {
    fn injected(store: &'static str, fault: Option<Fault>) -> Self {
        ConsumerError::Store {
            store,
            source: Box::new(InjectedFault {
                operation: store,
                code: code(fault),
            }),
            retryable: retryable(fault),
        }
    }
}

impl Injected for IngestError {
    fn injected(store: &'static str, fault: Option<Fault>) -> Self {
        IngestError::Store {
            store,
            source: Box::new(InjectedFault {
                operation: store,
                code: code(fault),
            }),
            retryable: retryable(fault),
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
pub struct Faulty<T> {
    /// The port.
    pub inner: Arc<T>,
    /// Plan and interleaver.
    pub ctx: Ctx,
}

impl<T> Faulty<T> {
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
            return Err(E::injected(op, Some(Fault::CrashBefore)));
        }
        yield_times(decided.yields).await;
        let fault = decided.fault;
        match fault {
            Some(Fault::Throttle) | Some(Fault::CrashBefore) => {
                return Err(E::injected(op, fault));
            }
            Some(Fault::Preempt) => preempt(&self.ctx.interleaver, op).await,
            _ => {}
        }
        let out = call.await?;
        match fault {
            Some(Fault::LoseResponse) | Some(Fault::CrashAfter) => Err(E::injected(op, fault)),
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
type CResult<T> = awsmp_consumer::error::Result<T>;
type IResult<T> = awsmp_meter_ingest::error::Result<T>;

#[async_trait]
impl<T: UsageStore> UsageStore for Faulty<T> {
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
impl<T: AggregatedStore> AggregatedStore for Faulty<T> {
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

/// `BatchMeterUsage`, faulty: each call may be throttled, lost before or after AWS applied
/// it, or answered with some records unprocessed (the in-memory API's own fault script).
pub struct FaultyMetering {
    /// The API and its ledger.
    pub inner: Arc<MemoryMeteringApi>,
    /// Plan and interleaver.
    pub ctx: Ctx,
    /// An outage: every call in `[from, until)` is applied and its answer lost.
    pub outage: Option<(DateTime<Utc>, DateTime<Utc>)>,
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
            self.inner.script([CallFault::ApplyThenLoseResponse]);
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
        let scripted = match fault {
            Some(Fault::Throttle) => Some(CallFault::Exception("ThrottlingException".into())),
            Some(Fault::CrashBefore) => Some(CallFault::NoResponse),
            Some(Fault::LoseResponse) | Some(Fault::CrashAfter) => {
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

/// The consumer's row writes, into the pipeline's raw usage table: a conditional write is
/// one read-apply-put with no await between, atomic on the single-threaded executor.
pub struct ConsumerRows {
    /// The shared table.
    pub table: Arc<MemoryUsageStore>,
}

#[async_trait]
impl UsageRowWriter for ConsumerRows {
    async fn read(&self, key: &RowKey) -> CResult<Option<RawUsageRow>> {
        Ok(self.table.row(key))
    }

    async fn write(&self, write: &RowWrite) -> CResult<bool> {
        Ok(match write.apply(self.table.row(&write.key).as_ref()) {
            Some(row) => self.table.put_row(row),
            None => false,
        })
    }
}

#[async_trait]
impl<T: UsageRowWriter> UsageRowWriter for Faulty<T> {
    async fn read(&self, key: &RowKey) -> CResult<Option<RawUsageRow>> {
        let call = self.inner.read(key);
        self.call("row-read", &key.sort_key, false, call).await
    }

    async fn write(&self, write: &RowWrite) -> CResult<bool> {
        let call = self.inner.write(write);
        self.call("row-write", &write.key.sort_key, true, call)
            .await
    }
}

#[async_trait]
impl<T: DedupStore> DedupStore for Faulty<T> {
    async fn claim(&self, claim: &DedupClaim) -> CResult<ClaimOutcome> {
        // A KPL record's key is the MD5 of its body, which holds generated ids (random epochs):
        // its stream position names it stably.
        let key = if claim.key.starts_with("kpl:") {
            format!("{}:{}", claim.shard_id, claim.sequence_number.decimal())
        } else {
            claim.key.clone()
        };
        let call = self.inner.claim(claim);
        self.call("claim", &key, true, call).await
    }

    async fn read_lane(&self, key: &str) -> CResult<Option<LaneItem>> {
        let call = self.inner.read_lane(key);
        self.call("read_lane", key, false, call).await
    }

    async fn write_lane(&self, item: &LaneItem, expected: Option<u64>) -> CResult<bool> {
        let call = self.inner.write_lane(item, expected);
        self.call("write_lane", &item.key, true, call).await
    }

    async fn first_seen(&self, seen: &FirstSeen) -> CResult<DateTime<Utc>> {
        let call = self.inner.first_seen(seen);
        self.call("first_seen", &seen.key, true, call).await
    }
}

#[async_trait]
impl<T: RejectedEventStore> RejectedEventStore for Faulty<T> {
    async fn put(&self, event: &RejectedEvent) -> CResult<()> {
        let call = self.inner.put(event);
        self.call("rejected-put", &event.record_key, true, call)
            .await
    }
}

/// Finalized group-hours: those with an aggregated record (what the DynamoDB adapter reads).
pub struct AggregatedFinalized {
    /// The aggregated table.
    pub table: Arc<MemoryAggregatedStore>,
}

#[async_trait]
impl FinalizedGroups for AggregatedFinalized {
    async fn finalized(&self, groups: &[GroupKey]) -> CResult<HashSet<GroupKey>> {
        Ok(groups
            .iter()
            .filter(|g| self.table.contains(g))
            .cloned()
            .collect())
    }
}

#[async_trait]
impl<T: FinalizedGroups> FinalizedGroups for Faulty<T> {
    async fn finalized(&self, groups: &[GroupKey]) -> CResult<HashSet<GroupKey>> {
        // The consumer collects the groups through a hash set: name the call by its least.
        let key = groups
            .iter()
            .map(|g| g.to_string())
            .min()
            .unwrap_or_default();
        let call = self.inner.finalized(groups);
        self.call("finalized", &key, false, call).await
    }
}

#[async_trait]
impl<T: UsageStream> UsageStream for Faulty<T> {
    async fn put(&self, entries: Vec<PutEntry>) -> IResult<()> {
        let key = entries
            .first()
            .map(|e| format!("{}+{}", e.partition_key, entries.len()))
            .unwrap_or_default();
        let call = self.inner.put(entries);
        self.call("ingest-put-records", &key, true, call).await
    }
}

#[async_trait]
impl<T: MappingStore> MappingStore for Faulty<T> {
    async fn get(&self, invoked_arn: &str) -> IResult<Option<MappingEntry>> {
        let call = self.inner.get(invoked_arn);
        self.call("ingest-mapping-get", invoked_arn, false, call)
            .await
    }

    async fn put(&self, entry: &MappingEntry) -> IResult<()> {
        let call = self.inner.put(entry);
        self.call("ingest-mapping-put", &entry.invoked_arn, true, call)
            .await
    }
}

#[async_trait]
impl<T: RateCounter> RateCounter for Faulty<T> {
    async fn add(&self, key: &str, n: u64, expires_at: DateTime<Utc>) -> IResult<u64> {
        let call = self.inner.add(key, n, expires_at);
        self.call("ingest-rate-add", key, true, call).await
    }
}

#[async_trait]
impl<T: HeldStore> HeldStore for Faulty<T> {
    async fn put(&self, event: &HeldEvent) -> IResult<()> {
        let call = self.inner.put(event);
        self.call("ingest-held-put", &event.key, true, call).await
    }

    async fn list(&self, disposition: Disposition) -> IResult<Vec<HeldEvent>> {
        let call = self.inner.list(disposition);
        self.call("ingest-held-list", disposition.as_str(), false, call)
            .await
    }
}
