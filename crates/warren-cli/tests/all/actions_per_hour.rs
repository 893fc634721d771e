//! `max_actions_per_hour` across processes (PERM-2, issue 14 §4): the window lives in
//! `data/state/actions.db`, so every process of an install root counts in it. Before, each
//! process kept its own window and a loop of `warren agent -m` runs, or a CLI run beside the
//! daemon, was never refused.

use crate::common::{bin, paired_daemon};

use serde_json::json;
use warren_testkit::fake_llm::{FakeCall, FakeOpenAi, FakeReply};
use warren_testkit::{TempRoot, free_port, http, text};

type R = Result<(), Box<dyn std::error::Error>>;

/// Agent `main` under full autonomy with one action an hour, on the fake OpenAI server.
fn config(fake: &FakeOpenAi, extra: &str) -> String {
    format!(
        "[agents.main]\nprovider = \"fake\"\nmodel = \"gpt-test\"\nrisk_profile = \"hands\"\n\n[risk_profiles.hands]\nautonomy = \"full\"\nmax_actions_per_hour = 1\n\n{}\n\n{extra}",
        fake.provider_toml("fake", "sk-actions-secret")
    )
}

/// One turn that writes `path` (a tool call), then says `reply`.
fn push_write(fake: &FakeOpenAi, path: &str, reply: &str) {
    fake.push(FakeReply::calls(
        "",
        vec![FakeCall::new(
            "w1",
            "file_write",
            json!({"path": path, "content": "x\n"}),
        )],
    ));
    fake.push(FakeReply::text(reply));
}

/// What the tool message of the last provider request says (the call's result).
fn last_tool_result(fake: &FakeOpenAi) -> Result<String, Box<dyn std::error::Error>> {
    let last = fake.requests().last().cloned().ok_or("no request")?;
    let messages = last.body["messages"].as_array().ok_or("no messages")?;
    let tool = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .ok_or_else(|| format!("no tool message in {}", last.body))?;
    Ok(tool["content"].as_str().unwrap_or_default().to_string())
}

fn refused_as_limited(result: &str) {
    assert!(
        result.contains("agent 'main' reached max_actions_per_hour = 1")
            && result.contains("the next tool call is possible in 59m"),
        "{result}"
    );
}

/// Two `warren agent -m` processes one after the other: the first one's tool call runs, the
/// second one's is refused naming the limit and when a slot frees (the first process's action
/// is in the shared window).
#[test]
fn a_second_warren_agent_process_is_refused_by_the_first_ones_action_perm2() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    // `bee` stays when `main` (renamed) is deleted: a config keeps one agent at least.
    root.write_config(&config(
        &fake,
        "[agents.bee]\nprovider = \"fake\"\nmodel = \"gpt-test\"\n",
    ))?;
    let workspace = root.path().join("agents/main/workspace");

    push_write(&fake, "one.md", "wrote one");
    let out = root.run(bin(), &["agent", "-m", "write one"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(workspace.join("one.md").is_file(), "{stderr}");
    assert!(
        !last_tool_result(&fake)?.contains("max_actions_per_hour"),
        "the first action is admitted"
    );

    push_write(&fake, "two.md", "could not");
    let out = root.run(bin(), &["agent", "-m", "write two"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        !workspace.join("two.md").exists(),
        "the second process's tool call ran: {stderr}"
    );
    refused_as_limited(&last_tool_result(&fake)?);
    assert!(
        stderr.contains("max_actions_per_hour = 1"),
        "the terminal shows the refusal: {stderr}"
    );
    assert!(root.path().join("data/state/actions.db").is_file());

    // A rename carries the hour's count to the new alias: renaming is no way around it.
    let out = root.run(bin(), &["agents", "rename", "main", "ada"])?;
    assert!(out.status.success(), "{:?}", text(&out));
    push_write(&fake, "three.md", "could not");
    let out = root.run(bin(), &["agent", "-a", "ada", "-m", "write three"])?;
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(!root.path().join("agents/ada/workspace/three.md").exists());
    let result = last_tool_result(&fake)?;
    assert!(
        result.contains("agent 'ada' reached max_actions_per_hour = 1"),
        "{result}"
    );
    // A deleted agent's actions go with it: an agent added again under the alias starts free.
    let out = root.run(bin(), &["agents", "delete", "ada", "--yes"])?;
    assert!(out.status.success(), "{:?}", text(&out));
    let out = root.run(
        bin(),
        &[
            "agents",
            "add",
            "ada",
            "--provider",
            "fake",
            "--model",
            "gpt-test",
            "--risk-profile",
            "hands",
        ],
    )?;
    assert!(out.status.success(), "{:?}", text(&out));
    push_write(&fake, "four.md", "wrote four");
    let out = root.run(bin(), &["agent", "-a", "ada", "-m", "write four"])?;
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(
        root.path().join("agents/ada/workspace/four.md").is_file(),
        "{}",
        last_tool_result(&fake)?
    );
    Ok(())
}

/// The daemon's chat and a `warren agent` run beside it count in one window: after the
/// gateway chat's tool call, the CLI's is refused; and the other way round for a second agent
/// (the CLI first, then the daemon's chat refused).
#[test]
fn the_daemons_chat_and_a_cli_run_share_one_window_perm2() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    root.write_config(&config(
        &fake,
        &format!(
            "[agents.bee]\nprovider = \"fake\"\nmodel = \"gpt-test\"\nrisk_profile = \"hands\"\n\n[gateway]\nport = {port}\n"
        ),
    ))?;
    let (_daemon, token) = paired_daemon(&root, port, "ci")?;
    let agents = root.path().join("agents");

    // The daemon's chat takes main's one action ...
    push_write(&fake, "chat.md", "wrote it");
    let (status, body) = http(
        port,
        "POST",
        "/api/agents/main/chat",
        Some(&token),
        r#"{"message": "write chat.md"}"#,
    )?;
    assert_eq!(status, 200, "{body}");
    assert!(agents.join("main/workspace/chat.md").is_file(), "{body}");

    // ... so the CLI beside it is refused.
    push_write(&fake, "cli.md", "could not");
    let out = root.run(bin(), &["agent", "-a", "main", "-m", "write cli.md"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(!agents.join("main/workspace/cli.md").exists(), "{stderr}");
    refused_as_limited(&last_tool_result(&fake)?);

    // The other way round: bee's action in a CLI run, then the daemon's chat is refused.
    push_write(&fake, "cli.md", "wrote it");
    let out = root.run(bin(), &["agent", "-a", "bee", "-m", "write cli.md"])?;
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(agents.join("bee/workspace/cli.md").is_file());
    push_write(&fake, "chat.md", "could not");
    let (status, body) = http(
        port,
        "POST",
        "/api/agents/bee/chat",
        Some(&token),
        r#"{"message": "write chat.md"}"#,
    )?;
    assert_eq!(status, 200, "{body}");
    assert!(!agents.join("bee/workspace/chat.md").exists(), "{body}");
    let result = last_tool_result(&fake)?;
    assert!(
        result.contains("agent 'bee' reached max_actions_per_hour = 1"),
        "{result}"
    );
    Ok(())
}
