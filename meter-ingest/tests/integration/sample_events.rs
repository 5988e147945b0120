//! infra/events/meter-ingest.json, the payload a module's async invoke delivers
//! (docs/meter-ingest.md, "Payload"), run through the real meter-ingest handler on the memory
//! adapters, configured as the ingest template configures the function (its environment is
//! the stage name, its allowlist the stack's account).

use std::collections::HashSet;
use std::sync::Arc;

use awsmp_contract::clock::FixedClock;
use awsmp_contract::reasons;
use awsmp_meter_ingest::IngestError;
use awsmp_meter_ingest::adapters::memory::MemoryIngestStores;
use awsmp_meter_ingest::identity::Allowlist;
use awsmp_meter_ingest::mapping::{LicenseGrant, MappingEntry};
use awsmp_meter_ingest::ports::MappingStore;
use awsmp_meter_ingest::{IngestReport, IngestSettings, Invocation, MeterIngest, Outcome};
use chrono::{DateTime, Duration, Utc};
use serde_json::Value;

const STACK_ACCOUNT: &str = "123456789012";
const FUNCTION: &str =
    "arn:aws:lambda:us-east-1:123456789012:function:awsmp-test-abc123xyz-meter-ingest";
const LICENSE: &str =
    "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";
const BUYER: &str = "111122223333";

fn sample() -> Value {
    let path = format!(
        "{}/../infra/events/meter-ingest.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).expect("JSON")
}

/// The first sample event's `recordedAtHint`.
fn hint() -> DateTime<Utc> {
    sample()["events"][0]["recordedAtHint"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

fn alias(module: &str) -> String {
    format!("{FUNCTION}:{module}")
}

async fn ingest(received_at: DateTime<Utc>) -> (MemoryIngestStores, MeterIngest) {
    let stores = MemoryIngestStores::new();
    let entry = MappingEntry {
        invoked_arn: alias("module-a"),
        environment: "test".into(),
        app_id: Some("app-1".into()),
        licenses: vec![LicenseGrant {
            license_arn: LICENSE.into(),
            customer_aws_account_id: BUYER.into(),
        }],
        dimensions: vec!["api_calls".into()],
        max_events_per_second: 10,
        max_quantity: 1_000,
    };
    stores.mappings.put(&entry).await.unwrap();
    let settings = IngestSettings {
        allowlist: Allowlist {
            environment: "test".into(),
            accounts: HashSet::from([STACK_ACCOUNT.to_owned()]),
        },
        ..IngestSettings::default()
    };
    let ingest = stores.ingest(settings, Arc::new(FixedClock::new(received_at)));
    (stores, ingest)
}

fn invocation(invoked_arn: &str, request_id: &str, payload: Value) -> Invocation {
    Invocation {
        invoked_arn: invoked_arn.to_owned(),
        request_id: request_id.to_owned(),
        payload,
    }
}

fn only(r: &IngestReport) -> (Outcome, &'static str) {
    assert_eq!(r.events.len(), 1, "{r:?}");
    (r.events[0].outcome, r.events[0].reason.unwrap_or(""))
}

#[tokio::test]
async fn the_sample_is_accepted_once_attributed_from_the_mapping() {
    let received = hint() + Duration::seconds(1);
    let (stores, ingest) = ingest(received).await;
    let inv = invocation(&alias("module-a"), "req-1", sample());
    let r = ingest.handle(&inv).await.unwrap();
    assert_eq!((r.accepted, r.duplicates, r.held, r.rejected), (1, 0, 0, 0));
    assert_eq!(r.module, "module-a");
    let streamed = stores.stream.events().unwrap();
    assert_eq!(streamed.len(), 1);
    let e = &streamed[0];
    assert_eq!(
        (e.license_arn.as_str(), e.customer_aws_account_id.as_str()),
        (LICENSE, BUYER)
    );
    assert_eq!((e.dimension.as_str(), e.quantity), ("api_calls", 3));
    assert_eq!(
        e.timestamp, received,
        "billed at receive time, not the hint"
    );
    // Lambda retries an async invocation: the same payload again is a duplicate.
    let again = ingest
        .handle(&invocation(&alias("module-a"), "req-2", sample()))
        .await
        .unwrap();
    assert_eq!(only(&again).0, Outcome::Duplicate);
    assert_eq!(stores.stream.events().unwrap().len(), 1);
}

#[tokio::test]
async fn the_sample_through_the_wrong_door_is_refused_with_its_reason() {
    let received = hint() + Duration::seconds(1);
    let (stores, ingest) = ingest(received).await;
    let call = |arn: String| {
        let ingest = &ingest;
        async move {
            ingest
                .handle(&invocation(&arn, "req", sample()))
                .await
                .unwrap()
        }
    };
    let unqualified = call(FUNCTION.to_owned()).await;
    assert_eq!(
        only(&unqualified),
        (Outcome::Rejected, reasons::UNQUALIFIED_INVOKER)
    );
    let other_account = call(alias("module-a").replace(STACK_ACCOUNT, "999999999999")).await;
    assert_eq!(
        only(&other_account),
        (Outcome::Rejected, reasons::ACCOUNT_NOT_ALLOWLISTED)
    );
    let unmapped = call(alias("module-z")).await;
    assert_eq!(only(&unmapped), (Outcome::Held, reasons::UNKNOWN_INVOKER));
    assert!(stores.stream.events().unwrap().is_empty());
    assert_eq!(stores.held.items().len(), 3);
}

#[tokio::test]
async fn the_sample_received_late_is_stale_and_a_broken_one_is_malformed() {
    let (stores, ingest) = ingest(hint() + Duration::minutes(5)).await;
    let late = ingest
        .handle(&invocation(&alias("module-a"), "req", sample()))
        .await
        .unwrap();
    assert_eq!(only(&late).1, reasons::STALE_TIMESTAMP);
    assert!(stores.stream.events().unwrap().is_empty());
    let mut broken = sample();
    broken["events"][0]["quantity"] = Value::from(-3);
    let err = ingest
        .handle(&invocation(&alias("module-a"), "req", broken))
        .await
        .unwrap_err();
    assert!(matches!(err, IngestError::MalformedPayload { .. }), "{err}");
    assert_eq!(err.failure_type(), reasons::MALFORMED_PAYLOAD);
}
