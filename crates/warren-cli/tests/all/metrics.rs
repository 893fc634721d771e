//! Observability (issue 25; STATE-13, STATE-14, STATE-17) checked against real parts: Debian's
//! `prometheus` server scrapes a live `warren daemon` (through the gateway with a bearer token,
//! and through the token-less `[metrics] port` listener), and PromQL over Prometheus's HTTP API
//! returns the turn, token and tool-call counts of a chat over the fake OpenAI server; the
//! OTLP/HTTP exporter sends real protobuf to the test kit's receiver, with GenAI attributes and
//! no message text unless `capture_content = true` (and never a configured secret); the memory
//! self-watch warns once past its ceiling.
//!
//! The `prometheus` binary is required: `.ci/prepare` installs it; a missing one fails.

use crate::common::{self, bin, push_note_turn, span_attr, wait_until};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use warren_testkit::fake_llm::{FakeCall, FakeOpenAi, FakeReply};
use warren_testkit::otlp::{OtlpReceiver, ReceivedSpan};
use warren_testkit::{HttpText, TempRoot, free_port, http, http_text};

type R = Result<(), Box<dyn std::error::Error>>;

const WAIT: Duration = Duration::from_secs(30);
const KEY: &str = "sk-metrics-e2e-secret-4f9a2b7c";
const NOTE: &str = "the note says NOTE-BODY-7731";

fn config(fake: &FakeOpenAi, port: u16, extra: &str) -> String {
    let rates = "\n[cost.rates.\"gpt-test\"]\ninput_per_mtok = 1.0\noutput_per_mtok = 2.0\n";
    common::fake_config(fake, KEY, port, rates, extra)
}

/// The agent's workspace with the note the tool reads (it also holds the provider key, so a
/// captured tool result would carry it if spans were not redacted).
fn write_note(root: &TempRoot) -> std::io::Result<()> {
    let ws = root.path().join("agents/main/workspace");
    std::fs::create_dir_all(&ws)?;
    std::fs::write(ws.join("note.md"), format!("{NOTE}; key {KEY}\n"))
}

/// A Prometheus server (Debian's `prometheus`) killed when dropped.
struct Prometheus {
    child: Child,
    port: u16,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    fn start(dir: &Path, scrape_config: &str) -> Result<Self, Box<dyn std::error::Error>> {
        let port = free_port()?;
        let config = dir.join("prometheus.yml");
        std::fs::write(&config, scrape_config)?;
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!("the `prometheus` server could not be started ({e}); install Debian's `prometheus` package (.ci/prepare does)")
            })?;
        let p = Self { child, port };
        wait_until("prometheus ready", WAIT, || {
            Ok(http_text(p.port, "GET", "/-/ready", None, "").is_ok_and(|a| a.status == 200))
        })?;
        Ok(p)
    }

    /// An instant PromQL query over the HTTP API: the vector's samples as (labels, value).
    fn query(&self, promql: &str) -> Result<Vec<(Value, f64)>, Box<dyn std::error::Error>> {
        let encoded: String = promql
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' | b'-' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        let (status, body) = http(
            self.port,
            "GET",
            &format!("/api/v1/query?query={encoded}"),
            None,
            "",
        )?;
        if status != 200 || body["status"] != "success" {
            return Err(format!("query {promql}: {status} {body}").into());
        }
        Ok(body["data"]["result"]
            .as_array()
            .ok_or("no result")?
            .iter()
            .map(|s| {
                let v = s["value"][1]
                    .as_str()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(f64::NAN);
                (s["metric"].clone(), v)
            })
            .collect())
    }

    /// The single value of `promql`, once Prometheus has it.
    fn value(&self, promql: &str) -> Result<f64, Box<dyn std::error::Error>> {
        match self.query(promql)?.as_slice() {
            [(_, v)] => Ok(*v),
            other => Err(format!("{promql}: expected one sample, got {other:?}").into()),
        }
    }
}

#[test]
fn prometheus_scrapes_turn_token_and_tool_counts_after_a_chat_issue25() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    let open_port = free_port()?;
    root.write_config(&config(
        &fake,
        port,
        &format!("\n[metrics]\nport = {open_port}\n"),
    ))?;
    write_note(&root)?;
    // One round with the note, a path outside the workspace (refused by the policy) and a
    // tool name the model made up (free text: it must not become a label value).
    fake.push(
        FakeReply::calls(
            "",
            vec![
                FakeCall::new("call-1", "file_read", json!({"path": "note.md"})),
                FakeCall::new("call-2", "file_read", json!({"path": "/etc/passwd"})),
                FakeCall::new("call-3", "made_up_tool_9f3", json!({})),
            ],
        )
        .with_usage(100, 10),
    );
    fake.push(FakeReply::text("The note is read.").with_usage(200, 20));
    let (mut daemon, token) = common::paired_daemon(&root, port, "prometheus")?;

    // The gateway's /metrics needs the token; the separate listener does not, and serves
    // nothing else.
    assert_eq!(http_text(port, "GET", "/metrics", None, "")?.status, 401);
    assert_eq!(
        http_text(open_port, "GET", "/api/health", None, "")?.status,
        404,
        "the metrics port serves only /metrics"
    );

    let (status, chat) = http(
        port,
        "POST",
        "/api/agents/main/chat",
        Some(&token),
        r#"{"message": "read note.md", "session": "private-session-key-9123"}"#,
    )?;
    assert_eq!(
        (status, chat["tool_calls"].clone()),
        (200, json!(3)),
        "{chat}"
    );

    let dir = tempfile::tempdir()?;
    let prometheus = Prometheus::start(
        dir.path(),
        &format!(
            r#"global:
  scrape_interval: 1s
scrape_configs:
  - job_name: warren
    metrics_path: /metrics
    authorization:
      credentials: "{token}"
    static_configs:
      - targets: ["127.0.0.1:{port}"]
  - job_name: warren-open
    metrics_path: /metrics
    static_configs:
      - targets: ["127.0.0.1:{open_port}"]
"#
        ),
    )?;
    wait_until("both targets scraped", WAIT, || {
        Ok(prometheus
            .query(r#"warren_turns_total{agent="main",channel="gateway",outcome="ok"}"#)?
            .len()
            == 2)
    })?;
    for job in ["warren", "warren-open"] {
        let q = |metric: &str| metric.replace("JOB", job);
        assert_eq!(prometheus.value(&q(r#"up{job="JOB"}"#))?, 1.0);
        assert_eq!(
            prometheus.value(&q(
                r#"warren_turns_total{job="JOB",agent="main",channel="gateway",outcome="ok"}"#
            ))?,
            1.0
        );
        assert_eq!(
            prometheus.value(&q(
                r#"warren_turn_duration_seconds_count{job="JOB",agent="main"}"#
            ))?,
            1.0
        );
        assert_eq!(
            prometheus.value(&q(
                r#"warren_provider_requests_total{job="JOB",provider="fake",model="gpt-test",status="ok"}"#
            ))?,
            2.0
        );
        assert_eq!(
            prometheus.value(&q(
                r#"warren_provider_tokens_total{job="JOB",agent="main",model="gpt-test",direction="input"}"#
            ))?,
            300.0
        );
        assert_eq!(
            prometheus.value(&q(
                r#"warren_provider_tokens_total{job="JOB",agent="main",model="gpt-test",direction="output"}"#
            ))?,
            30.0
        );
        assert_eq!(
            prometheus.value(&q(
                r#"warren_tool_calls_total{job="JOB",agent="main",tool="file_read",outcome="ok"}"#
            ))?,
            1.0
        );
        for (tool, outcome) in [("file_read", "error"), ("unknown", "error")] {
            assert_eq!(
                prometheus.value(&format!(
                    r#"warren_tool_calls_total{{job="{job}",agent="main",tool="{tool}",outcome="{outcome}"}}"#
                ))?,
                1.0,
                "{tool} {outcome}"
            );
        }
        assert_eq!(
            prometheus.value(&q(
                r#"warren_sandbox_denials_total{job="JOB",agent="main",layer="policy"}"#
            ))?,
            1.0,
            "the read outside the workspace was refused by the policy"
        );
        // 300 input tokens at $1/Mtok + 30 output at $2/Mtok.
        let cost = prometheus.value(&q(r#"warren_cost_usd_total{job="JOB",agent="main"}"#))?;
        assert!((cost - 0.00036).abs() < 1e-9, "cost {cost}");
        assert_eq!(
            prometheus.value(&q(r#"warren_session_queue_depth{job="JOB",agent="main"}"#))?,
            0.0,
            "the turn left the queue"
        );
        let rss = prometheus.value(&q(r#"warren_process_resident_memory_bytes{job="JOB"}"#))?;
        assert!(rss > 1_000_000.0, "rss {rss}");
        let build = prometheus.query(&q(r#"warren_build_info{job="JOB"}"#))?;
        assert_eq!(
            build.first().map(|(m, v)| (m["version"].clone(), *v)),
            Some((json!(env!("CARGO_PKG_VERSION")), 1.0))
        );
    }
    // Bounded labels: the session key and the message text are no label value anywhere.
    let HttpText {
        status,
        content_type,
        body: text,
    } = http_text(port, "GET", "/metrics", Some(&token), "")?;
    assert_eq!(status, 200);
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    for private in [
        "private-session-key-9123",
        "read note.md",
        "made_up_tool_9f3",
        "/etc/passwd",
        KEY,
    ] {
        assert!(!text.contains(private), "{private} in /metrics:\n{text}");
    }
    daemon.signal("TERM")?;
    assert_eq!(daemon.wait(WAIT)?.code(), Some(0));
    Ok(())
}

/// The spans of the first trace that has a finished turn with a tool call.
fn turn_spans(spans: &[ReceivedSpan]) -> Option<(ReceivedSpan, Vec<ReceivedSpan>)> {
    let turn = spans.iter().find(|s| s.name == "invoke_agent main")?;
    let children: Vec<ReceivedSpan> = spans
        .iter()
        .filter(|s| s.trace_id == turn.trace_id && s.parent_span_id == turn.span_id)
        .cloned()
        .collect();
    (children.len() >= 3).then(|| (turn.clone(), children))
}

#[test]
fn otlp_spans_carry_genai_attributes_and_no_text_unless_captured_issue25() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let receiver = OtlpReceiver::start()?;
    let port = free_port()?;
    let telemetry = |capture: bool| {
        format!(
            "\n[telemetry]\notlp_endpoint = \"{}\"\nexport_interval_ms = 200\ncapture_content = {capture}\nservice_name = \"warren-e2e\"\n",
            receiver.endpoint()
        )
    };
    root.write_config(&config(&fake, port, &telemetry(false)))?;
    write_note(&root)?;
    push_note_turn(&fake, "REPLY-TEXT-5521");
    let (mut daemon, token) = common::paired_daemon(&root, port, "otel")?;
    let (status, chat) = http(
        port,
        "POST",
        "/api/agents/main/chat",
        Some(&token),
        r#"{"message": "PROMPT-TEXT-8812 read note.md", "session": "otel-a"}"#,
    )?;
    assert_eq!(status, 200, "{chat}");

    let spans = receiver.wait_for(WAIT, |s| turn_spans(s).is_some());
    assert_eq!(receiver.errors(), Vec::<String>::new());
    let (turn, children) =
        turn_spans(&spans).ok_or(format!("no turn with children: {spans:#?}"))?;
    assert_eq!(turn.service_name.as_deref(), Some("warren-e2e"));
    assert_eq!(turn.parent_span_id, "", "the turn is the trace's root");
    assert_eq!(turn.status_code, 1, "OK");
    for (k, v) in [
        ("gen_ai.operation.name", json!("invoke_agent")),
        ("gen_ai.agent.name", json!("main")),
        ("gen_ai.request.model", json!("gpt-test")),
        ("gen_ai.usage.input_tokens", json!(300)),
        ("gen_ai.usage.output_tokens", json!(30)),
        ("warren.channel", json!("gateway")),
    ] {
        assert_eq!(span_attr(&turn, k), &v, "{k} of {turn:#?}");
    }
    let chats: Vec<&ReceivedSpan> = children
        .iter()
        .filter(|s| s.name == "chat gpt-test")
        .collect();
    assert_eq!(chats.len(), 2, "{children:#?}");
    let mut usage: Vec<(Value, Value)> = chats
        .iter()
        .map(|c| {
            assert_eq!(c.kind, 3, "a provider call is a CLIENT span");
            assert_eq!(span_attr(c, "gen_ai.operation.name"), "chat");
            assert_eq!(span_attr(c, "gen_ai.provider.name"), "fake");
            assert_eq!(span_attr(c, "gen_ai.system"), "fake");
            assert_eq!(span_attr(c, "gen_ai.request.model"), "gpt-test");
            assert!(c.start_time_unix_nano >= turn.start_time_unix_nano);
            assert!(c.end_time_unix_nano <= turn.end_time_unix_nano);
            (
                span_attr(c, "gen_ai.usage.input_tokens").clone(),
                span_attr(c, "gen_ai.usage.output_tokens").clone(),
            )
        })
        .collect();
    usage.sort_by_key(|(i, _)| i.as_i64());
    assert_eq!(usage, [(json!(100), json!(10)), (json!(200), json!(20))]);
    let tool = children
        .iter()
        .find(|s| s.name == "execute_tool file_read")
        .ok_or(format!("no tool span: {children:#?}"))?;
    assert_eq!(span_attr(tool, "gen_ai.operation.name"), "execute_tool");
    assert_eq!(span_attr(tool, "gen_ai.tool.name"), "file_read");
    assert_eq!(span_attr(tool, "gen_ai.tool.call.id"), "call-1");
    // Default: no prompt, completion, tool argument or result text; never the key.
    let content_keys = [
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
    ];
    for s in &spans {
        for k in content_keys {
            assert!(
                !s.attributes.contains_key(k),
                "{k} exported by default: {s:#?}"
            );
        }
    }
    let all: Vec<u8> = receiver.bodies().concat();
    let raw = String::from_utf8_lossy(&all);
    for private in [
        "PROMPT-TEXT-8812",
        "REPLY-TEXT-5521",
        "NOTE-BODY-7731",
        "note.md",
        KEY,
    ] {
        assert!(!raw.contains(private), "{private} exported by default");
    }

    // capture_content = true (reload): the text is exported, the key still is not.
    let out = root.run(
        bin(),
        &["config", "set", "telemetry.capture_content", "true"],
    )?;
    assert!(out.status.success(), "{:?}", warren_testkit::text(&out));
    let (status, reloaded) = http(port, "POST", "/admin/reload", Some(&token), "")?;
    assert_eq!(status, 200, "{reloaded}");
    daemon.wait_for("gateway listening", WAIT)?;
    push_note_turn(&fake, "CAPTURED-REPLY-3390");
    let (status, chat) = http(
        port,
        "POST",
        "/api/agents/main/chat",
        Some(&token),
        r#"{"message": "CAPTURED-PROMPT-4471 read note.md", "session": "otel-b"}"#,
    )?;
    assert_eq!(status, 200, "{chat}");
    let captured = |s: &[ReceivedSpan]| {
        s.iter().any(|t| {
            t.name == "execute_tool file_read"
                && t.attributes.contains_key("gen_ai.tool.call.result")
        }) && s.iter().any(|t| {
            t.name == "invoke_agent main"
                && span_attr(t, "gen_ai.output.messages")
                    .as_str()
                    .is_some_and(|m| m.contains("CAPTURED-REPLY-3390"))
        })
    };
    let spans = receiver.wait_for(WAIT, captured);
    assert!(captured(&spans), "no captured content: {spans:#?}");
    let text_of = |name: &str, key: &str| -> String {
        spans
            .iter()
            .filter(|s| s.name == name)
            .filter_map(|s| s.attributes.get(key).and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(text_of("invoke_agent main", "gen_ai.input.messages").contains("CAPTURED-PROMPT-4471"));
    assert!(text_of("chat gpt-test", "gen_ai.input.messages").contains("CAPTURED-PROMPT-4471"));
    let result = text_of("execute_tool file_read", "gen_ai.tool.call.result");
    assert!(result.contains("NOTE-BODY-7731"), "{result}");
    assert!(
        result.contains("[redacted]"),
        "the key is redacted: {result}"
    );
    assert!(text_of("execute_tool file_read", "gen_ai.tool.call.arguments").contains("note.md"));
    let all: Vec<u8> = receiver.bodies().concat();
    assert!(
        !String::from_utf8_lossy(&all).contains(KEY),
        "a configured secret left in a span"
    );
    daemon.signal("TERM")?;
    assert_eq!(daemon.wait(WAIT)?.code(), Some(0));
    Ok(())
}

#[test]
fn resident_memory_past_the_ceiling_warns_once_in_the_log_and_in_health_issue25() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let receiver = OtlpReceiver::start()?;
    let port = free_port()?;
    root.write_config(&config(
        &fake,
        port,
        &format!(
            "\n[telemetry]\nrss_ceiling_mb = 1\nrss_interval_secs = 1\nexport_interval_ms = 200\notlp_endpoint = \"{}\"\n",
            receiver.endpoint()
        ),
    ))?;
    let (mut daemon, token) = common::paired_daemon(&root, port, "ops")?;
    daemon.saw_or_wait_for("rss_ceiling_mb", WAIT)?;
    // A reading every second goes into the trace; still one warning.
    let readings = receiver.wait_for(WAIT, |s| {
        s.iter().filter(|t| t.name == "self_watch").count() >= 3
    });
    let rss: Vec<i64> = readings
        .iter()
        .filter(|t| t.name == "self_watch")
        .filter_map(|t| span_attr(t, "process.memory.usage").as_i64())
        .collect();
    assert!(
        rss.len() >= 3 && rss.iter().all(|b| *b > 1024 * 1024),
        "{rss:?}"
    );
    let (status, health) = http(port, "GET", "/api/health", Some(&token), "")?;
    assert_eq!(status, 200);
    let memory = &health["components"]["resident_memory"];
    assert_eq!(memory["status"], "warning", "{health}");
    assert_eq!(memory["ceiling_bytes"], 1024 * 1024);
    assert!(
        memory["rss_bytes"].as_u64().unwrap_or(0) > 1024 * 1024,
        "{health}"
    );
    assert!(
        memory["warning"]
            .as_str()
            .is_some_and(|w| w.contains("rss_ceiling_mb")),
        "{health}"
    );
    assert_eq!(health["status"], "degraded", "{health}");
    daemon.signal("TERM")?;
    daemon.wait(WAIT)?;
    // Read the rest of its stderr (the needle never comes; the pipe ends).
    let _ = daemon.wait_for("\u{0}", Duration::from_secs(2));
    let warnings = daemon
        .stderr_seen()
        .iter()
        .filter(|l| l.contains("rss_ceiling_mb"))
        .count();
    assert_eq!(warnings, 1, "{:?}", daemon.stderr_seen());
    Ok(())
}

#[test]
fn operator_decisions_and_cron_runs_are_counted_issue25() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    // The default risk profile asks before every write.
    root.write_config(&config(&fake, port, ""))?;
    fake.push(
        FakeReply::calls(
            "",
            vec![FakeCall::new(
                "w1",
                "file_write",
                json!({"path": "out.md", "content": "hi"}),
            )],
        )
        .with_usage(10, 1),
    );
    fake.push(FakeReply::text("Not written.").with_usage(10, 1));
    fake.push_when(
        "Summarise the inbox",
        FakeReply::text("digest done").with_usage(5, 1),
    );
    let (mut daemon, token) = common::paired_daemon(&root, port, "ops")?;
    let token = Some(token.as_str());

    let (status, accepted) = http(
        port,
        "POST",
        "/api/agents/main/chat",
        token,
        r#"{"message": "write out.md", "session": "approvals"}"#,
    )?;
    assert_eq!(status, 202, "{accepted}");
    let id = accepted["approval"]["id"]
        .as_str()
        .ok_or("no approval id")?;
    let (status, decided) = http(
        port,
        "POST",
        &format!("/api/approvals/{id}"),
        token,
        r#"{"approve": false}"#,
    )?;
    assert_eq!(status, 200, "{decided}");
    let turn = accepted["turn"].as_str().ok_or("no turn id")?;
    wait_until("the denied turn ends", WAIT, || {
        let (_, now) = http(port, "GET", &format!("/api/turns/{turn}?wait=5"), token, "")?;
        Ok(now["status"] == "done")
    })?;

    let (status, created) = http(
        port,
        "POST",
        "/api/cron",
        token,
        r#"{"name": "digest", "agent": "main", "every": "1h", "message": "Summarise the inbox"}"#,
    )?;
    assert!(status == 200 || status == 201, "{status} {created}");
    let (status, run) = http(port, "POST", "/api/cron/digest/run", token, "")?;
    assert_eq!(status, 200, "{run}");

    let mut text = String::new();
    wait_until("the cron run is counted", WAIT, || {
        text = http_text(port, "GET", "/metrics", token, "")?.body;
        Ok(common::sample(&text, r#"warren_cron_runs_total{job="digest",status="ok"}"#).is_some())
    })?;
    for (series, want) in [
        (
            r#"warren_approvals_total{agent="main",decision="denied"}"#,
            1.0,
        ),
        (
            r#"warren_tool_calls_total{agent="main",tool="file_write",outcome="error"}"#,
            1.0,
        ),
        (r#"warren_cron_runs_total{job="digest",status="ok"}"#, 1.0),
        (
            r#"warren_turns_total{agent="main",channel="gateway",outcome="ok"}"#,
            1.0,
        ),
        (
            r#"warren_turns_total{agent="main",channel="cron",outcome="ok"}"#,
            1.0,
        ),
    ] {
        assert_eq!(
            common::sample(&text, series),
            Some(want),
            "{series} in:\n{text}"
        );
    }
    assert!(
        !root.path().join("agents/main/workspace/out.md").exists(),
        "the denied write did not run"
    );
    daemon.signal("TERM")?;
    assert_eq!(daemon.wait(WAIT)?.code(), Some(0));
    Ok(())
}

#[test]
fn metrics_off_answer_404_naming_the_key_and_open_no_scrape_port_issue25() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    let open_port = free_port()?;
    root.write_config(&config(
        &fake,
        port,
        &format!("\n[metrics]\nenabled = false\nport = {open_port}\n"),
    ))?;
    let (mut daemon, token) = common::paired_daemon(&root, port, "ops")?;
    let (status, answer) = http(port, "GET", "/metrics", Some(&token), "")?;
    assert_eq!(status, 404, "{answer}");
    assert_eq!(answer["error"], "metrics_off");
    assert!(
        answer["message"]
            .as_str()
            .is_some_and(|m| m.contains("[metrics] enabled")),
        "{answer}"
    );
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", open_port)).is_err(),
        "no token-less listener while metrics are off"
    );
    daemon.signal("TERM")?;
    assert_eq!(daemon.wait(WAIT)?.code(), Some(0));
    Ok(())
}

/// The network layer: a destination off the agent's allowlist, asked for by `http_request` and
/// by a shell command through the sandbox's egress proxy, counts as a `network` denial (the
/// daemon refuses both); a connection around the proxy fails inside the sandbox's empty network
/// namespace (the kernel's refusal: the daemon never sees it, so it is not counted).
#[test]
fn network_refusals_count_as_sandbox_denials_of_layer_network_issue25() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    // Port 1 is allowed only so that the agent has an allowlist (and so the tool and the proxy).
    let sections = "\n[risk_profiles.default]\nautonomy = \"full\"\nallowed_commands = [\"curl\"]\n\n\
                    [agents.main.network]\nallow = [\"127.0.0.1:1\"]\n";
    root.write_config(&common::fake_config(&fake, KEY, port, sections, ""))?;
    let off_list = "http://127.0.0.1:9/off-list";
    fake.push(FakeReply::calls(
        "",
        vec![
            FakeCall::new("n1", "http_request", json!({ "url": off_list })),
            FakeCall::new(
                "n2",
                "shell",
                json!({ "command": format!("curl -s -m 5 {off_list}") }),
            ),
            FakeCall::new(
                "n3",
                "shell",
                json!({ "command": format!("curl -s -m 5 --noproxy '*' {off_list}") }),
            ),
        ],
    ));
    fake.push(FakeReply::text("refused"));
    let (mut daemon, token) = common::paired_daemon(&root, port, "ops")?;
    let (status, mut now) = http(
        port,
        "POST",
        "/api/agents/main/chat",
        Some(&token),
        r#"{"message": "fetch it", "session": "network"}"#,
    )?;
    // The operator approves each curl (a high-risk command asks even under full autonomy).
    assert_eq!(status, 202, "{now}");
    let turn = now["turn"].as_str().ok_or("no turn id")?.to_string();
    wait_until("the turn to end", WAIT, || {
        if now["status"] == "waiting_approval" {
            let id = now["approval"]["id"].as_str().unwrap_or_default();
            let (status, decided) = http(
                port,
                "POST",
                &format!("/api/approvals/{id}"),
                Some(&token),
                r#"{"approve": true}"#,
            )?;
            assert_eq!(status, 200, "{decided}");
        }
        now = http(
            port,
            "GET",
            &format!("/api/turns/{turn}?wait=5"),
            Some(&token),
            "",
        )?
        .1;
        Ok(now["status"] == "done")
    })?;
    assert_eq!(now["result"]["tool_calls"], 3, "{now}");
    // The tool results the model got back: both refusals name the allowlist; the call around
    // the proxy just fails to connect.
    let results: Vec<String> = fake
        .requests()
        .last()
        .and_then(|r| r.body["messages"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(results.len(), 3, "{results:?}");
    for refused in &results[..2] {
        assert!(
            refused.contains("not on the network allowlist"),
            "{results:?}"
        );
    }
    assert!(
        !results[2].contains("not on the network allowlist"),
        "{results:?}"
    );
    let text = http_text(port, "GET", "/metrics", Some(&token), "")?.body;
    assert_eq!(
        common::sample(
            &text,
            r#"warren_sandbox_denials_total{agent="main",layer="network"}"#
        ),
        Some(2.0),
        "{text}"
    );
    assert!(!text.contains("off-list"), "no URL in a label:\n{text}");
    daemon.signal("TERM")?;
    assert_eq!(daemon.wait(WAIT)?.code(), Some(0));
    Ok(())
}
