//! Hostile-repository corpus, part 2: repository metadata and grants (GIT-2, GIT-3, GIT-4),
//! option injection (GIT-10) and writes (GIT-8, GIT-9, SBX-2). Every attack is first shown to
//! work with plain `git` run by the test, then refused or neutralised by `git_operations`.
//! Part 1 (programs a repository configures, transport) is `escape_git_programs.rs`.

// Test helpers outside #[test] fns: a failed setup step should panic with its name.
#![allow(clippy::expect_used)]

use crate::common;
use crate::gitkit;

use std::fs;
use std::os::unix::fs::symlink;

use common::Fixture;
use gitkit::{
    canary, config, denied, fired, git, git_ok, hook, init_repo, invalid, main_repo, not_fired, op,
    op_ok, read, run, tool_with, touch,
};
use serde_json::json;
use warren_tools::ToolError;

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

/// `main`'s git tool under `sandbox = "noop"`: nothing but Warren's own checks stands between
/// git and the siblings.
pub(crate) fn noop_tool(f: &Fixture) -> warren_tools::GitOperations {
    tool_with(f, |config| {
        let profile = config.risk_profiles.entry("default".into()).or_default();
        profile.sandbox = warren_config::schema::SandboxKind::Noop;
        profile.unrestricted = true;
    })
}

/// A stranger's repository holding a secret file, and its HEAD commit.
pub(crate) fn stranger_repo(f: &Fixture) -> (std::path::PathBuf, String) {
    let theirs = init_repo(&f.ws("stranger").join("repo"));
    fs::write(theirs.join("plan.txt"), "TOP-SECRET-PLAN\n").expect("their file");
    git_ok(&theirs, &["add", "plan.txt"]);
    git_ok(&theirs, &["commit", "-q", "-m", "SECRET-stranger-commit"]);
    let head = git_ok(&theirs, &["rev-parse", "HEAD"]).trim().to_string();
    (theirs, head)
}

#[test]
fn alternates_chain_into_a_sibling_is_refused_at_the_second_level_under_noop_git4() {
    let f = Fixture::new();
    let (theirs, their_head) = stranger_repo(&f);
    let repo = main_repo(&f);
    // Level 1: an object directory inside main's own workspace (allowed on its own)...
    let hop = f.ws("main").join("hop/objects");
    fs::create_dir_all(hop.join("info")).expect("hop");
    fs::write(
        repo.join(".git/objects/info/alternates"),
        format!("{}\n", hop.display()),
    )
    .expect("alternates");
    // ... level 2: its own alternates file points into the stranger's repository.
    fs::write(
        hop.join("info/alternates"),
        format!("{}\n", theirs.join(".git/objects").display()),
    )
    .expect("second-level alternates");
    fs::write(repo.join(".git/refs/heads/main"), format!("{their_head}\n")).expect("ref");
    // Plain git follows both levels: the stranger's history and file content come out.
    assert!(git_ok(&repo, &["log", "--format=%s"]).contains("SECRET-stranger-commit"));
    assert!(git_ok(&repo, &["diff", "--cached"]).contains("TOP-SECRET-PLAN"));
    let tool = noop_tool(&f);
    for args in [
        json!({"operation": "diff", "path": "repo", "cached": true}),
        json!({"operation": "log", "path": "repo"}),
        json!({"operation": "status", "path": "repo"}),
    ] {
        let msg = denied(run(&tool, args.clone()));
        assert_eq!(
            msg,
            format!(
                "alternate object directory in {}/info/alternates points outside the grant (GIT-4): \
                 {}/.git/objects: it is in agent 'stranger''s workspace and agent 'main' has no Read \
                 grant on 'stranger' (add [agents.main.workspace.access] stranger = \"Read\") \
                 (git must read repository metadata, GIT-2)",
                hop.display(),
                theirs.display()
            ),
            "{args}"
        );
    }
}

/// A gitlink `sub` in `repo`'s index whose `.git` file points into the stranger's repository.
pub(crate) fn plant_submodule(f: &Fixture, repo: &std::path::Path, theirs: &std::path::Path) {
    let mine = git_ok(repo, &["rev-parse", "HEAD"]);
    git_ok(
        repo,
        &[
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("160000,{},sub", mine.trim()),
        ],
    );
    fs::create_dir_all(repo.join("sub")).expect("sub");
    fs::write(
        repo.join("sub/.git"),
        format!("gitdir: {}\n", theirs.join(".git").display()),
    )
    .expect("sub/.git");
    assert!(f.ws("main").join("repo/sub/.git").is_file());
}

#[test]
fn submodule_dot_git_file_pointing_into_a_sibling_is_refused_under_noop_git4() {
    // The index as git writes it by default, as version 4 (prefix-compressed names) and split
    // (the gitlink then lives in the shared index): each is read for gitlinks.
    for layout in ["default", "version-4", "split"] {
        let f = Fixture::new();
        let (theirs, their_head) = stranger_repo(&f);
        let repo = main_repo(&f);
        plant_submodule(&f, &repo, &theirs);
        match layout {
            "version-4" => {
                git_ok(&repo, &["update-index", "--index-version", "4"]);
            }
            "split" => {
                git_ok(&repo, &["update-index", "--split-index"]);
                assert!(
                    fs::read_dir(repo.join(".git"))
                        .expect("git dir")
                        .flatten()
                        .any(|e| e.file_name().to_string_lossy().starts_with("sharedindex.")),
                    "the index is split"
                );
            }
            _ => {}
        }
        // Plain git, with the tool's own flags, reports the stranger's HEAD as the submodule's
        // commit: it opened the stranger's repository through the submodule's .git file.
        let plain = git_ok(
            &repo,
            &["diff", "--submodule=short", "--ignore-submodules=dirty"],
        );
        assert!(plain.contains(&their_head), "{layout}: {plain}");
        let tool = noop_tool(&f);
        for operation in ["diff", "status"] {
            let msg = denied(run(&tool, json!({"operation": operation, "path": "repo"})));
            assert_eq!(
                msg,
                format!(
                    "submodule 'sub': gitdir in {}/sub/.git points outside the grant (GIT-4): \
                     {}/.git: it is in agent 'stranger''s workspace and agent 'main' has no Read \
                     grant on 'stranger' (add [agents.main.workspace.access] stranger = \"Read\") \
                     (git must read repository metadata, GIT-2)",
                    repo.display(),
                    theirs.display()
                ),
                "{layout} {operation}"
            );
        }
    }
}

#[test]
fn pointers_outside_the_grant_are_refused_alike_whatever_is_there_git4() {
    // A `.git` file is a probe the agent can aim anywhere: the refusal must not tell a
    // repository from a file, a missing path or a symlink.
    let f = Fixture::new();
    let (theirs, _) = stranger_repo(&f);
    let s = f.ws("stranger");
    symlink(theirs.join(".git"), s.join("git-link")).expect("symlink");
    let targets = [
        theirs.join(".git"),
        s.join("missing/.git"),
        s.join("secret.txt"),
        s.join("secret.txt/x"),
        s.join("git-link"),
        s.join("missing/../repo/.git"),
    ];
    let mine = f.ws("main").join("probe");
    fs::create_dir_all(&mine).expect("probe dir");
    let plain: Vec<bool> = targets
        .iter()
        .map(|t| {
            fs::write(mine.join(".git"), format!("gitdir: {}\n", t.display())).expect(".git");
            git(&mine, &["status"]).status.success()
        })
        .collect();
    assert!(
        plain.contains(&true) && plain.contains(&false),
        "baseline: plain git tells the targets apart {plain:?}"
    );
    for t in &targets {
        fs::write(mine.join(".git"), format!("gitdir: {}\n", t.display())).expect(".git");
        let msg = denied(read(&f, "main", "status", &mine));
        assert_eq!(
            msg,
            format!(
                "gitdir in {}/.git points outside the grant (GIT-4): {}: it is in agent \
                 'stranger''s workspace and agent 'main' has no Read grant on 'stranger' (add \
                 [agents.main.workspace.access] stranger = \"Read\") (git must read repository \
                 metadata, GIT-2)",
                mine.display(),
                t.display()
            )
        );
    }
}

#[test]
fn submodule_inside_the_workspace_still_works_git4() {
    let f = Fixture::new();
    let lib = init_repo(&f.ws("main").join("lib"));
    let repo = main_repo(&f);
    git_ok(
        &repo,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            lib.to_str().expect("utf-8"),
            "lib",
        ],
    );
    assert!(
        repo.join("lib/.git").is_file(),
        "a .git file into .git/modules"
    );
    let st = op_ok(&f, "main", json!({"operation": "status", "path": "repo"}));
    let staged: Vec<_> = st["staged"]
        .as_array()
        .expect("staged")
        .iter()
        .map(|e| e["path"].clone())
        .collect();
    assert_eq!(staged, vec![json!(".gitmodules"), json!("lib")], "{st}");
    let st = run(
        &noop_tool(&f),
        json!({"operation": "diff", "path": "repo", "cached": true}),
    )
    .expect("diff under noop");
    assert!(
        st.content["files"].as_array().is_some_and(|f| f.len() == 2),
        "{}",
        st.content
    );
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
