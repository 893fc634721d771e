//! A request as a turn: its agent (the model), its session (the `X-Warren-Session` header, else
//! one per token and `user`) and its input (the last user message), with the earlier messages
//! checked against the session's stored conversation ([`super::history`]). Shared by
//! `/v1/chat/completions` and `/v1/responses`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use sha2::{Digest, Sha256};
use warren_core::{AgentAlias, Role, SessionKey};
use warren_runtime::{CancelToken, Channel, TurnEvents, TurnRequest};
use warren_store::sessions::Page;

use super::history::{InMessage, Visible, check_history, conversation};
use super::{MAX_USER, OpenAiError, SESSION_HEADER, agent_of_model};
use crate::routes::Caller;
use crate::state::AppState;

/// The body of a request; one over the limit (413) or unreadable answers in OpenAI's shape.
pub(super) fn read_body(
    route: &str,
    body: Result<Bytes, BytesRejection>,
) -> Result<Bytes, OpenAiError> {
    body.map_err(|e| {
        OpenAiError::new(
            e.status(),
            "invalid_body",
            format!("{route}: {}", e.body_text()),
        )
    })
}

/// Client tools are refused: the agent's tools are Warren's (issue 27 §2).
pub(super) fn refuse_client_tools(
    tools_sent: bool,
    tool_choice: Option<&serde_json::Value>,
) -> Result<(), OpenAiError> {
    if tools_sent {
        return Err(OpenAiError::bad(
            "tools",
            "client_tools_unsupported",
            "client-side tools are not supported: the agent's tools are Warren's and run inside Warren (omit `tools`)",
        ));
    }
    if let Some(choice) = tool_choice
        && !(choice.is_null() || choice == "none" || choice == "auto")
    {
        return Err(OpenAiError::bad(
            "tool_choice",
            "client_tools_unsupported",
            "tool_choice can only be \"none\" or \"auto\": the agent's tools are Warren's",
        ));
    }
    Ok(())
}

/// A request placed: the agent, the session and the turn's input.
pub(super) struct Placed {
    pub alias: AgentAlias,
    pub session: SessionKey,
    pub input: String,
}

impl Placed {
    /// The request for the runtime's door (the one way every entry point runs a turn).
    pub fn turn(&self, state: &AppState, events: TurnEvents) -> TurnRequest {
        TurnRequest {
            agent: self.alias.clone(),
            session: Some(self.session.clone()),
            channel: Channel::Gateway,
            input: self.input.clone(),
            approver: Arc::clone(state.host().approvals()) as _,
            cancel: CancelToken::new(),
            events,
        }
    }
}

/// What a request asks: its agent (`model`), its messages (named `field` in errors:
/// `messages`, `input`) and its `user`.
pub(super) struct Ask<'a> {
    pub route: &'static str,
    pub model: &'a str,
    pub field: &'static str,
    pub messages: &'a [InMessage],
    pub user: Option<&'a str>,
}

/// Resolves the model, reads the messages, picks the session and checks the earlier messages
/// against its stored conversation (409 `history_mismatch` naming the first differing index).
pub(super) async fn place(
    state: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    ask: Ask<'_>,
) -> Result<Placed, OpenAiError> {
    let Ask {
        route,
        model,
        field,
        messages,
        user,
    } = ask;
    let alias = agent_of_model(state, model)?;
    let (earlier, input) = conversation(field, messages)?;
    let session = session_of(headers, caller, user)?;
    if let Some(stored) = stored_conversation(route, state, &session, &alias).await? {
        check_history(&earlier, &stored).map_err(|d| OpenAiError {
            param: Some(format!("{field}[{}]", d.index)),
            ..OpenAiError::new(
                StatusCode::CONFLICT,
                "history_mismatch",
                format!(
                    "{route}: {field}[{}] does not match session '{session}': {}; send only the new user message, the conversation exactly as answered, or use another session (header {SESSION_HEADER} or another `user`)",
                    d.index, d.reason
                ),
            )
        })?;
    }
    Ok(Placed {
        alias,
        session,
        input,
    })
}

/// `prefix` and 24 random hex digits (`chatcmpl-...`, `resp_...`).
pub(super) fn random_id(prefix: &str) -> String {
    let mut buf = [0u8; 12];
    let _ = getrandom::fill(&mut buf);
    format!("{prefix}{}", warren_core::hex::encode(&buf))
}

/// Names the session in the response's `X-Warren-Session` header.
pub(super) fn with_session(mut response: Response, key: &SessionKey) -> Response {
    if let Ok(v) = HeaderValue::from_str(key.as_str()) {
        response.headers_mut().insert(SESSION_HEADER, v);
    }
    response
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

/// The stored conversation of `key` (user messages and final replies), or `None` when the
/// session belongs to another agent (the door refuses it).
async fn stored_conversation(
    route: &str,
    state: &AppState,
    key: &SessionKey,
    alias: &AgentAlias,
) -> Result<Option<Vec<Visible>>, OpenAiError> {
    let unavailable = |e: String| {
        OpenAiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "sessions_unavailable",
            format!("{route}: {e}"),
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
