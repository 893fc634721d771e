//! Spawn of `/bin/true` under the full sandbox (bwrap namespaces + the stage: rlimits, Landlock,
//! seccomp, `nobody` when root) against, in the same run, (a) the same spawn unsandboxed and
//! (b) plain `bwrap --unshare-all --die-with-parent /bin/true`. Target (issue 13): median ≤ 1.2×
//! plain bwrap. The landlock level (stage without namespaces) is printed for reference.
//!
//! Run: `cargo bench -p warren-security --bench spawn`.

#![allow(clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use warren_config::{ConfigStore, InstallRoot};
use warren_core::AgentAlias;
use warren_security::SecurityPolicy;
use warren_security::sandbox::{Backend, ChildIo, Sandbox};

const RUNS: usize = 300;
const TARGET: f64 = 1.2;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn sandbox(kind: &str) -> Result<(tempfile::TempDir, Sandbox), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let root = InstallRoot::at(dir.path().join("w"));
    root.ensure_layout()?;
    std::fs::write(
        root.config_file(),
        format!(
            "[agents.main]\nrisk_profile = \"b\"\n[agents.main.workspace.access]\ndocs = \"Read\"\ninbox = \"Write\"\nshared = \"ReadWrite\"\n[agents.docs]\n[agents.inbox]\n[agents.shared]\n[risk_profiles.b]\nsandbox = \"{kind}\"\n"
        ),
    )?;
    let config = ConfigStore::load(root.clone())?.snapshot().config().clone();
    let policy = SecurityPolicy::for_agent(&config, &root, &AgentAlias::new("main")?)?;
    Ok((dir, Sandbox::for_policy(&policy)?))
}

fn time(runs: usize, mut f: impl FnMut()) -> Duration {
    let mut v = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        f();
        v.push(t.elapsed());
    }
    median(v)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (_d1, full) = sandbox("auto")?;
    assert_eq!(
        full.backend(),
        Backend::Full,
        "this benchmark needs bwrap and Landlock"
    );
    let (_d2, landlock) = sandbox("landlock")?;
    let ws = full.policy().workspace().to_path_buf();
    let run_boxed = |s: &Sandbox| {
        let status = s
            .spawn("/bin/true", &[], ChildIo::Null)
            .expect("spawn")
            .wait()
            .expect("wait");
        assert!(status.success());
    };
    let bare = || {
        let mut c = Command::new("/bin/true");
        c.env_clear()
            .envs(full.child_env())
            .current_dir(&ws)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut c, 0);
        assert!(c.status().expect("true").success());
    };
    let bwrap = || {
        let status = Command::new("bwrap")
            .args([
                "--ro-bind",
                "/",
                "/",
                "--unshare-all",
                "--die-with-parent",
                "/bin/true",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("bwrap");
        assert!(status.success());
    };
    // Warm up every path (page cache, first-use probes), then interleave the measurements.
    for _ in 0..10 {
        run_boxed(&full);
        run_boxed(&landlock);
        bare();
        bwrap();
    }
    let (mut f, mut l, mut b, mut w) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..RUNS / 10 {
        f.push(time(10, || run_boxed(&full)));
        l.push(time(10, || run_boxed(&landlock)));
        b.push(time(10, bare));
        w.push(time(10, bwrap));
    }
    let (f, l, b, w) = (median(f), median(l), median(b), median(w));
    let ratio = f.as_secs_f64() / w.as_secs_f64();
    println!("spawn /bin/true, median of {RUNS} (build + spawn + wait)");
    println!("  full sandbox:        {f:?}");
    println!("  landlock level:      {l:?}");
    println!(
        "  unsandboxed:         {b:?}   (full / unsandboxed = {:.1}x)",
        f.as_secs_f64() / b.as_secs_f64()
    );
    println!("  plain bwrap:         {w:?}");
    println!("  full / plain bwrap:  {ratio:.2}x (target <= {TARGET}x)");
    if ratio > TARGET {
        return Err(
            format!("full sandbox spawn is {ratio:.2}x plain bwrap (target {TARGET}x)").into(),
        );
    }
    Ok(())
}
