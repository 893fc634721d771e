//! Hostile-repository corpus for `git_operations` (GIT-2..10, PERM-3/4, SBX-2). Every case
//! first fires the attack with plain `git` run by the test (a canary file appears, a file outside
//! the grant is read, the transport command runs), then shows `git_operations` blocks it.
//! Canaries are created inside the agent's own workspace, which its sandbox lets it write: a
//! canary that stays absent proves the git hardening stopped the program, not the kernel.

// Test helpers outside #[test] fns: a failed setup step should panic with its name.
#![allow(clippy::expect_used)]

mod common;
mod gitkit;

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

use common::Fixture;
use gitkit::{
    canary, config, denied, fired, git, git_ok, git_tty, init_repo, invalid, not_fired, op, op_ok,
    read, touch,
};
use serde_json::json;
use warren_security::SecurityPolicy;
use warren_security::sandbox::Sandbox;
use warren_tools::{GitOperations, Tool, ToolError, ToolOutput};

/// `main`'s git tool built from a modified copy of the fixture's config.
fn tool_with(f: &Fixture, change: impl FnOnce(&mut warren_config::Config)) -> GitOperations {
    let mut config = f.config.clone();
    change(&mut config);
    let policy =
        SecurityPolicy::for_agent(&config, &f.root, &common::alias("main")).expect("policy");
    GitOperations::new(Sandbox::for_policy(&policy).expect("sandbox"))
}

fn run(tool: &GitOperations, args: serde_json::Value) -> Result<ToolOutput, ToolError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(tool.execute(args))
}

fn main_repo(f: &Fixture) -> std::path::PathBuf {
    init_repo(&f.ws("main").join("repo"))
}

/// Makes `a.txt` stat-dirty with the same content, so git re-reads it (filters, fsmonitor, index refresh).
fn stat_dirty(repo: &Path) {
    fs::write(repo.join("a.txt"), "one\n").expect("rewrite");
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
    let file = fs::File::options()
        .write(true)
        .open(repo.join("a.txt"))
        .expect("open");
    file.set_modified(later).expect("mtime");
}

// ---- repository-configured programs on read paths (GIT-6) -------------------------------------

#[test]
fn read_ignores_repo_fsmonitor_git6() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    let c = canary(&f, "main", "fsmonitor");
    config(&repo, "core.fsmonitor", &touch(&c));
    git(&repo, &["status"]);
    fired(&c);
    op_ok(&f, "main", json!({"operation": "status", "path": "repo"}));
    op_ok(&f, "main", json!({"operation": "diff", "path": "repo"}));
    not_fired(&c);
}

#[test]
fn read_ignores_repo_core_pager_git6() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    let c = canary(&f, "main", "pager");
    config(&repo, "core.pager", &format!("{}; cat", touch(&c)));
    git_tty(&repo, "git log");
    fired(&c);
    op_ok(&f, "main", json!({"operation": "log", "path": "repo"}));
    not_fired(&c);
}

#[test]
fn read_ignores_repo_pager_log_git6() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    let c = canary(&f, "main", "pager-log");
    config(&repo, "pager.log", &format!("{}; cat", touch(&c)));
    config(&repo, "pager.branch", &format!("{}; cat", touch(&c)));
    git_tty(&repo, "git log");
    fired(&c);
    op_ok(&f, "main", json!({"operation": "log", "path": "repo"}));
    op_ok(&f, "main", json!({"operation": "branch", "path": "repo"}));
    not_fired(&c);
}

fn hook(repo: &Path, dir: &str, name: &str, body: &str) {
    let hooks = repo.join(dir);
    fs::create_dir_all(&hooks).expect("hooks dir");
    let path = hooks.join(name);
    fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("hook");
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
}

#[test]
fn read_runs_no_index_hook_git6() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    let c = canary(&f, "main", "post-index-change");
    hook(&repo, ".git/hooks", "post-index-change", &touch(&c));
    stat_dirty(&repo);
    git(&repo, &["status"]);
    fired(&c);
    stat_dirty(&repo);
    op_ok(&f, "main", json!({"operation": "status", "path": "repo"}));
    op_ok(&f, "main", json!({"operation": "diff", "path": "repo"}));
    not_fired(&c);
}

#[test]
fn read_ignores_repo_hooks_path_git6() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    let c = canary(&f, "main", "hookspath");
    hook(&repo, "evil-hooks", "post-index-change", &touch(&c));
    config(&repo, "core.hooksPath", "evil-hooks");
    stat_dirty(&repo);
    git(&repo, &["status"]);
    fired(&c);
    stat_dirty(&repo);
    op_ok(&f, "main", json!({"operation": "status", "path": "repo"}));
    not_fired(&c);
}

#[test]
fn read_ignores_diff_external_git6() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    let c = canary(&f, "main", "diff-external");
    config(&repo, "diff.external", &touch(&c));
    fs::write(repo.join("a.txt"), "changed\n").expect("edit");
    git(&repo, &["diff"]);
    fired(&c);
    let d = op_ok(&f, "main", json!({"operation": "diff", "path": "repo"}));
    assert_eq!(
        d["files"][0]["hunks"][0]["lines"],
        json!(["-one", "+changed"])
    );
    not_fired(&c);
}

#[test]
fn read_ignores_textconv_driver_from_gitattributes_git6() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    let c = canary(&f, "main", "textconv");
    fs::write(repo.join(".gitattributes"), "*.txt diff=evil\n").expect("attributes");
    config(
        &repo,
        "diff.evil.textconv",
        &format!("sh -c '{}; cat \"$0\"'", touch(&c)),
    );
    fs::write(repo.join("a.txt"), "changed\n").expect("edit");
    git(&repo, &["diff"]);
    fired(&c);
    op_ok(&f, "main", json!({"operation": "diff", "path": "repo"}));
    not_fired(&c);
}

#[test]
fn read_ignores_diff_driver_command_git6() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    let c = canary(&f, "main", "diff-command");
    fs::write(repo.join(".gitattributes"), "*.txt diff=evil\n").expect("attributes");
    config(&repo, "diff.evil.command", &touch(&c));
    fs::write(repo.join("a.txt"), "changed\n").expect("edit");
    git(&repo, &["diff"]);
    fired(&c);
    op_ok(&f, "main", json!({"operation": "diff", "path": "repo"}));
    not_fired(&c);
}

#[test]
fn read_ignores_clean_filter_git6() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    let c = canary(&f, "main", "clean");
    fs::write(repo.join(".gitattributes"), "*.txt filter=evil\n").expect("attributes");
    config(
        &repo,
        "filter.evil.clean",
        &format!("sh -c '{}; cat'", touch(&c)),
    );
    stat_dirty(&repo);
    git(&repo, &["diff"]);
    fired(&c);
    stat_dirty(&repo);
    op_ok(&f, "main", json!({"operation": "status", "path": "repo"}));
    op_ok(&f, "main", json!({"operation": "diff", "path": "repo"}));
    not_fired(&c);
}

#[test]
fn read_ignores_process_filter_git6() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    let c = canary(&f, "main", "process");
    fs::write(repo.join(".gitattributes"), "*.txt filter=evil\n").expect("attributes");
    config(&repo, "filter.evil.process", &touch(&c));
    stat_dirty(&repo);
    git(&repo, &["diff"]);
    fired(&c);
    stat_dirty(&repo);
    op_ok(&f, "main", json!({"operation": "status", "path": "repo"}));
    op_ok(&f, "main", json!({"operation": "diff", "path": "repo"}));
    not_fired(&c);
}

#[test]
fn read_ignores_required_smudge_and_clean_filters_from_included_config_git6() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    let c = canary(&f, "main", "included-filter");
    // The filter is defined in a config file inside the workspace that the repository includes.
    let extra = f.ws("main").join("filters.cfg");
    fs::write(
        &extra,
        format!(
            "[filter \"Evil\"]\n\tclean = \"sh -c '{}; cat'\"\n\tsmudge = cat\n\trequired = true\n",
            touch(&c).replace('\'', "")
        ),
    )
    .expect("include");
    config(&repo, "include.path", extra.to_str().expect("utf-8"));
    fs::write(repo.join(".gitattributes"), "*.txt filter=Evil\n").expect("attributes");
    stat_dirty(&repo);
    git(&repo, &["diff"]);
    fired(&c);
    stat_dirty(&repo);
    op_ok(&f, "main", json!({"operation": "status", "path": "repo"}));
    not_fired(&c);
}

// ---- mailmap and config from outside the grant (GIT-6, PERM-3) ---------------------------------

#[test]
fn log_ignores_repo_mailmap_git6() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    fs::write(
        repo.join(".mailmap"),
        "Mapped Name <mapped@example.org> <real@example.org>\n",
    )
    .expect("mailmap");
    assert!(git_ok(&repo, &["log", "--format=%aN"]).contains("Mapped Name"));
    let log = op_ok(&f, "main", json!({"operation": "log", "path": "repo"}));
    assert_eq!(log["commits"][0]["author_name"], "Real Author");
    assert_eq!(log["commits"][0]["author_email"], "real@example.org");
}

#[test]
fn log_never_reads_mailmap_file_outside_the_grant_git6_perm3() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    let outside = f.ws("stranger").join("people.mailmap");
    fs::write(
        &outside,
        "SECRET-stranger <leak@example.org> <real@example.org>\n",
    )
    .expect("outside mailmap");
    config(&repo, "mailmap.file", outside.to_str().expect("utf-8"));
    // Plain git reads the file outside the grant and shows its content.
    assert!(git_ok(&repo, &["log", "--format=%aN"]).contains("SECRET-stranger"));
    let log = op_ok(&f, "main", json!({"operation": "log", "path": "repo"}));
    assert!(!log.to_string().contains("SECRET-stranger"), "{log}");
    assert_eq!(log["commits"][0]["author_name"], "Real Author");
}

#[test]
fn read_refuses_include_path_outside_the_grant_perm3() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    let outside = f.ws("stranger").join("evil.cfg");
    fs::write(&outside, "[leak]\n\tsecret = SECRET-stranger\n").expect("outside config");
    config(&repo, "include.path", outside.to_str().expect("utf-8"));
    assert!(git_ok(&repo, &["config", "leak.secret"]).contains("SECRET-stranger"));
    let msg = denied(read(&f, "main", "status", &repo));
    assert!(!msg.contains("SECRET-stranger"), "{msg}");
}

#[test]
fn include_outside_the_grant_is_refused_by_warren_without_a_kernel_sandbox_perm3() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    let outside = f.ws("stranger").join("evil.cfg");
    fs::write(&outside, "[leak]\n\tsecret = SECRET-stranger\n").expect("outside config");
    config(&repo, "include.path", outside.to_str().expect("utf-8"));
    assert!(git_ok(&repo, &["config", "leak.secret"]).contains("SECRET-stranger"));
    // With the noop sandbox git can read the file; Warren's origin check refuses the repository.
    let tool = tool_with(&f, |config| {
        let profile = config.risk_profiles.entry("default".into()).or_default();
        profile.sandbox = warren_config::schema::SandboxKind::Noop;
    });
    let msg = denied(run(&tool, json!({"operation": "status", "path": "repo"})));
    assert!(
        msg.contains("includes") && msg.contains("stranger"),
        "{msg}"
    );
}

#[test]
fn read_refuses_include_if_outside_the_grant_perm3() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    let outside = f.ws("stranger").join("evil.cfg");
    fs::write(&outside, "[leak]\n\tsecret = SECRET-stranger\n").expect("outside config");
    config(
        &repo,
        "includeIf.gitdir:/.path",
        outside.to_str().expect("utf-8"),
    );
    assert!(git_ok(&repo, &["config", "leak.secret"]).contains("SECRET-stranger"));
    let msg = denied(read(&f, "main", "log", &repo));
    assert!(!msg.contains("SECRET-stranger"), "{msg}");
}

// ---- transport and promisor objects (GIT-7) -----------------------------------------------------

/// A partial clone of a two-commit repository whose index points at a blob that was never
/// fetched, so `diff --cached` needs a lazy fetch from the promisor remote `url`.
fn promisor_clone(f: &Fixture, remote_cfg: &[(&str, String)]) -> std::path::PathBuf {
    let server = init_repo(&f.ws("main").join("server"));
    fs::write(server.join("a.txt"), "two\n").expect("v2");
    git_ok(&server, &["commit", "-qam", "second"]);
    config(&server, "uploadpack.allowFilter", "true");
    let url = format!("file://{}", server.display());
    let clone = f.ws("main").join("clone");
    git_ok(
        &f.ws("main"),
        &["clone", "-q", "--filter=blob:none", &url, "clone"],
    );
    let old_blob = git_ok(&clone, &["rev-parse", "HEAD~1:a.txt"]);
    git_ok(
        &clone,
        &[
            "update-index",
            "--cacheinfo",
            &format!("100644,{},a.txt", old_blob.trim()),
        ],
    );
    for (k, v) in remote_cfg {
        config(&clone, k, v);
    }
    clone
}

#[test]
fn read_never_lazy_fetches_through_core_ssh_command_git7() {
    let f = Fixture::new();
    let c = canary(&f, "main", "ssh");
    let clone = promisor_clone(
        &f,
        &[
            ("remote.origin.url", "ssh://attacker.invalid/repo".into()),
            ("core.sshCommand", format!("{}; false", touch(&c))),
        ],
    );
    git(&clone, &["diff", "--cached"]);
    fired(&c);
    let err = op(
        &f,
        "main",
        json!({"operation": "diff", "path": "clone", "cached": true}),
    );
    match err {
        Err(ToolError::Failed(msg)) => assert!(msg.contains("GIT-7"), "{msg}"),
        other => panic!("a missing promisor object must fail: {other:?}"),
    }
    not_fired(&c);
}

#[test]
fn read_never_lazy_fetches_through_ext_remote_git7() {
    let f = Fixture::new();
    let c = canary(&f, "main", "ext");
    let clone = promisor_clone(
        &f,
        &[
            (
                "remote.origin.url",
                format!("ext::sh -c {}% >&2", touch(&c).replace(' ', "% ")),
            ),
            ("protocol.ext.allow", "always".into()),
        ],
    );
    git(&clone, &["diff", "--cached"]);
    fired(&c);
    let err = op(
        &f,
        "main",
        json!({"operation": "diff", "path": "clone", "cached": true}),
    );
    match err {
        Err(ToolError::Failed(msg)) => assert!(msg.contains("GIT-7"), "{msg}"),
        other => panic!("a missing promisor object must fail: {other:?}"),
    }
    not_fired(&c);
}

// ---- repository metadata (GIT-2, GIT-3, GIT-4) -------------------------------------------------

#[test]
fn dot_git_file_pointing_outside_the_grant_is_refused_git4() {
    let f = Fixture::new();
    let theirs = init_repo(&f.ws("stranger").join("repo"));
    fs::write(theirs.join("secret-plan.txt"), "x").expect("their file");
    let mine = f.ws("main").join("decoy");
    fs::create_dir_all(&mine).expect("decoy");
    fs::write(
        mine.join(".git"),
        format!("gitdir: {}\n", theirs.join(".git").display()),
    )
    .expect(".git file");
    // Plain git follows the pointer and reads the stranger's repository.
    assert!(git_ok(&mine, &["log", "--format=%an"]).contains("Real Author"));
    let msg = denied(read(&f, "main", "log", &mine));
    assert!(msg.contains("stranger"), "{msg}");
}

#[test]
fn symlinked_dot_git_is_refused_even_inside_the_workspace_git4() {
    let f = Fixture::new();
    let real = main_repo(&f);
    let linked = f.ws("main").join("linked");
    fs::create_dir_all(&linked).expect("dir");
    symlink(real.join(".git"), linked.join(".git")).expect("symlink");
    assert!(git_ok(&linked, &["log", "--format=%s"]).contains("first"));
    let msg = denied(read(&f, "main", "status", &linked));
    assert!(msg.contains("symbolic link"), "{msg}");
}

#[test]
fn symlinked_gitdir_is_refused_git4() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    git_ok(&repo, &["worktree", "add", "-q", "../wt"]);
    let wt = f.ws("main").join("wt");
    // Point the worktree's .git file at a symlink to its real gitdir (target allowed).
    let link = f.ws("main").join("gitdir-link");
    symlink(repo.join(".git/worktrees/wt"), &link).expect("symlink");
    fs::write(wt.join(".git"), format!("gitdir: {}\n", link.display())).expect(".git");
    assert!(git_ok(&wt, &["status", "--short"]).is_empty());
    let msg = denied(read(&f, "main", "status", &wt));
    assert!(msg.contains("symbolic link"), "{msg}");
}

#[test]
fn symlinked_commondir_is_refused_git4() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    git_ok(&repo, &["worktree", "add", "-q", "../wt"]);
    let wt = f.ws("main").join("wt");
    let link = f.ws("main").join("common-link");
    symlink(repo.join(".git"), &link).expect("symlink");
    fs::write(
        repo.join(".git/worktrees/wt/commondir"),
        format!("{}\n", link.display()),
    )
    .expect("commondir");
    assert!(git(&wt, &["status"]).status.success());
    let msg = denied(read(&f, "main", "status", &wt));
    assert!(msg.contains("symbolic link"), "{msg}");
}

#[test]
fn commondir_outside_the_grant_is_refused_git4() {
    let f = Fixture::new();
    let theirs = init_repo(&f.ws("stranger").join("repo"));
    let repo = main_repo(&f);
    fs::write(
        repo.join(".git/commondir"),
        format!("{}\n", theirs.join(".git").display()),
    )
    .expect("commondir");
    // Plain git now reads the stranger's objects and refs.
    assert!(git_ok(&repo, &["log", "--format=%s"]).contains("first"));
    let msg = denied(read(&f, "main", "log", &repo));
    assert!(
        msg.contains("commondir") && msg.contains("stranger"),
        "{msg}"
    );
}

#[test]
fn alternates_outside_the_grant_are_refused_git4() {
    let f = Fixture::new();
    let theirs = init_repo(&f.ws("stranger").join("repo"));
    let blob = git_ok(&theirs, &["rev-parse", "HEAD:a.txt"]);
    let repo = main_repo(&f);
    fs::write(
        repo.join(".git/objects/info/alternates"),
        format!("{}\n", theirs.join(".git/objects").display()),
    )
    .expect("alternates");
    assert!(
        git(&repo, &["cat-file", "-e", blob.trim()])
            .status
            .success()
    );
    let msg = denied(read(&f, "main", "status", &repo));
    assert!(msg.contains("alternate"), "{msg}");
}

#[test]
fn worktree_registered_outside_the_grant_is_omitted_git3() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    let outside = f.ws("stranger").join("wt");
    git_ok(
        &repo,
        &["worktree", "add", "-q", outside.to_str().expect("utf-8")],
    );
    let inside = f.ws("main").join("wt-in");
    git_ok(
        &repo,
        &["worktree", "add", "-q", inside.to_str().expect("utf-8")],
    );
    assert!(git_ok(&repo, &["worktree", "list"]).contains(outside.to_str().expect("utf-8")));
    let listed = op_ok(
        &f,
        "main",
        json!({"operation": "worktree-list", "path": "repo"}),
    );
    let paths: Vec<_> = listed["worktrees"]
        .as_array()
        .expect("array")
        .iter()
        .map(|w| w["path"].clone())
        .collect();
    assert_eq!(paths, vec![json!(repo), json!(inside)]);
    assert!(!listed.to_string().contains("stranger"), "{listed}");
}

#[test]
fn worktree_with_symlinked_metadata_is_omitted_git3_git4() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    git_ok(&repo, &["worktree", "add", "-q", "../wt"]);
    let wt = f.ws("main").join("wt");
    let link = f.ws("main").join("gitdir-link");
    symlink(repo.join(".git/worktrees/wt"), &link).expect("symlink");
    fs::write(wt.join(".git"), format!("gitdir: {}\n", link.display())).expect(".git");
    assert!(git_ok(&repo, &["worktree", "list"]).contains("/wt "));
    let listed = op_ok(
        &f,
        "main",
        json!({"operation": "worktree-list", "path": "repo"}),
    );
    assert_eq!(
        listed["worktrees"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
}

#[test]
fn core_worktree_outside_the_grant_is_ignored_git4() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    config(
        &repo,
        "core.worktree",
        f.ws("stranger").to_str().expect("utf-8"),
    );
    // Plain git lists the stranger's files as untracked.
    assert!(git_ok(&repo, &["status", "--porcelain"]).contains("secret.txt"));
    let st = op_ok(&f, "main", json!({"operation": "status", "path": "repo"}));
    assert!(!st.to_string().contains("secret.txt"), "{st}");
}

#[test]
fn discovery_never_climbs_above_the_grant_root_git2() {
    let f = Fixture::new();
    // A repository enclosing the workspace (at <install>/agents/main).
    let above = f.ws("main").parent().expect("agent dir").to_path_buf();
    git_ok(&above, &["init", "-q"]);
    assert!(git(&f.ws("main"), &["status"]).status.success());
    let err = op(&f, "main", json!({"operation": "status"}));
    match err {
        Err(ToolError::Failed(msg)) => {
            assert!(msg.contains("not in a git repository"), "{msg}")
        }
        other => panic!("expected no repository, got {other:?}"),
    }
}

#[test]
fn write_only_sibling_is_unavailable_to_git_git2() {
    let f = Fixture::new();
    let theirs = init_repo(&f.ws("writer").join("repo"));
    assert!(git(&theirs, &["status"]).status.success());
    for operation in ["status", "log", "add", "commit"] {
        let msg = denied(op(
            &f,
            "main",
            json!({"operation": operation, "path": theirs, "paths": [], "message": "m"}),
        ));
        assert!(msg.contains("only a Write grant"), "{operation}: {msg}");
    }
}

#[test]
fn read_only_sibling_allows_reads_and_refuses_writes_perm3_perm4() {
    let f = Fixture::new();
    let theirs = init_repo(&f.ws("reader").join("repo"));
    fs::write(theirs.join("b.txt"), "b").expect("b");
    git(&theirs, &["add", "b.txt"]);
    let st = op_ok(&f, "main", json!({"operation": "status", "path": theirs}));
    assert_eq!(st["staged"][0]["path"], "b.txt");
    let msg = denied(op(
        &f,
        "main",
        json!({"operation": "commit", "path": theirs, "message": "x"}),
    ));
    assert!(msg.contains("only a Read grant"), "{msg}");
    assert_eq!(
        git_ok(&theirs, &["rev-list", "--count", "HEAD"]).trim(),
        "1"
    );
    // The refusal is Warren's: plain git commits there without complaint.
    git_ok(&theirs, &["commit", "-q", "-m", "plain"]);
    assert_eq!(
        git_ok(&theirs, &["rev-list", "--count", "HEAD"]).trim(),
        "2"
    );
}

#[test]
fn read_operations_run_no_hook_of_any_kind_git6() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    let c = canary(&f, "main", "any-hook");
    for name in [
        "post-checkout",
        "pre-commit",
        "post-index-change",
        "reference-transaction",
        "pre-auto-gc",
        "post-rewrite",
        "fsmonitor-watchman",
    ] {
        hook(&repo, ".git/hooks", name, &touch(&c));
    }
    // Plain git runs them: post-checkout on a switch, post-index-change on a status refresh.
    git_ok(&repo, &["switch", "-q", "-c", "other"]);
    fired(&c);
    stat_dirty(&repo);
    git(&repo, &["status"]);
    fired(&c);
    fs::write(repo.join("a.txt"), "stashed\n").expect("edit");
    git_ok(&repo, &["stash", "-q"]);
    let _ = fs::remove_file(&c);
    git_ok(&repo, &["worktree", "add", "-q", "--detach", "../wt"]);
    let _ = fs::remove_file(&c);
    stat_dirty(&repo);
    for operation in [
        "status",
        "diff",
        "log",
        "branch",
        "stash-list",
        "worktree-list",
    ] {
        op_ok(&f, "main", json!({"operation": operation, "path": "repo"}));
        op_ok(&f, "main", json!({"operation": operation, "path": "wt"}));
    }
    not_fired(&c);
}

// ---- nested submodules (GIT-6) -----------------------------------------------------------------

fn with_submodule(f: &Fixture) -> (std::path::PathBuf, std::path::PathBuf) {
    let lib = init_repo(&f.ws("main").join("lib"));
    let sup = main_repo(f);
    git_ok(
        &sup,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            lib.to_str().expect("utf-8"),
            "sub",
        ],
    );
    git_ok(&sup, &["commit", "-qm", "add sub"]);
    (sup.clone(), sup.join("sub"))
}

#[test]
fn submodule_fsmonitor_does_not_run_on_status_git6() {
    let f = Fixture::new();
    let (sup, sub) = with_submodule(&f);
    let c = canary(&f, "main", "sub-fsmonitor");
    config(&sub, "core.fsmonitor", &touch(&c));
    git(&sup, &["status"]);
    fired(&c);
    op_ok(&f, "main", json!({"operation": "status", "path": "repo"}));
    op_ok(&f, "main", json!({"operation": "diff", "path": "repo"}));
    not_fired(&c);
}

#[test]
fn nested_submodule_diff_external_does_not_run_git6() {
    let f = Fixture::new();
    let (sup, sub) = with_submodule(&f);
    let c = canary(&f, "main", "sub-diff-external");
    config(&sup, "diff.submodule", "diff");
    config(&sub, "diff.external", &touch(&c));
    fs::write(sub.join("a.txt"), "changed\n").expect("edit");
    git_ok(&sub, &["commit", "-qam", "sub change"]);
    git(&sup, &["diff"]);
    fired(&c);
    let d = op_ok(&f, "main", json!({"operation": "diff", "path": "repo"}));
    assert_eq!(d["files"][0]["new_path"], "sub", "{d}");
    op_ok(
        &f,
        "main",
        json!({"operation": "diff", "path": "repo", "cached": true}),
    );
    not_fired(&c);
}

// ---- option injection (GIT-10) -----------------------------------------------------------------

#[test]
fn log_revision_cannot_inject_output_option_git10() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    let c = canary(&f, "main", "output");
    let value = format!("--output={}", c.display());
    git(&repo, &["log", &value]);
    fired(&c);
    invalid(op(
        &f,
        "main",
        json!({"operation": "log", "path": "repo", "revision": value}),
    ));
    invalid(op(
        &f,
        "main",
        json!({"operation": "log", "path": "repo", "revision": format!("HEAD..{value}")}),
    ));
    not_fired(&c);
}

#[test]
fn diff_path_cannot_inject_output_option_git10() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    let c = canary(&f, "main", "diff-output");
    let value = format!("--output={}", c.display());
    git(&repo, &["diff", &value]);
    fired(&c);
    // Paths go after `--` as literal pathspecs: the value can only ever name a file.
    let _ = op(
        &f,
        "main",
        json!({"operation": "diff", "path": "repo", "paths": [value]}),
    );
    not_fired(&c);
}

#[test]
fn branch_name_cannot_inject_switch_options_git10() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    git_ok(&repo, &["switch", "--orphan=evil"]);
    assert_eq!(git_ok(&repo, &["branch", "--show-current"]).trim(), "evil");
    git_ok(&repo, &["switch", "-f", "main"]);
    for branch in ["--orphan=evil", "-c", "--upload-pack=touch x", "-fmain"] {
        invalid(op(
            &f,
            "main",
            json!({"operation": "switch", "path": "repo", "branch": branch}),
        ));
        invalid(op(
            &f,
            "main",
            json!({"operation": "branch-create", "path": "repo", "branch": branch}),
        ));
    }
    assert_eq!(git_ok(&repo, &["branch", "--show-current"]).trim(), "main");
}

#[test]
fn paths_outside_the_repository_or_grant_are_refused_git10() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    // Plain git rejects these itself; Warren refuses before starting git.
    for p in ["../../../stranger/workspace/secret.txt", "/etc/passwd"] {
        invalid(op(
            &f,
            "main",
            json!({"operation": "add", "path": "repo", "paths": [p]}),
        ));
    }
    // A symlink inside the repository pointing at the stranger is refused by the grant check.
    symlink(f.ws("stranger"), repo.join("peek")).expect("symlink");
    denied(op(
        &f,
        "main",
        json!({"operation": "diff", "path": "repo", "paths": ["peek/secret.txt"]}),
    ));
}

// ---- writes (GIT-8, GIT-9) ----------------------------------------------------------------------

#[test]
fn writes_keep_hooks_and_run_them_in_the_sandbox_git8() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    let c = canary(&f, "main", "pre-commit");
    let escape = f.ws("stranger").join("pwned");
    hook(
        &repo,
        ".git/hooks",
        "pre-commit",
        &format!("{}\ntouch '{}' || true", touch(&c), escape.display()),
    );
    fs::write(repo.join("b.txt"), "b").expect("b");
    op_ok(
        &f,
        "main",
        json!({"operation": "add", "path": "repo", "paths": ["b.txt"]}),
    );
    op_ok(
        &f,
        "main",
        json!({"operation": "commit", "path": "repo", "message": "hooked"}),
    );
    assert!(c.exists(), "the pre-commit hook runs for writes (GIT-8)");
    assert!(!escape.exists(), "the hook ran outside the agent's sandbox");
    // Plain git (no sandbox) would have let the hook write into the stranger's workspace.
    git_ok(&repo, &["commit", "-q", "--allow-empty", "-m", "plain"]);
    assert!(escape.exists());
}

#[test]
fn docker_runtime_refuses_writes_before_git_starts_git9() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    let c = canary(&f, "main", "docker-hook");
    hook(&repo, ".git/hooks", "pre-commit", &touch(&c));
    let tool = tool_with(&f, |config| {
        config.runtime.kind = warren_config::schema::RuntimeKind::Docker;
    });
    let status = run(&tool, json!({"operation": "status", "path": "repo"}));
    assert!(
        status.is_ok(),
        "reads are unchanged under docker: {status:?}"
    );
    let commit = run(
        &tool,
        json!({"operation": "commit", "path": "repo", "message": "m"}),
    );
    let msg = denied(commit);
    assert!(msg.contains("shell tool"), "{msg}");
    not_fired(&c);
}

#[test]
fn read_only_autonomy_refuses_writes_perm4() {
    let f = Fixture::new();
    init_repo(&f.ws("readonly").join("repo"));
    op_ok(
        &f,
        "readonly",
        json!({"operation": "status", "path": "repo"}),
    );
    let msg = denied(op(
        &f,
        "readonly",
        json!({"operation": "commit", "path": "repo", "message": "m"}),
    ));
    assert!(msg.contains("read_only"), "{msg}");
}

#[test]
fn worktree_targets_need_read_and_write_git4_perm4() {
    let f = Fixture::new();
    main_repo(&f);
    for (sibling, grant) in [
        ("reader", "only a Read grant"),
        ("writer", "only a Write grant"),
        ("stranger", "no Read grant"),
    ] {
        let target = f.ws(sibling).join("wt");
        let msg = denied(op(
            &f,
            "main",
            json!({"operation": "worktree-add", "path": "repo", "worktree_path": target}),
        ));
        assert!(msg.contains(grant), "{sibling}: {msg}");
        assert!(!target.exists());
    }
    let target = f.ws("both").join("wt");
    op_ok(
        &f,
        "main",
        json!({"operation": "worktree-add", "path": "repo", "worktree_path": target}),
    );
    assert!(target.join("a.txt").is_file());
}

#[test]
fn git_under_bubblewrap_reads_grants_and_stays_confined_sbx2() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    let theirs = init_repo(&f.ws("reader").join("repo"));
    let c = canary(&f, "main", "bwrap-hook");
    let escape = f.ws("stranger").join("pwned-bwrap");
    hook(
        &repo,
        ".git/hooks",
        "pre-commit",
        &format!("{}\ntouch '{}' || true", touch(&c), escape.display()),
    );
    let tool = tool_with(&f, |config| {
        let profile = config.risk_profiles.entry("default".into()).or_default();
        profile.sandbox = warren_config::schema::SandboxKind::Bubblewrap;
    });
    let st =
        run(&tool, json!({"operation": "status", "path": theirs})).expect("read of a Read grant");
    assert_eq!(st.content["branch"], "main");
    fs::write(repo.join("b.txt"), "b").expect("b");
    run(
        &tool,
        json!({"operation": "add", "path": "repo", "paths": ["b.txt"]}),
    )
    .expect("add");
    run(
        &tool,
        json!({"operation": "commit", "path": "repo", "message": "bwrap"}),
    )
    .expect("commit");
    assert!(c.exists(), "the hook ran");
    assert!(!escape.exists(), "the hook escaped the bubblewrap sandbox");
    assert_eq!(git_ok(&repo, &["log", "-1", "--format=%s"]).trim(), "bwrap");
}

#[test]
fn symlinked_objects_directory_is_refused_git4() {
    let f = Fixture::new();
    let theirs = init_repo(&f.ws("stranger").join("repo"));
    git_ok(
        &theirs,
        &[
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "SECRET-stranger-commit",
        ],
    );
    let repo = main_repo(&f);
    fs::remove_dir_all(repo.join(".git/objects")).expect("objects");
    symlink(theirs.join(".git/objects"), repo.join(".git/objects")).expect("symlink");
    fs::write(
        repo.join(".git/refs/heads/main"),
        git_ok(&theirs, &["rev-parse", "HEAD"]),
    )
    .expect("ref");
    // Plain git reads the stranger's history through the symlink.
    assert!(git_ok(&repo, &["log", "--format=%s"]).contains("SECRET-stranger-commit"));
    let msg = denied(read(&f, "main", "log", &repo));
    assert!(msg.contains("symbolic link"), "{msg}");
}

#[test]
fn repo_config_file_paths_outside_the_grant_are_refused_perm3() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    let outside = f.secret("stranger");
    config(&repo, "diff.orderFile", outside.to_str().expect("utf-8"));
    config(&repo, "core.excludesFile", outside.to_str().expect("utf-8"));
    // Plain git reads the stranger's file: its pattern hides the untracked b.txt.
    fs::write(&outside, "b.txt\n").expect("pattern");
    fs::write(repo.join("b.txt"), "b\n").expect("untracked");
    let plain = git_ok(&repo, &["status", "--porcelain"]);
    assert!(!plain.contains("b.txt"), "{plain}");
    let tool = tool_with(&f, |config| {
        let profile = config.risk_profiles.entry("default".into()).or_default();
        profile.sandbox = warren_config::schema::SandboxKind::Noop;
    });
    let msg = denied(run(&tool, json!({"operation": "status", "path": "repo"})));
    assert!(msg.contains("stranger"), "{msg}");
}
