//! Pairing over HTTP (STATE-15, STATE-21): `POST /pair` redeems a one-time code issued by
//! `POST /admin/paircode` (wrong codes lock the source address out).
//!
//! Pairing a device for the operator (issue 35 §9): `POST /admin/pair`
//! issues a bearer token without a pairing code, for a caller that presents the local admin
//! key of `data/gateway.json` (0600, in the install's `data/`, which no agent's sandbox can
//! read) on loopback. `warren pair --device NAME` calls it.
//!
//! Why: failed `POST /pair` attempts lock their source address out and burn the pending code
//! (STATE-21), and on loopback every local process shares the operator's address, so any local
//! process could keep the operator from pairing by guessing wrong. The admin-key path has no
//! code and no lockout; a paired bearer token does not open it (only the key file does).
//!
//! Also the tail both pairing routes share: [`issue_token`] saves the token's hash durably
//! before the token leaves the process and names the device in the registry.

use std::net::{IpAddr, Ipv4Addr};

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::auth::{ADMIN_KEY_HEADER, Peer};
use crate::error::ApiError;
use crate::json::StrictJson;
use crate::pairing::{self, PairRefused, device_id, hash_token, new_token};
use crate::state::AppState;
use crate::tokens;

/// The longest device name accepted.
pub const MAX_DEVICE_NAME: usize = 64;

/// The body of `POST /admin/pair`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OperatorPairRequest {
    device: String,
}

/// `device` trimmed, or 400 naming the rule.
pub(crate) fn device_name(route: &'static str, device: &str) -> Result<String, ApiError> {
    let device = device.trim().to_string();
    if device.is_empty()
        || device.chars().count() > MAX_DEVICE_NAME
        || device.chars().any(char::is_control)
    {
        return Err(ApiError::bad_field(
            route,
            "device",
            format!("1 to {MAX_DEVICE_NAME} printable characters"),
        ));
    }
    Ok(device)
}

/// A new token for `device`: its hash durably in config.toml first (STATE-15), then the
/// registry row; `Err` (nothing issued) when the config could not be saved.
pub(crate) async fn issue_token(
    state: &AppState,
    route: &'static str,
    device: String,
) -> Result<Json<Value>, ApiError> {
    let token = new_token().map_err(|e| ApiError::internal(route, e))?;
    let hash = hash_token(&token);
    let store = state.store().clone();
    let persisted_hash = hash.clone();
    crate::config_write::write_fresh(state, route, move || {
        tokens::add_hash_blocking(&store, &persisted_hash)
    })
    .await
    .and_then(|saved| saved.map_err(|e| ApiError::from_config(route, &e)))?;
    if let Ok(devices) = &state.process().devices {
        let (devices, row_hash, name) = (devices.clone(), hash.clone(), device.clone());
        let inserted = tokio::task::spawn_blocking(move || devices.insert(&row_hash, &name)).await;
        if !matches!(inserted, Ok(Ok(()))) {
            tracing::warn!(
                device = device_id(&hash),
                "paired, but the device registry row was not written"
            );
        }
    }
    tracing::info!(device = device_id(&hash), "device paired");
    Ok(Json(json!({
        "token": token,
        "device": {"id": device_id(&hash), "name": device},
    })))
}

/// `POST /admin/pair`: a token for the operator's device, no code, no lockout. The admin
/// route layer already admitted the caller (loopback, or a remote admin); this route further
/// demands the admin key itself, so a paired token cannot mint more tokens here.
pub(crate) async fn admin_pair(
    State(state): State<AppState>,
    headers: HeaderMap,
    StrictJson(request): StrictJson<OperatorPairRequest>,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "POST /admin/pair";
    operator_pair(
        &state,
        ROUTE,
        &request.device,
        has_admin_key(&state, &headers),
    )
    .await
}

/// Whether the request presents the local admin key itself (not a bearer token).
pub(crate) fn has_admin_key(state: &AppState, headers: &HeaderMap) -> bool {
    headers
        .get(ADMIN_KEY_HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|key| pairing::ct_eq(key, &state.process().admin_key))
}

/// Pairs the operator's `device` for a caller that presented the local admin key (`admin_key`):
/// the one executor of `POST /admin/pair` and the control seam's `pair`.
pub(crate) async fn operator_pair(
    state: &AppState,
    route: &'static str,
    device: &str,
    admin_key: bool,
) -> Result<Json<Value>, ApiError> {
    if !admin_key {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "admin_key_required",
            format!(
                "{route}: needs the local admin key of data/gateway.json (run `warren pair --device NAME` as the operator); a bearer token does not pair devices here"
            ),
        ));
    }
    let device = device_name(route, device)?;
    issue_token(state, route, device).await
}

/// The body of `POST /pair`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PairRequest {
    code: String,
    device: String,
}

pub(crate) async fn pair(
    State(state): State<AppState>,
    Peer(peer): Peer,
    StrictJson(request): StrictJson<PairRequest>,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "POST /pair";
    let device = device_name(ROUTE, &request.device)?;
    let client = peer.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    state
        .process()
        .pairing
        .redeem(client, &request.code)
        .map_err(|refused| match refused {
            PairRefused::LockedOut { retry_after_secs } => ApiError {
                retry_after_secs: Some(retry_after_secs),
                ..ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "locked_out",
                    refused.to_string(),
                )
            },
            PairRefused::WrongCode { .. } => ApiError {
                field: Some("code".into()),
                ..ApiError::new(StatusCode::FORBIDDEN, "invalid_code", refused.to_string())
            },
        })?;
    // STATE-15: the hash is durably in config.toml before the token leaves this process.
    // Refused for the daemon's reasons (config not saved): the code stays valid.
    issue_token(&state, ROUTE, device).await.map_err(|mut err| {
        state.process().pairing.give_back(&request.code);
        err.message = format!(
            "{}; no token was issued and the pairing code stays valid",
            err.message
        );
        err
    })
}

pub(crate) async fn admin_paircode(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    paircode(&state, "POST /admin/paircode")
}

/// A one-time pairing code: the one executor of `POST /admin/paircode` and the control seam's
/// `pair_code`.
pub(crate) fn paircode(state: &AppState, route: &str) -> Result<Json<Value>, ApiError> {
    let (code, ttl) = state
        .process()
        .pairing
        .issue_code()
        .map_err(|e| ApiError::internal(route, e))?;
    // Shown to the caller only: never logged (STATE-21).
    Ok(Json(
        json!({"code": code, "expires_in_secs": ttl.as_secs()}),
    ))
}
