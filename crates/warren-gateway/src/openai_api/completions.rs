//! `POST /v1/chat/completions`: one turn through the runtime's door, answered as a
//! `chat.completion` or streamed as `chat.completion.chunk` SSE events ending in `data: [DONE]`
//! (a usage chunk first with `stream_options.include_usage`); a call waiting for approval is a
//! content chunk naming the approval id.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use warren_core::{AgentAlias, Role, SessionKey};
use warren_runtime::{CancelToken, Channel, TurnEvent, TurnEvents, TurnOutcome, TurnRequest};
use warren_store::sessions::Page;

use super::history::{InMessage, Visible, check_history, conversation};
use super::{MAX_USER, OpenAiError, SESSION_HEADER, agent_of_model, unix_now};
use crate::agents_api::turn_error;
use crate::routes::Caller;
use crate::state::AppState;

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

pub(super) async fn chat_completions(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, OpenAiError> {
    // A body over the limit (413) or unreadable answers in OpenAI's shape too.
    let body = body.map_err(|e| {
        OpenAiError::new(
            e.status(),
            "invalid_body",
            format!("{ROUTE}: {}", e.body_text()),
        )
    })?;
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
