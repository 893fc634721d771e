//! `[log] level` (STATE-13, issue 14 §4) decides what a real daemon logs, from its first
//! generation and after every reload: at `warn` its `info` lines ("warren daemon ready") are
//! not printed, at `info` they are, and a reload back to `warn` silences them again. An error
//! (a refused reload) is printed at every level and marks how far the output was read.

use crate::common::bin;
use std::time::Duration;

use warren_testkit::{DaemonChild, TempRoot};

type R = Result<(), Box<dyn std::error::Error>>;

const WAIT: Duration = Duration::from_secs(30);
const READY: &str = "warren daemon ready";

/// The config with `level`, on the daemon's gateway `port`.
fn config(level: &str, port: u16) -> String {
    format!("[agents.main]\n\n[log]\nlevel = \"{level}\"\n\n[gateway]\nport = {port}\n")
}

/// Makes the daemon print an error (a reload refused for an invalid config), waits for it and
/// restores `valid`; returns the stderr lines read up to the error.
fn mark(
    root: &TempRoot,
    daemon: &mut DaemonChild,
    valid: &str,
) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    std::fs::write(root.config_path(), "[log]\nlevel = 7\n")?;
    daemon.signal("HUP")?;
    daemon.wait_for("reload refused", WAIT)?;
    std::fs::write(root.config_path(), valid)?;
    Ok(daemon.stderr_seen().to_vec())
}

/// Waits until `warren status` sees the daemon running (its signal handlers are installed).
fn wait_running(root: &TempRoot) -> R {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let out = root.run(bin(), &["status", "--json"])?;
        let status: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        if status["daemon"]["status"] == "running" {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            return Err(format!("the daemon did not start: {status}").into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn readies(lines: &[String]) -> usize {
    lines.iter().filter(|l| l.contains(READY)).count()
}

#[test]
fn a_reload_that_changes_log_level_changes_what_the_daemon_logs_state13() -> R {
    let root = TempRoot::new()?;
    let port = root.write_config_on_free_port("[agents.main]\n")?;
    std::fs::write(root.config_path(), config("warn", port))?;
    let mut daemon = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    wait_running(&root)?;

    // Generation 1 at warn: no info line by the time an error is printed.
    let seen = mark(&root, &mut daemon, &config("warn", port))?;
    assert_eq!(
        readies(&seen),
        0,
        "info printed at warn:\n{}",
        seen.join("\n")
    );

    // Reload to info: the next generation's info lines are printed.
    std::fs::write(root.config_path(), config("info", port))?;
    daemon.signal("HUP")?;
    daemon.wait_for(READY, WAIT)?;

    // Reload back to warn: that generation's "ready" is not printed.
    std::fs::write(root.config_path(), config("warn", port))?;
    daemon.signal("HUP")?;
    daemon.wait_for("config reloaded", WAIT)?;
    let before = readies(daemon.stderr_seen());
    let seen = mark(&root, &mut daemon, &config("warn", port))?;
    assert_eq!(
        readies(&seen),
        before,
        "info printed after the reload to warn:\n{}",
        seen.join("\n")
    );

    daemon.signal("TERM")?;
    assert_eq!(daemon.wait(WAIT)?.code(), Some(0));
    Ok(())
}
