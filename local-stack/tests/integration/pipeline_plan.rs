//! The reference's hands-on test plan (T3–T11, late rows, lost cleanup, D3–D5, dry-run),
//! automated against the local stack: rows are written as a seller writes them, the local
//! runner plays EventBridge and the SQS event source mappings, and every test asserts what an
//! operator would look at — the raw rows' `meteringStatus` / `meteringStatusReason`, the
//! aggregated record's status and `meteringRecordId`, the EMF metric lines, and the
//! Marketplace simulator's ledger.
//!
//! Isolation: one runner at a time ([`common::STACK`]), a demo license range and a year of its
//! own per test, assertions only on the test's own rows and ledger lines.

use crate::common;

use anyhow::{Result, ensure};
use awsmp_contract::reasons::LATE_USAGE;
use awsmp_contract::status::AggregatedStatus;
use awsmp_local_stack::runner::TickReport;
use awsmp_pipeline::handlers::discoverer::DiscovererInput;
use common::*;
use serde_json::Value;
use std::collections::BTreeMap;

fn ok(rep: &TickReport) -> Result<()> {
    ensure!(
        rep.submitter_error.is_none(),
        "submitter failed: {:?}",
        rep.submitter_error
    );
    Ok(())
}

/// Allocations of a ledger line as tag set → quantity (order-free).
fn ledger_allocations(line: &Value) -> BTreeMap<Vec<(String, String)>, u64> {
    let mut out = BTreeMap::new();
    for a in line["usageAllocations"].as_array().into_iter().flatten() {
        let mut tags: Vec<(String, String)> = a["Tags"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| {
                (
                    t["Key"].as_str().unwrap_or_default().to_owned(),
                    t["Value"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        tags.sort();
        *out.entry(tags).or_default() += a["AllocatedUsageQuantity"].as_u64().unwrap_or(0);
    }
    out
}

fn tags(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    v.sort();
    v
}

/// Assert the group was billed once with `quantity` and its record is `Success` with the
/// ledger's MeteringRecordId. Returns the ledger line.
async fn assert_billed(
    st: &Stack,
    g: &awsmp_contract::keys::GroupKey,
    quantity: u64,
) -> Result<Value> {
    let ledger = st.ledger(&g.license_arn).await?;
    let line = ledger.billed(g)?.clone();
    ensure!(
        line["quantity"] == quantity,
        "{g}: ledger quantity {} != {quantity}",
        line["quantity"]
    );
    let rec = st.record(g).await?;
    ensure!(
        rec.status == Some(AggregatedStatus::Success) && !rec.pending,
        "{g}: record {:?} pending={}",
        rec.status,
        rec.pending
    );
    ensure!(
        rec.quantity == quantity,
        "{g}: record quantity {}",
        rec.quantity
    );
    ensure!(
        rec.metering_record_id.as_deref() == line["meteringRecordId"].as_str(),
        "{g}: record id {:?} != ledger id {}",
        rec.metering_record_id,
        line["meteringRecordId"]
    );
    Ok(line)
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn t3_conforming_rows_are_aggregated_billed_and_stamped() -> Result<()> {
    let _one = STACK.lock().await;
    let st = Stack::new().await?;
    let runner = runner(&[]).await?;

    // GIVEN six seconds of one group, and VMT-allocated rows of another group, in hour 10
    let calls = group(10, "api_calls", "2031-03-10T10");
    let storage = group(11, "storage_gb_hours", "2031-03-10T10");
    let call_rows: Vec<_> = (0..6u32)
        .map(|i| row(&calls, i * 7, u64::from(i) + 1))
        .collect();
    let storage_rows = vec![
        row_alloc(
            &storage,
            5,
            &[alloc(4, &[("team", "a")]), alloc(6, &[("team", "b")])],
        ),
        row_alloc(&storage, 65, &[alloc(5, &[("team", "a")])]),
        row_alloc(
            &storage,
            3599,
            &[alloc(2, &[("team", "b"), ("env", "prod")])],
        ),
    ];
    st.put_rows(&call_rows).await?;
    st.put_rows(&storage_rows).await?;

    // WHEN the schedules run two hours later
    let rep = runner.tick(utc(2031, 3, 10, 12, 0, 0)).await?;
    ok(&rep)?;

    // THEN every raw row is Aggregated with the reference's exact reason text
    for r in &call_rows {
        st.assert_raw(
            r,
            "Aggregated",
            "Aggregated total quantity 21 from 6 raw usage records",
        )
        .await?;
    }
    for r in &storage_rows {
        st.assert_raw(
            r,
            "Aggregated",
            "Aggregated total quantity 17 from 3 raw usage records",
        )
        .await?;
    }
    // ... each group was billed once, with the sum, and its record carries the ledger's id
    assert_billed(&st, &calls, 21).await?;
    let line = assert_billed(&st, &storage, 17).await?;
    assert_eq!(
        ledger_allocations(&line),
        BTreeMap::from([
            (tags(&[("team", "a")]), 9),
            (tags(&[("team", "b")]), 6),
            (tags(&[("team", "b"), ("env", "prod")]), 2),
        ]),
        "merged allocations as billed"
    );
    assert!(line_has_no_duplicates(&st, &calls.license_arn).await?);
    // ... and nothing went wrong on the way
    for m in [
        "UsageRecordRejected",
        "BatchMeterUsageException",
        "UsageRecordUnprocessed",
        "DuplicateRecord",
    ] {
        assert!(points(&runner, m).is_empty(), "unexpected {m} metric");
    }
    Ok(())
}

async fn line_has_no_duplicates(st: &Stack, license: &str) -> Result<bool> {
    Ok(st.ledger(license).await?.duplicates.is_empty())
}

/// Write `good` and `bad` rows into one group, tick, and assert the whole group was rejected
/// with `reason`: every row `RejectedClientSide`, no aggregated record, nothing billed.
async fn assert_group_rejected(
    st: &Stack,
    rows: &[awsmp_contract::row::RawUsageRow],
    g: &awsmp_contract::keys::GroupKey,
    reason: &str,
) -> Result<()> {
    for r in rows {
        st.assert_raw(r, "RejectedClientSide", reason).await?;
    }
    ensure!(
        st.aggregated(g).await?.is_none(),
        "{g}: a rejected group has an aggregated record"
    );
    ensure!(
        st.ledger(&g.license_arn).await?.record(g).is_none(),
        "{g}: a rejected group was billed"
    );
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn t4_each_quantity_rejection_rejects_its_whole_group() -> Result<()> {
    let _one = STACK.lock().await;
    let st = Stack::new().await?;
    let runner = runner(&[]).await?;
    let cases = [
        ("2032-03-10T10", "NegativeQuantity", AttrCase::N("-5")),
        ("2032-03-10T11", "NonIntegerQuantity", AttrCase::N("2.5")),
        ("2032-03-10T12", "NonNumericQuantity", AttrCase::S("ten")),
    ];
    let mut all = Vec::new();
    for (h, reason, bad) in &cases {
        // GIVEN a conforming row and one with a bad quantity in the same group
        let g = group(12, "api_calls", h);
        let mut bad_row = row(&g, 20, 1);
        bad_row.insert("quantity".into(), bad.value());
        let rows = vec![row(&g, 10, 4), bad_row];
        st.put_rows(&rows).await?;
        all.push((g, rows, *reason));
    }
    // WHEN the hours are processed
    ok(&runner.tick(utc(2032, 3, 10, 14, 0, 0)).await?)?;
    // THEN each group is rejected whole, with its reason and a metric carrying it
    for (g, rows, reason) in &all {
        assert_group_rejected(&st, rows, g, reason).await?;
        assert!(
            has_point(&runner, "UsageRecordRejected", "Reason", reason),
            "no UsageRecordRejected metric with Reason={reason}"
        );
    }
    assert_eq!(points(&runner, "UsageRecordRejected").len(), 3);
    Ok(())
}

/// A bad attribute value for a case table.
enum AttrCase {
    N(&'static str),
    S(&'static str),
}

impl AttrCase {
    fn value(&self) -> awsmp_contract::row::AttrValue {
        use awsmp_contract::row::AttrValue;
        match self {
            AttrCase::N(n) => AttrValue::N((*n).into()),
            AttrCase::S(s) => AttrValue::S((*s).into()),
        }
    }
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn t5_each_sort_key_rejection_rejects_its_whole_group() -> Result<()> {
    use awsmp_contract::row::AttrValue;
    let _one = STACK.lock().await;
    let st = Stack::new().await?;
    let runner = runner(&[]).await?;
    let sk = "customerAWSAccountId_dimension_timestamp";
    let acct = awsmp_local_stack::local::demo_account(13);
    let mut cases = Vec::new();

    // MalformedSortKey: fewer than three #-segments (underscores instead), beside a good row
    let g = group(13, "api_calls", "2033-03-10T10");
    let mut bad = row(&g, 2, 1);
    bad.insert(
        sk.into(),
        AttrValue::s(format!("{acct}_api_calls_{}", shift("2033-03-10T10:00:02"))),
    );
    cases.push((g.clone(), vec![row(&g, 1, 3), bad], "MalformedSortKey"));

    // SortKeyMismatch: the dimension attribute differs from the sort-key segment
    let g = group(13, "storage_gb_hours", "2033-03-10T10");
    let mut bad = row(&g, 2, 1);
    bad.insert("dimension".into(), AttrValue::s("compute_minutes"));
    cases.push((g.clone(), vec![row(&g, 1, 3), bad], "SortKeyMismatch"));

    // SortKeyMismatch alone in its group: the account attribute differs from the segment
    let g = group(13, "api_calls", "2033-03-10T11");
    let mut bad = row(&g, 2, 1);
    bad.insert("customerAWSAccountId".into(), AttrValue::s("999999999999"));
    cases.push((g.clone(), vec![bad], "SortKeyMismatch"));

    // MalformedTimestamp: milliseconds (`.000`)
    let g = group(13, "compute_minutes", "2033-03-10T10");
    let mut bad = row(&g, 2, 1);
    bad.insert(
        sk.into(),
        AttrValue::s(format!(
            "{acct}#compute_minutes#{}",
            shift("2033-03-10T10:00:02.000")
        )),
    );
    cases.push((g.clone(), vec![row(&g, 1, 3), bad], "MalformedTimestamp"));

    // MalformedTimestamp: hour-truncated
    let g = group(13, "storage_gb_hours", "2033-03-10T11");
    let mut bad = row(&g, 2, 1);
    bad.insert(
        sk.into(),
        AttrValue::s(format!(
            "{acct}#storage_gb_hours#{}",
            shift("2033-03-10T11")
        )),
    );
    cases.push((g.clone(), vec![row(&g, 1, 3), bad], "MalformedTimestamp"));

    for (_, rows, _) in &cases {
        st.put_rows(rows).await?;
    }
    ok(&runner.tick(utc(2033, 3, 10, 13, 0, 0)).await?)?;
    for (g, rows, reason) in &cases {
        assert_group_rejected(&st, rows, g, reason).await?;
        assert!(
            has_point(&runner, "UsageRecordRejected", "Reason", reason),
            "no UsageRecordRejected metric with Reason={reason}"
        );
    }
    assert_eq!(points(&runner, "UsageRecordRejected").len(), cases.len());
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn t6_dimension_and_allocation_rejections_reject_their_whole_group() -> Result<()> {
    let _one = STACK.lock().await;
    let st = Stack::new().await?;
    let runner = runner(&[]).await?;
    let mut cases = Vec::new();

    // MissingDimension: the dimension attribute is absent (the sort key still names one)
    let g = group(14, "api_calls", "2034-03-10T10");
    let mut bad = row(&g, 2, 1);
    bad.remove("dimension");
    cases.push((g.clone(), vec![row(&g, 1, 3), bad], "MissingDimension"));

    // MixedAllocatedAndUnallocated: one non-zero row allocated, one not
    let g = group(14, "storage_gb_hours", "2034-03-10T10");
    cases.push((
        g.clone(),
        vec![
            row_alloc(&g, 1, &[alloc(5, &[("team", "a")])]),
            row(&g, 2, 3),
        ],
        "MixedAllocatedAndUnallocated",
    ));

    // TooManyTags: six tags on one allocation (the API allows five)
    let g = group(14, "compute_minutes", "2034-03-10T10");
    let six: Vec<(String, String)> = (0..6).map(|i| (format!("k{i}"), format!("v{i}"))).collect();
    let six: Vec<(&str, &str)> = six.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    cases.push((
        g.clone(),
        vec![
            row_alloc(&g, 1, &[alloc(2, &[("team", "a")])]),
            row_alloc(&g, 2, &[alloc(5, &six)]),
        ],
        "TooManyTags",
    ));

    // AllocationSumMismatch: a row of 10 whose allocations sum to 7
    let g = group(14, "api_calls", "2034-03-10T11");
    let mut bad = row(&g, 2, 10);
    set_allocations(&mut bad, &[alloc(7, &[("team", "a")])]);
    cases.push((
        g.clone(),
        vec![row_alloc(&g, 1, &[alloc(3, &[("team", "b")])]), bad],
        "AllocationSumMismatch",
    ));

    for (_, rows, _) in &cases {
        st.put_rows(rows).await?;
    }
    ok(&runner.tick(utc(2034, 3, 10, 13, 0, 0)).await?)?;
    for (g, rows, reason) in &cases {
        assert_group_rejected(&st, rows, g, reason).await?;
        assert!(
            has_point(&runner, "UsageRecordRejected", "Reason", reason),
            "no UsageRecordRejected metric with Reason={reason}"
        );
    }
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn t7_server_side_invalid_dimension_is_isolated_from_its_batch() -> Result<()> {
    let _one = STACK.lock().await;
    let st = Stack::new().await?;
    let runner = runner(&[]).await?;
    // GIVEN a group whose dimension is not in the product's catalog, co-batched with good ones
    let good_a = group(15, "api_calls", "2035-03-10T10");
    let good_b = group(16, "storage_gb_hours", "2035-03-10T10");
    let bad = group(15, "no_such_dimension", "2035-03-10T10");
    let rows = vec![
        row(&good_a, 1, 7),
        row(&good_b, 1, 4),
        row(&bad, 1, 3),
        row(&bad, 2, 2),
    ];
    st.put_rows(&rows).await?;
    // WHEN aggregated and submitted together
    let rep = runner.tick(utc(2035, 3, 10, 12, 0, 0)).await?;
    ok(&rep)?;
    // THEN the bad record alone ends Error with the exception, and the others are billed
    let rec = st.record(&bad).await?;
    assert_eq!(rec.status, Some(AggregatedStatus::Error));
    assert_eq!(
        rec.status_reason.as_deref(),
        Some("InvalidUsageDimensionException")
    );
    assert!(!rec.pending && rec.metering_record_id.is_none());
    assert!(has_point(
        &runner,
        "BatchMeterUsageException",
        "Exception",
        "InvalidUsageDimensionException"
    ));
    assert_billed(&st, &good_a, 7).await?;
    assert_billed(&st, &good_b, 4).await?;
    assert!(st.ledger(&bad.license_arn).await?.record(&bad).is_none());
    // The raw rows of the bad group were aggregated (dimension validity is server-side).
    st.assert_raw(
        &rows[2],
        "Aggregated",
        "Aggregated total quantity 5 from 2 raw usage records",
    )
    .await?;
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn t8_rerun_and_duplicate_delivery_bill_once() -> Result<()> {
    let _one = STACK.lock().await;
    let st = Stack::new().await?;
    let runner = runner(&[]).await?;
    let g = group(17, "api_calls", "2036-03-10T10");
    let rows: Vec<_> = (0..5).map(|s| row(&g, s * 100, 3)).collect();
    st.put_rows(&rows).await?;
    // GIVEN the group's work message delivered twice before the schedule runs
    runner.set_time(utc(2036, 3, 10, 12, 0, 0)).await?;
    st.send("AWSMP_WORK_QUEUE_URL", &g.to_work_message())
        .await?;
    st.send("AWSMP_WORK_QUEUE_URL", &g.to_work_message())
        .await?;
    runner.drain().await?;
    // WHEN every schedule runs, twice at the same instant and again later, with a further
    // redelivery after submission
    ok(&runner.tick(utc(2036, 3, 10, 12, 0, 0)).await?)?;
    let first = assert_billed(&st, &g, 15).await?;
    ok(&runner.tick(utc(2036, 3, 10, 12, 0, 0)).await?)?;
    st.send("AWSMP_WORK_QUEUE_URL", &g.to_work_message())
        .await?;
    ok(&runner.tick(utc(2036, 3, 10, 13, 30, 0)).await?)?;
    // THEN it is billed once, the ledger line is unchanged, and no DuplicateRecord anywhere
    let after = assert_billed(&st, &g, 15).await?;
    assert_eq!(first, after, "the ledger line changed");
    assert!(st.ledger(&g.license_arn).await?.duplicates.is_empty());
    assert!(points(&runner, "DuplicateRecord").is_empty());
    assert!(points(&runner, "DuplicateRecordQuantityMismatch").is_empty());
    for r in &rows {
        st.assert_raw(
            r,
            "Aggregated",
            "Aggregated total quantity 15 from 5 raw usage records",
        )
        .await?;
    }
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn t9_rows_pending_past_the_window_age_out() -> Result<()> {
    let _one = STACK.lock().await;
    let st = Stack::new().await?;
    let runner = runner(&[]).await?;
    // GIVEN rows nobody aggregated within the window
    let g = group(18, "api_calls", "2037-03-10T10");
    let rows = vec![row(&g, 1, 6), row(&g, 2, 4)];
    st.put_rows(&rows).await?;
    // WHEN the first schedule runs 25 hours later
    let rep = runner.tick(utc(2037, 3, 11, 11, 30, 0)).await?;
    ok(&rep)?;
    // THEN the rows are terminally expired with a metric, and nothing was billed
    for r in &rows {
        st.assert_raw(r, "AggregationExpired", "PendingPastBillableWindow")
            .await?;
    }
    assert!(rep.discoverer.rows_expired >= 2);
    assert!(runner.metrics.total("UsageAggregationExpired") >= 2.0);
    assert!(st.aggregated(&g).await?.is_none());
    assert!(st.ledger(&g.license_arn).await?.records.is_empty());
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn t9_a_row_behind_days_of_empty_hours_still_ages_out() -> Result<()> {
    let _one = STACK.lock().await;
    let st = Stack::new().await?;
    let runner = runner(&[]).await?;
    // GIVEN one pending row five days old, and nothing at all in the 119 hours after it
    let g = group(19, "compute_minutes", "2038-03-05T10");
    let r = row(&g, 42, 8);
    st.put_rows(std::slice::from_ref(&r)).await?;
    // WHEN the sweep runs
    let rep = runner.tick(utc(2038, 3, 10, 10, 30, 0)).await?;
    ok(&rep)?;
    // THEN the sweep found it (no blind spot after a run of empty hours)
    st.assert_raw(&r, "AggregationExpired", "PendingPastBillableWindow")
        .await?;
    assert!(runner.metrics.total("UsageAggregationExpired") >= 1.0);
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn t10_aggregated_records_pending_past_the_window_expire_unbilled() -> Result<()> {
    let _one = STACK.lock().await;
    let st = Stack::new().await?;
    let runner = runner(&[]).await?;
    // GIVEN a group aggregated on time whose submission never happened
    let g = group(20, "api_calls", "2039-03-10T10");
    let rows = vec![row(&g, 1, 6), row(&g, 2, 5)];
    st.put_rows(&rows).await?;
    runner.set_time(utc(2039, 3, 10, 12, 0, 0)).await?;
    runner
        .invoke(
            "discoverer",
            serde_json::to_value(DiscovererInput::Meter { hour_offset: 2 })?,
        )
        .await?;
    runner.drain().await?;
    let rec = st.record(&g).await?;
    assert!(rec.pending && rec.status.is_none() && rec.quantity == 11);
    // WHEN the schedules next run after the window closed
    let rep = runner.tick(utc(2039, 3, 11, 11, 0, 0)).await?;
    ok(&rep)?;
    // THEN the record is terminally expired with a metric, and was never billed
    let rec = st.record(&g).await?;
    assert_eq!(rec.status, Some(AggregatedStatus::SubmissionExpired));
    assert_eq!(
        rec.status_reason.as_deref(),
        Some("PendingPastBillableWindow")
    );
    assert!(!rec.pending);
    assert_eq!(runner.metrics.total("UsageSubmissionExpired"), 1.0);
    assert!(st.ledger(&g.license_arn).await?.records.is_empty());
    for r in &rows {
        st.assert_raw(
            r,
            "Aggregated",
            "Aggregated total quantity 11 from 2 raw usage records",
        )
        .await?;
    }
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn t11_previous_month_is_metered_in_the_grace_and_expires_after_it() -> Result<()> {
    let _one = STACK.lock().await;
    let st = Stack::new().await?;
    // A six-hour lock, so the previous month's last hours are still locked at 02:30.
    let runner = runner(&[("AWSMP_METERING_LOCK_HOURS", "6")]).await?;
    // GIVEN previous-month rows: one group inside the window (22:00 on the 31st), one already
    // older than the window (01:00 on the 31st)
    let recent = group(21, "api_calls", "2040-01-31T22");
    let old = group(21, "storage_gb_hours", "2040-01-31T01");
    let recent_rows = vec![row(&recent, 10, 4), row(&recent, 20, 6)];
    let old_rows = vec![row(&old, 10, 9)];
    st.put_rows(&recent_rows).await?;
    st.put_rows(&old_rows).await?;

    // WHEN the schedules run at 02:30 on the 1st: the configured lock still holds
    ok(&runner.tick(utc(2040, 2, 1, 2, 30, 0)).await?)?;
    // THEN nothing is aggregated, and nothing of the previous month is aged out
    for r in recent_rows.iter().chain(&old_rows) {
        st.assert_pending(r).await?;
    }
    assert!(st.aggregated(&recent).await?.is_none());

    // WHEN they run at 03:30: lock 0 for the previous month
    ok(&runner.tick(utc(2040, 2, 1, 3, 30, 0)).await?)?;
    // THEN the recent group is aggregated and billed; the old one still waits (no age-out
    // before 06:00)
    assert_billed(&st, &recent, 10).await?;
    for r in &recent_rows {
        st.assert_raw(
            r,
            "Aggregated",
            "Aggregated total quantity 10 from 2 raw usage records",
        )
        .await?;
    }
    ok(&runner.tick(utc(2040, 2, 1, 5, 30, 0)).await?)?;
    st.assert_pending(&old_rows[0]).await?;

    // GIVEN, after the 05:30 run, a previous-month group aggregated but not submitted, and
    // fresh previous-month rows nobody aggregated
    let late_agg = group(21, "compute_minutes", "2040-01-31T21");
    let late_rows = vec![row(&late_agg, 5, 2)];
    let unaggregated = group(21, "api_calls", "2040-01-31T23");
    let unaggregated_rows = vec![row(&unaggregated, 5, 3)];
    st.put_rows(&late_rows).await?;
    st.put_rows(&unaggregated_rows).await?;
    runner.set_time(utc(2040, 2, 1, 5, 50, 0)).await?;
    runner
        .invoke(
            "discoverer",
            serde_json::to_value(DiscovererInput::Meter { hour_offset: 8 })?,
        )
        .await?;
    runner.drain().await?;
    assert!(st.record(&late_agg).await?.pending);

    // WHEN the schedules run after 06:00, the grace closed
    ok(&runner.tick(utc(2040, 2, 1, 6, 30, 0)).await?)?;
    // THEN previous-month raw rows age out, the aggregated record expires, nothing more billed
    st.assert_raw(
        &old_rows[0],
        "AggregationExpired",
        "PendingPastBillableWindow",
    )
    .await?;
    st.assert_raw(
        &unaggregated_rows[0],
        "AggregationExpired",
        "PendingPastBillableWindow",
    )
    .await?;
    let rec = st.record(&late_agg).await?;
    assert_eq!(rec.status, Some(AggregatedStatus::SubmissionExpired));
    let ledger = st.ledger(&recent.license_arn).await?;
    assert_eq!(
        ledger.records.len(),
        1,
        "only the grace-period group billed"
    );
    assert!(runner.metrics.total("UsageAggregationExpired") >= 2.0);
    assert_eq!(runner.metrics.total("UsageSubmissionExpired"), 1.0);
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn late_row_into_an_aggregated_hour_is_terminal_late_usage() -> Result<()> {
    let _one = STACK.lock().await;
    let st = Stack::new().await?;
    let runner = runner(&[]).await?;
    let g = group(22, "api_calls", "2041-03-10T10");
    let rows = vec![row(&g, 1, 2), row(&g, 2, 3), row(&g, 3, 4)];
    st.put_rows(&rows).await?;
    ok(&runner.tick(utc(2041, 3, 10, 12, 0, 0)).await?)?;
    let billed = assert_billed(&st, &g, 9).await?;
    // GIVEN a row written into the already aggregated group-hour
    let late = row(&g, 1800, 11);
    st.put_rows(std::slice::from_ref(&late)).await?;
    // WHEN the hour is discovered again
    ok(&runner.tick(utc(2041, 3, 10, 13, 0, 0)).await?)?;
    // THEN the late row is terminal late usage with its quantity on the metric, not billed
    st.assert_raw(&late, "RejectedClientSide", LATE_USAGE)
        .await?;
    let late_points = points(&runner, "LateUsage");
    assert_eq!(late_points.len(), 1);
    assert_eq!(late_points[0]["LateUsage"], 11.0);
    assert_eq!(assert_billed(&st, &g, 9).await?, billed);
    assert!(st.ledger(&g.license_arn).await?.duplicates.is_empty());
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn lost_cleanup_is_finished_on_the_next_visit() -> Result<()> {
    let _one = STACK.lock().await;
    let st = Stack::new().await?;
    let mut runner = runner(&[]).await?;
    let g = group(23, "storage_gb_hours", "2042-03-10T10");
    let rows: Vec<_> = (0..4).map(|s| row(&g, s, 5)).collect();
    st.put_rows(&rows).await?;
    // GIVEN the cleanup message is lost after the commit point
    let real = runner.svc.cleanup_queue.clone();
    let hole = BlackHoleQueue::new();
    runner.svc.cleanup_queue = Some(hole.clone());
    ok(&runner.tick(utc(2042, 3, 10, 12, 0, 0)).await?)?;
    assert_eq!(hole.swallowed.lock().unwrap().len(), 1);
    assert_billed(&st, &g, 20).await?;
    for r in &rows {
        st.assert_pending(r).await?;
    }
    // WHEN the hour is discovered again
    runner.svc.cleanup_queue = real;
    ok(&runner.tick(utc(2042, 3, 10, 13, 0, 0)).await?)?;
    // THEN the rows are finished as Aggregated with the committed sum, billed once
    for r in &rows {
        st.assert_raw(
            r,
            "Aggregated",
            "Aggregated total quantity 20 from 4 raw usage records",
        )
        .await?;
    }
    assert_billed(&st, &g, 20).await?;
    assert!(points(&runner, "LateUsage").is_empty());
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn d3_d4_direct_submit_records_are_billed_once() -> Result<()> {
    let _one = STACK.lock().await;
    let st = Stack::new().await?;
    let runner = runner(&[("AWSMP_DEPLOYMENT_MODE", "direct-submit")]).await?;
    // GIVEN a seller writing a finalized hourly record straight into aggregated-usage
    let g = group(24, "api_calls", "2043-03-10T10");
    st.put_direct_record(&g, 42).await?;
    // WHEN the submit schedule runs
    let rep = runner.tick(utc(2043, 3, 10, 12, 0, 0)).await?;
    ok(&rep)?;
    // THEN it is billed (and no raw-pipeline stage ran in this mode)
    assert_eq!(rep.discoverer.buckets, 0, "discoverer ran in direct-submit");
    let first = assert_billed(&st, &g, 42).await?;
    // GIVEN the seller writes the group again with another quantity
    st.put_direct_record(&g, 50).await?;
    ok(&runner.tick(utc(2043, 3, 10, 12, 30, 0)).await?)?;
    // THEN the second write is not billed: DuplicateRecord, the first quantity stands
    let rec = st.record(&g).await?;
    assert_eq!(rec.status, Some(AggregatedStatus::DuplicateRecord));
    assert_eq!(
        rec.metering_record_id.as_deref(),
        first["meteringRecordId"].as_str()
    );
    let ledger = st.ledger(&g.license_arn).await?;
    assert_eq!(ledger.billed(&g)?, &first);
    assert_eq!(ledger.duplicates.len(), 1);
    assert_eq!(ledger.duplicates[0]["attemptedQuantity"], 50);
    assert_eq!(points(&runner, "DuplicateRecord").len(), 1);
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn d5_direct_submit_record_past_the_window_expires() -> Result<()> {
    let _one = STACK.lock().await;
    let st = Stack::new().await?;
    let runner = runner(&[("AWSMP_DEPLOYMENT_MODE", "direct-submit")]).await?;
    let g = group(25, "compute_minutes", "2044-03-10T10");
    st.put_direct_record(&g, 7).await?;
    ok(&runner.tick(utc(2044, 3, 11, 12, 0, 0)).await?)?;
    let rec = st.record(&g).await?;
    assert_eq!(rec.status, Some(AggregatedStatus::SubmissionExpired));
    assert!(!rec.pending);
    assert_eq!(runner.metrics.total("UsageSubmissionExpired"), 1.0);
    assert!(st.ledger(&g.license_arn).await?.records.is_empty());
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn dry_run_never_calls_the_api() -> Result<()> {
    let _one = STACK.lock().await;
    let st = Stack::new().await?;
    let allowed = awsmp_local_stack::local::demo_account(26);
    let runner = runner(&[
        ("AWSMP_METERING_MODE", "dry-run"),
        ("AWSMP_DRY_RUN_ACCOUNTS", &allowed),
    ])
    .await?;
    let test_account = group(26, "api_calls", "2045-03-10T10");
    let real_buyer = group(27, "api_calls", "2045-03-10T10");
    st.put_rows(&[row(&test_account, 1, 5), row(&real_buyer, 1, 6)])
        .await?;
    let requests_before = st.counters().await?["requests"].clone();
    ok(&runner.tick(utc(2045, 3, 10, 12, 0, 0)).await?)?;
    // THEN the allowlisted account's record is DryRunSubmitted, a non-test account is refused,
    // and the simulator was never called
    let rec = st.record(&test_account).await?;
    assert_eq!(rec.status, Some(AggregatedStatus::DryRunSubmitted));
    assert!(!rec.pending);
    let rec = st.record(&real_buyer).await?;
    assert_eq!(rec.status, Some(AggregatedStatus::Error));
    assert_eq!(
        rec.status_reason.as_deref(),
        Some("DryRunAccountNotAllowlisted")
    );
    assert_eq!(st.counters().await?["requests"], requests_before);
    assert!(
        st.ledger(&test_account.license_arn)
            .await?
            .records
            .is_empty()
    );
    assert!(st.ledger(&real_buyer.license_arn).await?.records.is_empty());
    Ok(())
}
