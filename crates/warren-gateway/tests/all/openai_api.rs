//! The OpenAI-compatible routes through the router without a socket (issue 27): off by default,
//! OpenAI's error shape for auth, unknown models and client tools, and a streamed completion
//! whose call waits for approval (a content chunk naming the approval id, then the answer and
//! `data: [DONE]` once approved). The end-to-end test with the `openai` Python client is in
//! `warren-cli`'s `openai_endpoint`.

// Setup helpers outside #[test] fns panic on a broken fixture, like the tests themselves.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::connect_info::MockConnectInfo;
use axum::http::StatusCode;
use futures_util::StreamExt;
use serde_json::{Value, json};
use tower::ServiceExt;
use warren_config::InstallRoot;
use warren_gateway::router;

use crate::common;

const SCRIPT: &str = r#"{"turns": [
  [ {"text": "I will write it.", "tool_calls": [{"name": "file_write", "arguments": {"path": "out.md", "content": "hi"}}],
     "usage": {"input_tokens": 100, "output_tokens": 10}},
    {"text": "Done writing.", "usage": {"input_tokens": 120, "output_tokens": 5}} ]
]}"#;

struct Fixture {
    _dir: tempfile::TempDir,
    root: InstallRoot,
    app: Router,
    token: String,
}

/// A root whose `main` agent runs `SCRIPT` under a supervised profile; `extra` is appended to
/// config.toml.
fn fixture(extra: &str) -> Fixture {
    let f = common::scripted(
        SCRIPT,
        "sup",
        "autonomy = \"supervised\"\napproval_timeout_secs = 30",
        extra,
    );
    let state = common::state_for(&f.root, &f.store, &f.process, &f.services);
    let app = router(state).layer(MockConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40000))));
    Fixture {
        _dir: f.dir,
        root: f.root,
        app,
        token: f.token,
    }
}

const ENABLED: &str = "[gateway.openai]\nenabled = true\n";

impl Fixture {
    async fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let body = body.map(|b| b.to_string());
        common::call(self.app.clone(), method, path, token, body.as_deref()).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_v1_routes_are_off_by_default_and_answer_in_openai_error_shape_issue27() {
    let off = fixture("");
    let (status, body) = off.call("GET", "/v1/models", Some(&off.token), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["error"]["code"], "openai_endpoint_disabled", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("[gateway.openai] enabled = true"),
        "{body}"
    );

    let f = fixture(ENABLED);
    let (status, body) = f.call("GET", "/v1/models", Some(&f.token), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"][0]["id"], "main", "{body}");
    let ask = |extra: Value| {
        let mut b = json!({"model": "main", "messages": [{"role": "user", "content": "w"}]});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    for (token, body, status, code) in [
        (
            None,
            ask(json!({})),
            StatusCode::UNAUTHORIZED,
            "invalid_api_key",
        ),
        (
            Some("wrn_0000"),
            ask(json!({})),
            StatusCode::UNAUTHORIZED,
            "invalid_api_key",
        ),
        (
            Some(f.token.as_str()),
            ask(json!({"model": "ghost"})),
            StatusCode::NOT_FOUND,
            "model_not_found",
        ),
        (
            Some(f.token.as_str()),
            ask(json!({"tools": [{"type": "function", "function": {"name": "f"}}]})),
            StatusCode::BAD_REQUEST,
            "client_tools_unsupported",
        ),
        (
            Some(f.token.as_str()),
            ask(
                json!({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}),
            ),
            StatusCode::BAD_REQUEST,
            "last_message_not_user",
        ),
    ] {
        let (got, answer) = f
            .call("POST", "/v1/chat/completions", token, Some(body))
            .await;
        assert_eq!(
            (got, answer["error"]["code"].as_str()),
            (status, Some(code)),
            "{answer}"
        );
        assert!(answer["error"]["message"].is_string(), "{answer}");
        assert!(answer["error"]["type"].is_string(), "{answer}");
    }
    // A resent conversation may pass the 64 KiB limit of `/api` bodies (1 MiB here); one Warren
    // never held is refused, naming the first message that does not line up.
    let long = "x".repeat(200 * 1024);
    let body = ask(json!({"messages": [
        {"role": "user", "content": "earlier"},
        {"role": "assistant", "content": long},
        {"role": "user", "content": "now"},
    ]}));
    let (status, answer) = f
        .call("POST", "/v1/chat/completions", Some(&f.token), Some(body))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert_eq!(answer["error"]["code"], "history_mismatch", "{answer}");
    assert_eq!(answer["error"]["param"], "messages[0]", "{answer}");
    // Nothing ran: no session was started by the refused requests.
    let (_, sessions) = f
        .call("GET", "/api/agents/main/sessions", Some(&f.token), None)
        .await;
    assert_eq!(sessions["count"], 0, "{sessions}");
}

/// The `data:` payloads of an SSE body.
fn sse_data(text: &str) -> Vec<String> {
    text.split("\n\n")
        .flat_map(|block| block.lines().filter_map(|l| l.strip_prefix("data: ")))
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_completion_names_the_approval_a_call_waits_for_issue27() {
    let f = fixture(ENABLED);
    let mut request = common::request(
        "POST",
        "/v1/chat/completions",
        Some(&f.token),
        Some(
            &json!({"model": "main", "stream": true, "messages": [{"role": "user", "content": "write"}]})
                .to_string(),
        ),
    );
    request
        .headers_mut()
        .insert("x-warren-session", "oai-approval".parse().unwrap());
    let response = f.app.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["x-warren-session"], "oai-approval");
    let mut stream = response.into_body().into_data_stream();
    let mut text = String::new();
    let notice = loop {
        let chunk = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("an approval chunk long before the 30 s timeout")
            .expect("the stream is open while the call waits")
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
        let found = sse_data(&text).into_iter().find_map(|d| {
            let v: Value = serde_json::from_str(&d).ok()?;
            let content = v["choices"][0]["delta"]["content"].as_str()?.to_string();
            content.contains("waits for approval").then_some(content)
        });
        if let Some(content) = found {
            break content;
        }
    };
    let (_, listed) = f.call("GET", "/api/approvals", Some(&f.token), None).await;
    let id = listed["pending"][0]["id"].as_str().unwrap().to_string();
    assert!(
        notice.contains(&format!("POST /api/approvals/{id}")),
        "{notice}"
    );
    assert!(notice.contains("file_write"), "{notice}");

    let (status, body) = f
        .call(
            "POST",
            &format!("/api/approvals/{id}"),
            Some(&f.token),
            Some(json!({"approve": true})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("the turn ends after the approval")
    {
        text.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
    }
    let data = sse_data(&text);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{text}");
    let chunks: Vec<Value> = data
        .iter()
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect();
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk"),
        "{text}"
    );
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert!(content.ends_with("Done writing."), "{content}");
    let finish: Vec<&Value> = chunks
        .iter()
        .map(|c| &c["choices"][0]["finish_reason"])
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finish, vec![&json!("stop")], "{text}");
    let written = f
        .root
        .agent_workspace(&"main".parse().unwrap())
        .join("out.md");
    assert_eq!(std::fs::read_to_string(written).unwrap(), "hi");
}
