//! `file_read` of a 1 MB text file through the agent's policy and confined handles, against
//! `std::fs::read` of the same file in the same run. Target: median ratio ≤ 1.2.
//!
//! Run: `cargo bench -p warren-tools --bench file_read`.

#![allow(clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::json;
use warren_config::{ConfigStore, InstallRoot};
use warren_core::AgentAlias;
use warren_security::SecurityPolicy;
use warren_security::confined;
use warren_tools::{FileRead, MAX_READ_BYTES, Tool};

const RUNS: usize = 400;
const TARGET: f64 = 1.2;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let root = InstallRoot::at(dir.path().join("w"));
    root.ensure_layout()?;
    std::fs::write(root.config_file(), "[agents.main]\n")?;
    let config = ConfigStore::load(root.clone())?.snapshot().config().clone();
    let policy = SecurityPolicy::for_agent(&config, &root, &AgentAlias::new("main")?)?;
    policy.ensure_workspace()?;
    let path = policy.workspace().join("big.txt");
    let line = "the quick brown fox jumps over the lazy dog 0123456789 abcdefghij\n";
    std::fs::write(&path, line.repeat(1024 * 1024 / line.len()))?;
    let tool = FileRead::new(policy.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;

    let (mut baseline, mut layer, mut whole) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..RUNS {
        let t = Instant::now();
        let bytes = std::fs::read(&path)?;
        baseline.push(t.elapsed());
        assert!(bytes.len() > 1_000_000);

        let t = Instant::now();
        let resolved = policy.can_read(&path).map_err(|e| e.to_string())?;
        let bytes = confined::read(&resolved, MAX_READ_BYTES)?;
        layer.push(t.elapsed());
        assert!(bytes.len() > 1_000_000);

        let t = Instant::now();
        let out = rt
            .block_on(tool.execute(json!({"path": "big.txt"})))
            .map_err(|e| e.to_string())?;
        whole.push(t.elapsed());
        assert!(
            out.content["total_lines"]
                .as_u64()
                .is_some_and(|n| n > 10_000)
        );
    }
    let (baseline, layer, whole) = (median(baseline), median(layer), median(whole));
    let ratio = layer.as_secs_f64() / baseline.as_secs_f64();
    println!("read a 1 MB file (median of {RUNS})");
    println!("  std::fs::read:                         {baseline:?}");
    println!(
        "  policy decision + confined read:       {layer:?}  ratio {ratio:.2}x (target <= {TARGET}x)"
    );
    println!(
        "  file_read tool (+ UTF-8 check, line count, JSON result): {whole:?}  ratio {:.2}x",
        whole.as_secs_f64() / baseline.as_secs_f64()
    );
    if ratio > TARGET {
        return Err(format!("file_read ratio {ratio:.2}x exceeds {TARGET}x").into());
    }
    Ok(())
}
