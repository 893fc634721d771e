//! `warren --version` wall time against `/bin/true` in the same run (process spawn is the
//! floor). Target: median ≤ 2 ms on the CI machine.
//!
//! Run: `cargo bench -p warren-cli --bench startup`.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RUNS: usize = 300;
const TARGET: Duration = Duration::from_millis(2);

fn median_spawn(program: &str, args: &[&str]) -> Result<Duration, Box<dyn std::error::Error>> {
    let mut times = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let t = Instant::now();
        let status = Command::new(program)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        times.push(t.elapsed());
        if !status.success() {
            return Err(format!("{program} {args:?} failed: {status}").into());
        }
    }
    times.sort_unstable();
    Ok(times[RUNS / 2])
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let warren = env!("CARGO_BIN_EXE_warren");
    // Warm the page cache for both binaries first.
    median_spawn(warren, &["--version"])?;
    let true_median = median_spawn("/bin/true", &[])?;
    let warren_median = median_spawn(warren, &["--version"])?;
    println!("startup (median of {RUNS} spawns)");
    println!("  /bin/true:          {true_median:?}");
    println!("  warren --version:   {warren_median:?}");
    println!(
        "  ratio:              {:.2}x /bin/true (target: warren median <= {TARGET:?})",
        warren_median.as_secs_f64() / true_median.as_secs_f64()
    );
    if warren_median > TARGET {
        return Err(format!("warren --version median {warren_median:?} exceeds {TARGET:?}").into());
    }
    Ok(())
}
