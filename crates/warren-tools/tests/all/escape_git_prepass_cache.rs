//! The cached config pre-pass of `git_operations` reads cannot be used to smuggle a config past
//! the driver blanking (GIT-6): one tool (so one cache) reads a repository while its config is
//! harmless and settled, which caches the pre-pass; the agent then changes the config chain in a
//! way the cache must notice (an included file rewritten in place at the same size with its
//! mtime put back, an include target that did not exist, a new include directive pointing at an
//! old file); the next read must still blank the new filter driver. Each case ends by showing
//! the smuggled filter is live: plain git runs it. The index decoding (gitlinks, GIT-4) is
//! cached under the same rule: a submodule planted after it was cached is still checked.

// Test helpers outside #[test] fns: a failed setup step should panic with its name.
#![allow(clippy::expect_used)]

use crate::common;
use crate::gitkit;

use std::fs;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use crate::escape_git_repository::{noop_tool, plant_submodule, stranger_repo};
use common::Fixture;
use gitkit::{
    canary, config, denied, fired, git, main_repo, not_fired, run, stat_dirty, tool_with, touch,
};
use serde_json::json;
use warren_tools::GitOperations;

/// Longer than the cache's settling time (1 s): a listing is cached only when every watched
/// config file last changed more than that before it.
const SETTLE: Duration = Duration::from_millis(1300);

/// A config defining the filter `evil` whose clean command creates `canary`.
fn evil_filter(canary: &Path) -> String {
    format!(
        "[filter \"evil\"]\n\tclean = \"sh -c '{}; cat'\"\n",
        touch(canary).replace('\'', "")
    )
}

/// Reads `repo` until its pre-pass is cached, and shows the next read uses the cache. The first
/// read hands the workspace to the sandbox user when the test runs as root (a `chown`, which
/// changes every file's ctime), so the config settles after it.
fn cache_prepass(tool: &GitOperations, repo: &Path) {
    let status = || run(tool, json!({"operation": "status", "path": repo})).expect("status");
    status();
    std::thread::sleep(SETTLE);
    status();
    let listed = tool.config_listings();
    status();
    assert_eq!(
        tool.config_listings(),
        listed,
        "the config did not change: the read must use the cached pre-pass"
    );
}

/// A read with the smuggled filter in place must not run it; plain git then does.
#[track_caller]
fn smuggled_filter_stays_off(tool: &GitOperations, repo: &Path, c: &Path) {
    let listed = tool.config_listings();
    stat_dirty(repo);
    run(tool, json!({"operation": "status", "path": repo})).expect("status");
    assert_eq!(
        tool.config_listings(),
        listed + 1,
        "the config changed: the read must list it again"
    );
    run(tool, json!({"operation": "diff", "path": repo})).expect("diff");
    not_fired(c);
    stat_dirty(repo);
    git(repo, &["diff"]);
    fired(c);
}

#[test]
fn cached_prepass_sees_an_included_file_rewritten_in_place_git6() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    let c = canary(&f, "main", "rewritten-include");
    let evil = evil_filter(&c);
    // Same size as the filter, harmless: a comment.
    let harmless = format!("#{}\n", " ".repeat(evil.len() - 2));
    let extra = repo.join(".git/extra.cfg");
    fs::write(&extra, &harmless).expect("include");
    config(&repo, "include.path", "extra.cfg");
    fs::write(repo.join(".gitattributes"), "*.txt filter=evil\n").expect("attributes");
    let tool = tool_with(&f, |_| {});
    cache_prepass(&tool, &repo);
    // Same inode, same size, mtime put back: only the ctime tells the file changed.
    let before = fs::metadata(&extra)
        .expect("stat")
        .modified()
        .expect("mtime");
    let mut file = fs::File::options()
        .write(true)
        .open(&extra)
        .expect("open include");
    file.write_all(evil.as_bytes()).expect("rewrite include");
    file.set_modified(before).expect("restore mtime");
    drop(file);
    assert_eq!(
        fs::metadata(&extra).expect("stat").len() as usize,
        evil.len()
    );
    smuggled_filter_stays_off(&tool, &repo, &c);
}

#[test]
fn cached_prepass_sees_an_include_target_created_later_git6() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    let c = canary(&f, "main", "later-include");
    // The include is there from the start; its target does not exist yet (git skips it).
    config(&repo, "include.path", "later.cfg");
    fs::write(repo.join(".gitattributes"), "*.txt filter=evil\n").expect("attributes");
    let tool = tool_with(&f, |_| {});
    cache_prepass(&tool, &repo);
    fs::write(repo.join(".git/later.cfg"), evil_filter(&c)).expect("include target");
    smuggled_filter_stays_off(&tool, &repo, &c);
}

#[test]
fn cached_prepass_sees_a_new_include_of_an_old_file_git6() {
    let f = Fixture::new();
    let repo = main_repo(&f);
    let c = canary(&f, "main", "new-include");
    // The filter file is old (settled) before the pre-pass is cached; only the new include
    // directive in .git/config brings it in.
    fs::write(f.ws("main").join("old.cfg"), evil_filter(&c)).expect("old config");
    fs::write(repo.join(".gitattributes"), "*.txt filter=evil\n").expect("attributes");
    let tool = tool_with(&f, |_| {});
    cache_prepass(&tool, &repo);
    let old = f.ws("main").join("old.cfg");
    config(&repo, "include.path", old.to_str().expect("utf-8"));
    smuggled_filter_stays_off(&tool, &repo, &c);
}

#[test]
fn cached_index_decoding_sees_a_submodule_planted_later_git4() {
    let f = Fixture::new();
    let (theirs, _) = stranger_repo(&f);
    let repo = main_repo(&f);
    // No kernel sandbox: Warren's own metadata checks are all that stands in the way.
    let tool = noop_tool(&f);
    let status = || run(&tool, json!({"operation": "status", "path": "repo"}));
    status().expect("status");
    std::thread::sleep(SETTLE);
    // The index is settled: these reads cache its decoding and then use it.
    status().expect("status");
    status().expect("status");
    plant_submodule(&f, &repo, &theirs);
    let msg = denied(status());
    assert_eq!(
        msg,
        format!(
            "submodule 'sub': gitdir in {}/sub/.git points outside the grant (GIT-4): \
             {}/.git: it is in agent 'stranger''s workspace and agent 'main' has no Read \
             grant on 'stranger' (add [agents.main.workspace.access] stranger = \"Read\") \
             (git must read repository metadata, GIT-2)",
            repo.display(),
            theirs.display()
        )
    );
}
