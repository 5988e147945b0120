//! The subscription Lambda on the real AWS event shapes (`tests/fixtures/`, from
//! <https://docs.aws.amazon.com/marketplace/latest/userguide/notifications-eventbridge.html>),
//! over the memory adapters.

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use awsmp_aws::emf::MetricsSink;
use awsmp_contract::reasons;
use awsmp_lifecycle::LifecycleError;
use awsmp_lifecycle::adapters::memory::{MemoryDeadLetters, MemorySubscriberStore};
use awsmp_lifecycle::domain::event::{Change, LicenseKey};
use awsmp_lifecycle::domain::state::{AgreementStatus, LicenseStatus};
use awsmp_lifecycle::handlers::subscription::{
    Handled, SubscriptionService, handle_batch, handle_message,
};
use awsmp_lifecycle::ports::SubscriberStore;
use chrono::{DateTime, TimeZone, Utc};

const LICENSE: &str =
    "arn:aws:license-manager::123456789012:license:l-e52ca6f38bf84d0fafb8802ca15ac11a";
const BUYER: &str = "845735284135";
const AGREEMENT: &str = "agmt-4mwg1nevbokzw95eca5797ixs";

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

fn key() -> LicenseKey {
    LicenseKey {
        license_arn: LICENSE.into(),
        customer_aws_account_id: BUYER.into(),
    }
}

struct World {
    store: MemorySubscriberStore,
    dlq: MemoryDeadLetters,
    metrics: MetricsSink,
}

impl World {
    fn new() -> Self {
        Self {
            store: MemorySubscriberStore::new(),
            dlq: MemoryDeadLetters::new(),
            metrics: MetricsSink::capture("subscription"),
        }
    }
    fn svc(&self) -> SubscriptionService<'_> {
        SubscriptionService {
            store: &self.store,
            dead_letters: Some(&self.dlq),
            metrics: &self.metrics,
        }
    }
    async fn deliver(&self, name: &str) -> Result<Handled, LifecycleError> {
        handle_message(&self.svc(), &fixture(name)).await
    }
}

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

#[tokio::test]
async fn license_updated_makes_the_license_and_agreement_active_under_the_canonical_arn() {
    let w = World::new();
    assert_eq!(
        w.deliver("license-updated.json").await.unwrap(),
        Handled::Applied(1)
    );
    let row = w.store.get(&key()).await.unwrap().unwrap();
    assert_eq!(row.subscription_status, Some(LicenseStatus::Active));
    assert_eq!(row.agreement_status, Some(AgreementStatus::Active));
    assert_eq!(row.agreement_id.as_deref(), Some(AGREEMENT));
    assert_eq!(
        row.product_code.as_deref(),
        Some("aw4fgf5tyo5w2ap6fEXAMPLE")
    );
    assert_eq!(row.deprovisioning_expiry, None);
    assert_eq!(w.metrics.total("SubscriptionEventApplied"), 1.0);
    assert_eq!(
        w.metrics.points("SubscriptionEventApplied")[0]["EventType"],
        "License Updated"
    );
}

#[tokio::test]
async fn the_aws_sample_license_arn_is_normalized_and_its_placeholder_id_dead_lettered() {
    // The documented sample lacks `arn:` (normalized), but its id ends in a placeholder `x`,
    // which is not a license id: the event goes to the DLQ with its reason, nothing is written.
    let w = World::new();
    for name in [
        "license-updated.aws-sample.json",
        "license-deprovisioned.aws-sample.json",
    ] {
        assert_eq!(
            w.deliver(name).await.unwrap(),
            Handled::DeadLettered(reasons::MALFORMED_LICENSE_ARN)
        );
    }
    assert!(w.store.rows().is_empty());
    let sent = w.dlq.sent();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].0, fixture("license-updated.aws-sample.json"));
    assert_eq!(sent[0].1, reasons::MALFORMED_LICENSE_ARN);
    assert_eq!(w.metrics.total("SubscriptionEventRejected"), 2.0);
}

#[tokio::test]
async fn license_deprovisioned_opens_the_window_and_a_late_update_never_reactivates() {
    let w = World::new();
    w.deliver("license-updated.json").await.unwrap();
    w.deliver("license-deprovisioned.json").await.unwrap();
    let row = w.store.get(&key()).await.unwrap().unwrap();
    assert_eq!(row.subscription_status, Some(LicenseStatus::Deprovisioning));
    assert_eq!(row.deprovisioning_expiry, Some(t("2024-08-30T23:10:00Z")));
    // A redelivered License Updated (older or not) leaves it deprovisioning.
    w.deliver("license-updated.json").await.unwrap();
    let again = w.store.get(&key()).await.unwrap().unwrap();
    assert_eq!(again, row);
    // Out of order: deprovisioned first, then updated.
    let w2 = World::new();
    w2.deliver("license-deprovisioned.json").await.unwrap();
    w2.deliver("license-updated.json").await.unwrap();
    let row2 = w2.store.get(&key()).await.unwrap().unwrap();
    assert_eq!(
        row2.subscription_status,
        Some(LicenseStatus::Deprovisioning)
    );
    assert_eq!(row2.deprovisioning_expiry, row.deprovisioning_expiry);
}

#[tokio::test]
async fn agreement_ended_sets_only_the_agreement_inactive() {
    let w = World::new();
    w.deliver("license-updated.json").await.unwrap();
    assert_eq!(
        w.deliver("agreement-ended.json").await.unwrap(),
        Handled::Applied(1)
    );
    let row = w.store.get(&key()).await.unwrap().unwrap();
    assert_eq!(row.agreement_status, Some(AgreementStatus::Inactive));
    assert_eq!(row.agreement_end_status.as_deref(), Some("CANCELLED"));
    assert_eq!(
        row.subscription_status,
        Some(LicenseStatus::Active),
        "metering continues"
    );
    assert_eq!(row.deprovisioning_expiry, None, "no flush window");
}

#[tokio::test]
async fn agreement_amended_records_the_terms() {
    let w = World::new();
    w.deliver("license-updated.json").await.unwrap();
    w.deliver("agreement-amended.json").await.unwrap();
    let row = w.store.get(&key()).await.unwrap().unwrap();
    let amendment = row.amendment.unwrap();
    assert_eq!(
        amendment.terms.end_time.as_deref(),
        Some("2025-05-30T21:36:03Z")
    );
    assert_eq!(amendment.at, t("2024-08-30T21:36:03Z"));
    assert_eq!(row.subscription_status, Some(LicenseStatus::Active));
}

#[tokio::test]
async fn created_and_unknown_detail_types_are_ignored_with_a_metric() {
    let w = World::new();
    assert_eq!(
        w.deliver("agreement-created.json").await.unwrap(),
        Handled::Ignored("Purchase Agreement Created".into())
    );
    assert_eq!(
        w.deliver("agreement-ending.json").await.unwrap(),
        Handled::Ignored("Purchase Agreement Ending".into())
    );
    assert!(w.store.rows().is_empty());
    let points = w.metrics.points("SubscriptionEventIgnored");
    assert_eq!(points.len(), 2);
    assert_eq!(points[1]["EventType"], "Purchase Agreement Ending");
}

#[tokio::test]
async fn an_agreement_event_before_its_license_is_retried_until_the_license_exists() {
    let w = World::new();
    let e = w.deliver("agreement-ended.json").await.unwrap_err();
    assert!(
        matches!(e, LifecycleError::UnresolvedAgreement { .. }),
        "{e}"
    );
    assert!(e.is_retryable());
    assert_eq!(w.metrics.total("SubscriptionEventUnresolved"), 1.0);
    // SQS redelivers it after the License Updated arrived.
    w.deliver("license-updated.json").await.unwrap();
    w.deliver("agreement-ended.json").await.unwrap();
    let row = w.store.get(&key()).await.unwrap().unwrap();
    assert_eq!(row.agreement_status, Some(AgreementStatus::Inactive));
}

#[tokio::test]
async fn an_agreement_with_several_licenses_updates_every_one_of_its_buyers() {
    let w = World::new();
    let other = LicenseKey {
        license_arn:
            "arn:aws:license-manager::123456789012:license:l-00000000000000000000000000000002"
                .into(),
        customer_aws_account_id: BUYER.into(),
    };
    let foreign = LicenseKey {
        license_arn:
            "arn:aws:license-manager::123456789012:license:l-00000000000000000000000000000003"
                .into(),
        customer_aws_account_id: "999999999999".into(),
    };
    let at = Utc.with_ymd_and_hms(2024, 8, 30, 21, 0, 0).unwrap();
    for k in [&other, &foreign] {
        let change = Change::LicenseUpdated {
            agreement_id: AGREEMENT.into(),
            product_code: None,
        };
        w.store.apply(k, &change, at).await.unwrap();
    }
    w.deliver("license-updated.json").await.unwrap();
    assert_eq!(
        w.deliver("agreement-ended.json").await.unwrap(),
        Handled::Applied(2)
    );
    // No license ARN in the event: resolved through the agreement, both licenses.
    assert_eq!(
        w.deliver("license-updated.no-license-arn.json")
            .await
            .unwrap(),
        Handled::Applied(2)
    );
    for k in [key(), other] {
        let row = w.store.get(&k).await.unwrap().unwrap();
        assert_eq!(
            row.agreement_status,
            Some(AgreementStatus::Inactive),
            "{k:?}"
        );
    }
    let untouched = w.store.get(&foreign).await.unwrap().unwrap();
    assert_eq!(
        untouched.agreement_status,
        Some(AgreementStatus::Active),
        "another buyer's"
    );
}

#[tokio::test]
async fn malformed_events_go_to_the_dlq_with_their_reason() {
    let w = World::new();
    for (name, reason) in [
        ("malformed.not-json.txt", reasons::EVENT_NOT_JSON),
        (
            "malformed.wrong-source.json",
            reasons::UNEXPECTED_EVENT_SOURCE,
        ),
        ("malformed.no-acceptor.json", reasons::MISSING_EVENT_FIELD),
        ("malformed.bad-time.json", reasons::MALFORMED_EVENT_TIME),
    ] {
        assert_eq!(
            w.deliver(name).await.unwrap(),
            Handled::DeadLettered(reason),
            "{name}"
        );
    }
    let reasons_sent: Vec<String> = w.dlq.sent().into_iter().map(|(_, r)| r).collect();
    assert_eq!(
        reasons_sent,
        [
            "EventNotJson",
            "UnexpectedEventSource",
            "MissingEventField",
            "MalformedEventTime"
        ]
    );
    assert_eq!(w.metrics.total("SubscriptionEventRejected"), 4.0);
    assert!(w.store.rows().is_empty());
}

fn message(id: &str, body: Option<String>) -> SqsMessage {
    let mut m = SqsMessage::default();
    m.message_id = Some(id.into());
    m.body = body;
    m
}

#[tokio::test]
async fn a_batch_reports_only_the_messages_that_must_be_redelivered() {
    let w = World::new();
    let mut event = SqsEvent::default();
    event.records = vec![
        message("ended-first", Some(fixture("agreement-ended.json"))),
        message("updated", Some(fixture("license-updated.json"))),
        message("bad", Some(fixture("malformed.not-json.txt"))),
        message("no-body", None),
    ];
    let resp = handle_batch(&w.svc(), event).await;
    let failed: Vec<&str> = resp
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(failed, ["ended-first", "no-body"]);
    // Without a DLQ configured a malformed event is failed too (SQS moves it after
    // maxReceiveCount), never dropped.
    let no_dlq = SubscriptionService {
        store: &w.store,
        dead_letters: None,
        metrics: &w.metrics,
    };
    let mut event = SqsEvent::default();
    event.records = vec![message("bad", Some(fixture("malformed.no-acceptor.json")))];
    let resp = handle_batch(&no_dlq, event).await;
    assert_eq!(resp.batch_item_failures.len(), 1);
}
