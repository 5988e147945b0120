//! meter-ingest on the in-memory adapters: every attack of the trust boundary
//! (docs/meter-ingest.md, "Attacks and what stops them") refused with its reason and metric,
//! legitimate events accepted once, held events released once the mapping allows them.

use crate::common;

use std::collections::HashSet;
use std::sync::Arc;

use awsmp_consumer::Settings;
use awsmp_consumer::adapters::memory::MemoryStores;
use awsmp_contract::clock::FixedClock;
use awsmp_contract::keys::RowKey;
use awsmp_contract::{metrics, reasons};
use awsmp_meter_ingest::IngestError;
use awsmp_meter_ingest::adapters::memory::MemoryIngestStores;
use awsmp_meter_ingest::identity::Allowlist;
use awsmp_meter_ingest::mapping::{LicenseGrant, MappingEntry};
use awsmp_meter_ingest::ports::{Disposition, MappingStore};
use awsmp_meter_ingest::{IngestReport, IngestSettings, Invocation, MeterIngest, Outcome};
use chrono::{DateTime, Duration, TimeZone, Utc};
use serde_json::{Value, json};

const FN: &str = "arn:aws:lambda:us-east-1:111111111111:function:awsmp-meter-ingest";
const LA: &str = "arn:aws:license-manager::111111111111:license:l-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const LB: &str = "arn:aws:license-manager::111111111111:license:l-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
const BUYER_A: &str = "222222222222";
const BUYER_B: &str = "333333333333";

fn arn(module: &str) -> String {
    format!("{FN}:{module}")
}

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 10, 15, 30).unwrap()
}

fn entry(module: &str, license: &str, buyer: &str) -> MappingEntry {
    MappingEntry {
        invoked_arn: arn(module),
        environment: "prod".into(),
        app_id: Some(format!("app-{module}")),
        licenses: vec![LicenseGrant {
            license_arn: license.into(),
            customer_aws_account_id: buyer.into(),
        }],
        dimensions: vec!["requests".into()],
        max_events_per_second: 5,
        max_quantity: 1_000,
    }
}

struct World {
    stores: MemoryIngestStores,
    clock: Arc<FixedClock>,
    ingest: MeterIngest,
}

async fn world() -> World {
    let stores = MemoryIngestStores::new();
    stores
        .mappings
        .put(&entry("module-a", LA, BUYER_A))
        .await
        .unwrap();
    stores
        .mappings
        .put(&entry("module-b", LB, BUYER_B))
        .await
        .unwrap();
    let clock = Arc::new(FixedClock::new(now()));
    let settings = IngestSettings {
        allowlist: Allowlist {
            environment: "prod".into(),
            accounts: HashSet::from(["111111111111".to_owned()]),
        },
        ..IngestSettings::default()
    };
    let ingest = stores.ingest(settings, clock.clone());
    World {
        stores,
        clock,
        ingest,
    }
}

fn event(id: &str, quantity: u64) -> Value {
    json!({"eventId": id, "dimension": "requests", "quantity": quantity,
           "recordedAtHint": (now() - Duration::seconds(2)).to_rfc3339()})
}

fn invocation(invoked_arn: &str, request: &str, events: Vec<Value>) -> Invocation {
    Invocation {
        invoked_arn: invoked_arn.to_owned(),
        request_id: request.to_owned(),
        payload: json!({ "events": events }),
    }
}

impl World {
    async fn call(&self, invoked_arn: &str, request: &str, events: Vec<Value>) -> IngestReport {
        self.ingest
            .handle(&invocation(invoked_arn, request, events))
            .await
            .unwrap()
    }

    /// The events on the stream, decoded as the consumer decodes them.
    fn streamed(&self) -> Vec<awsmp_contract::Event> {
        self.stores.stream.events().unwrap()
    }

    fn metric(&self, name: &str, dims: &[(&str, &str)]) -> f64 {
        self.stores
            .metrics
            .points(name)
            .iter()
            .filter(|p| dims.iter().all(|(k, v)| p[*k] == *v))
            .filter_map(|p| p[name].as_f64())
            .sum()
    }
}

fn only_reason(r: &IngestReport) -> (Outcome, &'static str) {
    assert_eq!(r.events.len(), 1, "{r:?}");
    (r.events[0].outcome, r.events[0].reason.unwrap_or(""))
}

#[tokio::test]
async fn legitimate_events_are_accepted_attributed_from_the_mapping_and_stamped_with_receive_time()
{
    let w = world().await;
    let r = w
        .call(
            &arn("module-a"),
            "req-1",
            vec![event("e-1", 3), event("e-2", 4)],
        )
        .await;
    assert_eq!((r.accepted, r.rejected, r.held, r.duplicates), (2, 0, 0, 0));
    let streamed = w.streamed();
    assert_eq!(streamed.len(), 2);
    for e in &streamed {
        assert_eq!(e.license_arn, LA);
        assert_eq!(e.customer_aws_account_id, BUYER_A);
        assert_eq!(e.timestamp, now());
        assert_eq!(e.producer_id.as_deref(), Some(arn("module-a").as_str()));
        assert!(e.event_id.starts_with("mi:"));
    }
    assert_eq!(streamed.iter().map(|e| e.quantity).sum::<u64>(), 7);
    assert_eq!(
        w.metric(
            metrics::INGEST_EVENTS_RECEIVED.name(),
            &[("Module", "module-a")]
        ),
        2.0
    );
    assert_eq!(
        w.metric(
            metrics::INGEST_EVENTS_ACCEPTED.name(),
            &[("Module", "module-a")]
        ),
        2.0
    );
}

#[tokio::test]
async fn unqualified_latest_and_unknown_arns_are_refused_with_their_reasons() {
    let w = world().await;
    for bad in [FN.to_owned(), arn("$LATEST"), "not-an-arn".to_owned()] {
        let r = w.call(&bad, "req", vec![event("e", 1)]).await;
        assert_eq!(
            only_reason(&r),
            (Outcome::Rejected, reasons::UNQUALIFIED_INVOKER),
            "{bad}"
        );
    }
    let r = w.call(&arn("module-z"), "req", vec![event("e", 1)]).await;
    assert_eq!(only_reason(&r), (Outcome::Held, reasons::UNKNOWN_INVOKER));
    assert!(w.streamed().is_empty());
    let dims = [
        ("Reason", reasons::UNQUALIFIED_INVOKER),
        ("Module", "unidentified"),
    ];
    assert_eq!(w.metric(metrics::INGEST_EVENT_REJECTED.name(), &dims), 3.0);
    let held = [("Reason", reasons::UNKNOWN_INVOKER), ("Module", "module-z")];
    assert_eq!(w.metric(metrics::INGEST_EVENT_HELD.name(), &held), 1.0);
    let items = w.stores.held.items();
    assert_eq!(
        items
            .iter()
            .filter(|h| h.disposition == Disposition::Held)
            .count(),
        1
    );
    assert_eq!(
        items
            .iter()
            .filter(|h| h.disposition == Disposition::Rejected)
            .count(),
        3
    );
}

#[tokio::test]
async fn a_sibling_modules_license_or_dimension_is_refused() {
    let w = world().await;
    let mut sibling = event("e-1", 3);
    sibling["licenseArn"] = json!(LB);
    let mut buyer = event("e-2", 3);
    buyer["customerAWSAccountId"] = json!(BUYER_B);
    let mut dimension = event("e-3", 3);
    dimension["dimension"] = json!("storage");
    let r = w
        .call(&arn("module-a"), "req", vec![sibling, buyer, dimension])
        .await;
    let got: Vec<_> = r
        .events
        .iter()
        .map(|e| (e.outcome, e.reason.unwrap_or("")))
        .collect();
    assert_eq!(
        got,
        [
            (Outcome::Rejected, reasons::UNAUTHORIZED_LICENSE),
            (Outcome::Rejected, reasons::UNAUTHORIZED_LICENSE),
            (Outcome::Rejected, reasons::UNAUTHORIZED_DIMENSION),
        ]
    );
    assert!(w.streamed().is_empty());
    let dims = [
        ("Reason", reasons::UNAUTHORIZED_LICENSE),
        ("Module", "module-a"),
    ];
    assert_eq!(w.metric(metrics::INGEST_EVENT_REJECTED.name(), &dims), 2.0);
}

#[tokio::test]
async fn spoofed_hints_change_nothing_the_mapping_decides() {
    let w = world().await;
    let mut spoof = event("e-1", 3);
    spoof["appIdHint"] = json!("app-module-b");
    spoof["moduleIdHint"] = json!("module-b");
    let r = w.call(&arn("module-a"), "req", vec![spoof]).await;
    assert_eq!(r.accepted, 1);
    let e = &w.streamed()[0];
    assert_eq!(
        (e.license_arn.as_str(), e.customer_aws_account_id.as_str()),
        (LA, BUYER_A)
    );
    assert_eq!(e.producer_id.as_deref(), Some(arn("module-a").as_str()));
}

#[tokio::test]
async fn backdated_and_future_events_are_rejected_the_receive_time_is_billed() {
    let w = world().await;
    let at = |secs: i64| {
        let mut e = event(&format!("e{secs}"), 1);
        e["recordedAtHint"] = json!((now() + Duration::seconds(secs)).to_rfc3339());
        e
    };
    let r = w
        .call(
            &arn("module-a"),
            "req",
            vec![at(-61), at(61), at(-60), at(60)],
        )
        .await;
    let got: Vec<_> = r
        .events
        .iter()
        .map(|e| (e.outcome, e.reason.unwrap_or("")))
        .collect();
    assert_eq!(
        got,
        [
            (Outcome::Rejected, reasons::STALE_TIMESTAMP),
            (Outcome::Rejected, reasons::FUTURE_TIMESTAMP),
            (Outcome::Accepted, ""),
            (Outcome::Accepted, ""),
        ]
    );
    assert!(w.streamed().iter().all(|e| e.timestamp == now()));
    let dims = [("Reason", reasons::STALE_TIMESTAMP)];
    assert_eq!(w.metric(metrics::INGEST_EVENT_REJECTED.name(), &dims), 1.0);
}

#[tokio::test]
async fn a_replayed_event_id_is_applied_once_but_two_modules_ids_never_collide() {
    let w = world().await;
    w.call(&arn("module-a"), "req-1", vec![event("e-1", 3)])
        .await;
    // A module's replay (a new invocation) and a repeat inside one payload.
    let r = w
        .call(
            &arn("module-a"),
            "req-2",
            vec![event("e-1", 3), event("e-2", 1), event("e-2", 1)],
        )
        .await;
    assert_eq!((r.accepted, r.duplicates), (1, 2));
    // The same id from module B is B's own event.
    let r = w
        .call(&arn("module-b"), "req-3", vec![event("e-1", 3)])
        .await;
    assert_eq!(r.accepted, 1);
    assert_eq!(w.streamed().len(), 3);
    assert_eq!(
        w.metric(metrics::INGEST_DEDUP_HIT.name(), &[("Module", "module-a")]),
        2.0
    );
}

#[tokio::test]
async fn a_lambda_retry_of_the_same_request_passes_its_own_claim() {
    let w = world().await;
    // GIVEN the stream refuses the first attempt
    w.stores.stream.pause();
    let inv = invocation(&arn("module-a"), "req-1", vec![event("e-1", 3)]);
    let pending =
        tokio::time::timeout(std::time::Duration::from_millis(100), w.ingest.handle(&inv)).await;
    assert!(
        pending.is_err(),
        "a paused stream must not complete the invocation"
    );
    w.stores.stream.resume();
    // WHEN Lambda retries the same request id THEN its claim passes and the event goes out once
    let r = w.ingest.handle(&inv).await.unwrap();
    assert_eq!(r.accepted, 1);
    assert_eq!(w.streamed().len(), 1);
    // and a later replay under another request id is a duplicate
    let r = w
        .call(&arn("module-a"), "req-2", vec![event("e-1", 3)])
        .await;
    assert_eq!(r.duplicates, 1);
}

#[tokio::test]
async fn a_staging_module_against_prod_is_rejected_by_account_and_by_environment() {
    let w = world().await;
    let staging = "arn:aws:lambda:us-east-1:999999999999:function:awsmp-meter-ingest:module-a";
    let r = w.call(staging, "req", vec![event("e", 1)]).await;
    assert_eq!(
        only_reason(&r),
        (Outcome::Rejected, reasons::ACCOUNT_NOT_ALLOWLISTED)
    );
    let mut entry = entry("module-s", LA, BUYER_A);
    entry.environment = "staging".into();
    w.stores.mappings.put(&entry).await.unwrap();
    let r = w.call(&arn("module-s"), "req", vec![event("e", 1)]).await;
    assert_eq!(
        only_reason(&r),
        (Outcome::Rejected, reasons::ACCOUNT_NOT_ALLOWLISTED)
    );
    assert!(w.streamed().is_empty());
    let dims = [("Reason", reasons::ACCOUNT_NOT_ALLOWLISTED)];
    assert_eq!(w.metric(metrics::INGEST_EVENT_REJECTED.name(), &dims), 2.0);
}

#[tokio::test]
async fn values_outside_the_bounds_and_the_rate_are_held_not_billed_not_lost() {
    let w = world().await;
    let r = w
        .call(&arn("module-a"), "req-1", vec![event("big", 1_001)])
        .await;
    assert_eq!(
        only_reason(&r),
        (Outcome::Held, reasons::QUANTITY_OUT_OF_BOUNDS)
    );
    // max 5 per second: 7 events in one second, 2 held
    let burst: Vec<Value> = (0..7).map(|i| event(&format!("r{i}"), 1)).collect();
    let r = w.call(&arn("module-a"), "req-2", burst).await;
    assert_eq!((r.accepted, r.held), (5, 2));
    assert!(
        r.events[5..]
            .iter()
            .all(|e| e.reason == Some(reasons::RATE_LIMITED))
    );
    // the next second has its own budget
    w.clock.advance(Duration::seconds(1));
    let r = w
        .call(&arn("module-a"), "req-3", vec![event("r9", 1)])
        .await;
    assert_eq!(r.accepted, 1);
    assert_eq!(w.streamed().len(), 6);
    let held = w.stores.held.items();
    assert_eq!(
        held.iter()
            .filter(|h| h.disposition == Disposition::Held)
            .count(),
        3
    );
    let dims = [("Reason", reasons::RATE_LIMITED), ("Module", "module-a")];
    assert_eq!(w.metric(metrics::INGEST_EVENT_HELD.name(), &dims), 2.0);
    // WHEN the operator releases them THEN each goes out once, and a second release is a no-op
    let released = w.ingest.release_held().await.unwrap();
    assert_eq!(released.iter().map(|r| r.accepted).sum::<usize>(), 3);
    assert_eq!(w.streamed().len(), 9);
    assert_eq!(
        w.streamed().iter().map(|e| e.quantity).sum::<u64>(),
        1_001 + 8
    );
    assert!(w.ingest.release_held().await.unwrap().is_empty());
    let items = w.stores.held.items();
    assert!(items.iter().all(|h| h.disposition == Disposition::Released));
}

#[tokio::test]
async fn a_malformed_payload_fails_the_invocation_and_applies_nothing() {
    let w = world().await;
    let mut negative = event("e-2", 1);
    negative["quantity"] = json!(-5);
    for payload in [
        json!("x"),
        json!({"events": [event("e-1", 1), negative]}),
        json!({"eventId": "e"}),
    ] {
        let inv = Invocation {
            invoked_arn: arn("module-a"),
            request_id: "req".into(),
            payload,
        };
        let err = w.ingest.handle(&inv).await.unwrap_err();
        assert!(matches!(err, IngestError::MalformedPayload { .. }), "{err}");
        assert_eq!(err.failure_type(), reasons::MALFORMED_PAYLOAD);
    }
    assert!(w.streamed().is_empty());
    assert!(w.stores.held.items().is_empty());
    let dims = [("Module", "module-a")];
    assert_eq!(
        w.metric(metrics::INGEST_MALFORMED_PAYLOAD.name(), &dims),
        3.0
    );
}

#[tokio::test]
async fn a_module_deployed_before_its_mapping_loses_nothing_and_is_billed_once() {
    let w = world().await;
    // GIVEN module C's alias is live before its mapping entry
    let r = w
        .call(
            &arn("module-c"),
            "req-1",
            vec![event("c-1", 2), event("c-2", 5)],
        )
        .await;
    assert_eq!(r.held, 2);
    assert!(
        w.ingest
            .release_held()
            .await
            .unwrap()
            .iter()
            .all(|r| r.held == 1)
    );
    assert!(w.streamed().is_empty(), "still no entry: still held");
    // WHEN the entry is written and the held events are released
    w.stores
        .mappings
        .put(&entry("module-c", LA, BUYER_A))
        .await
        .unwrap();
    w.clock.advance(Duration::minutes(10));
    let released = w.ingest.release_held().await.unwrap();
    // THEN both are billed once, checked against their original receive time
    assert_eq!(released.iter().map(|r| r.accepted).sum::<usize>(), 2);
    let streamed = w.streamed();
    assert_eq!(streamed.iter().map(|e| e.quantity).sum::<u64>(), 7);
    assert!(streamed.iter().all(|e| e.timestamp == now()));
    // and the module's retry of the same events is a duplicate
    let r = w
        .call(&arn("module-c"), "req-9", vec![event("c-1", 2)])
        .await;
    assert_eq!(
        r.events[0].outcome,
        Outcome::Rejected,
        "its hint is now 10 minutes old"
    );
    // (a new request: req-9's receive time is on record, a retry of it keeps it)
    w.clock.set(now());
    let r = w
        .call(&arn("module-c"), "req-10", vec![event("c-1", 2)])
        .await;
    assert_eq!(r.duplicates, 1);
    assert_eq!(w.streamed().len(), 2);
}

#[tokio::test]
async fn accepted_events_are_folded_by_the_unchanged_consumer_exactly_once() {
    let w = world().await;
    w.call(
        &arn("module-a"),
        "req-1",
        vec![event("e-1", 3), event("e-2", 4)],
    )
    .await;
    w.call(&arn("module-b"), "req-2", vec![event("e-1", 10)])
        .await;
    // A duplicate copy on the stream (a retried PutRecords) is deduplicated by the consumer.
    let mut records = w.stores.stream.records();
    records.push(records[0].clone());
    let batch = common::delivered(&records, now() + Duration::milliseconds(20));
    let consumer_stores = MemoryStores::new();
    let consumer = consumer_stores.consumer(Settings::default(), w.clock.clone());
    let (response, report) = consumer.process(batch).await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(report.dedup_hits, 1);
    let q = consumer_stores.rows.quantities();
    let key = |l: &str, b: &str| RowKey {
        license_arn: l.into(),
        sort_key: format!("{b}#requests#2026-12-01T10:15:30"),
    };
    assert_eq!(q.get(&key(LA, BUYER_A)), Some(&7));
    assert_eq!(q.get(&key(LB, BUYER_B)), Some(&10));
}

#[tokio::test]
async fn the_mapping_cache_serves_an_entry_for_its_ttl_and_an_absence_for_at_most_five_seconds() {
    use awsmp_meter_ingest::adapters::dynamodb::CachedMappingStore;
    use awsmp_meter_ingest::adapters::memory::MemoryMappingStore;
    let inner = MemoryMappingStore::new();
    let clock = Arc::new(FixedClock::new(now()));
    let cache = CachedMappingStore::new(
        Arc::new(inner.clone()),
        std::time::Duration::from_secs(30),
        clock.clone(),
    );
    assert!(cache.get(&arn("module-a")).await.unwrap().is_none());
    inner.put(&entry("module-a", LA, BUYER_A)).await.unwrap();
    assert!(
        cache.get(&arn("module-a")).await.unwrap().is_none(),
        "absence cached"
    );
    clock.advance(Duration::seconds(5));
    assert!(
        cache.get(&arn("module-a")).await.unwrap().is_some(),
        "absence lapsed after 5 s"
    );
    let reads = inner.reads();
    inner.remove(&arn("module-a"));
    clock.advance(Duration::seconds(29));
    assert!(
        cache.get(&arn("module-a")).await.unwrap().is_some(),
        "entry cached"
    );
    assert_eq!(inner.reads(), reads);
    clock.advance(Duration::seconds(1));
    assert!(
        cache.get(&arn("module-a")).await.unwrap().is_none(),
        "entry lapsed after 30 s"
    );
}

#[tokio::test]
async fn the_deploy_guard_refuses_an_alias_until_its_entry_exists() {
    let w = world().await;
    let refused =
        |r: Result<MappingEntry, awsmp_consumer::domain::verify::Refusal>| r.unwrap_err().reason;
    assert_eq!(
        refused(w.ingest.check_alias(&arn("module-c")).await.unwrap()),
        reasons::UNKNOWN_INVOKER
    );
    assert_eq!(
        refused(w.ingest.check_alias(FN).await.unwrap()),
        reasons::UNQUALIFIED_INVOKER
    );
    let staging = "arn:aws:lambda:us-east-1:999999999999:function:awsmp-meter-ingest:module-a";
    assert_eq!(
        refused(w.ingest.check_alias(staging).await.unwrap()),
        reasons::ACCOUNT_NOT_ALLOWLISTED
    );
    w.stores
        .mappings
        .put(&entry("module-c", LA, BUYER_A))
        .await
        .unwrap();
    let ok = w
        .ingest
        .check_alias(&arn("module-c"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ok.invoked_arn, arn("module-c"));
}
