//! The Anthropic Messages provider against the local fake server (real SSE event stream).

use std::sync::Arc;
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::json;
use warren_core::{ChatMessage, ToolCall, ToolDefinition, Usage};
use warren_providers::{AnthropicProvider, ChatRequest, Provider, no_events};
use warren_testkit::fake_llm::{FakeCall, FakeOpenAi, FakeReply};

const KEY: &str = "sk-ant-secret-0123456789";

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"))
}

fn request(single: bool) -> Arc<ChatRequest> {
    Arc::new(ChatRequest {
        model: "claude-test".into(),
        messages: vec![ChatMessage::system("sys"), ChatMessage::user("hello")],
        tools: Arc::new(vec![ToolDefinition {
            name: "file_read".into(),
            description: "Read a file".into(),
            parameters: json!({"type": "object"}),
        }]),
        single_tool: single,
        ..ChatRequest::default()
    })
}

#[test]
fn streamed_tool_use_and_usage_are_assembled_and_single_tool_is_requested_loop2() {
    let s = FakeOpenAi::start_anthropic().unwrap_or_else(|e| panic!("{e}"));
    s.push(
        FakeReply::calls(
            "Let me look.",
            vec![
                FakeCall::new("toolu_1", "file_read", json!({"path": "a.md"})),
                FakeCall::new("toolu_2", "file_read", json!({"path": "b.md"})),
            ],
        )
        .with_usage(40, 9),
    );
    let p = AnthropicProvider::new(
        "claude",
        s.base_url(),
        Some(KEY.into()),
        Duration::from_secs(5),
    );
    let r = rt()
        .block_on(p.chat(request(true), no_events()))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.text, "Let me look.");
    assert_eq!(
        r.usage,
        Usage {
            input_tokens: 40,
            output_tokens: 9
        }
    );
    assert_eq!(
        r.tool_calls,
        vec![
            ToolCall {
                id: "toolu_1".into(),
                name: "file_read".into(),
                arguments: json!({"path": "a.md"})
            },
            ToolCall {
                id: "toolu_2".into(),
                name: "file_read".into(),
                arguments: json!({"path": "b.md"})
            },
        ]
    );
    let sent = &s.requests()[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.header("x-api-key"), Some(KEY));
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(
        sent.body["tool_choice"],
        json!({"type": "auto", "disable_parallel_tool_use": true})
    );
    assert_eq!(sent.body["system"], json!("sys"));
}

#[test]
fn anthropic_errors_name_provider_and_status_without_the_key() {
    let s = FakeOpenAi::start_anthropic().unwrap_or_else(|e| panic!("{e}"));
    s.push(FakeReply::Status(529, format!("overloaded (key {KEY})")));
    let p = AnthropicProvider::new(
        "claude",
        s.base_url(),
        Some(KEY.into()),
        Duration::from_secs(5),
    );
    let err = rt()
        .block_on(p.chat(request(false), no_events()))
        .err()
        .unwrap_or_else(|| panic!("expected an error"));
    let text = err.to_string();
    assert!(
        text.contains("'claude'") && text.contains("HTTP 529"),
        "{text}"
    );
    assert!(!text.contains(KEY), "{text}");
    assert!(err.is_retryable());
    assert!(
        s.requests()[0]
            .body
            .get("tool_choice")
            .is_some_and(|c| c.get("disable_parallel_tool_use").is_none())
    );
}
