//! The rare paths: metrics the sweep does not reach, each emitted by the production handler
//! (aggregator, cleanup, discoverer, expiry, submitter, Kinesis consumer) over the in-memory
//! adapters, fed the input that causes it — a row of an hour already aggregated, a negative
//! quantity, an hour above the `BatchMeterUsage` maximum, raw rows aged out, a record past the
//! billable window, a write-back that meets expiry's `NeedsReconciliation`, records
//! unprocessed in every round, an unsubscribed customer, a disabled API, an hour billed before.
//! No line is written by hand: the collector sees what each handler emits through the
//! process-wide tee. Each driver checks that its handler took the path it is there for, so a
//! driver that stops reaching it fails the collector instead of silently collecting less.

use anyhow::{Context, bail, ensure};
use async_trait::async_trait;
use awsmp_aws::emf::MetricsSink;
use awsmp_consumer::Settings;
use awsmp_consumer::adapters::memory::MemoryStores;
use awsmp_contract::attrs;
use awsmp_contract::clock::FixedClock;
use awsmp_contract::keys::{GroupKey, RowKey};
use awsmp_contract::limits::marketplace::MAX_USAGE_QUANTITY;
use awsmp_contract::row::{AttrValue, conforming_row};
use awsmp_contract::status::AggregatedStatus;
use awsmp_pipeline::adapters::memory::{CallFault, MemoryAdapters, MemoryMeteringApi};
use awsmp_pipeline::config::Config;
use awsmp_pipeline::domain::batch::{CallKind, SubmitRecord};
use awsmp_pipeline::domain::results::ApiResponse;
use awsmp_pipeline::handlers::Services;
use awsmp_pipeline::handlers::aggregator::{AggregateOutcome, aggregate};
use awsmp_pipeline::handlers::cleanup::cleanup;
use awsmp_pipeline::handlers::discoverer::{DiscovererInput, discover};
use awsmp_pipeline::handlers::expiry::expire;
use awsmp_pipeline::handlers::submitter::{UNPROCESSED_RETRY, submit};
use awsmp_pipeline::ports::{AggregatedItem, MeterCallError, MeteringApi};
use awsmp_simulation::steps::{account, license};
use chrono::{DateTime, Duration, Utc};
use std::sync::Arc;

/// "Now" of every driver: two hours after [`HOUR`] began, past its lock.
const NOW: &str = "2026-11-30T12:10:00Z";
/// The hour the drivers' usage falls in.
const HOUR: &str = "2026-11-30T10";
/// The dimensions of the drivers' groups.
const DIMENSIONS: [&str; 3] = ["api_calls", "storage_gb", "users"];

fn now() -> DateTime<Utc> {
    NOW.parse().expect("a valid instant")
}

fn group(dimension: &str, hour: &str) -> GroupKey {
    GroupKey::new(
        license(0),
        account(0),
        dimension,
        hour.parse().expect("a valid hour"),
    )
}

/// One stage's world: the in-memory adapters and the services every handler resolves its
/// dependencies from (each stage names its own `Service`).
struct Stage {
    mem: MemoryAdapters,
    svc: Services,
    clock: Arc<FixedClock>,
}

impl Stage {
    fn new() -> anyhow::Result<Self> {
        let config = Config::from_lookup(|k| {
            let v = match k {
                "AWSMP_PRODUCT_CODE" => "prod-emf-collect",
                "AWSMP_USAGE_TABLE" => "usage",
                "AWSMP_AGGREGATED_USAGE_TABLE" => "aggregated-usage",
                "AWSMP_WORK_QUEUE_URL" => "work",
                "AWSMP_DEPROVISION_WORK_QUEUE_URL" => "deprovision-work",
                "AWSMP_CLEANUP_QUEUE_URL" => "cleanup",
                _ => return None,
            };
            Some(v.to_owned())
        })
        .context("the drivers' configuration")?;
        let mem = MemoryAdapters::new();
        let clock = Arc::new(FixedClock::new(now()));
        let svc = mem.services(config, MetricsSink::capture("pipeline"), clock.clone());
        Ok(Self { mem, svc, clock })
    }

    fn put_rows(&self, g: &GroupKey, rows: &[(u32, u64)]) {
        for &(second, quantity) in rows {
            self.mem
                .usage
                .put_row(conforming_row(g, second, quantity, None));
        }
    }

    /// The consumer's `UpdateItem` on a pending row: `quantity += delta`.
    fn grow(&self, g: &GroupKey, second: u32, delta: u64) -> anyhow::Result<()> {
        let key = RowKey {
            license_arn: g.license_arn.clone(),
            sort_key: g.usage_sort_key_at(second),
        };
        let mut row = self.mem.usage.row(&key).context("the row to grow")?;
        let q: u64 = row
            .get(attrs::QUANTITY)
            .and_then(AttrValue::as_n)
            .and_then(|n| n.parse().ok())
            .context("the row's quantity")?;
        row.insert(attrs::QUANTITY.into(), AttrValue::n(q + delta));
        self.mem.usage.put_row(row);
        Ok(())
    }

    fn item(&self, g: &GroupKey) -> anyhow::Result<AggregatedItem> {
        self.mem
            .aggregated
            .items()
            .into_iter()
            .find(|i| &i.group == g)
            .with_context(|| format!("no aggregated record of {g}"))
    }

    /// One pending aggregated record per dimension of [`HOUR`].
    fn backlog(&self) -> Vec<GroupKey> {
        DIMENSIONS
            .iter()
            .zip(1..)
            .map(|(d, i)| {
                let g = group(d, HOUR);
                self.mem
                    .aggregated
                    .insert(AggregatedItem::new(g.clone(), 10 * i, None));
                g
            })
            .collect()
    }
}

/// Aggregator `UsageRecordRejected` (a negative quantity), `UsageQuantityAboveApiMaximum` (an
/// hour above the API maximum); aggregator `LateUsage` (a row written after its hour was
/// aggregated) and cleanup `LateUsage` (a folded row that grew before its cleanup ran).
async fn aggregation() -> anyhow::Result<()> {
    let s = Stage::new()?;
    let rejected = group("api_calls", HOUR);
    s.put_rows(&rejected, &[(5, 5)]);
    let mut bad = conforming_row(&rejected, 6, 1, None);
    bad.insert(attrs::QUANTITY.into(), AttrValue::N("-1".into()));
    s.mem.usage.put_row(bad);
    let out = aggregate(&s.svc, &rejected.to_work_message()).await?;
    ensure!(
        matches!(&out, AggregateOutcome::Rejected { reason, .. } if reason == "NegativeQuantity"),
        "a negative quantity was not rejected: {out:?}"
    );

    let above = group("storage_gb", HOUR);
    s.put_rows(&above, &[(5, MAX_USAGE_QUANTITY), (900, 7)]);
    aggregate(&s.svc, &above.to_work_message()).await?;
    let overflow = s.item(&above)?.overflow.map(|o| o.quantity);
    ensure!(overflow == Some(7), "no overflow recorded: {overflow:?}");

    let late = group("users", HOUR);
    s.put_rows(&late, &[(5, 5), (900, 5)]);
    aggregate(&s.svc, &late.to_work_message()).await?;
    // The consumer adds 3 to a folded row before cleanup runs: cleanup records it late.
    s.grow(&late, 900, 3)?;
    let messages = s.mem.cleanup_queue.take();
    ensure!(!messages.is_empty(), "the aggregator enqueued no cleanup");
    for m in &messages {
        cleanup(&s.svc, m).await?;
    }
    // A row of the aggregated hour arrives and the group is visited again.
    s.put_rows(&late, &[(100, 4)]);
    let out = aggregate(&s.svc, &late.to_work_message()).await?;
    ensure!(
        matches!(
            out,
            AggregateOutcome::Revisited {
                late_quantity: 4,
                ..
            }
        ),
        "the late row was not surfaced on the revisit: {out:?}"
    );
    Ok(())
}

/// Discoverer `UsageAggregationExpired`: raw rows still pending past the billable window,
/// found by the age-out shard that owns their hour.
async fn ageout() -> anyhow::Result<()> {
    let s = Stage::new()?;
    // 28 hours back: a bucket of age-out shard 0.
    s.put_rows(&group("api_calls", "2026-11-29T08"), &[(1, 5), (2, 7)]);
    let out = discover(&s.svc, DiscovererInput::Ageout { shard: 0 }).await?;
    ensure!(out.rows_expired == 2, "no row aged out: {out:?}");
    Ok(())
}

/// Expiry `UsageSubmissionExpired`: a record pending past the billable window.
async fn expiry() -> anyhow::Result<()> {
    let s = Stage::new()?;
    let stale = group("api_calls", "2026-11-29T11");
    s.mem
        .aggregated
        .insert(AggregatedItem::new(stale.clone(), 40, None));
    let out = expire(&s.svc).await?;
    ensure!(out.records_expired == 1, "nothing expired: {out:?}");
    Ok(())
}

/// Submitter outcomes: `CustomerNotSubscribed`, `DuplicateRecord` (an hour billed by someone
/// else), `DuplicateRecordQuantityMismatch` (our earlier attempt billed another quantity),
/// `UsageRecordUnprocessed` (unprocessed in every round), `BatchMeterUsageException` (a
/// record AWS refuses, and the region's API disabled).
async fn submission() -> anyhow::Result<()> {
    let s = Stage::new()?;
    s.backlog();
    s.mem.metering.unsubscribe(account(0));
    let out = submit(&s.svc, s.mem.metering.as_ref()).await?;
    ensure!(
        out.statuses.get("CustomerNotSubscribed") == Some(&3),
        "{:?}",
        out.statuses
    );

    let s = Stage::new()?;
    let groups = s.backlog();
    s.mem.metering.prebill(groups[0].clone(), 99);
    let mut item = AggregatedItem::new(groups[1].clone(), 9, None);
    item.attempted_quantity = Some(7);
    s.mem.aggregated.insert(item);
    s.mem.metering.prebill(groups[1].clone(), 7);
    s.mem
        .metering
        .reject_dimension("users", "InvalidUsageDimensionException");
    let out = submit(&s.svc, s.mem.metering.as_ref()).await?;
    for status in [
        "DuplicateRecord",
        "DuplicateRecordQuantityMismatch",
        "Error",
    ] {
        ensure!(
            out.statuses.get(status) == Some(&1),
            "no {status}: {:?}",
            out.statuses
        );
    }

    let s = Stage::new()?;
    s.backlog();
    let rounds = UNPROCESSED_RETRY.max_attempts as usize;
    s.mem
        .metering
        .script(std::iter::repeat_n(CallFault::Unprocessed(1), rounds));
    let out = submit(&s.svc, s.mem.metering.as_ref()).await?;
    ensure!(out.left_pending == 1, "nothing left unprocessed: {out:?}");

    let s = Stage::new()?;
    s.backlog();
    s.mem.metering.disable();
    match submit(&s.svc, s.mem.metering.as_ref()).await {
        Err(e) if e.to_string().contains("DisabledApiException") => Ok(()),
        other => bail!("a disabled API did not halt the run: {other:?}"),
    }
}

/// `BatchMeterUsage` as AWS answers it, while expiry runs in between: the clock passes the
/// billable window and the real expiry handler marks the attempted record
/// `NeedsReconciliation` before the answer arrives (the interleaving
/// `pipeline/tests/integration/handler_expiry_race.rs` forces with gates).
struct ExpiryDuringCall {
    api: Arc<MemoryMeteringApi>,
    svc: Services,
    clock: Arc<FixedClock>,
}

#[async_trait]
impl MeteringApi for ExpiryDuringCall {
    async fn batch_meter_usage(
        &self,
        kind: &CallKind,
        records: &[SubmitRecord],
    ) -> Result<ApiResponse, MeterCallError> {
        self.clock.advance(Duration::days(2));
        // Expiry is its own Lambda: it runs on a runtime of its own, to completion, while
        // this call waits (its future is not `Send`, as this trait's must be).
        let out = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_time()
                        .start_paused(true)
                        .build()
                        .expect("expiry's runtime")
                        .block_on(expire(&self.svc))
                })
                .join()
                .expect("expiry does not panic")
        })
        .expect("expiry runs over the in-memory table");
        assert_eq!(
            out.records_unresolved,
            records.len(),
            "expiry marks each attempted record NeedsReconciliation"
        );
        self.api.batch_meter_usage(kind, records).await
    }
}

/// Submitter `WriteBackConflict` (and expiry's `UsageNeedsReconciliation`): AWS's `Success`
/// finds its record finalized by expiry meanwhile.
async fn write_back_conflict() -> anyhow::Result<()> {
    let s = Stage::new()?;
    let g = group("api_calls", HOUR);
    s.mem
        .aggregated
        .insert(AggregatedItem::new(g.clone(), 40, None));
    let api = ExpiryDuringCall {
        api: s.mem.metering.clone(),
        svc: s.mem.services(
            s.svc.config.clone(),
            MetricsSink::capture("pipeline"),
            s.clock.clone(),
        ),
        clock: s.clock.clone(),
    };
    match submit(&s.svc, &api).await {
        Err(e) if e.kind() == "WriteBackConflict" => {}
        other => bail!("the write-back met no conflict: {other:?}"),
    }
    let status = s.item(&g)?.status;
    ensure!(
        status == Some(AggregatedStatus::NeedsReconciliation),
        "{status:?}"
    );
    Ok(())
}

/// Consumer `LateUsage`: an event of a group-hour already finalized by the pipeline.
async fn consumer_late_usage() -> anyhow::Result<()> {
    let stores = MemoryStores::new();
    let arrival = now();
    let consumer = stores.consumer(Settings::default(), Arc::new(FixedClock::new(arrival)));
    let hour = arrival.format("%Y-%m-%dT%H").to_string();
    stores.finalized.finalize(group("api_calls", &hour));
    let event = awsmp_contract::Event::new(
        license(0),
        account(0),
        "api_calls",
        6,
        arrival - Duration::seconds(2),
    )
    .with_event_id("late-after-aggregation");
    let pk = awsmp_producer::partition::partition_key(&license(0), &account(0), "api_calls");
    let record = awsmp_consumer::handler::kinesis_record(
        awsmp_simulation::esm::STREAM_ARN,
        "shardId-000000000000",
        "49590338271490256608559692538361571095921575989136588898",
        &pk,
        arrival,
        awsmp_contract::wire::encode_event(&event),
    );
    let mut batch = aws_lambda_events::event::kinesis::KinesisEvent::default();
    batch.records.push(record);
    let (response, report) = consumer.process(batch).await;
    ensure!(response.batch_item_failures.is_empty(), "{response:?}");
    ensure!(report.late_quantity == 6, "not refused as late: {report:?}");
    Ok(())
}

/// Drive every rare path, on a paused clock (the submitter's retry delays pass at once).
pub fn run_all() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .context("the drivers' runtime")?;
    runtime.block_on(async {
        aggregation().await.context("aggregation")?;
        ageout().await.context("age-out")?;
        expiry().await.context("expiry")?;
        submission().await.context("submission")?;
        write_back_conflict().await.context("write-back conflict")?;
        consumer_late_usage().await.context("consumer late usage")
    })
}
