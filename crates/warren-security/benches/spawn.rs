//! Spawn overhead of a Landlock-sandboxed `/bin/true` against the same unsandboxed spawn (same
//! cleared environment, cwd and process group) in the same run. Target: median ratio ≤ 1.3.
//!
//! Run: `cargo bench -p warren-security --bench spawn`.

#![allow(clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use warren_config::{ConfigStore, InstallRoot};
use warren_core::AgentAlias;
use warren_security::SecurityPolicy;
use warren_security::sandbox::{Backend, ChildIo, Sandbox};

const RUNS: usize = 500;
const TARGET: f64 = 1.3;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let root = InstallRoot::at(dir.path().join("w"));
    root.ensure_layout()?;
    std::fs::write(
        root.config_file(),
        "[agents.main.workspace.access]\ndocs = \"Read\"\ninbox = \"Write\"\nshared = \"ReadWrite\"\n[agents.docs]\n[agents.inbox]\n[agents.shared]\n",
    )?;
    let config = ConfigStore::load(root.clone())?.snapshot().config().clone();
    let policy = SecurityPolicy::for_agent(&config, &root, &AgentAlias::new("main")?)?;
    let sandbox = Sandbox::for_policy(&policy)?;
    assert_eq!(
        sandbox.backend(),
        Backend::Landlock,
        "this benchmark needs Landlock"
    );
    let plain = || {
        let mut c = Command::new("/bin/true");
        c.env_clear()
            .envs(sandbox.child_env())
            .current_dir(policy.workspace())
            .stdin(Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut c, 0);
        c
    };
    let (mut boxed, mut bare) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        let t = Instant::now();
        let status = sandbox.spawn("/bin/true", &[], ChildIo::Null)?.wait()?;
        boxed.push(t.elapsed());
        assert!(status.success());
        let t = Instant::now();
        let status = plain()
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        bare.push(t.elapsed());
        assert!(status.success());
    }
    let mut forked = Vec::new();
    for _ in 0..RUNS {
        let mut c = plain();
        #[allow(unsafe_code)]
        // SAFETY: an empty hook; it only forces the fork+exec path for comparison.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut c, || Ok(()));
        }
        let t = Instant::now();
        c.status()?;
        forked.push(t.elapsed());
    }
    println!(
        "  (unsandboxed with an empty pre_exec hook, i.e. fork+exec: {:?})",
        median(forked)
    );
    let (boxed, bare) = (median(boxed), median(bare));
    let ratio = boxed.as_secs_f64() / bare.as_secs_f64();
    println!("spawn /bin/true (median of {RUNS}, build + spawn + wait)");
    println!("  landlock sandbox:  {boxed:?}");
    println!("  unsandboxed:       {bare:?}");
    println!("  ratio:             {ratio:.2}x (target <= {TARGET}x)");
    if ratio > TARGET {
        return Err(format!("sandboxed spawn ratio {ratio:.2}x exceeds {TARGET}x").into());
    }
    Ok(())
}
