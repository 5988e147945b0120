//! Fault-injecting wrappers around every port the consumer and the pipeline use, over the
//! in-memory adapters of `pipeline/src/adapters/memory.rs` and
//! `consumer/src/adapters/memory.rs`. Each call asks the [`FaultPlan`] whether to fail before
//! applying (throttled, or the invocation crashes), to apply and then fail (a lost response,
//! or a crash after the write), or to let another stage run first ([`Interleaver`]).
//!
//! The consumer and the pipeline share one raw usage table ([`SharedUsageRows`] writes the
//! consumer's conditional row writes into the pipeline's `MemoryUsageStore`), and the
//! consumer's finalized-group check reads the aggregated table, as in AWS.

use crate::faults::{Fault, FaultPlan};
use crate::world::Interleaver;
use async_trait::async_trait;
use awsmp_consumer::domain::row::RowWrite;
use awsmp_consumer::error::ConsumerError;
use awsmp_consumer::ports::{
    ClaimOutcome, DedupClaim, DedupStore, FinalizedGroups, LaneItem, RejectedEvent,
    RejectedEventStore, UsageRowWriter,
};
use awsmp_pipeline::adapters::memory::{
    CallFault, InjectedFault, MemoryAggregatedStore, MemoryMeteringApi, MemoryUsageStore,
};
use awsmp_pipeline::contract::status::RawStatus;
use awsmp_pipeline::domain::batch::{CallKind, SubmitRecord};
use awsmp_pipeline::domain::keys::{GroupKey, HourBucket, RowKey};
use awsmp_pipeline::domain::results::ApiResponse;
use awsmp_pipeline::domain::row::RawUsageRow;
use awsmp_pipeline::error::PipelineError;
use awsmp_pipeline::ports::{
    AggregatedItem, AggregatedStore, ExpiredRow, FoldedFinalize, MeterCallError, MeteringApi,
    ShardWatermark, UsageStore, WatermarkStore, WriteBack,
};
use chrono::{DateTime, Utc};
use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;

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

fn injected_consumer(store: &'static str, fault: Option<Fault>) -> ConsumerError {
    ConsumerError::Store {
        store,
        source: Box::new(InjectedFault {
            operation: store,
            code: code(fault),
        }),
        retryable: retryable(fault),
    }
}

/// Let another stage run one step before the call at `site`.
pub async fn preempt(interleaver: &Interleaver, site: &'static str) {
    interleaver.run(site).await;
}

/// Run `call` under the plan's decision for (`op`, `key`).
async fn guarded<T, E, F>(
    ctx: &Ctx,
    op: &'static str,
    key: &str,
    write: bool,
    err: impl Fn(&'static str, Option<Fault>) -> E,
    call: F,
) -> Result<T, E>
where
    F: Future<Output = Result<T, E>>,
{
    let fault = ctx.faults.decide(op, key, write);
    match fault {
        Some(Fault::Throttle) | Some(Fault::CrashBefore) => return Err(err(op, fault)),
        Some(Fault::Preempt) => preempt(&ctx.interleaver, op).await,
        _ => {}
    }
    let out = call.await?;
    match fault {
        Some(Fault::LoseResponse) | Some(Fault::CrashAfter) => Err(err(op, fault)),
        _ => Ok(out),
    }
}

/// The raw usage table, faulty.
pub struct FaultyUsage {
    /// The table.
    pub inner: Arc<MemoryUsageStore>,
    /// Plan and interleaver.
    pub ctx: Ctx,
}

#[async_trait]
impl UsageStore for FaultyUsage {
    async fn pending_groups(
        &self,
        bucket: HourBucket,
        license: Option<&str>,
    ) -> awsmp_pipeline::error::Result<Vec<GroupKey>> {
        let key = bucket.to_string();
        let call = self.inner.pending_groups(bucket, license);
        guarded(
            &self.ctx,
            "pending_groups",
            &key,
            false,
            injected_dynamodb,
            call,
        )
        .await
    }

    async fn read_pending_rows(
        &self,
        group: &GroupKey,
        each: &mut (dyn FnMut(RawUsageRow) + Send),
    ) -> awsmp_pipeline::error::Result<()> {
        let key = group.to_string();
        let call = self.inner.read_pending_rows(group, each);
        guarded(
            &self.ctx,
            "read_pending_rows",
            &key,
            false,
            injected_dynamodb,
            call,
        )
        .await
    }

    async fn finalize_row(
        &self,
        key: &RowKey,
        status: Option<(RawStatus, &str)>,
        now: DateTime<Utc>,
    ) -> awsmp_pipeline::error::Result<bool> {
        let k = key.sort_key.clone();
        let call = self.inner.finalize_row(key, status, now);
        guarded(&self.ctx, "finalize_row", &k, true, injected_dynamodb, call).await
    }

    async fn finalize_folded(
        &self,
        key: &RowKey,
        folded: u64,
        reason: &str,
        now: DateTime<Utc>,
    ) -> awsmp_pipeline::error::Result<FoldedFinalize> {
        let k = key.sort_key.clone();
        let call = self.inner.finalize_folded(key, folded, reason, now);
        guarded(
            &self.ctx,
            "finalize_folded",
            &k,
            true,
            injected_dynamodb,
            call,
        )
        .await
    }

    async fn expire_bucket(
        &self,
        bucket: HourBucket,
        reason: &str,
        now: DateTime<Utc>,
    ) -> awsmp_pipeline::error::Result<Vec<ExpiredRow>> {
        let key = bucket.to_string();
        let call = self.inner.expire_bucket(bucket, reason, now);
        guarded(
            &self.ctx,
            "expire_bucket",
            &key,
            true,
            injected_dynamodb,
            call,
        )
        .await
    }
}

/// The aggregated-usage table, faulty.
pub struct FaultyAggregated {
    /// The table.
    pub inner: Arc<MemoryAggregatedStore>,
    /// Plan and interleaver.
    pub ctx: Ctx,
}

#[async_trait]
impl AggregatedStore for FaultyAggregated {
    async fn put_if_absent(
        &self,
        item: &AggregatedItem,
        now: DateTime<Utc>,
    ) -> awsmp_pipeline::error::Result<bool> {
        let key = item.group.to_string();
        let call = self.inner.put_if_absent(item, now);
        guarded(
            &self.ctx,
            "put_if_absent",
            &key,
            true,
            injected_dynamodb,
            call,
        )
        .await
    }

    async fn get(&self, group: &GroupKey) -> awsmp_pipeline::error::Result<Option<AggregatedItem>> {
        let key = group.to_string();
        let call = self.inner.get(group);
        guarded(&self.ctx, "get", &key, false, injected_dynamodb, call).await
    }

    async fn pending(
        &self,
        bucket: HourBucket,
        license: Option<&str>,
    ) -> awsmp_pipeline::error::Result<Vec<AggregatedItem>> {
        let key = bucket.to_string();
        let call = self.inner.pending(bucket, license);
        guarded(&self.ctx, "pending", &key, false, injected_dynamodb, call).await
    }

    async fn mark_attempted(
        &self,
        group: &GroupKey,
        quantity: u64,
        now: DateTime<Utc>,
    ) -> awsmp_pipeline::error::Result<()> {
        let key = group.to_string();
        let call = self.inner.mark_attempted(group, quantity, now);
        guarded(
            &self.ctx,
            "mark_attempted",
            &key,
            true,
            injected_dynamodb,
            call,
        )
        .await
    }

    async fn retract_attempt(
        &self,
        group: &GroupKey,
        quantity: u64,
        previous: Option<u64>,
        now: DateTime<Utc>,
    ) -> awsmp_pipeline::error::Result<()> {
        let key = group.to_string();
        let call = self.inner.retract_attempt(group, quantity, previous, now);
        guarded(
            &self.ctx,
            "retract_attempt",
            &key,
            true,
            injected_dynamodb,
            call,
        )
        .await
    }

    async fn write_back(
        &self,
        group: &GroupKey,
        outcome: &WriteBack,
        now: DateTime<Utc>,
    ) -> awsmp_pipeline::error::Result<bool> {
        let key = group.to_string();
        let call = self.inner.write_back(group, outcome, now);
        guarded(&self.ctx, "write_back", &key, true, injected_dynamodb, call).await
    }
}

/// The ingest-watermark table, faulty.
pub struct FaultyWatermarks {
    /// The table.
    pub inner: Arc<awsmp_pipeline::adapters::memory::MemoryWatermarkStore>,
    /// Plan and interleaver.
    pub ctx: Ctx,
}

#[async_trait]
impl WatermarkStore for FaultyWatermarks {
    async fn advance(
        &self,
        stream: &str,
        shard_id: &str,
        arrival: DateTime<Utc>,
    ) -> awsmp_pipeline::error::Result<bool> {
        let call = self.inner.advance(stream, shard_id, arrival);
        guarded(
            &self.ctx,
            "advance",
            shard_id,
            true,
            injected_dynamodb,
            call,
        )
        .await
    }

    async fn mark_drained(
        &self,
        stream: &str,
        shard_id: &str,
    ) -> awsmp_pipeline::error::Result<()> {
        let call = self.inner.mark_drained(stream, shard_id);
        guarded(
            &self.ctx,
            "mark_drained",
            shard_id,
            true,
            injected_dynamodb,
            call,
        )
        .await
    }

    async fn shards(&self, stream: &str) -> awsmp_pipeline::error::Result<Vec<ShardWatermark>> {
        let call = self.inner.shards(stream);
        guarded(&self.ctx, "shards", "", false, injected_dynamodb, call).await
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
    pub clock: Arc<awsmp_pipeline::domain::clock::FixedClock>,
}

#[async_trait]
impl MeteringApi for FaultyMetering {
    async fn batch_meter_usage(
        &self,
        kind: &CallKind,
        records: &[SubmitRecord],
    ) -> Result<ApiResponse, MeterCallError> {
        let now = awsmp_pipeline::domain::clock::Clock::now(self.clock.as_ref());
        if self
            .outage
            .is_some_and(|(from, until)| from <= now && now < until)
        {
            self.ctx.faults.count("marketplace-outage");
            self.inner.script([CallFault::ApplyThenLoseResponse]);
            return self.inner.batch_meter_usage(kind, records).await;
        }
        let key = records
            .first()
            .map(|r| r.group.to_string())
            .unwrap_or_default();
        let fault = self.ctx.faults.decide("batch_meter_usage", &key, true);
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
pub struct SharedUsageRows {
    /// The shared table.
    pub table: Arc<MemoryUsageStore>,
    /// Plan and interleaver.
    pub ctx: Ctx,
}

#[async_trait]
impl UsageRowWriter for SharedUsageRows {
    async fn read(&self, key: &RowKey) -> awsmp_consumer::error::Result<Option<RawUsageRow>> {
        let table = self.table.clone();
        let k = key.clone();
        let call = async move { Ok(table.row(&k)) };
        guarded(
            &self.ctx,
            "row-read",
            &key.sort_key,
            false,
            injected_consumer,
            call,
        )
        .await
    }

    async fn write(&self, write: &RowWrite) -> awsmp_consumer::error::Result<bool> {
        let table = self.table.clone();
        let call = async move {
            Ok(match write.apply(table.row(&write.key).as_ref()) {
                Some(row) => table.put_row(row),
                None => false,
            })
        };
        guarded(
            &self.ctx,
            "row-write",
            &write.key.sort_key,
            true,
            injected_consumer,
            call,
        )
        .await
    }
}

/// The consumer's dedup store, faulty.
pub struct FaultyDedup {
    /// The store.
    pub inner: awsmp_consumer::adapters::memory::MemoryDedupStore,
    /// Plan and interleaver.
    pub ctx: Ctx,
}

#[async_trait]
impl DedupStore for FaultyDedup {
    async fn claim(&self, claim: &DedupClaim) -> awsmp_consumer::error::Result<ClaimOutcome> {
        // A KPL record's key is the MD5 of its body, which holds generated ids (random epochs):
        // its stream position names it stably.
        let key = if claim.key.starts_with("kpl:") {
            format!("{}:{}", claim.shard_id, claim.sequence_number.decimal())
        } else {
            claim.key.clone()
        };
        let call = self.inner.claim(claim);
        guarded(&self.ctx, "claim", &key, true, injected_consumer, call).await
    }

    async fn read_lane(&self, key: &str) -> awsmp_consumer::error::Result<Option<LaneItem>> {
        let call = self.inner.read_lane(key);
        guarded(&self.ctx, "read_lane", key, false, injected_consumer, call).await
    }

    async fn write_lane(
        &self,
        item: &LaneItem,
        expected: Option<u64>,
    ) -> awsmp_consumer::error::Result<bool> {
        let call = self.inner.write_lane(item, expected);
        guarded(
            &self.ctx,
            "write_lane",
            &item.key,
            true,
            injected_consumer,
            call,
        )
        .await
    }
}

/// The consumer's rejected-events store, faulty.
pub struct FaultyRejected {
    /// The store.
    pub inner: awsmp_consumer::adapters::memory::MemoryRejectedEventStore,
    /// Plan and interleaver.
    pub ctx: Ctx,
}

#[async_trait]
impl RejectedEventStore for FaultyRejected {
    async fn put(&self, event: &RejectedEvent) -> awsmp_consumer::error::Result<()> {
        let call = self.inner.put(event);
        guarded(
            &self.ctx,
            "rejected-put",
            &event.record_key,
            true,
            injected_consumer,
            call,
        )
        .await
    }
}

/// Finalized group-hours: those with an aggregated record (what the DynamoDB adapter reads).
pub struct AggregatedFinalized {
    /// The aggregated table.
    pub table: Arc<MemoryAggregatedStore>,
    /// Plan and interleaver.
    pub ctx: Ctx,
}

#[async_trait]
impl FinalizedGroups for AggregatedFinalized {
    async fn finalized(
        &self,
        groups: &[GroupKey],
    ) -> awsmp_consumer::error::Result<HashSet<GroupKey>> {
        let table = self.table.clone();
        let call = async move {
            Ok(groups
                .iter()
                .filter(|g| table.contains(g))
                .cloned()
                .collect())
        };
        // The consumer collects the groups through a hash set: name the call by its least.
        let key = groups
            .iter()
            .map(|g| g.to_string())
            .min()
            .unwrap_or_default();
        guarded(&self.ctx, "finalized", &key, false, injected_consumer, call).await
    }
}
