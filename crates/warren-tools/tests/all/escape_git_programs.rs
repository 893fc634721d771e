//! Hostile-repository corpus, part 1: programs and files a repository configures (GIT-6, GIT-7,
//! PERM-3). Every case first fires the attack with plain `git` run by the test (a canary file
//! appears, a file outside the grant is read, a transport command runs), then shows that a read
//! through `git_operations` does not. Canaries are created inside the agent's own workspace,
//! which its sandbox lets it write: a canary that stays absent proves the git hardening stopped
//! the program, not the kernel. Part 2 (repository metadata, grants, injection, writes) is
//! `escape_git_repository.rs`.

// Test helpers outside #[test] fns: a failed setup step should panic with its name.
#![allow(clippy::expect_used)]

use crate::common;
use crate::gitkit;

use std::fs;

use common::Fixture;
use gitkit::{
    canary, config, denied, fired, git, git_ok, git_tty, hook, init_repo, main_repo, not_fired, op,
    op_ok, read, run, stat_dirty, tool_with, touch,
};
use serde_json::json;
use warren_tools::ToolError;

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
    // The full sandbox does not even mount the stranger's workspace, so git finds nothing to
    // include (it skips a missing include); with Landlock alone the read is refused. Either way
    // the stranger's text never reaches the agent.
    let out = format!("{:?}", read(&f, "main", "status", &repo));
    assert!(!out.contains("SECRET-stranger"), "{out}");
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
        profile.unrestricted = true;
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
    // The full sandbox does not even mount the stranger's workspace, so git finds nothing to
    // include (it skips a missing include); with Landlock alone the read is refused. Either way
    // the stranger's text never reaches the agent.
    let out = format!("{:?}", read(&f, "main", "log", &repo));
    assert!(!out.contains("SECRET-stranger"), "{out}");
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
        profile.unrestricted = true;
    });
    let msg = denied(run(&tool, json!({"operation": "status", "path": "repo"})));
    assert!(msg.contains("stranger"), "{msg}");
}
