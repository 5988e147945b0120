//! The deprovision-cleanup and register handlers over the memory adapters.

use awsmp_aws::emf::MetricsSink;
use awsmp_lifecycle::adapters::memory::{
    MemoryProfileStore, MemoryResolver, MemorySubscriberStore, TokenOutcome,
};
use awsmp_lifecycle::domain::event::{Change, LicenseKey};
use awsmp_lifecycle::domain::registration::ResolvedCustomer;
use awsmp_lifecycle::domain::state::LicenseStatus;
use awsmp_lifecycle::handlers::deprovision_cleanup;
use awsmp_lifecycle::handlers::register::{Page, RegisterRequest, RegisterService, respond};
use awsmp_lifecycle::ports::SubscriberStore;
use chrono::{DateTime, Duration, TimeZone, Utc};

fn key(n: u8) -> LicenseKey {
    LicenseKey {
        license_arn: format!("arn:aws:license-manager::123456789012:license:l-{n:032x}"),
        customer_aws_account_id: "111122223333".into(),
    }
}

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap()
}

async fn deprovisioned(store: &MemorySubscriberStore, k: &LicenseKey, at: DateTime<Utc>) {
    let up = Change::LicenseUpdated {
        agreement_id: "agmt-1".into(),
        product_code: Some("prod1".into()),
    };
    store.apply(k, &up, at).await.unwrap();
    store
        .apply(k, &Change::LicenseDeprovisioned { product_code: None }, at)
        .await
        .unwrap();
}

#[tokio::test]
async fn cleanup_finalizes_only_closed_windows_and_concurrent_runs_finalize_once() {
    let store = MemorySubscriberStore::new();
    let metrics = MetricsSink::capture("deprovision-cleanup");
    deprovisioned(&store, &key(1), t0()).await;
    deprovisioned(&store, &key(2), t0() + Duration::minutes(30)).await;
    // GIVEN a run 10 minutes before the first window closes: nothing.
    let r = deprovision_cleanup::run(&store, &metrics, t0() + Duration::minutes(50))
        .await
        .unwrap();
    assert_eq!((r.expired, r.finalized), (0, 0));
    // WHEN the first window has closed, two runs at once.
    let now = t0() + Duration::hours(1);
    let (a, b) = tokio::join!(
        deprovision_cleanup::run(&store, &metrics, now),
        deprovision_cleanup::run(&store, &metrics, now)
    );
    // THEN it is finalized exactly once, the other license untouched.
    assert_eq!(a.unwrap().finalized + b.unwrap().finalized, 1);
    let one = store.get(&key(1)).await.unwrap().unwrap();
    assert_eq!(one.subscription_status, Some(LicenseStatus::Inactive));
    assert_eq!(one.deprovisioning_expiry, None);
    let two = store.get(&key(2)).await.unwrap().unwrap();
    assert_eq!(two.subscription_status, Some(LicenseStatus::Deprovisioning));
    assert_eq!(metrics.total("LicensesFinalized"), 1.0);
    // A redelivered License Deprovisioned after finalization changes nothing.
    store
        .apply(
            &key(1),
            &Change::LicenseDeprovisioned { product_code: None },
            now,
        )
        .await
        .unwrap();
    assert_eq!(store.get(&key(1)).await.unwrap().unwrap(), one);
    // The index empties itself.
    let later = t0() + Duration::hours(3);
    deprovision_cleanup::run(&store, &metrics, later)
        .await
        .unwrap();
    assert!(
        store
            .expired_deprovisioning(later)
            .await
            .unwrap()
            .is_empty()
    );
}

struct Reg {
    resolver: MemoryResolver,
    profiles: MemoryProfileStore,
    subscribers: MemorySubscriberStore,
    metrics: MetricsSink,
}

impl Reg {
    fn new() -> Self {
        let resolver = MemoryResolver::new();
        let customer = |product: &str| ResolvedCustomer {
            key: key(7),
            product_code: product.into(),
        };
        resolver.insert("good", TokenOutcome::Resolves(customer("prod1")));
        resolver.insert("other", TokenOutcome::Resolves(customer("prod2")));
        resolver.insert("old", TokenOutcome::Expired);
        resolver.insert("flaky", TokenOutcome::Fails);
        Self {
            resolver,
            profiles: MemoryProfileStore::new(),
            subscribers: MemorySubscriberStore::new(),
            metrics: MetricsSink::capture("register"),
        }
    }

    async fn send(&self, method: &str, content_type: Option<&str>, body: &str) -> Page {
        let svc = RegisterService {
            resolver: &self.resolver,
            profiles: &self.profiles,
            subscribers: &self.subscribers,
            product_code: "prod1",
            region: "eu-west-1",
            metrics: &self.metrics,
        };
        let req = RegisterRequest {
            method,
            content_type,
            body: body.as_bytes(),
        };
        respond(&svc, req, t0()).await
    }

    async fn post(&self, body: &str) -> Page {
        self.send("POST", Some("application/x-www-form-urlencoded"), body)
            .await
    }
}

fn outcome(page: &Page) -> String {
    let marker = "data-outcome=\"";
    page.html
        .split_once(marker)
        .and_then(|(_, rest)| rest.split_once('"'))
        .map(|(o, _)| o.to_owned())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_registration_stores_the_allowlisted_fields_in_region_and_a_pii_free_subscriber() {
    let r = Reg::new();
    let page = r
        .post("x-amzn-marketplace-token=good&companyName=Acme&contactEmail=ops%40acme.example&ssn=123")
        .await;
    assert_eq!((page.status, outcome(&page).as_str()), (200, "registered"));
    let profile = r.profiles.get(&key(7)).unwrap();
    assert_eq!(profile.region, "eu-west-1");
    assert_eq!(
        profile.fields.keys().collect::<Vec<_>>(),
        ["companyName", "contactEmail"]
    );
    let sub = r.subscribers.get(&key(7)).await.unwrap().unwrap();
    assert_eq!(
        sub.registered_regions.iter().collect::<Vec<_>>(),
        ["eu-west-1"]
    );
    assert_eq!(sub.product_code.as_deref(), Some("prod1"));
    assert_eq!(
        sub.subscription_status, None,
        "registration never sets a status"
    );
    assert_eq!(r.metrics.total("RegistrationSucceeded"), 1.0);
    // The same token again within its lifetime works (tokens are reusable until they expire).
    let again = r
        .post("x-amzn-marketplace-token=good&companyName=Acme+2")
        .await;
    assert_eq!(again.status, 200);
    assert_eq!(
        r.profiles.get(&key(7)).unwrap().fields["companyName"],
        "Acme 2"
    );
}

#[tokio::test]
async fn the_marketplace_redirect_answers_the_form_with_the_token_hidden() {
    let r = Reg::new();
    let page = r.post("x-amzn-marketplace-token=good").await;
    assert_eq!(page.status, 200);
    assert!(
        page.html
            .contains(r#"type="hidden" name="x-amzn-marketplace-token" value="good""#)
    );
    assert!(r.profiles.get(&key(7)).is_none(), "no fields yet");
    assert!(
        r.subscribers.get(&key(7)).await.unwrap().is_some(),
        "the subscriber is upserted"
    );
}

#[tokio::test]
async fn token_and_input_problems_are_clear_4xx_pages() {
    let r = Reg::new();
    for (body, status, reason) in [
        ("x-amzn-marketplace-token=old", 400, "ExpiredToken"),
        ("x-amzn-marketplace-token=nope", 400, "InvalidToken"),
        ("x-amzn-marketplace-token=other", 400, "ProductMismatch"),
        ("companyName=Acme", 400, "MissingToken"),
        (
            "x-amzn-marketplace-token=good&contactEmail=nope",
            400,
            "MalformedForm",
        ),
        (
            "x-amzn-marketplace-token=flaky",
            503,
            "ResolveCustomerFailed",
        ),
    ] {
        let page = r.post(body).await;
        assert_eq!(
            (page.status, outcome(&page)),
            (status, reason.to_owned()),
            "{body}"
        );
    }
    let expired = r.post("x-amzn-marketplace-token=old").await;
    assert!(
        expired.html.contains("Set up your account"),
        "tells the buyer what to do"
    );
    let big = format!(
        "x-amzn-marketplace-token=good&useCase={}",
        "a".repeat(20_000)
    );
    assert_eq!(r.post(&big).await.status, 413);
    assert_eq!(
        r.send("POST", Some("application/json"), "{}").await.status,
        415
    );
    assert_eq!(r.send("POST", None, "x").await.status, 415);
    let put = r.send("PUT", None, "").await;
    assert_eq!(put.status, 405);
    assert!(put.all_headers().contains(&("allow", "GET, POST")));
    assert!(r.profiles.get(&key(7)).is_none(), "nothing stored");
    assert_eq!(r.metrics.total("RegistrationFailed"), 10.0);
}

#[tokio::test]
async fn every_page_carries_the_security_headers_and_escapes_what_it_echoes() {
    let r = Reg::new();
    let page = r.send("GET", None, "").await;
    assert_eq!(page.status, 200);
    assert!(
        page.html
            .contains(r#"<form id="registration" method="post">"#)
    );
    let headers = page.all_headers();
    for name in [
        "content-security-policy",
        "strict-transport-security",
        "x-content-type-options",
        "x-frame-options",
        "referrer-policy",
        "cache-control",
    ] {
        assert!(headers.iter().any(|(k, _)| *k == name), "{name}");
    }
    r.resolver.insert(
        "<script>",
        TokenOutcome::Resolves(ResolvedCustomer {
            key: key(8),
            product_code: "prod1".into(),
        }),
    );
    let echoed = r.post("x-amzn-marketplace-token=%3Cscript%3E").await;
    assert!(!echoed.html.contains("<script>"));
    assert!(echoed.html.contains("&lt;script&gt;"));
}

#[tokio::test]
async fn the_lambda_entry_reads_api_gateways_request_and_sends_the_headers() {
    let r = Reg::new();
    let svc = RegisterService {
        resolver: &r.resolver,
        profiles: &r.profiles,
        subscribers: &r.subscribers,
        product_code: "prod1",
        region: "eu-west-1",
        metrics: &r.metrics,
    };
    let req = lambda_http::http::Request::builder()
        .method("POST")
        .header(
            "content-type",
            "application/x-www-form-urlencoded; charset=utf-8",
        )
        .body(lambda_http::Body::Text(
            "x-amzn-marketplace-token=old".into(),
        ))
        .unwrap();
    let resp = awsmp_lifecycle::handlers::register::lambda(&svc, req)
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert_eq!(resp.headers()["x-frame-options"], "DENY");
    let lambda_http::Body::Text(html) = resp.body() else {
        panic!("an HTML body");
    };
    assert!(html.contains(r#"data-outcome="ExpiredToken""#));
}
