//! The OpenAI-compatible provider and routes against the local fake server (real wire format:
//! SSE, tool-call deltas, usage chunk, error bodies).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::json;
use warren_core::{ChatMessage, ToolCall, ToolDefinition, Usage};
use warren_providers::{
    ChatRequest, EventSink, OpenAiProvider, Provider, ProviderError, Route, StreamEvent, no_events,
};
use warren_testkit::fake_llm::{FakeCall, FakeOpenAi, FakeReply};

const KEY: &str = "sk-secret-test-key-0123456789";

fn server() -> FakeOpenAi {
    FakeOpenAi::start().unwrap_or_else(|e| panic!("fake server: {e}"))
}

fn provider(name: &str, s: &FakeOpenAi) -> Arc<dyn Provider> {
    Arc::new(OpenAiProvider::new(
        name,
        s.base_url(),
        Some(KEY.to_string()),
        Duration::from_secs(5),
    ))
}

fn request(single: bool) -> Arc<ChatRequest> {
    Arc::new(ChatRequest {
        model: "gpt-test".into(),
        messages: vec![ChatMessage::system("sys"), ChatMessage::user("hello")],
        tools: Arc::new(vec![ToolDefinition {
            name: "file_read".into(),
            description: "Read a file".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }]),
        single_tool: single,
        ..ChatRequest::default()
    })
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn streamed_text_tool_call_deltas_and_usage_are_assembled() {
    let s = server();
    s.push(
        FakeReply::calls(
            "Reading it.",
            vec![
                FakeCall::new("call_1", "file_read", json!({"path": "a.md"})),
                FakeCall::new("call_2", "file_read", json!({"path": "b.md"})),
            ],
        )
        .with_usage(33, 12),
    );
    let p = provider("openai", &s);
    let deltas = Arc::new(Mutex::new(Vec::new()));
    let d = Arc::clone(&deltas);
    let sink: EventSink = Arc::new(move |e| {
        let StreamEvent::TextDelta(t) = e;
        d.lock().unwrap_or_else(|p| p.into_inner()).push(t);
    });
    let r = rt()
        .block_on(p.chat(request(false), sink))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.text, "Reading it.");
    assert_eq!(
        *deltas.lock().unwrap_or_else(|p| p.into_inner()),
        vec!["Reading it."]
    );
    assert_eq!(
        r.usage,
        Usage {
            input_tokens: 33,
            output_tokens: 12
        }
    );
    assert_eq!(
        r.tool_calls,
        vec![
            ToolCall {
                id: "call_1".into(),
                name: "file_read".into(),
                arguments: json!({"path": "a.md"})
            },
            ToolCall {
                id: "call_2".into(),
                name: "file_read".into(),
                arguments: json!({"path": "b.md"})
            },
        ]
    );
    let sent = &s.requests()[0];
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(
        sent.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(sent.body["stream"], json!(true));
    assert_eq!(sent.body["stream_options"], json!({"include_usage": true}));
    assert_eq!(
        sent.body["tools"][0]["function"]["name"],
        json!("file_read")
    );
    assert!(sent.body.get("parallel_tool_calls").is_none());
}

#[test]
fn single_tool_request_carries_parallel_tool_calls_false_loop2() {
    let s = server();
    s.push(FakeReply::text("fine"));
    let p = provider("openai", &s);
    rt().block_on(p.chat(request(true), no_events()))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.requests()[0].body["parallel_tool_calls"], json!(false));
}

#[test]
fn http_errors_name_provider_and_status_but_never_the_key() {
    let s = server();
    s.push(FakeReply::Status(
        401,
        format!("Incorrect API key provided: {KEY}"),
    ));
    let p = provider("openai-main", &s);
    let err = rt()
        .block_on(p.chat(request(false), no_events()))
        .err()
        .unwrap_or_else(|| panic!("expected an error"));
    let text = err.to_string();
    assert!(
        text.contains("openai-main") && text.contains("HTTP 401"),
        "{text}"
    );
    assert!(!text.contains(KEY) && !text.contains("sk-secre"), "{text}");
    assert!(!err.is_retryable());
}

#[test]
fn route_retries_429_and_5xx_then_answers() {
    let s = server();
    s.push(FakeReply::Status(429, "slow down".into()));
    s.push(FakeReply::Status(503, "overloaded".into()));
    s.push(FakeReply::text("third time"));
    let route = Route::new().with(provider("primary", &s), 3, Duration::from_millis(1));
    let r = rt()
        .block_on(route.chat(request(false), no_events()))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.response.text, "third time");
    assert_eq!(r.provider, "primary");
    let statuses: Vec<_> = r.failed_attempts.iter().map(|a| a.error.status()).collect();
    assert_eq!(statuses, vec![Some(429), Some(503)]);
    assert_eq!(s.requests().len(), 3);
}

#[test]
fn route_falls_back_after_retries_are_exhausted_and_on_client_errors() {
    let (a, b) = (server(), server());
    a.push(FakeReply::Status(500, "boom".into()));
    a.push(FakeReply::Status(500, "boom".into()));
    b.push(FakeReply::text("from fallback"));
    let route = Route::new()
        .with(provider("primary", &a), 1, Duration::from_millis(1))
        .with(provider("backup", &b), 1, Duration::from_millis(1));
    let r = rt()
        .block_on(route.chat(request(false), no_events()))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (r.provider.as_str(), r.response.text.as_str()),
        ("backup", "from fallback")
    );
    assert_eq!(a.requests().len(), 2, "one try plus one retry");

    // 400 is not retried: straight to the fallback.
    let (a, b) = (server(), server());
    a.push(FakeReply::Status(400, "bad request".into()));
    let route = Route::new()
        .with(provider("primary", &a), 3, Duration::from_millis(1))
        .with(provider("backup", &b), 3, Duration::from_millis(1));
    let r = rt()
        .block_on(route.chat(request(false), no_events()))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.provider, "backup");
    assert_eq!(a.requests().len(), 1);
}

#[test]
fn timeouts_are_retried_and_reported_with_the_provider() {
    let s = server();
    s.push(FakeReply::Hang(Duration::from_secs(3)));
    s.push(FakeReply::Hang(Duration::from_secs(3)));
    let p: Arc<dyn Provider> = Arc::new(OpenAiProvider::new(
        "slow",
        s.base_url(),
        None,
        Duration::from_millis(300),
    ));
    let route = Route::new().with(p, 1, Duration::from_millis(1));
    let err = rt()
        .block_on(route.chat(request(false), no_events()))
        .err()
        .unwrap_or_else(|| panic!("expected a timeout"));
    let ProviderError::AllFailed { attempts } = &err else {
        panic!("{err}")
    };
    assert_eq!(attempts.len(), 2);
    assert!(
        attempts
            .iter()
            .all(|e| matches!(e, ProviderError::Timeout { provider, .. } if provider == "slow")),
        "{err}"
    );
}

#[test]
fn cancelling_mid_stream_stops_the_call() {
    let s = server();
    s.push(FakeReply::Chat {
        text: (0..50).map(|i| format!("w{i} ")).collect(),
        calls: Vec::new(),
        usage: (1, 1),
        chunk_delay: Duration::from_millis(20),
    });
    let p = provider("openai", &s);
    let req = request(false);
    let cancel = req.cancel.clone();
    let sink: EventSink = Arc::new(move |_| cancel.cancel());
    let err = rt()
        .block_on(p.chat(req, sink))
        .err()
        .unwrap_or_else(|| panic!("expected cancellation"));
    assert_eq!(err, ProviderError::Cancelled);
}

#[test]
fn a_429_retry_after_is_honoured_before_the_retry() {
    let s = server();
    s.push(FakeReply::RateLimited {
        retry_after_secs: 1,
    });
    s.push(FakeReply::text("after the wait"));
    let route = Route::new().with(provider("primary", &s), 2, Duration::from_millis(1));
    let started = std::time::Instant::now();
    let r = rt()
        .block_on(route.chat(request(false), no_events()))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.response.text, "after the wait");
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "waited {:?}",
        started.elapsed()
    );
    assert_eq!(
        r.failed_attempts[0].error.retry_after(),
        Some(Duration::from_secs(1))
    );
}

/// Issue 16 §3: an answer empty streamed and again unstreamed is an error naming the provider,
/// not retried on it, and the route's fallback answers instead.
#[test]
fn an_empty_answer_is_asked_again_unstreamed_then_falls_back() {
    let (a, b) = (server(), server());
    a.push(FakeReply::calls("", Vec::new()));
    a.push(FakeReply::calls("", Vec::new()));
    b.push(FakeReply::text("from fallback"));
    let route = Route::new()
        .with(provider("local", &a), 3, Duration::from_millis(1))
        .with(provider("backup", &b), 3, Duration::from_millis(1));
    let r = rt()
        .block_on(route.chat(request(false), no_events()))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (r.provider.as_str(), r.response.text.as_str()),
        ("backup", "from fallback")
    );
    let sent: Vec<bool> = a
        .requests()
        .iter()
        .map(|q| q.body["stream"] == json!(true))
        .collect();
    assert_eq!(sent, vec![true, false], "streamed, then once unstreamed");
    let error = &r.failed_attempts[0].error;
    assert_eq!(error.empty_answer_from(), Some("local"), "{error}");
    assert!(!error.is_retryable());
}
