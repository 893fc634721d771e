//! Session keys cannot be squatted through the gateway (issue 35 §7, SESS-1), through the
//! router without a socket: one OpenAI-endpoint `user` talking to two agents gets one session
//! per agent (the old token + `user` hash gave both the same key, so the second agent got 409,
//! shown here by naming that shared key), an old-hash session its agent owns stays in use, and
//! a chat caller cannot create another agent's default key (`Agent-<alias>-http`), which the
//! other agent then still uses.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;

use axum::Router;
use axum::extract::connect_info::MockConnectInfo;
use axum::http::StatusCode;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tower::ServiceExt;
use warren_gateway::router;
use warren_testkit::fake_llm::{FakeOpenAi, FakeReply};

use crate::common;

struct Fixture {
    _dir: tempfile::TempDir,
    _fake: FakeOpenAi,
    app: Router,
    token: String,
}

/// Agents `one` and `two` (and `main`) on a fake provider answering `replies` texts in order,
/// the OpenAI endpoint on.
fn fixture(replies: usize) -> Fixture {
    let fake = FakeOpenAi::start().unwrap();
    for i in 0..replies {
        fake.push(FakeReply::text(&format!("reply {i}")));
    }
    let agents: String = ["one", "two"]
        .iter()
        .map(|a| {
            format!("[agents.{a}]\nprovider = \"fake\"\nmodel = \"m\"\nrisk_profile = \"p\"\n\n")
        })
        .collect();
    let extra = format!(
        "[gateway.openai]\nenabled = true\n\n{}\n\n{agents}",
        fake.provider_toml("fake", "sk-test")
    );
    let f = common::scripted("{\"turns\": []}", "p", "autonomy = \"full\"", &extra);
    let state = common::state_for(&f.root, &f.store, &f.process, &f.services);
    let app = router(state).layer(MockConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40000))));
    Fixture {
        _dir: f.dir,
        _fake: fake,
        app,
        token: f.token,
    }
}

/// A POST of `body` with `headers`: status, the `X-Warren-Session` answered, the JSON body.
async fn post(
    f: &Fixture,
    path: &str,
    body: &Value,
    headers: &[(&'static str, &str)],
) -> (StatusCode, Option<String>, Value) {
    let mut request = common::request("POST", path, Some(&f.token), Some(&body.to_string()));
    for (name, value) in headers {
        request.headers_mut().insert(*name, value.parse().unwrap());
    }
    let response = f.app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let session = response
        .headers()
        .get("x-warren-session")
        .map(|v| v.to_str().unwrap().to_string());
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (
        status,
        session,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

fn completion(model: &str, user: &str) -> Value {
    json!({"model": model, "user": user, "messages": [{"role": "user", "content": "hi"}]})
}

/// The session key the endpoint derived before issue 35: token and `user` only.
fn old_key(token: &str, user: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(warren_gateway::pairing::hash_token(token).as_bytes());
    hash.update([0]);
    hash.update(user.as_bytes());
    let hex = warren_core::hex::encode(&hash.finalize());
    format!("oai-{}", &hex[..24])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_openai_user_talks_to_two_agents_issue35() {
    let f = fixture(6);
    let path = "/v1/chat/completions";

    // Guard off: the old derivation gave both models one key; the second agent is refused.
    let shared = old_key(&f.token, "alice");
    let header = [("x-warren-session", shared.as_str())];
    let (status, _, body) = post(&f, path, &completion("one", "alice"), &header).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _, body) = post(&f, path, &completion("two", "alice"), &header).await;
    assert_eq!(status, StatusCode::CONFLICT, "the old lockout: {body}");

    // Guard on: the model is in the hash. Agent one keeps its old-hash session (it owns it);
    // agent two gets its own.
    let (status, one, body) = post(&f, path, &completion("one", "alice"), &[]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        one.as_deref(),
        Some(shared.as_str()),
        "migration keeps the old session"
    );
    let (status, two, body) = post(&f, path, &completion("two", "alice"), &[]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let two = two.unwrap();
    assert_ne!(two, shared);
    // A new user gets one session per model, and each agent goes on in its own.
    let (s1, k1, _) = post(&f, path, &completion("one", "bob"), &[]).await;
    let (s2, k2, _) = post(&f, path, &completion("two", "bob"), &[]).await;
    assert_eq!((s1, s2), (StatusCode::OK, StatusCode::OK));
    assert_ne!(k1, k2, "one key per model");
    assert_ne!(k1.as_deref(), Some(old_key(&f.token, "bob").as_str()));
    let history = common::session_messages(&f.app, &f.token, "two", &two).await;
    assert_eq!(history.len(), 2, "{history:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_caller_cannot_create_another_agents_default_key_issue35() {
    let f = fixture(2);
    let chat = |agent: &str, session: Option<&str>| {
        let mut body = json!({"message": "hello"});
        if let Some(s) = session {
            body["session"] = json!(s);
        }
        (format!("/api/agents/{agent}/chat"), body)
    };
    // Agent one asks for agent two's default keys: the namespaced one and the legacy one.
    for key in ["Agent-two-http", "http-two", "Agent-two-cli"] {
        let (path, body) = chat("one", Some(key));
        let (status, _, answer) = post(&f, &path, &body, &[]).await;
        assert_eq!(status, StatusCode::CONFLICT, "{key}: {answer}");
        let message = answer["message"].as_str().unwrap();
        assert!(
            message.contains("default session key of agent 'two'"),
            "{message}"
        );
    }
    // Agent two's default turn works and lands in its namespaced key.
    let (path, body) = chat("two", None);
    let (status, _, answer) = post(&f, &path, &body, &[]).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["session"], "Agent-two-http", "{answer}");
    // Its own legacy key stays open to it.
    let (path, body) = chat("two", Some("http-two"));
    let (status, _, answer) = post(&f, &path, &body, &[]).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
}
