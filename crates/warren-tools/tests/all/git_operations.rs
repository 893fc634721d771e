//! `git_operations` doing its ordinary job (GIT-1, GIT-8, PERM-3/4): every read returns
//! structured JSON, every write changes the repository like plain git would, unknown operations
//! are refused.

// Test helpers outside #[test] fns: a failed setup step should panic with its name.
#![allow(clippy::expect_used)]

use crate::common;
use crate::gitkit;

use std::fs;

use common::Fixture;
use gitkit::{git_ok, init_repo, invalid, op, op_ok};
use serde_json::json;

#[test]
fn reads_return_structured_json_git1() {
    let f = Fixture::new();
    let repo = init_repo(&f.ws("main").join("repo"));
    fs::write(repo.join("a.txt"), "one\ntwo\n").expect("edit");
    fs::write(repo.join("new.txt"), "n\n").expect("new");

    let st = op_ok(&f, "main", json!({"operation": "status", "path": "repo"}));
    assert_eq!(st["branch"], "main");
    assert_eq!(st["clean"], false);
    assert_eq!(
        st["unstaged"],
        json!([{"path": "a.txt", "change": "modified"}])
    );
    assert_eq!(st["untracked"], json!(["new.txt"]));

    let d = op_ok(&f, "main", json!({"operation": "diff", "path": "repo"}));
    assert_eq!(d["files"][0]["new_path"], "a.txt");
    assert_eq!(d["files"][0]["hunks"][0]["lines"], json!([" one", "+two"]));
    let cached = op_ok(
        &f,
        "main",
        json!({"operation": "diff", "path": "repo", "cached": true}),
    );
    assert_eq!(cached["files"], json!([]));

    let log = op_ok(
        &f,
        "main",
        json!({"operation": "log", "path": "repo", "limit": 5, "revision": "HEAD", "paths": ["a.txt"]}),
    );
    assert_eq!(log["commits"][0]["subject"], "first");
    assert_eq!(log["commits"][0]["author_name"], "Real Author");
    assert_eq!(log["commits"][0]["author_email"], "real@example.org");

    let br = op_ok(&f, "main", json!({"operation": "branch", "path": "repo"}));
    assert_eq!(br["branches"][0]["name"], "main");
    assert_eq!(br["branches"][0]["current"], true);

    let wt = op_ok(
        &f,
        "main",
        json!({"operation": "worktree-list", "path": "repo"}),
    );
    assert_eq!(wt["worktrees"][0]["path"], json!(repo));

    let stash = op_ok(
        &f,
        "main",
        json!({"operation": "stash-list", "path": "repo"}),
    );
    assert_eq!(stash["stashes"], json!([]));
}

#[test]
fn writes_change_the_repository_git1_git8() {
    let f = Fixture::new();
    let repo = init_repo(&f.ws("main").join("repo"));
    let call = |args: serde_json::Value| op_ok(&f, "main", args);

    fs::write(repo.join("b.txt"), "b\n").expect("b");
    call(json!({"operation": "add", "path": "repo", "paths": ["b.txt"]}));
    call(json!({"operation": "commit", "path": "repo", "message": "add b"}));
    assert_eq!(git_ok(&repo, &["log", "-1", "--format=%s"]).trim(), "add b");

    call(json!({"operation": "branch-create", "path": "repo", "branch": "feature"}));
    call(json!({"operation": "switch", "path": "repo", "branch": "feature"}));
    assert_eq!(
        git_ok(&repo, &["branch", "--show-current"]).trim(),
        "feature"
    );
    call(json!({"operation": "checkout", "path": "repo", "branch": "topic", "create": true}));
    assert_eq!(git_ok(&repo, &["branch", "--show-current"]).trim(), "topic");
    call(json!({"operation": "switch", "path": "repo", "branch": "main"}));
    call(json!({"operation": "branch", "action": "delete", "path": "repo", "branch": "topic"}));
    assert!(!git_ok(&repo, &["branch"]).contains("topic"));

    fs::write(repo.join("a.txt"), "changed\n").expect("edit");
    call(json!({"operation": "stash", "action": "push", "path": "repo", "message": "wip"}));
    let stashes = call(json!({"operation": "stash-list", "path": "repo"}));
    assert_eq!(stashes["stashes"][0]["index"], 0);
    assert!(
        stashes["stashes"][0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("wip"))
    );
    call(json!({"operation": "stash-pop", "path": "repo"}));
    assert_eq!(
        fs::read_to_string(repo.join("a.txt")).ok().as_deref(),
        Some("changed\n")
    );
    call(json!({"operation": "restore", "path": "repo", "paths": ["a.txt"]}));
    assert_eq!(
        fs::read_to_string(repo.join("a.txt")).ok().as_deref(),
        Some("one\n")
    );

    let wt = f.ws("main").join("wt");
    call(
        json!({"operation": "worktree-add", "path": "repo", "worktree_path": "wt", "branch": "wtb", "create": true}),
    );
    assert!(wt.join("a.txt").is_file());
    let listed = call(json!({"operation": "worktree-list", "path": "repo"}));
    assert_eq!(listed["worktrees"][1]["path"], json!(wt));
    assert_eq!(listed["worktrees"][1]["branch"], "wtb");
    // A read from inside the linked worktree validates its .git file, gitdir and commondir.
    let st = op_ok(&f, "main", json!({"operation": "status", "path": "wt"}));
    assert_eq!(st["branch"], "wtb");
    call(json!({"operation": "worktree-remove", "path": "repo", "worktree_path": "wt"}));
    assert!(!wt.exists());
    call(json!({"operation": "worktree-prune", "path": "repo"}));
}

#[test]
fn unknown_operations_and_fields_are_refused_git1() {
    let f = Fixture::new();
    init_repo(&f.ws("main").join("repo"));
    for args in [
        json!({"operation": "push", "path": "repo"}),
        json!({"operation": "fetch", "path": "repo"}),
        json!({"operation": "config", "path": "repo"}),
        json!({"operation": "status", "path": "repo", "extra_args": ["-c", "x=y"]}),
    ] {
        invalid(op(&f, "main", args));
    }
}

#[test]
fn non_ascii_paths_are_reported_unquoted_git1() {
    let f = Fixture::new();
    let repo = init_repo(&f.ws("main").join("repo"));
    fs::write(repo.join("é t.txt"), "x\n").expect("file");
    git_ok(&repo, &["add", "é t.txt"]);
    let d = op_ok(
        &f,
        "main",
        json!({"operation": "diff", "path": "repo", "cached": true}),
    );
    assert_eq!(d["files"][0]["new_path"], "é t.txt", "{d}");
    assert_eq!(d["files"][0]["change"], "added");
}

#[test]
fn log_of_a_repository_without_commits_is_empty_git1() {
    let f = Fixture::new();
    let repo = f.ws("main").join("fresh");
    fs::create_dir_all(&repo).expect("dir");
    git_ok(&repo, &["init", "-q"]);
    let log = op_ok(&f, "main", json!({"operation": "log", "path": "fresh"}));
    assert_eq!(log["commits"], json!([]));
    let st = op_ok(&f, "main", json!({"operation": "status", "path": "fresh"}));
    assert_eq!(st["clean"], true);
}

/// Reads compare only size and whole-second mtime (`core.checkStat=minimal`, so the hand-over
/// of the workspace to the sandbox user does not make every status re-hash every file): a
/// same-size edit made after the hand-over is still reported, and a touched but unchanged file
/// is not.
#[test]
fn a_same_size_edit_after_the_hand_over_is_reported_git1() {
    let f = Fixture::new();
    let repo = init_repo(&f.ws("main").join("repo"));
    fs::write(repo.join("b.txt"), "keep\n").expect("b");
    git_ok(&repo, &["add", "b.txt"]);
    git_ok(&repo, &["commit", "-q", "-m", "b"]);
    let st = op_ok(&f, "main", json!({"operation": "status", "path": "repo"}));
    assert_eq!(st["clean"], true, "{st}");

    std::thread::sleep(std::time::Duration::from_millis(1100));
    let before = fs::read(repo.join("a.txt")).expect("read a");
    let mut after = before.clone();
    after[0] = after[0].to_ascii_uppercase();
    assert_ne!(before, after);
    fs::write(repo.join("a.txt"), &after).expect("same-size edit");
    fs::write(repo.join("b.txt"), "keep\n").expect("rewrite b unchanged");

    let st = op_ok(&f, "main", json!({"operation": "status", "path": "repo"}));
    assert_eq!(
        st["unstaged"],
        json!([{"path": "a.txt", "change": "modified"}]),
        "{st}"
    );
}
