//! Agents, chat (JSON and SSE), sessions, costs, approvals, logs and live events through the
//! router without a socket, over the offline `script` provider and the fake LLM server
//! (STATE-13, STATE-14, STATE-18, SESS-2, issue 8 §2).

// Setup helpers outside #[test] fns panic on a broken fixture, like the tests themselves.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::connect_info::MockConnectInfo;
use axum::http::{Request, StatusCode};
use futures_util::StreamExt;
use serde_json::{Value, json};
use tower::ServiceExt;
use warren_config::{ConfigStore, InstallRoot};
use warren_daemon::{Generation, ReloadTrigger};
use warren_gateway::{AppState, ProcessState, router};
use warren_runtime::{AgentHost, ProcessServices};
use warren_testkit::fake_llm::{FakeOpenAi, FakeReply};

struct Fixture {
    _dir: tempfile::TempDir,
    root: InstallRoot,
    store: ConfigStore,
    process: Arc<ProcessState>,
    services: Arc<ProcessServices>,
    state: AppState,
    token: String,
}

const SCRIPT: &str = r#"{"turns": [
  [ {"text": "I will write it.", "tool_calls": [{"name": "file_write", "arguments": {"path": "out.md", "content": "hi"}}],
     "usage": {"input_tokens": 100, "output_tokens": 10}},
    {"text": "Done writing.", "usage": {"input_tokens": 120, "output_tokens": 5}} ],
  [ {"text": "Second answer.", "usage": {"input_tokens": 50, "output_tokens": 7}} ]
]}"#;

/// A root whose `main` agent runs `SCRIPT`; `extra` is appended to config.toml.
fn fixture(extra: &str) -> Fixture {
    let common::Scripted {
        dir,
        root,
        store,
        token,
        services,
        process,
    } = common::scripted(SCRIPT, "test", "autonomy = \"full\"", extra);
    let state = state_for(&root, &store, &process, &services);
    Fixture {
        _dir: dir,
        root,
        store,
        process,
        services,
        state,
        token,
    }
}

use common::state_for;

impl Fixture {
    fn app(&self) -> Router {
        router(self.state.clone()).layer(MockConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40000))))
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        call(self.app(), &self.token, method, path, body).await
    }
}

/// A request carrying `token` and a JSON `body` (see `common::request`).
fn request(token: &str, method: &str, path: &str, body: Option<Value>) -> Request<Body> {
    let body = body.map(|b| b.to_string());
    common::request(method, path, Some(token), body.as_deref())
}

async fn call(
    app: Router,
    token: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let body = body.map(|b| b.to_string());
    common::call(app, method, path, Some(token), body.as_deref()).await
}

/// The `(event, data)` pairs of an SSE body.
fn sse_events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter_map(|block| {
            let mut event = None;
            let mut data = String::new();
            for line in block.lines() {
                if let Some(e) = line.strip_prefix("event: ") {
                    event = Some(e.to_string());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push_str(d);
                }
            }
            Some((event?, serde_json::from_str(&data).unwrap_or(Value::Null)))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_runs_the_loop_persists_the_session_and_bills_the_ledger_state14_state18() {
    let f = fixture("");
    let (status, agents) = f.call("GET", "/api/agents", None).await;
    assert_eq!(status, StatusCode::OK, "{agents}");
    assert_eq!(agents["agents"][0]["alias"], "main");

    let (status, answer) = f
        .call(
            "POST",
            "/api/agents/main/chat",
            Some(json!({"message": "write it"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["reply"], "Done writing.");
    assert_eq!(answer["session"], "Agent-main-http");
    assert_eq!(answer["tool_calls"], 1);
    assert_eq!(answer["input_tokens"], 220);
    // The reply carries every key the OpenAPI document promises (schemathesis cannot reach a
    // successful chat: its daemon has no provider).
    let (_, doc) = f.call("GET", "/api/openapi.json", None).await;
    let promised = &doc["paths"]["/api/agents/{alias}/chat"]["post"]["responses"]["200"]["content"]
        ["application/json"]["schema"]["required"];
    for key in promised.as_array().unwrap() {
        assert!(
            answer.get(key.as_str().unwrap()).is_some(),
            "{key} in {answer}"
        );
    }
    assert!(
        f.root
            .agent_workspace(&"main".parse().unwrap())
            .join("out.md")
            .is_file()
    );

    // The second turn streams as SSE.
    let response = f
        .app()
        .oneshot({
            let mut r = request(
                &f.token,
                "POST",
                "/api/agents/main/chat",
                Some(json!({"message": "again"})),
            );
            r.headers_mut()
                .insert("accept", "text/event-stream".parse().unwrap());
            r
        })
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let events = sse_events(&String::from_utf8_lossy(&bytes));
    let names: Vec<&str> = events.iter().map(|(e, _)| e.as_str()).collect();
    assert!(names.contains(&"delta"), "{names:?}");
    let (last, done) = events.last().unwrap();
    assert_eq!(last, "done");
    assert_eq!(done["reply"], "Second answer.");

    let (status, sessions) = f.call("GET", "/api/agents/main/sessions", None).await;
    assert_eq!(status, StatusCode::OK, "{sessions}");
    assert_eq!(sessions["sessions"][0]["key"], "Agent-main-http");
    assert_eq!(
        sessions["sessions"][0]["channel"], "gateway",
        "a session started over HTTP is labelled as the gateway's: {sessions}"
    );
    let (status, history) = f
        .call(
            "GET",
            "/api/agents/main/sessions/Agent-main-http?limit=2",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{history}");
    let messages = history["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["content"], "write it");
    let (status, rest) = f
        .call(
            "GET",
            &format!(
                "/api/agents/main/sessions/Agent-main-http?after={}",
                history["next_after"]
            ),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(rest["messages"].as_array().unwrap().len() >= 4, "{rest}");
    let (status, _) = f.call("GET", "/api/agents/main/sessions/nope", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let (status, costs) = f.call("GET", "/api/costs?agent=main", None).await;
    assert_eq!(status, StatusCode::OK, "{costs}");
    assert_eq!(costs["requests"], 3);
    assert_eq!(costs["per_agent"]["main"]["input_tokens"], 270);

    let (status, logs) = f.call("GET", "/api/logs?kind=turn_end&limit=1", None).await;
    assert_eq!(status, StatusCode::OK, "{logs}");
    assert_eq!(logs["events"].as_array().unwrap().len(), 1);
    assert_eq!(logs["events"][0]["agent"], "main");
    assert!(logs["next_before"].is_u64(), "{logs}");

    let (status, memory) = f
        .call("GET", "/api/agents/main/memory?q=anything", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{memory}");
    assert_eq!(memory["count"], 0);

    for (path, field) in [
        ("/api/agents/nobody/chat", None),
        ("/api/agents/main/chat", Some("message")),
    ] {
        let body = if field.is_some() {
            json!({"message": ""})
        } else {
            json!({"message": "x"})
        };
        let (status, err) = f.call("POST", path, Some(body)).await;
        match field {
            None => assert_eq!(status, StatusCode::NOT_FOUND, "{err}"),
            Some(field) => {
                assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
                assert_eq!(err["field"], field);
            }
        }
    }
    let (status, err) = f
        .call("POST", "/api/agents/main/chat", Some(json!({"message": 5})))
        .await;
    assert_eq!(
        (status, err["field"].clone()),
        (StatusCode::BAD_REQUEST, json!("message"))
    );
    let (status, err) = f.call("GET", "/api/costs?limit=0", None).await;
    assert_eq!(
        (status, err["field"].clone()),
        (StatusCode::BAD_REQUEST, json!("limit"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_agents_adds_through_the_config_lock_cfg3() {
    let f = fixture("");
    let (status, added) = f
        .call(
            "POST",
            "/api/agents",
            Some(json!({"alias": "helper", "provider": "demo"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{added}");
    assert!(
        f.store
            .snapshot()
            .agent(&"helper".parse().unwrap())
            .is_some()
    );
    assert!(
        std::fs::read_to_string(f.root.config_file())
            .unwrap()
            .contains("[agents.helper]")
    );
    let (status, again) = f
        .call("POST", "/api/agents", Some(json!({"alias": "helper"})))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{again}");
    assert_eq!(again["field"], "alias");
    let (status, bad) = f
        .call("POST", "/api/agents", Some(json!({"alias": "Bad Alias!"})))
        .await;
    assert_eq!(
        (status, bad["field"].clone()),
        (StatusCode::BAD_REQUEST, json!("alias"))
    );
}

/// A slow provider holds the session: one more turn waits and times out (408); with no room
/// to wait, a second turn is refused at once (429) (SESS-2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_session_answers_429_when_full_and_408_when_timed_out_sess2() {
    let fake = FakeOpenAi::start().unwrap();
    let slow = || FakeReply::Chat {
        text: vec!["slow ".into(), "answer".into()],
        calls: Vec::new(),
        usage: (1, 1),
        chunk_delay: Duration::from_millis(900),
    };
    for _ in 0..4 {
        fake.push(slow());
    }
    let extra = format!(
        "{}\n\n[agents.slow]\nprovider = \"fake\"\nmodel = \"m\"\nrisk_profile = \"test\"\n",
        fake.provider_toml("fake", "sk-test")
    );
    // The limits come from `[channels] session_queue_depth` and `session_queue_timeout_secs`.
    for (depth, timeout_secs, expected) in [
        (0, 5, StatusCode::TOO_MANY_REQUESTS),
        (1, 1, StatusCode::REQUEST_TIMEOUT),
    ] {
        let f = fixture(&format!(
            "{extra}\n[channels]\nsession_queue_depth = {depth}\nsession_queue_timeout_secs = {timeout_secs}\n"
        ));
        let first = {
            let (app, token) = (f.app(), f.token.clone());
            tokio::spawn(async move {
                call(
                    app,
                    &token,
                    "POST",
                    "/api/agents/slow/chat",
                    Some(json!({"message": "a"})),
                )
                .await
            })
        };
        // Wait until the first turn holds the slot.
        let key: warren_core::SessionKey = "Agent-slow-http".parse().unwrap();
        for _ in 0..200 {
            if f.state.host().queue().depth(&key) > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (status, err) = f
            .call(
                "POST",
                "/api/agents/slow/chat",
                Some(json!({"message": "b"})),
            )
            .await;
        assert_eq!(status, expected, "{err}");
        let (status, answer) = first.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(answer["reply"], "slow answer");
    }
}

/// A fixture whose `main` agent is supervised with `approval_timeout_secs = timeout`, and its
/// router.
fn supervised(timeout: u64) -> (Fixture, Router) {
    let f = fixture(&format!(
        "[risk_profiles.sup]\nautonomy = \"supervised\"\napproval_timeout_secs = {timeout}\n"
    ));
    tokio::task::block_in_place(|| {
        let mut txn = f.store.write_blocking().unwrap();
        txn.set(&"agents.main.risk_profile".parse().unwrap(), "sup".into())
            .unwrap();
        txn.commit().unwrap();
    });
    let state = state_for(&f.root, &f.store, &f.process, &f.services);
    let app = router(state).layer(MockConnectInfo(SocketAddr::from(([127, 0, 0, 1], 1))));
    (f, app)
}

/// `POST /api/approvals/{id}`.
async fn decide(app: &Router, token: &str, id: &str, approve: bool) -> (StatusCode, Value) {
    call(
        app.clone(),
        token,
        "POST",
        &format!("/api/approvals/{id}"),
        Some(json!({"approve": approve})),
    )
    .await
}

/// A supervised write waits in `GET /api/approvals` until decided over HTTP; approved runs,
/// denied and unanswered (timeout) do not (issue 8 §2, LOOP-1). The JSON chat answers 202 with
/// the turn and the approval as soon as the call waits; the outcome comes from
/// `GET /api/turns/{id}` (issue 16 §2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_over_http_approve_deny_and_time_out() {
    for (decision, expect_file) in [(Some(true), true), (Some(false), false), (None, false)] {
        let (f, app) = supervised(1);
        let (status, accepted) = call(
            app.clone(),
            &f.token,
            "POST",
            "/api/agents/main/chat",
            Some(json!({"message": "w"})),
        )
        .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
        let (_, list) = call(app.clone(), &f.token, "GET", "/api/approvals", None).await;
        assert_eq!(list["count"], 1, "{list}");
        let pending = list["pending"][0].clone();
        assert_eq!(pending["tool"], "file_write", "{pending}");
        assert_eq!(pending["agent"], "main");
        assert_eq!(accepted["approval"]["id"], pending["id"], "{accepted}");
        if let Some(approve) = decision {
            let id = pending["id"].as_str().unwrap();
            let (status, body) = decide(&app, &f.token, id, approve).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            let (status, _) = decide(&app, &f.token, id, approve).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "decided once only");
        }
        let turn = accepted["turn"].as_str().unwrap();
        let answer = turn_outcome(&app, &f.token, turn).await;
        assert_eq!(answer["status"], "done", "{answer}");
        let written = f
            .root
            .agent_workspace(&"main".parse().unwrap())
            .join("out.md")
            .is_file();
        assert_eq!(written, expect_file, "decision {decision:?}: {answer}");
        let (_, list) = call(app.clone(), &f.token, "GET", "/api/approvals", None).await;
        assert_eq!(list["count"], 0);
    }
}

/// Long-polls `GET /api/turns/{turn}` until the turn is no longer running or waiting.
async fn turn_outcome(app: &Router, token: &str, turn: &str) -> Value {
    for _ in 0..10 {
        let (status, body) = call(
            app.clone(),
            token,
            "GET",
            &format!("/api/turns/{turn}?wait=5"),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        if body["status"] == "done" || body["status"] == "failed" {
            return body;
        }
    }
    panic!("turn {turn} did not end within 50 s");
}

/// A JSON chat whose call waits for approval answers within 2 s with 202, the turn id and the
/// approval (not after the approval timeout); the turn reads `waiting_approval` until the call
/// is approved through the approvals API, then `done` with the body a 200 chat has — the reply,
/// the tool call made, the session — and the file is written (issue 16 §2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_chat_answers_202_while_an_approval_waits_and_the_turn_gives_the_result_issue16() {
    let (f, app) = supervised(30);
    let started = std::time::Instant::now();
    let (status, accepted) = call(
        app.clone(),
        &f.token,
        "POST",
        "/api/agents/main/chat",
        Some(json!({"message": "w", "session": "json-approval"})),
    )
    .await;
    let took = started.elapsed();
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    assert!(took < Duration::from_secs(2), "answered after {took:?}");
    let turn = accepted["turn"].as_str().unwrap().to_string();
    let approval = &accepted["approval"];
    assert_eq!(approval["tool"], "file_write", "{accepted}");
    assert_eq!(approval["timeout_secs"], 30);
    assert!(
        approval["summary"].as_str().unwrap().contains("out.md"),
        "{approval}"
    );
    let id = approval["id"].as_str().unwrap().to_string();
    assert_eq!(accepted["poll"], format!("GET /api/turns/{turn}"));

    let (status, now) = call(
        app.clone(),
        &f.token,
        "GET",
        &format!("/api/turns/{turn}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{now}");
    assert_eq!(now["status"], "waiting_approval", "{now}");
    assert_eq!(now["approval"]["id"], id.as_str());
    assert_eq!(now["session"], "json-approval");
    assert!(
        !f.root
            .agent_workspace(&"main".parse().unwrap())
            .join("out.md")
            .exists(),
        "nothing written before the approval"
    );

    let (status, body) = decide(&app, &f.token, &id, true).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let done = turn_outcome(&app, &f.token, &turn).await;
    assert_eq!(done["status"], "done", "{done}");
    let result = &done["result"];
    assert_eq!(result["reply"], "Done writing.", "{done}");
    assert_eq!(result["session"], "json-approval");
    assert_eq!(result["tool_calls"], 1, "{done}");
    let written = f
        .root
        .agent_workspace(&"main".parse().unwrap())
        .join("out.md");
    assert_eq!(std::fs::read_to_string(written).unwrap(), "hi");

    // A turn that needs no approval still answers 200 with the outcome.
    let (status, answer) = call(
        app.clone(),
        &f.token,
        "POST",
        "/api/agents/main/chat",
        Some(json!({"message": "again", "session": "json-approval"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["reply"], "Second answer.");

    let (status, err) = call(
        app.clone(),
        &f.token,
        "GET",
        "/api/turns/000000000000000000000000",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{err}");
    assert_eq!(err["error"], "unknown_turn");
}

/// Over SSE a call waiting for approval is announced at once as an `approval` event carrying
/// the id to decide it by (a JSON caller gets it in a 202, see above);
/// approving that id lets the same stream go on to the call's result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_chat_announces_a_pending_approval_with_the_id_to_decide_it() {
    let (f, app) = supervised(30);
    let mut chat = request(
        &f.token,
        "POST",
        "/api/agents/main/chat",
        Some(json!({"message": "w"})),
    );
    chat.headers_mut()
        .insert("accept", "text/event-stream".parse().unwrap());
    let response = app.clone().oneshot(chat).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut stream = response.into_body().into_data_stream();
    let mut text = String::new();
    let approval = loop {
        let chunk = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("an approval event long before the 30 s timeout")
            .expect("the stream is open while the call waits")
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
        if let Some((_, data)) = sse_events(&text).into_iter().find(|(e, _)| e == "approval") {
            break data;
        }
    };
    assert_eq!(approval["name"], "file_write", "{approval}");
    assert_eq!(approval["timeout_secs"], 30);
    let id = approval["approval"].as_str().unwrap().to_string();
    assert_eq!(approval["decide"], format!("POST /api/approvals/{id}"));
    let (_, listed) = call(app.clone(), &f.token, "GET", "/api/approvals", None).await;
    assert_eq!(listed["pending"][0]["id"], id.as_str(), "{listed}");

    let (status, body) = decide(&app, &f.token, &id, true).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("the turn ends after the approval")
    {
        text.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
    }
    let events = sse_events(&text);
    let names: Vec<&str> = events.iter().map(|(e, _)| e.as_str()).collect();
    let at = |name: &str| names.iter().position(|n| *n == name);
    assert!(at("approval") < at("tool_result"), "{names:?}");
    let result = &events[at("tool_result").unwrap()].1;
    assert_eq!(result["ok"], true, "{result}");
    assert_eq!(names.last(), Some(&"done"), "{names:?}");
    let written = f
        .root
        .agent_workspace(&"main".parse().unwrap())
        .join("out.md");
    assert_eq!(std::fs::read_to_string(written).unwrap(), "hi");
}

/// `GET /api/events` streams the live trace even with `[log] persistence = "none"` (STATE-13).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_events_stream_without_persistence_state13() {
    let f = fixture("[log]\npersistence = \"none\"\n");
    let response = f
        .app()
        .oneshot(request(
            &f.token,
            "GET",
            "/api/events?kind=turn_start",
            None,
        ))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body().into_data_stream();
    let (status, _) = f
        .call(
            "POST",
            "/api/agents/main/chat",
            Some(json!({"message": "hello"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let mut seen = String::new();
    let found = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(Ok(chunk)) = body.next().await {
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if seen.contains("turn_start") {
                return true;
            }
        }
        false
    })
    .await
    .unwrap_or(false);
    assert!(found, "{seen}");
    assert!(!seen.contains("turn_end"), "filtered by kind: {seen}");
    assert!(!f.root.runtime_trace().exists(), "nothing persisted");
    // The stream ends when the generation's listener stops.
    f.state.shutdown().cancel();
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while body.next().await.is_some() {}
    })
    .await;
    assert!(ended.is_ok());
}

/// Reload swaps the cost rates; the old record keeps the rate it was priced with (STATE-14).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_reprices_new_requests_and_keeps_old_records_state14() {
    let f = fixture("[cost.rates.script]\ninput_per_mtok = 1.0\noutput_per_mtok = 1.0\n");
    let (status, _) = f
        .call(
            "POST",
            "/api/agents/main/chat",
            Some(json!({"message": "one", "session": "s1"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let text = std::fs::read_to_string(f.root.config_file()).unwrap();
    std::fs::write(
        f.root.config_file(),
        text.replace("input_per_mtok = 1.0", "input_per_mtok = 100.0"),
    )
    .unwrap();
    f.store.reload().await.unwrap();
    let state = state_for(&f.root, &f.store, &f.process, &f.services);
    let app = router(state).layer(MockConnectInfo(SocketAddr::from(([127, 0, 0, 1], 1))));
    let (status, _) = call(
        app.clone(),
        &f.token,
        "POST",
        "/api/agents/main/chat",
        Some(json!({"message": "two", "session": "s2"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (_, costs) = call(app, &f.token, "GET", "/api/costs", None).await;
    let records = costs["records"].as_array().unwrap();
    let rates: Vec<f64> = records
        .iter()
        .map(|r| r["rate"]["input_per_mtok"].as_f64().unwrap())
        .collect();
    assert_eq!(rates.first(), Some(&1.0), "{costs}");
    assert_eq!(rates.last(), Some(&100.0), "{costs}");
}

/// The listener serves before the agents are probed and the session store opens: component
/// health says `starting` until then, and `ok` once both are ready (STATE-17).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_says_starting_until_agents_and_sessions_are_ready_state17() {
    let f = fixture("");
    let generation = Generation {
        root: f.root.clone(),
        store: f.store.clone(),
        snapshot: f.store.snapshot(),
        reload: ReloadTrigger::default(),
        started_at: std::time::SystemTime::now(),
        host: Arc::new(AgentHost::new(
            &f.root,
            f.store.snapshot(),
            Arc::clone(&f.services),
        )),
        jobs: Arc::default(),
    };
    let state = AppState::starting(&generation, Arc::clone(&f.process), None);
    let app =
        || router(state.clone()).layer(MockConnectInfo(SocketAddr::from(([127, 0, 0, 1], 1))));
    let (status, health) = call(app(), &f.token, "GET", "/api/health", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(health["status"], "starting", "{health}");
    assert_eq!(health["components"]["agents"]["main"]["status"], "starting");
    assert_eq!(health["components"]["sessions"]["status"], "starting");

    let reports = warren_gateway::state::agent_reports(&f.store.snapshot(), &f.root);
    state.set_agents(reports);
    generation.host.open_sessions().await;
    let (_, health) = call(app(), &f.token, "GET", "/api/health", None).await;
    assert_eq!(
        health["components"]["agents"]["main"]["status"], "ok",
        "{health}"
    );
    assert_eq!(health["components"]["sessions"]["status"], "ok", "{health}");
    assert_eq!(health["status"], "ok", "{health}");
}

/// A response head not ready within the route's time limit is a 408 naming the route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_over_its_time_limit_gets_408() {
    let fake = FakeOpenAi::start().unwrap();
    fake.push(FakeReply::Chat {
        text: vec!["late".into()],
        calls: Vec::new(),
        usage: (1, 1),
        chunk_delay: Duration::from_millis(800),
    });
    let extra = format!(
        "{}\n\n[agents.slow]\nprovider = \"fake\"\nmodel = \"m\"\nrisk_profile = \"test\"\n",
        fake.provider_toml("fake", "sk-test")
    );
    let f = fixture(&extra);
    let limits = warren_gateway::TimeLimits {
        request: Duration::from_secs(30),
        chat: Duration::from_millis(200),
    };
    let app = warren_gateway::router_with_limits(f.state.clone(), limits)
        .layer(MockConnectInfo(SocketAddr::from(([127, 0, 0, 1], 1))));
    let (status, err) = call(
        app,
        &f.token,
        "POST",
        "/api/agents/slow/chat",
        Some(json!({"message": "x"})),
    )
    .await;
    assert_eq!(status, StatusCode::REQUEST_TIMEOUT, "{err}");
    assert_eq!(err["error"], "request_timeout");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("/api/agents/slow/chat"),
        "{err}"
    );
}

/// SESS-1 (issue 14): agent `bee` naming `main`'s session is refused with 409 before anything
/// is loaded or appended, over JSON and SSE alike; the message names the owner. Without a
/// session, each agent gets its own default key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_agents_session_is_refused_with_409_sess1() {
    let f = fixture("[agents.bee]\nprovider = \"demo\"\nrisk_profile = \"test\"\n");
    let (status, answer) = f
        .call(
            "POST",
            "/api/agents/main/chat",
            Some(json!({"message": "my password is HUNTER2", "session": "private-a"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");

    let body = json!({"message": "what was said before?", "session": "private-a"});
    let (status, err) = f
        .call("POST", "/api/agents/bee/chat", Some(body.clone()))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{err}");
    assert_eq!(err["error"], "session_owned_by_other_agent", "{err}");
    let message = err["message"].as_str().unwrap();
    assert!(
        message.contains("session 'private-a' belongs to agent 'main'"),
        "{message}"
    );
    assert!(!err.to_string().contains("HUNTER2"));

    let response = f
        .app()
        .oneshot({
            let mut r = request(&f.token, "POST", "/api/agents/bee/chat", Some(body));
            r.headers_mut()
                .insert("accept", "text/event-stream".parse().unwrap());
            r
        })
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CONFLICT);
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let err: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(err["error"], "session_owned_by_other_agent", "{err}");

    // Nothing of bee's reached main's session, and bee has no session of its own yet.
    let (status, history) = f
        .call("GET", "/api/agents/main/sessions/private-a", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{history}");
    let messages = history["messages"].as_array().unwrap();
    assert!(
        messages
            .iter()
            .all(|m| m["content"] != "what was said before?"),
        "{history}"
    );
    let (_, bee) = f.call("GET", "/api/agents/bee/sessions", None).await;
    assert_eq!(bee["count"], 0, "{bee}");

    // Default keys are per agent.
    let (status, answer) = f
        .call(
            "POST",
            "/api/agents/bee/chat",
            Some(json!({"message": "hi"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["session"], "Agent-bee-http");
}
