//! Peak RSS of a one-shot `warren agent -m` over the offline demo (`script` provider: three
//! tool rounds, files and memory), read from `getrusage(RUSAGE_CHILDREN)` after the child
//! exits, against `warren --version` measured the same way in the same run (the binary's
//! floor). Target: ≤ 15 MB.
//!
//! Run: `cargo bench -p warren-cli --bench agent_rss`.

use std::process::{Command, Stdio};

const TARGET_KB: i64 = 15 * 1024;

/// Peak RSS (KiB) of one child: run it in a fresh helper process so RUSAGE_CHILDREN holds
/// only that child.
fn peak_rss_kb(args: &[&str], root: &std::path::Path) -> Result<i64, Box<dyn std::error::Error>> {
    let warren = env!("CARGO_BIN_EXE_warren");
    let out = Command::new(std::env::current_exe()?)
        .arg("--child")
        .arg(warren)
        .arg(root)
        .args(args)
        .stdin(Stdio::null())
        .output()?;
    if !out.status.success() {
        return Err(format!("child failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(String::from_utf8(out.stdout)?.trim().parse()?)
}

fn child(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let (warren, root, rest) = (&args[0], &args[1], &args[2..]);
    let status = Command::new(warren)
        .arg("--config-dir")
        .arg(root)
        .args(rest)
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OLLAMA_HOST")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if !status.success() {
        return Err(format!("warren {rest:?} failed: {status}").into());
    }
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // Neither std nor rustix wraps getrusage; this benchmark (never shipped) calls it directly.
    // SAFETY: `usage` is a valid, zero-initialised `rusage` that getrusage only writes to;
    // an all-zero `rusage` is a valid value even if the call failed.
    #[allow(unsafe_code)]
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_CHILDREN, usage.as_mut_ptr());
        usage.assume_init()
    };
    println!("{}", usage.ru_maxrss);
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        return child(&args[1..]);
    }
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("warren");
    peak_rss_kb(&["init"], &root)?;
    // The demo writes files: let it run without an approval prompt.
    let config = std::fs::read_to_string(root.join("config.toml"))?
        .replace("risk_profile = \"default\"", "risk_profile = \"bench\"")
        + "\n[risk_profiles.bench]\nautonomy = \"full\"\n";
    std::fs::write(root.join("config.toml"), config)?;
    let floor = peak_rss_kb(&["--version"], &root)?;
    let agent = peak_rss_kb(&["agent", "-m", "hello", "--session", "bench"], &root)?;
    println!("peak RSS, one-shot `warren agent -m` over the demo script");
    println!("  warren --version:  {floor} KiB");
    println!("  warren agent -m:   {agent} KiB");
    println!(
        "  ratio:             {:.2}x --version (target: agent <= {TARGET_KB} KiB)",
        agent as f64 / floor as f64
    );
    if agent > TARGET_KB {
        return Err(format!("peak RSS {agent} KiB exceeds {TARGET_KB} KiB").into());
    }
    Ok(())
}
