//! meter-ingest under Lambda's async retries (docs/meter-ingest.md, "Timestamp authority"): a
//! retry of a failed invocation, about 1 and 2 minutes later with the same request id
//! (https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html), keeps
//! its first attempt's receive time — for the hint check, the stream events' timestamp, the
//! held items — while a replay under a new request id is judged at its own receive time.

use crate::common;

use std::collections::HashSet;
use std::sync::Arc;

use awsmp_consumer::adapters::memory::MemoryStores;
use awsmp_consumer::handler::STORE_RETRY;
use awsmp_consumer::{ConsumerError, Settings};
use awsmp_contract::clock::{Clock, FixedClock};
use awsmp_contract::keys::RowKey;
use awsmp_contract::reasons;
use awsmp_meter_ingest::adapters::memory::MemoryIngestStores;
use awsmp_meter_ingest::check::request_key;
use awsmp_meter_ingest::error::{IngestError, Result as IResult};
use awsmp_meter_ingest::identity::Allowlist;
use awsmp_meter_ingest::mapping::{LicenseGrant, MappingEntry};
use awsmp_meter_ingest::ports::{Disposition, HeldStore, MappingStore, UsageStream};
use awsmp_meter_ingest::{IngestSettings, Invocation, MeterIngest, Outcome};
use awsmp_testkit::faults::{Fault, FaultPlan, Rates};
use awsmp_testkit::ports::{Ctx, Faulty};
use chrono::{DateTime, Duration, TimeZone, Utc};
use serde_json::{Value, json};

const ARN: &str = "arn:aws:lambda:us-east-1:111111111111:function:awsmp-meter-ingest:module-a";
const LA: &str = "arn:aws:license-manager::111111111111:license:l-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const BUYER: &str = "222222222222";

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 10, 15, 30).unwrap()
}

struct World {
    stores: MemoryIngestStores,
    faults: Arc<FaultPlan>,
    clock: Arc<FixedClock>,
    ingest: MeterIngest,
}

/// meter-ingest whose stream fails its first `stream_fails` puts and whose dedup store fails
/// its first `first_seen_fails` "first seen" writes (each a 5xx refused before it applied, so
/// a "first seen" write fails the invocation only once the store policy's retries ran out).
async fn world(stream_fails: usize, first_seen_fails: usize) -> World {
    let stores = MemoryIngestStores::new();
    stores
        .mappings
        .put(&MappingEntry {
            invoked_arn: ARN.into(),
            environment: "prod".into(),
            app_id: None,
            licenses: vec![LicenseGrant {
                license_arn: LA.into(),
                customer_aws_account_id: BUYER.into(),
            }],
            dimensions: vec!["requests".into()],
            max_events_per_second: 5,
            max_quantity: 1_000,
        })
        .await
        .unwrap();
    let clock = Arc::new(FixedClock::new(t0()));
    let settings = IngestSettings {
        allowlist: Allowlist {
            environment: "prod".into(),
            accounts: HashSet::from(["111111111111".to_owned()]),
        },
        ..IngestSettings::default()
    };
    let mut ingest = stores.ingest(settings, clock.clone());
    let ctx = Ctx::new(FaultPlan::new(1, Rates::default()));
    ctx.faults.script(
        "ingest-put-records",
        vec![Fault::FailBeforeApply; stream_fails],
    );
    ctx.faults
        .script("first_seen", vec![Fault::FailBeforeApply; first_seen_fails]);
    ingest.stream = Arc::new(Faulty::<dyn UsageStream>::new(ingest.stream, &ctx));
    ingest.dedup = Arc::new(Faulty::new(stores.dedup.clone(), &ctx));
    World {
        stores,
        faults: ctx.faults,
        clock,
        ingest,
    }
}

/// An event the module recorded `ago` before `t0`.
fn event(id: &str, quantity: u64, ago: Duration) -> Value {
    json!({"eventId": id, "dimension": "requests", "quantity": quantity,
           "recordedAtHint": (t0() - ago).to_rfc3339()})
}

fn invocation(request: &str, events: Vec<Value>) -> Invocation {
    Invocation {
        invoked_arn: ARN.to_owned(),
        request_id: request.to_owned(),
        payload: json!({ "events": events }),
    }
}

impl World {
    /// The invocation at `t0 + at`.
    async fn at(
        &self,
        at: Duration,
        inv: &Invocation,
    ) -> IResult<awsmp_meter_ingest::IngestReport> {
        self.clock.set(t0() + at);
        self.ingest.handle(inv).await
    }

    /// The billed quantity per second, after the unchanged consumer folded the stream.
    async fn billed(&self) -> Vec<(String, u64)> {
        let batch = common::delivered(&self.stores.stream.records(), self.clock.now());
        let consumer_stores = MemoryStores::new();
        let consumer = consumer_stores.consumer(Settings::default(), self.clock.clone());
        let (response, _) = consumer.process(batch).await;
        assert!(response.batch_item_failures.is_empty());
        let mut q: Vec<(String, u64)> = consumer_stores
            .rows
            .quantities()
            .into_iter()
            .map(|(k, v): (RowKey, u64)| (k.sort_key, v))
            .collect();
        q.sort();
        q
    }
}

#[tokio::test]
async fn a_failed_invocation_retried_90_and_150_s_later_keeps_its_first_receive_time_billed_once() {
    // GIVEN the stream refuses the first attempt and the retry 90 s later
    let w = world(2, 0).await;
    let inv = invocation(
        "req-1",
        vec![
            event("e-1", 3, Duration::seconds(2)),
            event("e-2", 4, Duration::seconds(2)),
            event("big", 5_000, Duration::seconds(2)),
        ],
    );
    assert!(w.at(Duration::zero(), &inv).await.is_err());
    assert!(w.at(Duration::seconds(90), &inv).await.is_err());
    assert_eq!(w.faults.injected(), 2);
    assert!(w.stores.stream.records().is_empty());
    // WHEN Lambda's second retry comes 150 s after the first attempt
    let r = w.at(Duration::seconds(150), &inv).await.unwrap();
    // THEN the hint check passed at the first receive time, and the events carry it
    assert_eq!((r.accepted, r.held, r.rejected, r.duplicates), (2, 1, 0, 0));
    assert_eq!(r.received_at, t0());
    let streamed = w.stores.stream.events().unwrap();
    assert_eq!(streamed.len(), 2);
    assert!(streamed.iter().all(|e| e.timestamp == t0()), "{streamed:?}");
    // and the held item too, so a release later bills the same second
    let held = w.stores.held.list(Disposition::Held).await.unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(
        (held[0].received_at, held[0].reason.as_str()),
        (t0(), reasons::QUANTITY_OUT_OF_BOUNDS)
    );
    // and once more (a lost response): the same events again, folded once by the consumer,
    // which under its default `arrival` policy bills the second they reached the stream
    let again = w.at(Duration::seconds(150), &inv).await.unwrap();
    assert_eq!(again.received_at, t0());
    assert_eq!(w.stores.stream.records().len(), 4);
    assert_eq!(
        w.billed().await,
        vec![(format!("{BUYER}#requests#2026-12-01T10:18:00"), 7)]
    );
}

#[tokio::test]
async fn a_replay_under_a_new_request_id_is_judged_at_its_own_receive_time() {
    let w = world(0, 0).await;
    let first = invocation("req-1", vec![event("e-1", 3, Duration::seconds(2))]);
    assert_eq!(w.at(Duration::zero(), &first).await.unwrap().accepted, 1);
    // 30 s later under a new request id: a dedup hit
    let soon = invocation("req-2", vec![event("e-1", 3, Duration::seconds(2))]);
    let r = w.at(Duration::seconds(30), &soon).await.unwrap();
    assert_eq!(
        (r.duplicates, r.received_at),
        (1, t0() + Duration::seconds(30))
    );
    // 90 s later under another one: the hint is past the skew of its own receive time
    let late = invocation("req-3", vec![event("e-1", 3, Duration::seconds(2))]);
    let r = w.at(Duration::seconds(90), &late).await.unwrap();
    assert_eq!(r.received_at, t0() + Duration::seconds(90));
    assert_eq!(
        (r.events[0].outcome, r.events[0].reason),
        (Outcome::Rejected, Some(reasons::STALE_TIMESTAMP))
    );
    assert_eq!(w.stores.stream.records().len(), 1);
    // each request id has its own record, at its own time
    let key = |r: &str| request_key(ARN, r);
    assert_eq!(
        w.stores.dedup.first_seen_at(&key("req-1"), t0()),
        Some(t0())
    );
    assert_eq!(
        w.stores.dedup.first_seen_at(&key("req-3"), t0()),
        Some(t0() + Duration::seconds(90))
    );
}

#[tokio::test]
async fn a_genuinely_stale_first_attempt_stays_refused_on_its_retries() {
    let w = world(0, 0).await;
    let inv = invocation("req-1", vec![event("old", 3, Duration::minutes(5))]);
    for at in [0, 90, 150] {
        let r = w.at(Duration::seconds(at), &inv).await.unwrap();
        assert_eq!(r.received_at, t0());
        assert_eq!(
            (r.events[0].outcome, r.events[0].reason),
            (Outcome::Rejected, Some(reasons::STALE_TIMESTAMP)),
            "attempt at +{at}s"
        );
    }
    assert!(w.stores.stream.records().is_empty());
    let rejected = w.stores.held.list(Disposition::Rejected).await.unwrap();
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0].received_at, t0());
}

#[tokio::test]
async fn a_first_seen_write_that_fails_fails_the_invocation_before_anything_is_applied() {
    // GIVEN the "first seen" write fails on the first attempt, after the store policy's retries
    let w = world(0, STORE_RETRY.max_attempts as usize).await;
    let inv = invocation(
        "req-1",
        vec![
            event("e-1", 3, Duration::seconds(2)),
            event("big", 5_000, Duration::seconds(2)),
        ],
    );
    let err = w.at(Duration::zero(), &inv).await.unwrap_err();
    assert!(
        matches!(
            err,
            IngestError::Dedup(ConsumerError::Store {
                store: "first_seen",
                ..
            })
        ),
        "{err:?}"
    );
    assert_eq!(w.faults.injected(), u64::from(STORE_RETRY.max_attempts));
    // THEN nothing was applied: no claim, no held item, nothing streamed
    assert!(w.stores.stream.records().is_empty());
    assert!(w.stores.dedup.is_empty());
    assert!(w.stores.held.items().is_empty());
    // WHEN Lambda retries 50 s later THEN the retry's own time is the receive time (the first
    // attempt recorded none), within the skew of the hint
    let r = w.at(Duration::seconds(50), &inv).await.unwrap();
    assert_eq!((r.accepted, r.held), (1, 1));
    assert_eq!(r.received_at, t0() + Duration::seconds(50));
}
