//! A hosted run's two front doors (docs/local-stack.md, "The demo: every Lambda a process"):
//!
//! - registration: each of the run's buyers subscribes in the Marketplace simulator (its
//!   lifecycle events wait in its outbox for the subscription Lambda) and posts the
//!   registration form to the `register` binary, as API Gateway's REST API proxies it; the
//!   binary resolves the token (`ResolveCustomer` on the simulator) and writes the subscribers
//!   table, and the run's customers are the rows it wrote;
//! - meter-ingest: a share of the run's usage is sent by a module of the run's own, each batch
//!   an async invoke of the `meter-ingest` binary as the module's alias ARN, with Lambda's
//!   retries (same request id) and its on-failure destination.

use super::sim_admin::SimAdmin;
use anyhow::{Context, Result, bail};
use aws_sdk_dynamodb::types::AttributeValue;
use awsmp_consumer::ingest::mapping::MappingFile;
use awsmp_local_stack::local::LocalEnv;
use awsmp_local_stack::local::hosted::{Hosted, Invocation};
use awsmp_local_stack::local::ingest::{ASYNC_RETRY_ATTEMPTS, failure_record};
use chrono::Utc;
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

/// The largest quantity of one ingest event (the module's anomaly bound is this).
const MAX_INGEST_QUANTITY: u64 = 10;
/// Events per async invoke.
const EVENTS_PER_INVOKE: usize = 50;
/// The pause before an async retry. Lambda waits about a minute, then two (docs/meter-ingest.md);
/// the run compresses that, as it compresses the schedules.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// Subscribe and register every one of `licenses` through the `register` binary; the run's
/// customers: the subscribers table's rows of them, in order. Any registration that does not
/// end with the "registered" page, or leaves no row, fails the run.
pub(super) async fn register_customers(
    hosted: &Hosted,
    env: &LocalEnv,
    sim: &SimAdmin,
    product_code: &str,
    licenses: &[(String, String)],
) -> Result<Vec<(String, String)>> {
    for (i, (license, account)) in licenses.iter().enumerate() {
        let subscribed = sim
            .call(
                "/_sim/subscribe",
                json!({"productCode": product_code, "customerAWSAccountId": account,
                       "licenseArn": license}),
            )
            .await?;
        let token = subscribed["registrationToken"]["token"]
            .as_str()
            .context("the simulator's subscription carries no registration token")?;
        let answer = hosted
            .invoke("register", &register_request(token, i)?)
            .await
            .with_context(|| format!("register {license}"))?;
        let body = answer["body"].as_str().unwrap_or_default();
        if answer["statusCode"] != 200 || !body.contains("data-outcome=\"registered\"") {
            bail!("register {license}: HTTP {}: {body}", answer["statusCode"]);
        }
    }
    let ddb = env.dynamodb().await?;
    let table = env.get("AWSMP_SUBSCRIBERS_TABLE")?;
    let mut customers = Vec::with_capacity(licenses.len());
    for (license, account) in licenses {
        let row = ddb
            .get_item()
            .table_name(table)
            .key("licenseArn", AttributeValue::S(license.clone()))
            .key("customerAWSAccountId", AttributeValue::S(account.clone()))
            .consistent_read(true)
            .send()
            .await
            .with_context(|| format!("reading {license} from {table}"))?
            .item
            .with_context(|| format!("register answered, but {table} has no row of {license}"))?;
        let s = |k: &str| row.get(k).and_then(|v| v.as_s().ok()).cloned();
        let (Some(l), Some(a)) = (s("licenseArn"), s("customerAWSAccountId")) else {
            bail!("{table}'s row of {license} has no key");
        };
        customers.push((l, a));
    }
    Ok(customers)
}

/// The registration form's POST as API Gateway's REST API proxies it to the function
/// (<https://docs.aws.amazon.com/apigateway/latest/developerguide/set-up-lambda-proxy-integrations.html>).
fn register_request(token: &str, buyer: usize) -> Result<Value> {
    let body = serde_urlencoded::to_string([
        ("x-amzn-marketplace-token", token.to_owned()),
        ("companyName", format!("Load test buyer {buyer}")),
        ("contactEmail", format!("buyer-{buyer}@example.com")),
    ])
    .context("encoding the registration form")?;
    let request_id = uuid::Uuid::new_v4().to_string();
    Ok(json!({
        "resource": "/register",
        "path": "/register",
        "httpMethod": "POST",
        "headers": {"Content-Type": "application/x-www-form-urlencoded", "Host": "localhost"},
        "multiValueHeaders": {"Content-Type": ["application/x-www-form-urlencoded"],
                              "Host": ["localhost"]},
        "queryStringParameters": null,
        "multiValueQueryStringParameters": null,
        "pathParameters": null,
        "stageVariables": null,
        "requestContext": {
            "resourcePath": "/register", "httpMethod": "POST", "path": "/local/register",
            "accountId": awsmp_local_stack::local::LOCAL_ACCOUNT, "protocol": "HTTP/1.1", "stage": "local",
            "requestTimeEpoch": Utc::now().timestamp_millis(), "requestId": request_id,
            "identity": {"sourceIp": "127.0.0.1"}, "apiId": "local"
        },
        "body": body,
        "isBase64Encoded": false
    }))
}

/// What a run sends through meter-ingest.
#[derive(Debug, Clone)]
pub(super) struct IngestPlan {
    /// The module: its alias name.
    pub(super) module: String,
    /// The licenses it is granted (its events name them in turn).
    pub(super) licenses: Vec<(String, String)>,
    /// The dimensions it is granted (its events use them in turn).
    pub(super) dimensions: Vec<String>,
    /// Events to send.
    pub(super) events: usize,
    /// Over how long (the production's length).
    pub(super) over: Duration,
    /// Crash the first attempt of about one invoke in four (the consumer-crashes fault).
    pub(super) crashes: bool,
    /// The run's seed.
    pub(super) seed: u64,
    /// Send two bad invokes too, each declared with the reason it must end with: an event of a
    /// dimension the module is not granted, and a malformed payload (an unknown field), which
    /// fails every attempt and ends at the on-failure destination.
    pub(super) bad_inputs: bool,
}

/// What the run sent through meter-ingest, for the check and the report.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IngestSent {
    /// The module's invoked ARN.
    pub invoked_arn: String,
    /// Async invokes (batches).
    pub invokes: u64,
    /// Attempts beyond the first (Lambda's async retries).
    pub retries: u64,
    /// Attempts whose process was killed mid-invocation.
    pub crashes: u64,
    /// Invokes whose retries ran out (their record went to the on-failure destination).
    pub on_failure: u64,
    /// Events sent.
    pub events: u64,
    /// Units sent.
    pub units: u64,
    /// Units on the usage stream (`Accepted`).
    pub accepted_units: u64,
    /// Units refused, by `meter-ingest:<reason>`.
    pub refused_units: BTreeMap<String, u64>,
    /// Units sent, per group (license, account, dimension).
    #[serde(skip)]
    pub sent: BTreeMap<crate::conservation::Group, u64>,
    /// Units sent as bad inputs on purpose, by the reason each must end with.
    pub injected_units: BTreeMap<String, u64>,
    /// Units refused, per group and `meter-ingest:<reason>`.
    #[serde(skip)]
    pub refused: BTreeMap<(crate::conservation::Group, String), u64>,
    /// Units sent as bad inputs, per group and the reason they must end with.
    #[serde(skip)]
    pub injected: BTreeMap<(crate::conservation::Group, String), u64>,
}

/// Seed the module's mapping entry for the environment meter-ingest runs in; its invoked ARN.
pub(super) async fn seed_mapping(
    hosted: &Hosted,
    env: &LocalEnv,
    plan: &IngestPlan,
) -> Result<String> {
    let function = hosted
        .function_arn("meter-ingest")
        .context("meter-ingest is not started")?;
    let invoked_arn = format!("{function}:{}", plan.module);
    let environment = hosted
        .env_var("meter-ingest", "AWSMP_ENVIRONMENT")
        .context("meter-ingest's environment names no AWSMP_ENVIRONMENT")?;
    let mapping = json!({
        "environment": environment,
        "allowedAccounts": [awsmp_local_stack::local::LOCAL_ACCOUNT],
        "modules": [{
            "invokedArn": invoked_arn,
            "licenses": plan.licenses.iter()
                .map(|(l, a)| json!({"licenseArn": l, "customerAWSAccountId": a}))
                .collect::<Vec<_>>(),
            "dimensions": plan.dimensions,
            "maxEventsPerSecond": 100_000,
            "maxQuantity": MAX_INGEST_QUANTITY,
        }]
    });
    let mapping = MappingFile::parse(&mapping.to_string()).map_err(anyhow::Error::msg)?;
    awsmp_local_stack::local::ingest::seed_modules(env, &mapping).await?;
    Ok(invoked_arn)
}

/// Send the plan's events as async invokes of meter-ingest, spread over `plan.over`.
pub(super) async fn ingest(
    hosted: &Hosted,
    env: &LocalEnv,
    plan: &IngestPlan,
) -> Result<IngestSent> {
    let invoked_arn = seed_mapping(hosted, env, plan).await?;
    let mut sent = IngestSent {
        invoked_arn: invoked_arn.clone(),
        ..IngestSent::default()
    };
    let batches = plan.events.div_ceil(EVENTS_PER_INVOKE);
    let pause = plan.over / u32::try_from(batches.max(1)).unwrap_or(u32::MAX);
    for b in 0..batches {
        let events: Vec<Sent> = (b * EVENTS_PER_INVOKE
            ..((b + 1) * EVENTS_PER_INVOKE).min(plan.events))
            .map(|i| event(plan, i))
            .collect();
        for e in &events {
            *sent.sent.entry(e.group.clone()).or_default() += e.quantity;
            sent.units += e.quantity;
        }
        sent.events += events.len() as u64;
        sent.invokes += 1;
        let payload = json!({"events": events.iter().map(|e| e.json.clone()).collect::<Vec<_>>()});
        let crash_after = (plan.crashes && mix(plan.seed, b as u64).is_multiple_of(4))
            .then(|| Duration::from_millis(mix(plan.seed ^ 0x5eed, b as u64) % 300));
        let ended = async_invoke(
            hosted,
            env,
            (&invoked_arn, &payload),
            crash_after,
            &mut sent,
        )
        .await?;
        account(&mut sent, &events, &ended);
        if b + 1 < batches {
            tokio::time::sleep(pause).await;
        }
    }
    if plan.bad_inputs {
        send_bad_inputs(hosted, env, plan, &invoked_arn, &mut sent).await?;
    }
    Ok(sent)
}

/// The plan's two bad invokes (see [`IngestPlan::bad_inputs`]), their units declared with the
/// reasons they must end with; each in a dimension of its own, so its group holds only them.
async fn send_bad_inputs(
    hosted: &Hosted,
    env: &LocalEnv,
    plan: &IngestPlan,
    invoked_arn: &str,
    sent: &mut IngestSent,
) -> Result<()> {
    use awsmp_contract::reasons;
    let (license, buyer) = &plan.licenses[0];
    let bad = [
        (
            "not-granted",
            3,
            false,
            format!(
                "{}{}",
                crate::conservation::METER_INGEST,
                reasons::UNAUTHORIZED_DIMENSION
            ),
        ),
        (
            "malformed-payload",
            2,
            true,
            format!(
                "{}RetriesExhausted:{}",
                crate::conservation::METER_INGEST,
                reasons::MALFORMED_PAYLOAD
            ),
        ),
    ];
    for (dimension, quantity, malformed, reason) in bad {
        let id = format!("{}-bad-{dimension}", plan.module);
        let mut json = json!({"eventId": id, "licenseArn": license,
            "customerAWSAccountId": buyer, "dimension": dimension, "quantity": quantity,
            "recordedAtHint": Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)});
        if malformed {
            json["unexpectedField"] = json!(true);
        }
        let event = Sent {
            id,
            json,
            group: (license.clone(), buyer.clone(), dimension.to_owned()),
            quantity,
        };
        *sent.sent.entry(event.group.clone()).or_default() += quantity;
        *sent
            .injected
            .entry((event.group.clone(), reason.clone()))
            .or_default() += quantity;
        *sent.injected_units.entry(reason).or_default() += quantity;
        sent.units += quantity;
        sent.events += 1;
        sent.invokes += 1;
        let payload = json!({"events": [event.json.clone()]});
        let ended = async_invoke(hosted, env, (invoked_arn, &payload), None, sent).await?;
        account(sent, std::slice::from_ref(&event), &ended);
    }
    Ok(())
}

/// One event sent: its JSON, its group and its units.
struct Sent {
    id: String,
    json: Value,
    group: crate::conservation::Group,
    quantity: u64,
}

/// Event `i` of the plan: the module's licenses and dimensions in turn, 1 to
/// [`MAX_INGEST_QUANTITY`] units.
fn event(plan: &IngestPlan, i: usize) -> Sent {
    let (license, account) = &plan.licenses[i % plan.licenses.len()];
    let dimension = &plan.dimensions[(i / plan.licenses.len()) % plan.dimensions.len()];
    let quantity = 1 + mix(plan.seed, i as u64) % MAX_INGEST_QUANTITY;
    let id = format!("{}-{i}", plan.module);
    Sent {
        json: json!({"eventId": id, "licenseArn": license, "customerAWSAccountId": account,
                     "dimension": dimension, "quantity": quantity,
                     "recordedAtHint": Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)}),
        id,
        group: (license.clone(), account.clone(), dimension.clone()),
        quantity,
    }
}

/// How one async invoke ended: the handler's answer, or (its retries spent) the error type its
/// on-failure destination record names.
enum Ended {
    Answered(Value),
    OnFailure(String),
}

/// One async invoke as Lambda runs it: the first attempt, up to [`ASYNC_RETRY_ATTEMPTS`]
/// retries under the same request id after a function error, crash or timeout, then the
/// on-failure destination (`AWSMP_METER_INGEST_FAILURE_QUEUE_URL`). `crash_after` kills the
/// first attempt's process that long into it.
async fn async_invoke(
    hosted: &Hosted,
    env: &LocalEnv,
    (invoked_arn, payload): (&str, &Value),
    crash_after: Option<Duration>,
    sent: &mut IngestSent,
) -> Result<Ended> {
    let request_id = uuid::Uuid::new_v4().to_string();
    let mut attempts = 0;
    let err = loop {
        attempts += 1;
        let invocation = Invocation {
            invoked_arn: Some(invoked_arn),
            request_id: Some(&request_id),
            crash_after: crash_after.filter(|_| attempts == 1),
        };
        match hosted
            .invoke_with("meter-ingest", payload, &invocation)
            .await
        {
            Ok(answer) => return Ok(Ended::Answered(answer)),
            Err(e) => {
                if matches!(e, awsmp_lambda_host::Error::Crashed { .. }) {
                    sent.crashes += 1;
                }
                if attempts > ASYNC_RETRY_ATTEMPTS {
                    break e;
                }
                tracing::info!(error = %e, "meter-ingest attempt failed; Lambda retries it");
                sent.retries += 1;
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    };
    let error_type = err.error_type().unwrap_or("Unhandled").to_owned();
    let inv = awsmp_consumer::ingest::Invocation {
        invoked_arn: invoked_arn.to_owned(),
        request_id,
        payload: payload.clone(),
    };
    let record = failure_record(&inv, &error_type, &err.to_string(), attempts, Utc::now());
    env.sqs()
        .await?
        .send_message()
        .queue_url(env.get("AWSMP_METER_INGEST_FAILURE_QUEUE_URL")?)
        .message_body(record.to_string())
        .send()
        .await
        .context("the on-failure destination")?;
    sent.on_failure += 1;
    Ok(Ended::OnFailure(error_type))
}

/// Each event's units: accepted (on the stream) or refused with its reason.
fn account(sent: &mut IngestSent, events: &[Sent], ended: &Ended) {
    let answered: BTreeMap<&str, &Value> = match ended {
        Ended::Answered(v) => v["events"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| Some((r["eventId"].as_str()?, r)))
            .collect(),
        Ended::OnFailure(_) => BTreeMap::new(),
    };
    for e in events {
        let refused = match (ended, answered.get(e.id.as_str())) {
            (_, Some(r)) if r["outcome"] == "Accepted" => None,
            (_, Some(r)) => Some(format!(
                "meter-ingest:{}",
                r["reason"]
                    .as_str()
                    .or(r["outcome"].as_str())
                    .unwrap_or("?")
            )),
            (Ended::OnFailure(t), None) => Some(format!("meter-ingest:RetriesExhausted:{t}")),
            (Ended::Answered(_), None) => Some("meter-ingest:NoResult".to_owned()),
        };
        match refused {
            None => sent.accepted_units += e.quantity,
            Some(reason) => {
                *sent.refused_units.entry(reason.clone()).or_default() += e.quantity;
                *sent.refused.entry((e.group.clone(), reason)).or_default() += e.quantity;
            }
        }
    }
}

/// A seeded mix of `i` (splitmix64's finalizer).
fn mix(seed: u64, i: u64) -> u64 {
    let mut z = seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
