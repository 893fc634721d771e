//! The smaller operability faults of issue 36 §7, with a real daemon or the real CLI:
//! - an unusable cost ledger (`data/state/costs.jsonl` a directory) refuses the chat before the
//!   user's message is stored, naming the file (it used to answer 500 and keep the message
//!   without a reply);
//! - a user message over 1,024 bytes recalls memory on its beginning (it used to skip the
//!   recall with a WARN every turn);
//! - a config error never echoes a huge value in full, and a 100-part dotted table header's
//!   error gives its line.

use std::fs;
use std::time::Duration;

use crate::common::{bin, fake_config, paired_daemon};
use warren_testkit::fake_llm::{FakeOpenAi, FakeReply};
use warren_testkit::{TempRoot, free_port, http, text};

type R = Result<(), Box<dyn std::error::Error>>;

#[test]
fn an_unusable_cost_ledger_refuses_the_chat_before_storing_the_message_issue36() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    root.write_config(&fake_config(&fake, "sk-test", port, "", ""))?;
    let ledger = root.path().join("data").join("state").join("costs.jsonl");
    fs::create_dir_all(&ledger)?;
    let (mut daemon, token) = paired_daemon(&root, port, "ops")?;
    let token = Some(token.as_str());
    fake.push(FakeReply::text("never sent"));
    let (status, body) = http(
        port,
        "POST",
        "/api/agents/main/chat",
        token,
        r#"{"message": "remember this", "session": "web"}"#,
    )?;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"], "cost_ledger_unavailable", "{body}");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains(&ledger.display().to_string())),
        "names the file: {body}"
    );
    assert!(fake.requests().is_empty(), "the provider was not called");
    let (_, session) = http(port, "GET", "/api/agents/main/sessions/web", token, "")?;
    assert!(
        !session.to_string().contains("remember this"),
        "the user's message was not stored: {session}"
    );
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(20))?;
    Ok(())
}

#[test]
fn a_long_user_message_recalls_memory_on_its_beginning_instead_of_warning_issue36() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    root.write_config(&fake_config(&fake, "sk-test", port, "", ""))?;
    let out = root.run(
        bin(),
        &[
            "memory",
            "store",
            "--agent",
            "main",
            "launch",
            "the launch code is alpha",
        ],
    )?;
    assert!(out.status.success(), "{:?}", text(&out));
    let (mut daemon, token) = paired_daemon(&root, port, "ops")?;
    fake.push(FakeReply::text("noted"));
    let message = format!("launch code please. {}", "and some more words ".repeat(150));
    assert!(message.len() > 2048);
    let body = serde_json::json!({"message": message, "session": "web"}).to_string();
    let (status, answer) = http(port, "POST", "/api/agents/main/chat", Some(&token), &body)?;
    assert_eq!(status, 200, "{answer}");
    let requests = fake.requests();
    let system = requests
        .first()
        .and_then(|r| r.body["messages"].as_array().cloned())
        .and_then(|m| m.first().map(|m| m["content"].to_string()))
        .unwrap_or_default();
    assert!(
        system.contains("recalled_memories") && system.contains("launch code is alpha"),
        "the memory was recalled: {system}"
    );
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(20))?;
    let log = daemon.stderr_seen().join("\n");
    assert!(
        !log.contains("memory recall for the prompt failed"),
        "no recall warning: {log}"
    );
    Ok(())
}

#[test]
fn a_config_error_cuts_a_huge_value_and_a_deep_header_has_its_line_issue36() -> R {
    let root = TempRoot::new()?;
    let value = "x".repeat(5_000_000);
    root.write_config(&format!(
        "[agents.main]\n\n[channels]\nsession_backend = \"{value}\"\n"
    ))?;
    let out = root.run(bin(), &["config", "validate"])?;
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(
        stderr.len() < 4096,
        "{} bytes of error for a 5 MB value",
        stderr.len()
    );
    assert!(
        stderr.contains("session_backend") && stderr.contains("… (5000000 bytes)"),
        "{stdout}{stderr}"
    );

    let header: Vec<String> = (0..100).map(|i| format!("p{i}")).collect();
    root.write_config(&format!("[agents.main]\n\n[{}]\nx = 1\n", header.join(".")))?;
    let out = root.run(bin(), &["config", "validate"])?;
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    let file = root.config_path().display().to_string();
    assert!(
        stderr.contains(&format!("{file}:3:")),
        "the line of the header: {stderr}"
    );
    Ok(())
}
