//! Ready means ready (issue 36 §4), with a real daemon: `/health` says `starting` and `/ready`
//! answers 503 until every subsystem of the first generation started; the new admin key is in
//! `data/gateway.json` before the listener answers anything but `/health` and `/ready`; and in
//! a kill loop (SIGKILL, so the previous daemon's `gateway.json` with its old key stays behind)
//! a CLI admin call made the moment `/health` first answers succeeds every time.

use std::time::{Duration, Instant};

use crate::common::bin;
use warren_testkit::{DaemonChild, TempRoot, free_port, http, text};

type R = Result<(), Box<dyn std::error::Error>>;

/// Polls `GET path` until it answers; the answer and when.
fn first_answer(
    port: u16,
    path: &str,
    since: Instant,
) -> Result<(u16, serde_json::Value, Duration), Box<dyn std::error::Error>> {
    loop {
        if let Ok((status, body)) = http(port, "GET", path, None, "") {
            return Ok((status, body, since.elapsed()));
        }
        if since.elapsed() > Duration::from_secs(20) {
            return Err(format!("no answer to {path}").into());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn health_says_starting_and_ready_is_503_until_every_subsystem_started_issue36() -> R {
    let root = TempRoot::new()?;
    let port = free_port()?;
    root.write_config(&format!("[agents.main]\n\n[gateway]\nport = {port}\n"))?;
    let mut cmd = root.warren(bin(), &["daemon"]);
    cmd.env("FAILPOINTS", "daemon-start-after-bind=sleep(1500)");
    let started = Instant::now();
    let mut daemon = DaemonChild::spawn(cmd)?;
    let (status, health, _) = first_answer(port, "/health", started)?;
    assert_eq!(status, 200, "liveness answers 200 while starting");
    assert_eq!(health["status"], "starting", "{health}");
    let (status, ready) = http(port, "GET", "/ready", None, "")?;
    assert_eq!(status, 503, "{ready}");
    assert_eq!(ready["status"], "starting", "{ready}");
    daemon.wait_for("warren daemon ready", Duration::from_secs(20))?;
    // Ready: both say so (the routes are installed right after the log line's hooks ran).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (status, ready) = http(port, "GET", "/ready", None, "")?;
        if status == 200 {
            assert_eq!(ready["status"], "ready", "{ready}");
            break;
        }
        assert!(Instant::now() < deadline, "/ready stayed {status}: {ready}");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(http(port, "GET", "/health", None, "")?.1["status"], "ok");
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(20))?;
    Ok(())
}

/// The kill loop of the issue: each round SIGKILLs the daemon (its `gateway.json`, with the
/// old admin key, stays behind), starts a new one and, the moment `/health` answers, runs
/// `warren pair` (an admin call with the key from `gateway.json`) and `warren cron add` (whose
/// answer says whether the new daemon's scheduler took the job). Every call must succeed and
/// see a running scheduler.
#[test]
fn admin_calls_right_after_a_restart_never_see_the_old_key_or_a_half_started_daemon_issue36() -> R {
    let root = TempRoot::new()?;
    let port = free_port()?;
    root.write_config(&format!("[agents.main]\n\n[gateway]\nport = {port}\n"))?;
    let rounds = 12;
    let mut failures = Vec::new();
    let mut starting_for = Vec::new();
    for round in 0..rounds {
        let started = Instant::now();
        let mut daemon = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
        let (_, health, at) = first_answer(port, "/health", started)?;
        // Meanwhile: how long `/health` says `starting` (polled every millisecond).
        let watcher = std::thread::spawn(move || {
            let since = Instant::now();
            while since.elapsed() < Duration::from_secs(10) {
                match http(port, "GET", "/health", None, "") {
                    Ok((_, h)) if h["status"] == "ok" => return Some(since.elapsed()),
                    _ => std::thread::sleep(Duration::from_millis(1)),
                }
            }
            None
        });
        let pair = root.run(bin(), &["pair", "--json"])?;
        if !pair.status.success() {
            failures.push(format!(
                "round {round} (health {health} at {at:?}): pair: {:?}",
                text(&pair)
            ));
        }
        let name = format!("job{round}");
        let add = root.run(
            bin(),
            &[
                "cron",
                "add",
                &name,
                "--agent",
                "main",
                "--every",
                "1h",
                "--message",
                "hi",
            ],
        )?;
        let (stdout, stderr) = text(&add);
        if !add.status.success() || !stdout.contains("scheduled by the running daemon") {
            failures.push(format!("round {round}: cron add: {stdout}{stderr}"));
        }
        starting_for.push(watcher.join().ok().flatten());
        daemon.signal("KILL")?;
        daemon.wait(Duration::from_secs(20))?;
    }
    eprintln!("/health said `starting` for (per round, from its first answer): {starting_for:?}");
    assert!(
        failures.is_empty(),
        "{} of {} rounds failed:\n{}",
        failures.len(),
        rounds,
        failures.join("\n")
    );
    Ok(())
}
