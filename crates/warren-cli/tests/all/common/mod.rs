//! Helpers the warren-cli suites share: the binary under test, `--json` commands and polling.

mod tmpfs;

pub use tmpfs::Tmpfs;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use warren_testkit::{TempRoot, text};

/// The `warren` binary cargo built for these tests.
pub fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_warren"))
}

/// Runs `warren --json ARGS` in `root` and parses its stdout; a failing command is an error
/// carrying its output.
pub fn json_of(root: &TempRoot, args: &[&str]) -> Result<Value, Box<dyn std::error::Error>> {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = root.run(bin(), &all)?;
    let (stdout, stderr) = text(&out);
    if !out.status.success() {
        return Err(format!("warren {args:?} failed: {stdout}{stderr}").into());
    }
    Ok(serde_json::from_str(&stdout)?)
}

/// Polls `check` every 100 ms until it holds, failing with `what` after `timeout`.
pub fn wait_until(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<bool, Box<dyn std::error::Error>>,
) -> Result<(), Box<dyn std::error::Error>> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if check()? {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!("timed out waiting for {what}").into())
}
