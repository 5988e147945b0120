//! The lifecycle Lambdas on the local stack (docs/lifecycle.md): EventBridge delivery into the
//! subscription queue (`awsmp-local event`, and the simulator's outbox on every tick), the
//! subscription Lambda behind that queue, deprovision-cleanup on the tick's schedule, and the
//! register endpoint served on 127.0.0.1 (`awsmp-local serve-register`).

use anyhow::{Context, Result, bail};
use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use awsmp_aws::emf::MetricsSink;
use awsmp_lifecycle::adapters::dynamodb::{DynamoDbProfileStore, DynamoDbSubscriberStore};
use awsmp_lifecycle::adapters::resolver::MarketplaceCustomerResolver;
use awsmp_lifecycle::adapters::sqs::SqsDeadLetters;
use awsmp_lifecycle::handlers::deprovision_cleanup::{self, CleanupReport};
use awsmp_lifecycle::handlers::register::{RegisterRequest, RegisterService, respond};
use awsmp_lifecycle::handlers::subscription::{SubscriptionService, handle_batch};
use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::LocalEnv;

/// The subscription and deprovision-cleanup Lambdas, over the stack's tables and queues.
pub struct LocalLifecycle {
    store: DynamoDbSubscriberStore,
    dead_letters: SqsDeadLetters,
    metrics: MetricsSink,
    sqs: aws_sdk_sqs::Client,
    /// The subscription queue (EventBridge's target).
    pub queue_url: String,
    sim_admin_url: Option<String>,
    http: reqwest::Client,
}

impl LocalLifecycle {
    /// Over the stack in `env`; `None` when it has no subscribers table or subscription queue.
    pub async fn from_env(env: &LocalEnv, metrics: MetricsSink) -> Result<Option<Self>> {
        let (Some(table), Some(queue), Some(dlq)) = (
            env.vars.get("AWSMP_SUBSCRIBERS_TABLE"),
            env.vars.get("AWSMP_SUBSCRIPTION_QUEUE_URL"),
            env.vars.get("AWSMP_SUBSCRIPTION_DLQ_URL"),
        ) else {
            return Ok(None);
        };
        let sqs = env.sqs().await?;
        Ok(Some(Self {
            store: DynamoDbSubscriberStore::new(env.dynamodb().await?, table),
            dead_letters: SqsDeadLetters::new(sqs.clone(), dlq),
            metrics,
            sqs,
            queue_url: queue.clone(),
            sim_admin_url: env.vars.get("AWSMP_SIM_ADMIN_URL").cloned(),
            http: reqwest::Client::new(),
        }))
    }

    /// The subscription Lambda's handler on one SQS event.
    pub async fn handle(&self, event: SqsEvent) -> SqsBatchResponse {
        let svc = SubscriptionService {
            store: &self.store,
            dead_letters: Some(&self.dead_letters),
            metrics: &self.metrics,
        };
        handle_batch(&svc, event).await
    }

    /// EventBridge's delivery: each event into the subscription queue, as its body.
    pub async fn enqueue(&self, events: &[Value]) -> Result<usize> {
        for e in events {
            self.sqs
                .send_message()
                .queue_url(&self.queue_url)
                .message_body(e.to_string())
                .send()
                .await
                .context("SendMessage to the subscription queue")?;
        }
        Ok(events.len())
    }

    /// Take the simulator's pending lifecycle events (its admin API's outbox).
    pub async fn take_sim_events(&self) -> Result<Vec<Value>> {
        let Some(url) = &self.sim_admin_url else {
            return Ok(Vec::new());
        };
        let resp = self
            .http
            .post(format!("{url}/_sim/events/take"))
            .send()
            .await
            .context("simulator events")?;
        if !resp.status().is_success() {
            bail!("simulator events: HTTP {}", resp.status());
        }
        let v: Value = resp.json().await?;
        Ok(v["events"].as_array().cloned().unwrap_or_default())
    }

    /// One deprovision-cleanup run as of `now`.
    pub async fn cleanup(&self, now: DateTime<Utc>) -> Result<CleanupReport> {
        Ok(deprovision_cleanup::run(&self.store, &self.metrics, now).await?)
    }
}

/// Events from a file's JSON: one event object, or an array of them.
pub fn events_from_json(text: &str) -> Result<Vec<Value>> {
    match serde_json::from_str::<Value>(text).context("the events are not JSON")? {
        Value::Array(events) => Ok(events),
        v @ Value::Object(_) => Ok(vec![v]),
        _ => bail!("expected an EventBridge event or an array of them"),
    }
}

/// The register Lambda's dependencies on the local stack (as `lifecycle/src/bin/register.rs` builds
/// them from the Lambda environment).
pub struct LocalRegister {
    resolver: MarketplaceCustomerResolver,
    profiles: DynamoDbProfileStore,
    subscribers: DynamoDbSubscriberStore,
    product_code: String,
    region: String,
    metrics: MetricsSink,
}

impl LocalRegister {
    /// Over the stack in `env`, for `product_code` (default: the env file's).
    pub async fn from_env(env: &LocalEnv, product_code: Option<String>) -> Result<Self> {
        let product_code = match product_code {
            Some(p) => p,
            None => env.get("AWSMP_PRODUCT_CODE")?.to_owned(),
        };
        Ok(Self {
            resolver: MarketplaceCustomerResolver::new(env.metering().await?),
            profiles: DynamoDbProfileStore::new(
                env.dynamodb().await?,
                env.get("AWSMP_CUSTOMER_PROFILE_TABLE")?,
            ),
            // The subscribers table is the events stack's, in the events region.
            subscribers: DynamoDbSubscriberStore::new(
                match super::topology::events_dynamodb(env).await? {
                    Some(events) => events,
                    None => env.dynamodb().await?,
                },
                env.get("AWSMP_SUBSCRIBERS_TABLE")?,
            ),
            product_code,
            region: env.get("AWS_REGION")?.to_owned(),
            metrics: MetricsSink::stdout(awsmp_aws::emf::DEFAULT_NAMESPACE, "register"),
        })
    }

    /// Answer one HTTP request as API Gateway + the register Lambda would.
    pub async fn answer(&self, method: &Method, headers: &HeaderMap, body: &Bytes) -> Response {
        let svc = RegisterService {
            resolver: &self.resolver,
            profiles: &self.profiles,
            subscribers: &self.subscribers,
            product_code: &self.product_code,
            region: &self.region,
            metrics: &self.metrics,
        };
        let content_type = headers.get("content-type").and_then(|v| v.to_str().ok());
        let req = RegisterRequest {
            method: method.as_str(),
            content_type,
            body,
        };
        let page = respond(&svc, req, Utc::now()).await;
        let mut resp = (
            StatusCode::from_u16(page.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            page.html.clone(),
        )
            .into_response();
        for (k, v) in page.all_headers() {
            resp.headers_mut()
                .insert(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        resp
    }
}

/// Serve the register endpoint on `listener` (loopback only) until interrupted; prints
/// `listening on http://127.0.0.1:PORT/register` first.
pub async fn serve_register(
    listener: tokio::net::TcpListener,
    register: LocalRegister,
) -> Result<()> {
    let addr = listener.local_addr()?;
    if !addr.ip().is_loopback() {
        bail!("the register endpoint binds 127.0.0.1 only, not {addr}");
    }
    let register = std::sync::Arc::new(register);
    let app = axum::Router::new()
        .route(
            "/register",
            axum::routing::any(move |method: Method, headers: HeaderMap, body: Bytes| {
                let register = register.clone();
                async move { register.answer(&method, &headers, &body).await }
            }),
        )
        // Bodies above the Lambda's bound still reach it, so it answers its own 413 page.
        .layer(axum::extract::DefaultBodyLimit::max(1024 * 1024));
    println!("listening on http://{addr}/register");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
