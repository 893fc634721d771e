//! The arguments of `git_operations`, the operation set and its read/write classification
//! (GIT-1), and validation of every model-supplied value (GIT-10): paths are relative to the
//! repository, free of `..` escapes and passed after `--` with literal pathspecs; branch names
//! follow `check-ref-format`; revisions follow a small grammar; nothing may start with `-`.

use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

use super::refname::{check_branch_name, check_revision};
use crate::tool::ToolError;

/// Largest `log` limit.
pub const MAX_LOG_LIMIT: u32 = 1000;
const DEFAULT_LOG_LIMIT: u32 = 20;
const MAX_MESSAGE_BYTES: usize = 16 * 1024;
const MAX_PATHS: usize = 1000;

/// The model's arguments. Unknown fields are refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Args {
    pub operation: String,
    /// `branch`: list|create|delete; `stash`: list|push|pop|drop; `worktree`: list|add|remove|prune.
    pub action: Option<String>,
    /// The repository (or a directory in it); relative to the workspace. Default: the workspace.
    pub path: Option<PathBuf>,
    /// Paths inside the repository (relative to the repository's top directory).
    #[serde(default)]
    pub paths: Vec<String>,
    /// `diff --cached`, `restore --staged`.
    #[serde(default, alias = "staged")]
    pub cached: bool,
    pub limit: Option<u32>,
    /// `log` revision or range.
    pub revision: Option<String>,
    pub message: Option<String>,
    /// Branch name (`branch create|delete`, `checkout`, `switch`, `worktree add`).
    pub branch: Option<String>,
    /// Start point of a new branch.
    pub start_point: Option<String>,
    /// `checkout`/`switch`: create the branch; `worktree add`: create `branch`.
    #[serde(default)]
    pub create: bool,
    #[serde(default)]
    pub force: bool,
    /// `stash pop|drop` entry.
    pub index: Option<u32>,
    #[serde(default)]
    pub include_untracked: bool,
    #[serde(default)]
    pub keep_index: bool,
    /// `worktree add|remove` target.
    pub worktree_path: Option<PathBuf>,
}

/// Every operation `git_operations` offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Status,
    Diff,
    Log,
    BranchList,
    StashList,
    WorktreeList,
    Add,
    Commit,
    Switch,
    BranchCreate,
    BranchDelete,
    StashPush,
    StashPop,
    StashDrop,
    WorktreeAdd,
    WorktreeRemove,
    WorktreePrune,
    Restore,
}

/// The names the schema lists.
pub const OPERATIONS: [&str; 22] = [
    "status",
    "diff",
    "log",
    "branch",
    "branch-list",
    "stash-list",
    "worktree-list",
    "add",
    "commit",
    "checkout",
    "switch",
    "branch-create",
    "branch-delete",
    "stash",
    "stash-push",
    "stash-pop",
    "stash-drop",
    "worktree",
    "worktree-add",
    "worktree-remove",
    "worktree-prune",
    "restore",
];

impl Op {
    /// The operation named by `operation` (+ `action`); unknown ones are refused (GIT-1).
    pub fn parse(operation: &str, action: Option<&str>) -> Result<Self, ToolError> {
        let unknown = || {
            ToolError::InvalidArguments(format!(
                "unknown git operation '{}' (action {:?}); known: {}",
                operation.chars().take(60).collect::<String>(),
                action.map(|a| a.chars().take(20).collect::<String>()),
                OPERATIONS.join(", ")
            ))
        };
        Ok(match (operation, action) {
            ("status", None) => Self::Status,
            ("diff", None) => Self::Diff,
            ("log", None) => Self::Log,
            ("branch", None | Some("list")) | ("branch-list", None) => Self::BranchList,
            ("branch", Some("create")) | ("branch-create", None) => Self::BranchCreate,
            ("branch", Some("delete")) | ("branch-delete", None) => Self::BranchDelete,
            ("stash", Some("list")) | ("stash-list", None) => Self::StashList,
            ("stash", Some("push")) | ("stash-push", None) => Self::StashPush,
            ("stash", Some("pop")) | ("stash-pop", None) => Self::StashPop,
            ("stash", Some("drop")) | ("stash-drop", None) => Self::StashDrop,
            ("worktree", Some("list")) | ("worktree-list", None) => Self::WorktreeList,
            ("worktree", Some("add")) | ("worktree-add", None) => Self::WorktreeAdd,
            ("worktree", Some("remove")) | ("worktree-remove", None) => Self::WorktreeRemove,
            ("worktree", Some("prune")) | ("worktree-prune", None) => Self::WorktreePrune,
            ("add", None) => Self::Add,
            ("commit", None) => Self::Commit,
            ("checkout" | "switch", None) => Self::Switch,
            ("restore", None) => Self::Restore,
            _ => return Err(unknown()),
        })
    }

    /// Read operations run hardened; everything else is a write (GIT-1, PERM-3/4).
    pub fn is_read(self) -> bool {
        matches!(
            self,
            Self::Status
                | Self::Diff
                | Self::Log
                | Self::BranchList
                | Self::StashList
                | Self::WorktreeList
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Status => "status",
            Self::Diff => "diff",
            Self::Log => "log",
            Self::BranchList => "branch-list",
            Self::StashList => "stash-list",
            Self::WorktreeList => "worktree-list",
            Self::Add => "add",
            Self::Commit => "commit",
            Self::Switch => "switch",
            Self::BranchCreate => "branch-create",
            Self::BranchDelete => "branch-delete",
            Self::StashPush => "stash-push",
            Self::StashPop => "stash-pop",
            Self::StashDrop => "stash-drop",
            Self::WorktreeAdd => "worktree-add",
            Self::WorktreeRemove => "worktree-remove",
            Self::WorktreePrune => "worktree-prune",
            Self::Restore => "restore",
        }
    }
}

pub fn invalid(msg: impl Into<String>) -> ToolError {
    ToolError::InvalidArguments(msg.into())
}

/// The `log` limit, defaulted and range-checked.
pub fn log_limit(limit: Option<u32>) -> Result<u32, ToolError> {
    match limit.unwrap_or(DEFAULT_LOG_LIMIT) {
        0 => Err(invalid("limit must be at least 1")),
        n if n > MAX_LOG_LIMIT => Err(invalid(format!(
            "limit {n} is above the maximum of {MAX_LOG_LIMIT}"
        ))),
        n => Ok(n),
    }
}

/// A required branch name, validated (GIT-10).
pub fn branch(value: Option<&str>, op: Op) -> Result<String, ToolError> {
    let name = value.ok_or_else(|| invalid(format!("{} needs 'branch'", op.name())))?;
    check_branch_name(name).map_err(|e| invalid(e.to_string()))?;
    Ok(name.to_string())
}

/// An optional revision, validated (GIT-10).
pub fn revision(value: Option<&str>, field: &str) -> Result<Option<String>, ToolError> {
    value
        .map(|r| {
            check_revision(r)
                .map(|()| r.to_string())
                .map_err(|e| invalid(format!("{field}: {e}")))
        })
        .transpose()
}

/// A commit or stash message: non-empty (for commits), bounded, no NUL.
pub fn message(value: Option<&str>, required: bool) -> Result<Option<String>, ToolError> {
    match value.map(str::trim) {
        None | Some("") if required => Err(invalid("commit needs a non-empty 'message'")),
        None | Some("") => Ok(None),
        Some(m) if m.len() > MAX_MESSAGE_BYTES => Err(invalid(format!(
            "message is longer than {MAX_MESSAGE_BYTES} bytes"
        ))),
        Some(m) if m.contains('\0') => Err(invalid("message contains a NUL byte")),
        Some(m) => Ok(Some(m.to_string())),
    }
}

/// Lexically normalises a model-supplied path inside the work tree `top` (which is canonical):
/// relative paths are taken from `top`, absolute ones must lie under it, `..` may not leave it.
/// Returns the path relative to `top` (empty for `top` itself).
pub fn repo_relative(top: &Path, raw: &str) -> Result<PathBuf, ToolError> {
    if raw.is_empty() {
        return Err(invalid("paths: an empty path"));
    }
    if raw.contains('\0') || raw.len() > 4096 {
        return Err(invalid("paths: a path contains a NUL byte or is too long"));
    }
    let given = Path::new(raw);
    let relative = if given.is_absolute() {
        given.strip_prefix(top).map_err(|_| {
            invalid(format!(
                "paths: '{raw}' is outside the repository {}",
                top.display()
            ))
        })?
    } else {
        given
    };
    let mut out = PathBuf::new();
    for c in relative.components() {
        match c {
            Component::CurDir => {}
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                if !out.pop() {
                    return Err(invalid(format!(
                        "paths: '{raw}' leaves the repository {} through '..'",
                        top.display()
                    )));
                }
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(invalid(format!("paths: '{raw}' is not a plain path")));
            }
        }
    }
    Ok(out)
}

/// Validates the `paths` list's size.
pub fn check_paths_len(paths: &[String]) -> Result<(), ToolError> {
    if paths.len() > MAX_PATHS {
        return Err(invalid(format!("at most {MAX_PATHS} paths per call")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_operations_are_refused_git1() {
        for (op, action) in [
            ("push", None),
            ("fetch", None),
            ("config", None),
            ("clone", None),
            ("branch", Some("rename")),
            ("stash", None),
            ("worktree", None),
            ("status", Some("x")),
        ] {
            assert!(Op::parse(op, action).is_err(), "{op} {action:?}");
        }
        assert_eq!(Op::parse("stash-list", None), Ok(Op::StashList));
        assert!(Op::parse("worktree", Some("list")).is_ok_and(Op::is_read));
        assert!(Op::parse("worktree", Some("prune")).is_ok_and(|o| !o.is_read()));
    }

    #[test]
    fn paths_stay_in_the_repository_git10() {
        let top = Path::new("/r");
        assert_eq!(repo_relative(top, "a/../b").ok(), Some(PathBuf::from("b")));
        assert_eq!(repo_relative(top, "/r/x").ok(), Some(PathBuf::from("x")));
        assert_eq!(repo_relative(top, ".").ok(), Some(PathBuf::new()));
        assert!(repo_relative(top, "../x").is_err());
        assert!(repo_relative(top, "/etc/passwd").is_err());
        assert!(repo_relative(top, "").is_err());
    }
}
