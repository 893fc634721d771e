//! The OpenAI-compatible endpoint (issue 27): `GET /v1/models`, `GET /v1/models/{model}` and
//! `POST /v1/chat/completions` (JSON, or SSE chunks with `stream: true`), so any OpenAI client
//! (SDKs, Open WebUI, LibreChat) talks to Warren agents. Off unless `[gateway.openai] enabled`.
//!
//! - Auth: the paired bearer tokens of `/api/*`; errors in OpenAI's shape
//!   `{"error": {"message", "type", "param", "code"}}`.
//! - A model is an agent (id = alias). A completion is ONE turn through the runtime's door
//!   ([`warren_runtime::AgentHost::submit`], LOOP-1, SESS-1, SESS-2): the agent's own tools,
//!   approvals, memory, sandbox, cost limits and ledger apply; tools the client sends are
//!   refused (400), since the agent's tools are Warren's.
//! - Session: the `X-Warren-Session` header, else `oai-<hash of token and "user">`. The last
//!   message is the turn's input; the earlier ones must equal the session's stored
//!   conversation (user messages and final replies), so a client resending the whole
//!   conversation does not duplicate it; a client whose history diverges gets 409 naming the
//!   first differing index ([`check_history`]).
//!
//! These routes are not in [`crate::routes::ROUTES`]: their access check and error shape are
//! OpenAI's, so they carry their own table ([`OPENAI_ROUTES`]), registered by
//! [`crate::routes::router_with_limits`] and documented by [`crate::openapi::document`].

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use axum::{Extension, Json, Router};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use warren_core::{AgentAlias, Role, SessionKey};
use warren_runtime::{CancelToken, Channel, TurnEvent, TurnEvents, TurnOutcome, TurnRequest};
use warren_store::sessions::Page;

use crate::agents_api::turn_error;
use crate::error::ApiError;
use crate::routes::{Caller, TimeLimits};
use crate::state::AppState;

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
        summary: "OpenAI-compatible chat completion: one agent turn (stream: true = SSE chunks, data: [DONE]); session from X-Warren-Session or token + user; resent history is checked, not duplicated",
        turn: true,
        handler: || post(chat_completions),
    },
];

/// Adds [`OPENAI_ROUTES`] to `router`, each behind the bearer check and its time limit.
pub(crate) fn register(
    mut router: Router<AppState>,
    state: &AppState,
    limits: TimeLimits,
) -> Router<AppState> {
    for route in OPENAI_ROUTES {
        let limit = if route.turn {
            limits.chat
        } else {
            limits.request
        };
        let handler = (route.handler)()
            .route_layer(middleware::from_fn_with_state(state.clone(), gate))
            .route_layer(middleware::from_fn_with_state(limit, time_limit))
            .route_layer(DefaultBodyLimit::max(OPENAI_BODY_LIMIT));
        router = router.route(route.path, handler);
    }
    router
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

#[derive(Deserialize)]
struct CompletionRequest {
    model: String,
    messages: Vec<InMessage>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    tools: Option<Vec<Value>>,
    #[serde(default)]
    functions: Option<Vec<Value>>,
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    n: Option<u64>,
}

#[derive(Deserialize, Default)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

#[derive(Deserialize)]
struct InMessage {
    role: String,
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    tool_calls: Option<Vec<Value>>,
}

/// One visible message of a conversation: what a chat client shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Visible {
    pub role: Role,
    pub text: String,
}

/// Why a client's earlier messages do not match the stored conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    /// Index into the client's `messages` (system/developer messages counted).
    pub index: usize,
    pub reason: String,
}

/// Checks the client's earlier messages `client` (each with its index in `messages`) against
/// the session's stored conversation `stored`: they must equal its newest messages, so a
/// client may resend the whole conversation, only its newest message (Warren keeps the
/// history), or start a new conversation in a session that already holds one (it goes on
/// after it). A failed turn's unanswered user message at the end of `stored` is not counted
/// (the client retries it). An assistant message matches a stored reply when equal or ending
/// with it (a streaming client also shows tool-round text and approval notices before it).
pub fn check_history(client: &[(usize, Visible)], stored: &[Visible]) -> Result<(), Divergence> {
    let answered = stored
        .iter()
        .rposition(|m| m.role == Role::Assistant)
        .map_or(0, |i| i + 1);
    let stored = stored.get(..answered).unwrap_or_default();
    let Some(offset) = stored.len().checked_sub(client.len()) else {
        return Err(Divergence {
            index: client.first().map_or(0, |(i, _)| *i),
            reason: format!(
                "the client sent {} earlier messages but the session holds {} (a conversation Warren did not hold)",
                client.len(),
                stored.len()
            ),
        });
    };
    for (n, (index, message)) in client.iter().enumerate() {
        let kept = &stored[offset + n];
        let (a, b) = (message.text.trim(), kept.text.trim());
        let same = message.role == kept.role
            && (a == b || (message.role == Role::Assistant && !b.is_empty() && a.ends_with(b)));
        if !same {
            return Err(Divergence {
                index: *index,
                reason: format!(
                    "the client's {} message differs from the session's {} message {} (of {})",
                    role_name(message.role),
                    role_name(kept.role),
                    offset + n,
                    stored.len()
                ),
            });
        }
    }
    Ok(())
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

/// A message's text: a string, or an array of `{"type": "text", "text"}` parts.
fn text_of(index: usize, content: Option<&Value>) -> Result<String, OpenAiError> {
    let param = format!("messages[{index}].content");
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut texts = Vec::with_capacity(parts.len());
            for part in parts {
                match (part["type"].as_str(), part["text"].as_str()) {
                    (Some("text"), Some(t)) => texts.push(t),
                    _ => {
                        return Err(OpenAiError::bad(
                            param,
                            "unsupported_content",
                            "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported",
                        ));
                    }
                }
            }
            Ok(texts.join("\n"))
        }
        Some(_) => Err(OpenAiError::bad(
            param,
            "invalid_content",
            "content must be a string or an array of text parts",
        )),
    }
}

/// The conversation of a request: user and assistant messages with their indexes (system and
/// developer messages are skipped: the agent's system prompt is Warren's), the last of which
/// must be a user message (the turn's input).
fn conversation(messages: &[InMessage]) -> Result<(Vec<(usize, Visible)>, String), OpenAiError> {
    let mut out = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let role = match m.role.as_str() {
            "system" | "developer" => continue,
            "user" => Role::User,
            "assistant" if m.tool_calls.as_ref().is_none_or(Vec::is_empty) => Role::Assistant,
            "assistant" | "tool" | "function" => {
                return Err(OpenAiError::bad(
                    format!("messages[{i}]"),
                    "client_tools_unsupported",
                    "client-side tool calls are not supported: the agent's tools are Warren's and run inside Warren",
                ));
            }
            other => {
                return Err(OpenAiError::bad(
                    format!("messages[{i}].role"),
                    "invalid_role",
                    format!(
                        "unknown role '{other}' (expected system, developer, user or assistant)"
                    ),
                ));
            }
        };
        let text = text_of(i, m.content.as_ref())?;
        out.push((i, Visible { role, text }));
    }
    match out.pop() {
        Some((i, last)) if last.role == Role::User => {
            if last.text.trim().is_empty() || last.text.len() > MAX_INPUT {
                return Err(OpenAiError::bad(
                    format!("messages[{i}].content"),
                    "invalid_input",
                    format!(
                        "the last user message must be non-empty and at most {MAX_INPUT} bytes"
                    ),
                ));
            }
            Ok((out, last.text))
        }
        _ => Err(OpenAiError::bad(
            "messages",
            "last_message_not_user",
            "the last message must be a user message (the turn's input)",
        )),
    }
}

/// The session of a request: the `X-Warren-Session` header, else one per token and `user`.
fn session_of(
    headers: &HeaderMap,
    caller: &Caller,
    user: Option<&str>,
) -> Result<SessionKey, OpenAiError> {
    if let Some(value) = headers.get(SESSION_HEADER) {
        let value = value.to_str().unwrap_or_default();
        return SessionKey::new(value).map_err(|e| {
            OpenAiError::bad(
                SESSION_HEADER,
                "invalid_session",
                format!("header {SESSION_HEADER}: {e}"),
            )
        });
    }
    let user = user.unwrap_or_default();
    if user.chars().count() > MAX_USER {
        return Err(OpenAiError::bad(
            "user",
            "invalid_user",
            format!("at most {MAX_USER} characters"),
        ));
    }
    let mut hash = Sha256::new();
    hash.update(caller.token_hash.as_bytes());
    hash.update([0]);
    hash.update(user.as_bytes());
    let hex = warren_core::hex::encode(&hash.finalize());
    SessionKey::new(format!("oai-{}", hex.get(..24).unwrap_or(&hex))).map_err(|e| {
        OpenAiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            e.to_string(),
        )
    })
}

const ROUTE: &str = "POST /v1/chat/completions";

/// The stored conversation of `key` (user messages and final replies), or `None` when the
/// session belongs to another agent (the door refuses it).
async fn stored_conversation(
    state: &AppState,
    key: &SessionKey,
    alias: &AgentAlias,
) -> Result<Option<Vec<Visible>>, OpenAiError> {
    let unavailable = |e: String| {
        OpenAiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "sessions_unavailable",
            format!("{ROUTE}: {e}"),
        )
    };
    let sessions = state.host().chat_sessions().await.map_err(unavailable)?;
    let k = key.clone();
    let meta = sessions
        .run(move |b| b.meta(&k))
        .await
        .map_err(|e| unavailable(e.to_string()))?;
    match meta {
        None => return Ok(Some(Vec::new())),
        Some(m) if m.agent.as_ref().is_some_and(|a| a != alias) => return Ok(None),
        Some(_) => {}
    }
    let history = sessions
        .load(key.clone(), Page::All)
        .await
        .map_err(|e| unavailable(e.to_string()))?;
    Ok(Some(
        history
            .messages
            .iter()
            .map(warren_runtime::history::decode)
            .filter(|m| {
                m.role == Role::User || (m.role == Role::Assistant && m.tool_calls.is_empty())
            })
            .map(|m| Visible {
                role: m.role,
                text: m.content,
            })
            .collect(),
    ))
}

fn completion_id() -> String {
    let mut buf = [0u8; 12];
    let _ = getrandom::fill(&mut buf);
    format!("chatcmpl-{}", warren_core::hex::encode(&buf))
}

fn usage_json(outcome: &TurnOutcome) -> Value {
    let (i, o) = (outcome.usage.input_tokens, outcome.usage.output_tokens);
    json!({"prompt_tokens": i, "completion_tokens": o, "total_tokens": i + o})
}

fn with_session(mut response: Response, key: &SessionKey) -> Response {
    if let Ok(v) = HeaderValue::from_str(key.as_str()) {
        response.headers_mut().insert(SESSION_HEADER, v);
    }
    response
}

async fn chat_completions(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, OpenAiError> {
    let request: CompletionRequest =
        crate::error::parse_json(ROUTE, &body).map_err(OpenAiError::from)?;
    let tools_sent = request.tools.as_ref().is_some_and(|t| !t.is_empty())
        || request.functions.as_ref().is_some_and(|f| !f.is_empty());
    if tools_sent {
        return Err(OpenAiError::bad(
            "tools",
            "client_tools_unsupported",
            "client-side tools are not supported: the agent's tools are Warren's and run inside Warren (omit `tools`)",
        ));
    }
    if let Some(choice) = &request.tool_choice
        && !(choice.is_null() || choice == "none" || choice == "auto")
    {
        return Err(OpenAiError::bad(
            "tool_choice",
            "client_tools_unsupported",
            "tool_choice can only be \"none\" or \"auto\": the agent's tools are Warren's",
        ));
    }
    if request.n.is_some_and(|n| n != 1) {
        return Err(OpenAiError::bad(
            "n",
            "invalid_n",
            "only n = 1 is supported",
        ));
    }
    let alias = agent_of_model(&state, &request.model)?;
    let (earlier, input) = conversation(&request.messages)?;
    let session = session_of(&headers, &caller, request.user.as_deref())?;
    if let Some(stored) = stored_conversation(&state, &session, &alias).await? {
        check_history(&earlier, &stored).map_err(|d| OpenAiError {
            status: StatusCode::CONFLICT,
            param: Some(format!("messages[{}]", d.index)),
            ..OpenAiError::new(
                StatusCode::CONFLICT,
                "history_mismatch",
                format!(
                    "{ROUTE}: messages[{}] does not match session '{session}': {}; send only the new user message, the conversation exactly as answered, or use another session (header {SESSION_HEADER} or another `user`)",
                    d.index, d.reason
                ),
            )
        })?;
    }
    let host = Arc::clone(state.host());
    let stream = request.stream.unwrap_or(false);
    let include_usage = request
        .stream_options
        .and_then(|o| o.include_usage)
        .unwrap_or(false);
    let id = completion_id();
    let created = unix_now();
    let model = alias.to_string();
    let submit = |events: TurnEvents| TurnRequest {
        agent: alias.clone(),
        session: Some(session.clone()),
        channel: Channel::Gateway,
        input: input.clone(),
        approver: host.approvals().clone(),
        cancel: CancelToken::new(),
        events,
    };
    let fail = |e: &warren_runtime::TurnError| OpenAiError::from(turn_error(ROUTE, e));

    if !stream {
        let turn = host
            .submit(submit(Arc::new(|_| {})))
            .await
            .map_err(|e| fail(&e))?;
        let outcome = turn.finish().await.map_err(|e| fail(&e))?;
        let body = json!({
            "id": id,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "system_fingerprint": null,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": outcome.reply, "refusal": null},
                "logprobs": null,
                "finish_reason": "stop",
            }],
            "usage": usage_json(&outcome),
        });
        return Ok(with_session(Json(body).into_response(), &session));
    }

    let chunk = {
        let (id, model) = (id.clone(), model.clone());
        move |delta: Value, finish: Option<&str>| {
            let mut c = json!({
                "id": id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "system_fingerprint": null,
                "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
            });
            if include_usage {
                c["usage"] = Value::Null;
            }
            Event::default().data(c.to_string())
        }
    };
    let (tx, rx) = mpsc::unbounded_channel::<Event>();
    let sink = tx.clone();
    let sent_text = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let events: TurnEvents = {
        let (chunk, sent_text) = (chunk.clone(), Arc::clone(&sent_text));
        Arc::new(move |event| {
            let text = match event {
                TurnEvent::TextDelta(t) => t,
                TurnEvent::ApprovalPending {
                    call,
                    approval,
                    reason,
                    timeout_secs,
                } => format!(
                    "\n\n[warren] The call `{}` waits for approval ({reason}): approve or deny it with POST /api/approvals/{approval} {{\"approve\": true}} within {timeout_secs} s (no answer = denied). Approval id: {approval}\n\n",
                    call.name
                ),
                _ => return,
            };
            sent_text.store(true, std::sync::atomic::Ordering::Relaxed);
            let _ = sink.send(chunk(json!({"content": text}), None));
        })
    };
    // Refusals before the turn starts (409, 429, ...) are the response's status.
    let turn = host.submit(submit(events)).await.map_err(|e| fail(&e))?;
    let _ = tx.send(chunk(json!({"role": "assistant", "content": ""}), None));
    // The turn runs to its end even if the client goes away (the door runs it on its own task).
    tokio::spawn(async move {
        match turn.finish().await {
            Ok(outcome) => {
                if !sent_text.load(std::sync::atomic::Ordering::Relaxed)
                    && !outcome.reply.is_empty()
                {
                    let _ = tx.send(chunk(json!({"content": outcome.reply}), None));
                }
                let _ = tx.send(chunk(json!({}), Some("stop")));
                if include_usage {
                    let last = json!({
                        "id": id,
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": model,
                        "system_fingerprint": null,
                        "choices": [],
                        "usage": usage_json(&outcome),
                    });
                    let _ = tx.send(Event::default().data(last.to_string()));
                }
                let _ = tx.send(Event::default().data("[DONE]"));
            }
            Err(e) => {
                let err = OpenAiError::from(turn_error(ROUTE, &e));
                let _ = tx.send(Event::default().data(err.body().to_string()));
            }
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx))
    });
    let response = Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response();
    Ok(with_session(response, &session))
}

/// The OpenAPI path items of [`OPENAI_ROUTES`] (added to `GET /api/openapi.json`).
pub fn openapi_paths(paths: &mut Map<String, Value>) {
    let error = json!({"type": "object", "required": ["error"], "properties": {"error": {
        "type": "object",
        "required": ["message", "type", "code"],
        "properties": {
            "message": {"type": "string"},
            "type": {"type": "string"},
            "param": {"type": ["string", "null"]},
            "code": {"type": ["string", "null"]},
        },
    }}});
    let err = |description: &str| json!({"description": description, "content": {"application/json": {"schema": error}}});
    let model = json!({"type": "object", "required": ["id", "object", "created", "owned_by"], "properties": {
        "id": {"type": "string"}, "object": {"const": "model"},
        "created": {"type": "integer"}, "owned_by": {"type": "string"},
    }});
    let common = |mut r: Value| {
        r["401"] = err("missing, invalid or revoked bearer token");
        r["404"] = err("unknown model, or [gateway.openai] enabled = false");
        r["408"] = err("no response within the time limit");
        r["413"] = json!({"description": "body larger than 1 MiB"});
        r
    };
    let models = common(
        json!({"200": {"description": "OK", "content": {"application/json": {"schema": {
            "type": "object", "required": ["object", "data"],
            "properties": {"object": {"const": "list"}, "data": {"type": "array", "items": model}},
        }}}}}),
    );
    let one_model = common(
        json!({"200": {"description": "OK", "content": {"application/json": {"schema": model}}}}),
    );
    let mut completion = common(
        json!({"200": {"description": "OK (X-Warren-Session names the session)", "content": {
            "application/json": {"schema": {"type": "object", "required": ["id", "object", "created", "model", "choices", "usage"], "properties": {
                "id": {"type": "string"}, "object": {"const": "chat.completion"}, "created": {"type": "integer"},
                "model": {"type": "string"}, "choices": {"type": "array"}, "usage": {"type": "object"},
            }}},
            "text/event-stream": {"schema": {"type": "string"}},
        }}}),
    );
    completion["400"] =
        err("malformed request, client tools, or the last message is not a user message");
    completion["409"] = err(
        "the resent history differs from the session's, the session belongs to another agent, or the agent lacks a provider",
    );
    completion["429"] = err("the session's queue is full, or a cost limit was reached");
    completion["502"] = err("the agent's provider failed");
    completion["503"] =
        err("sessions or the agent are unavailable, or the turn was cancelled by a reload");
    let message = json!({"type": "object", "required": ["role"], "properties": {
        "role": {"enum": ["system", "developer", "user", "assistant"]},
        "content": {"type": ["string", "null"]},
    }});
    let request = json!({
        "type": "object",
        "required": ["model", "messages"],
        "properties": {
            "model": {"type": "string", "minLength": 1},
            "messages": {"type": "array", "minItems": 1, "items": message},
            "stream": {"type": ["boolean", "null"]},
            "stream_options": {"type": ["object", "null"], "properties": {"include_usage": {"type": ["boolean", "null"]}}},
            "user": {"type": ["string", "null"], "maxLength": MAX_USER},
        },
    });
    let security = json!([{"bearer": []}]);
    let summary = |path: &str| {
        OPENAI_ROUTES
            .iter()
            .find(|r| r.path == path)
            .map_or("", |r| r.summary)
    };
    paths.insert(
        "/v1/models".into(),
        json!({"get": {"summary": summary("/v1/models"), "operationId": "get_v1_models", "security": security, "responses": models}}),
    );
    paths.insert(
        "/v1/models/{model}".into(),
        json!({"get": {"summary": summary("/v1/models/{model}"), "operationId": "get_v1_models_model", "security": security,
            "parameters": [{"name": "model", "in": "path", "required": true, "schema": {"type": "string", "minLength": 1}, "example": "main"}],
            "responses": one_model}}),
    );
    paths.insert(
        "/v1/chat/completions".into(),
        json!({"post": {"summary": summary("/v1/chat/completions"), "operationId": "post_v1_chat_completions", "security": security,
            "parameters": [{"name": "X-Warren-Session", "in": "header", "required": false,
                            "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,128}$"}}],
            "requestBody": {"required": true, "content": {"application/json": {"schema": request,
                "example": {"model": "main", "messages": [{"role": "user", "content": "hello"}]}}}},
            "responses": completion}}),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(role: Role, text: &str) -> Visible {
        Visible {
            role,
            text: text.into(),
        }
    }

    fn indexed(messages: &[Visible]) -> Vec<(usize, Visible)> {
        messages.iter().cloned().enumerate().collect()
    }

    #[test]
    fn resent_history_matches_and_divergence_names_the_index() {
        let stored = vec![
            v(Role::User, "one"),
            v(Role::Assistant, "First."),
            v(Role::User, "two"),
            v(Role::Assistant, "Second."),
        ];
        // Only the new message, or the whole conversation as answered.
        assert_eq!(check_history(&[], &stored), Ok(()));
        assert_eq!(check_history(&indexed(&stored), &stored), Ok(()));
        // A streaming client that also showed a tool round's text before the reply.
        let mut streamed = stored.clone();
        streamed[1].text = "Let me look.First.".into();
        assert_eq!(check_history(&indexed(&streamed), &stored), Ok(()));
        // An edited earlier message.
        let mut edited = stored.clone();
        edited[2].text = "TWO".into();
        assert_eq!(
            check_history(&indexed(&edited), &stored).map_err(|d| d.index),
            Err(2)
        );
        // A new conversation in the same session goes on after the stored one.
        assert_eq!(check_history(&indexed(&stored[2..]), &stored), Ok(()));
        // A regenerated last answer (the client dropped it) does not line up.
        assert_eq!(
            check_history(&indexed(&stored[..3]), &stored).map_err(|d| d.index),
            Err(0)
        );
        // A conversation Warren never held.
        assert_eq!(
            check_history(&indexed(&stored), &stored[..2]).map_err(|d| d.index),
            Err(0)
        );
        // A failed turn's unanswered user message is retried, not counted.
        let mut failed = stored.clone();
        failed.push(v(Role::User, "three"));
        assert_eq!(check_history(&indexed(&stored), &failed), Ok(()));
    }

    #[test]
    fn system_messages_are_skipped_and_the_last_must_be_user() {
        let m = |role: &str, content: Value| InMessage {
            role: role.into(),
            content: Some(content),
            tool_calls: None,
        };
        let (earlier, input) = conversation(&[
            m("system", json!("be brief")),
            m("user", json!([{"type": "text", "text": "hi"}])),
            m("assistant", json!("hello")),
            m("user", json!("again")),
        ])
        .unwrap();
        assert_eq!(input, "again");
        assert_eq!(
            earlier,
            vec![(1, v(Role::User, "hi")), (2, v(Role::Assistant, "hello"))]
        );
        let err = conversation(&[m("user", json!("a")), m("assistant", json!("b"))]).unwrap_err();
        assert_eq!(err.code, "last_message_not_user");
        let err = conversation(&[m("tool", json!("r")), m("user", json!("a"))]).unwrap_err();
        assert_eq!(
            (err.status, err.code),
            (StatusCode::BAD_REQUEST, "client_tools_unsupported")
        );
    }
}
