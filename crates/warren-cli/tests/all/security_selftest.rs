//! `warren security selftest` (issue 13): the escape matrix on this kernel through the real
//! binary. The full sandbox reports 0 escapes and exits 0; an unrestricted noop agent reports
//! escapes and exits 1.

use crate::common::bin;

use warren_testkit::{TempRoot, text};

type R = Result<(), Box<dyn std::error::Error>>;

const CONFIG: &str = r#"
[agents.main]
[agents.main.workspace.access]
docs = "Read"
inbox = "Write"
[agents.docs]
[agents.inbox]
[agents.wild]
risk_profile = "open"
[agents.low]
risk_profile = "weaker"
[agents.low.workspace.access]
inbox = "Write"

[risk_profiles.open]
sandbox = "noop"
unrestricted = true
[risk_profiles.weaker]
sandbox = "landlock"
"#;

#[test]
fn the_full_sandbox_reports_no_escape_and_every_row_held_issue13() -> R {
    let root = TempRoot::new()?;
    root.write_config(CONFIG)?;
    let out = root.run(bin(), &["security", "selftest", "main"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("agent main: sandbox full"), "{stdout}");
    assert!(stdout.trim_end().ends_with("0 escapes"), "{stdout}");
    let held = stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("held"))
        .count();
    assert_eq!(held, 29, "every probe runs and is held:\n{stdout}");
    assert!(!stdout.contains("ESCAPE"), "{stdout}");
    Ok(())
}

#[test]
fn an_unconfined_agent_escapes_and_the_command_exits_1_issue13() -> R {
    let root = TempRoot::new()?;
    root.write_config(CONFIG)?;
    let out = root.run(bin(), &["--json", "security", "selftest", "wild"])?;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout)?;
    assert!(
        report["escapes"].as_u64().is_some_and(|n| n > 0),
        "{report}"
    );
    assert_eq!(report["agents"][0]["posture"]["active"], "noop");
    Ok(())
}

/// A daemon that is not root builds the sandbox inside a user namespace: the same matrix holds.
/// CI runs as root, so the test runs `warren` as `nobody` in a world-writable temp dir.
#[test]
fn a_daemon_that_is_not_root_gets_the_same_sandbox_through_a_user_namespace_issue13() -> R {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::os::unix::process::CommandExt;
    if std::fs::metadata("/proc/self")?.uid() != 0 {
        // Already unprivileged: the other tests of this file are this test.
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777))?;
    let home = dir.path().join("w");
    let run = |args: &[&str]| {
        std::process::Command::new(bin())
            .arg("--config-dir")
            .arg(&home)
            .args(args)
            .env_clear()
            .env("HOME", dir.path())
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .uid(65534)
            .gid(65534)
            .output()
    };
    let init = run(&["init"])?;
    if init.status.code() == Some(126)
        || String::from_utf8_lossy(&init.stderr).contains("Permission denied")
    {
        eprintln!(
            "SKIPPED: the warren binary is not executable by nobody here: {}",
            bin().display()
        );
        return Ok(());
    }
    assert!(init.status.success(), "{}", text(&init).1);
    let out = run(&["security", "selftest", "main"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("agent main: sandbox full"), "{stdout}");
    assert!(stdout.trim_end().ends_with("0 escapes"), "{stdout}");
    Ok(())
}

/// Issue 35 §1: next to a running daemon, a landlock-level child (the daemon's uid; uid 0 with
/// `CAP_DAC_OVERRIDE` as root) reaches `data/daemon.sock` by path. The selftest's control-socket
/// row tries the daemon's own socket with every key it can read: the daemon refuses it (the
/// peer check), and neither `data/daemon.key` nor `data/gateway.json` is readable. The guard-off
/// half (the uid check alone admits the same child) is
/// `escapes3::a_landlock_child_opened_a_session_as_another_agent_with_the_uid_check_alone_and_cannot_now_issue35`.
#[test]
fn a_landlock_child_cannot_open_a_session_on_the_running_daemons_socket_issue35() -> R {
    use std::time::Duration;
    let root = TempRoot::new()?;
    root.write_config(CONFIG)?;
    let mut daemon = warren_testkit::DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    daemon.wait_for("warren daemon ready", Duration::from_secs(30))?;
    let install = warren_config::InstallRoot::at(root.path());
    assert!(
        install.daemon_socket_key().exists(),
        "the daemon published its key"
    );
    let out = root.run(bin(), &["--json", "security", "selftest", "low"]);
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30))?;
    assert!(
        !install.daemon_socket_key().exists(),
        "the daemon removed its key"
    );
    let out = out?;
    let (stdout, stderr) = text(&out);
    let report: serde_json::Value = serde_json::from_str(&stdout)?;
    assert_eq!(
        report["agents"][0]["posture"]["active"], "landlock",
        "{stderr}"
    );
    let row = |probe: &str| {
        report["agents"][0]["rows"]
            .as_array()
            .and_then(|rows| rows.iter().find(|r| r["probe"] == probe).cloned())
            .unwrap_or_default()
    };
    let socket = row("control_socket");
    assert_eq!(socket["outcome"], "held", "{socket}");
    let detail = socket["detail"].as_str().unwrap_or_default();
    for seen in [
        "daemon.sock: {\"error\":\"refused pid",
        "seccomp filters",
        "daemon.key: Permission denied",
        "gateway.json: Permission denied",
    ] {
        assert!(detail.contains(seen), "{seen}: {detail}");
    }
    let watch = row("write_only_tier_watch");
    assert_eq!(watch["outcome"], "held", "{watch}");
    Ok(())
}
