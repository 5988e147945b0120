//! The sample events of infra/events/ (the shapes Lambda delivers, docs/deploy.md) run through
//! the real handlers on the memory adapters: the subscription SQS batch, the register API
//! Gateway request and the deprovision-cleanup schedule event.

use aws_lambda_events::event::cloudwatch_events::CloudWatchEvent;
use aws_lambda_events::sqs::SqsEvent;
use awsmp_aws::emf::MetricsSink;
use awsmp_lifecycle::adapters::memory::{
    MemoryDeadLetters, MemoryProfileStore, MemoryResolver, MemorySubscriberStore, TokenOutcome,
};
use awsmp_lifecycle::domain::event::{Change, LicenseKey};
use awsmp_lifecycle::domain::registration::ResolvedCustomer;
use awsmp_lifecycle::domain::state::LicenseStatus;
use awsmp_lifecycle::handlers::deprovision_cleanup;
use awsmp_lifecycle::handlers::register::{RegisterService, lambda};
use awsmp_lifecycle::handlers::subscription::{SubscriptionService, handle_batch};
use awsmp_lifecycle::ports::SubscriberStore;
use chrono::{DateTime, Duration, Utc};

fn sample(name: &str) -> String {
    let path = format!("{}/../infra/events/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The license of the samples, in the canonical form the tables key on.
fn sample_key() -> LicenseKey {
    LicenseKey {
        license_arn:
            "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef"
                .into(),
        customer_aws_account_id: "111122223333".into(),
    }
}

fn subscription_event() -> SqsEvent {
    serde_json::from_str(&sample("subscription.json")).expect("an SQS event")
}

#[tokio::test]
async fn the_subscription_sample_activates_its_license_under_the_canonical_key() {
    let event = subscription_event();
    let body: serde_json::Value =
        serde_json::from_str(event.records[0].body.as_deref().unwrap()).unwrap();
    let at: DateTime<Utc> = body["time"].as_str().unwrap().parse().unwrap();
    let (store, dlq) = (MemorySubscriberStore::new(), MemoryDeadLetters::new());
    let metrics = MetricsSink::capture("subscription");
    let svc = SubscriptionService {
        store: &store,
        dead_letters: Some(&dlq),
        metrics: &metrics,
    };
    let response = handle_batch(&svc, event).await;
    assert!(response.batch_item_failures.is_empty());
    assert!(dlq.sent().is_empty());
    let row = store
        .get(&sample_key())
        .await
        .unwrap()
        .expect("the license row");
    assert_eq!(row.subscription_status, Some(LicenseStatus::Active));
    assert_eq!(
        row.agreement_id.as_deref(),
        Some("agmt-0123456789abcdefghijklmno")
    );
    assert_eq!(row.product_code.as_deref(), Some("abc123xyz"));
    assert_eq!(row.license_event_at, Some(at));
    assert_eq!(store.rows().len(), 1);
    assert_eq!(metrics.total("SubscriptionEventApplied"), 1.0);
    // Redelivered (SQS is at least once): the same row.
    handle_batch(&svc, subscription_event()).await;
    assert_eq!(store.get(&sample_key()).await.unwrap().unwrap(), row);
}

#[tokio::test]
async fn a_sample_from_another_source_is_dead_lettered_and_acknowledged() {
    let mut event = subscription_event();
    let record = &mut event.records[0];
    let body = record.body.as_deref().unwrap().replace(
        "\"source\":\"aws.agreement-marketplace\"",
        "\"source\":\"aws.s3\"",
    );
    record.body = Some(body);
    let (store, dlq) = (MemorySubscriberStore::new(), MemoryDeadLetters::new());
    let metrics = MetricsSink::capture("subscription");
    let svc = SubscriptionService {
        store: &store,
        dead_letters: Some(&dlq),
        metrics: &metrics,
    };
    let response = handle_batch(&svc, event).await;
    assert!(response.batch_item_failures.is_empty(), "acknowledged");
    let sent = dlq.sent();
    assert_eq!(sent.len(), 1);
    assert!(sent[0].0.contains("aws.s3"), "the body is kept: {sent:?}");
    assert!(store.rows().is_empty());
    assert_eq!(metrics.total("SubscriptionEventRejected"), 1.0);
    // Without a DLQ configured, the message fails for redelivery instead.
    let svc = SubscriptionService {
        dead_letters: None,
        ..svc
    };
    let mut again = subscription_event();
    again.records[0].body = Some("not json".into());
    let response = handle_batch(&svc, again).await;
    assert_eq!(response.batch_item_failures.len(), 1);
    assert_eq!(
        response.batch_item_failures[0].item_identifier,
        "c0ffee00-1111-4222-8333-444455556666"
    );
}

struct Register {
    resolver: MemoryResolver,
    profiles: MemoryProfileStore,
    subscribers: MemorySubscriberStore,
    metrics: MetricsSink,
}

impl Register {
    fn new(outcome: TokenOutcome) -> Self {
        let resolver = MemoryResolver::new();
        resolver.insert("EXAMPLE-TOKEN-0123456789", outcome);
        Self {
            resolver,
            profiles: MemoryProfileStore::new(),
            subscribers: MemorySubscriberStore::new(),
            metrics: MetricsSink::capture("register"),
        }
    }

    async fn send(&self, raw: &str) -> lambda_http::Response<lambda_http::Body> {
        let svc = RegisterService {
            resolver: &self.resolver,
            profiles: &self.profiles,
            subscribers: &self.subscribers,
            product_code: "abc123xyz",
            region: "us-east-1",
            metrics: &self.metrics,
        };
        let req = lambda_http::request::from_str(raw).expect("an API Gateway REST event");
        lambda(&svc, req).await.unwrap()
    }
}

fn html(res: &lambda_http::Response<lambda_http::Body>) -> String {
    String::from_utf8(res.body().to_vec()).unwrap()
}

fn resolves(product: &str) -> TokenOutcome {
    TokenOutcome::Resolves(ResolvedCustomer {
        key: sample_key(),
        product_code: product.into(),
    })
}

#[tokio::test]
async fn the_register_sample_stores_the_profile_and_the_subscriber() {
    let r = Register::new(resolves("abc123xyz"));
    let res = r.send(&sample("register.json")).await;
    assert_eq!(res.status(), 200);
    assert!(
        html(&res).contains("data-outcome=\"registered\""),
        "{}",
        html(&res)
    );
    assert!(
        res.headers()
            .get("content-type")
            .is_some_and(|v| v.to_str().unwrap().starts_with("text/html"))
    );
    let profile = r.profiles.get(&sample_key()).expect("the profile");
    assert_eq!(profile.region, "us-east-1");
    assert_eq!(profile.fields["companyName"], "Example Corp");
    assert_eq!(profile.fields["contactEmail"], "buyer@example.com");
    let sub = r.subscribers.get(&sample_key()).await.unwrap().unwrap();
    assert_eq!(
        sub.registered_regions.iter().collect::<Vec<_>>(),
        ["us-east-1"]
    );
    assert_eq!(r.metrics.total("RegistrationSucceeded"), 1.0);
}

#[tokio::test]
async fn the_register_sample_with_a_bad_token_stores_nothing() {
    for (outcome, status) in [
        (TokenOutcome::Expired, 400),
        (resolves("another1product"), 400),
        (TokenOutcome::Fails, 503),
    ] {
        let r = Register::new(outcome);
        let res = r.send(&sample("register.json")).await;
        assert_eq!(res.status(), status);
        assert!(r.profiles.get(&sample_key()).is_none());
        assert!(r.subscribers.rows().is_empty());
        assert_eq!(r.metrics.total("RegistrationFailed"), 1.0);
    }
}

#[tokio::test]
async fn the_deprovision_cleanup_sample_finalizes_a_closed_window() {
    let event: CloudWatchEvent = serde_json::from_str(&sample("deprovision-cleanup.json"))
        .expect("an EventBridge scheduled event");
    assert_eq!(event.detail_type.as_deref(), Some("Scheduled Event"));
    let now = event.time;
    let store = MemorySubscriberStore::new();
    let metrics = MetricsSink::capture("deprovision-cleanup");
    let (closed, open) = (sample_key(), {
        let mut k = sample_key();
        k.license_arn = k.license_arn.replace("l-0123", "l-0124");
        k
    });
    for (key, at) in [
        (&closed, now - Duration::hours(2)),
        (&open, now - Duration::minutes(10)),
    ] {
        let up = Change::LicenseUpdated {
            agreement_id: "agmt-0123456789abcdefghijklmno".into(),
            product_code: Some("abc123xyz".into()),
        };
        store.apply(key, &up, at).await.unwrap();
        let down = Change::LicenseDeprovisioned { product_code: None };
        store.apply(key, &down, at).await.unwrap();
    }
    let report = deprovision_cleanup::run(&store, &metrics, now)
        .await
        .unwrap();
    assert_eq!((report.expired, report.finalized), (1, 1));
    let status = |row: Option<awsmp_lifecycle::domain::state::Subscriber>| {
        row.and_then(|r| r.subscription_status)
    };
    assert_eq!(
        status(store.get(&closed).await.unwrap()),
        Some(LicenseStatus::Inactive)
    );
    assert_eq!(
        status(store.get(&open).await.unwrap()),
        Some(LicenseStatus::Deprovisioning)
    );
    assert_eq!(metrics.total("LicensesFinalized"), 1.0);
}
