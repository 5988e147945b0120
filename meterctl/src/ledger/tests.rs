use super::*;
use crate::sources::RowSummary;
use awsmp_contract::keys::HourBucket;
use awsmp_contract::status::RawStatus;
use awsmp_pipeline::domain::fold::Overflow;
use chrono::TimeZone;

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 18, 0, 0).unwrap()
}

fn group() -> GroupKey {
    GroupKey::new(
        "arn:aws:license-manager::123456789012:license:l-1",
        "210987654321",
        "api_calls",
        "2026-12-01T14".parse::<HourBucket>().unwrap(),
    )
}

fn rows(folded: u64) -> RowSummary {
    let mut r = RowSummary::default();
    r.add(folded, false, Some(RawStatus::Aggregated), "", 0);
    r
}

fn record(q: u64, status: Option<AggregatedStatus>, id: Option<&str>) -> AggregatedItem {
    let mut r = AggregatedItem::new(group(), q, None);
    r.row_count = 1;
    r.status = status;
    r.pending = status.is_none();
    r.metering_record_id = id.map(str::to_owned);
    if status.is_some() {
        r.attempted_quantity = Some(q);
        r.submission_attempted_at = Some(now() - Duration::hours(2));
    }
    r
}

fn billed(q: u64, id: &str) -> TrailRecord {
    TrailRecord {
        event_id: format!("ev-{id}"),
        event_time: now() - Duration::hours(2),
        group: group(),
        quantity: q,
        outcome: TrailOutcome::Success {
            metering_record_id: id.into(),
        },
    }
}

fn sources(
    rows: RowSummary,
    record: Option<AggregatedItem>,
    trail: Vec<TrailRecord>,
) -> HourSources {
    HourSources {
        group: group(),
        rows,
        consumer_rejected: BTreeMap::new(),
        record,
        trail,
    }
}

fn reasons(l: &LedgerLine) -> Vec<(&str, u64, bool)> {
    l.differences
        .iter()
        .map(|d| (d.reason.as_str(), d.units, d.explained))
        .collect()
}

#[test]
fn a_billed_hour_has_no_differences_and_a_clean_exit() {
    let s = sources(
        rows(40),
        Some(record(40, Some(AggregatedStatus::Success), Some("m-1"))),
        vec![billed(40, "m-1"), billed(40, "m-1")],
    );
    let ledger = Ledger::build(&[s], now());
    let l = &ledger.lines[0];
    assert_eq!(
        (l.intended, l.aggregated, l.submitted, l.accepted),
        (40, 40, 40, 40)
    );
    assert!(l.differences.is_empty(), "{:?}", l.differences);
    assert_eq!(l.metering_record_id.as_deref(), Some("m-1"));
    assert_eq!(ledger.exit_code(), EXIT_CLEAN);
}

#[test]
fn every_aggregation_reason_is_explained_with_its_units() {
    let mut r = RowSummary::default();
    r.add(30, false, Some(RawStatus::Aggregated), "", 5);
    r.add(
        7,
        false,
        Some(RawStatus::RejectedClientSide),
        "MalformedTimestamp",
        0,
    );
    r.add(
        3,
        false,
        Some(RawStatus::AggregationExpired),
        "PendingPastBillableWindow",
        0,
    );
    r.add(2, true, None, "", 0);
    let mut s = sources(
        r,
        Some(record(25, Some(AggregatedStatus::Success), Some("m"))),
        vec![billed(25, "m")],
    );
    s.consumer_rejected.insert("LateUsage".into(), 4);
    let l = line(&s, now());
    assert_eq!(l.intended, 30 + 7 + 3 + 2 + 4);
    assert_eq!(
        reasons(&l),
        vec![
            ("consumer:LateUsage", 4, true),
            ("LateUsage", 5, true),
            ("row:AggregationExpired:PendingPastBillableWindow", 3, true),
            ("row:RejectedClientSide:MalformedTimestamp", 7, true),
            ("PendingAggregation", 2, true),
        ]
    );
    assert!(!l.unexplained());
}

#[test]
fn overflow_above_the_api_maximum_is_explained() {
    let mut rec = record(2_147_483_647, Some(AggregatedStatus::Success), Some("m"));
    rec.overflow = Some(Overflow {
        quantity: 10,
        allocations: None,
    });
    let l = line(
        &sources(
            rows(2_147_483_657),
            Some(rec),
            vec![billed(2_147_483_647, "m")],
        ),
        now(),
    );
    assert_eq!(reasons(&l), vec![(QUANTITY_ABOVE_API_MAXIMUM, 10, true)]);
}

#[test]
fn a_record_changed_behind_the_pipelines_back_is_unexplained() {
    // The record was edited from 40 to 45 after the fold, and billed at 45.
    let l = line(
        &sources(
            rows(40),
            Some(record(45, Some(AggregatedStatus::Success), Some("m"))),
            vec![billed(45, "m")],
        ),
        now(),
    );
    assert_eq!(reasons(&l), vec![(UNEXPLAINED, 5, false)]);
    assert_eq!(
        Ledger::build(&[sources(rows(40), None, vec![])], now()).exit_code(),
        EXIT_UNEXPLAINED
    );
}

#[test]
fn acceptance_that_disagrees_with_the_record_is_unexplained() {
    let success = || Some(record(40, Some(AggregatedStatus::Success), Some("m")));
    // Billed at another quantity.
    let l = line(&sources(rows(40), success(), vec![billed(41, "m")]), now());
    assert_eq!(reasons(&l), vec![(UNEXPLAINED, 1, false)]);
    // Billed under another id.
    let l = line(
        &sources(rows(40), success(), vec![billed(40, "other")]),
        now(),
    );
    assert_eq!(reasons(&l), vec![(UNEXPLAINED, 40, false)]);
    // Not in the trail at all, long after the call.
    let l = line(&sources(rows(40), success(), vec![]), now());
    assert_eq!(reasons(&l), vec![(UNEXPLAINED, 40, false)]);
    // Billed twice under two ids.
    let l = line(
        &sources(rows(40), success(), vec![billed(40, "m"), billed(40, "n")]),
        now(),
    );
    assert_eq!(reasons(&l), vec![(UNEXPLAINED, 80, false)]);
    // Billed while the record says it was not.
    let l = line(
        &sources(
            rows(40),
            Some(record(40, Some(AggregatedStatus::Error), None)),
            vec![billed(40, "m")],
        ),
        now(),
    );
    assert!(l.unexplained());
    // Billed without any record.
    let l = line(
        &sources(RowSummary::default(), None, vec![billed(3, "m")]),
        now(),
    );
    assert_eq!(reasons(&l), vec![(UNEXPLAINED, 3, false)]);
}

#[test]
fn a_call_inside_the_delivery_lag_is_pending_cloudtrail_not_unexplained() {
    let mut rec = record(40, Some(AggregatedStatus::Success), Some("m"));
    rec.submission_attempted_at = Some(now() - Duration::minutes(3));
    let l = line(&sources(rows(40), Some(rec), vec![]), now());
    assert!(l.pending_cloudtrail);
    assert_eq!(reasons(&l), vec![("PendingCloudTrail", 40, true)]);
    assert_eq!(
        Ledger::build(&[sources(rows(40), l_record(), vec![])], now())
            .totals
            .pending_cloudtrail_lines,
        1
    );
}

fn l_record() -> Option<AggregatedItem> {
    let mut rec = record(40, Some(AggregatedStatus::Success), Some("m"));
    rec.submission_attempted_at = Some(now() - Duration::seconds(CLOUDTRAIL_DELIVERY_LAG_SECS - 1));
    Some(rec)
}

#[test]
fn a_duplicate_record_of_another_quantity_is_a_billing_risk() {
    let mut rec = record(40, Some(AggregatedStatus::DuplicateRecord), Some("theirs"));
    rec.attempted_quantity = Some(40);
    let mut dup = billed(40, "theirs");
    dup.outcome = TrailOutcome::DuplicateRecord {
        metering_record_id: Some("theirs".into()),
    };
    let l = line(&sources(rows(40), Some(rec), vec![dup]), now());
    assert!(l.billing_risk);
    assert!(!l.unexplained());
    assert_eq!(reasons(&l), vec![("DuplicateRecord", 40, true)]);
    let ledger = Ledger::build(&[sources(rows(40), Some(l_dup()), vec![])], now());
    assert_eq!(ledger.exit_code(), EXIT_BILLING_RISK);
}

fn l_dup() -> AggregatedItem {
    record(
        40,
        Some(AggregatedStatus::DuplicateRecordQuantityMismatch),
        None,
    )
}

#[test]
fn unbilled_terminal_statuses_are_explained() {
    for (status, reason) in [
        (AggregatedStatus::SubmissionExpired, "SubmissionExpired"),
        (AggregatedStatus::DryRunSubmitted, "DryRunSubmitted"),
    ] {
        let mut rec = record(40, Some(status), None);
        rec.attempted_quantity = None;
        let l = line(&sources(rows(40), Some(rec), vec![]), now());
        assert_eq!(reasons(&l), vec![(reason, 40, true)], "{status}");
        assert_eq!(l.submitted, 0);
    }
    let mut rec = record(40, Some(AggregatedStatus::Error), None);
    rec.attempted_quantity = None;
    rec.status_reason = Some("InvalidUsageDimensionException".into());
    let l = line(&sources(rows(40), Some(rec), vec![]), now());
    assert_eq!(
        reasons(&l),
        vec![("Error:InvalidUsageDimensionException", 40, true)]
    );
    let l = line(
        &sources(
            rows(40),
            Some(record(
                40,
                Some(AggregatedStatus::CustomerNotSubscribed),
                None,
            )),
            vec![],
        ),
        now(),
    );
    assert_eq!(reasons(&l), vec![("CustomerNotSubscribed", 40, true)]);
    assert_eq!(l.accepted, 0);
}

#[test]
fn pending_and_in_flight_records_are_explained() {
    let l = line(
        &sources(rows(40), Some(record(40, None, None)), vec![]),
        now(),
    );
    assert_eq!(reasons(&l), vec![("PendingSubmission", 40, true)]);
    let mut rec = record(40, None, None);
    rec.attempted_quantity = Some(40);
    let l = line(&sources(rows(40), Some(rec), vec![billed(40, "m")]), now());
    assert_eq!(reasons(&l), vec![("InFlight", 0, true)]);
    assert!(!l.unexplained());
}

#[test]
fn needs_reconciliation_is_settled_by_the_trail() {
    let rec = || {
        Some(record(
            40,
            Some(AggregatedStatus::NeedsReconciliation),
            None,
        ))
    };
    let l = line(&sources(rows(40), rec(), vec![]), now());
    assert_eq!(
        reasons(&l),
        vec![("NeedsReconciliation:NotBilled", 40, true)]
    );
    let l = line(&sources(rows(40), rec(), vec![billed(40, "m")]), now());
    assert_eq!(reasons(&l), vec![("NeedsReconciliation:Billed", 0, true)]);
    assert_eq!(l.accepted, 40);
}

#[test]
fn a_direct_submit_record_is_its_own_intent() {
    let mut rec = record(12, Some(AggregatedStatus::Success), Some("m"));
    rec.row_count = 0;
    let l = line(
        &sources(RowSummary::default(), Some(rec), vec![billed(12, "m")]),
        now(),
    );
    assert_eq!((l.intended, l.accepted), (12, 12));
    assert!(l.differences.is_empty());
}

#[test]
fn totals_sum_the_lines() {
    let a = sources(
        rows(40),
        Some(record(40, Some(AggregatedStatus::Success), Some("m"))),
        vec![billed(40, "m")],
    );
    let mut b = sources(rows(5), Some(record(5, None, None)), vec![]);
    b.group.dimension = "other".into();
    let t = Ledger::build(&[a, b], now()).totals;
    assert_eq!(
        (t.lines, t.intended, t.aggregated, t.submitted, t.accepted),
        (2, 45, 45, 40, 40)
    );
    assert_eq!(t.by_reason.get("PendingSubmission"), Some(&5));
    assert_eq!(t.unexplained_lines, 0);
}
