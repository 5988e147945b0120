//! HTTP layer: the awsJson1.1 endpoint (`POST /` + `X-Amz-Target`) and the admin API under
//! `/_sim/`, on one loopback port.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::engine::{Reply, SimConfig, Simulator};
use super::error::{ApiError, ErrorCode, SimError, error_chain};
use super::faults::Faults;
use super::ledger::Ledger;

/// awsJson1.1 target prefix of the Marketplace Metering service.
const TARGET_PREFIX: &str = "AWSMPMeteringService.";
/// awsJson1.1 content type.
const AMZ_JSON: &str = "application/x-amz-json-1.1";
/// Bodies up to this size are read so that a >1 MB request gets AWS's ValidationException
/// rather than a transport-level 413.
const MAX_HTTP_BODY_BYTES: usize = 16 * 1024 * 1024;

type Shared = Arc<Mutex<Simulator>>;

fn lock(s: &Shared) -> MutexGuard<'_, Simulator> {
    // A panic while holding the lock cannot leave the simulator half-updated in a way that
    // matters more than refusing service would, so keep serving.
    s.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A running simulator.
#[derive(Debug)]
pub struct SimHandle {
    addr: SocketAddr,
    state: Shared,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl SimHandle {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` — the endpoint URL for SDK clients and the admin API.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Read the state in-process (ledger, counters) without HTTP.
    pub fn with_state<T>(&self, f: impl FnOnce(&Simulator) -> T) -> T {
        f(&lock(&self.state))
    }

    /// Change the state in-process (e.g. `set_clock`) without HTTP.
    pub fn with_state_mut<T>(&self, f: impl FnOnce(&mut Simulator) -> T) -> T {
        f(&mut lock(&self.state))
    }

    /// A copy of the ledger.
    pub fn ledger(&self) -> Ledger {
        self.with_state(|s| s.ledger().clone())
    }

    /// Stop accepting, finish in-flight requests, and wait for the server task.
    pub async fn shutdown(mut self) -> Result<(), SimError> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        match self.task.take() {
            Some(task) => match task.await {
                Ok(result) => result.map_err(SimError::Io),
                Err(join) => Err(SimError::Io(std::io::Error::other(join))),
            },
            None => Ok(()),
        }
    }
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Bind `addr` (loopback only; port 0 = any free port) and serve the simulator.
pub async fn spawn_on(addr: SocketAddr, config: SimConfig) -> Result<SimHandle, SimError> {
    if !addr.ip().is_loopback() {
        return Err(SimError::NotLoopback(addr));
    }
    spawn(TcpListener::bind(addr).await?, config).await
}

/// Serve the simulator on an already bound loopback listener.
pub async fn spawn(listener: TcpListener, config: SimConfig) -> Result<SimHandle, SimError> {
    let addr = listener.local_addr()?;
    if !addr.ip().is_loopback() {
        return Err(SimError::NotLoopback(addr));
    }
    let state: Shared = Arc::new(Mutex::new(Simulator::new(config, Instant::now())?));
    let app = router(state.clone());
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = rx.await;
            })
            .await
    });
    Ok(SimHandle {
        addr,
        state,
        shutdown: Some(tx),
        task: Some(task),
    })
}

fn router(state: Shared) -> Router {
    Router::new()
        .route("/", post(api))
        .route("/_sim/ledger", get(get_ledger))
        .route("/_sim/faults", get(get_faults).post(post_faults))
        .route("/_sim/clock", get(get_clock).post(post_clock))
        .route("/_sim/reset", post(post_reset))
        .merge(super::lifecycle_admin::routes())
        .route(
            "/_sim/cloudtrail",
            get(get_cloudtrail).post(post_cloudtrail),
        )
        .layer(DefaultBodyLimit::max(MAX_HTTP_BODY_BYTES))
        .with_state(state)
}

fn api_response(reply: Reply) -> Response {
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = (status, reply.body.to_string()).into_response();
    let headers = resp.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(AMZ_JSON));
    if let Ok(id) = HeaderValue::from_str(&uuid::Uuid::new_v4().to_string()) {
        headers.insert("x-amzn-requestid", id);
    }
    if let Some(code) = reply.error {
        headers.insert("x-amzn-errortype", HeaderValue::from_static(code.name()));
    }
    resp
}

async fn api(State(state): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let target = headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if let Some(op) = super::cloudtrail::operation(target) {
        let mut sim = lock(&state);
        let now = sim.now();
        return api_response(sim.cloudtrail_mut().api(op, &body, Instant::now(), now));
    }
    let reply = match target.strip_prefix(TARGET_PREFIX) {
        Some("BatchMeterUsage") => {
            let latency = lock(&state).faults().latency();
            if !latency.is_zero() {
                tokio::time::sleep(latency).await;
            }
            lock(&state).batch_meter_usage(&body, Instant::now())
        }
        Some("ResolveCustomer") => lock(&state).resolve_customer(&body),
        _ => Reply::error(&ApiError::new(
            ErrorCode::UnknownOperation,
            format!("unknown X-Amz-Target {target:?}"),
        )),
    };
    api_response(reply)
}

fn admin_error(message: String) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(json!({"error": message})),
    )
        .into_response()
}

async fn get_ledger(State(state): State<Shared>) -> Response {
    axum::Json(lock(&state).ledger_json()).into_response()
}

async fn get_faults(State(state): State<Shared>) -> Response {
    axum::Json(lock(&state).faults().clone()).into_response()
}

async fn post_faults(State(state): State<Shared>, body: Bytes) -> Response {
    let faults = match std::str::from_utf8(&body)
        .map_err(|e| e.to_string())
        .and_then(|s| Faults::from_json(s).map_err(|e| error_chain(&e)))
    {
        Ok(f) => f,
        Err(e) => return admin_error(e),
    };
    let mut sim = lock(&state);
    match sim.set_faults(faults) {
        Ok(()) => axum::Json(sim.faults().clone()).into_response(),
        Err(e) => admin_error(error_chain(&e)),
    }
}

fn clock_json(sim: &Simulator) -> Value {
    json!({
        "now": sim.now().to_rfc3339_opts(SecondsFormat::Millis, true),
        "fixed": sim.clock_override().is_some(),
    })
}

async fn get_clock(State(state): State<Shared>) -> Response {
    axum::Json(clock_json(&lock(&state))).into_response()
}

async fn post_clock(State(state): State<Shared>, body: Bytes) -> Response {
    let value: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return admin_error(format!("body must be JSON: {e}")),
    };
    let now = match value.get("now") {
        Some(Value::Null) => None,
        Some(Value::String(s)) => match DateTime::parse_from_rfc3339(s) {
            Ok(t) => Some(t.with_timezone(&Utc)),
            Err(e) => return admin_error(format!("now {s:?} is not RFC 3339: {e}")),
        },
        _ => return admin_error(r#"expected {"now":"RFC3339"} or {"now":null}"#.into()),
    };
    let mut sim = lock(&state);
    sim.set_clock(now);
    axum::Json(clock_json(&sim)).into_response()
}

async fn post_reset(State(state): State<Shared>) -> Response {
    let mut sim = lock(&state);
    sim.reset(Instant::now());
    axum::Json(sim.ledger_json()).into_response()
}

async fn get_cloudtrail(State(state): State<Shared>) -> Response {
    let sim = lock(&state);
    let t = sim.cloudtrail();
    axum::Json(json!({"settings": t.settings(), "events": t.len()})).into_response()
}

async fn post_cloudtrail(State(state): State<Shared>, body: Bytes) -> Response {
    match serde_json::from_slice::<super::cloudtrail::TrailSettings>(&body) {
        Ok(settings) => {
            lock(&state).cloudtrail_mut().set_settings(settings);
            axum::Json(json!({"settings": settings})).into_response()
        }
        Err(e) => admin_error(format!(r#"expected {{"lagSeconds": N}}: {e}"#)),
    }
}
