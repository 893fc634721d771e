//! A reload drains in-flight requests promptly (issue 36 §5; NOT FIXED YET, the test is
//! ignored and reproduces the stall when run with `--ignored`), with a real daemon: a
//! `PATCH /api/config` loop runs while `warren config set` (which writes config.toml and asks
//! the daemon to reload) loops beside it. Some reloads wait the whole `shutdown_grace_secs`
//! (10 s) for the old gateway to drain and then abort it; a PATCH then takes ~10 s. The cause
//! is not found yet: answering a PATCH's own reload request from the store when its generation
//! is already stopping (a suspected wait cycle) did not remove the stall. No PATCH may take
//! anywhere near the grace.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common::bin;
use warren_testkit::{DaemonChild, TempRoot, free_port, http, pair, text};

type R = Result<(), Box<dyn std::error::Error>>;

/// `warren config set` calls, each a write and a reload, beside this many PATCH loops.
const SETS: u32 = 60;
const PATCHERS: u32 = 3;

#[test]
#[ignore = "issue 36 §5 not fixed yet: reproduces the 10 s stall (max 10.2-10.4 s, `did not stop within 10s; aborted subsystem=gateway`) on the pre-session code and on this branch"]
fn a_patch_in_flight_during_a_cli_reload_is_not_stalled_by_the_grace_issue36() -> R {
    let root = Arc::new(TempRoot::new()?);
    let port = free_port()?;
    root.write_config(&format!("[agents.main]\n\n[gateway]\nport = {port}\n"))?;
    let mut daemon = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    daemon.wait_for("warren daemon ready", Duration::from_secs(30))?;
    let token = pair(&root, bin(), port, "ops")?;
    let done = Arc::new(AtomicBool::new(false));
    let patchers: Vec<_> = (0..PATCHERS)
        .map(|p| {
            let (done, token) = (Arc::clone(&done), token.clone());
            std::thread::spawn(move || {
                let mut latencies = Vec::new();
                let mut i = 0u32;
                while !done.load(Ordering::Relaxed) {
                    i += 1;
                    let body = format!(r#"{{"cost.rates.patch{p}.input_per_mtok": {i}.5}}"#);
                    let started = Instant::now();
                    let answer = http(port, "PATCH", "/api/config", Some(&token), &body);
                    latencies.push((started.elapsed(), answer.map(|(s, _)| s).ok()));
                }
                latencies
            })
        })
        .collect();
    for i in 0..SETS {
        let out = root.run(
            bin(),
            &[
                "config",
                "set",
                "cost.rates.cli.input_per_mtok",
                &format!("{i}.25"),
            ],
        )?;
        assert!(out.status.success(), "{:?}", text(&out));
    }
    done.store(true, Ordering::Relaxed);
    let mut latencies = Vec::new();
    for patcher in patchers {
        latencies.extend(patcher.join().map_err(|_| "PATCH loop panicked")?);
    }
    let worst = latencies.iter().map(|(d, _)| *d).max().unwrap_or_default();
    let mut sorted: Vec<Duration> = latencies.iter().map(|(d, _)| *d).collect();
    sorted.sort();
    let p99 = sorted
        .get(sorted.len() * 99 / 100)
        .copied()
        .unwrap_or_default();
    eprintln!("{} PATCHes: p99 {p99:?}, max {worst:?}", latencies.len());
    let failed: Vec<_> = latencies
        .iter()
        .filter(|(_, s)| !matches!(s, Some(200 | 409)))
        .collect();
    assert!(failed.is_empty(), "PATCHes failed: {failed:?}");
    if worst >= Duration::from_secs(5) {
        let aborted = daemon.saw_or_wait_for("did not stop within", Duration::from_secs(1));
        panic!("a PATCH took {worst:?}; the daemon said: {aborted:?}");
    }
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(20))?;
    Ok(())
}
