//! Helpers the warren-cli suites share: the binary under test, `--json` commands and polling.

mod pty;
mod tmpfs;

pub use pty::Pty;
pub use tmpfs::Tmpfs;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use warren_testkit::fake_llm::{FakeCall, FakeOpenAi, FakeReply};
use warren_testkit::otlp::ReceivedSpan;
use warren_testkit::{DaemonChild, TempRoot, pair, text};

/// The `warren` binary cargo built for these tests.
pub fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_warren"))
}

/// Runs `warren --json ARGS` in `root` and parses its stdout; a failing command is an error
/// carrying its output.
pub fn json_of(root: &TempRoot, args: &[&str]) -> Result<Value, Box<dyn std::error::Error>> {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = root.run(bin(), &all)?;
    let (stdout, stderr) = text(&out);
    if !out.status.success() {
        return Err(format!("warren {args:?} failed: {stdout}{stderr}").into());
    }
    Ok(serde_json::from_str(&stdout)?)
}

/// Polls `check` every 100 ms until it holds, failing with `what` after `timeout`.
pub fn wait_until(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<bool, Box<dyn std::error::Error>>,
) -> Result<(), Box<dyn std::error::Error>> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if check()? {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!("timed out waiting for {what}").into())
}

/// A config with agent `main` on the fake OpenAI server (`[providers.fake]` of
/// [`FakeOpenAi::provider_toml`]) and the gateway on `port`: `sections` go right after the
/// provider's keys (so they may add more of them), before `[gateway]`, `extra` after it.
pub fn fake_config(
    fake: &FakeOpenAi,
    api_key: &str,
    port: u16,
    sections: &str,
    extra: &str,
) -> String {
    format!(
        r#"
[agents.main]
provider = "fake"
model = "gpt-test"

{provider}
{sections}
[gateway]
port = {port}
{extra}
"#,
        provider = fake.provider_toml("fake", api_key)
    )
}

/// `warren daemon` in `root`, once it has logged that it is ready (30 s at most).
pub fn ready_daemon(root: &TempRoot) -> Result<DaemonChild, Box<dyn std::error::Error>> {
    let mut daemon = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    daemon.wait_for("warren daemon ready", Duration::from_secs(30))?;
    Ok(daemon)
}

/// A ready daemon and a gateway token paired as `device`.
pub fn paired_daemon(
    root: &TempRoot,
    port: u16,
    device: &str,
) -> Result<(DaemonChild, String), Box<dyn std::error::Error>> {
    let daemon = ready_daemon(root)?;
    let token = pair(root, bin(), port, device)?;
    Ok((daemon, token))
}

/// The value of the sample `series` (name and labels as written) in `/metrics` text.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// The content of the tool result `call_id` sent back to the model (the last request holding it).
pub fn tool_result(fake: &FakeOpenAi, call_id: &str) -> Result<String, Box<dyn std::error::Error>> {
    for req in fake.requests().iter().rev() {
        if let Some(m) = req.body["messages"].as_array().and_then(|ms| {
            ms.iter()
                .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
        }) {
            return Ok(m["content"].as_str().unwrap_or_default().to_string());
        }
    }
    Err(format!("no tool result for {call_id}").into())
}

/// One tool round (`file_read` of `note.md`), then `reply`: 300 input and 30 output tokens.
pub fn push_note_turn(fake: &FakeOpenAi, reply: &str) {
    fake.push(
        FakeReply::calls(
            "",
            vec![FakeCall::new(
                "call-1",
                "file_read",
                serde_json::json!({"path": "note.md"}),
            )],
        )
        .with_usage(100, 10),
    );
    fake.push(FakeReply::text(reply).with_usage(200, 20));
}

/// A span's attribute `key` (`Null` when it has none).
pub fn span_attr<'a>(span: &'a ReceivedSpan, key: &str) -> &'a Value {
    span.attributes.get(key).unwrap_or(&Value::Null)
}
