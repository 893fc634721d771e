//! Who may call (STATE-21): `/api` routes need a paired bearer token ([`require_token`], which
//! hands the handler its [`Caller`]); `/admin` routes answer only on loopback (unless
//! `gateway.allow_remote_admin`) and need the local admin key ([`ADMIN_KEY_HEADER`], from
//! `data/gateway.json`) or a bearer token ([`require_admin`]). [`Peer`] is the caller's address.

use std::net::{IpAddr, SocketAddr};

use axum::extract::connect_info::{ConnectInfo, MockConnectInfo};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::pairing;
use crate::state::AppState;

/// The header carrying the local admin key.
pub const ADMIN_KEY_HEADER: &str = "x-warren-admin";

/// The caller's address (from the listener); `None` when unknown (treated as remote).
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub Option<IpAddr>);

impl<S: Send + Sync> FromRequestParts<S> for Peer {
    type Rejection = std::convert::Infallible;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Peer(peer_from(&parts.extensions)))
    }
}

/// The listener's peer address, or the mocked one in tests.
fn peer_from(extensions: &axum::http::Extensions) -> Option<IpAddr> {
    extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
        .or_else(|| {
            extensions
                .get::<MockConnectInfo<SocketAddr>>()
                .map(|c| c.0.ip())
        })
}

fn peer_of(req: &Request) -> Option<IpAddr> {
    peer_from(req.extensions())
}

/// The hash of the caller's token, for handlers behind [`require_token`].
#[derive(Debug, Clone)]
pub struct Caller {
    pub token_hash: String,
}

pub(crate) async fn require_token(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    match state.authenticate(req.headers()) {
        Some(token_hash) => {
            req.extensions_mut().insert(Caller { token_hash });
            next.run(req).await
        }
        None => ApiError::unauthorized().into_response(),
    }
}

fn admin_key_ok(state: &AppState, headers: &HeaderMap) -> bool {
    headers
        .get(ADMIN_KEY_HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|key| pairing::ct_eq(key, &state.0.process.admin_key))
}

pub(crate) async fn require_admin(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let loopback = peer_of(&req).is_some_and(|ip| ip.is_loopback());
    let remote_allowed = state.store().snapshot().gateway.allow_remote_admin;
    let bearer_ok = state.authenticate(req.headers()).is_some();
    let authorised = if loopback {
        bearer_ok || admin_key_ok(&state, req.headers())
    } else {
        remote_allowed && bearer_ok
    };
    if authorised {
        return next.run(req).await;
    }
    if !loopback && !remote_allowed {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "loopback_only",
            "admin routes answer only on loopback (gateway.allow_remote_admin = true admits paired remote callers)",
        )
        .into_response();
    }
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "admin routes need the local admin key (used by `warren pair`) or a bearer token",
    )
    .into_response()
}
