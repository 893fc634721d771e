//! The `git_operations` tool (SPEC §3 GIT-1..10, PERM-3/4, SBX-2): the real `git` binary behind
//! a fixed set of structured operations.
//!
//! A call is decided in this order, and nothing is started until every step passed:
//! 1. the operation is known ([`args::Op`], GIT-1) and every argument valid ([`args`],
//!    [`refname`], GIT-10);
//! 2. writes: the agent may act (autonomy) and the runtime is not Docker (GIT-9);
//! 3. the repository is discovered within the grant and its metadata validated ([`repo`],
//!    GIT-2..4): reads need Read, writes Read AND Write, on every repository path and argument
//!    path, including every level of alternates and every submodule's `.git` found in the
//!    index ([`index`]), whatever the sandbox (`noop` included);
//! 4. git runs through the agent's sandbox ([`exec`]): reads hardened (GIT-5..7; the config
//!    pre-pass is cached while the config files are unchanged, [`prepass`]), writes with the
//!    repository's hooks and filters (GIT-8);
//! 5. the output is parsed into JSON ([`parse`]); `worktree-list` omits every entry that does
//!    not validate (GIT-3).

mod args;
mod exec;
mod index;
mod parse;
mod prepass;
pub mod refname;
mod repo;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use warren_config::schema::RuntimeKind;
use warren_security::SecurityPolicy;
use warren_security::sandbox::Sandbox;

use self::args::{Args, Op, invalid};
use self::repo::{Need, Repo};
use crate::tool::{BoxFuture, RiskClass, Tool, ToolError, ToolOutput, parse_args};

pub use self::exec::{NO_HOOKS, READ_CONFIG};

/// Runs git for one agent.
pub struct GitOperations {
    sandbox: Sandbox,
    prepass: prepass::PrepassCache,
}

impl GitOperations {
    pub fn new(sandbox: Sandbox) -> Self {
        Self {
            sandbox,
            prepass: prepass::PrepassCache::default(),
        }
    }

    /// How many reads of this tool listed the repository config (a sandboxed spawn of its own);
    /// the other reads reused a cached listing ([`prepass`]). For benchmarks and tests.
    pub fn config_listings(&self) -> u64 {
        self.prepass.listings()
    }

    fn policy(&self) -> &SecurityPolicy {
        self.sandbox.policy()
    }

    async fn run(&self, raw: Value) -> Result<ToolOutput, ToolError> {
        let a: Args = parse_args(raw)?;
        let op = Op::parse(&a.operation, a.action.as_deref())?;
        args::check_paths_len(&a.paths)?;
        let policy = self.policy().clone();
        if !op.is_read() {
            if !policy.can_act() {
                return Err(ToolError::Denied(format!(
                    "agent '{}' has autonomy read_only; git {} is a write operation",
                    policy.alias(),
                    op.name()
                )));
            }
            if policy.runtime_kind() == RuntimeKind::Docker {
                return Err(ToolError::Denied(format!(
                    "git {} is a write operation and [runtime] kind = \"docker\": git does not run inside the \
                     runtime container, so writes are refused (GIT-9); use the shell tool to run git inside the container",
                    op.name()
                )));
            }
        }
        let need = if op.is_read() {
            Need::Read
        } else {
            Need::ReadWrite
        };
        let start = a
            .path
            .clone()
            .unwrap_or_else(|| policy.workspace().to_path_buf());
        let (repo, prepared) = {
            let policy = policy.clone();
            tokio::task::spawn_blocking(move || -> Result<(Repo, Prepared), ToolError> {
                let repo = repo::discover(&policy, &start, need)?;
                let prepared = prepare(&policy, &repo, op, &a, need)?;
                Ok((repo, prepared))
            })
            .await
            .map_err(|e| ToolError::Failed(format!("git tool task failed: {e}")))??
        };
        let read = op.is_read();
        let drivers = if read {
            self.prepass.drivers(&self.sandbox, &repo).await?
        } else {
            Vec::new()
        };
        let out = exec::run(&self.sandbox, &repo, read, &drivers, &prepared.argv).await?;
        // A repository without commits has an empty history, not a failing one.
        let unborn = op == Op::Log && out.stderr.contains("does not have any commits yet");
        if !out.ok() && !unborn {
            return Err(out.failure(op.name()));
        }
        let mut result = json!({
            "operation": op.name(),
            "repository": repo.work_tree,
            "sandbox": self.sandbox.backend(),
        });
        let data = match op {
            Op::Status => serde_json::to_value(parse::status(&out.stdout)),
            Op::Diff => serde_json::to_value(json!({ "files": parse::diff(&out.stdout) })),
            Op::Log => serde_json::to_value(json!({ "commits": parse::log(&out.stdout) })),
            Op::BranchList => {
                serde_json::to_value(json!({ "branches": parse::branches(&out.stdout) }))
            }
            Op::StashList => {
                serde_json::to_value(json!({ "stashes": parse::stashes(&out.stdout) }))
            }
            Op::WorktreeList => {
                let listed = parse::worktrees(&out.stdout);
                let policy = policy.clone();
                let common = repo.common_dir.clone();
                let kept = tokio::task::spawn_blocking(move || {
                    listed
                        .into_iter()
                        .filter(|w| worktree_visible(&policy, w, &common))
                        .collect::<Vec<_>>()
                })
                .await
                .map_err(|e| ToolError::Failed(format!("git tool task failed: {e}")))?;
                serde_json::to_value(json!({ "worktrees": kept }))
            }
            _ => Ok(json!({
                "output": String::from_utf8_lossy(&out.stdout).trim_end(),
                "messages": out.stderr.trim_end(),
            })),
        }
        .map_err(|e| ToolError::Failed(format!("cannot encode the result: {e}")))?;
        if let (Some(obj), Value::Object(data)) = (result.as_object_mut(), data) {
            obj.extend(data);
            if out.stdout_truncated {
                obj.insert("truncated".into(), json!(true));
            }
        }
        Ok(ToolOutput::json(result))
    }
}

/// A worktree entry is shown only if its path and metadata validate under the read grant and
/// it belongs to this repository (GIT-3).
fn worktree_visible(policy: &SecurityPolicy, w: &parse::Worktree, common: &Path) -> bool {
    if w.bare {
        return false;
    }
    repo::validate_worktree(policy, Path::new(&w.path), Need::Read)
        .is_ok_and(|r| r.common_dir == common)
}

/// The validated git arguments of one call (after the global options).
struct Prepared {
    argv: Vec<OsString>,
}

fn os(items: &[&str]) -> Vec<OsString> {
    items.iter().map(OsString::from).collect()
}

/// Validates the call's paths (GIT-10: inside the repository, allowed by `need`) and returns
/// them relative to the work tree, for after `--`.
fn paths(
    policy: &SecurityPolicy,
    repo: &Repo,
    raw: &[String],
    need: Need,
) -> Result<Vec<OsString>, ToolError> {
    raw.iter()
        .map(|p| {
            let rel = args::repo_relative(&repo.work_tree, p)?;
            repo::check(policy, &repo.work_tree.join(&rel), need)?;
            Ok(if rel.as_os_str().is_empty() {
                OsString::from(".")
            } else {
                rel.into_os_string()
            })
        })
        .collect()
}

/// A worktree target (`worktree add|remove`): resolved and readable AND writable (GIT-4, PERM-4).
fn worktree_target(
    policy: &SecurityPolicy,
    raw: Option<&PathBuf>,
    op: Op,
) -> Result<PathBuf, ToolError> {
    let raw = raw.ok_or_else(|| invalid(format!("{} needs 'worktree_path'", op.name())))?;
    let resolved = repo::check(policy, raw, Need::ReadWrite)?;
    Ok(resolved.path)
}

fn prepare(
    policy: &SecurityPolicy,
    repo: &Repo,
    op: Op,
    a: &Args,
    need: Need,
) -> Result<Prepared, ToolError> {
    let with_paths = |mut argv: Vec<OsString>| -> Result<Vec<OsString>, ToolError> {
        argv.push("--".into());
        argv.extend(paths(policy, repo, &a.paths, need)?);
        Ok(argv)
    };
    let no_paths = || -> Result<(), ToolError> {
        if a.paths.is_empty() {
            Ok(())
        } else {
            Err(invalid(format!("{} takes no 'paths'", op.name())))
        }
    };
    let argv = match op {
        Op::Status => {
            no_paths()?;
            os(&[
                "status",
                "--porcelain=2",
                "--branch",
                "-z",
                "--ignore-submodules=dirty",
                "--no-renames",
            ])
        }
        Op::Diff => {
            let mut argv = os(&[
                "diff",
                "--no-ext-diff",
                "--no-textconv",
                "--submodule=short",
                "--ignore-submodules=dirty",
                "--no-color",
                "--src-prefix=a/",
                "--dst-prefix=b/",
                "--unified=3",
            ]);
            if a.cached {
                argv.push("--cached".into());
            }
            with_paths(argv)?
        }
        Op::Log => {
            let limit = args::log_limit(a.limit)?;
            let mut argv = os(&[
                "log",
                "-z",
                "--no-use-mailmap",
                "--no-show-signature",
                "--no-color",
                parse::LOG_FORMAT,
            ]);
            argv.push(format!("--max-count={limit}").into());
            if let Some(rev) = args::revision(a.revision.as_deref(), "revision")? {
                argv.push("--end-of-options".into());
                argv.push(rev.into());
            }
            with_paths(argv)?
        }
        Op::BranchList => {
            no_paths()?;
            os(&[
                "branch",
                "--list",
                "--no-color",
                "--no-column",
                parse::BRANCH_FORMAT,
            ])
        }
        Op::StashList => {
            no_paths()?;
            os(&[
                "stash",
                "list",
                "--no-use-mailmap",
                "--no-show-signature",
                parse::STASH_FORMAT,
            ])
        }
        Op::WorktreeList => {
            no_paths()?;
            os(&["worktree", "list", "--porcelain", "-z"])
        }
        Op::Add => {
            if a.paths.is_empty() {
                return Err(invalid("add needs 'paths'"));
            }
            with_paths(os(&["add"]))?
        }
        Op::Restore => {
            if a.paths.is_empty() {
                return Err(invalid("restore needs 'paths'"));
            }
            let mut argv = os(&["restore"]);
            if a.cached {
                argv.push("--staged".into());
            }
            with_paths(argv)?
        }
        Op::Commit => {
            no_paths()?;
            let msg = args::message(a.message.as_deref(), true)?.unwrap_or_default();
            let mut argv = os(&["commit"]);
            argv.push(format!("--message={msg}").into());
            argv
        }
        Op::Switch => {
            no_paths()?;
            let branch = args::branch(a.branch.as_deref(), op)?;
            let start = args::revision(a.start_point.as_deref(), "start_point")?;
            let mut argv = os(&["switch", "--no-guess"]);
            if a.create {
                // Stuck form: the option's value can never be taken from the next argument.
                argv.push(format!("--create={branch}").into());
                argv.push("--end-of-options".into());
                argv.extend(start.map(OsString::from));
            } else if start.is_some() {
                return Err(invalid("start_point needs create = true"));
            } else {
                argv.push("--end-of-options".into());
                argv.push(branch.into());
            }
            argv
        }
        Op::BranchCreate => {
            no_paths()?;
            let branch = args::branch(a.branch.as_deref(), op)?;
            let start = args::revision(a.start_point.as_deref(), "start_point")?;
            let mut argv = os(&["branch", "--no-track", "--end-of-options"]);
            argv.push(branch.into());
            argv.extend(start.map(OsString::from));
            argv
        }
        Op::BranchDelete => {
            no_paths()?;
            let branch = args::branch(a.branch.as_deref(), op)?;
            let mut argv = os(&[
                "branch",
                if a.force { "-D" } else { "-d" },
                "--end-of-options",
            ]);
            argv.push(branch.into());
            argv
        }
        Op::StashPush => {
            let mut argv = os(&["stash", "push"]);
            if let Some(msg) = args::message(a.message.as_deref(), false)? {
                argv.push(format!("--message={msg}").into());
            }
            if a.keep_index {
                argv.push("--keep-index".into());
            }
            if a.include_untracked {
                argv.push("--include-untracked".into());
            }
            if a.paths.is_empty() {
                argv
            } else {
                with_paths(argv)?
            }
        }
        Op::StashPop | Op::StashDrop => {
            no_paths()?;
            let verb = if op == Op::StashPop { "pop" } else { "drop" };
            let mut argv = os(&["stash", verb]);
            argv.push(format!("stash@{{{}}}", a.index.unwrap_or(0)).into());
            argv
        }
        Op::WorktreeAdd => {
            no_paths()?;
            let target = worktree_target(policy, a.worktree_path.as_ref(), op)?;
            let start = args::revision(a.start_point.as_deref(), "start_point")?;
            let mut argv = os(&["worktree", "add"]);
            match (a.branch.as_deref(), a.create) {
                (Some(_), true) => {
                    let branch = args::branch(a.branch.as_deref(), op)?;
                    argv.push(format!("-b{branch}").into());
                    argv.push("--end-of-options".into());
                    argv.push(target.into());
                    argv.extend(start.map(OsString::from));
                }
                (Some(_), false) => {
                    if start.is_some() {
                        return Err(invalid("start_point needs create = true"));
                    }
                    let branch = args::branch(a.branch.as_deref(), op)?;
                    argv.push("--end-of-options".into());
                    argv.push(target.into());
                    argv.push(branch.into());
                }
                (None, _) => {
                    argv.push("--detach".into());
                    argv.push("--end-of-options".into());
                    argv.push(target.into());
                    argv.extend(start.map(OsString::from));
                }
            }
            argv
        }
        Op::WorktreeRemove => {
            no_paths()?;
            let target = worktree_target(policy, a.worktree_path.as_ref(), op)?;
            repo::validate_worktree(policy, &target, Need::ReadWrite)?;
            let mut argv = os(&["worktree", "remove"]);
            if a.force {
                argv.push("--force".into());
            }
            argv.push("--end-of-options".into());
            argv.push(target.into());
            argv
        }
        Op::WorktreePrune => {
            no_paths()?;
            os(&["worktree", "prune"])
        }
    };
    Ok(Prepared { argv })
}

impl Tool for GitOperations {
    fn name(&self) -> &'static str {
        "git_operations"
    }
    fn description(&self) -> &'static str {
        "Run git on a repository inside the agent's grants. Reads (status, diff, log, branch, stash-list, \
         worktree-list) return structured JSON and never run repository-configured programs; writes (add, commit, \
         switch/checkout, branch-create/delete, stash-push/pop/drop, worktree-add/remove/prune, restore) need \
         read-write access and run in the agent's sandbox. Paths are relative to the repository's top directory."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "additionalProperties": false, "required": ["operation"], "properties": {
            "operation": {"type": "string", "enum": args::OPERATIONS},
            "action": {"type": "string", "description": "for branch (list|create|delete), stash (list|push|pop|drop), worktree (list|add|remove|prune)"},
            "path": {"type": "string", "description": "a directory in the repository (default: the workspace)"},
            "paths": {"type": "array", "items": {"type": "string"}},
            "cached": {"type": "boolean", "description": "diff --cached / restore --staged"},
            "limit": {"type": "integer", "minimum": 1, "maximum": args::MAX_LOG_LIMIT},
            "revision": {"type": "string", "description": "log: a revision or range (A..B)"},
            "message": {"type": "string"},
            "branch": {"type": "string"},
            "start_point": {"type": "string"},
            "create": {"type": "boolean"},
            "force": {"type": "boolean"},
            "index": {"type": "integer", "minimum": 0},
            "include_untracked": {"type": "boolean"},
            "keep_index": {"type": "boolean"},
            "worktree_path": {"type": "string"}
        }})
    }
    fn risk(&self) -> RiskClass {
        RiskClass::Write
    }
    fn execute(&self, args: Value) -> BoxFuture<'_, Result<ToolOutput, ToolError>> {
        Box::pin(self.run(args))
    }
}
