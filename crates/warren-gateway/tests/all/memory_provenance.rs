//! Issue 20 §3 through the HTTP API: a memory an agent stores in a gateway chat turn records
//! the `gateway` channel, the `Agent-main-http` session, the tool call id and the receipt the turn
//! returned, and `GET /api/agents/{alias}/memory` shows that provenance and the version.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;

use axum::extract::connect_info::MockConnectInfo;
use axum::http::StatusCode;
use serde_json::{Value, json};
use warren_gateway::router;

use crate::common;

const SCRIPT: &str = r#"{"turns": [
  [ {"text": "Noting it.", "tool_calls": [{"name": "memory_store", "arguments": {"key": "launch", "content": "launch is on tuesday"}}],
     "usage": {"input_tokens": 10, "output_tokens": 5}},
    {"text": "Noted.", "usage": {"input_tokens": 12, "output_tokens": 2}} ]
]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_turns_memory_shows_its_channel_session_call_and_receipt() {
    let s = common::scripted(SCRIPT, "test", "autonomy = \"full\"", "");
    let state = common::state_for(&s.root, &s.store, &s.process, &s.services);
    let app =
        || router(state.clone()).layer(MockConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40000))));
    let body = json!({"message": "remember the launch"}).to_string();
    let (status, answer) = common::call(
        app(),
        "POST",
        "/api/agents/main/chat",
        Some(&s.token),
        Some(&body),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["reply"], "Noted.");

    let (status, memory) = common::call(
        app(),
        "GET",
        "/api/agents/main/memory?q=tuesday",
        Some(&s.token),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{memory}");
    let hit = &memory["hits"][0];
    assert_eq!(hit["key"], "launch", "{memory}");
    assert_eq!(hit["version"], 1, "{memory}");
    let p = &hit["provenance"];
    assert_eq!(p["trust"], "agent", "{memory}");
    assert_eq!(p["agent"], "main");
    assert_eq!(p["channel"], "gateway");
    assert_eq!(p["session"], "Agent-main-http");
    assert!(
        p["tool_call"].as_str().is_some_and(|c| !c.is_empty()),
        "{p}"
    );
    // The receipt is the one the session kept after the tool result.
    let receipt = p["receipt"].as_str().unwrap_or_default().to_string();
    assert!(receipt.starts_with("wr1-"), "{p}");
    let (_, session) = common::call(
        app(),
        "GET",
        "/api/agents/main/sessions/Agent-main-http",
        Some(&s.token),
        None,
    )
    .await;
    assert!(
        session.to_string().contains(&receipt),
        "{receipt} not in {session}"
    );
    assert_ne!(session, Value::Null);
}
