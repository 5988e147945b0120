use super::*;
use chrono::TimeZone;

fn fixture(name: &str) -> String {
    let path = format!(
        "{}/tests/fixtures/cloudtrail/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn the_documented_legacy_entry_parses_to_one_billed_record() {
    let records = parse_event(&fixture("batch-meter-usage-legacy.json")).unwrap();
    assert_eq!(records.len(), 1);
    let r = &records[0];
    assert_eq!(r.group.license_arn, "prod-legacy");
    assert_eq!(r.group.customer_aws_account_id, "cust-legacy-1");
    assert_eq!(r.group.dimension, "api_calls");
    assert_eq!(r.group.hour.to_string(), "2026-12-01T14");
    assert_eq!(r.quantity, 17);
    assert_eq!(r.event_id, "e3a9f1c2-7b4d-4f0e-9c8a-1d2e3f4a5b6c");
    assert_eq!(
        r.event_time,
        Utc.with_ymd_and_hms(2026, 12, 1, 15, 4, 11).unwrap()
    );
    assert_eq!(r.billed_id(), Some("7f1c2a9e-0d4b-4c55-9a61-2b8e3f0c1d77"));
}

#[test]
fn license_records_carry_every_outcome_and_the_unprocessed_ones() {
    let records = parse_event(&fixture("batch-meter-usage-license.json")).unwrap();
    let got: Vec<(&str, &str, u64, &TrailOutcome)> = records
        .iter()
        .map(|r| {
            (
                r.group.customer_aws_account_id.as_str(),
                // Owned hour strings are compared below; keep the key and outcome here.
                r.group.dimension.as_str(),
                r.quantity,
                &r.outcome,
            )
        })
        .collect();
    assert_eq!(got.len(), 4);
    assert_eq!(
        got[0],
        (
            "210987654321",
            "api_calls",
            40,
            &TrailOutcome::Success {
                metering_record_id: "11111111-2222-4333-8444-555555555555".into()
            }
        )
    );
    assert!(matches!(
        got[1].3,
        TrailOutcome::DuplicateRecord {
            metering_record_id: Some(_)
        }
    ));
    assert_eq!(got[2].3, &TrailOutcome::CustomerNotSubscribed);
    assert_eq!(got[3].3, &TrailOutcome::Unprocessed);
    let hours: Vec<String> = records.iter().map(|r| r.group.hour.to_string()).collect();
    // 9:00 AM, 9:00 AM, 12:00 AM (midnight), 12:00 PM (noon).
    assert_eq!(
        hours,
        [
            "2026-12-01T09",
            "2026-12-01T09",
            "2026-12-01T00",
            "2026-12-01T12"
        ]
    );
    assert!(records[0].group.license_arn.ends_with("l-aaa"));
}

#[test]
fn a_failed_call_records_nothing_applied() {
    assert!(
        parse_event(&fixture("batch-meter-usage-throttled.json"))
            .unwrap()
            .is_empty()
    );
}

#[test]
fn other_events_are_skipped_and_bad_ones_refused() {
    let other = r#"{"eventTime":"2026-12-01T10:00:00Z","eventSource":"metering-marketplace.amazonaws.com","eventName":"ResolveCustomer","eventID":"x"}"#;
    assert!(parse_event(other).unwrap().is_empty());
    assert!(parse_event("not json").is_err());
    let bad_time = fixture("batch-meter-usage-legacy.json")
        .replace("Dec 1, 2026 2:00:00 PM", "2026-12-01T14:00:00Z");
    assert!(matches!(
        parse_event(&bad_time),
        Err(TrailError::Malformed { .. })
    ));
    let unknown = fixture("batch-meter-usage-legacy.json").replace("\"Success\"", "\"Mystery\"");
    assert!(parse_event(&unknown).is_err());
}

#[test]
fn record_timestamps_round_trip_in_the_documented_format() {
    let t = Utc.with_ymd_and_hms(2018, 4, 19, 16, 32, 50).unwrap();
    assert_eq!(format_record_timestamp(t), "Apr 19, 2018 4:32:50 PM");
    assert_eq!(parse_record_timestamp("Apr 19, 2018 4:32:50 PM"), Some(t));
    let midnight = Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap();
    assert_eq!(format_record_timestamp(midnight), "Dec 1, 2026 12:00:00 AM");
    assert_eq!(
        parse_record_timestamp("Dec 1, 2026 12:00:00 AM"),
        Some(midnight)
    );
}
