//! When the daemon runs as root, children run as `nobody` and the workspace belongs to it; what
//! the daemon writes there (file tools, new directories) takes the workspace's owner, so the
//! agent's own commands can keep working on it (issue 13, deliverable 1).

// Test helpers outside #[test] fns: a failed setup step should panic with its name.
#![allow(clippy::expect_used)]

use crate::common;

use common::Fixture;
use serde_json::{Value, json};

/// Calls tools from one set, as a running daemon does (one sandbox per agent across calls).
fn call(tools: &[std::sync::Arc<dyn warren_tools::Tool>], name: &str, args: Value) -> Value {
    let t = tools.iter().find(|t| t.name() == name).expect("tool");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(t.execute_approved(args)).expect(name).content
}

#[test]
fn files_and_directories_the_file_tools_create_stay_the_agents_to_change() {
    let f = Fixture::new();
    let tools = f.tools("wild");
    // The agent's shell runs once (the workspace is handed to the sandbox user), then the file
    // tools create a directory and a file, and the shell appends to the file and adds another.
    let first = call(&tools, "shell", json!({"command": "echo start > a.txt"}));
    assert_eq!(first["exit_code"], 0, "{first}");
    call(
        &tools,
        "file_write",
        json!({"path": "notes/day1.md", "content": "written by file_write\n"}),
    );
    let out = call(
        &tools,
        "shell",
        json!({"command": "echo appended >> notes/day1.md && echo more > notes/day2.md && cat notes/day1.md && id -u"}),
    );
    assert_eq!(out["exit_code"], 0, "{out}");
    let stdout = out["stdout"].as_str().unwrap_or_default();
    assert!(stdout.contains("written by file_write\nappended"), "{out}");
    if rustix::process::geteuid().is_root() {
        assert_eq!(stdout.lines().last(), Some("65534"), "runs as nobody");
        use std::os::unix::fs::MetadataExt;
        let ws = f.ws("wild");
        for p in [ws.join("notes"), ws.join("notes/day1.md")] {
            let uid = std::fs::metadata(&p).expect("exists").uid();
            assert_eq!(uid, 65534, "{} is owned by the sandbox user", p.display());
        }
    } else {
        eprintln!("not root: the ownership half of this test needs root (CI runs as root)");
    }
}
