//! The reference's lifecycle test plan on the local stack, driven as a buyer would: the
//! simulator's admin API subscribes, ends and deprovisions; the register endpoint is reached
//! over HTTP (`awsmp-local serve-register`); usage rows are written as the seller would; the
//! ledger is the proof.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result};
use awsmp_contract::keys::{GroupKey, HourBucket};
use awsmp_lifecycle::adapters::dynamodb::DynamoDbSubscriberStore;
use awsmp_lifecycle::domain::event::LicenseKey;
use awsmp_lifecycle::domain::state::{AgreementStatus, LicenseStatus, Subscriber};
use awsmp_lifecycle::ports::SubscriberStore;
use chrono::{DateTime, Duration, Utc};
use common::{NEEDS_STACK, STACK, Stack, row, runner, utc};
use serde_json::{Value, json};

/// `awsmp-local serve-register` on a free port, stopped on drop.
struct RegisterEndpoint {
    child: Child,
    url: String,
}

impl RegisterEndpoint {
    fn start() -> Result<Self> {
        let bin =
            std::env::var("AWSMP_LOCAL_BIN").context("AWSMP_LOCAL_BIN (scripts/test sets it)")?;
        let mut child = Command::new(bin)
            .args(["serve-register", "--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().context("stdout")?).read_line(&mut line)?;
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .with_context(|| format!("unexpected first line {line:?}"))?
            .to_owned();
        Ok(Self { child, url })
    }

    async fn post(&self, form: &[(&str, &str)]) -> Result<(u16, String)> {
        let body = serde_urlencoded::to_string(form)?;
        let resp = reqwest::Client::new()
            .post(&self.url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await?;
        Ok((resp.status().as_u16(), resp.text().await?))
    }
}

impl Drop for RegisterEndpoint {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn admin(stack: &Stack, path: &str, body: Value) -> Result<Value> {
    let resp = reqwest::Client::new()
        .post(format!("{}{path}", stack.admin))
        .json(&body)
        .send()
        .await?;
    anyhow::ensure!(resp.status().is_success(), "{path}: HTTP {}", resp.status());
    Ok(resp.json().await?)
}

async fn subscribe(stack: &Stack, account: &str) -> Result<(LicenseKey, String)> {
    let product = stack.env.get("AWSMP_PRODUCT_CODE")?.to_owned();
    let sub = admin(
        stack,
        "/_sim/subscribe",
        json!({"productCode": product, "customerAWSAccountId": account}),
    )
    .await?;
    let key = LicenseKey {
        license_arn: sub["licenseArn"].as_str().context("licenseArn")?.to_owned(),
        customer_aws_account_id: account.to_owned(),
    };
    Ok((
        key,
        sub["registrationToken"]["token"]
            .as_str()
            .context("token")?
            .to_owned(),
    ))
}

async fn subscriber(stack: &Stack, key: &LicenseKey) -> Result<Subscriber> {
    let store =
        DynamoDbSubscriberStore::new(stack.ddb.clone(), stack.env.get("AWSMP_SUBSCRIBERS_TABLE")?);
    store.get(key).await?.context("no subscriber row")
}

async fn billed(stack: &Stack, license: &str) -> Result<Vec<Value>> {
    let ledger: Value = reqwest::get(format!("{}/_sim/ledger", stack.admin))
        .await?
        .json()
        .await?;
    Ok(ledger["records"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["licenseArn"] == license)
        .cloned()
        .collect())
}

fn group(key: &LicenseKey, at: DateTime<Utc>) -> GroupKey {
    GroupKey::new(
        &key.license_arn,
        &key.customer_aws_account_id,
        "api_calls",
        HourBucket::containing(at),
    )
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn subscribe_register_end_agreement_use_and_be_billed() -> Result<()> {
    let _ = NEEDS_STACK;
    let _guard = STACK.lock().await;
    let stack = Stack::new().await?;
    let runner = runner(&[]).await?;
    let register = RegisterEndpoint::start()?;
    // GIVEN a buyer who subscribes at t0 (the simulator emits the lifecycle events).
    let t0 = utc(2026, 12, 1, 9, 0, 30);
    runner.set_time(t0).await?;
    let (key, token) = subscribe(&stack, "512345678901").await?;
    let report = runner.tick(t0).await?;
    assert!(report.lifecycle_events >= 2, "{report:?}");
    let row0 = subscriber(&stack, &key).await?;
    assert_eq!(row0.subscription_status, Some(LicenseStatus::Active));
    assert_eq!(row0.agreement_status, Some(AgreementStatus::Active));
    // WHEN they register through the endpoint, with the same link twice (tokens are reusable).
    for company in ["Acme", "Acme Inc"] {
        let (status, page) = register
            .post(&[
                ("x-amzn-marketplace-token", &token),
                ("companyName", company),
            ])
            .await?;
        assert_eq!(status, 200, "{page}");
        assert!(page.contains(r#"data-outcome="registered""#), "{page}");
    }
    let row1 = subscriber(&stack, &key).await?;
    assert!(
        row1.registered_regions
            .contains(stack.env.get("AWS_REGION")?)
    );
    // AND end their agreement: the license keeps metering.
    admin(
        &stack,
        "/_sim/end-agreement",
        json!({"licenseArn": key.license_arn}),
    )
    .await?;
    runner.tick(t0 + Duration::minutes(1)).await?;
    let row2 = subscriber(&stack, &key).await?;
    assert_eq!(row2.agreement_status, Some(AgreementStatus::Inactive));
    assert_eq!(row2.subscription_status, Some(LicenseStatus::Active));
    // AND use the product in hour t0.
    let g = group(&key, t0);
    stack.put_rows(&[row(&g, 100, 3), row(&g, 200, 4)]).await?;
    // THEN once the hour's lock has passed, it is billed, exactly once.
    runner.tick(t0 + Duration::hours(2)).await?;
    let records = billed(&stack, &key.license_arn).await?;
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["quantity"], 7);
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn deprovisioned_mid_hour_the_current_hour_is_billed_before_the_window_closes_then_inactive()
-> Result<()> {
    let _guard = STACK.lock().await;
    let stack = Stack::new().await?;
    let runner = runner(&[]).await?;
    let t0 = utc(2026, 12, 2, 10, 0, 30);
    runner.set_time(t0).await?;
    let (key, _) = subscribe(&stack, "612345678901").await?;
    runner.tick(t0).await?;
    let g = group(&key, t0);
    // GIVEN usage in the current hour, and AWS deprovisions the license at T = 10:02.
    stack
        .put_rows(&[row(&g, 60, 5), row(&g, 1800, 6), row(&g, 3000, 2)])
        .await?;
    let deprovisioned_at = t0 + Duration::seconds(90);
    runner.set_time(deprovisioned_at).await?;
    admin(
        &stack,
        "/_sim/deprovision",
        json!({"licenseArn": key.license_arn}),
    )
    .await?;
    runner.tick(deprovisioned_at).await?;
    let row0 = subscriber(&stack, &key).await?;
    assert_eq!(
        row0.subscription_status,
        Some(LicenseStatus::Deprovisioning)
    );
    let expiry = row0.deprovisioning_expiry.context("expiry")?;
    assert_eq!(expiry, deprovisioned_at + Duration::hours(1));
    // WHEN the pipeline runs within the last 10 minutes of the window (still the same hour).
    let flush = expiry - Duration::minutes(9);
    assert_eq!(HourBucket::containing(flush), g.hour, "the current hour");
    runner.tick(flush).await?;
    // THEN every unit of the hour is billed before the window closes, once.
    let records = billed(&stack, &key.license_arn).await?;
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["quantity"], 13);
    // AND after the window the license is finalized inactive and leaves the index.
    let report = runner.tick(expiry + Duration::minutes(1)).await?;
    assert!(
        report.deprovision_cleanup.is_some_and(|c| c.finalized >= 1),
        "{report:?}"
    );
    let row1 = subscriber(&stack, &key).await?;
    assert_eq!(row1.subscription_status, Some(LicenseStatus::Inactive));
    assert_eq!(row1.deprovisioning_expiry, None);
    Ok(())
}

#[tokio::test]
#[ignore = "needs the local stack (awsmp-local up); run by scripts/test"]
async fn registration_tokens_expired_invalid_and_reused() -> Result<()> {
    let _guard = STACK.lock().await;
    let stack = Stack::new().await?;
    let runner = runner(&[]).await?;
    let register = RegisterEndpoint::start()?;
    let t0 = utc(2026, 12, 3, 8, 0, 0);
    runner.set_time(t0).await?;
    let (key, token) = subscribe(&stack, "712345678901").await?;
    // Reused within its lifetime: the same answer.
    for _ in 0..2 {
        let (status, page) = register
            .post(&[("x-amzn-marketplace-token", &token)])
            .await?;
        assert_eq!(status, 200, "{page}");
        assert!(
            page.contains("type=\"hidden\""),
            "the form, token carried: {page}"
        );
    }
    // Invalid.
    let (status, page) = register
        .post(&[("x-amzn-marketplace-token", "tok-never-issued")])
        .await?;
    assert_eq!(status, 400);
    assert!(page.contains(r#"data-outcome="InvalidToken""#), "{page}");
    // Expired: four hours later.
    runner.set_time(t0 + Duration::hours(4)).await?;
    let (status, page) = register
        .post(&[
            ("x-amzn-marketplace-token", &token),
            ("companyName", "Late"),
        ])
        .await?;
    assert_eq!(status, 400);
    assert!(page.contains(r#"data-outcome="ExpiredToken""#), "{page}");
    assert!(
        page.contains("Set up your account"),
        "tells the buyer what to do"
    );
    // A fresh token ("Set up your account" again) works.
    let fresh = admin(
        &stack,
        "/_sim/tokens",
        json!({"licenseArn": key.license_arn}),
    )
    .await?;
    let (status, _) = register
        .post(&[
            (
                "x-amzn-marketplace-token",
                fresh["token"].as_str().context("token")?,
            ),
            ("companyName", "Late"),
        ])
        .await?;
    assert_eq!(status, 200);
    Ok(())
}
