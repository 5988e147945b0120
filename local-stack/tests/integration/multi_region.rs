//! A seller's shape on the local stack (docs/local-stack.md, "Many products, many regions"):
//! two products in two regions, one events stack. This test starts a stack of its own
//! (`awsmp-local up --products 2 --regions us-east-1,eu-west-1`, in a temporary directory) and
//! drives every site's runner as `awsmp-local tick` does. The per-region ledgers are the proof.

use crate::common;

use anyhow::{Context, Result, ensure};
use awsmp_aws::dynamodb::to_sdk;
use awsmp_contract::keys::{GroupKey, HourBucket};
use awsmp_lifecycle::adapters::dynamodb::DynamoDbSubscriberStore;
use awsmp_lifecycle::domain::event::LicenseKey;
use awsmp_lifecycle::domain::state::LicenseStatus;
use awsmp_lifecycle::ports::SubscriberStore;
use awsmp_local_stack::local::LocalEnv;
use awsmp_local_stack::local::sites::Sites;
use awsmp_local_stack::testing::{EU, MultiStack, US};
use chrono::{DateTime, Duration, TimeZone, Utc};
use common::{NEEDS_STACK, row};
use serde_json::{Value, json};

async fn admin(env: &LocalEnv, path: &str, body: Value) -> Result<Value> {
    let resp = reqwest::Client::new()
        .post(format!("{}{path}", env.get("AWSMP_SIM_ADMIN_URL")?))
        .json(&body)
        .send()
        .await?;
    ensure!(resp.status().is_success(), "{path}: HTTP {}", resp.status());
    Ok(resp.json().await?)
}

/// Both regions' simulators' clocks to `at` (what a tick's first step does, without the tick).
async fn set_clocks(envs: [&LocalEnv; 2], at: DateTime<Utc>) -> Result<()> {
    for env in envs {
        admin(env, "/_sim/clock", json!({"now": at.to_rfc3339()})).await?;
    }
    Ok(())
}

/// Subscribe `account` to `product`: its license key and its registration token.
async fn subscribe(env: &LocalEnv, product: &str, account: &str) -> Result<(LicenseKey, String)> {
    let sub = admin(
        env,
        "/_sim/subscribe",
        json!({"productCode": product, "customerAWSAccountId": account}),
    )
    .await?;
    let key = LicenseKey {
        license_arn: sub["licenseArn"].as_str().context("licenseArn")?.to_owned(),
        customer_aws_account_id: account.to_owned(),
    };
    let token = sub["registrationToken"]["token"]
        .as_str()
        .context("registrationToken")?;
    Ok((key, token.to_owned()))
}

/// The buyer's form post of `token` to `awsmp-local serve-register --site SITE`: the page's
/// outcome (`data-outcome` of the answer).
async fn register_at(stack: &MultiStack, site: &str, token: &str) -> Result<String> {
    let mut child = stack
        .cmd("awsmp-local")?
        .args(["serve-register", "--listen", "127.0.0.1:0", "--site", site])
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    let stdout = child.stdout.take().context("stdout")?;
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)?;
    let result = async {
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .with_context(|| format!("serve-register said {line:?}"))?;
        let page = reqwest::Client::new()
            .post(url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(serde_urlencoded::to_string([
                ("x-amzn-marketplace-token", token),
                ("companyName", "Two Regions Ltd"),
            ])?)
            .send()
            .await?
            .text()
            .await?;
        let outcome = page
            .split_once("data-outcome=\"")
            .and_then(|(_, rest)| rest.split_once('"'))
            .map(|(o, _)| o.to_owned());
        outcome.with_context(|| format!("no outcome in {page}"))
    }
    .await;
    child.kill().ok();
    child.wait().ok();
    result
}

/// The usage rows of `quantities` (one per minute from minute `first_minute`) of `key`'s
/// `api_calls` in the hour of `at`, written into `env`'s usage table as the seller would.
async fn use_product(
    env: &LocalEnv,
    key: &LicenseKey,
    at: DateTime<Utc>,
    first_minute: u32,
    quantities: &[u64],
) -> Result<GroupKey> {
    let g = GroupKey::new(
        &key.license_arn,
        &key.customer_aws_account_id,
        "api_calls",
        HourBucket::containing(at),
    );
    let ddb = env.dynamodb().await?;
    for (i, q) in quantities.iter().enumerate() {
        let r = row(&g, (first_minute + i as u32) * 60, *q);
        ddb.put_item()
            .table_name(env.get("AWSMP_USAGE_TABLE")?)
            .set_item(Some(
                r.iter().map(|(k, v)| (k.clone(), to_sdk(v))).collect(),
            ))
            .send()
            .await?;
    }
    Ok(g)
}

/// The ledger records of `license` in `env`'s region's simulator.
async fn billed(env: &LocalEnv, license: &str) -> Result<Vec<Value>> {
    let ledger: Value = reqwest::get(format!("{}/_sim/ledger", env.get("AWSMP_SIM_ADMIN_URL")?))
        .await?
        .json()
        .await?;
    ensure!(
        ledger["duplicates"].as_array().is_none_or(Vec::is_empty),
        "{}",
        ledger["duplicates"]
    );
    Ok(ledger["records"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["licenseArn"] == license)
        .cloned()
        .collect())
}

/// The one record of `license` in `env`'s ledger, and its quantity.
async fn billed_once(env: &LocalEnv, license: &str) -> Result<u64> {
    let records = billed(env, license).await?;
    ensure!(records.len() == 1, "{license}: {records:?}");
    records[0]["quantity"].as_u64().context("quantity")
}

async fn status(env: &LocalEnv, key: &LicenseKey) -> Result<Option<LicenseStatus>> {
    let store =
        DynamoDbSubscriberStore::new(env.dynamodb().await?, env.get("AWSMP_SUBSCRIBERS_TABLE")?);
    Ok(store
        .get(key)
        .await?
        .context("no subscriber row")?
        .subscription_status)
}

async fn registered_regions(env: &LocalEnv, key: &LicenseKey) -> Result<Vec<String>> {
    let store =
        DynamoDbSubscriberStore::new(env.dynamodb().await?, env.get("AWSMP_SUBSCRIBERS_TABLE")?);
    let row = store.get(key).await?.context("no subscriber row")?;
    Ok(row.registered_regions.into_iter().collect())
}

#[tokio::test]
#[ignore = "needs the local tools and binaries (scripts/test); starts a stack of its own"]
async fn two_products_in_two_regions_bill_once_per_region_and_deprovisioning_is_per_license()
-> Result<()> {
    let _ = NEEDS_STACK;
    let stack = MultiStack::up()?;
    let topology = stack.topology()?;
    assert_eq!(topology.sites.len(), 4);
    let p1 = topology.sites[0].product_code.clone();
    let p2 = topology.sites[1].product_code.clone();
    let (us1, eu1, us2, eu2) = (
        stack.env(&p1, US)?,
        stack.env(&p1, EU)?,
        stack.env(&p2, US)?,
        stack.env(&p2, EU)?,
    );
    assert_ne!(
        us1.get("AWSMP_SIM_ADMIN_URL")?,
        eu1.get("AWSMP_SIM_ADMIN_URL")?
    );
    let sites = Sites::open(&topology).await?;
    // GIVEN buyer A of product 1 and buyer C of product 2 subscribe (in the events region).
    let t0 = Utc
        .with_ymd_and_hms(2026, 12, 7, 10, 0, 30)
        .single()
        .context("t0")?;
    set_clocks([&us1, &eu1], t0).await?;
    let (a, _) = subscribe(&us1, &p1, "512345000001").await?;
    let (c, c_token) = subscribe(&us1, &p2, "512345000002").await?;
    let report = sites.tick(t0 + Duration::minutes(1)).await?;
    assert_eq!(report.lifecycle_events, 4, "{report:?}");
    assert_eq!(
        report.mirrored, 2,
        "one License Updated each, into eu-west-1"
    );
    assert_eq!(report.echoes, 4, "the mirrors' own events, not delivered");
    assert_eq!(status(&us1, &a).await?, Some(LicenseStatus::Active));
    // AND C registers on product 2's page in eu-west-1 (a token resolves in any region).
    let site = format!("{p2}/{EU}");
    assert_eq!(register_at(&stack, &site, &c_token).await?, "registered");
    assert_eq!(registered_regions(&us1, &c).await?, [EU]);
    // AND both use their product in both regions in hour 10: the same customer, dimension and
    // hour in two regions.
    use_product(&us1, &a, t0, 1, &[5, 6]).await?;
    use_product(&eu1, &a, t0, 1, &[7]).await?;
    use_product(&us2, &c, t0, 1, &[1, 2, 3]).await?;
    use_product(&eu2, &c, t0, 1, &[4]).await?;
    // WHEN A is deprovisioned mid-hour (T = 10:02:30) and keeps using it until minute 50.
    let deprovisioned_at = t0 + Duration::minutes(2);
    set_clocks([&us1, &eu1], deprovisioned_at).await?;
    admin(
        &us1,
        "/_sim/deprovision",
        json!({"licenseArn": a.license_arn}),
    )
    .await?;
    let report = sites.tick(deprovisioned_at + Duration::seconds(30)).await?;
    assert_eq!(report.mirrored, 1, "{report:?}");
    assert_eq!(status(&us1, &a).await?, Some(LicenseStatus::Deprovisioning));
    use_product(&us1, &a, t0, 50, &[10]).await?;
    use_product(&eu1, &a, t0, 50, &[20]).await?;
    // THEN within the window's last ten minutes, once the ingest fence has passed the flush's
    // instant and its settle margin (10:55:30), A's hour is billed once in each region, each
    // region's own units, while C's hour still waits for its lock.
    sites.tick(deprovisioned_at + Duration::minutes(53)).await?;
    assert_eq!(billed_once(&us1, &a.license_arn).await?, 21);
    assert_eq!(billed_once(&eu1, &a.license_arn).await?, 27);
    assert!(billed(&us2, &c.license_arn).await?.is_empty());
    // AND after the hour's lock C is billed once in each region, never deprovisioned, while
    // A's license is finalized inactive and billed nothing more.
    sites.tick(t0 + Duration::hours(2)).await?;
    assert_eq!(billed_once(&us2, &c.license_arn).await?, 6);
    assert_eq!(billed_once(&eu2, &c.license_arn).await?, 4);
    assert_eq!(billed_once(&us1, &a.license_arn).await?, 21);
    assert_eq!(billed_once(&eu1, &a.license_arn).await?, 27);
    assert_eq!(status(&us1, &a).await?, Some(LicenseStatus::Inactive));
    assert_eq!(status(&us1, &c).await?, Some(LicenseStatus::Active));
    Ok(())
}
