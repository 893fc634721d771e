//! `warren tools run ALIAS git_operations ...` end to end (GIT-1, GIT-5): structured results, and
//! `GIT_*` variables in the daemon's own environment never reach git. The variables are set on
//! the `warren` process the test starts, never in the test process. Each attack is first fired
//! with plain `git` under the same variables.

use crate::common::bin;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use warren_testkit::{TempRoot, text};

type R = Result<(), Box<dyn std::error::Error>>;

fn git(
    dir: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Result<String, Box<dyn std::error::Error>> {
    // As root the workspace belongs to the sandbox user: the operator's git trusts it explicitly.
    let out = Command::new("git")
        .args(["-c", "safe.directory=*"])
        .args(args)
        .current_dir(dir)
        .envs(env.iter().copied())
        .output()?;
    if !out.status.success() {
        return Err(format!("git {args:?}: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// An install with agents `main` and `stranger`, each with a one-commit repository.
fn setup() -> Result<(TempRoot, PathBuf, PathBuf), Box<dyn std::error::Error>> {
    let root = TempRoot::new()?;
    root.write_config("[agents.main]\n[agents.stranger]\n")?;
    let mut repos = Vec::new();
    for agent in ["main", "stranger"] {
        let repo = root
            .path()
            .join("agents")
            .join(agent)
            .join("workspace/repo");
        fs::create_dir_all(&repo)?;
        git(&repo, &["init", "-q", "-b", "main"], &[])?;
        git(&repo, &["config", "user.name", "Config Name"], &[])?;
        git(&repo, &["config", "user.email", "config@example.org"], &[])?;
        fs::write(repo.join("a.txt"), "one\n")?;
        git(&repo, &["add", "a.txt"], &[])?;
        git(
            &repo,
            &["commit", "-q", "-m", &format!("{agent}-commit")],
            &[],
        )?;
        repos.push(repo);
    }
    let stranger = repos.pop().ok_or("repo")?;
    let main = repos.pop().ok_or("repo")?;
    Ok((root, main, stranger))
}

/// `warren tools run main git_operations ARGS` with `env` set on the warren process.
fn run(
    root: &TempRoot,
    args: &str,
    env: &[(&str, &str)],
) -> Result<(Option<i32>, serde_json::Value), Box<dyn std::error::Error>> {
    let out = root
        .warren(bin(), &["tools", "run", "main", "git_operations", args])
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .output()?;
    let (stdout, stderr) = text(&out);
    let value = serde_json::from_str(&stdout)
        .map_err(|e| format!("{e}: stdout {stdout} stderr {stderr}"))?;
    Ok((out.status.code(), value))
}

#[test]
fn tools_run_git_operations_returns_structured_json_git1() -> R {
    let (root, repo, _) = setup()?;
    fs::write(repo.join("b.txt"), "b\n")?;
    let (code, v) = run(&root, r#"{"operation": "status", "path": "repo"}"#, &[])?;
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["result"]["branch"], "main");
    assert_eq!(v["result"]["untracked"], serde_json::json!(["b.txt"]));
    let (code, v) = run(&root, r#"{"operation": "push", "path": "repo"}"#, &[])?;
    assert_eq!(code, Some(1));
    assert_eq!(v["error"]["kind"], "invalid_arguments", "{v}");
    Ok(())
}

#[test]
fn daemon_git_dir_is_dropped_git5() -> R {
    let (root, _, stranger) = setup()?;
    let git_dir = stranger.join(".git");
    let env = [("GIT_DIR", git_dir.to_str().ok_or("utf-8")?)];
    // Plain git under the variable reads the stranger's repository from main's workspace.
    let main_ws = root.path().join("agents/main/workspace/repo");
    assert!(git(&main_ws, &["log", "--format=%s"], &env)?.contains("stranger-commit"));
    let (code, v) = run(&root, r#"{"operation": "log", "path": "repo"}"#, &env)?;
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["result"]["commits"][0]["subject"], "main-commit");
    assert!(!v.to_string().contains("stranger-commit"), "{v}");
    Ok(())
}

#[test]
fn daemon_git_config_parameters_are_dropped_git5() -> R {
    let (root, repo, _) = setup()?;
    let hooks = root.path().join("agents/main/workspace/evil-hooks");
    fs::create_dir_all(&hooks)?;
    let canary = root
        .path()
        .join("agents/main/workspace/canary-config-parameters");
    let hook = hooks.join("pre-commit");
    warren_testkit::write_executable(&hook, &format!("#!/bin/sh\ntouch '{}'\n", canary.display()))?;
    let params = format!("'core.hookspath'='{}'", hooks.display());
    let env = [("GIT_CONFIG_PARAMETERS", params.as_str())];
    git(
        &repo,
        &["commit", "-q", "--allow-empty", "-m", "plain"],
        &env,
    )?;
    assert!(canary.exists(), "baseline: the injected hooksPath runs");
    fs::remove_file(&canary)?;
    fs::write(repo.join("b.txt"), "b\n")?;
    let (code, v) = run(
        &root,
        r#"{"operation": "add", "path": "repo", "paths": ["b.txt"]}"#,
        &env,
    )?;
    assert_eq!(code, Some(0), "{v}");
    let (code, v) = run(
        &root,
        r#"{"operation": "commit", "path": "repo", "message": "via warren"}"#,
        &env,
    )?;
    assert_eq!(code, Some(0), "{v}");
    assert!(!canary.exists(), "GIT_CONFIG_PARAMETERS reached git");
    Ok(())
}

#[test]
fn daemon_git_external_diff_and_identity_are_dropped_git5() -> R {
    let (root, repo, _) = setup()?;
    let canary = root
        .path()
        .join("agents/main/workspace/canary-external-diff");
    let script = root.path().join("agents/main/workspace/ext.sh");
    warren_testkit::write_executable(
        &script,
        &format!("#!/bin/sh\ntouch '{}'\n", canary.display()),
    )?;
    fs::write(repo.join("a.txt"), "two\n")?;
    let env = [
        ("GIT_EXTERNAL_DIFF", script.to_str().ok_or("utf-8")?),
        ("GIT_AUTHOR_NAME", "Env Name"),
        ("GIT_COMMITTER_NAME", "Env Name"),
    ];
    git(&repo, &["diff"], &env)?;
    assert!(canary.exists(), "baseline: GIT_EXTERNAL_DIFF runs");
    fs::remove_file(&canary)?;
    let (code, v) = run(&root, r#"{"operation": "diff", "path": "repo"}"#, &env)?;
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(
        v["result"]["files"][0]["hunks"][0]["lines"],
        serde_json::json!(["-one", "+two"])
    );
    assert!(!canary.exists(), "GIT_EXTERNAL_DIFF reached git");
    // Identity comes from the repository config, never from the environment.
    run(
        &root,
        r#"{"operation": "add", "path": "repo", "paths": ["a.txt"]}"#,
        &env,
    )?;
    let (code, v) = run(
        &root,
        r#"{"operation": "commit", "path": "repo", "message": "who"}"#,
        &env,
    )?;
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(
        git(&repo, &["log", "-1", "--format=%an|%cn"], &[])?.trim(),
        "Config Name|Config Name"
    );
    Ok(())
}

#[test]
fn commit_identity_comes_from_the_operators_global_config_through_the_sandbox_git5() -> R {
    let (root, repo, _) = setup()?;
    git(&repo, &["config", "--unset", "user.name"], &[])?;
    git(&repo, &["config", "--unset", "user.email"], &[])?;
    let home = root
        .path()
        .parent()
        .ok_or("temp dir")?
        .join("operator-home");
    fs::create_dir_all(&home)?;
    fs::write(
        home.join(".gitconfig"),
        "[user]\n\tname = Global Name\n\temail = global@example.org\n",
    )?;
    let home = home.to_str().ok_or("utf-8")?;
    fs::write(repo.join("b.txt"), "b\n")?;
    let env = [("HOME", home), ("GIT_AUTHOR_NAME", "Env Name")];
    let (code, v) = run(
        &root,
        r#"{"operation": "add", "path": "repo", "paths": ["b.txt"]}"#,
        &env,
    )?;
    assert_eq!(code, Some(0), "{v}");
    let (code, v) = run(
        &root,
        r#"{"operation": "commit", "path": "repo", "message": "global"}"#,
        &env,
    )?;
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(
        git(&repo, &["log", "-1", "--format=%an <%ae>"], &[])?.trim(),
        "Global Name <global@example.org>"
    );
    Ok(())
}

#[test]
fn sandbox_exposes_global_git_config_but_not_git_credentials_git5_sbx2() -> R {
    let root = TempRoot::new()?;
    root.write_config(
        "[agents.wild]\nrisk_profile = \"anything\"\n[risk_profiles.anything]\nautonomy = \"full\"\nallowed_commands = [\"*\"]\n",
    )?;
    let home = root
        .path()
        .parent()
        .ok_or("temp dir")?
        .join("operator-home");
    let xdg = home.join(".config/git");
    fs::create_dir_all(&xdg)?;
    fs::write(home.join(".gitconfig"), "[user]\n\tname = Global Name\n")?;
    fs::write(
        xdg.join("credentials"),
        "https://user:SECRET-TOKEN@example.org\n",
    )?;
    let ws = root.path().join("agents/wild/workspace");
    fs::create_dir_all(&ws)?;
    let script = format!(
        "for p in ['{}', '{}']:\n    try:\n        print(open(p).read())\n    except OSError as e:\n        print('DENIED', e)\n",
        home.join(".gitconfig").display(),
        xdg.join("credentials").display()
    );
    fs::write(ws.join("peek.py"), &script)?;
    // Unsandboxed, the same script reads both files.
    let plain = Command::new("python3")
        .arg("peek.py")
        .current_dir(&ws)
        .output()?;
    assert!(String::from_utf8_lossy(&plain.stdout).contains("SECRET-TOKEN"));
    let out = root
        .warren(
            bin(),
            &[
                "tools",
                "run",
                "wild",
                "shell",
                r#"{"command": "python3 peek.py"}"#,
                "--approve",
            ],
        )
        .env("HOME", &home)
        .stdin(std::process::Stdio::null())
        .output()?;
    let (stdout, stderr) = text(&out);
    let v: serde_json::Value =
        serde_json::from_str(&stdout).map_err(|e| format!("{e}: {stdout} {stderr}"))?;
    let printed = v["result"]["stdout"].as_str().unwrap_or_default();
    assert!(printed.contains("Global Name"), "{v}");
    assert!(
        !printed.contains("SECRET-TOKEN") && printed.contains("DENIED"),
        "{v}"
    );
    Ok(())
}
