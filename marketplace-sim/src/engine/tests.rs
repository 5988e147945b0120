//! Simulator state-machine tests: quota, faults (determinism), ledger effects, counters,
//! reset and ResolveCustomer, over plain bodies and a fixed clock.

use super::*;
use chrono::TimeZone;
use std::time::Duration;

const L1: &str = "arn:aws:license-manager::123456789012:license:l-11111111111111111111111111111111";
const A: &str = "111111111111";

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap()
}

fn config(rps: u32) -> SimConfig {
    let catalog = Catalog::from_json(&format!(
        r#"{{"requestsPerSecond":{rps},"products":[{{"productCode":"prod1","dimensions":["requests"],
            "licenses":[{{"licenseArn":"{L1}","customerAWSAccountId":"{A}","status":"active"}}],
            "registrationTokens":[
              {{"token":"good","licenseArn":"{L1}","customerAWSAccountId":"{A}","expiresAt":"2026-11-30T13:00:00Z"}},
              {{"token":"old","licenseArn":"{L1}","customerAWSAccountId":"{A}","expiresAt":"2026-11-30T11:00:00Z"}}]}}]}}"#
    ))
    .unwrap();
    SimConfig::new(catalog)
}

fn sim(rps: u32, t0: Instant) -> Simulator {
    let mut s = Simulator::new(config(rps), t0).unwrap();
    s.set_clock(Some(now()));
    s
}

/// One CA record per hour offset, quantity `q`.
fn body(records: &[(i64, u32)]) -> Vec<u8> {
    let recs: Vec<Value> = records
        .iter()
        .map(|&(hours_ago, q)| {
            json!({"Timestamp": (now() - chrono::Duration::hours(hours_ago)).timestamp(), "Dimension": "requests",
                   "Quantity": q, "CustomerAWSAccountId": A, "LicenseArn": L1})
        })
        .collect();
    serde_json::to_vec(&json!({ "UsageRecords": recs })).unwrap()
}

fn statuses(r: &Reply) -> Vec<String> {
    r.body["Results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["Status"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn bills_first_write_and_answers_retries_and_duplicates() {
    let t0 = Instant::now();
    let mut s = sim(100, t0);
    let first = s.batch_meter_usage(&body(&[(1, 5), (2, 6)]), t0);
    assert_eq!(first.status, 200);
    assert_eq!(statuses(&first), ["Success", "Success"]);
    let id = first.body["Results"][0]["MeteringRecordId"].clone();
    let again = s.batch_meter_usage(&body(&[(1, 5), (1, 9)]), t0);
    assert_eq!(statuses(&again), ["Success", "DuplicateRecord"]);
    assert_eq!(again.body["Results"][0]["MeteringRecordId"], id);
    assert_eq!(again.body["Results"][1]["MeteringRecordId"], id);
    assert_eq!(s.ledger().billed_units(), 11);
    let c = s.counters();
    assert_eq!(
        (
            c.requests,
            c.success,
            c.identical_retries,
            c.duplicate_record
        ),
        (2, 2, 1, 1)
    );
    assert_eq!(s.ledger().duplicates()[0].attempted_quantity, 9);
}

#[test]
fn request_errors_bill_nothing_and_are_counted_by_name() {
    let t0 = Instant::now();
    let mut s = sim(100, t0);
    let r = s.batch_meter_usage(&body(&[(1, 5), (30, 6)]), t0);
    assert_eq!(
        (r.status, r.error),
        (400, Some(ErrorCode::TimestampOutOfBounds))
    );
    assert_eq!(r.body["__type"], "TimestampOutOfBoundsException");
    assert!(
        r.body["message"]
            .as_str()
            .unwrap()
            .contains("UsageRecords[1]")
    );
    assert_eq!(s.ledger().records().len(), 0);
    assert_eq!(
        s.counters()
            .request_errors
            .get("TimestampOutOfBoundsException"),
        Some(&1)
    );
}

#[test]
fn quota_throttles_beyond_the_burst_and_recovers() {
    let t0 = Instant::now();
    let mut s = sim(2, t0);
    assert_eq!(s.batch_meter_usage(&body(&[(1, 1)]), t0).status, 200);
    assert_eq!(s.batch_meter_usage(&body(&[(2, 1)]), t0).status, 200);
    let r = s.batch_meter_usage(&body(&[(3, 1)]), t0);
    assert_eq!(r.error, Some(ErrorCode::Throttling));
    assert_eq!(
        s.ledger().records().len(),
        2,
        "a throttled call applies nothing"
    );
    assert_eq!(
        s.batch_meter_usage(&body(&[(3, 1)]), t0 + Duration::from_millis(500))
            .status,
        200
    );
    assert_eq!(s.counters().throttled, 1);
    assert_eq!(s.counters().requests, 4);
}

#[test]
fn disabled_region_refuses_every_call() {
    let t0 = Instant::now();
    let mut cfg = config(100);
    cfg.disabled = true;
    let mut s = Simulator::new(cfg, t0).unwrap();
    s.set_clock(Some(now()));
    let r = s.batch_meter_usage(&body(&[(1, 1)]), t0);
    assert_eq!(r.error, Some(ErrorCode::DisabledApi));
    assert_eq!(r.status, 400);
    assert_eq!(s.ledger().records().len(), 0);
}

#[test]
fn throttle_and_internal_faults_apply_nothing() {
    let t0 = Instant::now();
    let mut s = sim(1000, t0);
    s.set_faults(Faults {
        throttle_rate: 1.0,
        ..Faults::default()
    })
    .unwrap();
    assert_eq!(
        s.batch_meter_usage(&body(&[(1, 1)]), t0).error,
        Some(ErrorCode::Throttling)
    );
    s.set_faults(Faults {
        internal_error_rate: 1.0,
        ..Faults::default()
    })
    .unwrap();
    let r = s.batch_meter_usage(&body(&[(1, 1)]), t0);
    assert_eq!(
        (r.status, r.error),
        (500, Some(ErrorCode::InternalServiceError))
    );
    assert_eq!(s.ledger().records().len(), 0);
    assert_eq!(
        (s.counters().throttled, s.counters().internal_errors),
        (1, 1)
    );
}

#[test]
fn apply_then_fail_bills_and_answers_500() {
    let t0 = Instant::now();
    let mut s = sim(1000, t0);
    s.set_faults(Faults {
        apply_then_fail_rate: 1.0,
        ..Faults::default()
    })
    .unwrap();
    let r = s.batch_meter_usage(&body(&[(1, 4)]), t0);
    assert_eq!(
        (r.status, r.error),
        (500, Some(ErrorCode::InternalServiceError))
    );
    assert_eq!(
        s.ledger().billed_units(),
        4,
        "billed although the caller saw an error"
    );
    s.set_faults(Faults::default()).unwrap();
    let retry = s.batch_meter_usage(&body(&[(1, 4)]), t0);
    assert_eq!(
        statuses(&retry),
        ["Success"],
        "the caller's retry is an identical resubmission"
    );
    assert_eq!(s.ledger().billed_units(), 4);
    assert_eq!(
        (s.counters().apply_then_fail, s.counters().identical_retries),
        (1, 1)
    );
}

#[test]
fn unprocessed_records_are_echoed_and_not_billed() {
    let t0 = Instant::now();
    let mut s = sim(1000, t0);
    s.set_faults(Faults {
        unprocessed_rate: 1.0,
        ..Faults::default()
    })
    .unwrap();
    let r = s.batch_meter_usage(&body(&[(1, 4), (2, 5)]), t0);
    assert_eq!(r.status, 200);
    assert_eq!(r.body["Results"].as_array().unwrap().len(), 0);
    assert_eq!(r.body["UnprocessedRecords"].as_array().unwrap().len(), 2);
    assert_eq!(r.body["UnprocessedRecords"][1]["Quantity"], 5);
    assert_eq!(s.ledger().records().len(), 0);
    assert_eq!(s.counters().unprocessed, 2);
}

/// The outcome sequence of 40 one-record calls under partial fault rates.
fn fault_trace(seed: u64) -> Vec<String> {
    let t0 = Instant::now();
    let mut s = sim(1000, t0);
    s.set_faults(Faults {
        throttle_rate: 0.2,
        internal_error_rate: 0.1,
        unprocessed_rate: 0.3,
        apply_then_fail_rate: 0.1,
        latency_ms: 0,
        seed,
    })
    .unwrap();
    (0..40)
        .map(|i| {
            let r = s.batch_meter_usage(&body(&[(1 + i % 20, 1)]), t0);
            match r.error {
                Some(e) => e.name().to_owned(),
                None if r.body["UnprocessedRecords"].as_array().unwrap().is_empty() => "ok".into(),
                None => "unprocessed".into(),
            }
        })
        .collect()
}

#[test]
fn faults_are_deterministic_for_a_seed() {
    let a = fault_trace(42);
    assert_eq!(a, fault_trace(42));
    assert_ne!(a, fault_trace(43), "another seed gives another sequence");
    for outcome in [
        "ok",
        "unprocessed",
        "ThrottlingException",
        "InternalServiceErrorException",
    ] {
        assert!(a.iter().any(|o| o == outcome), "{outcome} occurs in {a:?}");
    }
}

#[test]
fn reset_clears_ledger_counters_and_faults_but_keeps_catalog_and_clock() {
    let t0 = Instant::now();
    let mut s = sim(1, t0);
    s.set_faults(Faults {
        unprocessed_rate: 0.5,
        seed: 3,
        ..Faults::default()
    })
    .unwrap();
    s.batch_meter_usage(&body(&[(1, 1), (2, 1), (3, 1), (4, 1)]), t0);
    assert_eq!(
        s.batch_meter_usage(&body(&[(1, 1)]), t0).error,
        Some(ErrorCode::Throttling)
    );
    s.reset(t0);
    assert_eq!(s.ledger().records().len(), 0);
    assert_eq!(s.counters(), &Counters::default());
    assert_eq!(s.faults(), &Faults::default());
    assert_eq!(s.now(), now());
    let r = s.batch_meter_usage(&body(&[(1, 1)]), t0);
    assert_eq!(statuses(&r), ["Success"], "quota refilled, catalog intact");
}

#[test]
fn ledger_json_has_records_duplicates_and_counters() {
    let t0 = Instant::now();
    let mut s = sim(100, t0);
    s.batch_meter_usage(&body(&[(1, 5)]), t0);
    s.batch_meter_usage(&body(&[(1, 6)]), t0);
    let v = s.ledger_json();
    assert_eq!(v["region"], "us-east-1");
    assert_eq!(v["records"][0]["quantity"], 5);
    assert_eq!(v["records"][0]["hour"], "2026-11-30T11");
    assert_eq!(v["duplicates"][0]["billedQuantity"], 5);
    assert_eq!(v["duplicates"][0]["attemptedQuantity"], 6);
    assert_eq!(v["counters"]["duplicateRecord"], 1);
    assert_eq!(v["counters"]["requestErrors"], json!({}));
}

#[test]
fn resolve_customer_outcomes_follow_the_clock() {
    let t0 = Instant::now();
    let mut s = sim(10, t0);
    let call = |s: &mut Simulator, token: &str| {
        s.resolve_customer(&serde_json::to_vec(&json!({"RegistrationToken": token})).unwrap())
    };
    let ok = call(&mut s, "good");
    assert_eq!(ok.status, 200);
    assert_eq!(
        ok.body,
        json!({"CustomerAWSAccountId": A, "LicenseArn": L1, "ProductCode": "prod1"})
    );
    assert_eq!(call(&mut s, "old").error, Some(ErrorCode::ExpiredToken));
    assert_eq!(call(&mut s, "nope").error, Some(ErrorCode::InvalidToken));
    s.set_clock(Some(Utc.with_ymd_and_hms(2026, 11, 30, 13, 0, 0).unwrap()));
    assert_eq!(
        call(&mut s, "good").error,
        Some(ErrorCode::ExpiredToken),
        "expired at its expiresAt"
    );
    assert_eq!(s.resolve_customer(b"{}").error, Some(ErrorCode::Validation));
}

#[test]
fn window_override_replaces_the_catalog_window() {
    let t0 = Instant::now();
    let mut cfg = config(100);
    cfg.window_hours = Some(6);
    let mut s = Simulator::new(cfg, t0).unwrap();
    s.set_clock(Some(now()));
    assert_eq!(
        s.batch_meter_usage(&body(&[(7, 1)]), t0).error,
        Some(ErrorCode::TimestampOutOfBounds)
    );
    assert_eq!(s.batch_meter_usage(&body(&[(5, 1)]), t0).status, 200);
}
