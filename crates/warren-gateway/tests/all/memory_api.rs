//! Issue 21 through the HTTP API: one memory entry with its version and provenance, its
//! history, forget (the version is kept) and undo (the previous or a named version comes back
//! as a new version), each refusal naming the key.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;

use axum::extract::connect_info::MockConnectInfo;
use axum::http::StatusCode;
use serde_json::json;
use warren_gateway::router;

use crate::common;

const SCRIPT: &str = r#"{"turns": [
  [ {"text": "Noting it.", "tool_calls": [{"name": "memory_store", "arguments": {"key": "launch", "content": "launch is on tuesday"}}],
     "usage": {"input_tokens": 10, "output_tokens": 5}},
    {"text": "Noted.", "usage": {"input_tokens": 12, "output_tokens": 2}} ],
  [ {"text": "Updating.", "tool_calls": [{"name": "memory_store", "arguments": {"key": "launch", "content": "launch moved to friday"}}],
     "usage": {"input_tokens": 10, "output_tokens": 5}},
    {"text": "Updated.", "usage": {"input_tokens": 12, "output_tokens": 2}} ]
]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_history_forget_and_undo_a_memory_over_http() {
    let s = common::scripted(SCRIPT, "test", "autonomy = \"full\"", "");
    let state = common::state_for(&s.root, &s.store, &s.process, &s.services);
    let app =
        || router(state.clone()).layer(MockConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40000))));
    let token = Some(s.token.as_str());
    for message in ["remember the launch", "the launch moved"] {
        let body = json!({"message": message}).to_string();
        let (status, answer) =
            common::call(app(), "POST", "/api/agents/main/chat", token, Some(&body)).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
    }

    // Show: the live version with who wrote it.
    let path = "/api/agents/main/memory/launch";
    let (status, shown) = common::call(app(), "GET", path, token, None).await;
    assert_eq!(status, StatusCode::OK, "{shown}");
    let entry = &shown["entry"];
    assert_eq!(entry["content"], "launch moved to friday", "{shown}");
    assert_eq!(entry["version"], 2, "{shown}");
    assert_eq!(entry["provenance"]["channel"], "gateway", "{shown}");
    assert_eq!(entry["provenance"]["session"], "Agent-main-http", "{shown}");

    // Without a token nothing is shown.
    let (status, _) = common::call(app(), "GET", path, None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // An unknown key is a 404 naming it.
    let (status, err) = common::call(
        app(),
        "GET",
        "/api/agents/main/memory/no-such-key",
        token,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{err}");
    assert_eq!(err["error"], "unknown_memory");
    assert!(
        err["message"].as_str().unwrap().contains("'no-such-key'"),
        "{err}"
    );

    // History: both versions, the live one first.
    let (status, history) =
        common::call(app(), "GET", &format!("{path}/history"), token, None).await;
    assert_eq!(status, StatusCode::OK, "{history}");
    assert_eq!(history["count"], 2, "{history}");
    let states: Vec<_> = history["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["version"].as_u64().unwrap(),
                v["state"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(states.contains(&(2, "current".into())), "{history}");
    assert!(states.contains(&(1, "replaced".into())), "{history}");

    // Undo without a body: the previous content comes back as version 3.
    let (status, undone) = common::call(app(), "POST", &format!("{path}/undo"), token, None).await;
    assert_eq!(status, StatusCode::OK, "{undone}");
    assert_eq!(
        undone["entry"]["content"], "launch is on tuesday",
        "{undone}"
    );
    assert_eq!(undone["entry"]["version"], 3, "{undone}");

    // Forget: gone from show and recall, a second forget is a 404 naming the key.
    let (status, forgot) = common::call(app(), "DELETE", path, token, None).await;
    assert_eq!(status, StatusCode::OK, "{forgot}");
    assert_eq!(forgot["forgotten"], true);
    let (status, _) = common::call(app(), "GET", path, token, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, recall) = common::call(
        app(),
        "GET",
        "/api/agents/main/memory?q=launch",
        token,
        None,
    )
    .await;
    assert_eq!(recall["count"], 0, "{recall}");
    let (status, err) = common::call(app(), "DELETE", path, token, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{err}");
    assert!(
        err["message"].as_str().unwrap().contains("'launch'"),
        "{err}"
    );

    // The forgotten version is kept: undo to version 2 brings friday back.
    let body = json!({"to": 2}).to_string();
    let (status, undone) =
        common::call(app(), "POST", &format!("{path}/undo"), token, Some(&body)).await;
    assert_eq!(status, StatusCode::OK, "{undone}");
    assert_eq!(
        undone["entry"]["content"], "launch moved to friday",
        "{undone}"
    );
    let (status, shown) = common::call(app(), "GET", path, token, None).await;
    assert_eq!(status, StatusCode::OK, "{shown}");
    assert_eq!(shown["entry"]["content"], "launch moved to friday");

    // A version that never existed is a 404; an unknown body field a 400 naming it.
    let body = json!({"to": 99}).to_string();
    let (status, err) =
        common::call(app(), "POST", &format!("{path}/undo"), token, Some(&body)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{err}");
    assert!(err["message"].as_str().unwrap().contains("launch"), "{err}");
    let body = json!({"version": 2}).to_string();
    let (status, err) =
        common::call(app(), "POST", &format!("{path}/undo"), token, Some(&body)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
    assert_eq!(err["field"], "version", "{err}");

    // Another agent's name that is not configured is a 404, not an empty answer.
    let (status, err) =
        common::call(app(), "GET", "/api/agents/ghost/memory/launch", token, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{err}");
    assert_eq!(err["error"], "unknown_agent");
}
