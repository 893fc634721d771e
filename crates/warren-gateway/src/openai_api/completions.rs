//! `POST /v1/chat/completions`: one turn through the runtime's door, answered as a
//! `chat.completion` or streamed as `chat.completion.chunk` SSE events ending in `data: [DONE]`
//! (a usage chunk last with `stream_options.include_usage`); a call waiting for approval is a
//! content chunk naming the approval id.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use warren_runtime::{TurnEvent, TurnEvents};

use super::history::InMessage;
use super::retry::{self, Answer, Recent};
use super::threads::Threads;
use super::turn::{
    Ask, output_cap, place, random_id, read_body, refuse_client_tools, with_session,
};
use super::{OpenAiError, unix_now};
use crate::auth::Caller;
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
    /// Passed to the provider for this turn (`max_completion_tokens` wins).
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    max_completion_tokens: Option<u32>,
}

#[derive(Deserialize, Default)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

const ROUTE: &str = "POST /v1/chat/completions";

fn usage_json(answer: &Answer) -> Value {
    let (i, o) = (answer.input_tokens, answer.output_tokens);
    json!({"prompt_tokens": i, "completion_tokens": o, "total_tokens": i + o})
}

pub(super) async fn chat_completions(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Extension(recent): Extension<Arc<Recent>>,
    Extension(threads): Extension<Arc<Threads>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, OpenAiError> {
    let body = read_body(ROUTE, body)?;
    let request: CompletionRequest = crate::json::parse(ROUTE, &body).map_err(OpenAiError::from)?;
    let tools_sent = request.tools.as_ref().is_some_and(|t| !t.is_empty())
        || request.functions.as_ref().is_some_and(|f| !f.is_empty());
    refuse_client_tools(tools_sent, request.tool_choice.as_ref())?;
    if request.n.is_some_and(|n| n != 1) {
        return Err(OpenAiError::bad(
            "n",
            "invalid_n",
            "only n = 1 is supported",
        ));
    }
    let ask = Ask {
        route: ROUTE,
        model: &request.model,
        field: "messages",
        messages: &request.messages,
        user: request.user.as_deref(),
    };
    let cap = request.max_completion_tokens.or(request.max_tokens);
    let param = if request.max_completion_tokens.is_some() {
        "max_completion_tokens"
    } else {
        "max_tokens"
    };
    let mut placed = place(&state, &recent, &threads, &caller, &headers, ask).await?;
    placed.max_output_tokens = output_cap(param, cap)?;
    let session = placed.session.clone();
    let stream = request.stream.unwrap_or(false);
    let include_usage = request
        .stream_options
        .and_then(|o| o.include_usage)
        .unwrap_or(false);
    let id = random_id("chatcmpl-");
    let created = unix_now();
    let model = placed.alias.to_string();

    if !stream {
        let pending = placed.answer(&state, &recent, Arc::new(|_| {})).await?;
        let outcome = retry::wait(pending).await?;
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
    // The text the client is shown (every round's text and approval notices): a client holding
    // many conversations sends it back as the assistant message, so it is remembered too.
    let sent_text = Arc::new(std::sync::Mutex::new(String::new()));
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
            sent_text
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_str(&text);
            let _ = sink.send(chunk(json!({"content": text}), None));
        })
    };
    // Refusals before the turn starts (409, 429, ...) are the response's status.
    let pending = placed.answer(&state, &recent, events).await?;
    let thread = placed.thread.clone();
    let session_key = session.clone();
    let _ = tx.send(chunk(json!({"role": "assistant", "content": ""}), None));
    // The turn runs to its end even if the client goes away (on its own task: Recent::track).
    tokio::spawn(async move {
        match retry::wait(pending).await {
            Ok(outcome) => {
                let shown =
                    std::mem::take(&mut *sent_text.lock().unwrap_or_else(|e| e.into_inner()));
                if shown.is_empty() && !outcome.reply.is_empty() {
                    let _ = tx.send(chunk(json!({"content": outcome.reply}), None));
                } else if let Some(thread) = &thread
                    && shown.trim() != outcome.reply.trim()
                {
                    thread.remember(&session_key, &shown);
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
            Err(err) => {
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
