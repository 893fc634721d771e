//! What the shell's egress proxy costs a spawn (issue 24 §3): `/bin/true` under the full
//! sandbox of an agent with a network allowlist (the launcher brings up `lo`, opens the proxy
//! listener in the new namespace and hands it to the daemon, which watches the child's exit)
//! against, in the same run, the same sandbox without an allowlist. Target: median ≤ 1.3×.
//!
//! Run: `cargo bench -p warren-security --bench egress_spawn`.

#![allow(clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use warren_config::{ConfigStore, InstallRoot};
use warren_core::AgentAlias;
use warren_security::SecurityPolicy;
use warren_security::sandbox::{Backend, ChildIo, EgressProxy, ExitWatch, Sandbox};

const RUNS: usize = 300;
const TARGET: f64 = 1.3;

/// Takes the listener and watches the exit on a thread, as the runtime's proxy does (without
/// serving anything: this measures the spawn, not a connection).
#[derive(Debug)]
struct Idle;

impl EgressProxy for Idle {
    fn serve(&self, listener: std::net::TcpListener, exited: ExitWatch) {
        std::thread::spawn(move || {
            exited.wait();
            drop(listener);
        });
    }
    fn take_used(&self) -> bool {
        false
    }
}

fn sandbox(allow: &str) -> Result<(tempfile::TempDir, Sandbox), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let root = InstallRoot::at(dir.path().join("w"));
    root.ensure_layout()?;
    std::fs::write(
        root.config_file(),
        format!("[agents.main]\n[agents.main.network]\nallow = [{allow}]\n"),
    )?;
    let config = ConfigStore::load(root.clone())?.snapshot().config().clone();
    let policy = SecurityPolicy::for_agent(&config, &root, &AgentAlias::new("main")?)?;
    Ok((dir, Sandbox::for_policy(&policy)?))
}

fn median(runs: usize, s: &Sandbox) -> Duration {
    let mut v = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        let status = s
            .spawn("/bin/true", &[], ChildIo::Null)
            .expect("spawn")
            .wait()
            .expect("wait");
        assert!(status.success());
        v.push(t.elapsed());
    }
    v.sort_unstable();
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (_d1, plain) = sandbox("")?;
    let (_d2, proxied) = sandbox("\"api.github.com\"")?;
    assert_eq!(
        plain.backend(),
        Backend::Full,
        "this benchmark needs the full sandbox"
    );
    proxied.set_egress_proxy(Arc::new(Idle));
    assert!(proxied.proxied() && !plain.proxied());
    // Warm both (rules and filters are built on first use).
    median(10, &plain);
    median(10, &proxied);
    let base = median(RUNS, &plain);
    let with = median(RUNS, &proxied);
    let ratio = with.as_secs_f64() / base.as_secs_f64();
    println!(
        "spawn /bin/true, full sandbox, median of {RUNS}: no allowlist {:.2} ms, with the egress proxy {:.2} ms, ratio {ratio:.2}x (target <= {TARGET}x)",
        base.as_secs_f64() * 1e3,
        with.as_secs_f64() * 1e3
    );
    if ratio > TARGET {
        return Err(format!("egress proxy spawn ratio {ratio:.2}x exceeds {TARGET}x").into());
    }
    Ok(())
}
