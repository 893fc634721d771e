//! The README's "try it" blocks run as written (issue 16): every ```sh block preceded by the
//! line `<!-- try -->` is run with bash (`set -e`, no provider key in the environment unless the block names one) in a
//! fresh install root, with `warren` on
//! PATH being the binary under test and `cargo run --release -p warren-cli --` standing for
//! it, and must exit 0. A README edit that breaks a shown command fails here.

use std::path::Path;
use std::process::Command;

use crate::common::bin;

type R = Result<(), Box<dyn std::error::Error>>;

const MARK: &str = "<!-- try -->";

/// The marked blocks of `readme`, each with its line number.
fn try_blocks(readme: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = readme.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim() == MARK && lines.get(i + 1).is_some_and(|l| l.trim() == "```sh") {
            let start = i + 2;
            let mut end = start;
            while end < lines.len() && lines[end].trim() != "```" {
                end += 1;
            }
            out.push((start + 1, lines[start..end].join("\n")));
            i = end;
        }
        i += 1;
    }
    out
}

#[test]
fn the_readmes_try_it_blocks_run_as_written_issue16() -> R {
    let readme_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let readme = std::fs::read_to_string(&readme_path)?;
    let blocks = try_blocks(&readme);
    assert!(
        blocks.len() >= 2,
        "README.md has {} blocks marked {MARK}; the first-run and config blocks are",
        blocks.len()
    );
    for (line, block) in blocks {
        let home = tempfile::tempdir()?;
        let path_dir = tempfile::tempdir()?;
        std::os::unix::fs::symlink(bin(), path_dir.path().join("warren"))?;
        let script = format!(
            "set -eo pipefail\n{}\n",
            block.replace("cargo run --release -p warren-cli --", "warren")
        );
        let mut cmd = Command::new("bash");
        cmd.arg("-c")
            .arg(&script)
            .env_clear()
            .env(
                "PATH",
                format!("{}:/usr/local/bin:/usr/bin:/bin", path_dir.path().display()),
            )
            .env("HOME", home.path())
            .env("WARREN_HOME", home.path().join(".warren"))
            .current_dir(home.path());
        // A block that names a provider key gets a made-up one, as its reader has a real one.
        if block.contains("$OPENAI_API_KEY") {
            cmd.env("OPENAI_API_KEY", "sk-readme-example");
        }
        let out = cmd.output()?;
        assert!(
            out.status.success(),
            "README.md:{line}: the block failed ({}):\n{block}\n--- stdout\n{}\n--- stderr\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

#[test]
fn a_marked_block_is_found_with_its_line() {
    let text =
        "a\n<!-- try -->\n```sh\nwarren init\nwarren agent -m hi\n```\n```sh\nnot marked\n```\n";
    assert_eq!(
        try_blocks(text),
        vec![(4, "warren init\nwarren agent -m hi".to_string())]
    );
}
