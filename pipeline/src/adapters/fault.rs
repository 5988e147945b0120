//! [`Faulty`]: any pipeline port wrapped with a seeded [`FaultSchedule`] (`awsmp_aws::fault`,
//! shared with the consumer's ports). The errors are the ones the AWS adapters return for the
//! same failure: a DynamoDB call throttled or failed is `PipelineError::DynamoDb` (retryable),
//! an SQS one `PipelineError::Sqs`, a `BatchMeterUsage` one `ThrottlingException`,
//! `InternalServiceErrorException` (nothing applied) or no response (applied, answer lost).
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! use awsmp_aws::fault::{FaultKind, FaultSchedule};
//! use awsmp_aws::watermark::{MemoryWatermarkStore, WatermarkStore};
//! use awsmp_pipeline::adapters::fault::Faulty;
//!
//! let faults = FaultSchedule::new(7);
//! faults.script("advance", [FaultKind::LoseResponse]);
//! let store = Faulty::new(MemoryWatermarkStore::new(), "watermarks", faults.clone());
//! let at = "2026-11-30T10:00:00Z".parse().unwrap();
//! assert!(store.advance("awsmp-usage-events", "shardId-0", at).await.is_err()); // applied, answer lost
//! assert!(!store.advance("awsmp-usage-events", "shardId-0", at).await.unwrap()); // the retry finds it applied
//! assert_eq!(faults.injected(), 1);
//! # });
//! ```

use crate::domain::batch::{CallKind, SubmitRecord};
use crate::domain::fold::UsageRow;
use crate::domain::results::ApiResponse;
use crate::error::{PipelineError, Result};
use crate::ports::{
    AggregatedItem, AggregatedStore, ExpiredRow, FoldedFinalize, MessageQueue, MeterCallError,
    MeteringApi, UsageStore, WriteBack,
};
use async_trait::async_trait;
use awsmp_aws::deprovisioning::{Deprovisioning, DeprovisioningIndex};
use awsmp_aws::error::StoreError;
use awsmp_aws::fault::{FaultKind, FaultSchedule, Injected};
use awsmp_aws::watermark::{ShardWatermark, WatermarkStore};
use awsmp_contract::keys::{GroupKey, HourBucket, RowKey};
use awsmp_contract::retry::Retryable;
use awsmp_contract::status::RawStatus;
use chrono::{DateTime, Utc};
use std::future::Future;

/// A port wrapped with a [`FaultSchedule`]; `port` names it in errors and in the schedule's
/// log (and lets a script aim at it: `port.operation`).
#[derive(Debug, Clone)]
pub struct Faulty<T> {
    inner: T,
    port: String,
    faults: FaultSchedule,
}

impl<T> Faulty<T> {
    /// Wrap `inner`, named `port` (its table or queue name).
    pub fn new(inner: T, port: impl Into<String>, faults: FaultSchedule) -> Self {
        Self {
            inner,
            port: port.into(),
            faults,
        }
    }

    /// The wrapped port.
    pub fn inner(&self) -> &T {
        &self.inner
    }

    async fn dynamodb<R>(
        &self,
        operation: &'static str,
        call: impl Future<Output = Result<R>>,
    ) -> Result<R> {
        let port = &self.port;
        self.faults
            .run(port, operation, call, |fault| PipelineError::DynamoDb {
                operation,
                resource: port.clone(),
                retryable: fault.is_retryable(),
                source: Box::new(fault),
            })
            .await
    }

    /// [`Faulty::dynamodb`] for the shared stores (`awsmp_aws`), whose error is [`StoreError`].
    async fn store<R>(
        &self,
        operation: &'static str,
        call: impl Future<Output = Result<R, StoreError>>,
    ) -> Result<R, StoreError> {
        let port = &self.port;
        self.faults
            .run(port, operation, call, |fault| StoreError::DynamoDb {
                operation,
                resource: port.clone(),
                retryable: fault.is_retryable(),
                source: Box::new(fault),
            })
            .await
    }
}

/// The DynamoDB error code an injected fault plays (for readers of a trace).
fn ddb_detail(kind: FaultKind) -> &'static str {
    match kind {
        FaultKind::Throttle => "ProvisionedThroughputExceededException",
        FaultKind::FailBeforeApply => "InternalServerError",
        FaultKind::LoseResponse => "TimeoutError",
        FaultKind::Crash => "process crashed",
    }
}

#[async_trait]
impl<T: UsageStore> UsageStore for Faulty<T> {
    async fn pending_groups(
        &self,
        bucket: HourBucket,
        license: Option<&str>,
    ) -> Result<Vec<GroupKey>> {
        let call = self.inner.pending_groups(bucket, license);
        self.dynamodb("pending_groups", call).await
    }

    async fn read_pending_rows(
        &self,
        group: &GroupKey,
        each: &mut (dyn FnMut(UsageRow) + Send),
    ) -> Result<()> {
        // Rows are handed over only once the call is past its fault: a throttled read yields
        // nothing, a lost response yields the rows and then the error (as a page read and
        // then a failed next page does).
        let call = self.inner.read_pending_rows(group, each);
        self.dynamodb("read_pending_rows", call).await
    }

    async fn finalize_row(
        &self,
        key: &RowKey,
        status: Option<(RawStatus, &str)>,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let call = self.inner.finalize_row(key, status, now);
        self.dynamodb("finalize_row", call).await
    }

    async fn finalize_folded(
        &self,
        key: &RowKey,
        folded: u64,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<FoldedFinalize> {
        let call = self.inner.finalize_folded(key, folded, reason, now);
        self.dynamodb("finalize_folded", call).await
    }

    async fn expire_bucket(
        &self,
        bucket: HourBucket,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<Vec<ExpiredRow>> {
        let call = self.inner.expire_bucket(bucket, reason, now);
        self.dynamodb("expire_bucket", call).await
    }
}

#[async_trait]
impl<T: AggregatedStore> AggregatedStore for Faulty<T> {
    async fn put_if_absent(&self, item: &AggregatedItem, now: DateTime<Utc>) -> Result<bool> {
        let call = self.inner.put_if_absent(item, now);
        self.dynamodb("put_if_absent", call).await
    }

    async fn get(&self, group: &GroupKey) -> Result<Option<AggregatedItem>> {
        self.dynamodb("get", self.inner.get(group)).await
    }

    async fn pending(
        &self,
        bucket: HourBucket,
        license: Option<&str>,
    ) -> Result<Vec<AggregatedItem>> {
        self.dynamodb("pending", self.inner.pending(bucket, license))
            .await
    }

    async fn mark_attempted(
        &self,
        group: &GroupKey,
        quantity: u64,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let call = self.inner.mark_attempted(group, quantity, now);
        self.dynamodb("mark_attempted", call).await
    }

    async fn retract_attempt(
        &self,
        group: &GroupKey,
        quantity: u64,
        previous: Option<u64>,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let call = self.inner.retract_attempt(group, quantity, previous, now);
        self.dynamodb("retract_attempt", call).await
    }

    async fn write_back(
        &self,
        group: &GroupKey,
        outcome: &WriteBack,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let call = self.inner.write_back(group, outcome, now);
        self.dynamodb("write_back", call).await
    }
}

#[async_trait]
impl<T: DeprovisioningIndex> DeprovisioningIndex for Faulty<T> {
    async fn active(&self) -> Result<Vec<Deprovisioning>, StoreError> {
        self.store("active", self.inner.active()).await
    }
}

#[async_trait]
impl<T: WatermarkStore> WatermarkStore for Faulty<T> {
    async fn advance(
        &self,
        stream: &str,
        shard_id: &str,
        arrival: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let call = self.inner.advance(stream, shard_id, arrival);
        self.store("advance", call).await
    }

    async fn mark_drained(&self, stream: &str, shard_id: &str) -> Result<(), StoreError> {
        self.store("mark_drained", self.inner.mark_drained(stream, shard_id))
            .await
    }

    async fn shards(&self, stream: &str) -> Result<Vec<ShardWatermark>, StoreError> {
        self.store("shards", self.inner.shards(stream)).await
    }
}

#[async_trait]
impl<T: MessageQueue> MessageQueue for Faulty<T> {
    async fn send_all(&self, bodies: &[String]) -> Result<()> {
        let port = &self.port;
        let call = self.inner.send_all(bodies);
        self.faults
            .run(port, "send_all", call, |fault| PipelineError::Sqs {
                operation: "SendMessageBatch",
                queue: port.clone(),
                detail: format!("injected {}", ddb_detail(fault.kind)),
                source: Some(Box::new(fault)),
            })
            .await
    }
}

/// The `BatchMeterUsage` error a fault plays: throttling and a server error answered, a lost
/// response or a crash unanswered.
fn meter_error(fault: Injected) -> MeterCallError {
    let name = match fault.kind {
        FaultKind::Throttle => crate::domain::bisect::THROTTLING_EXCEPTION,
        FaultKind::FailBeforeApply => "InternalServiceErrorException",
        FaultKind::LoseResponse | FaultKind::Crash => {
            return MeterCallError::Transport(Box::new(fault));
        }
    };
    MeterCallError::Exception {
        name: name.to_owned(),
        message: fault.to_string(),
        source: Some(Box::new(fault)),
    }
}

#[async_trait]
impl<T: MeteringApi> MeteringApi for Faulty<T> {
    async fn batch_meter_usage(
        &self,
        kind: &CallKind,
        records: &[SubmitRecord],
    ) -> std::result::Result<ApiResponse, MeterCallError> {
        let call = self.inner.batch_meter_usage(kind, records);
        self.faults
            .run(&self.port, "batch_meter_usage", call, meter_error)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::memory::{MemoryAggregatedStore, MemoryMeteringApi, MemoryQueue};

    fn group() -> GroupKey {
        GroupKey::new(
            "arn:aws:l-1",
            "111122223333",
            "d",
            "2026-11-30T10".parse().unwrap(),
        )
    }

    fn now() -> DateTime<Utc> {
        "2026-11-30T12:00:00Z".parse().unwrap()
    }

    #[tokio::test]
    async fn a_throttled_call_applies_nothing_and_a_lost_response_applies_it() {
        let faults = FaultSchedule::new(1);
        faults.script(
            "put_if_absent",
            [FaultKind::Throttle, FaultKind::LoseResponse],
        );
        let store = Faulty::new(MemoryAggregatedStore::new("t"), "t", faults.clone());
        let item = AggregatedItem::new(group(), 5, None);
        let e = store.put_if_absent(&item, now()).await.unwrap_err();
        assert!(e.is_retryable());
        assert!(store.inner().items().is_empty());
        let e = store.put_if_absent(&item, now()).await.unwrap_err();
        assert!(e.is_retryable());
        assert_eq!(store.inner().items().len(), 1);
        assert!(!store.put_if_absent(&item, now()).await.unwrap());
        let kinds: Vec<FaultKind> = faults.log().iter().map(|e| e.fault.kind).collect();
        assert_eq!(kinds, [FaultKind::Throttle, FaultKind::LoseResponse]);
        assert_eq!(faults.log()[1].call, 2);
    }

    #[tokio::test]
    async fn a_crash_stops_every_wrapped_port_until_recovery() {
        let faults = FaultSchedule::new(1);
        let store = Faulty::new(MemoryAggregatedStore::new("t"), "t", faults.clone());
        let queue = Faulty::new(MemoryQueue::new("q"), "q", faults.clone());
        faults.crash_after(1);
        assert!(store.get(&group()).await.unwrap().is_none());
        let e = queue.send_all(&["b".into()]).await.unwrap_err();
        let source = std::error::Error::source(&e).unwrap();
        let injected = source.downcast_ref::<Injected>().unwrap();
        assert_eq!(
            (injected.kind, injected.port.as_str()),
            (FaultKind::Crash, "q")
        );
        let e = store.get(&group()).await.unwrap_err();
        assert!(!e.is_retryable());
        assert!(faults.crashed() && queue.inner().messages().is_empty());
        assert_eq!(faults.injected_by_kind().get(&FaultKind::Crash), Some(&1));
        faults.recover();
        queue.send_all(&["b".into()]).await.unwrap();
        assert_eq!(queue.inner().messages(), ["b"]);
    }

    #[tokio::test]
    async fn a_script_can_aim_at_one_port() {
        let faults = FaultSchedule::new(1);
        faults.script("b.send_all", [FaultKind::FailBeforeApply]);
        let a = Faulty::new(MemoryQueue::new("a"), "a", faults.clone());
        let b = Faulty::new(MemoryQueue::new("b"), "b", faults.clone());
        a.send_all(&["x".into()]).await.unwrap();
        assert!(b.send_all(&["y".into()]).await.is_err());
        b.send_all(&["y".into()]).await.unwrap();
        assert_eq!(
            (a.inner().messages().len(), b.inner().messages().len()),
            (1, 1)
        );
    }

    #[tokio::test]
    async fn metering_faults_are_the_answers_aws_gives() {
        let faults = FaultSchedule::new(1);
        let kinds = [
            FaultKind::Throttle,
            FaultKind::FailBeforeApply,
            FaultKind::LoseResponse,
        ];
        faults.script("batch_meter_usage", kinds);
        let api = Faulty::new(MemoryMeteringApi::default(), "metering", faults);
        let kind = CallKind::ConcurrentAgreements { product_hint: None };
        let records = [SubmitRecord::new(group(), 3, None)];
        let names: Vec<Option<String>> = [(); 3]
            .iter()
            .map(|()| {
                let r = futures::executor::block_on(api.batch_meter_usage(&kind, &records));
                r.unwrap_err().exception_name().map(str::to_owned)
            })
            .collect();
        assert_eq!(
            names,
            [
                Some("ThrottlingException".to_owned()),
                Some("InternalServiceErrorException".to_owned()),
                None
            ]
        );
        assert_eq!(
            api.inner().ledger().len(),
            1,
            "only the lost response was applied"
        );
    }

    #[test]
    fn one_seed_gives_one_sequence_of_faults() {
        let run = |seed| {
            let f = FaultSchedule::new(seed)
                .throttle(0.2)
                .lose_responses(0.1)
                .fail_before_apply(0.1);
            (0..200)
                .map(|_| f.decide("p", "op").map(|i| i.kind))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
        let kinds = run(3);
        for k in [
            FaultKind::Throttle,
            FaultKind::LoseResponse,
            FaultKind::FailBeforeApply,
        ] {
            assert!(kinds.contains(&Some(k)), "{k:?} never injected");
        }
        assert!(kinds.contains(&None));
    }
}
