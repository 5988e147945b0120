//! The simulator's lifecycle admin: subscribe issues a token and the two events, tokens are
//! reusable until they expire, and a deprovisioned license is billable for one more hour.

use std::time::Instant;

use awsmp_marketplace_sim::lifecycle::{self, LicenseRequest, SubscribeRequest};
use awsmp_marketplace_sim::{Catalog, SimConfig, Simulator};
use chrono::{DateTime, Duration, TimeZone, Utc};
use serde_json::{Value, json};

fn sim(now: DateTime<Utc>) -> Simulator {
    let catalog =
        Catalog::from_json(r#"{"products":[{"productCode":"prod1","dimensions":["requests"]}]}"#)
            .unwrap();
    let mut s = Simulator::new(SimConfig::new(catalog), Instant::now()).unwrap();
    s.set_clock(Some(now));
    s
}

fn meter(s: &mut Simulator, license: &str, account: &str, hour: DateTime<Utc>) -> Value {
    let body = json!({"UsageRecords": [{
        "Timestamp": hour.timestamp(), "Dimension": "requests", "Quantity": 3,
        "LicenseArn": license, "CustomerAWSAccountId": account}]});
    let reply = s.batch_meter_usage(body.to_string().as_bytes(), Instant::now());
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.body["Results"][0]["Status"].clone()
}

fn resolve(s: &mut Simulator, token: &str) -> Value {
    let r = s.resolve_customer(json!({"RegistrationToken": token}).to_string().as_bytes());
    if r.status == 200 {
        r.body
    } else {
        json!({"error": r.body["__type"]})
    }
}

fn license_request(license: &str) -> LicenseRequest {
    LicenseRequest {
        license_arn: license.into(),
        ttl_seconds: None,
    }
}

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 12, 20, 0).unwrap()
}

fn subscribed(s: &mut Simulator) -> Value {
    let req = SubscribeRequest {
        product_code: "prod1".into(),
        customer_aws_account_id: "444455556666".into(),
        license_arn: None,
        token_ttl_seconds: None,
    };
    lifecycle::subscribe(s, &req).unwrap()
}

#[test]
fn subscribe_emits_the_events_and_a_token_reusable_until_it_expires() {
    let mut s = sim(t0());
    let sub = subscribed(&mut s);
    let license = sub["licenseArn"].as_str().unwrap().to_owned();
    assert!(awsmp_contract::ids::is_valid_license_arn(&license));
    let kinds: Vec<&str> = sub["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["detail-type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "Purchase Agreement Created - Proposer",
            "License Updated - Manufacturer"
        ]
    );
    assert_eq!(
        sub["events"][1]["detail"]["license"]["arn"],
        license.as_str()
    );
    assert_eq!(sub["events"][1]["time"], "2026-12-01T12:20:00Z");
    assert_eq!(
        s.lifecycle_mut().take_events().len(),
        2,
        "the outbox holds them for the runner"
    );
    let token = sub["registrationToken"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    for _ in 0..2 {
        let r = resolve(&mut s, &token);
        assert_eq!(r["LicenseArn"], license.as_str());
        assert_eq!(r["CustomerAWSAccountId"], "444455556666");
        assert_eq!(r["ProductCode"], "prod1");
    }
    s.set_clock(Some(t0() + Duration::hours(4)));
    assert_eq!(resolve(&mut s, &token)["error"], "ExpiredTokenException");
    assert_eq!(
        resolve(&mut s, "tok-unknown")["error"],
        "InvalidTokenException"
    );
    let mut again = license_request(&license);
    again.ttl_seconds = Some(60);
    let fresh = lifecycle::issue_token(&mut s, &again).unwrap();
    assert_eq!(
        resolve(&mut s, fresh["token"].as_str().unwrap())["LicenseArn"],
        license.as_str()
    );
}

#[test]
fn an_ended_agreement_keeps_metering_and_a_deprovisioned_license_for_one_hour() {
    let mut s = sim(t0());
    let license = subscribed(&mut s)["licenseArn"]
        .as_str()
        .unwrap()
        .to_owned();
    let t1 = t0() + Duration::hours(5);
    s.set_clock(Some(t1));
    let ended = lifecycle::end_agreement(&mut s, &license_request(&license)).unwrap();
    assert_eq!(
        ended["events"][0]["detail-type"],
        "Purchase Agreement Ended - Proposer"
    );
    assert_eq!(meter(&mut s, &license, "444455556666", t1), "Success");
    let d = lifecycle::deprovision(&mut s, &license_request(&license)).unwrap();
    assert_eq!(
        d["events"][0]["detail-type"],
        "License Deprovisioned - Manufacturer"
    );
    s.set_clock(Some(t1 + Duration::minutes(59)));
    assert_eq!(
        meter(&mut s, &license, "444455556666", t1 - Duration::hours(1)),
        "Success"
    );
    s.set_clock(Some(t1 + Duration::hours(1)));
    assert_eq!(
        meter(&mut s, &license, "444455556666", t1 - Duration::hours(2)),
        "CustomerNotSubscribed"
    );
    let unknown =
        "arn:aws:license-manager::123456789012:license:l-00000000000000000000000000000000";
    assert!(lifecycle::deprovision(&mut s, &license_request(unknown)).is_err());
}
