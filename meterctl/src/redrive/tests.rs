use super::*;
use crate::trail::{TrailOutcome, TrailRecord};
use awsmp_contract::keys::HourBucket;
use awsmp_pipeline::ports::AggregatedItem;
use chrono::TimeZone;

fn group() -> GroupKey {
    GroupKey::new(
        "arn:aws:license-manager::1:license:l-1",
        "210987654321",
        "api_calls",
        "2026-12-01T14".parse::<HourBucket>().unwrap(),
    )
}

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 18, 0, 0).unwrap()
}

fn with_record(status: Option<AggregatedStatus>) -> HourSources {
    let mut s = HourSources::new(group());
    let mut r = AggregatedItem::new(group(), 10, None);
    r.status = status;
    s.record = Some(r);
    s
}

#[test]
fn an_error_record_inside_the_window_is_reset_for_the_submitter() {
    let t = TimeConfig::new(1, 24, 365).unwrap();
    assert_eq!(
        plan(&with_record(Some(AggregatedStatus::Error)), now(), &t),
        Ok(Plan::Record)
    );
}

#[test]
fn rejected_rows_without_a_record_are_reset_for_the_aggregator() {
    let t = TimeConfig::new(1, 24, 365).unwrap();
    let mut s = HourSources::new(group());
    s.rows.add(
        7,
        false,
        Some(RawStatus::RejectedClientSide),
        "MalformedTimestamp",
        0,
    );
    assert_eq!(plan(&s, now(), &t), Ok(Plan::Rows));
}

#[test]
fn refuses_outside_the_window_and_what_aws_accepted() {
    let t = TimeConfig::new(1, 24, 365).unwrap();
    let late = Utc.with_ymd_and_hms(2026, 12, 2, 15, 0, 0).unwrap();
    assert!(matches!(
        plan(&with_record(Some(AggregatedStatus::Error)), late, &t),
        Err(Refusal::OutsideWindow { .. })
    ));
    // The record says Error but CloudTrail shows AWS billed the key.
    let mut s = with_record(Some(AggregatedStatus::Error));
    s.trail.push(TrailRecord {
        event_id: "e".into(),
        event_time: now(),
        group: group(),
        quantity: 10,
        outcome: TrailOutcome::Success {
            metering_record_id: "m-1".into(),
        },
    });
    assert_eq!(
        plan(&s, now(), &t),
        Err(Refusal::AcceptedByAws {
            group: group().to_string(),
            metering_record_id: "m-1".into()
        })
    );
    assert!(matches!(
        plan(&with_record(Some(AggregatedStatus::Success)), now(), &t),
        Err(Refusal::AcceptedByAws { .. })
    ));
    assert!(matches!(
        plan(
            &with_record(Some(AggregatedStatus::CustomerNotSubscribed)),
            now(),
            &t
        ),
        Err(Refusal::NotRedrivable { .. })
    ));
    assert!(matches!(
        plan(&with_record(None), now(), &t),
        Err(Refusal::NothingToRedrive { .. })
    ));
    assert!(matches!(
        plan(&HourSources::new(group()), now(), &t),
        Err(Refusal::NothingToRedrive { .. })
    ));
}
