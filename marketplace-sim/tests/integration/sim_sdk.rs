//! The Marketplace simulator driven through the real `aws-sdk-marketplacemetering` client:
//! every rule, every fault, the admin API, ResolveCustomer, and `metering_client`'s fix for the
//! SDK's empty CustomerIdentifier. Each test runs its own simulator on 127.0.0.1:0, so these
//! need no emulator stack.

use std::time::{Duration, Instant};

use aws_config::{Region, retry::RetryConfig};
use aws_credential_types::Credentials;
use aws_sdk_marketplacemetering::Client;
use aws_sdk_marketplacemetering::operation::batch_meter_usage::{
    BatchMeterUsageError, BatchMeterUsageOutput,
};
use aws_sdk_marketplacemetering::types::{
    Tag, UsageAllocation, UsageRecord, UsageRecordResultStatus,
};
use aws_smithy_types::DateTime as SdkTime;
use awsmp_marketplace_sim::{Catalog, SimConfig, SimError, SimHandle, spawn_on};
use awsmp_pipeline::metering_client::metering_client;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

const L1: &str = "arn:aws:license-manager::123456789012:license:l-11111111111111111111111111111111";
const L2_ENDED: &str =
    "arn:aws:license-manager::123456789012:license:l-22222222222222222222222222222222";
const L3_OTHER_PRODUCT: &str =
    "arn:aws:license-manager::123456789012:license:l-33333333333333333333333333333333";
const L_UNKNOWN: &str =
    "arn:aws:license-manager::123456789012:license:l-99999999999999999999999999999999";
const ACCOUNT: &str = "111111111111";
const OTHER_ACCOUNT: &str = "222222222222";

fn catalog(rps: u32) -> Catalog {
    let far = (Utc::now() + chrono::Duration::days(3650)).to_rfc3339();
    let past = (Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
    Catalog::from_json(&format!(
        r#"{{"requestsPerSecond":{rps},"products":[
          {{"productCode":"prod1","dimensions":["requests","storage"],
            "licenses":[{{"licenseArn":"{L1}","customerAWSAccountId":"{ACCOUNT}","status":"active"}},
                        {{"licenseArn":"{L2_ENDED}","customerAWSAccountId":"{OTHER_ACCOUNT}","status":"ended"}}],
            "legacyCustomers":[{{"customerIdentifier":"cust-active","status":"active"}},
                               {{"customerIdentifier":"cust-ended","status":"ended"}}],
            "registrationTokens":[
              {{"token":"tok-good","licenseArn":"{L1}","customerAWSAccountId":"{ACCOUNT}","expiresAt":"{far}"}},
              {{"token":"tok-expired","licenseArn":"{L1}","customerAWSAccountId":"{ACCOUNT}","expiresAt":"{past}"}}]}},
          {{"productCode":"prod2","dimensions":["seats"],
            "licenses":[{{"licenseArn":"{L3_OTHER_PRODUCT}","customerAWSAccountId":"{ACCOUNT}","status":"active"}}]}}]}}"#
    ))
    .expect("test catalog")
}

struct Env {
    sim: SimHandle,
    /// `metering_client`: what awsmp uses.
    client: Client,
    /// The unmodified SDK client.
    plain: Client,
    admin: reqwest::Client,
}

async fn sdk_config(url: &str, retry: RetryConfig) -> aws_config::SdkConfig {
    awsmp_aws::sdk::config_loader()
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::from_keys("awsmp-test", "awsmp-test", None))
        .endpoint_url(url)
        .retry_config(retry)
        .load()
        .await
}

async fn start_with(config: SimConfig) -> Env {
    let sim = spawn_on("127.0.0.1:0".parse().unwrap(), config)
        .await
        .expect("sim starts");
    // Retries off: each test sees exactly what the simulator answered.
    let cfg = sdk_config(&sim.url(), RetryConfig::disabled()).await;
    Env {
        client: metering_client(&cfg),
        plain: Client::new(&cfg),
        admin: reqwest::Client::new(),
        sim,
    }
}

async fn start() -> Env {
    start_with(SimConfig::new(catalog(1000))).await
}

impl Env {
    async fn admin_get(&self, path: &str) -> Value {
        let resp = self
            .admin
            .get(format!("{}{path}", self.sim.url()))
            .send()
            .await
            .expect("admin GET");
        assert!(resp.status().is_success(), "GET {path}: {}", resp.status());
        resp.json().await.expect("admin JSON")
    }

    async fn admin_post(&self, path: &str, body: Value) -> (u16, Value) {
        let resp = self
            .admin
            .post(format!("{}{path}", self.sim.url()))
            .json(&body)
            .send()
            .await
            .expect("admin POST");
        let status = resp.status().as_u16();
        (status, resp.json().await.expect("admin JSON"))
    }

    async fn ledger(&self) -> Value {
        self.admin_get("/_sim/ledger").await
    }

    async fn faults(&self, faults: Value) {
        let (status, body) = self.admin_post("/_sim/faults", faults).await;
        assert_eq!(status, 200, "{body}");
    }

    async fn meter(
        &self,
        records: Vec<UsageRecord>,
    ) -> Result<
        BatchMeterUsageOutput,
        aws_sdk_marketplacemetering::error::SdkError<BatchMeterUsageError>,
    > {
        self.client
            .batch_meter_usage()
            .set_usage_records(Some(records))
            .send()
            .await
    }

    async fn meter_err(&self, records: Vec<UsageRecord>) -> BatchMeterUsageError {
        self.meter(records)
            .await
            .expect_err("call should fail")
            .into_service_error()
    }
}

/// One usage time for the whole test run: 30 minutes into the hour before last, so every
/// record built from it (and from it plus a few seconds) falls in one known hour.
fn base() -> DateTime<Utc> {
    static BASE: std::sync::OnceLock<DateTime<Utc>> = std::sync::OnceLock::new();
    *BASE.get_or_init(|| {
        let t = Utc::now() - chrono::Duration::hours(1);
        let hour = DateTime::from_timestamp(t.timestamp() - t.timestamp() % 3600, 0).unwrap();
        hour + chrono::Duration::minutes(30)
    })
}

fn sdk_time(t: DateTime<Utc>) -> SdkTime {
    SdkTime::from_secs(t.timestamp())
}

fn ca_at(t: DateTime<Utc>, license: &str, account: &str, dim: &str, qty: i32) -> UsageRecord {
    UsageRecord::builder()
        .timestamp(sdk_time(t))
        .dimension(dim)
        .quantity(qty)
        .customer_aws_account_id(account)
        .license_arn(license)
        .build()
        .unwrap()
}

fn ca(license: &str, dim: &str, qty: i32) -> UsageRecord {
    ca_at(base(), license, ACCOUNT, dim, qty)
}

fn legacy(customer: &str, dim: &str, qty: i32) -> UsageRecord {
    UsageRecord::builder()
        .timestamp(sdk_time(base()))
        .customer_identifier(customer)
        .dimension(dim)
        .quantity(qty)
        .build()
        .unwrap()
}

fn allocation(qty: i32, tags: &[(&str, &str)]) -> UsageAllocation {
    let mut b = UsageAllocation::builder().allocated_usage_quantity(qty);
    for (k, v) in tags {
        b = b.tags(Tag::builder().key(*k).value(*v).build().unwrap());
    }
    b.build().unwrap()
}

fn with_allocations(mut r: UsageRecord, allocs: Vec<UsageAllocation>) -> UsageRecord {
    r.usage_allocations = Some(allocs);
    r
}

fn status_of(out: &BatchMeterUsageOutput, i: usize) -> (UsageRecordResultStatus, Option<String>) {
    let r = &out.results()[i];
    (
        r.status().cloned().expect("status"),
        r.metering_record_id().map(str::to_owned),
    )
}

// ---- billing and dedup ---------------------------------------------------------------------

#[tokio::test]
async fn identical_retry_is_success_with_the_same_metering_record_id() {
    let env = start().await;
    let rec = ca(L1, "requests", 42);
    let first = env.meter(vec![rec.clone()]).await.expect("first call");
    let (status, id) = status_of(&first, 0);
    assert_eq!(status, UsageRecordResultStatus::Success);
    let id = id.expect("Success carries a MeteringRecordId");
    let echoed = first.results()[0].usage_record().expect("record echoed");
    assert_eq!(echoed.quantity(), Some(42));
    assert_eq!(echoed.license_arn(), Some(L1));
    assert_eq!(echoed.timestamp(), rec.timestamp());

    let again = env.meter(vec![rec]).await.expect("retry");
    assert_eq!(
        status_of(&again, 0),
        (UsageRecordResultStatus::Success, Some(id.clone()))
    );

    let ledger = env.ledger().await;
    assert_eq!(ledger["records"].as_array().unwrap().len(), 1);
    let billed = &ledger["records"][0];
    assert_eq!(billed["quantity"], 42);
    assert_eq!(billed["meteringRecordId"], id.as_str());
    assert_eq!(billed["licenseArn"], L1);
    assert_eq!(billed["customerAWSAccountId"], ACCOUNT);
    assert_eq!(billed["customerIdentifier"], Value::Null);
    assert_eq!(billed["productCode"], "prod1");
    assert_eq!(billed["dimension"], "requests");
    assert_eq!(billed["hour"], base().format("%Y-%m-%dT%H").to_string());
    assert_eq!(ledger["counters"]["success"], 1);
    assert_eq!(ledger["counters"]["identicalRetries"], 1);
}

#[tokio::test]
async fn different_quantity_in_the_same_hour_is_duplicate_record_and_first_quantity_stays_billed() {
    let env = start().await;
    let first = env.meter(vec![ca(L1, "requests", 10)]).await.unwrap();
    let (_, id) = status_of(&first, 0);
    // Same key (another second of the same hour), different quantity.
    let later = ca_at(
        base() + chrono::Duration::seconds(1),
        L1,
        ACCOUNT,
        "requests",
        11,
    );
    let out = env.meter(vec![later]).await.unwrap();
    assert_eq!(
        status_of(&out, 0),
        (UsageRecordResultStatus::DuplicateRecord, id.clone())
    );

    let ledger = env.ledger().await;
    assert_eq!(ledger["records"][0]["quantity"], 10);
    let dup = &ledger["duplicates"][0];
    assert_eq!(dup["billedQuantity"], 10);
    assert_eq!(dup["attemptedQuantity"], 11);
    assert_eq!(dup["meteringRecordId"], id.unwrap().as_str());
    assert_eq!(dup["licenseArn"], L1);
    assert!(dup["at"].is_string());
    assert_eq!(ledger["counters"]["duplicateRecord"], 1);
}

#[tokio::test]
async fn different_allocations_are_a_duplicate_but_reordered_ones_are_a_retry() {
    let env = start().await;
    let a = allocation(2, &[("team", "a")]);
    let b = allocation(3, &[("team", "b")]);
    let rec = |allocs| with_allocations(ca(L1, "storage", 5), allocs);
    env.meter(vec![rec(vec![a.clone(), b.clone()])])
        .await
        .unwrap();
    let retry = env
        .meter(vec![rec(vec![b.clone(), a.clone()])])
        .await
        .unwrap();
    assert_eq!(status_of(&retry, 0).0, UsageRecordResultStatus::Success);
    let moved = vec![
        allocation(3, &[("team", "a")]),
        allocation(2, &[("team", "b")]),
    ];
    let dup = env.meter(vec![rec(moved)]).await.unwrap();
    assert_eq!(
        status_of(&dup, 0).0,
        UsageRecordResultStatus::DuplicateRecord
    );
    let ledger = env.ledger().await;
    assert_eq!(
        ledger["records"][0]["usageAllocations"],
        json!([{"AllocatedUsageQuantity":2,"Tags":[{"Key":"team","Value":"a"}]},
               {"AllocatedUsageQuantity":3,"Tags":[{"Key":"team","Value":"b"}]}])
    );
}

#[tokio::test]
async fn unsubscribed_customers_get_customer_not_subscribed_without_an_id() {
    let env = start().await;
    let out = env
        .meter(vec![
            ca_at(base(), L2_ENDED, OTHER_ACCOUNT, "requests", 1),
            ca_at(base(), L1, OTHER_ACCOUNT, "requests", 1),
            ca(L_UNKNOWN, "requests", 1),
            ca(L1, "requests", 1),
        ])
        .await
        .unwrap();
    for i in 0..3 {
        assert_eq!(
            status_of(&out, i),
            (UsageRecordResultStatus::CustomerNotSubscribed, None),
            "record {i}"
        );
    }
    assert_eq!(status_of(&out, 3).0, UsageRecordResultStatus::Success);
    let ledger = env.ledger().await;
    assert_eq!(ledger["records"].as_array().unwrap().len(), 1);
    assert_eq!(ledger["counters"]["customerNotSubscribed"], 3);
}

#[tokio::test]
async fn legacy_customer_identifier_records_bill_under_the_product() {
    let env = start().await;
    // Legacy records carry a real CustomerIdentifier, so the plain SDK client is fine.
    let out = env
        .plain
        .batch_meter_usage()
        .product_code("prod1")
        .usage_records(legacy("cust-active", "requests", 3))
        .usage_records(legacy("cust-ended", "requests", 3))
        .send()
        .await
        .expect("legacy call");
    assert_eq!(status_of(&out, 0).0, UsageRecordResultStatus::Success);
    assert_eq!(
        status_of(&out, 1).0,
        UsageRecordResultStatus::CustomerNotSubscribed
    );
    // metering_client leaves a non-empty identifier alone: identical retry.
    let again = env
        .client
        .batch_meter_usage()
        .product_code("prod1")
        .usage_records(legacy("cust-active", "requests", 3))
        .send()
        .await
        .unwrap();
    assert_eq!(status_of(&again, 0), status_of(&out, 0));
    let ledger = env.ledger().await;
    let billed = &ledger["records"][0];
    assert_eq!(billed["customerIdentifier"], "cust-active");
    assert_eq!(billed["licenseArn"], Value::Null);
    assert_eq!(billed["productCode"], "prod1");
}

// ---- the SDK's empty CustomerIdentifier -------------------------------------------------------

#[tokio::test]
async fn plain_sdk_client_gets_validation_exception_and_metering_client_succeeds() {
    let env = start().await;
    let err = env
        .plain
        .batch_meter_usage()
        .usage_records(ca(L1, "requests", 1))
        .send()
        .await
        .expect_err("the plain SDK sends CustomerIdentifier \"\"");
    assert_eq!(err.raw_response().map(|r| r.status().as_u16()), Some(400));
    let err = err.into_service_error();
    // ValidationException is not modelled for BatchMeterUsage: it arrives as an unhandled
    // error with its code.
    use aws_sdk_marketplacemetering::error::ProvideErrorMetadata;
    assert_eq!(err.code(), Some("ValidationException"));
    assert!(
        err.message()
            .unwrap_or_default()
            .contains("mutually exclusive")
    );
    assert_eq!(env.ledger().await["records"].as_array().unwrap().len(), 0);

    let out = env
        .client
        .batch_meter_usage()
        .usage_records(ca(L1, "requests", 1))
        .send()
        .await
        .expect("fixed client");
    assert_eq!(status_of(&out, 0).0, UsageRecordResultStatus::Success);
}

// ---- request-level exceptions ----------------------------------------------------------------

type Check = fn(&BatchMeterUsageError) -> bool;

/// Calls that fail as a whole, with the typed error each must arrive as.
fn request_level_cases() -> Vec<(&'static str, Vec<UsageRecord>, Check)> {
    let mut cases = identity_cases();
    cases.extend(allocation_cases());
    cases
}

/// Dimensions, timestamps and licenses.
fn identity_cases() -> Vec<(&'static str, Vec<UsageRecord>, Check)> {
    let good = || ca(L1, "requests", 1);
    let stale = ca_at(
        Utc::now() - chrono::Duration::hours(25),
        L1,
        ACCOUNT,
        "requests",
        1,
    );
    let future = ca_at(
        Utc::now() + chrono::Duration::minutes(5),
        L1,
        ACCOUNT,
        "requests",
        1,
    );
    vec![
        (
            "unknown dimension",
            vec![good(), ca(L1, "Requests", 1)],
            BatchMeterUsageError::is_invalid_usage_dimension_exception,
        ),
        (
            "other product's dimension",
            vec![ca(L1, "seats", 1)],
            BatchMeterUsageError::is_invalid_usage_dimension_exception,
        ),
        (
            "stale timestamp",
            vec![good(), stale],
            BatchMeterUsageError::is_timestamp_out_of_bounds_exception,
        ),
        (
            "future timestamp",
            vec![future],
            BatchMeterUsageError::is_timestamp_out_of_bounds_exception,
        ),
        (
            "malformed license",
            vec![
                good(),
                ca(
                    "arn:aws:license-manager::123456789012:license:l-bad",
                    "requests",
                    1,
                ),
            ],
            BatchMeterUsageError::is_invalid_license_exception,
        ),
        (
            "two products",
            vec![good(), ca(L3_OTHER_PRODUCT, "seats", 1)],
            BatchMeterUsageError::is_invalid_license_exception,
        ),
    ]
}

/// Tags and allocations.
fn allocation_cases() -> Vec<(&'static str, Vec<UsageRecord>, Check)> {
    let six_tags: Vec<(&str, &str)> = vec![
        ("a", "1"),
        ("b", "1"),
        ("c", "1"),
        ("d", "1"),
        ("e", "1"),
        ("f", "1"),
    ];
    vec![
        (
            "six tags",
            vec![with_allocations(
                ca(L1, "requests", 1),
                vec![allocation(1, &six_tags)],
            )],
            BatchMeterUsageError::is_invalid_tag_exception,
        ),
        (
            "empty tag value",
            vec![with_allocations(
                ca(L1, "requests", 1),
                vec![allocation(1, &[("k", "")])],
            )],
            BatchMeterUsageError::is_invalid_tag_exception,
        ),
        (
            "allocations do not sum",
            vec![with_allocations(
                ca(L1, "requests", 5),
                vec![allocation(2, &[("k", "v")])],
            )],
            BatchMeterUsageError::is_invalid_usage_allocations_exception,
        ),
        (
            "empty allocations",
            vec![with_allocations(ca(L1, "requests", 0), vec![])],
            BatchMeterUsageError::is_invalid_usage_allocations_exception,
        ),
    ]
}

#[tokio::test]
async fn request_level_exceptions_arrive_as_typed_sdk_errors_and_bill_nothing() {
    let env = start().await;
    for (name, records, is_expected) in request_level_cases() {
        let err = env.meter_err(records).await;
        assert!(is_expected(&err), "{name}: got {err:?}");
    }
    // Legacy-only exceptions, through the plain client.
    let legacy_err = |code: &'static str, customer: &'static str| {
        let plain = env.plain.clone();
        async move {
            plain
                .batch_meter_usage()
                .product_code(code)
                .usage_records(legacy(customer, "requests", 1))
                .send()
                .await
                .expect_err("legacy call should fail")
                .into_service_error()
        }
    };
    assert!(
        legacy_err("nosuchproduct", "cust-active")
            .await
            .is_invalid_product_code_exception()
    );
    assert!(
        legacy_err("prod1", "cust-unknown")
            .await
            .is_invalid_customer_identifier_exception()
    );

    let ledger = env.ledger().await;
    assert_eq!(
        ledger["records"].as_array().unwrap().len(),
        0,
        "no failed call billed anything"
    );
    let errors = &ledger["counters"]["requestErrors"];
    assert_eq!(errors["InvalidUsageDimensionException"], 2);
    assert_eq!(errors["TimestampOutOfBoundsException"], 2);
    assert_eq!(errors["InvalidLicenseException"], 2);
    assert_eq!(errors["InvalidTagException"], 2);
    assert_eq!(errors["InvalidUsageAllocationsException"], 2);
    assert_eq!(errors["InvalidProductCodeException"], 1);
    assert_eq!(errors["InvalidCustomerIdentifierException"], 1);
}

#[tokio::test]
async fn validation_exceptions_for_shape_violations() {
    use aws_sdk_marketplacemetering::error::ProvideErrorMetadata;
    let env = start().await;
    let code = |e: BatchMeterUsageError| e.code().map(str::to_owned);
    let validation = Some("ValidationException".to_owned());

    let too_many: Vec<UsageRecord> = (0..26).map(|i| ca(L1, "requests", i)).collect();
    assert_eq!(
        code(env.meter_err(too_many).await),
        validation,
        "26 records"
    );

    // CA with ProductCode.
    let err = env
        .client
        .batch_meter_usage()
        .product_code("prod1")
        .usage_records(ca(L1, "requests", 1))
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(code(err), validation, "ProductCode with LicenseArn");

    // CA and legacy mixed.
    let err = env
        .client
        .batch_meter_usage()
        .usage_records(ca(L1, "requests", 1))
        .usage_records(legacy("cust-active", "requests", 1))
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(code(err), validation, "mixed CA and legacy");

    assert_eq!(
        code(env.meter_err(vec![ca(L1, "requests", -1)]).await),
        validation,
        "negative quantity"
    );

    // More than 1 MB: many allocations with long tag values.
    let value = "v".repeat(60);
    let allocs: Vec<UsageAllocation> = (0..2500)
        .map(|_| allocation(1, &[("k", value.as_str())]))
        .collect();
    let big: Vec<UsageRecord> = (0..10)
        .map(|i| {
            with_allocations(
                ca(L1, if i % 2 == 0 { "requests" } else { "storage" }, 2500),
                allocs.clone(),
            )
        })
        .collect();
    assert_eq!(
        code(env.meter_err(big).await),
        validation,
        "request over 1 MB"
    );

    let ledger = env.ledger().await;
    assert_eq!(ledger["records"].as_array().unwrap().len(), 0);
    assert_eq!(
        ledger["counters"]["requestErrors"]["ValidationException"],
        5
    );
}

#[tokio::test]
async fn quota_overrun_is_throttling_exception() {
    let env = start_with(SimConfig::new(catalog(2))).await;
    env.meter(vec![ca(L1, "requests", 1)])
        .await
        .expect("1st within burst");
    env.meter(vec![ca(L1, "storage", 1)])
        .await
        .expect("2nd within burst");
    let err = env
        .meter_err(vec![ca_at(
            base() - chrono::Duration::hours(1),
            L1,
            ACCOUNT,
            "requests",
            1,
        )])
        .await;
    assert!(err.is_throttling_exception(), "{err:?}");
    let ledger = env.ledger().await;
    assert_eq!(ledger["records"].as_array().unwrap().len(), 2);
    assert_eq!(ledger["counters"]["throttled"], 1);
    assert_eq!(ledger["counters"]["requests"], 3);
}

#[tokio::test]
async fn disabled_region_answers_disabled_api_exception() {
    let mut config = SimConfig::new(catalog(1000));
    config.disabled = true;
    config.region = "ap-east-9".into();
    let env = start_with(config).await;
    let err = env.meter_err(vec![ca(L1, "requests", 1)]).await;
    assert!(err.is_disabled_api_exception(), "{err:?}");
    assert_eq!(env.ledger().await["region"], "ap-east-9");
}

// ---- faults -----------------------------------------------------------------------------------

#[tokio::test]
async fn injected_throttle_and_internal_error_apply_nothing() {
    let env = start().await;
    env.faults(json!({"throttleRate": 1.0})).await;
    assert!(
        env.meter_err(vec![ca(L1, "requests", 1)])
            .await
            .is_throttling_exception()
    );
    env.faults(json!({"internalErrorRate": 1.0})).await;
    let err = env.meter(vec![ca(L1, "requests", 1)]).await.unwrap_err();
    assert_eq!(err.raw_response().map(|r| r.status().as_u16()), Some(500));
    assert!(
        err.into_service_error()
            .is_internal_service_error_exception()
    );
    let ledger = env.ledger().await;
    assert_eq!(ledger["records"].as_array().unwrap().len(), 0);
    assert_eq!(ledger["counters"]["throttled"], 1);
    assert_eq!(ledger["counters"]["internalErrors"], 1);
}

#[tokio::test]
async fn unprocessed_records_come_back_unbilled() {
    let env = start().await;
    env.faults(json!({"unprocessedRate": 1.0})).await;
    let out = env
        .meter(vec![ca(L1, "requests", 7), ca(L1, "storage", 8)])
        .await
        .unwrap();
    assert!(out.results().is_empty());
    let unprocessed = out.unprocessed_records();
    assert_eq!(unprocessed.len(), 2);
    assert_eq!(unprocessed[1].quantity(), Some(8));
    assert_eq!(unprocessed[1].dimension(), "storage");
    let ledger = env.ledger().await;
    assert_eq!(ledger["records"].as_array().unwrap().len(), 0);
    assert_eq!(ledger["counters"]["unprocessed"], 2);
    // Resubmitted without the fault, they bill normally.
    env.faults(json!({})).await;
    let out = env.meter(unprocessed.to_vec()).await.unwrap();
    assert_eq!(out.results().len(), 2);
    assert_eq!(env.ledger().await["records"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn apply_then_fail_bills_although_the_caller_sees_an_error() {
    let env = start().await;
    env.faults(json!({"applyThenFailRate": 1.0})).await;
    let err = env.meter(vec![ca(L1, "requests", 9)]).await.unwrap_err();
    assert_eq!(err.raw_response().map(|r| r.status().as_u16()), Some(500));
    assert!(
        err.into_service_error()
            .is_internal_service_error_exception()
    );
    let ledger = env.ledger().await;
    assert_eq!(ledger["records"][0]["quantity"], 9, "billed");
    assert_eq!(ledger["counters"]["applyThenFail"], 1);
    let id = ledger["records"][0]["meteringRecordId"]
        .as_str()
        .unwrap()
        .to_owned();

    // The SDK's own retry after the fault clears is an identical resubmission.
    env.faults(json!({})).await;
    let out = env.meter(vec![ca(L1, "requests", 9)]).await.unwrap();
    assert_eq!(
        status_of(&out, 0),
        (UsageRecordResultStatus::Success, Some(id))
    );
    assert_eq!(env.ledger().await["records"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn sdk_standard_retry_recovers_from_injected_throttling() {
    let env = start().await;
    // seed 7 at 60%: the fault sequence is fixed, so whether this run needs retries is too.
    env.faults(json!({"throttleRate": 0.6, "seed": 7})).await;
    let cfg = sdk_config(
        &env.sim.url(),
        RetryConfig::standard()
            .with_max_attempts(10)
            .with_initial_backoff(Duration::from_millis(10))
            .with_max_backoff(Duration::from_millis(50)),
    )
    .await;
    let retrying = metering_client(&cfg);
    for (i, dim) in ["requests", "storage"].iter().enumerate() {
        let out = retrying
            .batch_meter_usage()
            .usage_records(ca(L1, dim, 1))
            .send()
            .await
            .expect("retries get through");
        assert_eq!(
            status_of(&out, 0).0,
            UsageRecordResultStatus::Success,
            "call {i}"
        );
    }
    let ledger = env.ledger().await;
    assert_eq!(ledger["records"].as_array().unwrap().len(), 2);
    assert!(
        ledger["counters"]["throttled"].as_u64().unwrap() > 0,
        "seed 7 throttles at least once"
    );
    assert_eq!(
        ledger["counters"]["requests"].as_u64().unwrap(),
        2 + ledger["counters"]["throttled"].as_u64().unwrap()
    );
}

#[tokio::test]
async fn latency_fault_delays_each_call() {
    let env = start().await;
    env.faults(json!({"latencyMs": 300})).await;
    let started = Instant::now();
    env.meter(vec![ca(L1, "requests", 1)]).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "the sim waited before answering"
    );
    assert_eq!(env.admin_get("/_sim/faults").await["latencyMs"], 300);
}

#[tokio::test]
async fn invalid_faults_are_refused() {
    let env = start().await;
    let (status, body) = env
        .admin_post("/_sim/faults", json!({"throttleRate": 2.0}))
        .await;
    assert_eq!(status, 400);
    assert!(body["error"].as_str().unwrap().contains("throttleRate"));
    let (status, _) = env
        .admin_post("/_sim/faults", json!({"throttle": 0.1}))
        .await;
    assert_eq!(status, 400);
    assert_eq!(env.admin_get("/_sim/faults").await["throttleRate"], 0.0);
}

#[tokio::test]
async fn start_time_faults_are_active_from_the_first_call() {
    let mut config = SimConfig::new(catalog(1000));
    config.faults = awsmp_marketplace_sim::Faults::from_json(r#"{"throttleRate":1.0}"#).unwrap();
    let env = start_with(config).await;
    assert!(
        env.meter_err(vec![ca(L1, "requests", 1)])
            .await
            .is_throttling_exception()
    );
}

// ---- admin API --------------------------------------------------------------------------------

#[tokio::test]
async fn clock_endpoint_moves_the_window_and_returns_to_real_time() {
    let env = start().await;
    let fixed = "2026-06-15T12:30:00Z";
    let (status, body) = env.admin_post("/_sim/clock", json!({"now": fixed})).await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"now": "2026-06-15T12:30:00.000Z", "fixed": true})
    );
    let t = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);

    // In the fixed clock's window: billed; the real "one hour ago" is now in the future.
    let out = env
        .meter(vec![ca_at(
            t("2026-06-15T11:59:00Z"),
            L1,
            ACCOUNT,
            "requests",
            1,
        )])
        .await
        .unwrap();
    assert_eq!(status_of(&out, 0).0, UsageRecordResultStatus::Success);
    assert!(
        env.meter_err(vec![ca(L1, "requests", 1)])
            .await
            .is_timestamp_out_of_bounds_exception()
    );
    assert_eq!(
        env.ledger().await["records"][0]["firstSeen"],
        "2026-06-15T12:30:00.000Z"
    );

    // Month-end grace at the fixed clock: 27 h old, previous month, before 06:00 on the 1st.
    env.admin_post("/_sim/clock", json!({"now": "2026-07-01T05:00:00Z"}))
        .await;
    let out = env
        .meter(vec![ca_at(
            t("2026-06-30T02:00:00Z"),
            L1,
            ACCOUNT,
            "requests",
            1,
        )])
        .await
        .unwrap();
    assert_eq!(status_of(&out, 0).0, UsageRecordResultStatus::Success);
    env.admin_post("/_sim/clock", json!({"now": "2026-07-01T06:00:00Z"}))
        .await;
    let err = env
        .meter_err(vec![ca_at(
            t("2026-06-30T02:00:00Z"),
            L1,
            ACCOUNT,
            "storage",
            1,
        )])
        .await;
    assert!(err.is_timestamp_out_of_bounds_exception());

    let (_, body) = env.admin_post("/_sim/clock", json!({"now": null})).await;
    assert_eq!(body["fixed"], false);
    let out = env.meter(vec![ca(L1, "requests", 1)]).await.unwrap();
    assert_eq!(status_of(&out, 0).0, UsageRecordResultStatus::Success);

    let (status, _) = env
        .admin_post("/_sim/clock", json!({"now": "yesterday"}))
        .await;
    assert_eq!(status, 400);
    let (status, _) = env.admin_post("/_sim/clock", json!({})).await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn reset_clears_ledger_counters_and_faults_and_keeps_the_catalog() {
    let env = start().await;
    env.meter(vec![ca(L1, "requests", 1)]).await.unwrap();
    env.meter(vec![ca(L1, "requests", 2)]).await.unwrap();
    env.faults(json!({"unprocessedRate": 1.0, "seed": 5})).await;
    let (status, body) = env.admin_post("/_sim/reset", json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(body["records"], json!([]));
    assert_eq!(body["duplicates"], json!([]));
    assert_eq!(body["counters"]["requests"], 0);
    assert_eq!(env.admin_get("/_sim/faults").await["unprocessedRate"], 0.0);
    // Same key as before the reset: billed afresh, with the catalog still in place.
    let out = env.meter(vec![ca(L1, "requests", 2)]).await.unwrap();
    assert_eq!(status_of(&out, 0).0, UsageRecordResultStatus::Success);
    let ledger = env.ledger().await;
    assert_eq!(ledger["records"][0]["quantity"], 2);
    assert_eq!(ledger["counters"]["success"], 1);
}

#[tokio::test]
async fn ledger_counts_every_outcome() {
    let env = start().await;
    env.meter(vec![ca(L1, "requests", 1), ca(L2_ENDED, "requests", 1)])
        .await
        .unwrap();
    env.meter(vec![ca(L1, "requests", 1), ca(L1, "requests", 5)])
        .await
        .unwrap();
    env.meter_err(vec![ca(L1, "nope", 1)]).await;
    let c = &env.ledger().await["counters"];
    assert_eq!(
        *c,
        json!({"requests":3,"throttled":0,"internalErrors":0,"applyThenFail":0,"unprocessed":0,"success":1,
               "identicalRetries":1,"duplicateRecord":1,"customerNotSubscribed":1,
               "requestErrors":{"InvalidUsageDimensionException":1}})
    );
}

#[tokio::test]
async fn unknown_operations_are_refused_in_the_aws_error_shape() {
    let env = start().await;
    let resp = env
        .admin
        .post(env.sim.url())
        .header("x-amz-target", "AWSMPMeteringService.MeterUsage")
        .header("content-type", "application/x-amz-json-1.1")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    assert_eq!(
        resp.headers()["x-amzn-errortype"],
        "UnknownOperationException"
    );
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["__type"], "UnknownOperationException");
}

// ---- ResolveCustomer ---------------------------------------------------------------------------

#[tokio::test]
async fn resolve_customer_outcomes() {
    let env = start().await;
    let out = env
        .plain
        .resolve_customer()
        .registration_token("tok-good")
        .send()
        .await
        .expect("resolves");
    assert_eq!(out.customer_aws_account_id(), Some(ACCOUNT));
    assert_eq!(out.license_arn(), Some(L1));
    assert_eq!(out.product_code(), Some("prod1"));
    assert_eq!(
        out.customer_identifier(),
        None,
        "deprecated for CA products"
    );
    // Reusable until it expires.
    assert!(
        env.plain
            .resolve_customer()
            .registration_token("tok-good")
            .send()
            .await
            .is_ok()
    );

    let err = env
        .plain
        .resolve_customer()
        .registration_token("tok-expired")
        .send()
        .await
        .unwrap_err();
    assert!(err.into_service_error().is_expired_token_exception());
    let err = env
        .plain
        .resolve_customer()
        .registration_token("tok-nope")
        .send()
        .await
        .unwrap_err();
    assert!(err.into_service_error().is_invalid_token_exception());

    // The sim clock decides expiry.
    let later = (Utc::now() + chrono::Duration::days(3651)).to_rfc3339();
    env.admin_post("/_sim/clock", json!({ "now": later })).await;
    let err = env
        .plain
        .resolve_customer()
        .registration_token("tok-good")
        .send()
        .await
        .unwrap_err();
    assert!(err.into_service_error().is_expired_token_exception());
}

// ---- lifecycle ----------------------------------------------------------------------------------

#[tokio::test]
async fn refuses_non_loopback_addresses() {
    let err = spawn_on("0.0.0.0:0".parse().unwrap(), SimConfig::new(catalog(10)))
        .await
        .unwrap_err();
    assert!(matches!(err, SimError::NotLoopback(_)), "{err}");
}

#[tokio::test]
async fn shutdown_stops_serving() {
    let env = start().await;
    let url = env.sim.url();
    env.meter(vec![ca(L1, "requests", 1)]).await.unwrap();
    assert_eq!(
        env.sim.ledger().records().len(),
        1,
        "in-process view of the ledger"
    );
    let Env { sim, .. } = env;
    tokio::time::timeout(Duration::from_secs(10), sim.shutdown())
        .await
        .expect("shuts down promptly")
        .unwrap();
    assert!(
        reqwest::get(format!("{url}/_sim/ledger")).await.is_err(),
        "port closed"
    );
}
