//! OpenAI clients that hold many conversations through one key (issue 37 §2), with the
//! official `openai` Python package against a live `warren daemon`: 12 parallel unrelated
//! conversations get 12 sessions and no 429; a conversation resent in full (one turn streamed)
//! stays in one session whose stored history holds each message once; an edited earlier
//! message starts a new session (not 409) whose first turn quotes the conversation; an unknown
//! `/v1` path answers 404 in OpenAI's error shape; `max_tokens` / `max_completion_tokens` reach
//! the provider with their turn. The Python client is required: `.ci/prepare`
//! installs it; a missing one fails the test.

use crate::common::bin;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use warren_testkit::fake_llm::{FakeOpenAi, FakeReply};
use warren_testkit::{DaemonChild, TempRoot, free_port, http, pair, text};

type R = Result<(), Box<dyn std::error::Error>>;

const WAIT: Duration = Duration::from_secs(20);

/// A reply streamed in two parts 500 ms apart, so concurrent turns overlap.
fn slow(reply: &str) -> FakeReply {
    FakeReply::Chat {
        text: vec![reply.to_string(), String::new()],
        calls: Vec::new(),
        usage: (10, 5),
        chunk_delay: Duration::from_millis(500),
    }
}

/// The messages of a session as `(role, content)`, through the API.
fn stored(
    port: u16,
    token: &str,
    key: &str,
) -> Result<Vec<(String, String)>, Box<dyn std::error::Error>> {
    let (status, page) = http(
        port,
        "GET",
        &format!("/api/agents/main/sessions/{key}?limit=1000"),
        Some(token),
        "",
    )?;
    assert_eq!(status, 200, "{page}");
    Ok(page["messages"]
        .as_array()
        .ok_or("no messages")?
        .iter()
        .map(|m| {
            let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (s(&m["role"]), s(&m["content"]))
        })
        .collect())
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(r, c)| ((*r).to_string(), (*c).to_string()))
        .collect()
}

#[test]
fn an_openai_client_holding_many_conversations_gets_one_session_each_issue37() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    root.write_config(&format!(
        "[agents.main]\nprovider = \"fake\"\nmodel = \"gpt-test\"\n\n{}\nmax_output_tokens = 500\n\n[gateway]\nport = {port}\n\n[gateway.openai]\nenabled = true\n",
        fake.provider_toml("fake", "sk-e2e-secret-value")
    ))?;
    for i in 0..12 {
        fake.push_when(
            &format!("parallel-{i:02}"),
            slow(&format!("Parallel reply {i}.")),
        );
    }
    fake.push_when("thread-one", FakeReply::text("Answer one."));
    fake.push_when("thread-two", slow("Answer two."));
    fake.push_when("thread-three", FakeReply::text("Answer three."));
    fake.push_when("thread-edited", FakeReply::text("Edited answer."));
    let mut daemon = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    daemon.wait_for("warren daemon ready", WAIT)?;
    let token = pair(&root, bin(), port, "client")?;

    // An unknown `/v1` path: OpenAI's error shape.
    let (status, body) = http(port, "POST", "/v1/embeddings", Some(&token), "{}")?;
    assert_eq!(status, 404, "{body}");
    assert_eq!(
        body,
        json!({"error": {
            "message": body["error"]["message"].as_str().ok_or("no message")?,
            "type": "invalid_request_error",
            "param": null,
            "code": "unknown_url",
        }})
    );

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/all/openai_threads.py");
    let base = format!("http://127.0.0.1:{port}/v1");
    let run = Command::new("python3")
        .arg(&script)
        .args([base.as_str(), token.as_str()])
        .output()
        .map_err(|e| {
            format!("python3 could not be started ({e}); install python3 and `python3 -m pip install openai` (.ci/prepare does)")
        })?;
    let (stdout, stderr) = text(&run);
    assert!(
        run.status.success(),
        "the openai client script failed (needs `python3 -m pip install openai`; .ci/prepare installs it):\n{stderr}\ndaemon:\n{}",
        daemon.stderr_seen().join("\n")
    );
    let report: Value = serde_json::from_str(stdout.trim())?;
    eprintln!("openai client: {report}");

    // Each parallel conversation is its own session, holding its one exchange.
    let parallel = report["parallel"]
        .as_array()
        .ok_or("no parallel sessions")?;
    for (i, key) in parallel.iter().enumerate() {
        let key = key.as_str().ok_or("no session key")?;
        pretty_assertions::assert_eq!(
            stored(port, &token, key)?,
            pairs(&[
                ("user", &format!("parallel-{i:02}")),
                ("assistant", &format!("Parallel reply {i}.")),
            ])
        );
    }
    // The conversation resent in full three times: stored once, no duplicates.
    let thread = report["thread"].as_str().ok_or("no thread session")?;
    pretty_assertions::assert_eq!(
        stored(port, &token, thread)?,
        pairs(&[
            ("user", "thread-one"),
            ("assistant", "Answer one."),
            ("user", "thread-two"),
            ("assistant", "Answer two."),
            ("user", "thread-three"),
            ("assistant", "Answer three."),
        ])
    );
    // The edited conversation: a new session whose first turn quotes what the client sent, so
    // the agent answered in context.
    let branch = report["branch"].as_str().ok_or("no branch session")?;
    let edited = stored(port, &token, branch)?;
    assert_eq!(edited.len(), 2, "{edited:?}");
    assert!(
        edited[0]
            .1
            .contains("user: thread-one, edited\nassistant: Answer one.\n")
            && edited[0].1.ends_with("thread-edited"),
        "{edited:?}"
    );
    assert_eq!(
        edited[1],
        ("assistant".to_string(), "Edited answer.".to_string())
    );
    // One provider request per turn: 12 + 3 + 1; the provider's `max_output_tokens` (500)
    // bounds every request (issue 37 §3), the client's smaller `max_tokens` and
    // `max_completion_tokens` go to the provider with their turn.
    let requests = fake.requests();
    assert_eq!(requests.len(), 16);
    let cap_of = |needle: &str| {
        requests
            .iter()
            .find(|r| {
                r.body["messages"]
                    .as_array()
                    .and_then(|m| m.last())
                    .is_some_and(|m| m["content"].as_str() == Some(needle))
            })
            .map(|r| r.body["max_tokens"].clone())
    };
    assert_eq!(cap_of("thread-one"), Some(json!(500)));
    assert_eq!(cap_of("parallel-00"), Some(json!(500)));
    assert_eq!(cap_of("thread-two"), Some(json!(7)));
    assert_eq!(cap_of("thread-three"), Some(json!(9)));

    daemon.signal("TERM")?;
    assert_eq!(daemon.wait(WAIT)?.code(), Some(0));
    Ok(())
}
