//! In-memory adapters for every pipeline port: the handlers run over them without any
//! emulator, in one process, deterministically (fixture tests, and a deterministic
//! simulation on a virtual clock).
//!
//! Each one models the semantics of its AWS adapter that the handlers depend on:
//!
//! | adapter | port | models |
//! |---|---|---|
//! | [`MemoryUsageStore`] | [`UsageStore`](crate::ports::UsageStore) | the sparse `metering_pending` index, paged; `begins_with` group reads; updates that never create a row; age-out only of rows still pending in their bucket |
//! | [`MemoryAggregatedStore`] | [`AggregatedStore`](crate::ports::AggregatedStore) | first-write-wins puts (the commit point); attempt marks (numbered) and write-backs only while pending, write-backs also only for the attempt mark they require; records stored as the attributes the adapter's writes leave |
//!
//! Both tables decide each conditional write with the condition its DynamoDB adapter sends and
//! apply the very update it sends (`awsmp_contract::update::Update`) to the stored attributes,
//! audit stamps (`createdAt`, `updatedAt`) included.
//! | [`MemoryDeprovisioningIndex`] | [`DeprovisioningIndex`](awsmp_aws::deprovisioning::DeprovisioningIndex) | the subscribers table's deprovisioning index |
//! | [`MemoryQueue`] | [`MessageQueue`](crate::ports::MessageQueue) | an SQS standard queue on a [`Clock`]: visibility timeout, redelivery, receive counts, `maxReceiveCount` → dead-letter queue, deletes by receipt handle (a stale one deletes nothing), partial `SendMessageBatch` failures |
//! | [`MemoryMeteringApi`] | [`MeteringApi`](crate::ports::MeteringApi) | the BatchMeterUsage ledger: first write per group-hour wins, an identical retry is `Success` with the same id, a different one `DuplicateRecord`; scripted exceptions, lost responses and `UnprocessedRecords` |
//!
//! The pending indexes of both tables are GSIs, eventually consistent under a
//! [`ReadConsistency`] knob (default consistent); [`MemoryAdapters::on_clock`] configures the
//! queues as deployed. For seeded faults around any port — throttling, failing before
//! applying, losing the response after applying, a crash — wrap it in the test kit's
//! `awsmp_testkit::ports::Faulty` under its fault plan (docs/testing.md); [`Faults`] here only
//! throttles the next calls of an operation, for this crate's own unit tests.
//!
//! A failed condition is what it is in DynamoDB: an expected outcome (`Ok(false)` / `Ok(())`),
//! never an error. Injected faults ([`Faults`]) fail calls with the error variant the AWS
//! adapter returns for a throttled call (`PipelineError::DynamoDb` / `PipelineError::Sqs`,
//! retryable).
//!
//! ```
//! # tokio_test_block_on(async {
//! use awsmp_pipeline::adapters::memory::MemoryAdapters;
//! use awsmp_pipeline::config::Config;
//! use awsmp_contract::clock::FixedClock;
//! use awsmp_aws::emf::MetricsSink;
//! use awsmp_pipeline::handlers::expiry;
//! use std::sync::Arc;
//!
//! let adapters = MemoryAdapters::new();
//! let config = Config::from_lookup(|k| match k {
//!     "AWSMP_PRODUCT_CODE" => Some("prod-1".into()),
//!     "AWSMP_AGGREGATED_USAGE_TABLE" => Some("aggregated-usage".into()),
//!     "AWSMP_DEPLOYMENT_MODE" => Some("direct-submit".into()),
//!     _ => None,
//! })
//! .unwrap();
//! let clock = Arc::new(FixedClock::new("2026-11-30T12:00:00Z".parse().unwrap()));
//! let svc = adapters.services(config, MetricsSink::capture("expiry"), clock);
//! let out = expiry::expire(&svc).await.unwrap();
//! assert_eq!(out.records_expired, 0);
//! # });
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
//! # }
//! ```

mod aggregated;
mod lag;
mod metering;
mod queue;
mod usage;

pub use aggregated::{MemoryAggregatedStore, MemoryDeprovisioningIndex};
pub use lag::ReadConsistency;
pub use metering::{BilledRecord, CallFault, MemoryMeteringApi};
pub use queue::{
    DEFAULT_VISIBILITY_TIMEOUT_SECONDS, DeleteOutcome, MAX_RECEIVE_MESSAGES, MemoryQueue, Redrive,
};
pub use usage::MemoryUsageStore;

use crate::config::Config;
use crate::error::PipelineError;
use crate::handlers::Services;
use awsmp_aws::emf::MetricsSink;
use awsmp_aws::watermark::MemoryWatermarkStore;
use awsmp_contract::clock::Clock;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Items per page of a paged read, like a DynamoDB `Query` that stops at its 1 MB limit.
pub const DEFAULT_PAGE_SIZE: usize = 100;

/// The error an injected fault carries as its source: what a throttled call answers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code} (injected into {operation})")]
pub struct InjectedFault {
    /// The port operation that failed, e.g. `write_back`.
    pub operation: &'static str,
    /// The AWS error code it plays, e.g. `ProvisionedThroughputExceededException`.
    pub code: &'static str,
}

/// Injected failures by port operation (the trait method's name, e.g. `finalize_row`): the
/// next `n` calls of that operation fail with a retryable throttling error.
#[derive(Debug, Default)]
pub struct Faults {
    remaining: Mutex<BTreeMap<&'static str, u32>>,
    injected: AtomicU32,
}

impl Faults {
    /// Fail the next `times` calls of `operation`.
    pub fn throttle(&self, operation: &'static str, times: u32) {
        *lock(&self.remaining).entry(operation).or_default() += times;
    }

    /// Faults injected so far.
    pub fn injected(&self) -> u32 {
        self.injected.load(Ordering::SeqCst)
    }

    /// The fault for this call of `operation`, if one is due.
    fn take(&self, operation: &'static str, code: &'static str) -> Option<InjectedFault> {
        let mut remaining = lock(&self.remaining);
        let n = remaining.get_mut(operation).filter(|n| **n > 0)?;
        *n -= 1;
        self.injected.fetch_add(1, Ordering::SeqCst);
        Some(InjectedFault { operation, code })
    }

    /// `Err` with the DynamoDB adapter's error for a throttled call, when a fault is due.
    fn dynamodb(&self, operation: &'static str, table: &str) -> Result<(), PipelineError> {
        match self.take(operation, "ProvisionedThroughputExceededException") {
            None => Ok(()),
            Some(fault) => Err(PipelineError::DynamoDb {
                operation,
                resource: table.to_owned(),
                source: Box::new(fault),
                retryable: true,
            }),
        }
    }

    /// [`Faults::dynamodb`] for the shared stores (`awsmp_aws`), whose error is `StoreError`.
    fn store(
        &self,
        operation: &'static str,
        table: &str,
    ) -> Result<(), awsmp_aws::error::StoreError> {
        match self.take(operation, "ProvisionedThroughputExceededException") {
            None => Ok(()),
            Some(fault) => Err(awsmp_aws::error::StoreError::DynamoDb {
                operation,
                resource: table.to_owned(),
                source: Box::new(fault),
                retryable: true,
            }),
        }
    }
}

/// Lock a mutex; a poisoned lock only means another test thread panicked mid-update of plain
/// data, which the panic already reports.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One in-memory adapter per port, shared (`Arc`) so a test can inspect what a handler did.
#[derive(Debug, Clone)]
pub struct MemoryAdapters {
    /// Raw usage table.
    pub usage: Arc<MemoryUsageStore>,
    /// Aggregated-usage table.
    pub aggregated: Arc<MemoryAggregatedStore>,
    /// Subscribers' deprovisioning index.
    pub deprovisioning: Arc<MemoryDeprovisioningIndex>,
    /// Work queue.
    pub work_queue: Arc<MemoryQueue>,
    /// Deprovision-work queue.
    pub deprovision_queue: Arc<MemoryQueue>,
    /// Cleanup queue.
    pub cleanup_queue: Arc<MemoryQueue>,
    /// BatchMeterUsage.
    pub metering: Arc<MemoryMeteringApi>,
    /// Ingest watermarks (used when the configuration names a watermark table).
    pub watermarks: Arc<MemoryWatermarkStore>,
    /// The work queue's dead-letter queue (its redrive target under [`MemoryAdapters::on_clock`]).
    pub work_dlq: Arc<MemoryQueue>,
    /// The deprovision-work queue's dead-letter queue.
    pub deprovision_dlq: Arc<MemoryQueue>,
    /// The cleanup queue's dead-letter queue.
    pub cleanup_dlq: Arc<MemoryQueue>,
}

/// Visibility timeout of the pipeline's queues (`infra/resources.json`,
/// `visibilityTimeoutSeconds` of `WorkQueue`, `DeprovisionWorkQueue`, `CleanupQueue`).
pub const PIPELINE_QUEUE_VISIBILITY_SECONDS: i64 = 120;

/// `maxReceiveCount` of the pipeline queues' redrive policies (`infra/resources.json`, their
/// `dlq.maxReceiveCount`).
pub const PIPELINE_QUEUE_MAX_RECEIVE_COUNT: u32 = 5;

impl Default for MemoryAdapters {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryAdapters {
    /// Empty tables and queues, a ledger with nothing billed; queues on the system clock
    /// without redrive.
    pub fn new() -> Self {
        Self {
            work_dlq: Arc::new(MemoryQueue::new("work-dlq")),
            deprovision_dlq: Arc::new(MemoryQueue::new("deprovision-work-dlq")),
            cleanup_dlq: Arc::new(MemoryQueue::new("cleanup-dlq")),
            usage: Arc::new(MemoryUsageStore::new("usage")),
            aggregated: Arc::new(MemoryAggregatedStore::new("aggregated-usage")),
            deprovisioning: Arc::new(MemoryDeprovisioningIndex::default()),
            work_queue: Arc::new(MemoryQueue::new("work")),
            deprovision_queue: Arc::new(MemoryQueue::new("deprovision-work")),
            cleanup_queue: Arc::new(MemoryQueue::new("cleanup")),
            metering: Arc::new(MemoryMeteringApi::default()),
            watermarks: Arc::new(MemoryWatermarkStore::new()),
        }
    }

    /// Empty tables, and queues configured as deployed (`infra/resources.json`): on `clock`,
    /// 120 s visibility, redriven to their dead-letter queues after 5 receives.
    pub fn on_clock(clock: Arc<dyn Clock>) -> Self {
        let dlq = |name: &str| Arc::new(MemoryQueue::new(name).with_clock(clock.clone()));
        let queue = |name: &str, dead_letter: &Arc<MemoryQueue>| {
            Arc::new(
                MemoryQueue::new(name)
                    .with_clock(clock.clone())
                    .with_visibility_timeout(chrono::Duration::seconds(
                        PIPELINE_QUEUE_VISIBILITY_SECONDS,
                    ))
                    .with_redrive(PIPELINE_QUEUE_MAX_RECEIVE_COUNT, dead_letter.clone()),
            )
        };
        let (work_dlq, deprovision_dlq, cleanup_dlq) = (
            dlq("work-dlq"),
            dlq("deprovision-work-dlq"),
            dlq("cleanup-dlq"),
        );
        Self {
            work_queue: queue("work", &work_dlq),
            deprovision_queue: queue("deprovision-work", &deprovision_dlq),
            cleanup_queue: queue("cleanup", &cleanup_dlq),
            work_dlq,
            deprovision_dlq,
            cleanup_dlq,
            ..Self::new()
        }
    }

    /// [`Services`] over these adapters. As with the SDK adapters, the usage table and the
    /// queues exist only in full deployment mode.
    pub fn services(
        &self,
        config: Config,
        metrics: MetricsSink,
        clock: Arc<dyn Clock>,
    ) -> Services {
        let full = config.deployment_mode == crate::config::DeploymentMode::Full;
        let queue =
            |q: &Arc<MemoryQueue>| full.then(|| q.clone() as Arc<dyn crate::ports::MessageQueue>);
        Services {
            usage: full.then(|| self.usage.clone() as Arc<dyn crate::ports::UsageStore>),
            aggregated: self.aggregated.clone(),
            deprovisioning: config.subscribers_table.as_ref().map(|_| {
                self.deprovisioning.clone()
                    as Arc<dyn awsmp_aws::deprovisioning::DeprovisioningIndex>
            }),
            work_queue: queue(&self.work_queue),
            deprovision_queue: queue(&self.deprovision_queue),
            cleanup_queue: queue(&self.cleanup_queue),
            watermarks: config
                .ingest_watermark_table
                .as_ref()
                .map(|_| self.watermarks.clone() as Arc<dyn awsmp_aws::watermark::WatermarkStore>),
            metrics,
            clock,
            config,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::batch::{CallKind, SubmitRecord};
    use crate::domain::results::ApiStatus;
    use crate::ports::{
        AggregatedItem, AggregatedStore, AttemptCondition, MeteringApi, UsageStore, WriteBack,
    };
    use awsmp_contract::keys::{GroupKey, RowKey};
    use awsmp_contract::row::conforming_row;
    use awsmp_contract::status::{AggregatedStatus, RawStatus};
    use chrono::{DateTime, Utc};

    fn group(license: &str, dimension: &str) -> GroupKey {
        GroupKey::new(
            license,
            "111122223333",
            dimension,
            "2026-11-30T10".parse().unwrap(),
        )
    }

    fn now() -> DateTime<Utc> {
        "2026-11-30T12:00:00Z".parse().unwrap()
    }

    #[tokio::test]
    async fn the_first_put_wins_and_stores_no_outcome() {
        let store = MemoryAggregatedStore::new("t");
        let g = group("arn:aws:l-1", "d");
        let mut first = AggregatedItem::new(g.clone(), 5, None);
        first.status = Some(AggregatedStatus::Success);
        first.attempted_quantity = Some(5);
        assert!(store.put_if_absent(&first, now()).await.unwrap());
        assert!(
            !store
                .put_if_absent(&AggregatedItem::new(g.clone(), 9, None), now())
                .await
                .unwrap()
        );
        let stored = store.get(&g).await.unwrap().unwrap();
        assert_eq!(
            (stored.quantity, stored.status, stored.attempted_quantity),
            (5, None, None)
        );
    }

    #[tokio::test]
    async fn outcomes_are_written_only_while_pending() {
        let store = MemoryAggregatedStore::new("t");
        let g = group("arn:aws:l-1", "d");
        let outcome = |status| WriteBack {
            status,
            reason: None,
            metering_record_id: Some("m".into()),
            ttl: Some(7),
            if_attempt: AttemptCondition::Any,
        };
        assert!(
            !store
                .write_back(&g, &outcome(AggregatedStatus::Success), now())
                .await
                .unwrap()
        );
        store
            .put_if_absent(&AggregatedItem::new(g.clone(), 5, None), now())
            .await
            .unwrap();
        assert!(store.mark_attempted(&g, 5, now()).await.unwrap());
        assert!(
            store
                .write_back(&g, &outcome(AggregatedStatus::Success), now())
                .await
                .unwrap()
        );
        assert!(
            !store
                .write_back(&g, &outcome(AggregatedStatus::Error), now())
                .await
                .unwrap()
        );
        assert!(!store.mark_attempted(&g, 6, now()).await.unwrap());
        let item = store.get(&g).await.unwrap().unwrap();
        assert_eq!(
            (item.pending, item.status),
            (false, Some(AggregatedStatus::Success))
        );
        assert_eq!((item.attempted_quantity, store.ttl(&g)), (Some(5), Some(7)));
    }

    #[tokio::test]
    async fn the_pending_index_is_paged_and_filtered_by_license() {
        let store = MemoryAggregatedStore::new("t").with_page_size(1);
        for (license, dimension) in [
            ("arn:aws:l-1", "a"),
            ("arn:aws:l-1", "b"),
            ("arn:aws:l-2", "a"),
        ] {
            store.insert(AggregatedItem::new(group(license, dimension), 1, None));
        }
        let bucket = "2026-11-30T10".parse().unwrap();
        assert_eq!(store.pending(bucket, None).await.unwrap().len(), 3);
        assert_eq!(
            store
                .pending(bucket, Some("arn:aws:l-2"))
                .await
                .unwrap()
                .len(),
            1
        );
        assert!(
            store
                .pending(bucket.minus_hours(1), None)
                .await
                .unwrap()
                .is_empty()
        );
    }

    #[tokio::test]
    async fn a_row_update_never_creates_a_row() {
        let usage = MemoryUsageStore::new("u");
        let g = group("arn:aws:l-1", "d");
        usage.put_row(conforming_row(&g, 1, 3, None));
        let missing = RowKey {
            license_arn: g.license_arn.clone(),
            sort_key: g.usage_sort_key_at(2),
        };
        let stamp = Some((RawStatus::Aggregated, "r"));
        assert!(!usage.finalize_row(&missing, stamp, now()).await.unwrap());
        assert_eq!(usage.rows().len(), 1);
        usage.faults.throttle("finalize_row", 1);
        let e = usage
            .finalize_row(&missing, stamp, now())
            .await
            .unwrap_err();
        assert!(e.is_retryable() && std::error::Error::source(&e).is_some());
    }

    #[tokio::test]
    async fn an_identical_resubmission_is_success_and_a_different_one_a_duplicate() {
        let api = MemoryMeteringApi::default();
        let kind = CallKind::ConcurrentAgreements { product_hint: None };
        let g = group("arn:aws:l-1", "d");
        let send = |q| SubmitRecord::new(g.clone(), q, None);
        let first = api.batch_meter_usage(&kind, &[send(4)]).await.unwrap();
        let again = api.batch_meter_usage(&kind, &[send(4)]).await.unwrap();
        let other = api.batch_meter_usage(&kind, &[send(5)]).await.unwrap();
        assert_eq!(first.results[0].status, ApiStatus::Success);
        assert_eq!(again.results[0], first.results[0]);
        assert_eq!(other.results[0].status, ApiStatus::DuplicateRecord);
        assert_eq!(
            other.results[0].metering_record_id,
            first.results[0].metering_record_id
        );
        assert_eq!(
            (api.ledger().len(), api.ledger()[0].quantity, api.calls()),
            (1, 4, 3)
        );
    }

    #[test]
    fn the_deployed_queue_settings_are_the_ones_in_infra_resources() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../infra/resources.json");
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        for id in ["WorkQueue", "DeprovisionWorkQueue", "CleanupQueue"] {
            let q = doc["queues"]
                .as_array()
                .unwrap()
                .iter()
                .find(|q| q["logicalId"] == id)
                .unwrap();
            assert_eq!(
                q["visibilityTimeoutSeconds"].as_i64(),
                Some(PIPELINE_QUEUE_VISIBILITY_SECONDS),
                "{id}"
            );
            assert_eq!(
                q["dlq"]["maxReceiveCount"].as_u64(),
                Some(u64::from(PIPELINE_QUEUE_MAX_RECEIVE_COUNT)),
                "{id}"
            );
        }
    }

    #[tokio::test]
    async fn a_lagging_index_shows_previous_versions_until_it_propagates() {
        let store = MemoryAggregatedStore::new("t").with_read_consistency(ReadConsistency::Manual);
        let g = group("arn:aws:l-1", "d");
        let bucket = g.hour;
        let outcome = WriteBack {
            status: AggregatedStatus::Success,
            reason: None,
            metering_record_id: None,
            ttl: None,
            if_attempt: AttemptCondition::Any,
        };
        store
            .put_if_absent(&AggregatedItem::new(g.clone(), 5, None), now())
            .await
            .unwrap();
        assert!(
            store.pending(bucket, None).await.unwrap().is_empty(),
            "not yet indexed"
        );
        store.propagate_index();
        assert!(store.mark_attempted(&g, 5, now()).await.unwrap());
        let seen = store.pending(bucket, None).await.unwrap();
        assert_eq!(
            seen[0].attempted_quantity, None,
            "the index shows the previous version"
        );
        assert!(store.write_back(&g, &outcome, now()).await.unwrap());
        assert_eq!(
            store.pending(bucket, None).await.unwrap().len(),
            1,
            "still listed"
        );
        assert!(
            !store.get(&g).await.unwrap().unwrap().pending,
            "a get is consistent"
        );
        store.propagate_index();
        assert!(store.pending(bucket, None).await.unwrap().is_empty());

        let usage = MemoryUsageStore::new("u").with_read_consistency(ReadConsistency::Manual);
        usage.put_row(conforming_row(&g, 1, 3, None));
        assert!(usage.pending_groups(bucket, None).await.unwrap().is_empty());
        usage.propagate_index();
        let key = RowKey {
            license_arn: g.license_arn.clone(),
            sort_key: g.usage_sort_key_at(1),
        };
        assert!(usage.finalize_row(&key, None, now()).await.unwrap());
        let listed = usage.pending_groups(bucket, None).await.unwrap();
        assert_eq!(listed, std::slice::from_ref(&g), "still listed");
        let mut n = 0;
        usage.read_pending_rows(&g, &mut |_| n += 1).await.unwrap();
        assert_eq!(n, 0, "the group read is consistent");
    }

    #[tokio::test]
    async fn the_pending_indexes_follow_every_write() {
        let usage = MemoryUsageStore::new("u");
        let g = group("arn:aws:l-1", "d");
        let later = GroupKey {
            hour: g.hour.minus_hours(-1),
            ..g.clone()
        };
        usage.put_row(conforming_row(&g, 1, 3, None));
        usage.put_row(conforming_row(&g, 2, 4, None));
        let key = |second| RowKey {
            license_arn: g.license_arn.clone(),
            sort_key: g.usage_sort_key_at(second),
        };
        // A whole-item put that moves a row to another bucket moves it in the index.
        let mut moved = conforming_row(&g, 2, 4, None);
        moved.insert(
            awsmp_contract::attrs::METERING_PENDING.to_owned(),
            awsmp_contract::row::AttrValue::s(later.hour.to_string()),
        );
        usage.put_row(moved);
        assert_eq!(
            usage.pending_groups(g.hour, None).await.unwrap(),
            std::slice::from_ref(&g)
        );
        assert_eq!(
            usage.pending_groups(later.hour, None).await.unwrap().len(),
            1
        );
        assert!(usage.finalize_row(&key(1), None, now()).await.unwrap());
        assert!(usage.pending_groups(g.hour, None).await.unwrap().is_empty());
        let expired = usage.expire_bucket(later.hour, "r", now()).await.unwrap();
        assert_eq!(expired.len(), 1);
        assert!(
            usage
                .expire_bucket(later.hour, "r", now())
                .await
                .unwrap()
                .is_empty()
        );
        assert!(!usage.any_pending());
        assert_eq!(
            usage
                .rows_with_prefix(&g.license_arn, &g.usage_prefix())
                .len(),
            2
        );

        let store = MemoryAggregatedStore::new("t");
        store
            .put_if_absent(&AggregatedItem::new(g.clone(), 5, None), now())
            .await
            .unwrap();
        assert!(store.any_pending() && store.contains(&g) && !store.contains(&later));
        let outcome = WriteBack {
            status: AggregatedStatus::Success,
            reason: None,
            metering_record_id: None,
            ttl: None,
            if_attempt: AttemptCondition::Any,
        };
        assert!(store.write_back(&g, &outcome, now()).await.unwrap());
        assert!(store.pending(g.hour, None).await.unwrap().is_empty());
        assert!(!store.any_pending());
        let mut again = store.get(&g).await.unwrap().unwrap();
        again.pending = true;
        store.insert(again);
        assert_eq!(store.pending(g.hour, None).await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_seeded_lag_is_reproducible_and_eventually_propagates() {
        let run = |seed| async move {
            let mode = ReadConsistency::Seeded { seed, stale: 0.5 };
            let store = MemoryAggregatedStore::new("t").with_read_consistency(mode);
            let mut seen = Vec::new();
            for d in 0..20 {
                let g = group("arn:aws:l-1", &format!("d{d}"));
                store
                    .put_if_absent(&AggregatedItem::new(g.clone(), 1, None), now())
                    .await
                    .unwrap();
                seen.push(store.pending(g.hour, None).await.unwrap().len());
            }
            let mut reads = 0;
            while store
                .pending(group("l", "d").hour, None)
                .await
                .unwrap()
                .len()
                < 20
            {
                reads += 1;
                assert!(reads < 100, "the index never caught up");
            }
            (seen, reads)
        };
        let (a, b) = (run(1).await, run(1).await);
        assert_eq!(a, b);
        assert!(
            a.0.windows(2).any(|w| w[1] <= w[0]),
            "some reads lag: {:?}",
            a.0
        );
    }
}
