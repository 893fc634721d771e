//! The gateway's own routes (STATE-16, STATE-17, STATE-19): `GET /health` (liveness only),
//! `GET /ready` (readiness, issue 36 §4),
//! `GET /api/health` (each component, [`crate::health`]), `GET /api/status`, the device
//! registry (`GET /api/devices`, `DELETE /api/devices/{id}`) and `POST /admin/reload`.

use std::time::SystemTime;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::health::{Probe, probe_response, uptime_secs};
use crate::pairing::device_id;
use crate::state::AppState;
use crate::tokens;

/// `GET /health` from the generation's routes: installed only once the daemon is ready.
pub(crate) async fn health() -> impl IntoResponse {
    probe_response(Probe::Health, true, true)
}

/// `GET /ready` from the generation's routes: they serve, so the daemon is ready.
pub(crate) async fn ready() -> impl IntoResponse {
    probe_response(Probe::Ready, true, true)
}

pub(crate) async fn api_health(State(state): State<AppState>) -> Json<Value> {
    Json(crate::health::report(&state).await)
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

pub(crate) async fn api_status(State(state): State<AppState>) -> Json<Value> {
    let inner = &state.0;
    let snapshot = inner.store.snapshot();
    Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "pid": std::process::id(),
        "started_at_unix": unix(inner.started_at),
        "uptime_secs": uptime_secs(inner.started_at),
        "config_generation": snapshot.generation(),
        "daemon_generation": inner.generation,
        "generation_since_unix": unix(inner.generation_since),
        "gateway": {
            "bind": snapshot.gateway.bind,
            "port": snapshot.gateway.port,
            "listening": inner.local_addr.map(|a| a.to_string()),
            "paired_devices": snapshot.gateway.paired_tokens.len(),
        },
        "agents": state.agents(),
    }))
}

pub(crate) async fn devices_list(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "GET /api/devices";
    let devices = state
        .process()
        .devices
        .clone()
        .map_err(|e| ApiError::internal(ROUTE, e))?;
    let config = state.store().snapshot();
    let hashes = tokens::token_hashes(&config);
    let listed = devices
        .run(move |d| d.list(&hashes))
        .await
        .map_err(|e| ApiError::internal(ROUTE, e))?;
    Ok(Json(json!({"count": listed.len(), "devices": listed})))
}

pub(crate) async fn device_delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    revoke(&state, "DELETE /api/devices/{id}", id)
        .await
        .map(Json)
}

/// Revokes the device whose id starts with `id` (persisted before the answer): the one
/// executor of `DELETE /api/devices/{id}` and the control seam's `token_revoke`.
pub(crate) async fn revoke(state: &AppState, route: &str, id: String) -> Result<Value, ApiError> {
    let store = state.store().clone();
    let devices = state.process().devices.clone().ok();
    let revoked =
        tokio::task::spawn_blocking(move || tokens::revoke_blocking(&store, devices.as_ref(), &id))
            .await
            .map_err(|e| ApiError::internal(route, e))?;
    match revoked {
        Ok(hash) => {
            tracing::info!(device = device_id(&hash), "device revoked");
            Ok(json!({"revoked": device_id(&hash)}))
        }
        Err(tokens::RevokeError::Config(e)) => Err(ApiError::from_config(route, &e)),
        Err(e @ tokens::RevokeError::NotFound(_)) => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{route}: {e}"),
        )),
        Err(e @ tokens::RevokeError::Ambiguous(_)) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "ambiguous_id",
            format!("{route}: {e}"),
        )),
        Err(e @ tokens::RevokeError::TooShort(_)) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "id_too_short",
            format!("{route}: {e}"),
        )),
    }
}

pub(crate) async fn admin_reload(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    reload(&state, "POST /admin/reload").await.map(Json)
}

/// Re-reads config.toml and rebuilds every subsystem: the one executor of `POST /admin/reload`
/// and the control seam's `reload`.
pub(crate) async fn reload(state: &AppState, route: &str) -> Result<Value, ApiError> {
    let Some(reload) = &state.0.reload else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_daemon",
            format!("{route}: this gateway runs without a daemon loop"),
        ));
    };
    match reload.request().await {
        Ok(generation) => Ok(json!({"reloaded": true, "generation": generation})),
        Err(message) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_config",
            format!(
                "{route}: {message}; the running generation {} keeps serving",
                state.0.generation
            ),
        )),
    }
}
