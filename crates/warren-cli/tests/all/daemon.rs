//! The daemon: one per install root (LAYOUT-4), reload on SIGHUP in the same process
//! (STATE-19), clean exit on SIGTERM/SIGINT, legacy workspace migration (LAYOUT-2).

use crate::common::bin;
use std::fs;
use std::time::Duration;

use pretty_assertions::assert_eq;
use warren_testkit::{DaemonChild, TempRoot, text};

type R = Result<(), Box<dyn std::error::Error>>;

const WAIT: Duration = Duration::from_secs(20);

fn status(root: &TempRoot) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let out = root.run(bin(), &["status", "--json"])?;
    Ok(serde_json::from_str(&text(&out).0)?)
}

#[test]
fn one_daemon_per_root_reload_in_place_and_clean_exit() -> R {
    let root = TempRoot::new()?;
    // One agent and a free gateway port: every other key takes its embedded default.
    root.write_config_on_free_port("[agents.main]\n")?;
    let mut daemon = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    daemon.wait_for("warren daemon ready", WAIT)?;
    let pid = daemon.pid();

    let s = status(&root)?;
    assert_eq!(s["daemon"]["status"], "running");
    assert_eq!(s["daemon"]["pid"], pid);
    assert_eq!(s["config_generation"], 1);

    // A second daemon on the same root is refused, naming the holder.
    let second = root.run(bin(), &["daemon"])?;
    let (_, stderr) = text(&second);
    assert_eq!(second.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "error: another warren daemon (pid {pid}) owns {}",
            root.path().display()
        )),
        "{stderr}"
    );

    // SIGHUP: re-read config (edited by hand; `warren config set` would reload the daemon
    // itself), same PID, next generation.
    let port = warren_testkit::free_port()?;
    let edited = root
        .read_config()?
        .lines()
        .map(|l| {
            if l.starts_with("port = ") {
                format!("port = {port}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    fs::write(root.config_path(), edited)?;
    daemon.signal("HUP")?;
    daemon.wait_for("config reloaded", WAIT)?;
    daemon.wait_for("warren daemon ready", WAIT)?;
    let s = status(&root)?;
    assert_eq!(
        (s["daemon"]["pid"].clone(), s["config_generation"].clone()),
        (serde_json::json!(pid), serde_json::json!(2))
    );

    // An invalid config on reload keeps the running generation and says why.
    fs::write(root.config_path(), "[gateway]\nport = \"nope\"\n")?;
    daemon.signal("HUP")?;
    let refused = daemon.wait_for("reload refused", WAIT)?;
    assert!(refused.contains("gateway.port"), "{refused}");
    daemon.wait_for("warren daemon ready", WAIT)?;
    assert_eq!(status(&root)?["config_generation"], 2);

    daemon.signal("TERM")?;
    let exit = daemon.wait(WAIT)?;
    assert_eq!(exit.code(), Some(0));
    assert_eq!(status(&root)?["daemon"]["status"], "not_running");
    Ok(())
}

#[test]
fn a_killed_daemon_never_blocks_the_next_one() -> R {
    let root = TempRoot::new()?;
    root.write_config_on_free_port("[agents.main]\n")?;
    let mut first = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    first.wait_for("warren daemon ready", WAIT)?;
    first.signal("KILL")?;
    first.wait(WAIT)?;
    let mut second = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    second.wait_for("warren daemon ready", WAIT)?;
    second.signal("INT")?;
    assert_eq!(second.wait(WAIT)?.code(), Some(0));
    Ok(())
}

#[test]
fn the_legacy_workspace_moves_into_the_default_agent_once_layout2() -> R {
    let root = TempRoot::new()?;
    root.write_config_on_free_port("[agents.main]\n")?;
    fs::create_dir_all(root.path().join("workspace/notes"))?;
    fs::write(root.path().join("workspace/notes/todo.md"), "ship it")?;
    let mut daemon = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    let line = daemon.wait_for("migrated the legacy workspace", WAIT)?;
    assert!(line.contains("agents/main/workspace"), "{line}");
    daemon.wait_for("warren daemon ready", WAIT)?;
    assert_eq!(
        fs::read_to_string(root.path().join("agents/main/workspace/notes/todo.md"))?,
        "ship it"
    );
    assert!(!root.path().join("workspace").exists());
    daemon.signal("TERM")?;
    daemon.wait(WAIT)?;
    Ok(())
}

#[test]
fn the_daemon_imports_legacy_jsonl_at_start_and_names_conflicts_mig1_mig7() -> R {
    let root = TempRoot::new()?;
    root.write_config_on_free_port("[agents.main]\n")?;
    let sessions = root.path().join("data").join("sessions");
    std::fs::create_dir_all(&sessions)?;
    std::fs::write(
        sessions.join("old.jsonl"),
        "{\"role\":\"user\",\"content\":\"hi\"}\n",
    )?;
    let mut daemon = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    daemon.wait_for("chat sessions ready", WAIT)?;
    daemon.wait_for("warren daemon ready", WAIT)?;
    assert!(sessions.join("old.jsonl.migrated").exists());
    daemon.signal("TERM")?;
    daemon.wait(WAIT)?;

    // An ambiguous pair stops the chat subsystem, loudly and by name; the daemon keeps running.
    std::fs::write(sessions.join("k.jsonl"), "")?;
    std::fs::write(sessions.join("k.jsonl.importing"), "")?;
    let mut daemon = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    let line = daemon.wait_for("chat sessions stopped", WAIT)?;
    assert!(line.contains("k.jsonl.importing"), "{line}");
    daemon.wait_for("warren daemon ready", WAIT)?;
    Ok(())
}

#[test]
fn the_daemon_refuses_a_memory_backend_change_after_the_agent_wrote_mem9() -> R {
    let root = TempRoot::new()?;
    root.write_config("[agents.main]\n")?;
    let out = root.run(
        bin(),
        &[
            "tools",
            "run",
            "main",
            "memory_store",
            r#"{"key": "k", "content": "remember me"}"#,
        ],
    )?;
    assert!(out.status.success(), "{}", text(&out).0);
    // Switched by hand behind the CLI's back.
    root.write_config("[agents.main.memory]\nbackend = \"markdown\"\n")?;
    let out = root.run(bin(), &["daemon"])?;
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("agents.main.memory.backend") || stderr.contains("main"),
        "{stderr}"
    );
    Ok(())
}
