//! The buyer's side of the subscription lifecycle, driven through the admin API: subscribe
//! (a new license, its registration token, `Purchase Agreement Created` + `License
//! Updated`), issue another token, end the agreement (`Purchase Agreement Ended`; the license
//! keeps metering), and deprovision (`License Deprovisioned`; usage is accepted for one more
//! hour, then `CustomerNotSubscribed`). The events are the EventBridge shapes AWS documents
//! (<https://docs.aws.amazon.com/marketplace/latest/userguide/notifications-eventbridge.html>);
//! they wait in an outbox that `awsmp-local tick` takes and delivers through the
//! subscription queue, as EventBridge would.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, SecondsFormat, Utc};
use serde::Deserialize;
use serde_json::{Value, json};

use super::catalog::{License, RegistrationToken, SubscriptionStatus};
use super::engine::Simulator;
use super::error::SimError;

/// How long a token the admin API issues stays valid unless asked otherwise (the simulator's
/// choice: registration tokens are short-lived).
pub const DEFAULT_TOKEN_TTL: Duration = Duration::hours(4);
/// How long AWS accepts usage after `License Deprovisioned` (the final reporting window,
/// <https://docs.aws.amazon.com/marketplace/latest/userguide/saas-eventbridge-integration.html>).
pub const DEPROVISION_WINDOW: Duration = Duration::hours(1);
/// The seller account the simulated events name as proposer.
const SELLER_ACCOUNT: &str = "123456789012";

/// Lifecycle state kept beside the catalog.
#[derive(Debug, Clone, Default)]
pub struct LifecycleState {
    /// Events not yet taken by the runner.
    outbox: Vec<Value>,
    /// Deprovisioned licenses and when their window closes.
    closing: BTreeMap<String, DateTime<Utc>>,
    /// Agreement of each license the admin API created.
    agreements: BTreeMap<String, String>,
    /// Counter for generated identifiers.
    next_id: u64,
}

impl LifecycleState {
    /// Take every pending event.
    pub fn take_events(&mut self) -> Vec<Value> {
        std::mem::take(&mut self.outbox)
    }
}

/// `POST /_sim/subscribe`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubscribeRequest {
    /// The product.
    pub product_code: String,
    /// The buyer.
    #[serde(rename = "customerAWSAccountId")]
    pub customer_aws_account_id: String,
    /// The license ARN (generated when absent).
    pub license_arn: Option<String>,
    /// The token's lifetime in seconds (default 4 h).
    pub token_ttl_seconds: Option<i64>,
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn event(detail_type: &str, at: DateTime<Utc>, agreement: &str, detail: Value) -> Value {
    let mut d = json!({
        "requestId": uuid::Uuid::new_v4().to_string(),
        "catalog": "AWSMarketplace",
        "proposer": {"accountId": SELLER_ACCOUNT},
        "offer": {"id": "offer-awsmplocal"},
    });
    if let (Some(d), Some(extra)) = (d.as_object_mut(), detail.as_object()) {
        d.extend(extra.clone());
    }
    json!({
        "version": "0",
        "id": uuid::Uuid::new_v4().to_string(),
        "detail-type": detail_type,
        "source": "aws.agreement-marketplace",
        "account": SELLER_ACCOUNT,
        "time": rfc3339(at),
        "region": "us-east-1",
        "resources": [format!("arn:aws:aws-marketplace::aws:agreement:{agreement}")],
        "detail": d,
    })
}

fn license_event(
    detail_type: &str,
    at: DateTime<Utc>,
    agreement: &str,
    product: &str,
    license: &License,
) -> Value {
    event(
        detail_type,
        at,
        agreement,
        json!({
            "agreement": {"id": agreement},
            "product": {"code": product, "id": format!("prod-{product}")},
            "license": {"arn": license.license_arn},
            "acceptor": {"accountId": license.customer_aws_account_id},
        }),
    )
}

fn new_id(sim: &mut Simulator) -> u64 {
    let state = sim.lifecycle_mut();
    state.next_id += 1;
    state.next_id
}

fn issue(
    sim: &mut Simulator,
    product: &str,
    license: &License,
    ttl: Duration,
) -> Result<RegistrationToken, SimError> {
    let token = RegistrationToken {
        token: format!("tok-{}", uuid::Uuid::new_v4().simple()),
        license_arn: license.license_arn.clone(),
        customer_aws_account_id: license.customer_aws_account_id.clone(),
        expires_at: sim.now() + ttl,
    };
    let mut catalog = sim.catalog().catalog().clone();
    let p = catalog
        .products
        .iter_mut()
        .find(|p| p.product_code == product)
        .ok_or_else(|| SimError::InvalidCatalog(format!("no product {product:?}")))?;
    p.registration_tokens.push(token.clone());
    sim.replace_catalog(catalog)?;
    Ok(token)
}

fn token_json(t: &RegistrationToken) -> Value {
    json!({"token": t.token, "expiresAt": rfc3339(t.expires_at)})
}

/// Subscribe a buyer: a new active license, a token, and the two events.
pub fn subscribe(sim: &mut Simulator, req: &SubscribeRequest) -> Result<Value, SimError> {
    if sim.catalog().product(&req.product_code).is_none() {
        return Err(SimError::InvalidCatalog(format!(
            "no product {:?}",
            req.product_code
        )));
    }
    let id = new_id(sim);
    let license = License {
        license_arn: req.license_arn.clone().unwrap_or_else(|| {
            format!(
                "arn:aws:license-manager::{SELLER_ACCOUNT}:license:l-{}",
                uuid::Uuid::new_v4().simple()
            )
        }),
        customer_aws_account_id: req.customer_aws_account_id.clone(),
        status: SubscriptionStatus::Active,
    };
    let mut catalog = sim.catalog().catalog().clone();
    if let Some(p) = catalog
        .products
        .iter_mut()
        .find(|p| p.product_code == req.product_code)
    {
        p.licenses.push(license.clone());
    }
    sim.replace_catalog(catalog)?;
    let agreement = format!("agmt-local{id:016x}");
    sim.lifecycle_mut()
        .agreements
        .insert(license.license_arn.clone(), agreement.clone());
    let ttl = req
        .token_ttl_seconds
        .map_or(DEFAULT_TOKEN_TTL, Duration::seconds);
    let token = issue(sim, &req.product_code, &license, ttl)?;
    let now = sim.now();
    let created = event(
        "Purchase Agreement Created - Proposer",
        now,
        &agreement,
        json!({
            "agreement": {"id": agreement, "intent": "NEW", "status": "ACTIVE",
                          "acceptanceTime": rfc3339(now), "startTime": rfc3339(now)},
            "acceptor": {"accountId": license.customer_aws_account_id},
        }),
    );
    let updated = license_event(
        "License Updated - Manufacturer",
        now,
        &agreement,
        &req.product_code,
        &license,
    );
    let events = vec![created, updated];
    sim.lifecycle_mut().outbox.extend(events.iter().cloned());
    Ok(json!({
        "productCode": req.product_code,
        "licenseArn": license.license_arn,
        "customerAWSAccountId": license.customer_aws_account_id,
        "agreementId": agreement,
        "registrationToken": token_json(&token),
        "events": events,
    }))
}

/// `POST /_sim/tokens`, `/_sim/deprovision`, `/_sim/end-agreement`: which license.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LicenseRequest {
    /// The license.
    pub license_arn: String,
    /// A token's lifetime in seconds (`/_sim/tokens` only; default 4 h).
    pub ttl_seconds: Option<i64>,
}

fn known(sim: &Simulator, arn: &str) -> Result<(String, License), SimError> {
    let info = sim
        .catalog()
        .license(arn)
        .ok_or_else(|| SimError::InvalidCatalog(format!("no license {arn:?}")))?;
    Ok((info.product.product_code.clone(), info.license.clone()))
}

fn agreement_of(sim: &Simulator, arn: &str) -> String {
    sim.lifecycle()
        .agreements
        .get(arn)
        .cloned()
        .unwrap_or_else(|| format!("agmt-{}", &arn[arn.len().saturating_sub(16)..]))
}

/// Issue another token for a license (what "Set up your account" does again).
pub fn issue_token(sim: &mut Simulator, req: &LicenseRequest) -> Result<Value, SimError> {
    let (product, license) = known(sim, &req.license_arn)?;
    let ttl = req.ttl_seconds.map_or(DEFAULT_TOKEN_TTL, Duration::seconds);
    Ok(token_json(&issue(sim, &product, &license, ttl)?))
}

/// The buyer cancels: `Purchase Agreement Ended`; the license is untouched.
pub fn end_agreement(sim: &mut Simulator, req: &LicenseRequest) -> Result<Value, SimError> {
    let (_, license) = known(sim, &req.license_arn)?;
    let agreement = agreement_of(sim, &license.license_arn);
    let ev = event(
        "Purchase Agreement Ended - Proposer",
        sim.now(),
        &agreement,
        json!({"agreement": {"id": agreement, "status": "CANCELLED"},
               "acceptor": {"accountId": license.customer_aws_account_id}}),
    );
    sim.lifecycle_mut().outbox.push(ev.clone());
    Ok(json!({"events": [ev]}))
}

/// AWS deprovisions the license: `License Deprovisioned`; usage is accepted until the window
/// closes, one hour later.
pub fn deprovision(sim: &mut Simulator, req: &LicenseRequest) -> Result<Value, SimError> {
    let (product, license) = known(sim, &req.license_arn)?;
    let agreement = agreement_of(sim, &license.license_arn);
    let now = sim.now();
    let ev = license_event(
        "License Deprovisioned - Manufacturer",
        now,
        &agreement,
        &product,
        &license,
    );
    let state = sim.lifecycle_mut();
    state
        .closing
        .entry(license.license_arn.clone())
        .or_insert(now + DEPROVISION_WINDOW);
    state.outbox.push(ev.clone());
    Ok(json!({"events": [ev], "windowClosesAt": rfc3339(now + DEPROVISION_WINDOW)}))
}

/// End every license whose window has closed by the simulator's now (called before each
/// `BatchMeterUsage`).
pub fn settle(sim: &mut Simulator) -> Result<(), SimError> {
    let now = sim.now();
    let due: Vec<String> = sim
        .lifecycle()
        .closing
        .iter()
        .filter(|(_, close)| **close <= now)
        .map(|(arn, _)| arn.clone())
        .collect();
    if due.is_empty() {
        return Ok(());
    }
    let mut catalog = sim.catalog().catalog().clone();
    for l in catalog
        .products
        .iter_mut()
        .flat_map(|p| p.licenses.iter_mut())
    {
        if due.contains(&l.license_arn) {
            l.status = SubscriptionStatus::Ended;
        }
    }
    sim.replace_catalog(catalog)?;
    let state = sim.lifecycle_mut();
    state.closing.retain(|arn, _| !due.contains(arn));
    Ok(())
}
