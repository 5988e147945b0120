//! Unit tests of every BatchMeterUsage rule, over plain JSON bodies.

use super::*;
use crate::catalog::Catalog;
use chrono::TimeZone;
use serde_json::json;

const L1: &str = "arn:aws:license-manager::123456789012:license:l-11111111111111111111111111111111";
const L2: &str = "arn:aws:license-manager::123456789012:license:l-22222222222222222222222222222222";
const L3: &str = "arn:aws:license-manager::123456789012:license:l-33333333333333333333333333333333";
const UNKNOWN: &str =
    "arn:aws:license-manager::123456789012:license:l-99999999999999999999999999999999";
const A: &str = "111111111111";
const B: &str = "222222222222";

fn catalog() -> CatalogIndex {
    let c = Catalog::from_json(&format!(
        r#"{{"products":[
          {{"productCode":"prod1","dimensions":["requests","storage"],
            "licenses":[{{"licenseArn":"{L1}","customerAWSAccountId":"{A}","status":"active"}},
                        {{"licenseArn":"{L2}","customerAWSAccountId":"{B}","status":"ended"}}],
            "legacyCustomers":[{{"customerIdentifier":"cust-active","status":"active"}},
                               {{"customerIdentifier":"cust-ended","status":"ended"}}]}},
          {{"productCode":"prod2","dimensions":["seats"],
            "licenses":[{{"licenseArn":"{L3}","customerAWSAccountId":"{A}","status":"active"}}]}}]}}"#
    ))
    .expect("catalog");
    CatalogIndex::new(c).expect("index")
}

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap()
}

fn secs(t: DateTime<Utc>) -> i64 {
    t.timestamp()
}

const LIMITS: Limits = Limits {
    window_hours: 24,
    max_allocations_per_record: 3,
};

fn ca(license: &str, account: &str, dim: &str, qty: u64) -> Value {
    json!({"Timestamp": secs(now()) - 3600, "Dimension": dim, "Quantity": qty,
           "CustomerAWSAccountId": account, "LicenseArn": license})
}

fn legacy(customer: &str, dim: &str, qty: u64) -> Value {
    json!({"Timestamp": secs(now()) - 3600, "Dimension": dim, "Quantity": qty, "CustomerIdentifier": customer})
}

fn body(v: Value) -> Vec<u8> {
    serde_json::to_vec(&v).unwrap()
}

fn records(records: Vec<Value>) -> Vec<u8> {
    body(json!({ "UsageRecords": records }))
}

fn parse_err(b: &[u8]) -> ErrorCode {
    parse_batch_request(b).expect_err("should fail").code
}

fn check(b: &[u8]) -> Result<Vec<ValidatedRecord>, ApiError> {
    let req = parse_batch_request(b)?;
    validate_batch(&req, &catalog(), now(), LIMITS)
}

fn check_err(b: &[u8]) -> ErrorCode {
    check(b).expect_err("should fail").code
}

// ---- decoding -------------------------------------------------------------------------

#[test]
fn decodes_a_concurrent_agreements_record() {
    let mut r = ca(L1, A, "requests", 7);
    r["Timestamp"] = json!(secs(now()) as f64 - 0.25);
    let req = parse_batch_request(&records(vec![r.clone()])).expect("valid");
    assert_eq!(req.product_code, None);
    assert_eq!(req.raw_records, vec![r]);
    let rec = &req.records[0];
    assert_eq!(rec.timestamp, now() - chrono::Duration::milliseconds(250));
    assert_eq!(rec.quantity, 7);
    assert_eq!(rec.dimension, "requests");
    assert_eq!(
        rec.identity,
        RecordIdentity::Concurrent {
            license_arn: L1.into(),
            customer_aws_account_id: A.into()
        }
    );
}

#[test]
fn absent_quantity_is_the_documented_zero() {
    let mut r = ca(L1, A, "requests", 1);
    r.as_object_mut().unwrap().remove("Quantity");
    assert_eq!(
        parse_batch_request(&records(vec![r])).unwrap().records[0].quantity,
        0
    );
}

#[test]
fn decimal_quantities_are_refused_not_read_as_zero() {
    let mut r = ca(L1, A, "requests", 1);
    r.as_object_mut().unwrap().remove("Quantity");
    r["QuantityAsDecimal"] = json!("17.42");
    assert_eq!(parse_err(&records(vec![r])), ErrorCode::Validation);
    let mut r = ca(L1, A, "requests", 1);
    r["UsageAllocations"] =
        json!([{"AllocatedUsageQuantityAsDecimal": "1.0", "Tags": [{"Key": "k", "Value": "v"}]}]);
    assert_eq!(parse_err(&records(vec![r])), ErrorCode::Validation);
}

#[test]
fn quantity_outside_the_integer_range_is_a_validation_error() {
    for q in [json!(-1), json!(2147483648u64), json!(1.5), json!(1e20)] {
        let mut r = ca(L1, A, "requests", 1);
        r["Quantity"] = q.clone();
        assert_eq!(parse_err(&records(vec![r])), ErrorCode::Validation, "{q}");
    }
    let mut r = ca(L1, A, "requests", 1);
    r["Quantity"] = json!(2147483647u64);
    assert_eq!(
        parse_batch_request(&records(vec![r])).unwrap().records[0].quantity,
        i32::MAX as u32
    );
}

#[test]
fn missing_required_members_are_validation_errors() {
    for field in ["Timestamp", "Dimension"] {
        let mut r = ca(L1, A, "requests", 1);
        r.as_object_mut().unwrap().remove(field);
        assert_eq!(
            parse_err(&records(vec![r])),
            ErrorCode::Validation,
            "{field}"
        );
    }
    let mut r = ca(L1, A, "requests", 1);
    r["Dimension"] = json!("");
    assert_eq!(parse_err(&records(vec![r])), ErrorCode::Validation);
    assert_eq!(
        parse_err(&body(json!({"ProductCode": "prod1"}))),
        ErrorCode::Validation
    );
    let mut r = ca(L1, A, "requests", 5);
    r["UsageAllocations"] = json!([{"Tags": [{"Key": "k", "Value": "v"}]}]);
    assert_eq!(parse_err(&records(vec![r])), ErrorCode::Validation);
}

#[test]
fn undecodable_bodies_are_serialization_errors() {
    assert_eq!(parse_err(b"{not json"), ErrorCode::Serialization);
    assert_eq!(
        parse_err(&body(json!({"UsageRecords": "x"}))),
        ErrorCode::Serialization
    );
    let mut r = ca(L1, A, "requests", 1);
    r["Quantity"] = json!("5");
    assert_eq!(parse_err(&records(vec![r])), ErrorCode::Serialization);
}

#[test]
fn at_most_25_records_per_call() {
    let ok: Vec<Value> = (0..25).map(|_| ca(L1, A, "requests", 1)).collect();
    assert_eq!(parse_batch_request(&records(ok)).unwrap().records.len(), 25);
    let too_many: Vec<Value> = (0..26).map(|_| ca(L1, A, "requests", 1)).collect();
    assert_eq!(parse_err(&records(too_many)), ErrorCode::Validation);
}

#[test]
fn bodies_over_one_megabyte_are_rejected() {
    let mut big = records(vec![ca(L1, A, "requests", 1)]);
    assert!(parse_batch_request(&big).is_ok());
    // Pad with whitespace (still valid JSON) to exactly the limit, then one byte more.
    big.resize(MAX_REQUEST_BYTES, b' ');
    assert!(
        parse_batch_request(&big).is_ok(),
        "exactly 1 MB is accepted"
    );
    big.push(b' ');
    assert_eq!(parse_err(&big), ErrorCode::Validation);
}

#[test]
fn customer_identifier_and_account_are_mutually_exclusive_even_when_empty() {
    for ci in ["", "cust-active"] {
        let mut r = ca(L1, A, "requests", 1);
        r["CustomerIdentifier"] = json!(ci);
        assert_eq!(
            parse_err(&records(vec![r])),
            ErrorCode::Validation,
            "{ci:?}"
        );
    }
    // JSON null means absent.
    let mut r = ca(L1, A, "requests", 1);
    r["CustomerIdentifier"] = Value::Null;
    assert!(parse_batch_request(&records(vec![r])).is_ok());
}

#[test]
fn incomplete_identities_are_validation_errors() {
    let base = || json!({"Timestamp": secs(now()), "Dimension": "requests", "Quantity": 1});
    let mut only_account = base();
    only_account["CustomerAWSAccountId"] = json!(A);
    let mut only_license = base();
    only_license["LicenseArn"] = json!(L1);
    let mut ci_and_license = base();
    ci_and_license["CustomerIdentifier"] = json!("cust-active");
    ci_and_license["LicenseArn"] = json!(L1);
    for r in [
        base(),
        only_account,
        only_license,
        ci_and_license,
        ca(L1, "12345", "requests", 1),
    ] {
        assert_eq!(
            parse_err(&records(vec![r.clone()])),
            ErrorCode::Validation,
            "{r}"
        );
    }
}

// ---- identities and products ---------------------------------------------------------------

#[test]
fn concurrent_and_legacy_records_cannot_be_mixed() {
    let mut b =
        json!({"UsageRecords": [ca(L1, A, "requests", 1), legacy("cust-active", "requests", 1)]});
    assert_eq!(check_err(&body(b.clone())), ErrorCode::Validation);
    b["ProductCode"] = json!("prod1");
    assert_eq!(check_err(&body(b)), ErrorCode::Validation);
}

#[test]
fn product_code_with_license_records_is_a_validation_error() {
    let b = json!({"ProductCode": "prod1", "UsageRecords": [ca(L1, A, "requests", 1)]});
    assert_eq!(check_err(&body(b)), ErrorCode::Validation);
}

#[test]
fn malformed_license_arn_fails_the_whole_call() {
    let b = records(vec![
        ca(L1, A, "requests", 1),
        ca("arn:aws:license-manager::1:license:l-x", A, "requests", 1),
    ]);
    assert_eq!(check_err(&b), ErrorCode::InvalidLicense);
}

#[test]
fn licenses_of_two_products_in_one_call_are_invalid() {
    assert_eq!(
        check_err(&records(vec![
            ca(L1, A, "requests", 1),
            ca(L3, A, "seats", 1)
        ])),
        ErrorCode::InvalidLicense
    );
    // An unknown (well-formed) license does not name a product, so it does not conflict.
    assert!(
        check(&records(vec![
            ca(L1, A, "requests", 1),
            ca(UNKNOWN, A, "requests", 1)
        ]))
        .is_ok()
    );
}

#[test]
fn license_dispositions() {
    let v = check(&records(vec![
        ca(L1, A, "requests", 1),      // active, right account
        ca(L2, B, "requests", 1),      // ended
        ca(L1, B, "requests", 1),      // account is not the license's
        ca(UNKNOWN, A, "requests", 1), // unknown license
    ]))
    .expect("valid call");
    let billable = Disposition::Billable {
        product_code: "prod1".into(),
    };
    let got: Vec<_> = v.iter().map(|r| r.disposition.clone()).collect();
    assert_eq!(
        got,
        vec![
            billable,
            Disposition::NotSubscribed,
            Disposition::NotSubscribed,
            Disposition::NotSubscribed
        ]
    );
}

#[test]
fn legacy_rules() {
    let call = |code: Option<&str>, recs: Vec<Value>| {
        let mut b = json!({ "UsageRecords": recs });
        if let Some(c) = code {
            b["ProductCode"] = json!(c);
        }
        check(&body(b))
    };
    assert_eq!(
        call(None, vec![legacy("cust-active", "requests", 1)])
            .unwrap_err()
            .code,
        ErrorCode::Validation
    );
    assert_eq!(
        call(Some("Prod-1"), vec![legacy("cust-active", "requests", 1)])
            .unwrap_err()
            .code,
        ErrorCode::Validation
    );
    assert_eq!(
        call(
            Some("nosuchproduct"),
            vec![legacy("cust-active", "requests", 1)]
        )
        .unwrap_err()
        .code,
        ErrorCode::InvalidProductCode
    );
    assert_eq!(
        call(Some("prod1"), vec![legacy("cust-unknown", "requests", 1)])
            .unwrap_err()
            .code,
        ErrorCode::InvalidCustomerIdentifier
    );
    // The SDK's default empty identifier on a record with no identity is an unknown customer.
    assert_eq!(
        call(Some("prod1"), vec![legacy("", "requests", 1)])
            .unwrap_err()
            .code,
        ErrorCode::InvalidCustomerIdentifier
    );
    let v = call(
        Some("prod1"),
        vec![
            legacy("cust-active", "requests", 1),
            legacy("cust-ended", "requests", 1),
        ],
    )
    .unwrap();
    assert_eq!(
        v[0].disposition,
        Disposition::Billable {
            product_code: "prod1".into()
        }
    );
    assert_eq!(v[1].disposition, Disposition::NotSubscribed);
    assert_eq!(
        v[0].key.customer,
        CustomerKey::Identifier("cust-active".into())
    );
    assert_eq!(v[0].key.scope, ScopeKey::Product("prod1".into()));
}

// ---- dimensions ------------------------------------------------------------------------------

#[test]
fn dimensions_are_checked_case_sensitively_against_the_product() {
    assert!(check(&records(vec![ca(L1, A, "storage", 1)])).is_ok());
    assert_eq!(
        check_err(&records(vec![ca(L1, A, "Requests", 1)])),
        ErrorCode::InvalidUsageDimension
    );
    assert_eq!(
        check_err(&records(vec![ca(L1, A, "seats", 1)])),
        ErrorCode::InvalidUsageDimension,
        "prod2's dimension"
    );
    let b = json!({"ProductCode": "prod1", "UsageRecords": [legacy("cust-active", "nope", 1)]});
    assert_eq!(check_err(&body(b)), ErrorCode::InvalidUsageDimension);
}

#[test]
fn unknown_license_calls_check_dimensions_against_the_whole_catalog() {
    assert!(check(&records(vec![ca(UNKNOWN, A, "seats", 1)])).is_ok());
    assert_eq!(
        check_err(&records(vec![ca(UNKNOWN, A, "bogus", 1)])),
        ErrorCode::InvalidUsageDimension
    );
}

// ---- timestamps -----------------------------------------------------------------------------

fn at(t: DateTime<Utc>) -> Vec<u8> {
    let mut r = ca(L1, A, "requests", 1);
    r["Timestamp"] = json!(t.timestamp_millis() as f64 / 1000.0);
    records(vec![r])
}

#[test]
fn timestamps_must_lie_in_the_window() {
    let h = chrono::Duration::hours;
    assert!(check(&at(now())).is_ok(), "now itself");
    assert!(check(&at(now() - h(24))).is_ok(), "exactly 24 h old");
    assert_eq!(
        check_err(&at(now() - h(24) - chrono::Duration::seconds(1))),
        ErrorCode::TimestampOutOfBounds
    );
    assert_eq!(
        check_err(&at(now() + chrono::Duration::seconds(1))),
        ErrorCode::TimestampOutOfBounds
    );
    let req = parse_batch_request(&at(now() - h(7))).unwrap();
    let six = Limits {
        window_hours: 6,
        ..LIMITS
    };
    assert_eq!(
        validate_batch(&req, &catalog(), now(), six)
            .unwrap_err()
            .code,
        ErrorCode::TimestampOutOfBounds
    );
}

#[test]
fn one_bad_timestamp_fails_every_record() {
    let mut stale = ca(L1, A, "requests", 1);
    stale["Timestamp"] = json!(secs(now()) - 30 * 3600);
    assert_eq!(
        check_err(&records(vec![ca(L1, A, "requests", 1), stale])),
        ErrorCode::TimestampOutOfBounds
    );
}

#[test]
fn month_end_grace_accepts_previous_month_until_six_on_the_first() {
    let t = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
    // 27 h old, previous month, before 06:00 on the 1st: accepted.
    assert!(timestamp_in_window(
        t("2026-11-30T02:00:00Z"),
        t("2026-12-01T05:00:00Z"),
        24
    ));
    // Older than window + 6 h: rejected.
    assert!(!timestamp_in_window(
        t("2026-11-29T22:59:59Z"),
        t("2026-12-01T05:00:00Z"),
        24
    ));
    assert!(timestamp_in_window(
        t("2026-11-29T23:00:00Z"),
        t("2026-12-01T05:00:00Z"),
        24
    ));
    // From 06:00 the grace is over.
    assert!(!timestamp_in_window(
        t("2026-11-30T05:00:00Z"),
        t("2026-12-01T06:00:00Z"),
        24
    ));
    // Not the 1st: no grace.
    assert!(!timestamp_in_window(
        t("2026-12-01T00:00:00Z"),
        t("2026-12-02T03:00:00Z"),
        24
    ));
    // Year end.
    assert!(timestamp_in_window(
        t("2026-12-31T00:00:00Z"),
        t("2027-01-01T03:00:00Z"),
        24
    ));
    // Short window: grace is window + 6 h.
    assert!(timestamp_in_window(
        t("2026-11-30T20:00:00Z"),
        t("2026-12-01T05:00:00Z"),
        6
    ));
    assert!(!timestamp_in_window(
        t("2026-11-30T16:59:00Z"),
        t("2026-12-01T05:00:00Z"),
        6
    ));
    // The future is never in the window.
    assert!(!timestamp_in_window(
        t("2026-12-01T05:00:01Z"),
        t("2026-12-01T05:00:00Z"),
        24
    ));
}

// ---- allocations -----------------------------------------------------------------------------

fn with_allocs(qty: u64, allocs: Value) -> Vec<u8> {
    let mut r = ca(L1, A, "requests", qty);
    r["UsageAllocations"] = allocs;
    records(vec![r])
}

#[test]
fn valid_allocations_pass() {
    let b = with_allocs(
        5,
        json!([{"AllocatedUsageQuantity": 2, "Tags": [{"Key": "k", "Value": "a"}]},
               {"AllocatedUsageQuantity": 3, "Tags": [{"Key": "k1", "Value": "1"}, {"Key": "k2", "Value": "2"},
                   {"Key": "k3", "Value": "3"}, {"Key": "k4", "Value": "4"}, {"Key": "k5", "Value": "5"}]}]),
    );
    let v = check(&b).expect("valid");
    assert_eq!(
        v[0].record.usage_allocations.as_ref().map(Vec::len),
        Some(2)
    );
}

#[test]
fn tag_rules() {
    let tag = |k: &str, v: &str| json!({"Key": k, "Value": v});
    let six: Vec<Value> = (0..6).map(|i| tag(&format!("k{i}"), "v")).collect();
    for tags in [
        json!([]),
        json!(six),
        json!([tag("", "v")]),
        json!([tag("k", "")]),
        json!([{"Key": "k"}]),
    ] {
        let b = with_allocs(
            1,
            json!([{"AllocatedUsageQuantity": 1, "Tags": tags.clone()}]),
        );
        assert_eq!(check_err(&b), ErrorCode::InvalidTag, "{tags}");
    }
    let b = with_allocs(1, json!([{"AllocatedUsageQuantity": 1}]));
    assert_eq!(check_err(&b), ErrorCode::InvalidTag, "no Tags member");
}

#[test]
fn tag_lengths_and_pattern_are_validation_exceptions() {
    // API_Tag: Key 1-100, Value 1-256, both ^[a-zA-Z0-9+ -=._:\/@]+$.
    let tags = |k: &str, v: &str| {
        with_allocs(
            1,
            json!([{"AllocatedUsageQuantity": 1, "Tags": [{"Key": k, "Value": v}]}]),
        )
    };
    let (k100, v256) = ("k".repeat(100), "v".repeat(256));
    assert!(check(&tags(&k100, &v256)).is_ok(), "at the limits");
    assert!(
        check(&tags("a b+-=._:/@", "Z9!#%<;")).is_ok(),
        "the pattern's characters"
    );
    for (k, v) in [
        ("k".repeat(101), "v".to_owned()),
        ("k".to_owned(), "v".repeat(257)),
        ("a|b".to_owned(), "v".to_owned()),
        ("k".to_owned(), "clé".to_owned()),
        ("k".to_owned(), "tab\there".to_owned()),
    ] {
        assert_eq!(
            parse_err(&tags(&k, &v)),
            ErrorCode::Validation,
            "{k:?}={v:?}"
        );
    }
}

#[test]
fn allocation_rules() {
    let a = |q: u64| json!({"AllocatedUsageQuantity": q, "Tags": [{"Key": "k", "Value": "v"}]});
    assert_eq!(
        check_err(&with_allocs(0, json!([]))),
        ErrorCode::InvalidUsageAllocations,
        "empty list"
    );
    assert_eq!(
        check_err(&with_allocs(5, json!([a(2), a(2)]))),
        ErrorCode::InvalidUsageAllocations,
        "sum short"
    );
    assert_eq!(
        check_err(&with_allocs(3, json!([a(2), a(2)]))),
        ErrorCode::InvalidUsageAllocations,
        "sum over"
    );
    // LIMITS caps allocations at 3.
    assert!(check(&with_allocs(3, json!([a(1), a(1), a(1)]))).is_ok());
    assert_eq!(
        check_err(&with_allocs(4, json!([a(1), a(1), a(1), a(1)]))),
        ErrorCode::InvalidUsageAllocations
    );
    // Sums are computed without overflow.
    assert_eq!(
        check_err(&with_allocs(
            2147483647,
            json!([a(2147483647), a(2147483647)])
        )),
        ErrorCode::InvalidUsageAllocations
    );
}

// ---- keys ------------------------------------------------------------------------------------

#[test]
fn dedup_key_is_customer_license_dimension_and_utc_hour() {
    let mut r = ca(L1, A, "requests", 1);
    r["Timestamp"] = json!(secs(now()) - 3600 + 1799);
    let v = check(&records(vec![r])).unwrap();
    assert_eq!(
        v[0].key,
        DedupKey {
            customer: CustomerKey::Account(A.into()),
            scope: ScopeKey::License(L1.into()),
            dimension: "requests".into(),
            hour: Utc.with_ymd_and_hms(2026, 11, 30, 11, 0, 0).unwrap(),
        }
    );
    assert_eq!(
        hour_of(Utc.with_ymd_and_hms(2026, 11, 30, 11, 59, 59).unwrap()),
        Utc.with_ymd_and_hms(2026, 11, 30, 11, 0, 0).unwrap()
    );
}

#[test]
fn check_order_names_the_first_failing_rule() {
    // A bad dimension and a stale timestamp in one call: the dimension is reported.
    let mut r = ca(L1, A, "bogus", 1);
    r["Timestamp"] = json!(secs(now()) - 30 * 3600);
    assert_eq!(
        check_err(&records(vec![r])),
        ErrorCode::InvalidUsageDimension
    );
    // A malformed license beats a bad dimension.
    assert_eq!(
        check_err(&records(vec![ca("arn:bad", A, "bogus", 1)])),
        ErrorCode::InvalidLicense
    );
}

#[test]
fn an_empty_call_is_valid_and_does_nothing() {
    assert!(check(&records(vec![])).unwrap().is_empty());
}
