//! `warren agent -m` end to end: the real binary over the local fake OpenAI server (real SSE
//! wire format) reads, writes and edits files, stores a memory, persists the session, and
//! leaves cost and trace records that `warren costs` and `warren logs` show (LOOP-1,
//! STATE-13, STATE-14).

use crate::common::bin;

use serde_json::json;
use warren_testkit::fake_llm::{FakeCall, FakeOpenAi, FakeReply};
use warren_testkit::{TempRoot, text};

type R = Result<(), Box<dyn std::error::Error>>;

fn ok(root: &TempRoot, args: &[&str]) -> Result<String, Box<dyn std::error::Error>> {
    let out = root.run(bin(), args)?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "warren {args:?} failed: {stderr}");
    Ok(stdout)
}

fn config(fake: &FakeOpenAi) -> String {
    format!(
        r#"
[agents.main]
provider = "fake"
model = "gpt-test"
risk_profile = "hands"

[risk_profiles.hands]
autonomy = "full"

{provider}

[cost.rates.gpt-test]
input_per_mtok = 2.0
output_per_mtok = 8.0
"#,
        provider = fake.provider_toml("fake", "sk-e2e-secret-value")
    )
}

#[test]
fn agent_one_shot_reads_writes_edits_files_and_stores_a_memory() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    root.write_config(&config(&fake))?;
    fake.push(FakeReply::calls(
        "I'll write it.",
        vec![FakeCall::new(
            "c1",
            "file_write",
            json!({"path": "todo.md", "content": "- buy milk\n"}),
        )],
    ));
    fake.push(FakeReply::calls(
        "",
        vec![FakeCall::new(
            "c2",
            "file_edit",
            json!({"path": "todo.md", "old_string": "milk", "new_string": "oat milk"}),
        )],
    ));
    fake.push(FakeReply::calls(
        "",
        vec![
            FakeCall::new("c3", "file_read", json!({"path": "todo.md"})),
            FakeCall::new(
                "c4",
                "memory_store",
                json!({"key": "shopping", "content": "the user buys oat milk"}),
            ),
        ],
    ));
    fake.push(FakeReply::text("Your list says: buy oat milk.").with_usage(1000, 100));

    let out = root.run(
        bin(),
        &[
            "agent",
            "-a",
            "main",
            "-m",
            "keep my shopping list",
            "--session",
            "shop",
        ],
    )?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("I'll write it."),
        "streamed narration: {stdout}"
    );
    assert!(
        stdout.trim_end().ends_with("Your list says: buy oat milk."),
        "{stdout}"
    );
    assert!(
        stderr.contains("→ file_write") && stderr.contains("✓ memory_store"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(root.path().join("agents/main/workspace/todo.md"))?,
        "- buy oat milk\n"
    );
    // The read result reached the model in the next request.
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 4);
    assert!(reqs[3].body.to_string().contains("buy oat milk"));

    assert!(ok(&root, &["memory", "list", "--agent", "main"])?.contains("oat milk"));
    let session = ok(&root, &["sessions", "show", "shop"])?;
    assert!(
        session.contains("keep my shopping list") && session.contains("Your list says"),
        "{session}"
    );

    // A second turn in the same session sees the first one's history.
    fake.push(FakeReply::text("Still oat milk."));
    ok(
        &root,
        &["agent", "-a", "main", "-m", "and now?", "--session", "shop"],
    )?;
    let history = fake.requests()[4].body["messages"].clone();
    assert!(
        history.to_string().contains("keep my shopping list"),
        "{history}"
    );
    assert!(
        history.to_string().contains("\"tool_call_id\":\"c1\""),
        "tool exchange reloaded"
    );

    let costs: serde_json::Value =
        serde_json::from_str(&ok(&root, &["costs", "--json", "--agent", "main"])?)?;
    assert_eq!(costs.as_array().map(Vec::len), Some(5));
    assert_eq!(costs[3]["input_tokens"], 1000);
    assert!((costs[3]["cost_usd"].as_f64().unwrap_or(0.0) - 0.0028).abs() < 1e-9);
    assert!(ok(&root, &["costs"])?.contains("gpt-test"));

    let logs = ok(&root, &["logs", "--json", "--agent", "main"])?;
    assert!(logs.lines().count() >= 10, "{logs}");
    assert!(logs.contains("\"tool_call\"") && logs.contains("\"receipt\":\"wr1-"));
    assert!(!logs.contains("sk-e2e-secret-value"));
    Ok(())
}

#[test]
fn agent_errors_name_the_provider_and_status_without_the_key() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    root.write_config(&config(&fake).replace(
        "retry_backoff_ms = 1",
        "retry_backoff_ms = 1\nmax_retries = 0",
    ))?;
    fake.push(FakeReply::Status(
        401,
        "Incorrect API key provided: sk-e2e-secret-value".into(),
    ));
    let out = root.run(bin(), &["agent", "-m", "hi"])?;
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains("'fake'") && stderr.contains("HTTP 401"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("sk-e2e-secret-value") && !stderr.contains("sk-e2e-s"),
        "{stderr}"
    );
    Ok(())
}

/// Deliverable 12: on a machine with no provider key, `warren init` wires `main` to the
/// offline demo script, and `warren agent -m` runs it end to end (files, memory, a session).
#[test]
fn fresh_install_runs_the_offline_demo() -> R {
    let root = TempRoot::new()?;
    assert!(ok(&root, &["init"])?.contains("demo"));
    // The starter risk profile lets the demo's own-workspace write and memory run unasked.
    let first = ok(&root, &["agent", "-m", "hello"])?;
    assert!(
        first.contains("Warren's demo agent") && first.contains("Done."),
        "{first}"
    );
    assert!(
        root.path()
            .join("agents/main/workspace/welcome.md")
            .is_file()
    );
    assert!(ok(&root, &["memory", "list"])?.contains("demo-first-run"));
    let second = ok(&root, &["agent", "-m", "what do you remember?"])?;
    assert!(second.contains("end of the demo script"), "{second}");
    assert!(ok(&root, &["sessions", "show", "Agent-main-cli"])?.contains("what do you remember?"));
    Ok(())
}

/// Without a terminal nobody can approve: under the built-in `default` profile (every write
/// asks) the writes fail at once with "needs approval", and the turn still completes.
#[test]
fn supervised_writes_without_a_terminal_are_denied() -> R {
    let root = TempRoot::new()?;
    ok(&root, &["init"])?;
    let config = root
        .read_config()?
        .replace("risk_profile = \"starter\"", "risk_profile = \"default\"");
    root.write_config(&config)?;
    let out = root.run(bin(), &["agent", "-m", "hello"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("✗ file_write")
            && stderr.contains("needs approval: rerun in a terminal, or allow it in the profile"),
        "{stderr}"
    );
    assert!(
        !root
            .path()
            .join("agents/main/workspace/welcome.md")
            .exists()
    );
    assert!(stdout.contains("Done."));
    Ok(())
}

/// SESS-1 (issue 14): a session belongs to the agent that started it. Agent `bee` naming
/// `main`'s session is refused before anything is loaded: bee's provider never sees main's
/// conversation, nothing is appended, and the error names the owner. Default keys are per
/// agent, so the two agents' default sessions never meet; the operator still reads both.
#[test]
fn another_agents_session_is_refused_and_names_the_owner_sess1() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    root.write_config(&format!(
        "{}\n[agents.bee]\nprovider = \"fake\"\nmodel = \"gpt-test\"\nrisk_profile = \"hands\"\n",
        config(&fake)
    ))?;
    fake.push(FakeReply::text("noted"));
    ok(
        &root,
        &[
            "agent",
            "-a",
            "main",
            "--session",
            "private-a",
            "-m",
            "my password is HUNTER2",
        ],
    )?;
    let before = fake.requests().len();

    let out = root.run(
        bin(),
        &[
            "agent",
            "-a",
            "bee",
            "--session",
            "private-a",
            "-m",
            "what was said before?",
        ],
    )?;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(
        stderr.contains("error: session 'private-a' belongs to agent 'main'"),
        "{stderr}"
    );
    assert!(!stdout.contains("HUNTER2") && !stderr.contains("HUNTER2"));
    assert_eq!(fake.requests().len(), before, "bee's provider was called");
    let shown = ok(&root, &["sessions", "show", "private-a"])?;
    assert!(
        shown.contains("HUNTER2") && !shown.contains("what was said before"),
        "{shown}"
    );

    // Issue 35 §7: main cannot create bee's default keys (namespaced or the old form).
    for key in ["Agent-bee-cli", "cli-bee"] {
        let out = root.run(bin(), &["agent", "-a", "main", "--session", key, "-m", "x"])?;
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
        assert!(
            stderr.contains(&format!(
                "error: session '{key}' is a default session key of agent 'bee'"
            )),
            "{stderr}"
        );
    }
    assert_eq!(
        fake.requests().len(),
        before,
        "no provider call for a refused key"
    );

    // Default keys are derived per channel and agent: each agent gets its own session.
    fake.push(FakeReply::text("main here"));
    fake.push(FakeReply::text("bee here"));
    ok(&root, &["agent", "-a", "main", "-m", "ZEBRA-ONE"])?;
    ok(&root, &["agent", "-a", "bee", "-m", "two"])?;
    let bee_request = fake.requests().last().cloned().ok_or("no request")?;
    assert!(
        !bee_request.body.to_string().contains("ZEBRA-ONE"),
        "{}",
        bee_request.body
    );
    let list = ok(&root, &["sessions", "list"])?;
    assert!(
        list.contains("Agent-main-cli") && list.contains("Agent-bee-cli"),
        "{list}"
    );
    // The operator reaches every agent's sessions.
    assert!(ok(&root, &["sessions", "search", "HUNTER2"])?.contains("private-a"));
    ok(
        &root,
        &["sessions", "delete", "Agent-bee-cli", "--agent", "bee"],
    )?;
    Ok(())
}
