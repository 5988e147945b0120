//! The submitter and expiry tell the truth, through the real SDK against the Marketplace
//! simulator and the local DynamoDB: a group-hour AWS billed at another quantity, submitted
//! while the API throttles, ends `DuplicateRecord` (not `Success`); a call AWS applied but
//! never answered near the window's end ends `NeedsReconciliation` (not `SubmissionExpired`).
//!
//! Isolation: one runner at a time ([`common::STACK`]), demo licenses 140–142 and years of
//! their own; simulator faults are reset by a guard even when a test fails.

use crate::common;

use anyhow::{Result, ensure};
use awsmp_contract::status::AggregatedStatus;
use awsmp_local_stack::runner::TickReport;
use awsmp_pipeline::domain::batch::{CallKind, SubmitRecord};
use awsmp_pipeline::ports::MeteringApi;
use chrono::Duration;
use common::*;
use serde_json::json;

fn ok(rep: &TickReport) -> Result<()> {
    ensure!(
        rep.submitter_error.is_none(),
        "submitter failed: {:?}",
        rep.submitter_error
    );
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn an_hour_billed_elsewhere_and_submitted_under_throttling_is_a_duplicate_record()
-> Result<()> {
    let _one = STACK.lock().await;
    let st = Stack::new().await?;
    let runner = runner(&[("AWSMP_DEPLOYMENT_MODE", "direct-submit")]).await?;
    let g = group(140, "api_calls", "2061-03-10T10");
    let at = utc(2061, 3, 10, 12, 0, 0);
    runner.set_time(at).await?;
    // GIVEN AWS already billed the hour at 99 (another writer), and our record says 42
    let other = SubmitRecord::new(g.clone(), 99, None);
    let kind = CallKind::ConcurrentAgreements { product_hint: None };
    runner.metering.batch_meter_usage(&kind, &[other]).await?;
    st.put_direct_record(&g, 42).await?;
    // WHEN every BatchMeterUsage call of a run is throttled
    let guard = st.faults(json!({"throttleRate": 1.0, "seed": 3})).await?;
    ok(&runner.tick(at).await?)?;
    let rec = st.record(&g).await?;
    ensure!(
        rec.pending && rec.attempted_quantity.is_none(),
        "a throttled call left an attempt on file: {rec:?}"
    );
    // ... and the next run finds the API healthy
    drop(guard);
    ok(&runner.tick(at + Duration::minutes(5)).await?)?;
    // THEN the hour is someone else's: DuplicateRecord, and the ledger still bills 99
    let rec = st.record(&g).await?;
    ensure!(
        rec.status == Some(AggregatedStatus::DuplicateRecord) && !rec.pending,
        "{rec:?}"
    );
    ensure!(st.ledger(&g.license_arn).await?.billed(&g)?["quantity"] == 99);
    ensure!(!points(&runner, "DuplicateRecord").is_empty());
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn an_applied_call_unanswered_at_the_window_end_needs_reconciliation() -> Result<()> {
    let _one = STACK.lock().await;
    let st = Stack::new().await?;
    let runner = runner(&[("AWSMP_DEPLOYMENT_MODE", "direct-submit")]).await?;
    // GIVEN records of the last billable hour (age 23 at `at`)
    let groups: Vec<_> = (141..143)
        .map(|i| group(i, "api_calls", "2062-03-09T13"))
        .collect();
    for g in &groups {
        st.put_direct_record(g, 7).await?;
    }
    let at = utc(2062, 3, 10, 12, 10, 0);
    // WHEN AWS applies every call and answers each with a 500
    let guard = st
        .faults(json!({"applyThenFailRate": 1.0, "seed": 5}))
        .await?;
    ok(&runner.tick(at).await?)?;
    drop(guard);
    for g in &groups {
        ensure!(st.ledger(&g.license_arn).await?.billed(g)?["quantity"] == 7);
        let rec = st.record(g).await?;
        ensure!(rec.pending && rec.attempted_quantity == Some(7), "{rec:?}");
    }
    // ... and the window closes before the next run
    let rep = runner.tick(at + Duration::hours(1)).await?;
    // THEN nothing is SubmissionExpired: AWS billed it, the record says it needs reconciling
    let expiry = rep.expiry.expect("expiry ran");
    ensure!(
        (expiry.records_expired, expiry.records_unresolved) == (0, groups.len()),
        "{expiry:?}"
    );
    for g in &groups {
        let rec = st.record(g).await?;
        ensure!(
            rec.status == Some(AggregatedStatus::NeedsReconciliation) && !rec.pending,
            "{rec:?}"
        );
    }
    ensure!(!points(&runner, "UsageNeedsReconciliation").is_empty());
    ensure!(points(&runner, "UsageSubmissionExpired").is_empty());
    Ok(())
}
