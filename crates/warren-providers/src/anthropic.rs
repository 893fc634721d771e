//! The Anthropic Messages provider: `POST <base_url>/v1/messages` with `x-api-key` and
//! `anthropic-version`, native `tool_use` / `tool_result` blocks, SSE streaming
//! (`message_start`, `content_block_start/delta/stop`, `message_delta`, `message_stop`) and
//! `tool_choice: {type: "auto", disable_parallel_tool_use: true}` for single-tool rounds
//! (LOOP-2).
//!
//! Mapping from Warren's messages: system messages join the top-level `system`; an assistant
//! message becomes `text` + `tool_use` blocks; consecutive tool results (and a user message
//! following them) merge into one `user` message of `tool_result` blocks, as the API requires
//! alternating roles.

use std::io::BufReader;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use warren_core::{ChatMessage, Role, ToolCall, Usage};

use crate::error::ProviderError;
use crate::http::{Wire, parse_arguments};
use crate::{BoxFuture, Capabilities, ChatRequest, ChatResponse, EventSink, Provider, StreamEvent};
use warren_core::sse::SseReader;

/// The API version header Warren speaks.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// `max_tokens` when the request sets none (the API requires one).
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// An Anthropic Messages endpoint.
#[derive(Clone)]
pub struct AnthropicProvider {
    wire: Wire,
    base_url: String,
    /// `providers.<name>.max_output_tokens` (issue 37 §3).
    max_output_tokens: u32,
}

impl std::fmt::Debug for AnthropicProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicProvider")
            .field("name", &self.wire.name)
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

impl AnthropicProvider {
    /// `base_url` like `https://api.anthropic.com` (`/v1/messages` is appended; a trailing
    /// `/v1` is accepted).
    pub fn new(
        name: impl Into<String>,
        base_url: impl Into<String>,
        api_key: Option<String>,
        timeout: Duration,
    ) -> Self {
        let base = base_url.into();
        let base = base.trim_end_matches('/');
        let base = base.strip_suffix("/v1").unwrap_or(base).to_string();
        Self {
            wire: Wire::new(name.into(), timeout, api_key),
            base_url: base,
            max_output_tokens: DEFAULT_MAX_TOKENS,
        }
    }

    /// Sets `providers.<name>.max_output_tokens` (issue 37 §3; at least 1).
    pub fn with_max_output_tokens(mut self, max: u32) -> Self {
        self.max_output_tokens = max.max(1);
        self
    }

    /// The request body (public for the wire-format tests).
    pub fn body(request: &ChatRequest) -> Value {
        let system: Vec<&str> = request
            .messages
            .iter()
            .filter(|m| m.role == Role::System)
            .map(|m| m.content.as_str())
            .collect();
        let mut messages: Vec<Value> = Vec::new();
        for m in request.messages.iter().filter(|m| m.role != Role::System) {
            let (role, blocks) = blocks_of(m);
            match messages.last_mut() {
                Some(last) if last["role"] == role => {
                    if let Some(arr) = last["content"].as_array_mut() {
                        arr.extend(blocks);
                    }
                }
                _ => messages.push(json!({"role": role, "content": blocks})),
            }
        }
        let mut body = json!({
            "model": request.model,
            "max_tokens": request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            "messages": messages,
            "stream": true,
        });
        if !system.is_empty() {
            body["system"] = json!(system.join("\n\n"));
        }
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
                .collect();
            let mut choice = json!({"type": "auto"});
            if request.single_tool {
                choice["disable_parallel_tool_use"] = json!(true);
            }
            body["tool_choice"] = choice;
        }
        body
    }

    fn call_blocking(
        &self,
        request: &ChatRequest,
        events: &EventSink,
    ) -> Result<ChatResponse, ProviderError> {
        let url = format!("{}/v1/messages", self.base_url);
        let mut body = Self::body(request);
        // The provider's cap bounds every request (a smaller one of the request wins).
        body["max_tokens"] = json!(
            request
                .max_tokens
                .map_or(self.max_output_tokens, |m| m.min(self.max_output_tokens))
        );
        let body = body.to_string();
        let mut headers = vec![("anthropic-version", ANTHROPIC_VERSION)];
        if let Some(key) = &self.wire.api_key {
            headers.push(("x-api-key", key.as_str()));
        }
        let (body, _) = self.wire.post_stream(&url, &headers, &body)?;
        let mut reader = SseReader::new(BufReader::new(body.into_reader()));
        let mut acc = Accumulator::default();
        loop {
            if request.cancel.is_cancelled() {
                return Err(ProviderError::Cancelled);
            }
            let Some(data) = reader
                .next_event()
                .map_err(|e| self.wire.io_error(&url, e))?
            else {
                break;
            };
            let event: Value = serde_json::from_str(&data).map_err(|e| self.wire.protocol(e))?;
            match event["type"].as_str() {
                Some("error") => {
                    let status = match event["error"]["type"].as_str() {
                        Some("overloaded_error") => 529,
                        Some("rate_limit_error") => 429,
                        _ => 500,
                    };
                    return Err(self.wire.status(status, &data));
                }
                Some("message_stop") => break,
                _ => {
                    if let Some(delta) = acc.add(&event) {
                        events(StreamEvent::TextDelta(delta));
                    }
                }
            }
        }
        if request.cancel.is_cancelled() {
            return Err(ProviderError::Cancelled);
        }
        acc.finish().map_err(|m| self.wire.protocol(m))
    }
}

/// The API role and content blocks of one message.
fn blocks_of(m: &ChatMessage) -> (&'static str, Vec<Value>) {
    match m.role {
        Role::Assistant => {
            let mut blocks = Vec::new();
            if !m.content.is_empty() {
                blocks.push(json!({"type": "text", "text": m.content}));
            }
            for c in &m.tool_calls {
                blocks.push(
                    json!({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}),
                );
            }
            if blocks.is_empty() {
                blocks.push(json!({"type": "text", "text": "(no text)"}));
            }
            ("assistant", blocks)
        }
        Role::Tool => (
            "user",
            vec![json!({"type": "tool_result",
                        "tool_use_id": m.tool_call_id.clone().unwrap_or_default(),
                        "content": m.content,
                        "is_error": m.content.starts_with("Error:")})],
        ),
        _ => {
            let mut blocks = vec![json!({"type": "text", "text": m.content})];
            // Issue 38 §5: a photo sent to a channel, as a base64 image block.
            blocks.extend(m.images.iter().map(|i| {
                json!({"type": "image", "source": {"type": "base64", "media_type": i.media_type, "data": i.base64}})
            }));
            ("user", blocks)
        }
    }
}

/// Assembles a streamed message: text blocks, `tool_use` blocks with their partial JSON, usage.
#[derive(Default)]
struct Accumulator {
    text: String,
    /// (block index, id, name, partial json)
    tools: Vec<(u64, String, String, String)>,
    usage: Usage,
}

impl Accumulator {
    fn add(&mut self, event: &Value) -> Option<String> {
        match event["type"].as_str()? {
            "message_start" => {
                let u = &event["message"]["usage"];
                self.usage.input_tokens = u["input_tokens"].as_u64().unwrap_or(0);
                self.usage.output_tokens = u["output_tokens"].as_u64().unwrap_or(0);
                None
            }
            "message_delta" => {
                if let Some(out) = event["usage"]["output_tokens"].as_u64() {
                    self.usage.output_tokens = out;
                }
                if let Some(input) = event["usage"]["input_tokens"].as_u64() {
                    self.usage.input_tokens = input;
                }
                None
            }
            "content_block_start" => {
                let block = &event["content_block"];
                let index = event["index"].as_u64().unwrap_or(0);
                match block["type"].as_str() {
                    Some("tool_use") => {
                        self.tools.push((
                            index,
                            block["id"].as_str().unwrap_or_default().to_string(),
                            block["name"].as_str().unwrap_or_default().to_string(),
                            String::new(),
                        ));
                        None
                    }
                    Some("text") => {
                        let t = block["text"].as_str().unwrap_or_default();
                        self.text.push_str(t);
                        (!t.is_empty()).then(|| t.to_string())
                    }
                    _ => None,
                }
            }
            "content_block_delta" => {
                let index = event["index"].as_u64().unwrap_or(0);
                let delta = &event["delta"];
                match delta["type"].as_str() {
                    Some("text_delta") => {
                        let t = delta["text"].as_str().unwrap_or_default();
                        self.text.push_str(t);
                        (!t.is_empty()).then(|| t.to_string())
                    }
                    Some("input_json_delta") => {
                        if let Some(entry) = self.tools.iter_mut().find(|e| e.0 == index) {
                            entry
                                .3
                                .push_str(delta["partial_json"].as_str().unwrap_or_default());
                        }
                        None
                    }
                    _ => None,
                }
            }
            _ => None,
        }
    }

    fn finish(self) -> Result<ChatResponse, crate::error::ToolCallError> {
        let mut tool_calls = Vec::with_capacity(self.tools.len());
        for (index, id, name, json) in self.tools {
            if name.is_empty() {
                return Err(crate::error::ToolCallError::UnnamedBlock { index });
            }
            tool_calls.push(ToolCall {
                id: if id.is_empty() {
                    format!("toolu_{index}")
                } else {
                    id
                },
                name,
                arguments: parse_arguments(&json)?,
            });
        }
        Ok(ChatResponse {
            text: self.text,
            tool_calls,
            usage: self.usage,
        })
    }
}

impl Provider for AnthropicProvider {
    fn name(&self) -> &str {
        &self.wire.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            native_tools: true,
            single_tool_control: true,
            streaming: true,
        }
    }

    fn chat(
        &self,
        request: Arc<ChatRequest>,
        events: EventSink,
    ) -> BoxFuture<'_, Result<ChatResponse, ProviderError>> {
        let this = self.clone();
        Box::pin(async move {
            let name = this.wire.name.clone();
            tokio::task::spawn_blocking(move || this.call_blocking(&request, &events))
                .await
                .unwrap_or_else(|e| {
                    Err(ProviderError::Protocol {
                        provider: name,
                        message: format!("the request thread failed: {e}"),
                    })
                })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_core::ToolDefinition;

    #[test]
    fn tool_exchange_maps_to_alternating_blocks_and_single_tool_sets_the_flag() {
        let call = ToolCall {
            id: "t1".into(),
            name: "file_read".into(),
            arguments: json!({"path": "a"}),
        };
        let req = ChatRequest {
            model: "claude".into(),
            messages: vec![
                ChatMessage::system("sys"),
                ChatMessage::user("hi"),
                ChatMessage::assistant_calls("Reading.", vec![call.clone()]),
                ChatMessage::tool_result(&call, "content"),
                ChatMessage::system("summarise"),
            ],
            tools: Arc::new(vec![ToolDefinition {
                name: "file_read".into(),
                description: "d".into(),
                parameters: json!({"type": "object"}),
            }]),
            single_tool: true,
            ..ChatRequest::default()
        };
        let body = AnthropicProvider::body(&req);
        assert_eq!(body["system"], json!("sys\n\nsummarise"));
        assert_eq!(
            body["tool_choice"],
            json!({"type": "auto", "disable_parallel_tool_use": true})
        );
        assert_eq!(body["messages"][1]["content"][1]["type"], json!("tool_use"));
        assert_eq!(body["messages"][2]["role"], json!("user"));
        assert_eq!(
            body["messages"][2]["content"][0]["tool_use_id"],
            json!("t1")
        );
        assert_eq!(body["tools"][0]["input_schema"], json!({"type": "object"}));
    }

    #[test]
    fn a_user_image_is_a_base64_image_block_issue38() {
        let mut user = ChatMessage::user("what is this?");
        user.images.push(warren_core::Image {
            media_type: "image/jpeg".into(),
            base64: "AAEC".into(),
        });
        let req = ChatRequest {
            model: "claude".into(),
            messages: vec![user],
            ..ChatRequest::default()
        };
        let body = AnthropicProvider::body(&req);
        assert_eq!(
            body["messages"][0]["content"],
            json!([{"type": "text", "text": "what is this?"},
                   {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "AAEC"}}])
        );
    }
}
