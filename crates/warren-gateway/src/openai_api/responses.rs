//! `POST /v1/responses`, kept small: `input` (a string, or message items whose content is a
//! string or text parts) runs as one turn exactly like a chat completion (same session and
//! history rules) and answers one `response` object with the reply as `output_text`. Not
//! served: `stream: true` (use `/v1/chat/completions`), client tools, non-message items.
//! `previous_response_id` is not needed: the session keeps the conversation.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{Value, json};

use super::history::InMessage;
use super::retry::{self, Recent};
use super::threads::Threads;
use super::turn::{
    Ask, output_cap, place, random_id, read_body, refuse_client_tools, with_session,
};
use super::{OpenAiError, unix_now};
use crate::auth::Caller;
use crate::state::AppState;

const ROUTE: &str = "POST /v1/responses";

#[derive(Deserialize)]
struct ResponsesRequest {
    model: String,
    input: Value,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    tools: Option<Vec<Value>>,
    #[serde(default)]
    tool_choice: Option<Value>,
    /// Passed to the provider for this turn.
    #[serde(default)]
    max_output_tokens: Option<u32>,
}

/// `input` as messages: a string is one user message; an array holds message items.
fn messages_of(input: &Value) -> Result<Vec<InMessage>, OpenAiError> {
    let message = |role: &str, content: Value| InMessage {
        role: role.to_string(),
        content: Some(content),
        tool_calls: None,
    };
    match input {
        Value::String(s) => Ok(vec![message("user", Value::String(s.clone()))]),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let is_message = item["type"].is_null() || item["type"] == "message";
                match (is_message, item["role"].as_str()) {
                    (true, Some(role)) => Ok(message(role, item["content"].clone())),
                    _ => Err(OpenAiError::bad(
                        format!("input[{i}]"),
                        "unsupported_input_item",
                        "only message items ({\"role\", \"content\"}) are supported; tool items are not (the agent's tools are Warren's)",
                    )),
                }
            })
            .collect(),
        _ => Err(OpenAiError::bad(
            "input",
            "invalid_input",
            "input must be a string or an array of message items",
        )),
    }
}

pub(super) async fn responses(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Extension(recent): Extension<Arc<Recent>>,
    Extension(threads): Extension<Arc<Threads>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, OpenAiError> {
    let body = read_body(ROUTE, body)?;
    let request: ResponsesRequest = crate::json::parse(ROUTE, &body).map_err(OpenAiError::from)?;
    refuse_client_tools(
        request.tools.as_ref().is_some_and(|t| !t.is_empty()),
        request.tool_choice.as_ref(),
    )?;
    if request.stream == Some(true) {
        return Err(OpenAiError::bad(
            "stream",
            "streaming_unsupported",
            "POST /v1/responses does not stream; use POST /v1/chat/completions with stream: true",
        ));
    }
    let messages = messages_of(&request.input)?;
    let ask = Ask {
        route: ROUTE,
        model: &request.model,
        field: "input",
        messages: &messages,
        user: request.user.as_deref(),
    };
    let mut placed = place(&state, &recent, &threads, &caller, &headers, ask).await?;
    placed.max_output_tokens = output_cap("max_output_tokens", request.max_output_tokens)?;
    let created = unix_now();
    let pending = placed.answer(&state, &recent, Arc::new(|_| {})).await?;
    let outcome = retry::wait(pending).await?;
    let (i, o) = (outcome.input_tokens, outcome.output_tokens);
    let body = json!({
        "id": random_id("resp_"),
        "object": "response",
        "created_at": created,
        "status": "completed",
        "model": placed.alias,
        "output": [{
            "type": "message",
            "id": random_id("msg_"),
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": outcome.reply, "annotations": []}],
        }],
        "usage": {
            "input_tokens": i,
            "output_tokens": o,
            "total_tokens": i + o,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
        "error": null,
        "incomplete_details": null,
        "instructions": null,
        "metadata": {},
        "parallel_tool_calls": false,
        "temperature": null,
        "top_p": null,
        "tool_choice": "none",
        "tools": [],
    });
    Ok(with_session(Json(body).into_response(), &placed.session))
}
