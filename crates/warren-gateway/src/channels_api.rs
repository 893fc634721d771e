//! The channels over HTTP (issue 38 §8): `GET /api/channels` (each channel's health and row
//! counts), `GET /api/channels/{name}` (refused senders and the outbox),
//! `GET /api/channels/{name}/senders` and `POST /api/channels/{name}/senders/{id}/allow|block`,
//! and `GET /admin/channels` for `warren channels status` while a daemon runs. The views are
//! [`warren_channels::admin`]'s, shared with the CLI; reads never create the store.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::Value;
use warren_channels::admin::{self, AdminError};

use crate::error::{ApiError, blocking};
use crate::state::AppState;

fn admin_error(route: &str, e: AdminError) -> ApiError {
    match e {
        AdminError::Unknown { .. } => ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_channel",
            format!("{route}: {e}"),
        ),
        AdminError::BadSender { .. } => ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_sender",
            format!("{route}: {e}"),
        ),
        AdminError::Store(_) => ApiError::internal(route, e),
    }
}

/// The running channels' health (none while the hook has not started them).
fn statuses(state: &AppState) -> Vec<warren_channels::health::Status> {
    state
        .jobs()
        .channels()
        .map(|c| c.statuses())
        .unwrap_or_default()
}

pub(crate) async fn list(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "GET /api/channels";
    let (stores, config, statuses) = (
        Arc::clone(state.stores()),
        state.host().snapshot().config().clone(),
        statuses(&state),
    );
    blocking(ROUTE, move || {
        let store = stores
            .channels_existing()
            .map_err(|e| admin_error(ROUTE, e.into()))?;
        admin::list(&config, store.as_deref(), &statuses).map_err(|e| admin_error(ROUTE, e))
    })
    .await
    .map(Json)
}

pub(crate) async fn show(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "GET /api/channels/{name}";
    let (stores, config, statuses) = (
        Arc::clone(state.stores()),
        state.host().snapshot().config().clone(),
        statuses(&state),
    );
    blocking(ROUTE, move || {
        let store = stores
            .channels_existing()
            .map_err(|e| admin_error(ROUTE, e.into()))?;
        admin::show(&config, store.as_deref(), &statuses, &name).map_err(|e| admin_error(ROUTE, e))
    })
    .await
    .map(Json)
}

pub(crate) async fn senders(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "GET /api/channels/{name}/senders";
    let (stores, config) = (
        Arc::clone(state.stores()),
        state.host().snapshot().config().clone(),
    );
    blocking(ROUTE, move || {
        let store = stores
            .channels_existing()
            .map_err(|e| admin_error(ROUTE, e.into()))?;
        admin::senders(&config, store.as_deref(), &name).map_err(|e| admin_error(ROUTE, e))
    })
    .await
    .map(Json)
}

async fn decide(
    state: AppState,
    route: &'static str,
    name: String,
    id: String,
    allow: bool,
) -> Result<Json<Value>, ApiError> {
    let (stores, config) = (
        Arc::clone(state.stores()),
        state.host().snapshot().config().clone(),
    );
    blocking(route, move || {
        admin::resolve(&config, &name).map_err(|e| admin_error(route, e))?;
        let store = stores
            .channels()
            .map_err(|e| admin_error(route, e.into()))?;
        let channel =
            admin::decide(&config, &store, &name, &id, allow).map_err(|e| admin_error(route, e))?;
        Ok(serde_json::json!({"channel": channel, "sender_id": id,
                              "status": if allow { "allowed" } else { "blocked" }}))
    })
    .await
    .map(Json)
}

pub(crate) async fn allow(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    decide(
        state,
        "POST /api/channels/{name}/senders/{id}/allow",
        name,
        id,
        true,
    )
    .await
}

pub(crate) async fn block(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    decide(
        state,
        "POST /api/channels/{name}/senders/{id}/block",
        name,
        id,
        false,
    )
    .await
}
