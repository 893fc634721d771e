//! Peak RSS of a one-shot `warren agent -m` over the offline demo (`script` provider: three
//! tool rounds, files and memory), against `warren --version` measured the same way in the same
//! run (the binary's floor). Target: issue 26's one-shot peak (`ONESHOT_PEAK_MIB` in
//! `bench/footprint-targets`, also read by `bench/footprint`).
//!
//! Peak RSS is the process's own high-water mark as `/usr/bin/time -f %M` reports it (GNU time
//! forks a small process that execs the command), never this bench's `wait4`/`getrusage`:
//! std spawns with `vfork`-like `posix_spawn`, and the kernel then counts the spawning
//! process's pages into the child's `ru_maxrss` (issue 26).
//!
//! Run: `cargo bench -p warren-cli --bench agent_rss`.

use std::path::Path;
use std::process::{Command, Stdio};

mod common;

use common::{E, target};

const RUNS: usize = 7;

/// Peak RSS (KiB) of `warren --config-dir ROOT ARGS`, median of [`RUNS`].
fn peak_rss_kib(args: &[&str], root: &Path, out: &Path) -> Result<u64, E> {
    let mut peaks = Vec::new();
    for _ in 0..RUNS {
        let status = Command::new("/usr/bin/time")
            .arg("-f")
            .arg("%M")
            .arg("-o")
            .arg(out)
            .arg(env!("CARGO_BIN_EXE_warren"))
            .arg("--config-dir")
            .arg(root)
            .args(args)
            .env_remove("OPENAI_API_KEY")
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("OLLAMA_HOST")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| format!("/usr/bin/time (Debian's `time` package): {e}"))?;
        if !status.success() {
            return Err(format!("warren {args:?} failed: {status}").into());
        }
        let text = std::fs::read_to_string(out)?;
        let last = text.lines().last().unwrap_or_default().trim();
        peaks.push(
            last.parse()
                .map_err(|e| format!("/usr/bin/time printed {last:?}: {e}"))?,
        );
    }
    peaks.sort_unstable();
    Ok(peaks[RUNS / 2])
}

fn main() -> Result<(), E> {
    let target_kib = (target("ONESHOT_PEAK_MIB")? * 1024.0) as u64;
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("warren");
    let out = dir.path().join("time.out");
    let status = Command::new(env!("CARGO_BIN_EXE_warren"))
        .arg("--config-dir")
        .arg(&root)
        .arg("init")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OLLAMA_HOST")
        .stdout(Stdio::null())
        .status()?;
    if !status.success() {
        return Err(format!("warren init failed: {status}").into());
    }
    // The demo writes files: let it run without an approval prompt.
    let config = std::fs::read_to_string(root.join("config.toml"))?
        .replace("risk_profile = \"default\"", "risk_profile = \"bench\"")
        + "\n[risk_profiles.bench]\nautonomy = \"full\"\n";
    std::fs::write(root.join("config.toml"), config)?;
    let floor = peak_rss_kib(&["--version"], &root, &out)?;
    let agent = peak_rss_kib(&["agent", "-m", "hello", "--session", "bench"], &root, &out)?;
    println!(
        "peak RSS (/usr/bin/time -f %M, median of {RUNS}), one-shot `warren agent -m` over the demo script"
    );
    println!("  warren --version:  {floor} KiB");
    println!("  warren agent -m:   {agent} KiB");
    println!(
        "  ratio:             {:.2}x --version (target: agent <= {target_kib} KiB)",
        agent as f64 / floor as f64
    );
    if agent > target_kib {
        return Err(format!("peak RSS {agent} KiB exceeds {target_kib} KiB").into());
    }
    Ok(())
}
