//! Seeded fault injection around any port, in one reusable form: a [`FaultSchedule`] decides,
//! call by call, whether a call passes, is throttled or fails before it is applied, is applied
//! and then loses its response, or finds the process crashed; [`Faulty`] wraps any pipeline
//! port with it (the consumer's `adapters::fault` wraps its own ports with the same schedule).
//!
//! A schedule is shared (`Clone` shares it), so one crash stops every wrapped port at once —
//! like a Lambda process dying mid-batch — and one seed replays the same faults in the same
//! order. Besides rates, a schedule takes a script of faults for named operations ("the next
//! `write_back` loses its response"), which a simulator uses to aim at one step.
//!
//! The errors are the ones the AWS adapters return for the same failure: a DynamoDB call
//! throttled or failed is `PipelineError::DynamoDb` (retryable), an SQS one
//! `PipelineError::Sqs`, a `BatchMeterUsage` one `ThrottlingException`,
//! `InternalServiceErrorException` (nothing applied) or no response (applied, answer lost).
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! use awsmp_pipeline::adapters::fault::{FaultKind, FaultSchedule, Faulty};
//! use awsmp_pipeline::adapters::memory::MemoryWatermarkStore;
//! use awsmp_pipeline::ports::WatermarkStore;
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
    AggregatedItem, AggregatedStore, Deprovisioning, DeprovisioningIndex, ExpiredRow,
    FoldedFinalize, MessageQueue, MeterCallError, MeteringApi, ShardWatermark, UsageStore,
    WatermarkStore, WriteBack,
};
use async_trait::async_trait;
use awsmp_contract::keys::{GroupKey, HourBucket, RowKey};
use awsmp_contract::retry::Retryable;
use awsmp_contract::status::RawStatus;
use chrono::{DateTime, Utc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

/// What happens to one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// Refused with the service's throttling error before anything was applied (retryable).
    Throttle,
    /// Failed before anything was applied: a server error or a connection that failed before
    /// the request arrived (retryable).
    FailBeforeApply,
    /// Applied, then the response was lost (a timeout after the service acted; retryable).
    LoseResponse,
    /// The process crashed: this and every later call fails, not retryable, until
    /// [`FaultSchedule::recover`].
    Crash,
}

impl FaultKind {
    /// Every kind, in declaration order (for summaries).
    pub const ALL: [FaultKind; 4] = [
        FaultKind::Throttle,
        FaultKind::FailBeforeApply,
        FaultKind::LoseResponse,
        FaultKind::Crash,
    ];

    /// A short name, for traces and summaries.
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::Throttle => "throttle",
            FaultKind::FailBeforeApply => "fail-before-apply",
            FaultKind::LoseResponse => "lose-response",
            FaultKind::Crash => "crash",
        }
    }
}

/// The error a faulted call carries as its source.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("injected fault {} in {port}.{operation}", .kind.as_str())]
pub struct Injected {
    /// The wrapped port's name (the table or queue it plays), e.g. `aggregated-usage`.
    pub port: String,
    /// The port operation (the trait method's name), e.g. `write_back`.
    pub operation: &'static str,
    /// What was injected.
    pub kind: FaultKind,
}

impl Retryable for Injected {
    fn is_retryable(&self) -> bool {
        self.kind != FaultKind::Crash
    }
}

/// One injected fault, as the schedule logged it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultEvent {
    /// The schedule's call counter when it was injected (1 = the first call).
    pub call: u64,
    /// The fault.
    pub fault: Injected,
}

#[derive(Debug)]
struct State {
    rng: StdRng,
    throttle_rate: f64,
    lost_response_rate: f64,
    fail_before_rate: f64,
    crash_after: Option<u64>,
    ops: u64,
    crashed: bool,
    script: BTreeMap<String, VecDeque<FaultKind>>,
    log: Vec<FaultEvent>,
}

/// A shared, seeded fault schedule; clones share it.
#[derive(Debug, Clone)]
pub struct FaultSchedule(Arc<Mutex<State>>);

impl FaultSchedule {
    /// No faults yet; randomness from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(Arc::new(Mutex::new(State {
            rng: StdRng::seed_from_u64(seed),
            throttle_rate: 0.0,
            lost_response_rate: 0.0,
            fail_before_rate: 0.0,
            crash_after: None,
            ops: 0,
            crashed: false,
            script: BTreeMap::new(),
            log: Vec::new(),
        })))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means another thread panicked mid-update of plain data.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Throttle this share of calls (0.0–1.0), before applying them.
    pub fn throttle(self, rate: f64) -> Self {
        self.state().throttle_rate = rate;
        self
    }

    /// Apply this share of calls, then lose their responses.
    pub fn lose_responses(self, rate: f64) -> Self {
        self.state().lost_response_rate = rate;
        self
    }

    /// Fail this share of calls before applying them, with a server error.
    pub fn fail_before_apply(self, rate: f64) -> Self {
        self.state().fail_before_rate = rate;
        self
    }

    /// The next calls of `operation` — a method name (`write_back`), or `port.method`
    /// (`aggregated-usage.write_back`) for one port only — get these faults, one per call, in
    /// order, ahead of the rates. A call that finds a script takes no random roll.
    pub fn script(&self, operation: &str, faults: impl IntoIterator<Item = FaultKind>) {
        self.state()
            .script
            .entry(operation.to_owned())
            .or_default()
            .extend(faults);
    }

    /// Crash after `ops` more calls: every later call fails (not retryable) until `recover`.
    pub fn crash_after(&self, ops: u64) {
        let mut s = self.state();
        s.crash_after = Some(s.ops + ops);
    }

    /// The process restarted: calls pass again (rates and scripts stay).
    pub fn recover(&self) {
        let mut s = self.state();
        s.crashed = false;
        s.crash_after = None;
    }

    /// True once the crash point was reached (and until `recover`).
    pub fn crashed(&self) -> bool {
        self.state().crashed
    }

    /// Calls the schedule decided, crashed ones after the crash excluded.
    pub fn calls(&self) -> u64 {
        self.state().ops
    }

    /// Faults injected so far (a crash counts once, at its crash point).
    pub fn injected(&self) -> u64 {
        self.state().log.len() as u64
    }

    /// Faults injected so far, by kind.
    pub fn injected_by_kind(&self) -> BTreeMap<FaultKind, u64> {
        let mut out = BTreeMap::new();
        for e in &self.state().log {
            *out.entry(e.fault.kind).or_default() += 1;
        }
        out
    }

    /// Every fault injected so far, in order.
    pub fn log(&self) -> Vec<FaultEvent> {
        self.state().log.clone()
    }

    /// Decide the next call of `port.operation`: `None` to pass it.
    pub fn decide(&self, port: &str, operation: &'static str) -> Option<Injected> {
        let mut s = self.state();
        let injected = |kind| Injected {
            port: port.to_owned(),
            operation,
            kind,
        };
        if s.crashed {
            return Some(injected(FaultKind::Crash));
        }
        s.ops += 1;
        let kind = if s.crash_after.is_some_and(|n| s.ops > n) {
            s.crashed = true;
            Some(FaultKind::Crash)
        } else if let Some(kind) = s.scripted(port, operation) {
            Some(kind)
        } else {
            s.roll()
        };
        let fault = injected(kind?);
        let call = s.ops;
        s.log.push(FaultEvent {
            call,
            fault: fault.clone(),
        });
        Some(fault)
    }

    /// Run `call` under the schedule: pass it, fail it before it runs, or run it and then fail
    /// (a lost response). `error` turns the injected fault into the port's error.
    pub async fn run<T, E, F>(
        &self,
        port: &str,
        operation: &'static str,
        call: F,
        error: impl FnOnce(Injected) -> E,
    ) -> std::result::Result<T, E>
    where
        F: Future<Output = std::result::Result<T, E>>,
    {
        match self.decide(port, operation) {
            None => call.await,
            Some(fault) if fault.kind == FaultKind::LoseResponse => {
                call.await?;
                Err(error(fault))
            }
            Some(fault) => Err(error(fault)),
        }
    }
}

impl State {
    fn scripted(&mut self, port: &str, operation: &str) -> Option<FaultKind> {
        let qualified = format!("{port}.{operation}");
        for key in [qualified.as_str(), operation] {
            if let Some(kind) = self.script.get_mut(key).and_then(VecDeque::pop_front) {
                return Some(kind);
            }
        }
        None
    }

    /// One roll of the seeded generator against the rates (one roll per call, so a seed's
    /// sequence does not depend on which rates are set).
    fn roll(&mut self) -> Option<FaultKind> {
        let (t, l, f) = (
            self.throttle_rate,
            self.lost_response_rate,
            self.fail_before_rate,
        );
        let roll: f64 = self.rng.random();
        if roll < t {
            Some(FaultKind::Throttle)
        } else if roll < t + l {
            Some(FaultKind::LoseResponse)
        } else if roll < t + l + f {
            Some(FaultKind::FailBeforeApply)
        } else {
            None
        }
    }
}

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
    async fn active(&self) -> Result<Vec<Deprovisioning>> {
        self.dynamodb("active", self.inner.active()).await
    }
}

#[async_trait]
impl<T: WatermarkStore> WatermarkStore for Faulty<T> {
    async fn advance(&self, stream: &str, shard_id: &str, arrival: DateTime<Utc>) -> Result<bool> {
        let call = self.inner.advance(stream, shard_id, arrival);
        self.dynamodb("advance", call).await
    }

    async fn mark_drained(&self, stream: &str, shard_id: &str) -> Result<()> {
        self.dynamodb("mark_drained", self.inner.mark_drained(stream, shard_id))
            .await
    }

    async fn shards(&self, stream: &str) -> Result<Vec<ShardWatermark>> {
        self.dynamodb("shards", self.inner.shards(stream)).await
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
