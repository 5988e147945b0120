//! The lifecycle admin API (docs/local-stack.md, "Lifecycle admin API"): `POST
//! /_sim/subscribe`, `/_sim/tokens`, `/_sim/end-agreement`, `/_sim/deprovision`, and `POST
//! /_sim/events/take` (the outbox, for the runner).

use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::engine::Simulator;
use super::error::{SimError, error_chain};
use super::lifecycle;

type Shared = Arc<Mutex<Simulator>>;

fn lock(s: &Shared) -> MutexGuard<'_, Simulator> {
    s.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The routes, to merge into the simulator's router.
pub(super) fn routes() -> Router<Shared> {
    Router::new()
        .route("/_sim/subscribe", post(subscribe))
        .route("/_sim/tokens", post(tokens))
        .route("/_sim/end-agreement", post(end_agreement))
        .route("/_sim/deprovision", post(deprovision))
        .route("/_sim/events/take", post(take_events))
}

fn bad(message: String) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(json!({"error": message})),
    )
        .into_response()
}

fn answer(result: Result<Value, SimError>) -> Response {
    match result {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => bad(error_chain(&e)),
    }
}

fn body<T: DeserializeOwned>(bytes: &Bytes) -> Result<T, String> {
    serde_json::from_slice(bytes).map_err(|e| format!("body: {e}"))
}

async fn subscribe(State(state): State<Shared>, bytes: Bytes) -> Response {
    match body::<lifecycle::SubscribeRequest>(&bytes) {
        Ok(req) => answer(lifecycle::subscribe(&mut lock(&state), &req)),
        Err(e) => bad(e),
    }
}

async fn tokens(State(state): State<Shared>, bytes: Bytes) -> Response {
    match body::<lifecycle::LicenseRequest>(&bytes) {
        Ok(req) => answer(lifecycle::issue_token(&mut lock(&state), &req)),
        Err(e) => bad(e),
    }
}

async fn end_agreement(State(state): State<Shared>, bytes: Bytes) -> Response {
    match body::<lifecycle::LicenseRequest>(&bytes) {
        Ok(req) => answer(lifecycle::end_agreement(&mut lock(&state), &req)),
        Err(e) => bad(e),
    }
}

async fn deprovision(State(state): State<Shared>, bytes: Bytes) -> Response {
    match body::<lifecycle::LicenseRequest>(&bytes) {
        Ok(req) => answer(lifecycle::deprovision(&mut lock(&state), &req)),
        Err(e) => bad(e),
    }
}

async fn take_events(State(state): State<Shared>) -> Response {
    axum::Json(json!({"events": lock(&state).lifecycle_mut().take_events()})).into_response()
}
