//! Issue 26's start-up shortcut: `warren --version` or `-V` alone is answered before clap builds
//! the command tree, with exactly the text clap prints when the flag comes with other arguments;
//! a closed stdout does not crash it (the release build aborts on panics).

use std::process::{Command, Stdio};

use crate::common::bin;

type R = Result<(), Box<dyn std::error::Error>>;

fn stdout_of(args: &[&str]) -> Result<String, Box<dyn std::error::Error>> {
    let out = Command::new(bin())
        .args(args)
        .stdin(Stdio::null())
        .output()?;
    assert!(out.status.success(), "warren {args:?}: {out:?}");
    assert!(
        out.stderr.is_empty(),
        "warren {args:?} wrote to stderr: {out:?}"
    );
    Ok(String::from_utf8(out.stdout)?)
}

#[test]
fn version_alone_prints_what_clap_prints() -> R {
    let dir = tempfile::tempdir()?;
    let dir = dir.path().to_str().ok_or("temp dir path")?;
    // With `--config-dir` first, clap parses the command line and prints the version.
    let by_clap = stdout_of(&["--config-dir", dir, "--version"])?;
    assert_eq!(by_clap, format!("warren {}\n", env!("CARGO_PKG_VERSION")));
    assert_eq!(stdout_of(&["--version"])?, by_clap);
    assert_eq!(stdout_of(&["-V"])?, by_clap);
    // Not the shortcut: another argument after it is still clap's business.
    let out = Command::new(bin()).args(["--version", "extra"]).output()?;
    assert_eq!(String::from_utf8(out.stdout)?, by_clap);
    Ok(())
}

#[test]
fn version_to_a_closed_stdout_exits_cleanly() -> R {
    let mut child = Command::new(bin())
        .arg("--version")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    drop(child.stdout.take());
    let out = child.wait_with_output()?;
    assert!(out.status.success(), "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
    Ok(())
}
