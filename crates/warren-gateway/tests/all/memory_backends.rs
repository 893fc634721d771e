//! `/api/health`'s `memory_backends` component (issue 20 §1/§2): a failing `lucid` is a
//! warning and never fails a turn (the memory write lands in SQLite); a Qdrant server that does
//! not answer is an error that degrades the daemon's health.

// Setup helpers outside #[test] fns panic on a broken fixture, like the tests themselves.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::net::SocketAddr;

use axum::extract::connect_info::MockConnectInfo;
use axum::http::StatusCode;
use serde_json::{Value, json};
use warren_gateway::router;

const SCRIPT: &str = r#"{"turns": [
  [ {"text": "Noting it.", "tool_calls": [{"name": "memory_store", "arguments": {"key": "tabs", "content": "use tabs for indentation"}}]},
    {"text": "Noted."} ],
  [ {"text": "Still here."} ]
]}"#;

async fn health_and_turns(extra: &str) -> (Value, Vec<(StatusCode, Value)>, common::Scripted) {
    let s = common::scripted(SCRIPT, "test", "autonomy = \"full\"", extra);
    let state = common::state_for(&s.root, &s.store, &s.process, &s.services);
    let app =
        || router(state.clone()).layer(MockConnectInfo(SocketAddr::from(([127, 0, 0, 1], 1))));
    let mut turns = Vec::new();
    for message in ["remember tabs", "indentation?"] {
        turns.push(
            common::call(
                app(),
                "POST",
                "/api/agents/main/chat",
                Some(&s.token),
                Some(&json!({"message": message, "session": "s"}).to_string()),
            )
            .await,
        );
    }
    let (status, health) = common::call(app(), "GET", "/api/health", Some(&s.token), None).await;
    assert_eq!(status, StatusCode::OK);
    (health, turns, s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_lucid_is_a_health_warning_and_never_fails_a_turn() {
    let dir = tempfile::tempdir().unwrap();
    let lucid = dir.path().join("lucid");
    warren_testkit::write_executable(
        &lucid,
        "#!/bin/sh\necho 'lucid: index is corrupt' >&2\nexit 3\n",
    )
    .unwrap();
    let (health, turns, s) = health_and_turns(&format!(
        "[memory]\nbackend = \"lucid\"\n\n[memory.lucid]\ncommand = \"{}\"\n",
        lucid.display()
    ))
    .await;
    for (status, answer) in &turns {
        assert_eq!(*status, StatusCode::OK, "{answer}");
    }
    assert_eq!(turns[1].1["reply"], "Still here.");
    let component = &health["components"]["memory_backends"];
    assert_eq!(component["status"], "warning", "{health}");
    let warning = component["lucid"]["warning"].as_str().unwrap_or_default();
    assert!(
        warning.contains("index is corrupt") && warning.contains("SQLite only"),
        "{health}"
    );
    // The memory the turn stored is in SQLite.
    let rows = warren_memory::registered_agents_at(&s.root.memory_db()).unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!((rows[0].0.as_str(), rows[0].2), ("main", 1), "{rows:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_qdrant_server_that_does_not_answer_is_an_error_in_health() {
    let port = warren_testkit::free_port().unwrap();
    let (health, _, _s) = health_and_turns(&format!(
        "[memory]\nbackend = \"qdrant\"\n\n[memory.qdrant]\nurl = \"http://127.0.0.1:{port}\"\ntimeout_secs = 2\n\n[memory.embedder]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\nmodel = \"m\"\n"
    ))
    .await;
    let component = &health["components"]["memory_backends"];
    assert_eq!(component["status"], "error", "{health}");
    assert!(
        component["qdrant"]["error"]
            .as_str()
            .is_some_and(|e| e.contains(&format!("127.0.0.1:{port}"))),
        "{health}"
    );
    assert_ne!(health["status"], "ok", "{health}");
}
