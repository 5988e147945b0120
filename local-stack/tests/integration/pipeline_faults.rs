//! The pipeline under faults, against the local stack: duplicate SQS deliveries, a crash
//! between the commit point and the cleanup enqueue, a submitter crash or lost response after
//! AWS accepted a batch, throttling storms (Marketplace and DynamoDB), UnprocessedRecords,
//! poison records in full 25-record batches, and a region where BatchMeterUsage is disabled.
//! Each asserts the money outcome: billed exactly once, nothing lost, every other unit with a
//! terminal reason or still pending with a metric.
//!
//! Isolation: one runner at a time ([`common::STACK`]), a demo license range and a year of its
//! own per test; simulator faults are reset by a guard even when a test fails.

use crate::common;

use anyhow::{Context, Result, ensure};
use async_trait::async_trait;
use awsmp_contract::keys::GroupKey;
use awsmp_contract::row::RawUsageRow;
use awsmp_contract::status::AggregatedStatus;
use awsmp_local_stack::local::{DEMO_DIMENSIONS, demo_catalog};
use awsmp_local_stack::runner::{Runner, TickReport};
use awsmp_marketplace_sim::{Catalog, SimConfig, spawn_on};
use awsmp_pipeline::adapters::marketplace::MarketplaceMeteringApi;
use awsmp_pipeline::handlers::discoverer::DiscovererInput;
use awsmp_pipeline::handlers::submitter;
use awsmp_pipeline::ports::{AggregatedStore, MessageQueue};
use awsmp_testkit::faults::{Fault, FaultPlan, Rates};
use awsmp_testkit::ports::{Ctx, Faulty};
use chrono::{DateTime, Duration, Utc};
use common::*;
use serde_json::json;
use std::sync::Arc;

fn ok(rep: &TickReport) -> Result<()> {
    ensure!(
        rep.submitter_error.is_none(),
        "submitter failed: {:?}",
        rep.submitter_error
    );
    Ok(())
}

/// Assert `g` was billed exactly once with `quantity`, its record is `Success` with the
/// ledger's MeteringRecordId, and no resubmission with another quantity was seen.
async fn assert_billed_once(st: &Stack, g: &GroupKey, quantity: u64) -> Result<()> {
    let ledger = st.ledger(&g.license_arn).await?;
    let line = ledger.billed(g)?;
    ensure!(
        line["quantity"] == quantity,
        "{g}: billed {}",
        line["quantity"]
    );
    let rec = st.record(g).await?;
    ensure!(
        rec.status == Some(AggregatedStatus::Success) && !rec.pending,
        "{g}: record {:?} / {:?} pending={}",
        rec.status,
        rec.status_reason,
        rec.pending
    );
    ensure!(
        rec.metering_record_id.as_deref() == line["meteringRecordId"].as_str(),
        "{g}: record id {:?} != ledger {}",
        rec.metering_record_id,
        line["meteringRecordId"]
    );
    ensure!(
        ledger
            .duplicates
            .iter()
            .all(|d| d["dimension"] != g.dimension.as_str()
                || d["hour"] != g.hour.to_string().as_str()
                || d["customerAWSAccountId"] != g.customer_aws_account_id.as_str()),
        "{g}: a DuplicateRecord attempt reached the ledger"
    );
    Ok(())
}

/// `rows` of one group, each Aggregated with the reference reason for `sum` over all of them.
async fn assert_aggregated(st: &Stack, rows: &[RawUsageRow], sum: u64) -> Result<()> {
    let reason = format!(
        "Aggregated total quantity {sum} from {} raw usage records",
        rows.len()
    );
    for r in rows {
        st.assert_raw(r, "Aggregated", &reason).await?;
    }
    Ok(())
}

/// Rows for every dimension of demo licenses `licenses` in `hour`: (group, rows, sum).
fn workload(
    licenses: std::ops::Range<usize>,
    hour_bucket: &str,
) -> Vec<(GroupKey, Vec<RawUsageRow>, u64)> {
    let mut out = Vec::new();
    for i in licenses {
        for (d, dim) in DEMO_DIMENSIONS.iter().enumerate() {
            let g = group(i, dim, hour_bucket);
            let rows: Vec<_> = (0..3u32)
                .map(|s| row(&g, s * 600 + d as u32, u64::from(s) + i as u64 % 7 + 1))
                .collect();
            let sum = rows
                .iter()
                .map(|r| r["quantity"].as_n().unwrap().parse::<u64>().unwrap())
                .sum();
            out.push((g, rows, sum));
        }
    }
    out
}

async fn put_workload(st: &Stack, w: &[(GroupKey, Vec<RawUsageRow>, u64)]) -> Result<()> {
    for (_, rows, _) in w {
        st.put_rows(rows).await?;
    }
    Ok(())
}

/// Aggregate (but do not submit) the groups of the bucket `hour_offset` hours before `at`.
async fn aggregate_only(runner: &Runner, at: DateTime<Utc>, hour_offset: u32) -> Result<()> {
    runner.set_time(at).await?;
    runner
        .invoke(
            "discoverer",
            serde_json::to_value(DiscovererInput::Meter { hour_offset })?,
        )
        .await?;
    runner.drain().await?;
    Ok(())
}

/// A queue that sends every body twice (an at-least-once queue delivering twice). A delivery
/// behaviour, not a call fault: both sends succeed and apply, so no `Fault` of the test kit
/// names it.
struct DuplicatingQueue(Arc<dyn MessageQueue>);

#[async_trait]
impl MessageQueue for DuplicatingQueue {
    async fn send_all(&self, bodies: &[String]) -> awsmp_pipeline::Result<()> {
        self.0.send_all(bodies).await?;
        self.0.send_all(bodies).await
    }
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn duplicate_sqs_deliveries_bill_once() -> Result<()> {
    let _one = STACK.lock().await;
    let st = Stack::new().await?;
    let mut runner = runner(&[]).await?;
    let w = workload(50..51, "2051-03-10T10");
    put_workload(&st, &w).await?;
    // GIVEN every work message delivered three times and every cleanup message twice
    let at = utc(2051, 3, 10, 12, 0, 0);
    runner.set_time(at).await?;
    for (g, _, _) in &w {
        for _ in 0..2 {
            st.send("AWSMP_WORK_QUEUE_URL", &g.to_work_message())
                .await?;
        }
    }
    let real = runner.svc.cleanup_queue.clone().expect("cleanup queue");
    runner.svc.cleanup_queue = Some(Arc::new(DuplicatingQueue(real)));
    ok(&runner.tick(at).await?)?;
    // ... and once more after submission
    for (g, _, _) in &w {
        st.send("AWSMP_WORK_QUEUE_URL", &g.to_work_message())
            .await?;
    }
    ok(&runner.tick(at + Duration::minutes(90)).await?)?;
    // THEN each group is billed once and its rows are Aggregated with the right sum
    for (g, rows, sum) in &w {
        assert_billed_once(&st, g, *sum).await?;
        assert_aggregated(&st, rows, *sum).await?;
    }
    assert!(points(&runner, "LateUsage").is_empty());
    assert!(points(&runner, "DuplicateRecord").is_empty());
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn crash_between_commit_point_and_cleanup_enqueue_is_retried() -> Result<()> {
    let _one = STACK.lock().await;
    let st = Stack::new().await?;
    let mut runner = runner(&[]).await?;
    let g = group(51, "api_calls", "2052-03-10T10");
    let rows: Vec<_> = (0..4).map(|s| row(&g, s * 3, 2)).collect();
    st.put_rows(&rows).await?;
    // GIVEN the aggregator's cleanup enqueue after its conditional put fails before SQS has the
    // message
    let real = runner.svc.cleanup_queue.clone().expect("cleanup queue");
    let ctx = Ctx::new(FaultPlan::new(52, Rates::default()));
    ctx.faults.script("send_all", [Fault::FailBeforeApply]);
    runner.svc.cleanup_queue = Some(Arc::new(Faulty::<dyn MessageQueue>::new(real, &ctx)));
    // WHEN the schedules run (SQS redelivers the failed work message)
    let rep = runner.tick(utc(2052, 3, 10, 12, 0, 0)).await?;
    ok(&rep)?;
    // THEN the redelivery finishes the rows as Aggregated and the group is billed once
    assert_eq!(ctx.faults.injected(), 1, "fault not hit");
    assert!(rep.drained["work"].failed >= 1, "{:?}", rep.drained);
    let report = || format!("tick report: {}", serde_json::json!(rep));
    assert_aggregated(&st, &rows, 8)
        .await
        .with_context(report)?;
    assert_billed_once(&st, &g, 8).await.with_context(report)?;
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn lost_response_after_an_accepted_batch_is_recognised_next_run() -> Result<()> {
    let _one = STACK.lock().await;
    let st = Stack::new().await?;
    let runner = runner(&[]).await?;
    let w = workload(52..53, "2053-03-10T10");
    put_workload(&st, &w).await?;
    // GIVEN every BatchMeterUsage call is applied, then answered with a 500
    let guard = st
        .faults(json!({"applyThenFailRate": 1.0, "seed": 7}))
        .await?;
    let rep = runner.tick(utc(2053, 3, 10, 12, 0, 0)).await?;
    ok(&rep)?;
    // THEN AWS billed the records but the run saw no answer: they stay pending with the
    // attempted quantity persisted
    for (g, _, sum) in &w {
        let rec = st.record(g).await?;
        assert!(rec.pending && rec.status.is_none(), "{g}: {rec:?}");
        assert_eq!(rec.attempted_quantity, Some(*sum));
        assert_eq!(
            st.ledger(&g.license_arn).await?.billed(g)?["quantity"],
            *sum
        );
    }
    // WHEN the next run finds the API healthy again
    drop(guard);
    ok(&runner.tick(utc(2053, 3, 10, 12, 30, 0)).await?)?;
    // THEN the replay is recognised: Success with the original id, billed once, no mis-report
    for (g, rows, sum) in &w {
        assert_billed_once(&st, g, *sum).await?;
        assert_aggregated(&st, rows, *sum).await?;
    }
    assert!(points(&runner, "DuplicateRecord").is_empty());
    assert!(points(&runner, "DuplicateRecordQuantityMismatch").is_empty());
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn submitter_crash_after_an_accepted_batch_is_recognised_next_run() -> Result<()> {
    let _one = STACK.lock().await;
    let st = Stack::new().await?;
    let runner = runner(&[]).await?;
    let w = workload(53..54, "2054-03-10T10");
    put_workload(&st, &w).await?;
    let at = utc(2054, 3, 10, 12, 0, 0);
    aggregate_only(&runner, at, 2).await?;
    // GIVEN the submitter process dies after BatchMeterUsage succeeded, before any write-back:
    // every later call of the run (the write-backs, any retry) fails before it applies
    let ctx = Ctx::new(FaultPlan::new(53, Rates::default()));
    ctx.faults
        .script("batch_meter_usage", [Fault::ApplyThenFail]);
    let mut svc = runner.svc.clone();
    svc.aggregated = Arc::new(Faulty::<dyn AggregatedStore>::new(svc.aggregated, &ctx));
    let api = Faulty::<MarketplaceMeteringApi>::new(runner.metering.clone(), &ctx);
    let _discarded = submitter::submit(&svc, &api).await;
    assert!(ctx.faults.crashed(), "the run did not crash");
    assert_eq!(
        ctx.faults.injected_by_kind().get(&Fault::ApplyThenFail),
        Some(&1)
    );
    for (g, _, sum) in &w {
        let rec = st.record(g).await?;
        assert!(
            rec.pending && rec.attempted_quantity == Some(*sum),
            "{rec:?}"
        );
        st.ledger(&g.license_arn).await?.billed(g)?;
    }
    // WHEN the next scheduled run happens
    ok(&runner.tick(at + Duration::minutes(5)).await?)?;
    // THEN every record is Success with the id AWS gave the first time, billed once
    for (g, rows, sum) in &w {
        assert_billed_once(&st, g, *sum).await?;
        assert_aggregated(&st, rows, *sum).await?;
    }
    assert!(points(&runner, "DuplicateRecord").is_empty());
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn throttling_storm_bills_everything_once_and_loses_no_write_back() -> Result<()> {
    let _one = STACK.lock().await;
    let st = Stack::new().await?;
    let mut runner = runner(&[]).await?;
    // 60 groups: three BatchMeterUsage calls' worth
    let w = workload(60..80, "2055-03-10T10");
    put_workload(&st, &w).await?;
    // GIVEN most Marketplace calls are throttled, and every write of the submitter to
    // aggregated-usage (attempt mark, write-back) is throttled twice per record
    let _guard = st.faults(json!({"throttleRate": 0.6, "seed": 11})).await?;
    let ctx = Ctx::new(FaultPlan::new(11, Rates::default()));
    for op in ["mark_attempted", "write_back"] {
        ctx.faults
            .script_each_key(op, [Fault::Throttle, Fault::Throttle]);
    }
    let real = runner.svc.aggregated.clone();
    runner.svc.aggregated = Arc::new(Faulty::<dyn AggregatedStore>::new(real, &ctx));
    // WHEN the 5-minute schedule keeps running
    let start = utc(2055, 3, 10, 12, 0, 0);
    let mut runs = 0;
    loop {
        ok(&runner.tick(start + Duration::minutes(5 * runs)).await?)?;
        runs += 1;
        let mut pending = 0;
        for (g, _, _) in &w {
            pending += usize::from(st.record(g).await?.pending);
        }
        if pending == 0 {
            break;
        }
        ensure!(
            runs < 12,
            "{pending} records still pending after {runs} runs"
        );
    }
    // THEN every group is billed exactly once and every accepted batch was written back
    assert!(ctx.faults.injected() > 0);
    assert!(st.counters().await?["throttled"].as_u64().unwrap_or(0) > 0);
    for (g, rows, sum) in &w {
        assert_billed_once(&st, g, *sum).await?;
        assert_aggregated(&st, rows, *sum).await?;
    }
    let mut billed = 0;
    for i in 60..80 {
        billed += st
            .ledger(&awsmp_local_stack::local::demo_license_arn(i))
            .await?
            .records
            .len();
    }
    assert_eq!(billed, w.len());
    assert!(points(&runner, "DuplicateRecord").is_empty());
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn unprocessed_records_are_retried_and_surfaced_while_pending() -> Result<()> {
    let _one = STACK.lock().await;
    let st = Stack::new().await?;
    let runner = runner(&[]).await?;
    let w = workload(80..83, "2056-03-10T10");
    put_workload(&st, &w).await?;
    // GIVEN AWS returns every record in UnprocessedRecords
    let guard = st
        .faults(json!({"unprocessedRate": 1.0, "seed": 3}))
        .await?;
    ok(&runner.tick(utc(2056, 3, 10, 12, 0, 0)).await?)?;
    // THEN after the in-run retries the records stay pending (not failed), with the metric
    for (g, _, _) in &w {
        let rec = st.record(g).await?;
        assert!(rec.pending && rec.status.is_none(), "{g}: {rec:?}");
        assert!(st.ledger(&g.license_arn).await?.record(g).is_none());
    }
    assert_eq!(
        runner.metrics.total("UsageRecordUnprocessed"),
        w.len() as f64,
        "one UsageRecordUnprocessed per record left pending"
    );
    // WHEN about half the records come back unprocessed, then none
    st.post_faults(json!({"unprocessedRate": 0.5, "seed": 5}))
        .await?;
    ok(&runner.tick(utc(2056, 3, 10, 12, 5, 0)).await?)?;
    drop(guard);
    ok(&runner.tick(utc(2056, 3, 10, 12, 10, 0)).await?)?;
    // THEN everything is billed once
    for (g, rows, sum) in &w {
        assert_billed_once(&st, g, *sum).await?;
        assert_aggregated(&st, rows, *sum).await?;
    }
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn poison_records_in_a_full_batch_are_each_isolated() -> Result<()> {
    let _one = STACK.lock().await;
    let st = Stack::new().await?;
    let runner = runner(&[]).await?;
    // GIVEN exactly 25 pending groups (one full call), three with dimensions AWS rejects
    let poison = [103, 112, 121];
    let mut groups = Vec::new();
    for i in 100..125 {
        let dim = if poison.contains(&i) {
            format!("bogus_dimension_{i}")
        } else {
            "api_calls".to_owned()
        };
        let g = group(i, &dim, "2057-03-10T10");
        st.put_rows(&[row(&g, 7, i as u64)]).await?;
        groups.push((i, g));
    }
    // WHEN they are submitted
    let rep = runner.tick(utc(2057, 3, 10, 12, 0, 0)).await?;
    ok(&rep)?;
    let sub = rep.submitter.expect("submitter ran");
    assert_eq!(sub.records_read, 25);
    // THEN each poison record is isolated as Error and the 22 others are billed
    for (i, g) in &groups {
        if poison.contains(i) {
            let rec = st.record(g).await?;
            assert_eq!(rec.status, Some(AggregatedStatus::Error), "{g}");
            assert_eq!(
                rec.status_reason.as_deref(),
                Some("InvalidUsageDimensionException")
            );
            assert!(st.ledger(&g.license_arn).await?.records.is_empty());
        } else {
            assert_billed_once(&st, g, *i as u64).await?;
        }
    }
    assert_eq!(sub.statuses.get("Success"), Some(&22));
    assert_eq!(sub.statuses.get("Error"), Some(&3));
    assert_eq!(points(&runner, "BatchMeterUsageException").len(), 3);
    assert!(has_point(
        &runner,
        "BatchMeterUsageException",
        "Exception",
        "InvalidUsageDimensionException"
    ));
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn disabled_region_halts_the_run_without_marking_errors() -> Result<()> {
    let _one = STACK.lock().await;
    let st = Stack::new().await?;
    let mut runner = runner(&[]).await?;
    let w = workload(130..131, "2058-03-10T10");
    put_workload(&st, &w).await?;
    // GIVEN a region where BatchMeterUsage answers DisabledApiException
    let mut config = SimConfig::new(Catalog::from_json(&demo_catalog().to_string())?);
    config.disabled = true;
    config.region = "ap-disabled-1".into();
    let disabled = spawn_on("127.0.0.1:0".parse()?, config).await?;
    let mut env = st.env.clone();
    env.vars.insert(
        "AWS_ENDPOINT_URL_MARKETPLACE_METERING".into(),
        disabled.url(),
    );
    let healthy = std::mem::replace(
        &mut runner.metering,
        MarketplaceMeteringApi::new(env.metering().await?),
    );
    // WHEN the submitter runs there
    let rep = runner.tick(utc(2058, 3, 10, 12, 0, 0)).await?;
    // THEN the run fails loudly as a whole-region halt, and no record is marked Error
    let err = rep.submitter_error.clone().unwrap_or_default();
    assert!(err.contains("DisabledApiException"), "run error: {err:?}");
    assert!(has_point(
        &runner,
        "BatchMeterUsageException",
        "Exception",
        "DisabledApiException"
    ));
    for (g, _, _) in &w {
        let rec = st.record(g).await?;
        assert!(rec.pending && rec.status.is_none(), "{g}: {rec:?}");
    }
    assert!(disabled.with_state(|s| s.counters().requests) >= 1);
    disabled.shutdown().await?;
    // WHEN the API is available again, the same records are billed
    runner.metering = healthy;
    ok(&runner.tick(utc(2058, 3, 10, 12, 5, 0)).await?)?;
    for (g, rows, sum) in &w {
        assert_billed_once(&st, g, *sum).await?;
        assert_aggregated(&st, rows, *sum).await?;
    }
    Ok(())
}
