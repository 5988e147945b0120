//! Shared set-up of the handler tests: the in-memory adapters behind [`Services`], a fixed
//! clock, captured metrics, and the JSON fixtures under `tests/fixtures/`.
#![allow(dead_code)] // each test binary uses part of it

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use awsmp_aws::emf::MetricsSink;
use awsmp_contract::attrs as a;
use awsmp_contract::clock::FixedClock;
use awsmp_contract::keys::{GroupKey, HourBucket, RowKey};
use awsmp_contract::row::{AttrValue, RawUsageRow, conforming_row};
use awsmp_pipeline::adapters::memory::MemoryAdapters;
use awsmp_pipeline::config::Config;
use awsmp_pipeline::domain::batch::{CallKind, SubmitRecord};
use awsmp_pipeline::domain::results::ApiResponse;
use awsmp_pipeline::handlers::Services;
use awsmp_pipeline::ports::{
    AggregatedItem, AggregatedStore, MeterCallError, MeteringApi, WriteBack,
};
use chrono::{DateTime, Utc};
use std::sync::Arc;

/// The license every fixture names.
pub const LICENSE: &str =
    "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";
/// The buyer account every fixture names.
pub const ACCOUNT: &str = "111122223333";
/// The dimension of the fixtures' work messages.
pub const DIMENSION: &str = "api_calls";
/// The hour of the fixtures' work messages.
pub const HOUR: &str = "2026-11-30T10";
/// "Now" of most tests: two hours after [`HOUR`] began, past the 1-hour lock.
pub const NOW: &str = "2026-11-30T12:10:00Z";
/// The product this stack meters.
pub const PRODUCT: &str = "prod-0123456789abcdefghijklmno";

/// A fixture file's text.
pub fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// An SQS event fixture, parsed as the Lambda runtime parses it.
pub fn sqs_event(name: &str) -> SqsEvent {
    serde_json::from_str(&fixture(name)).expect("SQS event fixture")
}

/// The ids of the messages a batch response reports as failed.
pub fn failed_ids(response: &SqsBatchResponse) -> Vec<String> {
    response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect()
}

/// An instant from its RFC 3339 text.
pub fn at(t: &str) -> DateTime<Utc> {
    t.parse().expect("instant")
}

/// A group of the fixtures' license and account.
pub fn group(dimension: &str, hour: &str) -> GroupKey {
    GroupKey::new(
        LICENSE,
        ACCOUNT,
        dimension,
        hour.parse::<HourBucket>().expect("hour"),
    )
}

/// The work messages' group.
pub fn work_group() -> GroupKey {
    group(DIMENSION, HOUR)
}

/// A full-mode configuration, with `extra` variables on top.
pub fn config(extra: &[(&str, &str)]) -> Config {
    let base = [
        ("AWSMP_PRODUCT_CODE", PRODUCT),
        ("AWSMP_USAGE_TABLE", "usage"),
        ("AWSMP_AGGREGATED_USAGE_TABLE", "aggregated-usage"),
        ("AWSMP_SUBSCRIBERS_TABLE", "subscribers"),
        ("AWSMP_WORK_QUEUE_URL", "work"),
        ("AWSMP_DEPROVISION_WORK_QUEUE_URL", "deprovision-work"),
        ("AWSMP_CLEANUP_QUEUE_URL", "cleanup"),
    ];
    Config::from_lookup(|k| {
        extra
            .iter()
            .chain(&base)
            .find(|(name, _)| *name == k)
            .map(|(_, v)| (*v).to_owned())
    })
    .expect("configuration")
}

/// One stage's world: in-memory tables, queues and ledger, a fixed clock, captured metrics.
pub struct World {
    /// The adapters, for arranging and inspecting state.
    pub mem: MemoryAdapters,
    /// What the handlers see.
    pub svc: Services,
    /// The clock the handlers read.
    pub clock: Arc<FixedClock>,
    /// Captured EMF lines.
    pub metrics: MetricsSink,
}

impl World {
    /// A world at `now` with the full-mode configuration.
    pub fn at(now: &str) -> Self {
        Self::with_config(now, config(&[]))
    }

    /// A world at `now` with `config`.
    pub fn with_config(now: &str, config: Config) -> Self {
        Self::with_adapters(now, config, MemoryAdapters::new())
    }

    /// A world at `now` with `config` over `mem`.
    pub fn with_adapters(now: &str, config: Config, mem: MemoryAdapters) -> Self {
        let clock = Arc::new(FixedClock::new(at(now)));
        let metrics = MetricsSink::capture("handler-test");
        let svc = mem.services(config, metrics.clone(), clock.clone());
        Self {
            mem,
            svc,
            clock,
            metrics,
        }
    }

    /// Write conforming rows of `group`: `(second of the hour, quantity)`.
    pub fn put_rows(&self, group: &GroupKey, rows: &[(u32, u64)]) {
        for &(second, quantity) in rows {
            assert!(
                self.mem
                    .usage
                    .put_row(conforming_row(group, second, quantity, None))
            );
        }
    }

    /// Write one row as given.
    pub fn put_row(&self, row: RawUsageRow) {
        assert!(self.mem.usage.put_row(row));
    }

    /// The raw row at `second` of `group`'s hour.
    pub fn row(&self, group: &GroupKey, second: u32) -> RawUsageRow {
        let key = RowKey {
            license_arn: group.license_arn.clone(),
            sort_key: group.usage_sort_key_at(second),
        };
        self.mem.usage.row(&key).expect("row exists")
    }

    /// A pending aggregated record of `group` with `quantity`, as the aggregator commits it.
    pub fn put_aggregated(&self, group: &GroupKey, quantity: u64) {
        self.mem
            .aggregated
            .insert(AggregatedItem::new(group.clone(), quantity, None));
    }

    /// The aggregated record of `group`.
    pub fn aggregated(&self, group: &GroupKey) -> AggregatedItem {
        self.mem
            .aggregated
            .items()
            .into_iter()
            .find(|i| &i.group == group)
            .expect("aggregated record exists")
    }
}

/// A row's string attribute.
pub fn attr<'r>(row: &'r RawUsageRow, name: &str) -> Option<&'r str> {
    row.get(name).and_then(AttrValue::as_s)
}

/// Whether a row is still pending.
pub fn is_pending(row: &RawUsageRow) -> bool {
    row.contains_key(a::METERING_PENDING)
}

/// What a test runs around the calls of a [`Hooked`] aggregated store or metering API: each
/// hook does nothing unless a test's type says otherwise.
#[async_trait::async_trait]
pub trait Hooks: Send + Sync {
    /// Before a pending read.
    async fn before_read(&self) {}
    /// After a pending read that found a record.
    async fn after_found(&self) {}
    /// Before an attempt mark.
    async fn before_mark(&self) {}
    /// After an attempt mark.
    async fn after_mark(&self) {}
    /// Before a write-back.
    async fn before_write(&self) {}
    /// After a write-back.
    async fn after_write(&self) {}
    /// Before a `BatchMeterUsage` call.
    async fn before_call(&self) {}
    /// After a `BatchMeterUsage` call.
    async fn after_call(&self) {}
}

/// An aggregated store (`Hooked<dyn AggregatedStore, _>`) or a metering API
/// (`Hooked<dyn MeteringApi, _>`) that runs `hooks` around its calls and otherwise is `inner`.
pub struct Hooked<T: ?Sized, H> {
    /// The store or API the calls go to.
    pub inner: Arc<T>,
    /// What runs around them.
    pub hooks: H,
}

#[async_trait::async_trait]
impl<H: Hooks> AggregatedStore for Hooked<dyn AggregatedStore, H> {
    async fn put_if_absent(
        &self,
        item: &AggregatedItem,
        now: DateTime<Utc>,
    ) -> awsmp_pipeline::Result<bool> {
        self.inner.put_if_absent(item, now).await
    }
    async fn get(&self, group: &GroupKey) -> awsmp_pipeline::Result<Option<AggregatedItem>> {
        self.inner.get(group).await
    }
    async fn pending(
        &self,
        bucket: HourBucket,
        license: Option<&str>,
    ) -> awsmp_pipeline::Result<Vec<AggregatedItem>> {
        self.hooks.before_read().await;
        let found = self.inner.pending(bucket, license).await;
        if found.as_ref().is_ok_and(|items| !items.is_empty()) {
            self.hooks.after_found().await;
        }
        found
    }
    async fn mark_attempted(
        &self,
        group: &GroupKey,
        quantity: u64,
        now: DateTime<Utc>,
    ) -> awsmp_pipeline::Result<bool> {
        self.hooks.before_mark().await;
        let marked = self.inner.mark_attempted(group, quantity, now).await;
        self.hooks.after_mark().await;
        marked
    }
    async fn retract_attempt(
        &self,
        group: &GroupKey,
        quantity: u64,
        previous: Option<u64>,
        now: DateTime<Utc>,
    ) -> awsmp_pipeline::Result<()> {
        self.inner
            .retract_attempt(group, quantity, previous, now)
            .await
    }
    async fn write_back(
        &self,
        group: &GroupKey,
        outcome: &WriteBack,
        now: DateTime<Utc>,
    ) -> awsmp_pipeline::Result<bool> {
        self.hooks.before_write().await;
        let written = self.inner.write_back(group, outcome, now).await;
        self.hooks.after_write().await;
        written
    }
}

#[async_trait::async_trait]
impl<H: Hooks> MeteringApi for Hooked<dyn MeteringApi, H> {
    async fn batch_meter_usage(
        &self,
        kind: &CallKind,
        records: &[SubmitRecord],
    ) -> Result<ApiResponse, MeterCallError> {
        self.hooks.before_call().await;
        let answer = self.inner.batch_meter_usage(kind, records).await;
        self.hooks.after_call().await;
        answer
    }
}
