//! `warren agent -m` exports its turn's OpenTelemetry spans like the daemon (issue 25): with
//! `[telemetry] otlp_endpoint` set, the one-shot turn's `invoke_agent` span and its `chat` and
//! `execute_tool` children reach the collector before the process exits, though the export
//! interval is far longer than the run. A collector that is down does not fail the command.

use warren_testkit::fake_llm::{FakeOpenAi, FakeReply};
use warren_testkit::otlp::OtlpReceiver;
use warren_testkit::{TempRoot, free_port, text};

use crate::common::{bin, push_note_turn, span_attr};

type R = Result<(), Box<dyn std::error::Error>>;

const KEY: &str = "sk-oneshot-spans-7d1e";

fn config(fake: &FakeOpenAi, endpoint: &str) -> String {
    format!(
        r#"
[agents.main]
provider = "fake"
model = "gpt-test"

{provider}

[telemetry]
otlp_endpoint = "{endpoint}"
export_interval_ms = 60000
service_name = "warren-oneshot"
"#,
        provider = fake.provider_toml("fake", KEY)
    )
}

#[test]
fn a_one_shot_turn_exports_its_spans_before_exit_issue25() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let receiver = OtlpReceiver::start()?;
    root.write_config(&config(&fake, &receiver.endpoint()))?;
    let ws = root.path().join("agents/main/workspace");
    std::fs::create_dir_all(&ws)?;
    std::fs::write(ws.join("note.md"), "a note\n")?;
    push_note_turn(&fake, "the note is read");

    let out = root.run(bin(), &["agent", "-a", "main", "-m", "read note.md"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("the note is read"), "{stdout}");

    // The process has exited: what it sent is all there is (no wait).
    let spans = receiver.spans();
    assert_eq!(receiver.errors(), Vec::<String>::new());
    let turn = spans
        .iter()
        .find(|s| s.name == "invoke_agent main")
        .ok_or(format!("no turn span was exported: {spans:#?}"))?;
    assert_eq!(turn.service_name.as_deref(), Some("warren-oneshot"));
    assert_eq!(turn.parent_span_id, "", "the turn is the trace's root");
    assert_eq!(span_attr(turn, "warren.channel"), "cli");
    assert_eq!(span_attr(turn, "gen_ai.usage.input_tokens"), 300);
    let children: Vec<&str> = spans
        .iter()
        .filter(|s| s.trace_id == turn.trace_id && s.parent_span_id == turn.span_id)
        .map(|s| s.name.as_str())
        .collect();
    let count = |n: &str| children.iter().filter(|c| **c == n).count();
    assert_eq!(
        (count("chat gpt-test"), count("execute_tool file_read")),
        (2, 1),
        "{children:?}"
    );
    assert!(
        !spans.iter().any(|s| s.name == "self_watch"),
        "the self-watch is the daemon's"
    );
    for body in receiver.bodies() {
        assert!(
            !String::from_utf8_lossy(&body).contains(KEY),
            "the provider key never leaves"
        );
    }
    Ok(())
}

#[test]
fn a_one_shot_turn_succeeds_when_the_collector_is_down_issue25() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let closed = free_port()?;
    root.write_config(&config(&fake, &format!("http://127.0.0.1:{closed}")))?;
    fake.push(FakeReply::text("answered"));
    let out = root.run(bin(), &["agent", "-a", "main", "-m", "hello"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("answered"), "{stdout}");
    assert!(
        stderr.contains(&format!("OTLP export to http://127.0.0.1:{closed}")),
        "the failed export is said once: {stderr}"
    );
    Ok(())
}
