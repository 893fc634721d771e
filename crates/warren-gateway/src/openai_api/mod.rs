//! The OpenAI-compatible endpoint (issue 27, BEYOND-14): `GET /v1/models`,
//! `GET /v1/models/{model}`, `POST /v1/chat/completions` (JSON, or SSE chunks with
//! `stream: true`) and a small `POST /v1/responses`, so any OpenAI client (SDKs, Open WebUI,
//! LibreChat) talks to Warren agents. Off unless `[gateway.openai] enabled`.
//!
//! - Auth: the paired bearer tokens of `/api/*`; errors in OpenAI's shape
//!   `{"error": {"message", "type", "param", "code"}}`.
//! - A model is an agent (id = alias). A completion is ONE turn through the runtime's door
//!   ([`warren_runtime::AgentHost::submit`], LOOP-1, SESS-1, SESS-2): the agent's own tools,
//!   approvals, memory, sandbox, cost limits and ledger apply; tools the client sends are
//!   refused (400), since the agent's tools are Warren's.
//! - Session: the `X-Warren-Session` header, else `oai-<hash of token, "user" and model>` (issue
//!   35 §7; a session of the older `oai-<hash of token and "user">` that the model's agent
//!   owns is still used), else (no `user`) the session whose conversation the messages
//!   continue, or a new one ([`threads`], issue 37 §2). The last
//!   message is the turn's input; the earlier ones must equal the session's stored
//!   conversation (user messages and final replies), so a client resending the whole
//!   conversation does not duplicate it; a client whose history diverges gets 409 naming the
//!   first differing index ([`check_history`]). A request an SDK retries (after its timeout,
//!   a 408 or a 5xx) joins the attempt it repeats instead of running the turn again
//!   ([`retry`]).
//!
//! Any other `/v1` path answers 404 `unknown_url` in OpenAI's shape (not a route of the table:
//! nothing is served there).
//!
//! These routes are not in [`crate::routes::ROUTES`]: their access check and error shape are
//! OpenAI's, so they carry their own table ([`OPENAI_ROUTES`]), registered by
//! [`crate::router::router_with_limits`] and documented by [`crate::openapi::document`]. Parts:
//! [`history`] (the resent conversation against the stored one), [`turn`] (agent, session and
//! input of a request), [`completions`] (JSON or SSE chunks), [`responses`], [`openapi`] (their
//! OpenAPI path items).

mod completions;
mod history;
mod openapi;
mod responses;
mod retry;
mod threads;
mod turn;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, any, get, post};
use axum::{Extension, Json, Router};
use serde_json::{Value, json};
use warren_core::AgentAlias;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::route::TimeLimits;
use crate::state::AppState;

pub use history::{Divergence, Visible, check_history};
pub use openapi::openapi_paths;
pub use retry::RETRY_COUNT_HEADER;

/// The header naming the Warren session of a request (else derived from token and `user`).
pub const SESSION_HEADER: &str = "x-warren-session";
/// Request bodies of `/v1` routes may be this large: clients resend whole conversations.
pub const OPENAI_BODY_LIMIT: usize = 1024 * 1024;
/// The longest user message accepted as a turn's input, in bytes (as the chat route).
const MAX_INPUT: usize = 32 * 1024;
/// The longest `user` field accepted, in characters.
const MAX_USER: usize = 256;

/// One OpenAI-compatible route.
pub struct OpenAiRoute {
    pub method: &'static str,
    pub path: &'static str,
    pub summary: &'static str,
    /// Waits for a turn (the chat time limit applies, not the request one).
    pub turn: bool,
    pub handler: fn() -> MethodRouter<AppState>,
}

/// Every OpenAI-compatible route.
pub const OPENAI_ROUTES: &[OpenAiRoute] = &[
    OpenAiRoute {
        method: "GET",
        path: "/v1/models",
        summary: "OpenAI-compatible: one model per agent (id = alias); needs [gateway.openai] enabled",
        turn: false,
        handler: || get(list_models),
    },
    OpenAiRoute {
        method: "GET",
        path: "/v1/models/{model}",
        summary: "OpenAI-compatible: one agent as a model (404 model_not_found otherwise)",
        turn: false,
        handler: || get(get_model),
    },
    OpenAiRoute {
        method: "POST",
        path: "/v1/chat/completions",
        summary: "OpenAI-compatible chat completion: one agent turn (stream: true = SSE chunks, data: [DONE]); session from X-Warren-Session, else token + user, else the conversation the messages continue (a new one otherwise); resent history is checked, not duplicated; max_tokens / max_completion_tokens reach the provider",
        turn: true,
        handler: || post(completions::chat_completions),
    },
    OpenAiRoute {
        method: "POST",
        path: "/v1/responses",
        summary: "OpenAI-compatible Responses API, small: input (string or message items) as one agent turn, answered as one response (no streaming, no client tools); same session and history rules",
        turn: true,
        handler: || post(responses::responses),
    },
];

/// Adds [`OPENAI_ROUTES`] to `router`, each behind the bearer check and its time limit, with
/// one [`retry::Recent`] shared by the turn routes.
pub(crate) fn register(
    mut router: Router<AppState>,
    state: &AppState,
    limits: TimeLimits,
) -> Router<AppState> {
    let recent = Arc::new(retry::Recent::default());
    let threads = Arc::new(threads::Threads::default());
    for route in OPENAI_ROUTES {
        let limit = if route.turn {
            limits.chat
        } else {
            limits.request
        };
        let handler = (route.handler)()
            .route_layer(middleware::from_fn_with_state(state.clone(), gate))
            .route_layer(middleware::from_fn_with_state(limit, time_limit))
            .route_layer(DefaultBodyLimit::max(OPENAI_BODY_LIMIT))
            .route_layer(Extension(Arc::clone(&recent)))
            .route_layer(Extension(Arc::clone(&threads)));
        router = router.route(route.path, handler);
    }
    // Any other `/v1` path answers in OpenAI's shape, as OpenAI does (issue 37 §2).
    router
        .route("/v1", any(unknown_url))
        .route("/v1/{*rest}", any(unknown_url))
}

/// 404 in OpenAI's shape for a `/v1` path that is not one of [`OPENAI_ROUTES`].
async fn unknown_url(req: Request) -> OpenAiError {
    OpenAiError {
        kind: "invalid_request_error",
        ..OpenAiError::new(
            StatusCode::NOT_FOUND,
            "unknown_url",
            format!(
                "Invalid URL ({} {}): Warren serves GET /v1/models, GET /v1/models/{{model}}, POST /v1/chat/completions and POST /v1/responses",
                req.method(),
                req.uri().path()
            ),
        )
    }
}

/// An error in OpenAI's shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenAiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's `type` (`invalid_request_error`, `authentication_error`, ...).
    pub kind: &'static str,
    pub code: &'static str,
    pub param: Option<String>,
    pub retry_after_secs: Option<u64>,
}

impl OpenAiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        let kind = match status {
            StatusCode::UNAUTHORIZED => "authentication_error",
            StatusCode::NOT_FOUND => "not_found_error",
            StatusCode::TOO_MANY_REQUESTS if code == "cost_limit_reached" => "insufficient_quota",
            StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
            StatusCode::REQUEST_TIMEOUT => "timeout_error",
            s if s.is_server_error() => "server_error",
            _ => "invalid_request_error",
        };
        Self {
            status,
            message: message.into(),
            kind,
            code,
            param: None,
            retry_after_secs: None,
        }
    }

    fn bad(param: impl Into<String>, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            param: Some(param.into()),
            ..Self::new(StatusCode::BAD_REQUEST, code, message)
        }
    }

    fn body(&self) -> Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

impl From<ApiError> for OpenAiError {
    fn from(e: ApiError) -> Self {
        Self {
            retry_after_secs: e.retry_after_secs,
            param: e.field,
            ..Self::new(e.status, e.code, e.message)
        }
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body())).into_response();
        if let Some(secs) = self.retry_after_secs
            && let Ok(v) = HeaderValue::from_str(&secs.to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
        // OpenAI's SDKs retry 408, 409, 429 and 5xx unless told not to: a diverging history,
        // another agent's session, a missing provider or a spent cost limit stay as they are.
        if self.status == StatusCode::CONFLICT || self.code == "cost_limit_reached" {
            response
                .headers_mut()
                .insert("x-should-retry", HeaderValue::from_static("false"));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// Off unless `[gateway.openai] enabled` (404 naming the key); then a paired bearer token.
async fn gate(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    if !state.host().snapshot().gateway.openai.enabled {
        return OpenAiError::new(
            StatusCode::NOT_FOUND,
            "openai_endpoint_disabled",
            "the OpenAI-compatible endpoint is off: set [gateway.openai] enabled = true in config.toml (`warren config set gateway.openai.enabled true`), then reload",
        )
        .into_response();
    }
    match state.authenticate(req.headers()) {
        Some(token_hash) => {
            req.extensions_mut().insert(Caller { token_hash });
            next.run(req).await
        }
        None => OpenAiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_api_key",
            "a valid Warren bearer token is required as the API key (Authorization: Bearer wrn_...); pair a device with `warren pair`",
        )
        .into_response(),
    }
}

/// 408 in OpenAI's shape when the response head is not ready within `limit`.
async fn time_limit(State(limit): State<Duration>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(response) => response,
        Err(_) => OpenAiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            format!("{path}: no response within {limit:?}"),
        )
        .into_response(),
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn model_json(alias: &AgentAlias, created: u64) -> Value {
    json!({"id": alias, "object": "model", "created": created, "owned_by": "warren"})
}

fn generation_created(state: &AppState) -> u64 {
    state
        .0
        .started_at
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

async fn list_models(State(state): State<AppState>) -> Json<Value> {
    let created = generation_created(&state);
    let data: Vec<Value> = state
        .host()
        .snapshot()
        .agents()
        .map(|(alias, _)| model_json(&alias, created))
        .collect();
    Json(json!({"object": "list", "data": data}))
}

async fn get_model(
    State(state): State<AppState>,
    Path(model): Path<String>,
) -> Result<Json<Value>, OpenAiError> {
    let alias = agent_of_model(&state, &model)?;
    Ok(Json(model_json(&alias, generation_created(&state))))
}

/// The agent a model id names (404 `model_not_found` otherwise).
fn agent_of_model(state: &AppState, model: &str) -> Result<AgentAlias, OpenAiError> {
    AgentAlias::new(model)
        .ok()
        .filter(|alias| state.host().snapshot().agent(alias).is_some())
        .ok_or_else(|| OpenAiError {
            param: Some("model".into()),
            ..OpenAiError::new(
                StatusCode::NOT_FOUND,
                "model_not_found",
                format!(
                    "the model '{model}' does not exist: a model is an agent alias of the running generation (GET /v1/models)"
                ),
            )
        })
}
