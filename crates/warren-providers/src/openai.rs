//! The OpenAI-compatible chat-completions provider (OpenAI, OpenRouter, Ollama's `/v1`, vLLM,
//! llama.cpp server): `POST <base_url>/chat/completions` with native tools, SSE streaming
//! (`stream_options.include_usage`), tool-call deltas assembled by index, and
//! `parallel_tool_calls: false` when the turn asks for single-tool rounds (LOOP-2).
//!
//! Transport: `ureq` (blocking, rustls + ring) on the blocking pool; the stream is read line
//! by line and the cancel flag is checked between events.
//!
//! Streaming (`providers.<name>.stream`, issue 16 §3): an answer with no text and no tool call
//! is asked again once without streaming (llama.cpp's server answers a streamed request that
//! carries tools with an empty completion under tool-capable chat formats); still empty, the
//! call fails with [`ProviderError::EmptyAnswer`] naming the provider. With `"auto"`, a tool
//! round that only the unstreamed retry answered makes this provider send its later tool
//! rounds unstreamed.

use std::io::BufReader;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use warren_config::schema::StreamMode;
use warren_core::{ChatMessage, Role, ToolCall, Usage};

use crate::error::ProviderError;
use crate::http::{Wire, parse_arguments};
use crate::{BoxFuture, Capabilities, ChatRequest, ChatResponse, EventSink, Provider, StreamEvent};
use warren_core::sse::SseReader;

/// Largest non-streamed response body read.
const MAX_BODY: u64 = 32 * 1024 * 1024;

/// An OpenAI-compatible endpoint.
#[derive(Clone)]
pub struct OpenAiProvider {
    wire: Wire,
    base_url: String,
    single_tool_control: bool,
    stream: StreamMode,
    /// `stream = "auto"` learnt that this server mishandles streamed tool rounds (shared by
    /// the clones each call makes).
    unstreamed_tools: Arc<AtomicBool>,
    /// `providers.<name>.max_output_tokens` (issue 37 §3).
    max_output_tokens: u32,
}

impl std::fmt::Debug for OpenAiProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiProvider")
            .field("name", &self.wire.name)
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

/// The name of the output cap at `base_url`: `max_completion_tokens` on OpenAI's own API (its
/// reasoning models refuse `max_tokens`), `max_tokens` on compatible servers (llama.cpp,
/// Ollama, vLLM), which may not know the newer name.
pub fn cap_field(base_url: &str) -> &'static str {
    if base_url.contains("://api.openai.com") {
        "max_completion_tokens"
    } else {
        "max_tokens"
    }
}

impl OpenAiProvider {
    /// `base_url` like `https://api.openai.com/v1` (`/chat/completions` is appended).
    pub fn new(
        name: impl Into<String>,
        base_url: impl Into<String>,
        api_key: Option<String>,
        timeout: Duration,
    ) -> Self {
        Self {
            wire: Wire::new(name.into(), timeout, api_key),
            base_url: base_url.into().trim_end_matches('/').to_string(),
            single_tool_control: true,
            stream: StreamMode::Auto,
            unstreamed_tools: Arc::new(AtomicBool::new(false)),
            max_output_tokens: warren_config::schema::DEFAULT_MAX_OUTPUT_TOKENS,
        }
    }

    /// Sets `providers.<name>.max_output_tokens` (issue 37 §3; at least 1).
    pub fn with_max_output_tokens(mut self, max: u32) -> Self {
        self.max_output_tokens = max.max(1);
        self
    }

    /// Sets `providers.<name>.stream` (issue 16 §3).
    pub fn with_stream(mut self, stream: StreamMode) -> Self {
        self.stream = stream;
        self
    }

    /// Declares whether this endpoint honours `parallel_tool_calls: false` (LOOP-4).
    pub fn with_single_tool_control(mut self, supported: bool) -> Self {
        self.single_tool_control = supported;
        self
    }

    fn url(&self) -> String {
        format!("{}/chat/completions", self.base_url)
    }

    /// The request body (public for the wire-format tests).
    pub fn body(request: &ChatRequest, stream: bool) -> Value {
        let messages: Vec<Value> = request.messages.iter().map(wire_message).collect();
        let mut body = json!({
            "model": request.model,
            "messages": messages,
            "stream": stream,
        });
        if stream {
            body["stream_options"] = json!({"include_usage": true});
        }
        if let Some(max) = request.max_tokens {
            body["max_tokens"] = json!(max);
        }
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters,
                    }})
                })
                .collect();
            body["tool_choice"] = json!("auto");
            if request.single_tool {
                body["parallel_tool_calls"] = json!(false);
            }
        }
        body
    }

    /// Whether `request` goes out streamed first.
    fn streams(&self, request: &ChatRequest) -> bool {
        match self.stream {
            StreamMode::On => true,
            StreamMode::Off => false,
            StreamMode::Auto => {
                request.tools.is_empty() || !self.unstreamed_tools.load(Ordering::Relaxed)
            }
        }
    }

    fn call_blocking(
        &self,
        request: &ChatRequest,
        events: &EventSink,
    ) -> Result<ChatResponse, ProviderError> {
        let streamed = self.streams(request);
        let first = self.exchange(request, events, streamed, false)?;
        if !is_empty(&first) {
            return Ok(first);
        }
        if !streamed {
            return Err(self.empty(""));
        }
        tracing::warn!(
            provider = %self.wire.name,
            tools = request.tools.len(),
            "the streamed answer was empty; asking again without streaming"
        );
        let mut again = self.exchange(request, events, false, true)?;
        again.usage.add(first.usage);
        if is_empty(&again) {
            return Err(self.empty(", streamed and again without streaming"));
        }
        if self.stream == StreamMode::Auto && !request.tools.is_empty() {
            // The server answers tool rounds only unstreamed: stop asking it for streams there.
            self.unstreamed_tools.store(true, Ordering::Relaxed);
            tracing::warn!(
                provider = %self.wire.name,
                "a streamed tool round came back empty but the unstreamed one did not: this provider's tool rounds are sent unstreamed from now on (stream = \"auto\")"
            );
        }
        Ok(again)
    }

    fn empty(&self, detail: &str) -> ProviderError {
        ProviderError::EmptyAnswer {
            provider: self.wire.name.clone(),
            detail: detail.to_string(),
        }
    }

    /// One request, streamed or not, on a `fresh` connection or a pooled one.
    fn exchange(
        &self,
        request: &ChatRequest,
        events: &EventSink,
        stream: bool,
        fresh: bool,
    ) -> Result<ChatResponse, ProviderError> {
        let url = self.url();
        let mut body = Self::body(request, stream);
        // The provider's cap bounds every request (a smaller one of the request wins);
        // OpenAI's own API names it `max_completion_tokens` (its reasoning models refuse
        // `max_tokens`), compatible servers `max_tokens`.
        let cap = request
            .max_tokens
            .map_or(self.max_output_tokens, |m| m.min(self.max_output_tokens));
        if let Some(fields) = body.as_object_mut() {
            fields.remove("max_tokens");
            fields.insert(cap_field(&self.base_url).to_string(), json!(cap));
        }
        let body = body.to_string();
        let auth = self
            .wire
            .api_key
            .as_ref()
            .map(|key| format!("Bearer {key}"));
        let headers: Vec<(&str, &str)> =
            auth.iter().map(|a| ("Authorization", a.as_str())).collect();
        let (mut body, is_sse) = if fresh {
            self.wire.post_fresh(&url, &headers, &body)?
        } else {
            self.wire.post_stream(&url, &headers, &body)?
        };
        if !is_sse {
            let text = body
                .with_config()
                .limit(MAX_BODY)
                .read_to_string()
                .map_err(|e| self.wire.transport(&url, e))?;
            return self.parse_complete(&text, events);
        }
        let mut reader = SseReader::new(BufReader::new(body.into_reader()));
        let mut acc = StreamAccumulator::default();
        loop {
            if request.cancel.is_cancelled() {
                return Err(ProviderError::Cancelled);
            }
            let event = reader
                .next_event()
                .map_err(|e| self.wire.io_error(&url, e))?;
            let Some(data) = event else { break };
            if data.trim() == "[DONE]" {
                break;
            }
            let chunk: Value = serde_json::from_str(&data).map_err(|e| self.wire.protocol(e))?;
            if let Some(err) = chunk.get("error") {
                return Err(self.wire.protocol(format!("stream error: {err}")));
            }
            if let Some(delta) = acc.add(&chunk) {
                events(StreamEvent::TextDelta(delta));
            }
        }
        if request.cancel.is_cancelled() {
            return Err(ProviderError::Cancelled);
        }
        reader.finish(); // the connection goes back to the pool
        acc.finish().map_err(|m| self.wire.protocol(m))
    }

    fn parse_complete(
        &self,
        text: &str,
        events: &EventSink,
    ) -> Result<ChatResponse, ProviderError> {
        let v: Value = serde_json::from_str(text).map_err(|e| self.wire.protocol(e))?;
        let message = &v["choices"][0]["message"];
        let content = message["content"].as_str().unwrap_or_default().to_string();
        let mut calls = Vec::new();
        for c in message["tool_calls"].as_array().into_iter().flatten() {
            calls.push(ToolCall {
                id: c["id"].as_str().unwrap_or_default().to_string(),
                name: c["function"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                arguments: parse_arguments(c["function"]["arguments"].as_str().unwrap_or("{}"))
                    .map_err(|m| self.wire.protocol(m))?,
            });
        }
        if !content.is_empty() {
            events(StreamEvent::TextDelta(content.clone()));
        }
        Ok(ChatResponse {
            text: content,
            tool_calls: calls,
            usage: usage_of(&v["usage"]),
        })
    }
}

impl Provider for OpenAiProvider {
    fn name(&self) -> &str {
        &self.wire.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            native_tools: true,
            single_tool_control: self.single_tool_control,
            streaming: self.stream != StreamMode::Off,
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

fn wire_message(m: &ChatMessage) -> Value {
    match m.role {
        // `content` is a string, "" when the model said nothing: llama-cpp-python's server
        // refuses `null` (HTTP 500) and its chat templates read the key; OpenAI accepts "".
        Role::Assistant if !m.tool_calls.is_empty() => json!({
            "role": "assistant",
            "content": m.content,
            "tool_calls": m.tool_calls.iter().map(|c| json!({
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments.to_string()},
            })).collect::<Vec<_>>(),
        }),
        Role::Tool => json!({
            "role": "tool",
            "tool_call_id": m.tool_call_id.clone().unwrap_or_default(),
            "content": m.content,
        }),
        // Issue 38 §5: a photo sent to a channel, as an `image_url` part with a data URL.
        Role::User if !m.images.is_empty() => {
            let mut parts = vec![json!({"type": "text", "text": m.content})];
            parts.extend(
                m.images
                    .iter()
                    .map(|i| json!({"type": "image_url", "image_url": {"url": i.data_url()}})),
            );
            json!({"role": "user", "content": parts})
        }
        role => json!({"role": role.as_str(), "content": m.content}),
    }
}

/// No text and no tool call.
fn is_empty(response: &ChatResponse) -> bool {
    response.text.trim().is_empty() && response.tool_calls.is_empty()
}

fn usage_of(v: &Value) -> Usage {
    Usage {
        input_tokens: v["prompt_tokens"].as_u64().unwrap_or(0),
        output_tokens: v["completion_tokens"].as_u64().unwrap_or(0),
    }
}

/// Assembles a streamed response: text deltas, tool calls by `index`, the final usage chunk.
#[derive(Default)]
struct StreamAccumulator {
    text: String,
    calls: Vec<(u64, String, String, String)>,
    usage: Usage,
}

impl StreamAccumulator {
    /// Adds one chunk; returns its text delta, if any.
    fn add(&mut self, chunk: &Value) -> Option<String> {
        if chunk["usage"].is_object() {
            self.usage = usage_of(&chunk["usage"]);
        }
        let delta = &chunk["choices"][0]["delta"];
        for tc in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = tc["index"].as_u64().unwrap_or(self.calls.len() as u64);
            let pos = match self.calls.iter().position(|c| c.0 == index) {
                Some(p) => p,
                None => {
                    self.calls
                        .push((index, String::new(), String::new(), String::new()));
                    self.calls.len() - 1
                }
            };
            let entry = &mut self.calls[pos];
            if let Some(id) = tc["id"].as_str() {
                entry.1.push_str(id);
            }
            if let Some(name) = tc["function"]["name"].as_str() {
                entry.2.push_str(name);
            }
            if let Some(args) = tc["function"]["arguments"].as_str() {
                entry.3.push_str(args);
            }
        }
        match delta["content"].as_str() {
            Some(t) if !t.is_empty() => {
                self.text.push_str(t);
                Some(t.to_string())
            }
            _ => None,
        }
    }

    fn finish(self) -> Result<ChatResponse, crate::error::ToolCallError> {
        let mut tool_calls = Vec::with_capacity(self.calls.len());
        for (index, id, name, args) in self.calls {
            if name.is_empty() {
                return Err(crate::error::ToolCallError::UnnamedCall { index });
            }
            let id = if id.is_empty() {
                format!("call_{index}")
            } else {
                id
            };
            tool_calls.push(ToolCall {
                id,
                name,
                arguments: parse_arguments(&args)?,
            });
        }
        Ok(ChatResponse {
            text: self.text,
            tool_calls,
            usage: self.usage,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_core::ToolDefinition;

    fn request(single: bool) -> ChatRequest {
        ChatRequest {
            model: "m".into(),
            messages: vec![ChatMessage::user("hi")],
            tools: Arc::new(vec![ToolDefinition {
                name: "file_read".into(),
                description: "read".into(),
                parameters: json!({"type": "object"}),
            }]),
            single_tool: single,
            ..ChatRequest::default()
        }
    }

    #[test]
    fn single_tool_rounds_send_parallel_tool_calls_false_loop2() {
        assert_eq!(
            OpenAiProvider::body(&request(true), true)["parallel_tool_calls"],
            json!(false)
        );
        assert!(
            OpenAiProvider::body(&request(false), true)
                .get("parallel_tool_calls")
                .is_none()
        );
    }

    #[test]
    fn a_user_image_is_an_image_url_part_issue38() {
        let mut req = request(false);
        req.messages[0].images.push(warren_core::Image {
            media_type: "image/png".into(),
            base64: "iVBO".into(),
        });
        assert_eq!(
            OpenAiProvider::body(&req, false)["messages"][0]["content"],
            json!([{"type": "text", "text": "hi"},
                   {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}])
        );
        assert_eq!(
            OpenAiProvider::body(&request(false), false)["messages"][0]["content"],
            json!("hi"),
            "text-only messages keep the plain string"
        );
    }

    #[test]
    fn tool_call_deltas_are_assembled_by_index() {
        let mut acc = StreamAccumulator::default();
        let chunks = [
            json!({"choices":[{"delta":{"content":"Let me "}}]}),
            json!({"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c0","function":{"name":"file_read","arguments":"{\"pa"}}]}}]}),
            json!({"choices":[{"delta":{"tool_calls":[{"index":1,"id":"c1","function":{"name":"shell","arguments":""}}]}}]}),
            json!({"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"th\":\"a\"}"}}]}}]}),
            json!({"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\"command\":\"ls\"}"}}]}}]}),
            json!({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":7}}),
        ];
        for c in &chunks {
            acc.add(c);
        }
        let r = acc.finish().unwrap_or_default();
        assert_eq!(r.text, "Let me ");
        assert_eq!(
            r.usage,
            Usage {
                input_tokens: 12,
                output_tokens: 7
            }
        );
        assert_eq!(
            r.tool_calls,
            vec![
                ToolCall {
                    id: "c0".into(),
                    name: "file_read".into(),
                    arguments: json!({"path":"a"})
                },
                ToolCall {
                    id: "c1".into(),
                    name: "shell".into(),
                    arguments: json!({"command":"ls"})
                },
            ]
        );
    }

    #[test]
    fn the_output_cap_is_named_for_the_server_issue37() {
        assert_eq!(
            cap_field("https://api.openai.com/v1"),
            "max_completion_tokens"
        );
        assert_eq!(cap_field("http://127.0.0.1:8080/v1"), "max_tokens");
        assert_eq!(cap_field("http://localhost:11434/v1"), "max_tokens");
    }
}
