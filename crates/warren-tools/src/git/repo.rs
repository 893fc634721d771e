//! Repository discovery and metadata validation (GIT-2, GIT-3, GIT-4, PERM-3/4).
//!
//! Discovery starts at the requested directory and climbs only while it stays inside the grant
//! root that allowed the directory, so an allowed child never finds a repository in an
//! unapproved parent. The `.git` entry, the `gitdir:` target of a `.git` file, the `commondir`
//! target and every `objects/info/alternates` entry are walked component by component with
//! `lstat` (no symlink anywhere, even one whose target is allowed) and must be readable (reads)
//! or readable AND writable (writes) under the agent's policy. The validated git and work-tree
//! directories are then passed to git explicitly, so git never rediscovers anything else.

use std::path::{Path, PathBuf};

use warren_security::confined;
use warren_security::{Resolved, SecurityPolicy};

use crate::tool::ToolError;

/// Largest `.git` / `commondir` / `alternates` file read.
const POINTER_LIMIT: u64 = 64 * 1024;

/// Entries of `$GIT_DIR` and of the common directory git opens by name: none may be a symlink
/// (GIT-4), so e.g. `objects` cannot be borrowed from another repository. Deeper symlinks are
/// left to the sandbox.
const GIT_DIR_ENTRIES: [&str; 5] = ["HEAD", "index", "config.worktree", "logs", "info"];
const COMMON_ENTRIES: [&str; 8] = [
    "objects",
    "refs",
    "config",
    "packed-refs",
    "info",
    "logs",
    "worktrees",
    "modules",
];

/// The access an operation needs on every repository path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    Read,
    ReadWrite,
}

/// A validated repository: every path canonical, symlink-free and allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repo {
    /// The top directory of the work tree.
    pub work_tree: PathBuf,
    /// `$GIT_DIR` (the `.git` directory, or `<common>/worktrees/<name>` for a linked worktree).
    pub git_dir: PathBuf,
    /// The common directory (objects, refs, config).
    pub common_dir: PathBuf,
    /// The grant root the work tree is under (discovery never climbed above it).
    pub grant_root: PathBuf,
}

fn denied(e: impl std::fmt::Display) -> ToolError {
    ToolError::Denied(e.to_string())
}

/// Checks `need` on `path`, returning the decision.
pub fn check(policy: &SecurityPolicy, path: &Path, need: Need) -> Result<Resolved, ToolError> {
    match need {
        Need::Read => policy.can_read(path),
        Need::ReadWrite => policy.can_read_write(path),
    }
    .map_err(|e| {
        if need == Need::ReadWrite {
            denied(format!(
                "{e} (git write operations need read AND write access, GIT-2)"
            ))
        } else {
            denied(format!("{e} (git must read repository metadata, GIT-2)"))
        }
    })
}

/// Finds and validates the repository containing `start` (relative to the workspace or absolute).
pub fn discover(policy: &SecurityPolicy, start: &Path, need: Need) -> Result<Repo, ToolError> {
    let resolved = check(policy, start, need)?;
    let grant_root = resolved.root.clone();
    let mut dir = resolved.path.clone();
    loop {
        let candidate = dir.join(".git");
        if let Some((dot_git, kind)) = policy.resolve_no_symlinks(&candidate).map_err(denied)? {
            return validate(policy, &dir, &dot_git, kind.is_dir(), need, grant_root);
        }
        if dir == grant_root || !dir.starts_with(&grant_root) || !dir.pop() {
            return Err(ToolError::Failed(format!(
                "{} is not in a git repository (searched up to the grant root {}; discovery never climbs above it)",
                resolved.path.display(),
                grant_root.display()
            )));
        }
    }
}

/// Validates the worktree at exactly `work_tree` (no climbing): for `worktree-list` (GIT-3).
pub fn validate_worktree(
    policy: &SecurityPolicy,
    work_tree: &Path,
    need: Need,
) -> Result<Repo, ToolError> {
    let (top, kind) = policy
        .resolve_no_symlinks(work_tree)
        .map_err(denied)?
        .ok_or_else(|| denied(format!("{}: does not exist", work_tree.display())))?;
    if !kind.is_dir() {
        return Err(denied(format!("{}: not a directory", top.display())));
    }
    let resolved = check(policy, &top, need)?;
    let (dot_git, kind) = policy
        .resolve_no_symlinks(&top.join(".git"))
        .map_err(denied)?
        .ok_or_else(|| denied(format!("{}: has no .git", top.display())))?;
    validate(policy, &top, &dot_git, kind.is_dir(), need, resolved.root)
}

fn validate(
    policy: &SecurityPolicy,
    work_tree: &Path,
    dot_git: &Path,
    is_dir: bool,
    need: Need,
    grant_root: PathBuf,
) -> Result<Repo, ToolError> {
    check(policy, dot_git, need)?;
    let git_dir = if is_dir {
        dot_git.to_path_buf()
    } else {
        // A linked worktree (or submodule): `.git` is a file `gitdir: <path>` (GIT-4).
        let text = read_pointer(policy, dot_git)?;
        let target = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("gitdir:"))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                ToolError::Failed(format!(
                    "{}: not a valid .git file (expected 'gitdir: <path>')",
                    dot_git.display()
                ))
            })?;
        metadata_dir(policy, work_tree, target, need, dot_git, "gitdir")?
    };
    let commondir_file = git_dir.join("commondir");
    let common_dir = match policy
        .resolve_no_symlinks(&commondir_file)
        .map_err(denied)?
    {
        None => git_dir.clone(),
        Some(_) => {
            let text = read_pointer(policy, &commondir_file)?;
            let target = text.lines().next().unwrap_or_default().trim();
            metadata_dir(policy, &git_dir, target, need, &commondir_file, "commondir")?
        }
    };
    for (dir, entries) in [
        (&git_dir, &GIT_DIR_ENTRIES[..]),
        (&common_dir, &COMMON_ENTRIES[..]),
    ] {
        for entry in entries {
            policy
                .resolve_no_symlinks(&dir.join(entry))
                .map_err(denied)?;
        }
    }
    check_alternates(policy, &common_dir, need)?;
    Ok(Repo {
        work_tree: work_tree.to_path_buf(),
        git_dir,
        common_dir,
        grant_root,
    })
}

/// Resolves a metadata pointer `target` (relative to `base`) without following symlinks and
/// checks `need` on it.
fn metadata_dir(
    policy: &SecurityPolicy,
    base: &Path,
    target: &str,
    need: Need,
    pointer: &Path,
    what: &str,
) -> Result<PathBuf, ToolError> {
    let joined = base.join(target);
    let (path, kind) = policy
        .resolve_no_symlinks(&joined)
        .map_err(|e| denied(format!("{what} in {}: {e}", pointer.display())))?
        .ok_or_else(|| {
            ToolError::Failed(format!(
                "{what} in {} points to {}, which does not exist",
                pointer.display(),
                joined.display()
            ))
        })?;
    if !kind.is_dir() {
        return Err(denied(format!(
            "{what} in {} points to {}, which is not a directory",
            pointer.display(),
            path.display()
        )));
    }
    check(policy, &path, need).map_err(|e| {
        denied(format!(
            "{what} in {} points outside the grant (GIT-4): {e}",
            pointer.display()
        ))
    })?;
    Ok(path)
}

/// Every object directory named in `objects/info/alternates` must be readable too.
fn check_alternates(policy: &SecurityPolicy, common: &Path, need: Need) -> Result<(), ToolError> {
    let file = common.join("objects").join("info").join("alternates");
    if policy.resolve_no_symlinks(&file).map_err(denied)?.is_none() {
        return Ok(());
    }
    let text = read_pointer(policy, &file)?;
    let objects = common.join("objects");
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        metadata_dir(
            policy,
            &objects,
            line,
            need,
            &file,
            "alternate object directory",
        )?;
    }
    Ok(())
}

fn read_pointer(policy: &SecurityPolicy, path: &Path) -> Result<String, ToolError> {
    let resolved = policy.can_read(path).map_err(denied)?;
    let bytes = confined::read(&resolved, POINTER_LIMIT)
        .map_err(|e| ToolError::Failed(format!("cannot read {}: {e}", path.display())))?;
    String::from_utf8(bytes)
        .map_err(|_| ToolError::Failed(format!("{}: not UTF-8", path.display())))
}
