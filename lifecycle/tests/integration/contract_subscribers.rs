//! The subscribers table contract, run against the memory twin (`MemorySubscriberStore`, plain
//! `cargo test`) and DynamoDB Local (`DynamoDbSubscriberStore` and the pipeline's
//! `DynamoDbDeprovisioningIndex`; `#[ignore]`d, `scripts/test` runs it): the lifecycle's
//! conditional writes and the sparse `deprovisioning-pending-index` the pipeline reads
//! (docs/lifecycle.md).
//!
//! - a license never comes back: `License Updated` after `License Deprovisioned` (later, earlier
//!   or duplicated) leaves it deprovisioning, and nothing brings an inactive one back;
//! - the index holds a license exactly while its flag is set: from `License Deprovisioned` to
//!   the finalize, which only succeeds once the window (event time + 1 h) has closed, and once;
//! - the `agreementId-index` returns every license of an agreement.
//!
//! Not asserted here: paging of the index reads beyond one page (a DynamoDB page is 1 MB, far
//! more rows than a test writes; the adapters follow `LastEvaluatedKey`), and the eventual
//! consistency of the GSIs (DynamoDB Local answers index reads consistently; the memory twin
//! has no lag).
//!
//! Run against the stack: `awsmp-local up && set -a && . $AWSMP_LOCAL_DIR/env && set +a &&
//! cargo test -p awsmp-lifecycle --test integration contract_subscribers:: -- --include-ignored`

use std::sync::atomic::{AtomicU64, Ordering};

use awsmp_aws::deprovisioning::DeprovisioningIndex;
use awsmp_aws::deprovisioning::DynamoDbDeprovisioningIndex;
use awsmp_lifecycle::adapters::dynamodb::DynamoDbSubscriberStore;
use awsmp_lifecycle::adapters::memory::MemorySubscriberStore;
use awsmp_lifecycle::domain::event::{Change, LicenseKey};
use awsmp_lifecycle::domain::state::LicenseStatus;
use awsmp_lifecycle::ports::SubscriberStore;
use chrono::{DateTime, Duration, TimeZone, Utc};

/// The store and the pipeline's reader of its deprovisioning index, over one table.
struct Subject<'a> {
    store: &'a dyn SubscriberStore,
    index: &'a dyn DeprovisioningIndex,
}

/// A license no other run uses.
fn fresh_key() -> LicenseKey {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = Utc::now().timestamp_nanos_opt().unwrap_or_default() as u64;
    let n = N.fetch_add(1, Ordering::Relaxed);
    LicenseKey {
        license_arn: format!(
            "arn:aws:license-manager::123456789012:license:l-{nanos:016x}{n:016x}"
        ),
        customer_aws_account_id: "444455556666".into(),
    }
}

/// The instant `min` minutes after the scenarios' deprovisioning.
fn t(min: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 0).unwrap() + Duration::minutes(min)
}

fn updated(agreement: &str) -> Change {
    Change::LicenseUpdated {
        agreement_id: agreement.to_owned(),
        product_code: Some("prod1".into()),
    }
}

fn deprovisioned() -> Change {
    Change::LicenseDeprovisioned {
        product_code: Some("prod1".into()),
    }
}

async fn status(s: &Subject<'_>, key: &LicenseKey) -> Option<LicenseStatus> {
    s.store
        .get(key)
        .await
        .unwrap()
        .and_then(|r| r.subscription_status)
}

/// The expiry the pipeline's reader sees for `key`, if the index holds it.
async fn indexed(s: &Subject<'_>, key: &LicenseKey) -> Option<DateTime<Utc>> {
    let found: Vec<_> = s
        .index
        .active()
        .await
        .unwrap()
        .into_iter()
        .filter(|d| d.license_arn == key.license_arn)
        .collect();
    assert!(found.len() <= 1, "one index entry per license: {found:?}");
    found
        .first()
        .inspect(|d| assert_eq!(d.customer_aws_account_id, key.customer_aws_account_id))
        .map(|d| d.expiry)
}

async fn expired(s: &Subject<'_>, key: &LicenseKey, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    s.store
        .expired_deprovisioning(now)
        .await
        .unwrap()
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, e)| e)
}

/// A deprovisioned license is never reactivated, whatever order `License Updated` comes in.
async fn a_license_is_never_reactivated(s: &Subject<'_>) {
    // GIVEN an active license, deprovisioned at t(0)
    let key = fresh_key();
    s.store
        .apply(&key, &updated("agmt-1"), t(-30))
        .await
        .unwrap();
    assert_eq!(status(s, &key).await, Some(LicenseStatus::Active));
    assert_eq!(
        indexed(s, &key).await,
        None,
        "an active license is not in the index"
    );
    s.store.apply(&key, &deprovisioned(), t(0)).await.unwrap();
    // WHEN License Updated arrives later, earlier, and the deprovisioning again
    s.store.apply(&key, &updated("agmt-2"), t(5)).await.unwrap();
    s.store
        .apply(&key, &updated("agmt-0"), t(-40))
        .await
        .unwrap();
    s.store.apply(&key, &deprovisioned(), t(0)).await.unwrap();
    // THEN it is still deprovisioning, its window still closing at t(60)
    assert_eq!(status(s, &key).await, Some(LicenseStatus::Deprovisioning));
    assert_eq!(indexed(s, &key).await, Some(t(60)));
    // AND once finalized, nothing brings it back
    assert!(s.store.finalize(&key, t(60)).await.unwrap());
    s.store
        .apply(&key, &updated("agmt-3"), t(90))
        .await
        .unwrap();
    s.store.apply(&key, &deprovisioned(), t(95)).await.unwrap();
    s.store
        .record_registration(&key, "prod1", "eu-west-1", t(96))
        .await
        .unwrap();
    let row = s.store.get(&key).await.unwrap().unwrap();
    assert_eq!(row.subscription_status, Some(LicenseStatus::Inactive));
    assert_eq!(row.deprovisioning_expiry, None);
    assert_eq!(indexed(s, &key).await, None);
    assert_eq!(expired(s, &key, t(200)).await, None);
}

/// A `License Deprovisioned` for a license never seen opens its window all the same.
async fn a_first_event_of_deprovisioned_opens_the_window(s: &Subject<'_>) {
    let key = fresh_key();
    s.store.apply(&key, &deprovisioned(), t(0)).await.unwrap();
    s.store
        .apply(&key, &updated("agmt-1"), t(-5))
        .await
        .unwrap();
    assert_eq!(status(s, &key).await, Some(LicenseStatus::Deprovisioning));
    assert_eq!(indexed(s, &key).await, Some(t(60)));
}

/// The sparse index holds the license exactly while its flag is set; the finalize succeeds
/// only once the window closed, and once.
async fn the_index_follows_the_flag_and_finalize_runs_once(s: &Subject<'_>) {
    let key = fresh_key();
    s.store
        .apply(&key, &updated("agmt-1"), t(-10))
        .await
        .unwrap();
    s.store.apply(&key, &deprovisioned(), t(0)).await.unwrap();
    assert_eq!(indexed(s, &key).await, Some(t(60)));
    // Not expired a minute before the close; expired at it.
    assert_eq!(expired(s, &key, t(59)).await, None);
    assert_eq!(expired(s, &key, t(60)).await, Some(t(60)));
    // A finalize before the close does nothing.
    assert!(!s.store.finalize(&key, t(59)).await.unwrap());
    assert_eq!(status(s, &key).await, Some(LicenseStatus::Deprovisioning));
    // Two concurrent finalizes: exactly one wins.
    let (a, b) = tokio::join!(s.store.finalize(&key, t(61)), s.store.finalize(&key, t(61)));
    assert_eq!(u8::from(a.unwrap()) + u8::from(b.unwrap()), 1);
    assert_eq!(status(s, &key).await, Some(LicenseStatus::Inactive));
    assert_eq!(indexed(s, &key).await, None, "gone from the index");
    assert!(!s.store.finalize(&key, t(62)).await.unwrap());
    // A license never deprovisioned is never finalized.
    let other = fresh_key();
    s.store
        .apply(&other, &updated("agmt-1"), t(0))
        .await
        .unwrap();
    assert!(!s.store.finalize(&other, t(600)).await.unwrap());
    assert_eq!(status(s, &other).await, Some(LicenseStatus::Active));
}

/// The agreement index returns every license of the agreement, and only those.
async fn the_agreement_index_returns_every_license(s: &Subject<'_>) {
    let agreement = format!("agmt-{}", &fresh_key().license_arn[48..]);
    let mut keys: Vec<LicenseKey> = (0..25).map(|_| fresh_key()).collect();
    for k in &keys {
        s.store.apply(k, &updated(&agreement), t(0)).await.unwrap();
    }
    // One of them moves to another agreement by a newer License Updated.
    let moved = keys.pop().unwrap();
    s.store
        .apply(&moved, &updated(&format!("{agreement}-next")), t(1))
        .await
        .unwrap();
    let mut found = s.store.licenses_of_agreement(&agreement).await.unwrap();
    found.sort();
    keys.sort();
    assert_eq!(found, keys);
}

async fn contract(s: &Subject<'_>) {
    a_license_is_never_reactivated(s).await;
    a_first_event_of_deprovisioned_opens_the_window(s).await;
    the_index_follows_the_flag_and_finalize_runs_once(s).await;
    the_agreement_index_returns_every_license(s).await;
}

#[tokio::test]
async fn the_memory_subscribers_table_keeps_the_contract() {
    let store = MemorySubscriberStore::new();
    contract(&Subject {
        store: &store,
        index: &store,
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn dynamodb_local_keeps_the_contract() {
    let table = std::env::var("AWSMP_SUBSCRIBERS_TABLE")
        .expect("AWSMP_SUBSCRIBERS_TABLE not set: source the local stack's env");
    let client = aws_sdk_dynamodb::Client::new(&awsmp_aws::sdk::sdk_config().await);
    let store = DynamoDbSubscriberStore::new(client.clone(), table.clone());
    let index = DynamoDbDeprovisioningIndex::new(client, table);
    contract(&Subject {
        store: &store,
        index: &index,
    })
    .await;
}
