//! The Lambda Runtime API of one function, as the `lambda_runtime` crate calls it
//! (<https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html>): the runtime polls
//! `GET /2018-06-01/runtime/invocation/next`, answers with `POST …/{id}/response` or
//! `POST …/{id}/error`, and reports a failed start with `POST /2018-06-01/runtime/init/error`.
//! One function environment takes one invocation at a time, as in Lambda.

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::sync::{Notify, oneshot, watch};

/// The base path of every Runtime API call.
const BASE: &str = "/2018-06-01/runtime";

/// An invocation waiting for the runtime's next poll.
#[derive(Debug)]
pub(crate) struct Invocation {
    pub request_id: String,
    pub payload: Vec<u8>,
    pub deadline_ms: u64,
    pub invoked_arn: String,
    pub trace_id: String,
}

/// What the runtime answered.
#[derive(Debug)]
pub(crate) enum Outcome {
    Response(Vec<u8>),
    Error(Diagnostic),
}

/// `errorType` and `errorMessage`, as the runtime posts them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Diagnostic {
    #[serde(default)]
    pub error_type: String,
    #[serde(default)]
    pub error_message: String,
}

/// What the host watches: has the runtime polled (its init is done), did it report an init
/// error.
#[derive(Debug, Clone, Default)]
pub(crate) struct Status {
    pub polled: bool,
    pub init_error: Option<Diagnostic>,
}

#[derive(Default)]
struct Inner {
    next: Mutex<Option<Invocation>>,
    arrived: Notify,
    waiters: Mutex<HashMap<String, oneshot::Sender<Outcome>>>,
}

/// The API's state, shared by the server and the host.
#[derive(Clone)]
pub(crate) struct Api {
    inner: Arc<Inner>,
    status: Arc<watch::Sender<Status>>,
}

impl Api {
    /// Serve the Runtime API on a free loopback port.
    pub async fn serve() -> std::io::Result<(Self, SocketAddr, tokio::task::JoinHandle<()>)> {
        let api = Self {
            inner: Arc::default(),
            status: Arc::new(watch::Sender::new(Status::default())),
        };
        let app = Router::new()
            .route(&format!("{BASE}/invocation/next"), get(next))
            .route(
                &format!("{BASE}/invocation/{{id}}/response"),
                post(response),
            )
            .route(&format!("{BASE}/invocation/{{id}}/error"), post(error))
            .route(&format!("{BASE}/init/error"), post(init_error))
            .with_state(api.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok((api, addr, server))
    }

    /// Watch the runtime's status.
    pub fn status(&self) -> watch::Receiver<Status> {
        self.status.subscribe()
    }

    /// Forget what the previous process reported (a new one starts).
    pub fn reset(&self) {
        self.status.send_replace(Status::default());
        self.inner.next.lock().expect("next").take();
        self.inner.waiters.lock().expect("waiters").clear();
    }

    /// Queue `inv` for the runtime's next poll; the answer comes on the receiver.
    pub fn submit(&self, inv: Invocation) -> oneshot::Receiver<Outcome> {
        let (tx, rx) = oneshot::channel();
        self.inner
            .waiters
            .lock()
            .expect("waiters")
            .insert(inv.request_id.clone(), tx);
        *self.inner.next.lock().expect("next") = Some(inv);
        self.inner.arrived.notify_one();
        rx
    }
}

async fn next(State(api): State<Api>) -> Response {
    api.status
        .send_if_modified(|s| !std::mem::replace(&mut s.polled, true));
    let inv = loop {
        if let Some(inv) = api.inner.next.lock().expect("next").take() {
            break inv;
        }
        api.inner.arrived.notified().await;
    };
    let mut headers = HeaderMap::new();
    let mut set = |name: &'static str, value: &str| {
        if let Ok(v) = HeaderValue::from_str(value) {
            headers.insert(name, v);
        }
    };
    set("lambda-runtime-aws-request-id", &inv.request_id);
    set("lambda-runtime-deadline-ms", &inv.deadline_ms.to_string());
    set("lambda-runtime-invoked-function-arn", &inv.invoked_arn);
    set("lambda-runtime-trace-id", &inv.trace_id);
    set("content-type", "application/json");
    (StatusCode::OK, headers, inv.payload).into_response()
}

fn answer(api: &Api, id: &str, outcome: Outcome) -> StatusCode {
    match api.inner.waiters.lock().expect("waiters").remove(id) {
        Some(tx) => {
            let _ = tx.send(outcome);
            StatusCode::ACCEPTED
        }
        // Lambda answers an unknown or already answered request id with 400
        // (InvalidRequestID).
        None => StatusCode::BAD_REQUEST,
    }
}

async fn response(State(api): State<Api>, Path(id): Path<String>, body: Bytes) -> StatusCode {
    answer(&api, &id, Outcome::Response(body.to_vec()))
}

/// The diagnostic in the body, its type defaulting to the
/// `Lambda-Runtime-Function-Error-Type` header.
fn diagnostic(headers: &HeaderMap, body: &[u8]) -> Diagnostic {
    let mut d: Diagnostic = serde_json::from_slice(body).unwrap_or_else(|_| Diagnostic {
        error_type: String::new(),
        error_message: String::from_utf8_lossy(body).into_owned(),
    });
    if d.error_type.is_empty() {
        d.error_type = headers
            .get("lambda-runtime-function-error-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("Unhandled")
            .to_owned();
    }
    d
}

async fn error(
    State(api): State<Api>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    answer(&api, &id, Outcome::Error(diagnostic(&headers, &body)))
}

async fn init_error(State(api): State<Api>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let d = diagnostic(&headers, &body);
    api.status.send_modify(|s| s.init_error = Some(d));
    StatusCode::ACCEPTED
}
