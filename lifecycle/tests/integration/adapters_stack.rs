//! The DynamoDB, SQS and `ResolveCustomer` adapters on the local stack, held to the memory
//! twins and to the pipeline's reader of the deprovisioning index. Run with the stack's env
//! sourced: `cargo test -p awsmp-lifecycle --test integration adapters_stack:: -- --include-ignored`.

use std::sync::atomic::{AtomicU64, Ordering};

use aws_sdk_dynamodb::types::AttributeValue as Av;
use awsmp_aws::deprovisioning::DeprovisioningIndex;
use awsmp_aws::deprovisioning::DynamoDbDeprovisioningIndex;
use awsmp_lifecycle::adapters::dynamodb::{DynamoDbProfileStore, DynamoDbSubscriberStore};
use awsmp_lifecycle::adapters::memory::MemorySubscriberStore;
use awsmp_lifecycle::adapters::resolver::MarketplaceCustomerResolver;
use awsmp_lifecycle::adapters::sqs::{REASON_ATTRIBUTE, SqsDeadLetters};
use awsmp_lifecycle::domain::event::{AgreementTerms, Change, LicenseKey};
use awsmp_lifecycle::domain::registration::{Registration, ResolvedCustomer};
use awsmp_lifecycle::ports::{
    CustomerProfileStore, CustomerResolver, DeadLetters, ResolveError, SubscriberStore,
};
use chrono::{DateTime, Duration, SubsecRound, TimeZone, Utc};
use proptest::prelude::*;

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} not set: source the local stack's env"))
}

async fn sdk() -> aws_config::SdkConfig {
    awsmp_aws::sdk::sdk_config().await
}

async fn subscribers() -> DynamoDbSubscriberStore {
    let sdk = sdk().await;
    DynamoDbSubscriberStore::new(
        aws_sdk_dynamodb::Client::new(&sdk),
        env("AWSMP_SUBSCRIBERS_TABLE"),
    )
}

/// A license no other test uses.
fn fresh_key() -> LicenseKey {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = Utc::now().timestamp_nanos_opt().unwrap_or_default() as u64;
    let n = N.fetch_add(1, Ordering::Relaxed);
    LicenseKey {
        license_arn: format!(
            "arn:aws:license-manager::123456789012:license:l-{:016x}{:016x}",
            nanos, n
        ),
        customer_aws_account_id: "333344445555".into(),
    }
}

fn t(min: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 0).unwrap() + Duration::minutes(min)
}

fn change() -> impl Strategy<Value = (Change, i64)> {
    let agreement = |b: bool| {
        if b {
            "agmt-b".to_owned()
        } else {
            "agmt-a".to_owned()
        }
    };
    prop_oneof![
        (any::<bool>(), 0..4i64).prop_map(move |(b, m)| (
            Change::LicenseUpdated {
                agreement_id: agreement(b),
                product_code: Some("prod1".into())
            },
            m + if b { 10 } else { 0 }
        )),
        (0..20i64).prop_map(|m| (Change::LicenseDeprovisioned { product_code: None }, m)),
        any::<bool>().prop_map(move |b| (
            Change::AgreementEnded {
                agreement_id: agreement(b),
                status: Some("EXPIRED".into())
            },
            19
        )),
        (any::<bool>(), 0..20i64, any::<bool>()).prop_map(move |(b, m, end)| (
            Change::AgreementAmended {
                agreement_id: agreement(b),
                terms: AgreementTerms {
                    start_time: Some("2026-01-01T00:00:00Z".into()),
                    end_time: end.then(|| format!("2027-01-01T00:{m:02}:00Z")),
                },
            },
            m
        )),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    #[ignore = "needs the local stack (awsmp-local up)"]
    fn dynamodb_transitions_match_the_pure_ones(changes in prop::collection::vec(change(), 1..7)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let ddb = subscribers().await;
            let mem = MemorySubscriberStore::new();
            let key = fresh_key();
            for (c, m) in &changes {
                let a = ddb.apply(&key, c, t(*m)).await.unwrap();
                let b = mem.apply(&key, c, t(*m)).await.unwrap();
                assert_eq!(a, b, "outcome of {c:?}");
            }
            let stored = ddb.get(&key).await.unwrap();
            let expected = mem.get(&key).await.unwrap();
            assert_eq!(stored, expected, "after {changes:?}");
        });
    }
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up)"]
async fn cleanup_finalizes_once_and_the_pipeline_reads_what_subscription_writes() {
    let ddb = subscribers().await;
    let sdk = sdk().await;
    let index = DynamoDbDeprovisioningIndex::new(
        aws_sdk_dynamodb::Client::new(&sdk),
        env("AWSMP_SUBSCRIBERS_TABLE"),
    );
    let key = fresh_key();
    let at = (Utc::now() - Duration::minutes(61)).trunc_subsecs(0);
    ddb.apply(
        &key,
        &Change::LicenseDeprovisioned {
            product_code: Some("prod1".into()),
        },
        at,
    )
    .await
    .unwrap();
    // The pipeline's reader sees the license with its window's close.
    let active = index.active().await.unwrap();
    let ours = active
        .iter()
        .find(|d| d.license_arn == key.license_arn)
        .expect("in the index");
    assert_eq!(ours.customer_aws_account_id, key.customer_aws_account_id);
    assert_eq!(ours.expiry, at + Duration::hours(1));
    // Not expired an hour before; expired now.
    let before = ddb.expired_deprovisioning(at).await.unwrap();
    assert!(!before.iter().any(|(k, _)| k == &key));
    let now = Utc::now();
    let expired = ddb.expired_deprovisioning(now).await.unwrap();
    assert!(
        expired
            .iter()
            .any(|(k, e)| k == &key && *e == at + Duration::hours(1))
    );
    // A finalize conditioned on a time before the close does nothing.
    assert!(!ddb.finalize(&key, at).await.unwrap());
    // Two concurrent finalizes: exactly one wins.
    let (a, b) = tokio::join!(ddb.finalize(&key, now), ddb.finalize(&key, now));
    assert_eq!(u8::from(a.unwrap()) + u8::from(b.unwrap()), 1);
    let row = ddb.get(&key).await.unwrap().unwrap();
    assert_eq!(row.deprovisioning_expiry, None);
    assert!(
        !index
            .active()
            .await
            .unwrap()
            .iter()
            .any(|d| d.license_arn == key.license_arn)
    );
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up)"]
async fn agreement_lookup_returns_every_license_and_registration_adds_regions() {
    let ddb = subscribers().await;
    let agreement = format!("agmt-{}", &fresh_key().license_arn[60..]);
    let keys: Vec<LicenseKey> = (0..3).map(|_| fresh_key()).collect();
    for k in &keys {
        let c = Change::LicenseUpdated {
            agreement_id: agreement.clone(),
            product_code: None,
        };
        ddb.apply(k, &c, t(0)).await.unwrap();
    }
    let mut found = ddb.licenses_of_agreement(&agreement).await.unwrap();
    found.sort();
    let mut want = keys.clone();
    want.sort();
    assert_eq!(found, want);
    for region in ["eu-west-1", "us-east-1", "eu-west-1"] {
        ddb.record_registration(&keys[0], "prod1", region, Utc::now())
            .await
            .unwrap();
    }
    let row = ddb.get(&keys[0]).await.unwrap().unwrap();
    assert_eq!(
        row.registered_regions.iter().collect::<Vec<_>>(),
        ["eu-west-1", "us-east-1"]
    );
    assert_eq!(row.product_code.as_deref(), Some("prod1"));
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up)"]
async fn the_profile_holds_the_fields_as_a_map() {
    let sdk = sdk().await;
    let client = aws_sdk_dynamodb::Client::new(&sdk);
    let table = env("AWSMP_CUSTOMER_PROFILE_TABLE");
    let profiles = DynamoDbProfileStore::new(client.clone(), &table);
    let key = fresh_key();
    let customer = ResolvedCustomer {
        key: key.clone(),
        product_code: "prod1".into(),
    };
    let mut reg = Registration::default();
    reg.fields.insert("companyName".into(), "Acme".into());
    profiles
        .put(&customer, &reg, "eu-west-1", Utc::now())
        .await
        .unwrap();
    let item = client
        .get_item()
        .table_name(&table)
        .key("licenseArn", Av::S(key.license_arn.clone()))
        .key(
            "customerAWSAccountId",
            Av::S(key.customer_aws_account_id.clone()),
        )
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    let data = item["registrationData"].as_m().unwrap();
    assert_eq!(data["companyName"], Av::S("Acme".into()));
    assert_eq!(item["registrationRegion"], Av::S("eu-west-1".into()));
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up)"]
async fn dead_letters_carry_their_reason_and_resolve_customer_maps_the_simulators_errors() {
    let sdk = sdk().await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let url = env("AWSMP_SUBSCRIPTION_DLQ_URL");
    let body = format!("not json {}", fresh_key().license_arn);
    SqsDeadLetters::new(sqs.clone(), &url)
        .send(&body, "EventNotJson", "expected value")
        .await
        .unwrap();
    let mut seen = false;
    for _ in 0..10 {
        let out = sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .message_attribute_names("All")
            .send()
            .await
            .unwrap();
        for m in out.messages() {
            if m.body() == Some(body.as_str()) {
                let attrs = m.message_attributes().unwrap();
                assert_eq!(attrs[REASON_ATTRIBUTE].string_value(), Some("EventNotJson"));
                seen = true;
                sqs.delete_message()
                    .queue_url(&url)
                    .receipt_handle(m.receipt_handle().unwrap())
                    .send()
                    .await
                    .unwrap();
            }
        }
        if seen {
            break;
        }
    }
    assert!(seen, "the dead letter arrived");
    let resolver = MarketplaceCustomerResolver::new(aws_sdk_marketplacemetering::Client::new(&sdk));
    let c = resolver.resolve("demo-token-valid").await.unwrap();
    assert_eq!(c.product_code, env("AWSMP_PRODUCT_CODE"));
    assert_eq!(c.key.customer_aws_account_id, "210000000000");
    assert!(matches!(
        resolver.resolve("demo-token-expired").await,
        Err(ResolveError::Expired)
    ));
    assert!(matches!(
        resolver.resolve("no-such-token").await,
        Err(ResolveError::Invalid)
    ));
}
