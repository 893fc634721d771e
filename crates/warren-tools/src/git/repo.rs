//! Repository discovery and metadata validation (GIT-2, GIT-3, GIT-4, PERM-3/4).
//!
//! Discovery starts at the requested directory and climbs only while it stays inside the grant
//! root that allowed the directory, so an allowed child never finds a repository in an
//! unapproved parent. Every metadata path git would follow is checked before git starts, under
//! every sandbox kind (`noop` included, where nothing else stands in the way): the `.git` entry,
//! the `gitdir:` target of a `.git` file, the `commondir` target, every level of
//! `objects/info/alternates` (an alternate object directory's own `info/alternates`, and so on),
//! and the `.git` of every submodule (gitlink) in the index, recursively. Each must be readable
//! (reads) or readable AND writable (writes) under the agent's policy, decided before the path
//! is looked at (no existence oracle outside the grant), and is then walked component by
//! component with `lstat` (no symlink anywhere, even one whose target is allowed). The
//! validated git and work-tree directories are then passed to git explicitly, so git never
//! rediscovers anything else.
//!
//! The gitlinks decoded from an index are reused while the index file is unchanged (same rule
//! as the config pre-pass cache, [`super::prepass`]); the Read check on it runs every time.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::SystemTime;

use warren_security::confined;
use warren_security::{Resolved, SecurityPolicy};

use super::{index, prepass};
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
    check(policy, work_tree, need)?;
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
    validate_at(policy, work_tree, dot_git, is_dir, need, &grant_root, 0)?
        .ok_or_else(|| missing("gitdir", dot_git, work_tree))
}

/// Validates one repository (`depth` 0) or submodule (`depth` > 0). `Ok(None)`: the `.git`
/// file of a submodule points to a directory that does not exist (inside the grant), which git
/// treats as "not checked out" and never opens.
fn validate_at(
    policy: &SecurityPolicy,
    work_tree: &Path,
    dot_git: &Path,
    is_dir: bool,
    need: Need,
    grant_root: &Path,
    depth: usize,
) -> Result<Option<Repo>, ToolError> {
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
        match metadata_dir(
            policy,
            work_tree,
            Path::new(target),
            need,
            dot_git,
            "gitdir",
        )? {
            Some(dir) => dir,
            None if depth == 0 => {
                return Err(missing("gitdir", dot_git, &work_tree.join(target)));
            }
            None => return Ok(None),
        }
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
            metadata_dir(
                policy,
                &git_dir,
                Path::new(target),
                need,
                &commondir_file,
                "commondir",
            )?
            .ok_or_else(|| missing("commondir", &commondir_file, &git_dir.join(target)))?
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
    let repo = Repo {
        work_tree: work_tree.to_path_buf(),
        git_dir,
        common_dir,
        grant_root: grant_root.to_path_buf(),
    };
    check_submodules(policy, &repo, need, depth)?;
    Ok(Some(repo))
}

/// Resolves a metadata pointer `target` (relative to `base`) and checks `need` on it. The
/// permission is decided first, so a pointer outside the grant is refused with the same words
/// whether or not anything exists there; then the path must be free of symlinks (GIT-4) and a
/// directory. `Ok(None)`: allowed, but nothing exists there.
fn metadata_dir(
    policy: &SecurityPolicy,
    base: &Path,
    target: &Path,
    need: Need,
    pointer: &Path,
    what: &str,
) -> Result<Option<PathBuf>, ToolError> {
    let joined = base.join(target);
    check(policy, &joined, need).map_err(|e| {
        let reason = match e {
            ToolError::Denied(m) => m,
            other => other.to_string(),
        };
        denied(format!(
            "{what} in {} points outside the grant (GIT-4): {reason}",
            pointer.display()
        ))
    })?;
    let Some((path, kind)) = policy
        .resolve_no_symlinks(&joined)
        .map_err(|e| denied(format!("{what} in {}: {e}", pointer.display())))?
    else {
        return Ok(None);
    };
    if !kind.is_dir() {
        return Err(denied(format!(
            "{what} in {} points to {}, which is not a directory",
            pointer.display(),
            path.display()
        )));
    }
    Ok(Some(path))
}

fn missing(what: &str, pointer: &Path, target: &Path) -> ToolError {
    ToolError::Failed(format!(
        "{what} in {} points to {}, which does not exist",
        pointer.display(),
        target.display()
    ))
}

/// git reads `objects/info/alternates` and then, in turn, `info/alternates` of every object
/// directory listed there (up to 5 levels deep): every level is checked, so a chain whose
/// second file points into a sibling's repository is refused like a direct one (GIT-4).
fn check_alternates(policy: &SecurityPolicy, common: &Path, need: Need) -> Result<(), ToolError> {
    let mut seen: Vec<PathBuf> = Vec::new();
    let mut level = vec![common.join("objects")];
    for _ in 0..=MAX_ALTERNATE_DEPTH {
        let mut next = Vec::new();
        for objects in level {
            let file = objects.join("info").join("alternates");
            if policy.resolve_no_symlinks(&file).map_err(denied)?.is_none() {
                continue;
            }
            let bytes = read_pointer_bytes(policy, &file)?;
            for entry in alternates(&bytes) {
                let target = Path::new(OsStr::from_bytes(&entry));
                let dir = metadata_dir(
                    policy,
                    &objects,
                    target,
                    need,
                    &file,
                    "alternate object directory",
                )?
                .ok_or_else(|| {
                    missing("alternate object directory", &file, &objects.join(target))
                })?;
                if !seen.contains(&dir) {
                    seen.push(dir.clone());
                    next.push(dir);
                }
            }
        }
        if next.is_empty() {
            return Ok(());
        }
        level = next;
    }
    Err(denied(format!(
        "the alternates of {} nest more than {MAX_ALTERNATE_DEPTH} levels deep; refusing to check further (GIT-4)",
        common.display()
    )))
}

/// How deep an alternates chain is followed (git itself stops after 5 levels).
const MAX_ALTERNATE_DEPTH: usize = 8;
/// How deep submodules are followed (git looks into nested ones when it runs in a submodule).
const MAX_SUBMODULE_DEPTH: usize = 8;
/// Largest index file read to find gitlinks.
const INDEX_LIMIT: u64 = 512 * 1024 * 1024;

/// The entries of an alternates file, split the way git's `parse_alt_odb_entry` does: one per
/// line, `#` starts a comment line, a line starting with `"` is C-unquoted (and may span
/// lines), nothing is trimmed, and the file ends at its first NUL.
fn alternates(bytes: &[u8]) -> Vec<Vec<u8>> {
    let text = bytes.split(|b| *b == 0).next().unwrap_or_default();
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let line_end = rest.iter().position(|b| *b == b'\n').unwrap_or(rest.len());
        let (entry, end) = if rest[0] == b'#' {
            (Vec::new(), line_end)
        } else if rest[0] == b'"'
            && let Some((unquoted, end)) = unquote_c_style(rest)
        {
            (unquoted, end)
        } else {
            (rest[..line_end].to_vec(), line_end)
        };
        // git skips exactly one byte after an entry (the separator, or whatever is there).
        rest = rest.get(end + 1..).unwrap_or_default();
        if !entry.is_empty() {
            out.push(entry);
        }
    }
    out
}

/// git's `unquote_c_style` on a string starting with `"`: the unquoted bytes and the offset
/// just past the closing quote, or `None` for broken quoting.
fn unquote_c_style(quoted: &[u8]) -> Option<(Vec<u8>, usize)> {
    let mut out = Vec::new();
    let mut i = 1;
    loop {
        match *quoted.get(i)? {
            b'"' => return Some((out, i + 1)),
            b'\\' => {}
            c => {
                out.push(c);
                i += 1;
                continue;
            }
        }
        i += 1;
        let c = *quoted.get(i)?;
        i += 1;
        let byte = match c {
            b'a' => 0x07,
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'v' => 0x0b,
            b'\\' | b'"' => c,
            b'0'..=b'3' => {
                let d1 = *quoted.get(i)?;
                let d2 = *quoted.get(i + 1)?;
                if !(b'0'..=b'7').contains(&d1) || !(b'0'..=b'7').contains(&d2) {
                    return None;
                }
                i += 2;
                ((c - b'0') << 6) | ((d1 - b'0') << 3) | (d2 - b'0')
            }
            _ => return None,
        };
        out.push(byte);
    }
}

/// git opens `<path>/.git` of every gitlink in the index (a submodule's `.git` file, or an
/// embedded repository), whatever `--ignore-submodules` says: each one found is validated like
/// the repository itself (its `gitdir`, `commondir`, alternates and, in turn, its own
/// submodules), under the same access `need` (GIT-4). A gitlink whose `.git` does not exist is
/// not checked out, and git does not look further.
fn check_submodules(
    policy: &SecurityPolicy,
    repo: &Repo,
    need: Need,
    depth: usize,
) -> Result<(), ToolError> {
    let index = repo.git_dir.join("index");
    if policy
        .resolve_no_symlinks(&index)
        .map_err(denied)?
        .is_none()
    {
        return Ok(());
    }
    let links = read_index(policy, &index)?;
    let mut paths = links.paths;
    for shared in links.shared {
        let file = repo.git_dir.join(&shared);
        if policy.resolve_no_symlinks(&file).map_err(denied)?.is_some() {
            paths.extend(read_index(policy, &file)?.paths);
        }
    }
    if !paths.is_empty() && depth >= MAX_SUBMODULE_DEPTH {
        return Err(denied(format!(
            "{}: submodules nest more than {MAX_SUBMODULE_DEPTH} levels deep; refusing to check further (GIT-4)",
            repo.work_tree.display()
        )));
    }
    for path in paths {
        let name = String::from_utf8_lossy(&path).into_owned();
        let in_context = |e: ToolError| match e {
            ToolError::Denied(m) => ToolError::Denied(format!("submodule '{name}': {m}")),
            ToolError::Failed(m) => ToolError::Failed(format!("submodule '{name}': {m}")),
            other => other,
        };
        let dot_git = repo.work_tree.join(OsStr::from_bytes(&path)).join(".git");
        check(policy, &dot_git, need).map_err(in_context)?;
        let Some((dot_git, kind)) = policy
            .resolve_no_symlinks(&dot_git)
            .map_err(denied)
            .map_err(in_context)?
        else {
            continue;
        };
        let top = dot_git.parent().unwrap_or(&repo.work_tree).to_path_buf();
        validate_at(
            policy,
            &top,
            &dot_git,
            kind.is_dir(),
            need,
            &repo.grant_root,
            depth + 1,
        )
        .map_err(in_context)?;
    }
    Ok(())
}

/// The gitlinks of the index at `path`. The permission is checked on every call; the decoding
/// (≈ 1 ms for a 10,000-file index) is reused while the file keeps the state it had when it was
/// read (device, inode, size, mtime, ctime), under the same rule as the config pre-pass
/// ([`super::prepass`]): cached only when its ctime lies more than `SETTLED` before the read
/// and the file did not change during it. The decoding depends on the bytes alone, so the cache
/// is shared by every agent; each still needs Read on the index first.
fn read_index(policy: &SecurityPolicy, path: &Path) -> Result<index::Gitlinks, ToolError> {
    let resolved = policy.can_read(path).map_err(denied)?;
    let started = SystemTime::now();
    let before = prepass::file_state(&resolved.path).ok().flatten();
    if let Some(state) = before
        && let Some(links) = index_cache()
            .get(path)
            .filter(|(cached, _)| *cached == state)
            .map(|(_, links)| links.clone())
    {
        return Ok(links);
    }
    let bytes = confined::read(&resolved, INDEX_LIMIT)
        .map_err(|e| ToolError::Failed(format!("cannot read {}: {e}", path.display())))?;
    let links = index::gitlinks(&bytes).map_err(|e| {
        ToolError::Failed(format!(
            "{}: {e}; its submodules cannot be checked, so git is not run (GIT-4)",
            path.display()
        ))
    })?;
    if let Some(state) = before
        && state.settled_before(started)
        && matches!(prepass::file_state(&resolved.path), Ok(Some(after)) if after == state)
    {
        let mut cache = index_cache();
        if cache.len() >= MAX_CACHED_INDEXES {
            cache.clear();
        }
        cache.insert(path.to_path_buf(), (state, links.clone()));
    }
    Ok(links)
}

/// Most index decodings remembered; the cache is emptied when full.
const MAX_CACHED_INDEXES: usize = 256;

type IndexCache = HashMap<PathBuf, (prepass::FileState, index::Gitlinks)>;

fn index_cache() -> MutexGuard<'static, IndexCache> {
    static CACHE: OnceLock<Mutex<IndexCache>> = OnceLock::new();
    // A poisoned map holds only complete entries (inserted whole): keep using it.
    CACHE
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn read_pointer_bytes(policy: &SecurityPolicy, path: &Path) -> Result<Vec<u8>, ToolError> {
    let resolved = policy.can_read(path).map_err(denied)?;
    confined::read(&resolved, POINTER_LIMIT)
        .map_err(|e| ToolError::Failed(format!("cannot read {}: {e}", path.display())))
}

fn read_pointer(policy: &SecurityPolicy, path: &Path) -> Result<String, ToolError> {
    String::from_utf8(read_pointer_bytes(policy, path)?)
        .map_err(|_| ToolError::Failed(format!("{}: not UTF-8", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alternates_are_split_like_git() {
        let file = b"/a/objects\n# comment\n\n../b\n\"/c\\\"q\\n\\101\"\nrel with space \n\"broken\nlast\0/after-nul";
        assert_eq!(
            alternates(file),
            vec![
                b"/a/objects".to_vec(),
                b"../b".to_vec(),
                b"/c\"q\nA".to_vec(),
                b"rel with space ".to_vec(),
                b"\"broken".to_vec(),
                b"last".to_vec(),
            ]
        );
        // A quoted entry may span lines; one byte after the closing quote is skipped.
        assert_eq!(
            alternates(b"\"x\ny\"zrel\n"),
            vec![b"x\ny".to_vec(), b"rel".to_vec()]
        );
    }
}
