//! Issue 26's start-up shortcut: `warren --version` or `-V` alone is answered before clap builds
//! the command tree, with exactly the text clap prints when the flag comes with other arguments;
//! a closed stdout does not crash it (the release build aborts on panics).

use std::process::{Command, Stdio};

use crate::common::bin;

type R = Result<(), Box<dyn std::error::Error>>;

fn stdout_of(args: &[&str]) -> Result<String, Box<dyn std::error::Error>> {
    let out = Command::new(bin())
        .args(args)
        .stdin(Stdio::null())
        .output()?;
    assert!(out.status.success(), "warren {args:?}: {out:?}");
    assert!(
        out.stderr.is_empty(),
        "warren {args:?} wrote to stderr: {out:?}"
    );
    Ok(String::from_utf8(out.stdout)?)
}

#[test]
fn version_alone_prints_what_clap_prints() -> R {
    let dir = tempfile::tempdir()?;
    let dir = dir.path().to_str().ok_or("temp dir path")?;
    // With `--config-dir` first, clap parses the command line and prints the version.
    let by_clap = stdout_of(&["--config-dir", dir, "--version"])?;
    assert_eq!(by_clap, format!("warren {}\n", env!("CARGO_PKG_VERSION")));
    assert_eq!(stdout_of(&["--version"])?, by_clap);
    assert_eq!(stdout_of(&["-V"])?, by_clap);
    // Not the shortcut: another argument after it is still clap's business.
    let out = Command::new(bin()).args(["--version", "extra"]).output()?;
    assert_eq!(String::from_utf8(out.stdout)?, by_clap);
    Ok(())
}

#[test]
fn version_to_a_closed_stdout_exits_cleanly() -> R {
    let mut child = Command::new(bin())
        .arg("--version")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    drop(child.stdout.take());
    let out = child.wait_with_output()?;
    assert!(out.status.success(), "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
    Ok(())
}

/// Issue 26: the listener binds right after the config loads and answers `/health` while the
/// rest of the start-up runs (stalled here for 1.5 s by a failpoint); any other request waits
/// for the first generation's routes and then gets their answer (not a refusal, not a 503).
#[test]
fn health_answers_while_the_daemon_is_still_starting() -> R {
    use std::time::{Duration, Instant};
    use warren_testkit::{DaemonChild, TempRoot, free_port, http};

    let root = TempRoot::new()?;
    let port = free_port()?;
    root.write_config(&format!("[agents.main]\n\n[gateway]\nport = {port}\n"))?;
    let mut cmd = root.warren(bin(), &["daemon"]);
    cmd.env("FAILPOINTS", "daemon-start-after-bind=sleep(1500)");
    let started = Instant::now();
    let mut daemon = DaemonChild::spawn(cmd)?;
    let health = loop {
        if let Ok(answer) = http(port, "GET", "/health", None, "") {
            break answer;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no /health answer"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let answered_after = started.elapsed();
    // Issue 36 §4: liveness says `starting` until the daemon is ready.
    assert_eq!(health, (200, serde_json::json!({"status": "starting"})));
    // Still starting: the start-up stalls for 1.5 s after the bind, and no generation is up
    // yet, so the endpoint file is not published.
    assert!(
        answered_after < Duration::from_millis(1500),
        "/health answered only {answered_after:?} after spawn"
    );
    let endpoint = warren_config::InstallRoot::at(root.path()).gateway_admin();
    assert!(!endpoint.exists(), "{} exists", endpoint.display());
    // A route of the generation waits for it, then answers as it would have.
    assert_eq!(http(port, "GET", "/api/status", None, "")?.0, 401);
    assert!(started.elapsed() >= Duration::from_millis(1500));
    daemon.wait_for("warren daemon ready", Duration::from_secs(20))?;
    Ok(())
}
