//! A retried `/v1` request whose first attempt failed (issue 27): the retry runs the turn
//! again, and the user message the failed attempt already stored is not stored (nor sent to
//! the provider) a second time. Through the router with the daemon's real host and sessions,
//! against the fake OpenAI server answering 500 first.

// Setup helpers outside #[test] fns panic on a broken fixture, like the tests themselves.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;

use axum::Router;
use axum::extract::connect_info::MockConnectInfo;
use axum::http::StatusCode;
use serde_json::{Value, json};
use warren_gateway::router;
use warren_testkit::fake_llm::{FakeOpenAi, FakeReply};

use crate::common::{self, pairs};

/// A POST of `body` to `/v1/chat/completions` in session `key` (`retry` = the SDK's count).
async fn complete(
    app: &Router,
    token: &str,
    key: &str,
    body: &Value,
    retry: u32,
) -> (StatusCode, Value) {
    let mut request = common::request(
        "POST",
        "/v1/chat/completions",
        Some(token),
        Some(&body.to_string()),
    );
    let headers = request.headers_mut();
    headers.insert("x-warren-session", key.parse().unwrap());
    headers.insert("x-stainless-retry-count", retry.into());
    common::send(app.clone(), request).await
}

/// The `(role, content)` messages of session `key` of agent `fake`, as stored.
async fn stored(app: &Router, token: &str, key: &str) -> Vec<(String, String)> {
    common::session_messages(app, token, "fake", key).await
}

/// The `(role, content)` messages a provider request carried (the system prompt left out).
fn sent(body: &Value) -> Vec<(String, String)> {
    common::messages(&body["messages"])
        .into_iter()
        .filter(|(role, _)| role != "system")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_failed_attempt_stores_the_user_message_once_issue27() {
    let fake = FakeOpenAi::start().unwrap();
    // Each turn's first attempt fails (a provider error; no provider-side retries).
    for reply in ["First answer.", "Second answer."] {
        fake.push(FakeReply::Status(500, "upstream broke".into()));
        fake.push(FakeReply::text(reply));
    }
    let extra = format!(
        "[gateway.openai]\nenabled = true\n\n{}\nmax_retries = 0\n\n[agents.fake]\nprovider = \"fake\"\nmodel = \"m\"\nrisk_profile = \"sup\"\n",
        fake.provider_toml("fake", "sk-test")
    );
    let f = common::scripted(
        r#"{"turns": []}"#,
        "sup",
        "autonomy = \"supervised\"",
        &extra,
    );
    let state = common::state_for(&f.root, &f.store, &f.process, &f.services);
    let app =
        router(state.clone()).layer(MockConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40000))));
    let key = "oai-failed-retry";
    let hello = json!({"model": "fake", "messages": [{"role": "user", "content": "hello"}]});

    // The first attempt fails: a 5xx, which the SDK retries with the same body.
    let (status, body) = complete(&app, &f.token, key, &hello, 0).await;
    assert!(status.is_server_error(), "{status}: {body}");
    assert_eq!(
        stored(&app, &f.token, key).await,
        pairs(&[("user", "hello")])
    );
    // The retry runs the turn again: answered, the message stored and sent once.
    let (status, body) = complete(&app, &f.token, key, &hello, 1).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "First answer.");
    let first = pairs(&[("user", "hello"), ("assistant", "First answer.")]);
    assert_eq!(stored(&app, &f.token, key).await, first);

    // A client resending the whole conversation: its next turn fails once too, then its
    // retry reaches a router that never saw the attempt (a restarted daemon: the stored
    // history decides) and is answered.
    let next = json!({"model": "fake", "messages": [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "First answer."},
        {"role": "user", "content": "and now?"},
    ]});
    let (status, body) = complete(&app, &f.token, key, &next, 0).await;
    assert!(status.is_server_error(), "{status}: {body}");
    let fresh = router(state).layer(MockConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40000))));
    let (status, body) = complete(&fresh, &f.token, key, &next, 1).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "Second answer.");
    let both = pairs(&[
        ("user", "hello"),
        ("assistant", "First answer."),
        ("user", "and now?"),
        ("assistant", "Second answer."),
    ]);
    assert_eq!(stored(&app, &f.token, key).await, both);

    // What the provider was sent: each attempt's conversation with the user message once.
    let requests: Vec<_> = fake.requests().iter().map(|r| sent(&r.body)).collect();
    assert_eq!(
        requests,
        vec![
            pairs(&[("user", "hello")]),
            pairs(&[("user", "hello")]),
            first
                .iter()
                .cloned()
                .chain(pairs(&[("user", "and now?")]))
                .collect(),
            first
                .iter()
                .cloned()
                .chain(pairs(&[("user", "and now?")]))
                .collect(),
        ]
    );
}
