//! meter-ingest on the local stack (docs/meter-ingest.md, "Local stack"): seed the mapping from
//! a mapping file, play an async invoke as an invoked ARN — with Lambda's retries and its
//! on-failure destination record on `awsmp-meter-ingest-failures` — release held events, and
//! the deploy tooling's alias check.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use awsmp_consumer::adapters::ingest::{DynamoDbMappingStore, meter_ingest_from_config};
use awsmp_consumer::error::ErrorChain;
use awsmp_consumer::ingest::mapping::MappingFile;
use awsmp_consumer::ingest::ports::MappingStore;
use awsmp_consumer::ingest::{IngestConfig, Invocation, MeterIngest};
use awsmp_contract::clock::FixedClock;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::{LocalEnv, Paths};

/// Lambda's default `MaximumRetryAttempts` for async invocation: 2 retries after the first
/// attempt (<https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html>).
pub const ASYNC_RETRY_ATTEMPTS: u32 = 2;

/// Where `up --ingest-mapping` keeps the mapping file, so a later `up` seeds it again.
pub fn saved_mapping(paths: &Paths) -> PathBuf {
    paths.root.join("ingest-mapping.json")
}

/// Seed the mapping table from `file` (kept for later `up`s), or from the saved file of an
/// earlier `up`; put the file's environment and allowlist in the env file. The modules seeded,
/// if any file applies.
pub async fn seed_mapping(
    paths: &Paths,
    env: &mut LocalEnv,
    file: Option<&Path>,
) -> Result<Option<usize>> {
    let saved = saved_mapping(paths);
    if let Some(f) = file {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        MappingFile::parse(&text).map_err(anyhow::Error::msg)?;
        std::fs::write(&saved, text)?;
    }
    if !saved.exists() {
        return Ok(None);
    }
    let mapping =
        MappingFile::parse(&std::fs::read_to_string(&saved)?).map_err(anyhow::Error::msg)?;
    seed_modules(env, &mapping).await?;
    env.vars
        .insert("AWSMP_ENVIRONMENT".into(), mapping.environment.clone());
    env.vars.insert(
        "AWSMP_ALLOWED_ACCOUNTS".into(),
        mapping.allowed_accounts.join(","),
    );
    super::write_if_changed(&paths.env_file(), &env.render())?;
    Ok(Some(mapping.modules.len()))
}

/// meter-ingest over the stack's tables and stream, its clock fixed at `at` (default now).
pub async fn meter_ingest(env: &LocalEnv, at: Option<DateTime<Utc>>) -> Result<MeterIngest> {
    let config = IngestConfig::from_lookup(|k| env.vars.get(k).cloned()).with_context(|| {
        "meter-ingest is not configured on this stack: run `awsmp-local up --ingest-mapping FILE`"
    })?;
    let mut ingest = meter_ingest_from_config(&config, env.dynamodb().await?, env.kinesis().await?);
    ingest.metrics = awsmp_aws::emf::MetricsSink::capture("meter-ingest");
    ingest.clock = Arc::new(FixedClock::new(at.unwrap_or_else(Utc::now)));
    Ok(ingest)
}

/// Play one async invoke of `event` as `invoked_arn`: the handler's result, or — after
/// Lambda's retries, all under one request id — the on-failure destination record, also sent
/// to the failure queue.
pub async fn invoke(
    env: &LocalEnv,
    invoked_arn: &str,
    event: Value,
    at: Option<DateTime<Utc>>,
) -> Result<Value> {
    let ingest = meter_ingest(env, at).await?;
    let inv = Invocation {
        invoked_arn: invoked_arn.to_owned(),
        request_id: uuid::Uuid::new_v4().to_string(),
        payload: event,
    };
    let mut attempts = 0;
    let err = loop {
        attempts += 1;
        match ingest.handle(&inv).await {
            Ok(report) => {
                let mut out = serde_json::to_value(report)?;
                out["metrics"] = json!(ingest.metrics.lines());
                return Ok(out);
            }
            Err(e) if attempts > ASYNC_RETRY_ATTEMPTS => break e,
            Err(_) => {}
        }
    };
    let record = failure_record(
        &inv,
        err.failure_type(),
        &ErrorChain(&err).to_string(),
        attempts,
        Utc::now(),
    );
    let queue = env.get("AWSMP_METER_INGEST_FAILURE_QUEUE_URL")?;
    let sent = env
        .sqs()
        .await?
        .send_message()
        .queue_url(queue)
        .message_body(record.to_string())
        .send()
        .await?;
    Ok(json!({
        "functionError": err.failure_type(),
        "errorMessage": ErrorChain(&err).to_string(),
        "approximateInvokeCount": attempts,
        "onFailure": {"queueUrl": queue, "messageId": sent.message_id(), "record": record},
    }))
}

/// The record Lambda sends to an async invocation's on-failure destination
/// (<https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-retain-records.html>).
pub fn failure_record(
    inv: &Invocation,
    error_type: &str,
    error_message: &str,
    invoke_count: u32,
    at: DateTime<Utc>,
) -> Value {
    json!({
        "version": "1.0",
        "timestamp": at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "requestContext": {
            "requestId": inv.request_id,
            "functionArn": inv.invoked_arn,
            "condition": "RetriesExhausted",
            "approximateInvokeCount": invoke_count,
        },
        "requestPayload": inv.payload,
        "responseContext": {
            "statusCode": 200,
            // The local stack publishes no versions: every alias runs the one build.
            "executedVersion": "$LATEST",
            "functionError": "Unhandled",
        },
        "responsePayload": {"errorType": error_type, "errorMessage": error_message},
    })
}

/// The stack's billing archive, when the env file names its bucket.
pub async fn billing_archive(
    env: &LocalEnv,
) -> Result<Option<Arc<dyn awsmp_consumer::archive::BillingArchive>>> {
    let Some(bucket) = env.vars.get("AWSMP_BILLING_ARCHIVE_BUCKET") else {
        return Ok(None);
    };
    let archive = awsmp_consumer::adapters::archive::S3BillingArchive::new(env.s3().await?, bucket);
    Ok(Some(Arc::new(archive)))
}

/// Release every held event (docs/meter-ingest.md, "Holds"): one report per event.
pub async fn release(env: &LocalEnv, at: Option<DateTime<Utc>>) -> Result<Value> {
    let ingest = meter_ingest(env, at).await?;
    let reports = ingest.release_held().await?;
    Ok(json!({ "released": reports.iter().map(|r| r.accepted).sum::<usize>(), "reports": reports }))
}

/// The deploy tooling's guard: an error unless `invoked_arn` may take traffic.
pub async fn check_alias(env: &LocalEnv, invoked_arn: &str) -> Result<Value> {
    let ingest = meter_ingest(env, None).await?;
    match ingest.check_alias(invoked_arn).await? {
        Ok(entry) => Ok(json!({"invokedArn": invoked_arn, "ok": true, "entry": entry})),
        Err(r) => bail!(
            "{invoked_arn} may not take traffic: {} ({})",
            r.reason,
            r.detail
        ),
    }
}

/// Put every module of `mapping` into the stack's mapping table.
pub async fn seed_modules(env: &LocalEnv, mapping: &MappingFile) -> Result<()> {
    let store = DynamoDbMappingStore::new(
        env.dynamodb().await?,
        env.get("AWSMP_INGEST_MAPPING_TABLE")?,
    );
    for m in &mapping.modules {
        store
            .put(m)
            .await
            .with_context(|| format!("seeding {}", m.invoked_arn))?;
    }
    Ok(())
}
