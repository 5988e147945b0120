//! The simulator's CloudTrail: each served call is logged in the documented event shape (read
//! back with the pipeline's own parser), delivered after the lag, and served by
//! `LookupEvents` with CloudTrail's paging, limits and errors.

use super::*;
use crate::{Catalog, Faults, SimConfig, Simulator};
use awsmp_meterctl::cloudtrail::event::parse_event;
use awsmp_meterctl::trail::TrailOutcome;

const L1: &str = "arn:aws:license-manager::123456789012:license:l-11111111111111111111111111111111";
const A: &str = "111111111111";

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap()
}

fn sim(t0: Instant) -> Simulator {
    let catalog = Catalog::from_json(&format!(
        r#"{{"requestsPerSecond":1000,"products":[{{"productCode":"prod1","dimensions":["requests"],
            "licenses":[{{"licenseArn":"{L1}","customerAWSAccountId":"{A}","status":"active"}}]}}]}}"#
    ))
    .unwrap();
    let mut s = Simulator::new(SimConfig::new(catalog), t0).unwrap();
    s.set_clock(Some(now()));
    s
}

fn body(hours_ago: i64, q: u32) -> Vec<u8> {
    serde_json::to_vec(&json!({"UsageRecords": [{
        "Timestamp": (now() - Duration::hours(hours_ago)).timestamp(), "Dimension": "requests",
        "Quantity": q, "CustomerAWSAccountId": A, "LicenseArn": L1}]}))
    .unwrap()
}

fn lookup(s: &mut Simulator, req: Value, at: Instant) -> Reply {
    let now = s.now();
    s.cloudtrail_mut()
        .api("LookupEvents", &serde_json::to_vec(&req).unwrap(), at, now)
}

fn events(r: &Reply) -> Vec<Value> {
    r.body["Events"].as_array().cloned().unwrap_or_default()
}

#[test]
fn a_served_call_is_logged_as_aws_logs_it_and_reads_back() {
    let t0 = Instant::now();
    let mut s = sim(t0);
    let reply = s.batch_meter_usage(&body(2, 7), t0);
    let billed_id = reply.body["Results"][0]["MeteringRecordId"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = lookup(
        &mut s,
        json!({"LookupAttributes":[{"AttributeKey":"EventSource","AttributeValue":EVENT_SOURCE}]}),
        t0,
    );
    assert_eq!(r.status, 200);
    let ev = &events(&r)[0];
    assert_eq!(ev["EventName"], "BatchMeterUsage");
    assert_eq!(ev["EventTime"], now().timestamp());
    let raw: Value = serde_json::from_str(ev["CloudTrailEvent"].as_str().unwrap()).unwrap();
    assert_eq!(raw["eventTime"], "2026-11-30T12:00:00Z");
    let rec = &raw["requestParameters"]["usageRecords"][0];
    assert_eq!(rec["timestamp"], "Nov 30, 2026 10:00:00 AM");
    assert_eq!(rec["customerAWSAccountID"], A);
    assert_eq!(rec["licenseArn"], L1);
    assert_eq!(raw["responseElements"]["results"][0]["status"], "Success");
    let parsed = parse_event(ev["CloudTrailEvent"].as_str().unwrap()).unwrap();
    assert_eq!(parsed.len(), 1);
    assert_eq!(parsed[0].group.hour.to_string(), "2026-11-30T10");
    assert_eq!(parsed[0].quantity, 7);
    assert_eq!(
        parsed[0].outcome,
        TrailOutcome::Success {
            metering_record_id: billed_id
        }
    );
}

#[test]
fn a_failed_call_is_logged_with_its_error_and_no_response() {
    let t0 = Instant::now();
    let mut s = sim(t0);
    s.set_faults(Faults {
        throttle_rate: 1.0,
        ..Faults::default()
    })
    .unwrap();
    assert_eq!(s.batch_meter_usage(&body(1, 3), t0).status, 400);
    let r = lookup(&mut s, json!({}), t0);
    let raw: Value =
        serde_json::from_str(events(&r)[0]["CloudTrailEvent"].as_str().unwrap()).unwrap();
    assert_eq!(raw["errorCode"], "ThrottlingException");
    assert!(raw["responseElements"].is_null());
    assert!(parse_event(&raw.to_string()).unwrap().is_empty());
}

#[test]
fn events_are_delivered_after_the_lag() {
    let t0 = Instant::now();
    let mut s = sim(t0);
    s.cloudtrail_mut()
        .set_settings(TrailSettings { lag_seconds: 900 });
    s.batch_meter_usage(&body(1, 3), t0);
    assert!(events(&lookup(&mut s, json!({}), t0)).is_empty());
    s.set_clock(Some(now() + Duration::minutes(15)));
    let later = t0 + std::time::Duration::from_secs(1);
    assert_eq!(events(&lookup(&mut s, json!({}), later)).len(), 1);
}

#[test]
fn pages_of_fifty_newest_first_with_a_stable_token_and_a_time_range() {
    let t0 = Instant::now();
    let mut s = sim(t0);
    for i in 0..120 {
        s.set_clock(Some(now() + Duration::seconds(i)));
        s.batch_meter_usage(&body(1, 1), t0);
    }
    let mut at = t0;
    let mut step = || {
        at += std::time::Duration::from_secs(1);
        at
    };
    let first = lookup(&mut s, json!({"MaxResults": 50}), step());
    assert_eq!(events(&first).len(), 50);
    assert_eq!(
        events(&first)[0]["EventTime"],
        (now() + Duration::seconds(119)).timestamp()
    );
    let token = first.body["NextToken"].clone();
    // An event logged between pages does not shift the next page.
    s.batch_meter_usage(&body(1, 1), t0);
    let second = lookup(
        &mut s,
        json!({"MaxResults": 50, "NextToken": token}),
        step(),
    );
    assert_eq!(
        events(&second)[0]["EventTime"],
        (now() + Duration::seconds(69)).timestamp()
    );
    let third = lookup(
        &mut s,
        json!({"NextToken": second.body["NextToken"]}),
        step(),
    );
    assert_eq!(events(&third).len(), 20);
    assert!(third.body.get("NextToken").is_none());
    let ranged = lookup(
        &mut s,
        json!({"StartTime": (now() + Duration::seconds(10)).timestamp(), "EndTime": (now() + Duration::seconds(19)).timestamp() as f64 + 0.5}),
        step(),
    );
    assert_eq!(events(&ranged).len(), 10);
}

#[test]
fn both_spellings_of_the_target_name_the_operation() {
    assert_eq!(
        operation("CloudTrail_20131101.LookupEvents"),
        Some("LookupEvents")
    );
    assert_eq!(
        operation("com.amazonaws.cloudtrail.v20131101.CloudTrail_20131101.LookupEvents"),
        Some("LookupEvents")
    );
    assert_eq!(operation("AWSMPMeteringService.BatchMeterUsage"), None);
}

#[test]
fn refuses_what_cloudtrail_refuses_and_paces_two_a_second() {
    let t0 = Instant::now();
    let mut s = sim(t0);
    let name = |r: &Reply| r.body["__type"].as_str().unwrap_or_default().to_owned();
    let later = t0 + std::time::Duration::from_secs(10);
    assert_eq!(
        name(&lookup(&mut s, json!({"MaxResults": 51}), later)),
        "InvalidMaxResultsException"
    );
    let two = json!({"LookupAttributes":[{"AttributeKey":"EventName","AttributeValue":"a"},{"AttributeKey":"EventName","AttributeValue":"b"}]});
    let later = later + std::time::Duration::from_secs(10);
    assert_eq!(
        name(&lookup(&mut s, two, later)),
        "InvalidLookupAttributesException"
    );
    let later = later + std::time::Duration::from_secs(10);
    assert_eq!(
        name(&lookup(&mut s, json!({"NextToken": "x"}), later)),
        "InvalidNextTokenException"
    );
    let later = later + std::time::Duration::from_secs(10);
    let range = json!({"StartTime": 200, "EndTime": 100});
    assert_eq!(
        name(&lookup(&mut s, range, later)),
        "InvalidTimeRangeException"
    );
    let burst = later + std::time::Duration::from_secs(10);
    let answers: Vec<u16> = (0..3)
        .map(|_| lookup(&mut s, json!({}), burst).status)
        .collect();
    assert_eq!(
        answers,
        [200, 200, 400],
        "a third call in the same instant is throttled"
    );
    let other = s
        .cloudtrail_mut()
        .api("DescribeTrails", b"{}", burst, now());
    assert_eq!(name(&other), "UnsupportedOperationException");
}
