//! Local fake LLM servers speaking the real wire formats. OpenAI ([`FakeOpenAi::start`]):
//! `POST /v1/chat/completions`, SSE `data:` chunks, tool-call deltas split across chunks by
//! `index`, a final usage chunk (`stream_options.include_usage`) and `[DONE]`; errors with
//! OpenAI's `{"error": {...}}` body. Anthropic ([`FakeOpenAi::start_anthropic`]): `POST
//! /v1/messages`, `event:`/`data:` SSE with `message_start`, `content_block_start`,
//! `text_delta` and `input_json_delta` deltas, `message_delta` usage and `message_stop`;
//! errors with Anthropic's `{"type": "error", "error": {...}}` body. Every request is recorded
//! (headers and JSON body) so tests can assert what Warren sent.
//!
//! Replies are queued; when the queue is empty the server answers a plain text "ok". An OpenAI
//! request with `"stream": false` gets the same reply as one `chat.completion` JSON body.
//! [`FakeOpenAi::empty_tool_streams`] makes the server answer every streamed request that
//! carries tools with an empty completion, as llama.cpp's server does (issue 16 §3).
//! [`FakeOpenAi::provider_toml`] is the one `[providers.<name>]` table the suites point at it.

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use serde_json::{Value, json};

/// One scripted tool call of a fake reply.
#[derive(Debug, Clone)]
pub struct FakeCall {
    pub id: String,
    pub name: String,
    /// The arguments object (sent as a JSON string split over two deltas).
    pub arguments: Value,
}

impl FakeCall {
    pub fn new(id: &str, name: &str, arguments: Value) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments,
        }
    }
}

/// What the server answers to one request.
#[derive(Debug, Clone)]
pub enum FakeReply {
    /// A streamed completion.
    Chat {
        /// Text deltas, sent in order.
        text: Vec<String>,
        calls: Vec<FakeCall>,
        usage: (u64, u64),
        /// Pause between chunks (for mid-stream cancellation tests).
        chunk_delay: Duration,
    },
    /// An error status with an OpenAI error body.
    Status(u16, String),
    /// Accept the request and answer nothing for this long (timeouts).
    Hang(Duration),
    /// HTTP 429 with `Retry-After: <secs>`.
    RateLimited { retry_after_secs: u64 },
}

impl FakeReply {
    pub fn text(text: &str) -> Self {
        FakeReply::Chat {
            text: vec![text.to_string()],
            calls: Vec::new(),
            usage: (10, 5),
            chunk_delay: Duration::ZERO,
        }
    }

    pub fn calls(text: &str, calls: Vec<FakeCall>) -> Self {
        FakeReply::Chat {
            text: if text.is_empty() {
                Vec::new()
            } else {
                vec![text.to_string()]
            },
            calls,
            usage: (20, 10),
            chunk_delay: Duration::ZERO,
        }
    }

    pub fn with_usage(mut self, input: u64, output: u64) -> Self {
        if let FakeReply::Chat { usage, .. } = &mut self {
            *usage = (input, output);
        }
        self
    }
}

/// A recorded request.
#[derive(Debug, Clone)]
pub struct FakeRequest {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl FakeRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Dialect {
    #[default]
    OpenAi,
    Anthropic,
}

#[derive(Default)]
struct Shared {
    dialect: Dialect,
    replies: Mutex<VecDeque<FakeReply>>,
    /// Replies kept for the first request whose last message contains the needle (checked
    /// before the queue: concurrent turns, e.g. a background subagent and its parent).
    keyed: Mutex<Vec<(String, FakeReply)>>,
    requests: Mutex<Vec<FakeRequest>>,
    empty_tool_streams: AtomicBool,
}

/// The fake server; runs until the process exits (each test gets its own port).
pub struct FakeOpenAi {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl FakeOpenAi {
    /// An OpenAI chat-completions server.
    pub fn start() -> io::Result<Self> {
        Self::start_with(Dialect::OpenAi)
    }

    /// An Anthropic Messages server (`base_url` has no `/v1`).
    pub fn start_anthropic() -> io::Result<Self> {
        Self::start_with(Dialect::Anthropic)
    }

    fn start_with(dialect: Dialect) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            dialect,
            ..Shared::default()
        });
        let s = Arc::clone(&shared);
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let s = Arc::clone(&s);
                thread::spawn(move || {
                    let _ = serve(stream, &s);
                });
            }
        });
        Ok(Self { addr, shared })
    }

    /// The `base_url` to configure (`http://127.0.0.1:<port>/v1`).
    pub fn base_url(&self) -> String {
        match self.shared.dialect {
            Dialect::OpenAi => format!("http://{}/v1", self.addr),
            Dialect::Anthropic => format!("http://{}", self.addr),
        }
    }

    /// The `[providers.<name>]` table of a provider on this server: `kind` of the server's
    /// dialect, its `base_url`, `api_key`, and retries 1 ms apart instead of the default 500 ms
    /// so a test that provokes one does not wait it out. No trailing newline: it takes a line
    /// of its own in a config template, and lines right below it belong to the same table
    /// (`max_retries = 0`, so each pushed error answers one request).
    pub fn provider_toml(&self, name: &str, api_key: &str) -> String {
        let kind = match self.shared.dialect {
            Dialect::OpenAi => "openai",
            Dialect::Anthropic => "anthropic",
        };
        format!(
            "[providers.{name}]\nkind = \"{kind}\"\nbase_url = \"{}\"\napi_key = \"{api_key}\"\n\
             retry_backoff_ms = 1",
            self.base_url()
        )
    }

    pub fn push(&self, reply: FakeReply) {
        lock(&self.shared.replies).push_back(reply);
    }

    /// Answers the first request whose last message contains `needle` with `reply` (before
    /// the queue of [`FakeOpenAi::push`]).
    pub fn push_when(&self, needle: &str, reply: FakeReply) {
        lock(&self.shared.keyed).push((needle.to_string(), reply));
    }

    pub fn requests(&self) -> Vec<FakeRequest> {
        lock(&self.shared.requests).clone()
    }

    /// From now on, a streamed request that carries tools gets an empty completion (a
    /// `delta: {"content": ""}` chunk, `finish_reason: "stop"`, usage, `[DONE]`) and takes no
    /// queued reply, as llama.cpp's OpenAI-compatible server answers under a tool-capable chat
    /// format; unstreamed requests and requests without tools are answered as usual.
    pub fn empty_tool_streams(&self) {
        self.shared.empty_tool_streams.store(true, Ordering::SeqCst);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn serve(stream: TcpStream, shared: &Shared) -> io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
    let mut headers = Vec::new();
    let mut length = 0usize;
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            break;
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            let (k, v) = (k.trim().to_string(), v.trim().to_string());
            if k.eq_ignore_ascii_case("content-length") {
                length = v.parse().unwrap_or(0);
            }
            headers.push((k, v));
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let streamed = body["stream"].as_bool() != Some(false);
    let has_tools = body["tools"].as_array().is_some_and(|t| !t.is_empty());
    let last = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .map(Value::to_string)
        .unwrap_or_default();
    lock(&shared.requests).push(FakeRequest {
        path,
        headers,
        body,
    });
    if shared.dialect == Dialect::OpenAi
        && streamed
        && has_tools
        && shared.empty_tool_streams.load(Ordering::SeqCst)
    {
        let mut out = stream;
        return empty_stream(&mut out);
    }
    let keyed = {
        let mut keyed = lock(&shared.keyed);
        keyed
            .iter()
            .position(|(needle, _)| last.contains(needle.as_str()))
            .map(|i| keyed.remove(i).1)
    };
    let reply = keyed.unwrap_or_else(|| {
        lock(&shared.replies)
            .pop_front()
            .unwrap_or_else(|| FakeReply::text("ok"))
    });
    let mut out = stream;
    match reply {
        FakeReply::Status(status, message) => {
            let body = match shared.dialect {
                Dialect::OpenAi => json!({"error": {"message": message, "type": "fake_error"}}),
                Dialect::Anthropic => {
                    json!({"type": "error", "error": {"type": "api_error", "message": message}})
                }
            }
            .to_string();
            write!(
                out,
                "HTTP/1.1 {status} Error\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )?;
        }
        FakeReply::Hang(d) => thread::sleep(d),
        FakeReply::RateLimited { retry_after_secs } => {
            let body = json!({"error": {"message": "rate limited", "type": "rate_limit_error"}})
                .to_string();
            write!(
                out,
                "HTTP/1.1 429 Too Many Requests\r\nRetry-After: {retry_after_secs}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )?;
        }
        FakeReply::Chat {
            text,
            calls,
            usage,
            chunk_delay,
        } if shared.dialect == Dialect::Anthropic => {
            anthropic_stream(&mut out, &text, &calls, usage, chunk_delay)?;
        }
        FakeReply::Chat {
            text, calls, usage, ..
        } if !streamed => {
            complete(&mut out, &text.concat(), &calls, usage)?;
        }
        FakeReply::Chat {
            text,
            calls,
            usage,
            chunk_delay,
        } => {
            write!(
                out,
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n"
            )?;
            let chunk = |delta: Value, finish: Value| {
                json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": "fake",
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
            };
            let mut events = vec![chunk(
                json!({"role": "assistant", "content": ""}),
                Value::Null,
            )];
            for t in &text {
                events.push(chunk(json!({"content": t}), Value::Null));
            }
            for (i, c) in calls.iter().enumerate() {
                let args = c.arguments.to_string();
                let (a, b) = args.split_at(args.len() / 2);
                events.push(chunk(
                    json!({"tool_calls": [{"index": i, "id": c.id, "type": "function",
                            "function": {"name": c.name, "arguments": ""}}]}),
                    Value::Null,
                ));
                for piece in [a, b] {
                    events.push(chunk(
                        json!({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}),
                        Value::Null,
                    ));
                }
            }
            let finish = if calls.is_empty() {
                "stop"
            } else {
                "tool_calls"
            };
            events.push(chunk(json!({}), json!(finish)));
            events.push(
                json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "choices": [],
                               "usage": {"prompt_tokens": usage.0, "completion_tokens": usage.1,
                                         "total_tokens": usage.0 + usage.1}}),
            );
            for e in events {
                write!(out, "data: {e}\n\n")?;
                out.flush()?;
                if !chunk_delay.is_zero() {
                    thread::sleep(chunk_delay);
                }
            }
            write!(out, "data: [DONE]\n\n")?;
            out.flush()?;
        }
    }
    Ok(())
}

/// An unstreamed OpenAI `chat.completion` body.
fn complete(
    out: &mut TcpStream,
    text: &str,
    calls: &[FakeCall],
    usage: (u64, u64),
) -> io::Result<()> {
    let mut message = json!({"role": "assistant",
                             "content": if text.is_empty() { Value::Null } else { json!(text) }});
    if !calls.is_empty() {
        message["tool_calls"] = calls
            .iter()
            .map(|c| {
                json!({"id": c.id, "type": "function",
                       "function": {"name": c.name, "arguments": c.arguments.to_string()}})
            })
            .collect();
    }
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    let body = json!({"id": "chatcmpl-fake", "object": "chat.completion", "model": "fake",
                      "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                      "usage": {"prompt_tokens": usage.0, "completion_tokens": usage.1,
                                "total_tokens": usage.0 + usage.1}})
    .to_string();
    write!(
        out,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    out.flush()
}

/// llama.cpp's answer to a streamed request with tools under a tool-capable chat format: one
/// empty content delta, `finish_reason: "stop"`.
fn empty_stream(out: &mut TcpStream) -> io::Result<()> {
    write!(
        out,
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n"
    )?;
    let events = [
        json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": "fake",
               "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]}),
        json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": "fake",
               "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "stop"}]}),
        json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "choices": [],
               "usage": {"prompt_tokens": 30, "completion_tokens": 1, "total_tokens": 31}}),
    ];
    for e in events {
        write!(out, "data: {e}\n\n")?;
    }
    write!(out, "data: [DONE]\n\n")?;
    out.flush()
}

fn anthropic_stream(
    out: &mut TcpStream,
    text: &[String],
    calls: &[FakeCall],
    usage: (u64, u64),
    chunk_delay: Duration,
) -> io::Result<()> {
    write!(
        out,
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n"
    )?;
    let mut events: Vec<(&str, Value)> = vec![(
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_fake", "type": "message",
               "role": "assistant", "content": [], "model": "fake", "stop_reason": null,
               "usage": {"input_tokens": usage.0, "output_tokens": 1}}}),
    )];
    let mut index = 0;
    if !text.is_empty() {
        events.push((
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
        ));
        for t in text {
            events.push((
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": t}}),
            ));
        }
        events.push((
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    for c in calls {
        let args = c.arguments.to_string();
        let (a, b) = args.split_at(args.len() / 2);
        events.push((
            "content_block_start",
            json!({"type": "content_block_start", "index": index,
                   "content_block": {"type": "tool_use", "id": c.id, "name": c.name, "input": {}}}),
        ));
        for piece in [a, b] {
            events.push((
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index,
                       "delta": {"type": "input_json_delta", "partial_json": piece}}),
            ));
        }
        events.push((
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    let stop = if calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    events.push((
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": usage.1}}),
    ));
    events.push(("message_stop", json!({"type": "message_stop"})));
    for (name, data) in events {
        write!(out, "event: {name}\ndata: {data}\n\n")?;
        out.flush()?;
        if !chunk_delay.is_zero() {
            thread::sleep(chunk_delay);
        }
    }
    Ok(())
}
