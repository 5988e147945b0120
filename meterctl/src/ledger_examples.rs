//! From CloudTrail events of the documented shape to ledger lines: the memory twin of the
//! trail serves the fixtures, and the ledger matches them to aggregated records by key and
//! MeteringRecordId (docs/meterctl.md).

use crate::cloudtrail::MemoryMeteringTrail;
use crate::ledger::{EXIT_BILLING_RISK, EXIT_CLEAN, EXIT_UNEXPLAINED, Ledger};
use crate::render::ledger_table;
use crate::sources::{HourSources, trail_by_group};
use crate::trail::{MeteringTrail, TrailWindow};
use awsmp_contract::keys::{GroupKey, HourBucket};
use awsmp_contract::status::{AggregatedStatus, RawStatus};
use awsmp_pipeline::ports::AggregatedItem;
use chrono::{DateTime, Duration, TimeZone, Utc};

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/fixtures/cloudtrail/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

fn at(h: u32, m: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, h, m, 0).unwrap()
}

fn billed_record(g: &GroupKey, q: u64, status: AggregatedStatus, id: Option<&str>) -> HourSources {
    let mut s = HourSources::new(g.clone());
    s.rows.add(q, false, Some(RawStatus::Aggregated), "", 0);
    let mut r = AggregatedItem::new(g.clone(), q, None);
    r.row_count = 1;
    r.pending = false;
    r.status = Some(status);
    r.metering_record_id = id.map(str::to_owned);
    r.attempted_quantity = Some(q);
    r.submission_attempted_at = Some(at(10, 5));
    s.record = Some(r);
    s
}

async fn ledger_for(mut sources: Vec<HourSources>, now: DateTime<Utc>) -> Ledger {
    let trail = MemoryMeteringTrail::default();
    for f in [
        "batch-meter-usage-license.json",
        "batch-meter-usage-throttled.json",
    ] {
        trail.record(at(10, 5), Duration::minutes(5), fixture(f));
    }
    trail.set_now(Some(now));
    let from: HourBucket = "2026-12-01T00".parse().unwrap();
    let window = TrailWindow::for_hours(from, "2026-12-01T09".parse().unwrap(), 24, now);
    let mut by_group = trail_by_group(trail.batch_meter_usage_records(window).await.unwrap());
    for s in &mut sources {
        s.trail = by_group.remove(&s.group).unwrap_or_default();
    }
    Ledger::build(&sources, now)
}

fn group(license: &str, account: &str, dimension: &str, hour: &str) -> GroupKey {
    GroupKey::new(
        format!("arn:aws:license-manager::123456789012:license:{license}"),
        account,
        dimension,
        hour.parse().unwrap(),
    )
}

#[tokio::test]
async fn records_that_match_their_cloudtrail_events_are_explained() {
    let a = group("l-aaa", "210987654321", "api_calls", "2026-12-01T09");
    let c = group("l-ccc", "210987654323", "storage", "2026-12-01T00");
    let ledger = ledger_for(
        vec![
            billed_record(
                &a,
                40,
                AggregatedStatus::Success,
                Some("11111111-2222-4333-8444-555555555555"),
            ),
            billed_record(&c, 9, AggregatedStatus::CustomerNotSubscribed, None),
        ],
        at(11, 0),
    )
    .await;
    assert_eq!(
        ledger.totals.unexplained_lines,
        0,
        "{}",
        ledger_table(&ledger)
    );
    assert_eq!(ledger.lines[0].accepted, 40);
    assert_eq!(ledger.lines[1].accepted, 0);
    assert_eq!(ledger.exit_code(), EXIT_CLEAN);
    assert!(ledger_table(&ledger).contains("TOTAL"));
}

#[tokio::test]
async fn a_record_cloudtrail_has_not_delivered_yet_is_pending_not_unexplained() {
    let a = group("l-aaa", "210987654321", "api_calls", "2026-12-01T09");
    let ledger = ledger_for(
        vec![billed_record(
            &a,
            40,
            AggregatedStatus::Success,
            Some("11111111-2222-4333-8444-555555555555"),
        )],
        at(10, 7),
    )
    .await;
    assert!(ledger.lines[0].pending_cloudtrail);
    assert_eq!(ledger.exit_code(), EXIT_CLEAN);
}

#[tokio::test]
async fn a_changed_record_is_unexplained_and_a_duplicate_is_a_billing_risk() {
    let a = group("l-aaa", "210987654321", "api_calls", "2026-12-01T09");
    let b = group("l-bbb", "210987654322", "api_calls", "2026-12-01T09");
    // The record was raised to 41 behind the pipeline's back; AWS billed 40.
    let ledger = ledger_for(
        vec![billed_record(
            &a,
            41,
            AggregatedStatus::Success,
            Some("11111111-2222-4333-8444-555555555555"),
        )],
        at(11, 0),
    )
    .await;
    assert_eq!(ledger.exit_code(), EXIT_UNEXPLAINED);
    assert!(ledger_table(&ledger).contains("UNEXPLAINED"));
    let ledger = ledger_for(
        vec![billed_record(
            &b,
            5,
            AggregatedStatus::DuplicateRecord,
            None,
        )],
        at(11, 0),
    )
    .await;
    assert!(ledger.lines[0].billing_risk);
    assert_eq!(ledger.exit_code(), EXIT_BILLING_RISK);
}
