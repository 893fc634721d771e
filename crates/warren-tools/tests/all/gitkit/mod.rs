//! Helpers of the git suites: repositories built by the tests with the real `git`, the plain
//! (unguarded) git baseline, and calls of `git_operations` through the escape-suite fixture.
//! Canaries live in the agent's own workspace, which its sandbox may write: when a canary stays
//! absent under Warren, the git hardening stopped the program, not the kernel sandbox.

// Test helpers outside #[test] fns: a failed setup step should panic with its name.
#![allow(clippy::expect_used)]
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};
use warren_security::SecurityPolicy;
use warren_security::sandbox::Sandbox;
use warren_tools::{GitOperations, Tool, ToolError, ToolOutput};

use crate::common::{self, Fixture};

/// Plain git in `dir`, exactly as an operator would run it (no Warren guard at all). As root,
/// the workspace belongs to the sandbox user (`nobody`), so the operator's git is told the
/// directory is safe, as `git config --global safe.directory` would.
pub fn git(dir: &Path, args: &[&str]) -> Output {
    Command::new("git")
        .args(["-c", "safe.directory=*"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs")
}

/// Plain git that must succeed; returns stdout.
#[track_caller]
pub fn git_ok(dir: &Path, args: &[&str]) -> String {
    let out = git(dir, args);
    assert!(
        out.status.success(),
        "git {args:?} in {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Plain git under a pseudo-terminal (`script`), so a configured pager really starts.
pub fn git_tty(dir: &Path, command: &str) -> Output {
    Command::new("script")
        .args(["-qec", command, "/dev/null"])
        .current_dir(dir)
        .env("TERM", "xterm")
        .output()
        .expect("script runs")
}

/// A repository at `dir` with one commit of `a.txt` and a local identity.
pub fn init_repo(dir: &Path) -> PathBuf {
    fs::create_dir_all(dir).expect("repo dir");
    git_ok(dir, &["init", "-q", "-b", "main"]);
    git_ok(dir, &["config", "user.name", "Real Author"]);
    git_ok(dir, &["config", "user.email", "real@example.org"]);
    fs::write(dir.join("a.txt"), "one\n").expect("a.txt");
    git_ok(dir, &["add", "a.txt"]);
    git_ok(dir, &["commit", "-q", "-m", "first"]);
    dir.to_path_buf()
}

pub fn config(dir: &Path, key: &str, value: &str) {
    git_ok(dir, &["config", key, value]);
}

/// `git_operations` for `agent` with `args`.
pub fn op(f: &Fixture, agent: &str, args: Value) -> Result<ToolOutput, ToolError> {
    f.call(agent, "git_operations", args)
}

/// `git_operations` that must succeed.
#[track_caller]
pub fn op_ok(f: &Fixture, agent: &str, args: Value) -> Value {
    match op(f, agent, args.clone()) {
        Ok(out) => out.content,
        Err(e) => panic!("git_operations {args} failed: {e:?}"),
    }
}

/// A read through Warren on the repository `repo`.
pub fn read(
    f: &Fixture,
    agent: &str,
    operation: &str,
    repo: &Path,
) -> Result<ToolOutput, ToolError> {
    op(f, agent, json!({"operation": operation, "path": repo}))
}

/// The canary file a hostile program would create, inside `agent`'s workspace.
pub fn canary(f: &Fixture, agent: &str, name: &str) -> PathBuf {
    f.ws(agent).join(format!("canary-{name}"))
}

/// A shell command that creates `path` (quoted for git config values).
pub fn touch(path: &Path) -> String {
    format!("touch '{}'", path.display())
}

/// The baseline fired (canary present), then is reset for the guarded run.
#[track_caller]
pub fn fired(canary: &Path) {
    assert!(
        canary.exists(),
        "baseline: plain git must fire the attack and create {}",
        canary.display()
    );
    fs::remove_file(canary).expect("reset canary");
}

#[track_caller]
pub fn not_fired(canary: &Path) {
    assert!(
        !canary.exists(),
        "Warren let the attack fire: {} was created",
        canary.display()
    );
}

#[track_caller]
pub fn denied(result: Result<ToolOutput, ToolError>) -> String {
    match result {
        Err(ToolError::Denied(msg)) => msg,
        other => panic!("expected a permission denial, got {other:?}"),
    }
}

#[track_caller]
pub fn invalid(result: Result<ToolOutput, ToolError>) -> String {
    match result {
        Err(ToolError::InvalidArguments(msg)) => msg,
        other => panic!("expected invalid arguments, got {other:?}"),
    }
}

/// `main`'s git tool built from a modified copy of the fixture's config.
pub fn tool_with(f: &Fixture, change: impl FnOnce(&mut warren_config::Config)) -> GitOperations {
    let mut config = f.config.clone();
    change(&mut config);
    let policy =
        SecurityPolicy::for_agent(&config, &f.root, &common::alias("main")).expect("policy");
    GitOperations::new(Sandbox::for_policy(&policy).expect("sandbox"))
}

pub fn run(tool: &GitOperations, args: serde_json::Value) -> Result<ToolOutput, ToolError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(tool.execute(args))
}

pub fn main_repo(f: &Fixture) -> std::path::PathBuf {
    init_repo(&f.ws("main").join("repo"))
}

/// Makes `a.txt` stat-dirty with the same content, so git re-reads it (filters, fsmonitor, index refresh).
pub fn stat_dirty(repo: &Path) {
    fs::write(repo.join("a.txt"), "one\n").expect("rewrite");
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
    let file = fs::File::options()
        .write(true)
        .open(repo.join("a.txt"))
        .expect("open");
    file.set_modified(later).expect("mtime");
}

pub fn hook(repo: &Path, dir: &str, name: &str, body: &str) {
    let hooks = repo.join(dir);
    fs::create_dir_all(&hooks).expect("hooks dir");
    let path = hooks.join(name);
    warren_testkit::write_executable(&path, &format!("#!/bin/sh\n{body}\n")).expect("hook");
}
