//! `meterctl redrive` on the local stack, through the binary: an `Error` record goes back to
//! pending and the next submitter run bills it; `RejectedClientSide` rows fixed by their writer
//! go back to pending and the next run aggregates and bills them; a billed hour, and an hour
//! outside the window, are refused (docs/meterctl.md, "redrive").
//!
//! Isolation: one runner at a time ([`common::STACK`]), demo licenses 170–171 and years of
//! their own.

use crate::common;

use anyhow::{Context, Result, ensure};
use aws_sdk_dynamodb::types::AttributeValue as Av;
use awsmp_contract::attrs as a;
use awsmp_contract::keys::GroupKey;
use awsmp_contract::row::AttrValue;
use awsmp_contract::status::AggregatedStatus;
use chrono::{DateTime, Duration, SecondsFormat, Utc};
use common::*;
use std::process::{Command, Output};

fn meterctl(st: &Stack, now: DateTime<Utc>, args: &[&str]) -> Result<Output> {
    let mut cmd = Command::new(awsmp_local_stack::local::sibling_binary("meterctl")?);
    cmd.env_clear().envs(&st.env.vars);
    cmd.args([
        "--json",
        "--now",
        &now.to_rfc3339_opts(SecondsFormat::Secs, true),
    ]);
    Ok(cmd.args(args).output()?)
}

fn redrive(st: &Stack, now: DateTime<Utc>, g: &GroupKey) -> Result<(i32, serde_json::Value)> {
    let hour = g.hour.to_string();
    let out = meterctl(
        st,
        now,
        &[
            "redrive",
            "--license",
            &g.license_arn,
            "--account",
            &g.customer_aws_account_id,
            "--dimension",
            &g.dimension,
            "--hour",
            &hour,
        ],
    )?;
    let v = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("no JSON; stderr:\n{}", String::from_utf8_lossy(&out.stderr)))?;
    Ok((out.status.code().unwrap_or(-1), v))
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn an_error_record_is_redriven_and_billed_once_then_refused() -> Result<()> {
    let _one = STACK.lock().await;
    let st = Stack::new().await?;
    let runner = runner(&[("AWSMP_DEPLOYMENT_MODE", "direct-submit")]).await?;
    let g = group(170, "api_calls", "2063-05-10T10");
    let at = utc(2063, 5, 10, 12, 0, 0);
    runner.set_time(at).await?;
    // GIVEN a record AWS refused before the catalog was fixed
    st.put_direct_record(&g, 12).await?;
    st.ddb
        .update_item()
        .table_name(&st.aggregated_table)
        .key(a::LICENSE_ARN, Av::S(g.license_arn.clone()))
        .key(a::AGGREGATED_SORT_KEY, Av::S(g.aggregated_sort_key()))
        .update_expression("SET #s = :e, #r = :x REMOVE #p")
        .expression_attribute_names("#s", a::METERING_STATUS)
        .expression_attribute_names("#r", a::METERING_STATUS_REASON)
        .expression_attribute_names("#p", a::METERING_PENDING)
        .expression_attribute_values(":e", Av::S("Error".into()))
        .expression_attribute_values(":x", Av::S("InvalidUsageDimensionException".into()))
        .send()
        .await?;
    // WHEN it is re-driven inside the window and the submitter runs
    let (code, v) = redrive(&st, at, &g)?;
    ensure!(
        code == 0 && v["plan"]["kind"] == "record" && v["changed"] == 1,
        "{v}"
    );
    let rec = st.record(&g).await?;
    ensure!(rec.pending && rec.status.is_none(), "{rec:?}");
    runner.tick(at + Duration::minutes(5)).await?;
    // THEN it is billed, once
    let rec = st.record(&g).await?;
    ensure!(rec.status == Some(AggregatedStatus::Success), "{rec:?}");
    ensure!(st.ledger(&g.license_arn).await?.billed(&g)?["quantity"] == 12);
    // AND a second re-drive is refused: AWS accepted it
    let (code, v) = redrive(&st, at + Duration::minutes(30), &g)?;
    ensure!(
        code == 4 && v["refusal"]["refusal"] == "acceptedByAws",
        "{v}"
    );
    // AND outside the window nothing is re-driven
    let (code, v) = redrive(&st, at + Duration::hours(30), &g)?;
    ensure!(
        code == 4 && v["refusal"]["refusal"] == "outsideWindow",
        "{v}"
    );
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn rejected_rows_fixed_by_the_writer_are_redriven_and_billed() -> Result<()> {
    let _one = STACK.lock().await;
    let st = Stack::new().await?;
    let runner = runner(&[]).await?;
    let g = group(171, "api_calls", "2063-05-10T10");
    let at = utc(2063, 5, 10, 12, 0, 0);
    // GIVEN rows a buggy writer gave a non-numeric quantity, rejected by the pipeline
    let mut bad = row(&g, 1, 5);
    bad.insert(a::QUANTITY.into(), AttrValue::s("five"));
    let good = row(&g, 2, 7);
    st.put_rows(&[bad.clone(), good.clone()]).await?;
    runner.tick(at).await?;
    st.assert_raw(&good, "RejectedClientSide", "NonNumericQuantity")
        .await?;
    ensure!(
        st.aggregated(&g).await?.is_none(),
        "a rejected group-hour has no record"
    );
    // WHEN the writer fixes the row and the group-hour is re-driven
    st.ddb
        .update_item()
        .table_name(&st.usage_table)
        .key(a::LICENSE_ARN, Av::S(g.license_arn.clone()))
        .key(a::USAGE_SORT_KEY, Av::S(sort_key(&bad)))
        .update_expression("SET #q = :q")
        .expression_attribute_names("#q", a::QUANTITY)
        .expression_attribute_values(":q", Av::N("5".into()))
        .send()
        .await?;
    let (code, v) = redrive(&st, at + Duration::minutes(1), &g)?;
    ensure!(
        code == 0 && v["plan"]["kind"] == "rows" && v["changed"] == 2,
        "{v}"
    );
    st.assert_pending(&good).await?;
    runner.tick(at + Duration::minutes(5)).await?;
    runner.tick(at + Duration::minutes(10)).await?;
    // THEN the hour is aggregated and billed at the fixed sum
    let rec = st.record(&g).await?;
    ensure!(
        rec.status == Some(AggregatedStatus::Success) && rec.quantity == 12,
        "{rec:?}"
    );
    ensure!(st.ledger(&g.license_arn).await?.billed(&g)?["quantity"] == 12);
    Ok(())
}
