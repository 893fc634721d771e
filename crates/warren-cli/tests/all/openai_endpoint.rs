//! The OpenAI-compatible endpoint (issue 27, BEYOND-14) with the official `openai` Python
//! package as the client, against a live `warren daemon` whose agents use the fake OpenAI
//! server: list models, a non-streaming and a streaming completion (usage in the final chunk), a
//! small Responses API call, a multi-turn conversation resent in full (stored once, not
//! duplicated), a diverging history (409), another agent's session (409), client tools (400), an
//! unknown model (404), a revoked token (401), and a request the SDK retries after its timeout
//! while the first attempt's turn runs (run once, stored once).
//! The Python client is required: `.ci/prepare` installs it; a missing one fails the test.

use crate::common::bin;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use warren_testkit::fake_llm::{FakeOpenAi, FakeReply};
use warren_testkit::{DaemonChild, TempRoot, free_port, http, pair, text};

type R = Result<(), Box<dyn std::error::Error>>;

const WAIT: Duration = Duration::from_secs(20);

fn config(fake: &FakeOpenAi, port: u16) -> String {
    format!(
        r#"
[agents.main]
provider = "fake"
model = "gpt-test"

[agents.helper]
provider = "fake"
model = "gpt-test"

{provider}

[gateway]
port = {port}

[gateway.openai]
enabled = true
"#,
        provider = fake.provider_toml("fake", "sk-e2e-secret-value")
    )
}

fn streamed(parts: &[&str]) -> FakeReply {
    FakeReply::Chat {
        text: parts.iter().map(|p| (*p).to_string()).collect(),
        calls: Vec::new(),
        usage: (10, 5),
        chunk_delay: Duration::ZERO,
    }
}

/// The visible messages of a session as `(role, content)`, through the API.
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

#[test]
fn the_openai_python_client_talks_to_agents_through_the_gateway_issue27() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    root.write_config(&config(&fake, port))?;
    // The fake's replies, in the order the script asks.
    fake.push(FakeReply::text("Hello from the fake."));
    fake.push(streamed(&["Streamed", " ", "reply."]));
    for answer in ["Answer one.", "Answer two.", "Answer three.", "Responded."] {
        fake.push(FakeReply::text(answer));
    }
    // The retried request's one run (4 events 1.25 s apart: 5 s), and what a second run would
    // answer.
    fake.push(FakeReply::Chat {
        text: vec!["Slow and steady.".to_string()],
        calls: Vec::new(),
        usage: (10, 5),
        chunk_delay: Duration::from_millis(1250),
    });
    fake.push(FakeReply::text("A second run."));
    let mut daemon = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    daemon.wait_for("warren daemon ready", WAIT)?;
    let token = pair(&root, bin(), port, "client")?;
    let revoked = pair(&root, bin(), port, "old-laptop")?;
    let out = root.run(bin(), &["tokens", "list", "--json"])?;
    let listed: Value = serde_json::from_str(&text(&out).0)?;
    let id = listed
        .as_array()
        .ok_or("no token list")?
        .iter()
        .find(|d| d["name"] == "old-laptop")
        .and_then(|d| d["id"].as_str())
        .ok_or("no old-laptop in `warren tokens list`")?
        .to_string();
    let out = root.run(bin(), &["tokens", "revoke", &id])?;
    assert!(out.status.success(), "{:?}", text(&out));
    daemon.wait_for("gateway listening", WAIT)?;

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/all/openai_endpoint.py");
    let base = format!("http://127.0.0.1:{port}/v1");
    let run = Command::new("python3")
        .arg(&script)
        .args([base.as_str(), token.as_str(), revoked.as_str()])
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

    // Resent in full three times, stored once: no duplicates.
    let multi = stored(port, &token, "oai-multi")?;
    let expected: Vec<(String, String)> = [
        ("user", "one"),
        ("assistant", "Answer one."),
        ("user", "two"),
        ("assistant", "Answer two."),
        ("user", "three"),
        ("assistant", "Answer three."),
    ]
    .iter()
    .map(|(r, c)| ((*r).to_string(), (*c).to_string()))
    .collect();
    pretty_assertions::assert_eq!(multi, expected);
    // The derived session (token, user and model) holds its one exchange.
    let plain = report["plain_session"].as_str().ok_or("no plain session")?;
    pretty_assertions::assert_eq!(
        stored(port, &token, plain)?,
        vec![
            ("user".to_string(), "Say hello".to_string()),
            ("assistant".to_string(), "Hello from the fake.".to_string())
        ]
    );
    // The retried request ran once: its message and answer are stored once.
    pretty_assertions::assert_eq!(
        stored(port, &token, "oai-retry")?,
        vec![
            ("user".to_string(), "take your time".to_string()),
            ("assistant".to_string(), "Slow and steady.".to_string())
        ]
    );
    // Each completion was one provider request: refused calls never reached the provider, and
    // the retry joined its first attempt.
    assert_eq!(fake.requests().len(), 7);

    daemon.signal("TERM")?;
    assert_eq!(daemon.wait(WAIT)?.code(), Some(0));
    Ok(())
}
