//! The route table: every route with its access rule, built into the router and into the
//! OpenAPI document from the same list, so neither can forget one (STATE-17, STATE-21).
//!
//! Access: `/health` and `/pair` are public; every `/api` route needs a paired bearer token;
//! `/admin` routes answer only on loopback (unless `gateway.allow_remote_admin`) and need the
//! local admin key of `data/gateway.json` or a bearer token.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::SystemTime;

use axum::extract::connect_info::{ConnectInfo, MockConnectInfo};
use axum::extract::{DefaultBodyLimit, FromRequestParts, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, delete, get, patch, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::json::{BODY_LIMIT, StrictJson};
use crate::pairing::{self, PairRefused, device_id};
use crate::state::AppState;
use crate::tokens;

/// The header carrying the local admin key.
pub const ADMIN_KEY_HEADER: &str = "x-warren-admin";

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Public,
    Token,
    Admin,
}

/// One route: method, path, access rule, handler and its documentation.
pub struct Route {
    pub method: &'static str,
    pub path: &'static str,
    pub access: Access,
    pub summary: &'static str,
    /// A JSON example body (documents the request; `None` = no body).
    pub request: Option<&'static str>,
    pub handler: fn() -> MethodRouter<AppState>,
}

/// Every route of the gateway.
pub const ROUTES: &[Route] = &[
    Route {
        method: "GET",
        path: "/health",
        access: Access::Public,
        summary: "Liveness: {\"status\":\"ok\"} and nothing else",
        request: None,
        handler: || get(health),
    },
    Route {
        method: "GET",
        path: "/metrics",
        access: Access::Token,
        summary: "Prometheus metrics (OpenMetrics text): turns, provider requests, tokens, cost, tool calls, approvals, denials, queue depth, cron runs, memory",
        request: None,
        handler: || get(crate::metrics_api::scrape),
    },
    Route {
        method: "POST",
        path: "/pair",
        access: Access::Public,
        summary: "Exchange a one-time pairing code (from `warren pair`) for a bearer token",
        request: Some(r#"{"code": "123456", "device": "laptop"}"#),
        handler: || post(pair),
    },
    Route {
        method: "GET",
        path: "/api/health",
        access: Access::Token,
        summary: "Health of each component (gateway, config, device registry, agents)",
        request: None,
        handler: || get(api_health),
    },
    Route {
        method: "GET",
        path: "/api/status",
        access: Access::Token,
        summary: "Agents with their sandbox posture, config generation, uptime",
        request: None,
        handler: || get(api_status),
    },
    Route {
        method: "GET",
        path: "/api/devices",
        access: Access::Token,
        summary: "Paired devices (id = prefix of the token hash, name, created, last seen)",
        request: None,
        handler: || get(devices_list),
    },
    Route {
        method: "DELETE",
        path: "/api/devices/{id}",
        access: Access::Token,
        summary: "Revoke a device's token (persisted before the answer)",
        request: None,
        handler: || delete(device_delete),
    },
    Route {
        method: "GET",
        path: "/api/config",
        access: Access::Token,
        summary: "The effective config; secrets show as [redacted]",
        request: None,
        handler: || get(crate::config_api::get_config),
    },
    Route {
        method: "PATCH",
        path: "/api/config",
        access: Access::Token,
        summary: "Set (or with null remove) dotted keys; validated, dirty-path, one write lock",
        request: Some(r#"{"log.level": "debug", "cron.max_failures": 3}"#),
        handler: || patch(crate::config_api::patch_config),
    },
    Route {
        method: "GET",
        path: "/api/openapi.json",
        access: Access::Token,
        summary: "This document",
        request: None,
        handler: || get(openapi),
    },
    Route {
        method: "POST",
        path: "/api/agents/{alias}/rename",
        access: Access::Token,
        summary: "Rename an agent: config references, workspace and every per-agent store (LIFE-3); warnings in the body",
        request: Some(r#"{"to": "new-alias"}"#),
        handler: || post(crate::lifecycle_api::rename),
    },
    Route {
        method: "DELETE",
        path: "/api/agents/{alias}",
        access: Access::Token,
        summary: "Delete an agent: refused on hard references or live ACP sessions; archives workspace and stores under data/agents/_deleted/ (LIFE-4)",
        request: None,
        handler: || delete(crate::lifecycle_api::delete),
    },
    Route {
        method: "GET",
        path: "/api/agents/{alias}/delete-plan",
        access: Access::Token,
        summary: "Preview a delete: blockers, scrubbed references, live ACP sessions, records per store",
        request: None,
        handler: || get(crate::lifecycle_api::delete_plan),
    },
    Route {
        method: "POST",
        path: "/api/agents/restore",
        access: Access::Token,
        summary: "Restore a deleted agent from its archive (verified against its manifest), optionally under a new alias (BEYOND-1)",
        request: Some(r#"{"archive": "ops-20260101T000000.000000Z", "as": "ops2"}"#),
        handler: || post(crate::lifecycle_api::restore),
    },
    Route {
        method: "GET",
        path: "/api/agents/restore",
        access: Access::Token,
        summary: "Delete archives a restore can name (data/agents/_deleted/), newest first, with alias, time and whether restored (the dashboard's restore list)",
        request: None,
        handler: || get(crate::dashboard::archives),
    },
    Route {
        method: "POST",
        path: "/admin/agents/lifecycle",
        access: Access::Admin,
        summary: "The CLI's agent rename/delete/restore while a daemon runs",
        request: Some(r#"{"op": "rename", "alias": "old", "to": "new"}"#),
        handler: || post(crate::lifecycle_api::admin),
    },
    Route {
        method: "GET",
        path: "/api/cron",
        access: Access::Token,
        summary: "Cron jobs with schedule, next fire time, state and pause reason; never creates the store",
        request: None,
        handler: || get(crate::cron_api::list),
    },
    Route {
        method: "POST",
        path: "/api/cron",
        access: Access::Token,
        summary: "Add a runtime cron job (agent turn or shell command; cron+tz, every or at); validated like [cron.jobs]",
        request: Some(
            r#"{"name": "digest", "agent": "main", "every": "1h", "message": "Summarise the inbox"}"#,
        ),
        handler: || post(crate::cron_api::create),
    },
    Route {
        method: "GET",
        path: "/api/cron/{name}",
        access: Access::Token,
        summary: "One cron job with its last runs",
        request: None,
        handler: || get(crate::cron_api::show),
    },
    Route {
        method: "DELETE",
        path: "/api/cron/{name}",
        access: Access::Token,
        summary: "Remove a runtime cron job and its run history (declared jobs live in config.toml)",
        request: None,
        handler: || delete(crate::cron_api::remove),
    },
    Route {
        method: "POST",
        path: "/api/cron/{name}/run",
        access: Access::Token,
        summary: "Run a job now under the same lock as scheduled runs (409 run_in_progress names the holder); answers the stored run",
        request: None,
        handler: || post(crate::cron_api::run),
    },
    Route {
        method: "POST",
        path: "/api/cron/{name}/pause",
        access: Access::Token,
        summary: "Stop firing a job",
        request: None,
        handler: || post(crate::cron_api::pause),
    },
    Route {
        method: "POST",
        path: "/api/cron/{name}/resume",
        access: Access::Token,
        summary: "Fire a paused job again (clears its failure count)",
        request: None,
        handler: || post(crate::cron_api::resume),
    },
    Route {
        method: "GET",
        path: "/api/cron/{name}/runs",
        access: Access::Token,
        summary: "A job's runs, newest first (status, tokens, cost, receipts, delivery)",
        request: None,
        handler: || get(crate::cron_api::job_runs),
    },
    Route {
        method: "GET",
        path: "/api/runs",
        access: Access::Token,
        summary: "Background runs of the control plane (owner PID + boot ID, state)",
        request: None,
        handler: || get(crate::cron_api::runs),
    },
    Route {
        method: "POST",
        path: "/api/runs/{id}/cancel",
        access: Access::Token,
        summary: "Ask a running background run to stop (202)",
        request: None,
        handler: || post(crate::cron_api::cancel_run),
    },
    Route {
        method: "POST",
        path: "/admin/cron/wake",
        access: Access::Admin,
        summary: "The CLI changed data/cron/jobs.db: the scheduler re-reads it",
        request: None,
        handler: || post(crate::cron_api::wake),
    },
    Route {
        method: "GET",
        path: "/api/sops",
        access: Access::Token,
        summary: "SOP definitions (shared/sops/<name>.toml) and the files that do not load, naming file and key",
        request: None,
        handler: || get(crate::sop_api::list),
    },
    Route {
        method: "GET",
        path: "/api/sops/{name}",
        access: Access::Token,
        summary: "One SOP: its definition and last runs",
        request: None,
        handler: || get(crate::sop_api::show),
    },
    Route {
        method: "POST",
        path: "/api/sops/{name}/run",
        access: Access::Token,
        summary: "Start a run (202 with the run; 429 at_capacity when the SOP's or the global cap is reached; a warning when runs are kept in memory only)",
        request: Some(r#"{"input": {"ticket": "42"}}"#),
        handler: || post(crate::sop_api::run),
    },
    Route {
        method: "POST",
        path: "/api/sops/{name}/webhook",
        access: Access::Token,
        summary: "The webhook trigger of an SOP whose trigger is webhook: the JSON body is the run's input (202)",
        request: Some(r#"{"ticket": "42"}"#),
        handler: || post(crate::sop_api::webhook),
    },
    Route {
        method: "GET",
        path: "/api/sops/{name}/runs",
        access: Access::Token,
        summary: "An SOP's runs, newest first",
        request: None,
        handler: || get(crate::sop_api::sop_runs),
    },
    Route {
        method: "GET",
        path: "/api/sops/runs/{id}",
        access: Access::Token,
        summary: "One SOP run with its steps (outputs, receipts) and events (who, what, why)",
        request: None,
        handler: || get(crate::sop_api::run_detail),
    },
    Route {
        method: "POST",
        path: "/api/sops/runs/{id}/approve",
        access: Access::Token,
        summary: "Approve the approval gate the run waits at",
        request: Some(r#"{"step": "gate"}"#),
        handler: || post(crate::sop_api::approve),
    },
    Route {
        method: "POST",
        path: "/api/sops/runs/{id}/deny",
        access: Access::Token,
        summary: "Deny the approval gate the run waits at (the run ends denied)",
        request: Some(r#"{"step": "gate", "reason": "not now"}"#),
        handler: || post(crate::sop_api::deny),
    },
    Route {
        method: "POST",
        path: "/api/sops/runs/{id}/cancel",
        access: Access::Token,
        summary: "Cancel an active SOP run (202)",
        request: None,
        handler: || post(crate::sop_api::cancel),
    },
    Route {
        method: "POST",
        path: "/admin/sops/{name}/run",
        access: Access::Admin,
        summary: "The CLI's `warren sop run` while a daemon runs",
        request: Some(r#"{"input": {}}"#),
        handler: || post(crate::sop_api::admin_run),
    },
    Route {
        method: "POST",
        path: "/admin/sops/runs/{id}/action",
        access: Access::Admin,
        summary: "The CLI's `warren sop approve|deny|cancel` while a daemon runs",
        request: Some(r#"{"step": "gate", "approved": true, "who": "cli:ops"}"#),
        handler: || post(crate::sop_api::admin_action),
    },
    Route {
        method: "POST",
        path: "/admin/reload",
        access: Access::Admin,
        summary: "Re-read config.toml and rebuild every subsystem in this process; an invalid config keeps the running generation (400)",
        request: None,
        handler: || post(admin_reload),
    },
    Route {
        method: "POST",
        path: "/admin/paircode",
        access: Access::Admin,
        summary: "Issue a one-time pairing code (shown only to the caller; expires)",
        request: None,
        handler: || post(admin_paircode),
    },
    Route {
        method: "POST",
        path: "/admin/pair",
        access: Access::Admin,
        summary: "Pair the operator's device without a code or lockout: needs the local admin key of data/gateway.json itself (`warren pair --device NAME`), not a bearer token",
        request: Some(r#"{"device": "laptop"}"#),
        handler: || post(crate::operator_pair::admin_pair),
    },
    Route {
        method: "GET",
        path: "/api/agents",
        access: Access::Token,
        summary: "Agents of the running generation (alias, provider, model, profiles, default, ok)",
        request: None,
        handler: || get(crate::agents_api::list_agents),
    },
    Route {
        method: "POST",
        path: "/api/agents",
        access: Access::Token,
        summary: "Add an agent through the one config write lock (CFG-3); it serves after POST /admin/reload",
        request: Some(
            r#"{"alias": "helper", "provider": "openai", "model": "gpt-4o-mini", "risk_profile": "default"}"#,
        ),
        handler: || post(crate::agents_api::add_agent),
    },
    Route {
        method: "POST",
        path: "/api/agents/{alias}/chat",
        access: Access::Token,
        summary: "One user turn (JSON: 200 with the outcome, or 202 {turn, approval} as soon as a call waits for approval, then GET /api/turns/{id}; SSE events delta/notice/tool_call/approval/tool_result/done/error with Accept: text/event-stream); a session of another agent = 409 session_owned_by_other_agent; session queue full = 429, timed out = 408",
        request: Some(r#"{"message": "hello", "session": "http-main"}"#),
        handler: || post(crate::agents_api::chat),
    },
    Route {
        method: "GET",
        path: "/api/turns/{id}",
        access: Access::Token,
        summary: "A JSON chat's turn (after its 202): running, waiting_approval (with the approval), done (with the 200 chat body as result) or failed (with the error); ?wait=SECS (at most 25) long-polls until the status changes; records are process-local and kept 1 h after the turn ends",
        request: None,
        handler: || get(crate::turns_api::get_turn),
    },
    Route {
        method: "GET",
        path: "/api/agents/{alias}/sessions",
        access: Access::Token,
        summary: "The agent's sessions, most recently active first",
        request: None,
        handler: || get(crate::agents_api::list_sessions),
    },
    Route {
        method: "GET",
        path: "/api/agents/{alias}/sessions/{key}",
        access: Access::Token,
        summary: "A page of a session's history (?after=SEQ&limit=N), oldest first",
        request: None,
        handler: || get(crate::agents_api::session_history),
    },
    Route {
        method: "GET",
        path: "/api/agents/{alias}/memory",
        access: Access::Token,
        summary: "Memory recall for one agent (?q=WORDS&limit=N; no q = most recent)",
        request: None,
        handler: || get(crate::agents_api::memory_recall),
    },
    Route {
        method: "GET",
        path: "/api/agents/{alias}/memory/{key}",
        access: Access::Token,
        summary: "One memory entry with its version and provenance (404 unknown_memory naming the key)",
        request: None,
        handler: || get(crate::agents_api::memory_show),
    },
    Route {
        method: "DELETE",
        path: "/api/agents/{alias}/memory/{key}",
        access: Access::Token,
        summary: "Forget a memory entry; its last version stays in the history (undo brings it back)",
        request: None,
        handler: || delete(crate::agents_api::memory_forget),
    },
    Route {
        method: "GET",
        path: "/api/agents/{alias}/memory/{key}/history",
        access: Access::Token,
        summary: "Every kept version of a memory key, newest first, with its state (current, replaced, forgotten) and provenance",
        request: None,
        handler: || get(crate::agents_api::memory_history),
    },
    Route {
        method: "POST",
        path: "/api/agents/{alias}/memory/{key}/undo",
        access: Access::Token,
        summary: "Restore the previous version of a memory key (or version {\"to\": N}) as a new version; the body is optional",
        request: Some(r#"{"to": 1}"#),
        handler: || post(crate::agents_api::memory_undo),
    },
    Route {
        method: "GET",
        path: "/api/costs",
        access: Access::Token,
        summary: "The cost ledger (?agent=A&limit=N): totals per agent and the newest records",
        request: None,
        handler: || get(crate::agents_api::costs),
    },
    Route {
        method: "GET",
        path: "/api/approvals",
        access: Access::Token,
        summary: "Tool calls waiting for an operator's approval",
        request: None,
        handler: || get(crate::ops_api::list_approvals),
    },
    Route {
        method: "POST",
        path: "/api/approvals/{id}",
        access: Access::Token,
        summary: "Approve or deny a pending tool call; no answer within approval_timeout_secs = denied",
        request: Some(r#"{"approve": true}"#),
        handler: || post(crate::ops_api::decide_approval),
    },
    Route {
        method: "GET",
        path: "/api/logs",
        access: Access::Token,
        summary: "The runtime trace, newest page first (?agent=&kind=&before=INDEX&limit=N)",
        request: None,
        handler: || get(crate::ops_api::logs),
    },
    Route {
        method: "GET",
        path: "/api/events",
        access: Access::Token,
        summary: "Live trace events as server-sent events (?agent=&kind=); works with [log] persistence = none",
        request: None,
        handler: || get(crate::ops_api::events),
    },
];

/// The router over [`ROUTES`].
pub fn router(state: AppState) -> Router {
    router_with_limits(state, TimeLimits::default())
}

/// Request time limits: how long a response head may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeLimits {
    pub request: std::time::Duration,
    /// A JSON chat answers when its turn ends.
    pub chat: std::time::Duration,
}

impl Default for TimeLimits {
    fn default() -> Self {
        Self {
            request: REQUEST_TIMEOUT,
            chat: CHAT_TIMEOUT,
        }
    }
}

/// [`router`] with its own time limits (tests).
pub fn router_with_limits(state: AppState, limits: TimeLimits) -> Router {
    let mut router = Router::new();
    for route in ROUTES {
        let handler = (route.handler)();
        let handler =
            match route.access {
                Access::Public => handler,
                Access::Token => handler
                    .route_layer(middleware::from_fn_with_state(state.clone(), require_token)),
                Access::Admin => handler
                    .route_layer(middleware::from_fn_with_state(state.clone(), require_admin)),
            };
        // The limit is the route's, chosen here once (outermost: it covers the access check).
        let limit = if route.path.ends_with("/chat") {
            limits.chat
        } else {
            limits.request
        };
        let handler = handler.route_layer(middleware::from_fn_with_state(limit, time_limit));
        router = router.route(route.path, handler);
    }
    let router = crate::openai_api::register(router, &state, limits);
    let router = crate::dashboard::register(router);
    router
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn(crate::json::json_errors))
        .layer(middleware::from_fn(crate::error::log_server_errors))
        .with_state(state)
}

/// How long a request may take to produce its response head (a chat turn: [`CHAT_TIMEOUT`]).
pub const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
/// A JSON chat answers when its turn ends; a streamed one starts at once.
pub const CHAT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// Request timeouts: 408 when the response head is not ready within the route's `limit`.
async fn time_limit(
    State(limit): State<std::time::Duration>,
    req: Request,
    next: Next,
) -> Response {
    let (method, uri) = (req.method().clone(), req.uri().clone());
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(response) => response,
        Err(_) => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            format!("{method} {}: no response within {limit:?}", uri.path()),
        )
        .into_response(),
    }
}

async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such route (see GET /api/openapi.json)",
    )
}

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

async fn require_token(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
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

async fn require_admin(State(state): State<AppState>, req: Request, next: Next) -> Response {
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

async fn health() -> impl IntoResponse {
    health_response()
}

/// `GET /health`'s answer: liveness only. The listener gives it too while no generation's
/// routes are installed (the daemon's start-up, a reload's gap).
pub(crate) fn health_response() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        r#"{"status":"ok"}"#,
    )
}

/// Whether a request is the liveness probe (`GET` or `HEAD /health`).
pub(crate) fn is_health(method: &axum::http::Method, path: &str) -> bool {
    path == "/health" && (method == axum::http::Method::GET || method == axum::http::Method::HEAD)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PairRequest {
    code: String,
    device: String,
}

async fn pair(
    State(state): State<AppState>,
    Peer(peer): Peer,
    StrictJson(request): StrictJson<PairRequest>,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "POST /pair";
    let device = crate::operator_pair::device_name(ROUTE, &request.device)?;
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
    crate::operator_pair::issue_token(&state, ROUTE, device)
        .await
        .map_err(|mut err| {
            state.process().pairing.give_back(&request.code);
            err.message = format!(
                "{}; no token was issued and the pairing code stays valid",
                err.message
            );
            err
        })
}

fn uptime_secs(since: SystemTime) -> u64 {
    SystemTime::now()
        .duration_since(since)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

async fn api_health(State(state): State<AppState>) -> Json<Value> {
    let inner = &state.0;
    let devices = match &inner.process.devices {
        Ok(_) => json!({"status": "ok"}),
        Err(e) => json!({"status": "error", "error": e}),
    };
    let reports = state.agents();
    let agents: serde_json::Map<String, Value> = match reports {
        Some(reports) => reports
            .iter()
            .map(|a| {
                let v = if a.ok {
                    json!({"status": "ok"})
                } else {
                    json!({"status": "error", "error": a.sandbox.get("error")})
                };
                (a.alias.to_string(), v)
            })
            .collect(),
        // The listener serves while the agents' sandboxes are still being probed.
        None => inner
            .host
            .snapshot()
            .agents()
            .map(|(alias, _)| (alias.to_string(), json!({"status": "starting"})))
            .collect(),
    };
    let sessions = match inner.host.sessions_health() {
        warren_runtime::host::SessionsHealth::Starting => json!({"status": "starting"}),
        warren_runtime::host::SessionsHealth::Ok {
            backend,
            durable,
            skipped,
        } if skipped.is_empty() => {
            json!({"status": "ok", "backend": backend, "durable": durable})
        }
        // A legacy file left out of the import: the store serves, the file waits for the
        // operator (issue 15 §7).
        warren_runtime::host::SessionsHealth::Ok {
            backend,
            durable,
            skipped,
        } => json!({
            "status": "warning",
            "backend": backend,
            "durable": durable,
            "legacy_files_not_imported": skipped,
        }),
        warren_runtime::host::SessionsHealth::Error(e) => json!({"status": "error", "error": e}),
    };
    let starting = reports.is_none() || sessions["status"] == "starting";
    let config = config_health(&state);
    let all_ok = config["status"] == "ok"
        && inner.process.devices.is_ok()
        && reports.is_some_and(|r| r.iter().all(|a| a.ok))
        && (sessions["status"] == "ok" || sessions["status"] == "warning");
    // Qdrant down is an error; a missing or failing lucid only a warning (SQLite still answers).
    let memory_backends = inner
        .host
        .memory_stores()
        .health(inner.host.snapshot().config())
        .await;
    let all_ok = all_ok && memory_backends["status"] != "error";
    let memory = warren_runtime::telemetry::memory_health();
    let all_ok = all_ok && memory["status"] == "ok";
    // Stores left read-only at their old schema by a failed migration (issue 22 §4).
    let read_only: Vec<Value> = warren_config::sqlite::read_only_stores()
        .into_iter()
        .map(|(path, reason)| json!({"path": path, "reason": reason}))
        .collect();
    let all_ok = all_ok && read_only.is_empty();
    let stores = if read_only.is_empty() {
        json!({"status": "ok"})
    } else {
        json!({"status": "read_only", "read_only": read_only})
    };
    Json(json!({
        "status": if all_ok { "ok" } else if starting { "starting" } else { "degraded" },
        "pid": std::process::id(),
        "uptime_secs": uptime_secs(inner.started_at),
        "components": {
            "gateway": {"status": "ok", "listening": inner.local_addr.map(|a| a.to_string())},
            "config": config,
            "devices": devices,
            "sessions": sessions,
            "agents": agents,
            "cron": crate::cron_api::health(&state).await,
            "sop": crate::sop_api::health(&state).await,
            "memory_backends": memory_backends,
            "resident_memory": memory,
            "stores": stores,
        },
    }))
}

/// The config component: an error while config.toml on disk does not load (the running
/// generation keeps serving; issue 15 §3).
fn config_health(state: &AppState) -> Value {
    let inner = &state.0;
    let mut config = json!({
        "status": "ok",
        "generation": inner.store.generation(),
        "daemon_generation": inner.generation,
    });
    if let Some(refused) = inner.reload.as_ref().and_then(|r| r.refused()) {
        config["status"] = "error".into();
        config["error"] =
            format!("config.toml does not load, the running generation keeps serving: {refused}")
                .into();
    }
    config
}

async fn api_status(State(state): State<AppState>) -> Json<Value> {
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

async fn devices_list(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
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

async fn device_delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "DELETE /api/devices/{id}";
    let store = state.store().clone();
    let devices = state.process().devices.clone().ok();
    let revoked =
        tokio::task::spawn_blocking(move || tokens::revoke_blocking(&store, devices.as_ref(), &id))
            .await
            .map_err(|e| ApiError::internal(ROUTE, e))?;
    match revoked {
        Ok(hash) => {
            tracing::info!(device = device_id(&hash), "device revoked");
            Ok(Json(json!({"revoked": device_id(&hash)})))
        }
        Err(tokens::RevokeError::Config(e)) => Err(ApiError::from_config(ROUTE, &e)),
        Err(e @ tokens::RevokeError::NotFound(_)) => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{ROUTE}: {e}"),
        )),
        Err(e @ tokens::RevokeError::Ambiguous(_)) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "ambiguous_id",
            format!("{ROUTE}: {e}"),
        )),
        Err(e @ tokens::RevokeError::TooShort(_)) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "id_too_short",
            format!("{ROUTE}: {e}"),
        )),
    }
}

async fn openapi() -> Json<Value> {
    Json(crate::openapi::document())
}

async fn admin_reload(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let Some(reload) = &state.0.reload else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_daemon",
            "POST /admin/reload: this gateway runs without a daemon loop",
        ));
    };
    match reload.request().await {
        Ok(generation) => Ok(Json(json!({"reloaded": true, "generation": generation}))),
        Err(message) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_config",
            format!(
                "POST /admin/reload: {message}; the running generation {} keeps serving",
                state.0.generation
            ),
        )),
    }
}

async fn admin_paircode(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let (code, ttl) = state
        .process()
        .pairing
        .issue_code()
        .map_err(|e| ApiError::internal("POST /admin/paircode", e))?;
    // Shown to the caller only: never logged (STATE-21).
    Ok(Json(
        json!({"code": code, "expires_in_secs": ttl.as_secs()}),
    ))
}
