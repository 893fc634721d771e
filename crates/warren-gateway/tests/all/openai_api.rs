//! The OpenAI-compatible routes through the router without a socket (issue 27): off by default,
//! OpenAI's error shape for auth, unknown models and client tools, and a streamed completion
//! whose call waits for approval (a content chunk naming the approval id, then the answer and
//! `data: [DONE]` once approved), a non-streamed one that answers when its approval is given or
//! times out, retried requests (the SDK's timeout, a 408) answered by the attempt they repeat
//! instead of a second turn, and 429 for a spent cost limit (not to be retried) and a full
//! session queue (Retry-After). The end-to-end test with the `openai` Python client is in
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
use warren_gateway::{TimeLimits, router, router_with_limits};
use warren_testkit::fake_llm::{FakeOpenAi, FakeReply};

use crate::common::{self, pairs};

const SCRIPT: &str = r#"{"turns": [
  [ {"text": "I will write it.", "tool_calls": [{"name": "file_write", "arguments": {"path": "out.md", "content": "hi"}}],
     "usage": {"input_tokens": 100, "output_tokens": 10}},
    {"text": "Done writing.", "usage": {"input_tokens": 120, "output_tokens": 5}} ]
]}"#;

struct Fixture {
    _dir: tempfile::TempDir,
    root: InstallRoot,
    state: warren_gateway::AppState,
    app: Router,
    token: String,
}

/// A root whose `main` agent runs `SCRIPT` under a supervised profile; `extra` is appended to
/// config.toml.
fn fixture(extra: &str) -> Fixture {
    fixture_timing(30, extra, None)
}

/// [`fixture`] with the approval timeout `approval_secs` and, when given, the router's time
/// limits.
fn fixture_timing(approval_secs: u64, extra: &str, limits: Option<TimeLimits>) -> Fixture {
    let f = common::scripted(
        SCRIPT,
        "sup",
        &format!("autonomy = \"supervised\"\napproval_timeout_secs = {approval_secs}"),
        extra,
    );
    let state = common::state_for(&f.root, &f.store, &f.process, &f.services);
    let app = match limits {
        Some(limits) => router_with_limits(state.clone(), limits),
        None => router(state.clone()),
    };
    let app = app.layer(MockConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40000))));
    Fixture {
        _dir: f.dir,
        root: f.root,
        state,
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
    // A resent conversation may pass the 64 KiB limit of `/api` bodies (1 MiB here); in a
    // session named by `user`, one Warren never held is refused, naming the first message that
    // does not line up.
    let long = "x".repeat(200 * 1024);
    let body = ask(json!({"user": "alice", "messages": [
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
    // Any other `/v1` path: 404 in OpenAI's shape (issue 37 §2), whatever the method.
    for (method, path) in [
        ("GET", "/v1/embeddings"),
        ("POST", "/v1/completions"),
        ("DELETE", "/v1/models/main/extra"),
        ("GET", "/v1"),
    ] {
        let (status, answer) = f.call(method, path, Some(&f.token), None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}: {answer}");
        assert_eq!(
            answer,
            json!({"error": {
                "message": answer["error"]["message"].as_str().unwrap(),
                "type": "invalid_request_error",
                "param": null,
                "code": "unknown_url",
            }}),
            "{method} {path}"
        );
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains(&format!("{method} {path}")),
            "{answer}"
        );
    }
    // Outside `/v1` the gateway's own 404 is unchanged.
    let (status, answer) = f.call("GET", "/nowhere", Some(&f.token), None).await;
    assert_eq!(
        (status, answer["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found")),
        "{answer}"
    );
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

/// A POST of `body` to `path` with `headers` through `app`: status, headers and body text.
async fn post(
    app: &Router,
    token: &str,
    path: &str,
    body: &Value,
    headers: &[(&'static str, &str)],
) -> (StatusCode, axum::http::HeaderMap, String) {
    let mut request = common::request("POST", path, Some(token), Some(&body.to_string()));
    for (name, value) in headers {
        request.headers_mut().insert(*name, value.parse().unwrap());
    }
    let response = app.clone().oneshot(request).await.unwrap();
    let (status, headers) = (response.status(), response.headers().clone());
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (
        status,
        headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

/// The reply of a `chat.completion` body.
fn reply_of(body: &str) -> (String, Value) {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    (
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_else(|| panic!("no reply: {body}"))
            .to_string(),
        v["usage"].clone(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_streamed_completion_answers_when_its_approval_is_given_or_times_out_issue27() {
    let body = json!({"model": "main", "messages": [{"role": "user", "content": "write"}]});
    // Approved while the request waits: the answer after the call ran.
    let f = fixture(ENABLED);
    let waiting = {
        let (app, token, body) = (f.app.clone(), f.token.clone(), body.clone());
        tokio::spawn(async move { post(&app, &token, "/v1/chat/completions", &body, &[]).await })
    };
    let id = loop {
        let (_, listed) = f.call("GET", "/api/approvals", Some(&f.token), None).await;
        if let Some(id) = listed["pending"][0]["id"].as_str() {
            break id.to_string();
        }
        assert!(!waiting.is_finished(), "answered before the approval");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (status, answer) = f
        .call(
            "POST",
            &format!("/api/approvals/{id}"),
            Some(&f.token),
            Some(json!({"approve": true})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let (status, _, text) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the answer once approved")
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(reply_of(&text).0, "Done writing.");
    let written = f
        .root
        .agent_workspace(&"main".parse().unwrap())
        .join("out.md");
    assert_eq!(std::fs::read_to_string(&written).unwrap(), "hi");

    // Nobody answers: the request answers when the approval timeout (1 s) denies the call.
    let f = fixture_timing(1, ENABLED, None);
    let started = std::time::Instant::now();
    let (status, _, text) = post(&f.app, &f.token, "/v1/chat/completions", &body, &[]).await;
    let waited = started.elapsed();
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(reply_of(&text).0, "Done writing.");
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(10),
        "{waited:?}"
    );
    let written = f
        .root
        .agent_workspace(&"main".parse().unwrap())
        .join("out.md");
    assert!(!written.exists(), "a denied call ran");
}

/// The visible `(role, content)` messages of session `key` of agent `slow`.
async fn session_of(f: &Fixture, key: &str) -> Vec<(String, String)> {
    common::session_messages(&f.app, &f.token, "slow", key).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_request_is_answered_by_the_attempt_it_repeats_issue27() {
    let fake = FakeOpenAi::start().unwrap();
    fake.push(FakeReply::Chat {
        text: vec!["Slow".into(), " reply.".into()],
        calls: Vec::new(),
        usage: (10, 5),
        chunk_delay: Duration::from_millis(400),
    });
    for reply in ["Again.", "Once more."] {
        fake.push(FakeReply::text(reply));
    }
    let extra = format!(
        "{ENABLED}\n{}\n\n[agents.slow]\nprovider = \"fake\"\nmodel = \"m\"\nrisk_profile = \"sup\"\n",
        fake.provider_toml("fake", "sk-test")
    );
    let limits = TimeLimits {
        request: Duration::from_secs(30),
        chat: Duration::from_secs(1),
    };
    let f = fixture_timing(30, &extra, Some(limits));
    let session = [("x-warren-session", "oai-retry")];
    let retried = [
        ("x-warren-session", "oai-retry"),
        ("x-stainless-retry-count", "1"),
    ];
    let first =
        json!({"model": "slow", "messages": [{"role": "user", "content": "take your time"}]});

    // The first attempt outlives the time limit: 408, which the SDK retries. The turn goes on.
    let (status, _, text) = post(&f.app, &f.token, "/v1/chat/completions", &first, &session).await;
    assert_eq!(status, StatusCode::REQUEST_TIMEOUT, "{text}");
    let done = pairs(&[("user", "take your time"), ("assistant", "Slow reply.")]);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while session_of(&f, "oai-retry").await != done {
        assert!(
            std::time::Instant::now() < deadline,
            "the first turn did not end"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The retry (same body, the SDK's retry count) gets that turn's answer and usage.
    let (status, _, text) = post(&f.app, &f.token, "/v1/chat/completions", &first, &retried).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let (reply, usage) = reply_of(&text);
    assert_eq!(reply, "Slow reply.");
    assert_eq!(usage["prompt_tokens"], 10, "{usage}");
    // A router that never saw the first attempt (a restarted daemon) answers from the session.
    let fresh = router_with_limits(f.state.clone(), limits)
        .layer(MockConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40000))));
    let (status, _, text) = post(&fresh, &f.token, "/v1/chat/completions", &first, &retried).await;
    assert_eq!(
        (status, reply_of(&text).0.as_str()),
        (StatusCode::OK, "Slow reply."),
        "{text}"
    );

    // A client resending the whole conversation: a second turn, then the same body again
    // without the retry count (joined) and through the fresh router (from the session), also
    // streamed.
    let second = json!({"model": "slow", "messages": [
        {"role": "user", "content": "take your time"},
        {"role": "assistant", "content": "Slow reply."},
        {"role": "user", "content": "again"},
    ]});
    for app in [&f.app, &f.app, &fresh] {
        let (status, _, text) =
            post(app, &f.token, "/v1/chat/completions", &second, &session).await;
        assert_eq!(
            (status, reply_of(&text).0.as_str()),
            (StatusCode::OK, "Again."),
            "{text}"
        );
    }
    let mut streamed = second.clone();
    streamed["stream"] = json!(true);
    let (status, _, text) = post(
        &fresh,
        &f.token,
        "/v1/chat/completions",
        &streamed,
        &session,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let data = sse_data(&text);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{text}");
    let content: String = data
        .iter()
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(content, "Again.", "{text}");

    // Only the newest message, sent again without the retry count: meant, so a new turn.
    let (status, _, text) = post(&f.app, &f.token, "/v1/chat/completions", &first, &session).await;
    assert_eq!(
        (status, reply_of(&text).0.as_str()),
        (StatusCode::OK, "Once more."),
        "{text}"
    );

    assert_eq!(
        session_of(&f, "oai-retry").await,
        pairs(&[
            ("user", "take your time"),
            ("assistant", "Slow reply."),
            ("user", "again"),
            ("assistant", "Again."),
            ("user", "take your time"),
            ("assistant", "Once more."),
        ])
    );
    assert_eq!(fake.requests().len(), 3, "one provider request per turn");

    // A diverging history is final: OpenAI's SDKs are told not to retry the 409.
    let (status, headers, text) = post(
        &f.app,
        &f.token,
        "/v1/chat/completions",
        &second,
        &[("x-warren-session", "oai-other")],
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{text}");
    assert_eq!(headers["x-should-retry"], "false");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_cost_limit_and_a_full_session_queue_answer_429_in_openai_shape_issue27() {
    let body =
        |input: &str| json!({"model": "main", "messages": [{"role": "user", "content": input}]});
    // A risk profile allowing one token a day: the turn's first request is refused, for good.
    let f = common::scripted(
        SCRIPT,
        "tight",
        "autonomy = \"supervised\"\nmax_tokens_per_day = 1",
        ENABLED,
    );
    let state = common::state_for(&f.root, &f.store, &f.process, &f.services);
    let app = router(state).layer(MockConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40000))));
    let (status, headers, text) =
        post(&app, &f.token, "/v1/chat/completions", &body("write"), &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{text}");
    let err: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(err["error"]["code"], "cost_limit_reached", "{err}");
    assert_eq!(err["error"]["type"], "insufficient_quota", "{err}");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_tokens_per_day"),
        "{err}"
    );
    assert_eq!(headers["x-should-retry"], "false");

    // No turn may wait behind the running one: while a call waits for approval, a second
    // request to the session is refused with 429 queue_full and Retry-After (the SDKs retry it).
    let f = fixture("[channels]\nsession_queue_depth = 0\n\n[gateway.openai]\nenabled = true\n");
    let session = [("x-warren-session", "oai-busy")];
    let mut streamed = body("write");
    streamed["stream"] = json!(true);
    let mut request = common::request(
        "POST",
        "/v1/chat/completions",
        Some(&f.token),
        Some(&streamed.to_string()),
    );
    request
        .headers_mut()
        .insert("x-warren-session", "oai-busy".parse().unwrap());
    let running = f.app.clone().oneshot(request).await.unwrap();
    assert_eq!(running.status(), StatusCode::OK);
    let id = loop {
        let (_, listed) = f.call("GET", "/api/approvals", Some(&f.token), None).await;
        if let Some(id) = listed["pending"][0]["id"].as_str() {
            break id.to_string();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (status, headers, text) = post(
        &f.app,
        &f.token,
        "/v1/chat/completions",
        &body("another"),
        &session,
    )
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{text}");
    let err: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(err["error"]["code"], "queue_full", "{err}");
    assert_eq!(err["error"]["type"], "rate_limit_error", "{err}");
    assert_eq!(headers["retry-after"], "1");
    assert!(headers.get("x-should-retry").is_none());
    let (status, answer) = f
        .call(
            "POST",
            &format!("/api/approvals/{id}"),
            Some(&f.token),
            Some(json!({"approve": false})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    drop(running);
}
