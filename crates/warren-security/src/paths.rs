//! Every path decision of the permission model (PERM-3..6), in one place.
//!
//! A model-supplied path is first *resolved*: made absolute against the workspace, then walked
//! component by component with `lstat`, following symlinks (including `/proc/self/root`,
//! `/proc/self/cwd` and `/proc/self/fd/N`, which are symlinks too) with a hop budget, and keeping a
//! tail of components that do not exist yet. The canonical result is then decided:
//!
//! | resolved path under        | `can_read`            | `can_write`                        |
//! |----------------------------|-----------------------|------------------------------------|
//! | `/dev/{null,zero,random,urandom}` | yes (PERM-5)   | only `/dev/null`                   |
//! | own workspace              | yes                   | yes                                |
//! | `ReadWrite` grant          | yes                   | yes (not through a hard link)      |
//! | `Read` grant               | yes                   | no                                 |
//! | `Write` grant              | **no** (explicit deny)| yes (not through a hard link)      |
//! | the install root otherwise | no (config, secrets, data) | no                            |
//! | a forbidden path           | no                    | no                                 |
//! | anywhere else              | only if `unrestricted_filesystem` | same                   |
//!
//! Every refusal names the path and the grant that is missing. Nothing here opens a file for
//! I/O: [`crate::confined`] does that through handles on the root a decision returns.

use std::fmt;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use serde::Serialize;

use crate::policy::{Grant, SecurityPolicy};

/// The device files every agent may read (PERM-5).
pub const READABLE_DEVICES: [&str; 4] = ["/dev/null", "/dev/zero", "/dev/random", "/dev/urandom"];
/// Longest path accepted from a model.
pub const MAX_PATH_BYTES: usize = 4096;
const MAX_SYMLINK_HOPS: usize = 40;

/// Which allowance a decision used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    Workspace,
    ReadWrite,
    ReadOnly,
    WriteOnly,
    Device,
    Unrestricted,
}

/// An allowed, resolved path and the root it was allowed under (for handle-based access).
#[derive(Debug, Clone)]
pub struct Resolved {
    /// Canonical absolute path (components that do not exist yet are appended as given).
    pub path: PathBuf,
    /// The allowed root that contains `path`.
    pub root: PathBuf,
    pub tier: Tier,
    /// A directory handle on `root` kept by the policy (opened once per policy).
    pub(crate) root_handle: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
}

impl PartialEq for Resolved {
    fn eq(&self, other: &Self) -> bool {
        (&self.path, &self.root, self.tier) == (&other.path, &other.root, other.tier)
    }
}

impl Eq for Resolved {}

impl Resolved {
    /// `path` relative to `root` (empty when they are equal).
    pub fn relative(&self) -> &Path {
        self.path.strip_prefix(&self.root).unwrap_or(Path::new(""))
    }
}

/// A refused path, with the reason and the way out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct Denied {
    /// The path as given (lossy, truncated for display).
    pub path: String,
    pub reason: String,
}

impl Denied {
    fn new(raw: &Path, reason: impl fmt::Display) -> Self {
        let mut path = raw.to_string_lossy().into_owned();
        if path.len() > 200 {
            let cut = (0..=200)
                .rev()
                .find(|i| path.is_char_boundary(*i))
                .unwrap_or(0);
            path.truncate(cut);
            path.push('…');
        }
        Self {
            path,
            reason: reason.to_string(),
        }
    }
}

impl SecurityPolicy {
    /// Resolves `raw` to a canonical absolute path (see the module docs). Refuses NUL bytes,
    /// empty and over-long paths, symlink loops, and `..` below a component that does not exist.
    pub fn resolve(&self, raw: &Path) -> Result<PathBuf, Denied> {
        let bytes = raw.as_os_str().as_bytes();
        if bytes.is_empty() {
            return Err(Denied::new(raw, "empty path"));
        }
        if bytes.contains(&0) {
            return Err(Denied::new(raw, "path contains a NUL byte"));
        }
        if bytes.len() > MAX_PATH_BYTES {
            return Err(Denied::new(
                raw,
                format!("path is longer than {MAX_PATH_BYTES} bytes"),
            ));
        }
        let absolute = if raw.is_absolute() {
            raw.to_path_buf()
        } else {
            self.workspace().join(raw)
        };
        if let Some(fast) = resolve_fast(&absolute) {
            return Ok(fast);
        }
        resolve_components(&absolute).map_err(|reason| Denied::new(raw, reason))
    }

    /// Walks the absolute `raw` component by component with `lstat` WITHOUT following any
    /// symlink (GIT-4: repository metadata must be symlink-free, even when a link's target would
    /// be allowed). `..` pops the walked prefix, which is physical because no link was followed.
    /// Returns the canonical path and its file type, `Ok(None)` when some component does not
    /// exist, or a refusal naming the symlink. No permission decision is made here.
    pub fn resolve_no_symlinks(
        &self,
        raw: &Path,
    ) -> Result<Option<(PathBuf, std::fs::FileType)>, Denied> {
        let bytes = raw.as_os_str().as_bytes();
        if !raw.is_absolute() || bytes.contains(&0) || bytes.len() > MAX_PATH_BYTES {
            return Err(Denied::new(
                raw,
                "expected an absolute path without NUL bytes",
            ));
        }
        let mut out = PathBuf::from("/");
        let mut kind = std::fs::symlink_metadata("/")
            .map_err(|e| Denied::new(raw, format!("cannot stat /: {e}")))?
            .file_type();
        for c in raw.components() {
            match c {
                Component::RootDir | Component::Prefix(_) | Component::CurDir => continue,
                Component::ParentDir => {
                    out.pop();
                    continue;
                }
                Component::Normal(n) => out.push(n),
            }
            match std::fs::symlink_metadata(&out) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    return Err(Denied::new(
                        raw,
                        format!(
                            "{} is a symbolic link; symlinks in repository metadata are refused, not followed (GIT-4)",
                            out.display()
                        ),
                    ));
                }
                Ok(meta) => kind = meta.file_type(),
                Err(e)
                    if e.kind() == io::ErrorKind::NotFound
                        || e.raw_os_error() == Some(libc::ENOTDIR) =>
                {
                    return Ok(None);
                }
                Err(e) => {
                    return Err(Denied::new(
                        raw,
                        format!("cannot stat {}: {e}", out.display()),
                    ));
                }
            }
        }
        Ok(Some((out, kind)))
    }

    /// May the agent read `raw`? Returns the resolved path and its root, or why not.
    pub fn can_read(&self, raw: &Path) -> Result<Resolved, Denied> {
        let path = self.resolve(raw)?;
        self.decide(raw, path, Access::Read)
    }

    /// May the agent write `raw` (create, replace, or remove it)?
    pub fn can_write(&self, raw: &Path) -> Result<Resolved, Denied> {
        let path = self.resolve(raw)?;
        let resolved = self.decide(raw, path, Access::Write)?;
        if resolved.tier != Tier::Workspace
            && resolved.tier != Tier::Device
            && let Ok(meta) = std::fs::symlink_metadata(&resolved.path)
            && meta.is_file()
            && meta.nlink() > 1
        {
            return Err(Denied::new(
                raw,
                format!(
                    "{} has {} hard links; writing through a hard link outside the agent's own workspace is refused (PERM-6)",
                    resolved.path.display(),
                    meta.nlink()
                ),
            ));
        }
        Ok(resolved)
    }

    /// May the agent read AND write `raw` (`file_edit`, git writes)?
    pub fn can_read_write(&self, raw: &Path) -> Result<Resolved, Denied> {
        self.can_read(raw)?;
        self.can_write(raw)
    }

    fn decide(&self, raw: &Path, path: PathBuf, access: Access) -> Result<Resolved, Denied> {
        let ok = |root: PathBuf, tier| {
            let root_handle = if tier == Tier::Device || tier == Tier::Unrestricted {
                None
            } else {
                self.inner.root_cache.handle(&root)
            };
            Ok(Resolved {
                path: path.clone(),
                root,
                tier,
                root_handle,
            })
        };
        if let Some(device) = READABLE_DEVICES.iter().find(|d| path == Path::new(d)) {
            if access == Access::Read || *device == "/dev/null" {
                return ok(PathBuf::from("/dev"), Tier::Device);
            }
            return Err(Denied::new(raw, format!("{device} is readable only")));
        }
        let workspace = self.canonical_root(self.workspace());
        if path.starts_with(&workspace) {
            return ok(workspace, Tier::Workspace);
        }
        let under = |grants: &'_ [Grant]| -> Option<(Grant, PathBuf)> {
            grants
                .iter()
                .map(|g| (g.clone(), self.canonical_root(&g.root)))
                .find(|(_, r)| path.starts_with(r))
        };
        let alias = self.alias();
        match access {
            Access::Read => {
                if let Some((g, _)) = under(self.write_only_roots()) {
                    return Err(Denied::new(
                        raw,
                        format!(
                            "agent '{alias}' has only a Write grant on '{}'; reading it is not allowed \
                             (change it to [agents.{alias}.workspace.access] {} = \"ReadWrite\")",
                            g.alias, g.alias
                        ),
                    ));
                }
                if let Some((_, r)) = under(self.read_write_roots()) {
                    return ok(r, Tier::ReadWrite);
                }
                if let Some((_, r)) = under(self.read_only_roots()) {
                    return ok(r, Tier::ReadOnly);
                }
            }
            Access::Write => {
                if let Some((_, r)) = under(self.read_write_roots()) {
                    return ok(r, Tier::ReadWrite);
                }
                if let Some((_, r)) = under(self.write_only_roots()) {
                    return ok(r, Tier::WriteOnly);
                }
                if let Some((g, _)) = under(self.read_only_roots()) {
                    return Err(Denied::new(
                        raw,
                        format!(
                            "agent '{alias}' has only a Read grant on '{}'; writing is not allowed \
                             (change it to [agents.{alias}.workspace.access] {} = \"ReadWrite\")",
                            g.alias, g.alias
                        ),
                    ));
                }
            }
        }
        let verb = access.verb();
        // A sibling's workspace without a grant: name the grant that would allow it.
        if let Some(sibling) = self.sibling_owning(&path) {
            let level = if access == Access::Read {
                "Read"
            } else {
                "Write"
            };
            return Err(Denied::new(
                raw,
                format!(
                    "it is in agent '{sibling}''s workspace and agent '{alias}' has no {level} grant on '{sibling}' \
                     (add [agents.{alias}.workspace.access] {sibling} = \"{level}\")"
                ),
            ));
        }
        // The install root holds config, secrets and every store: never reachable by tools.
        if let Some(install) = self.install_root()
            && path.starts_with(&install)
        {
            return Err(Denied::new(
                raw,
                format!(
                    "it is part of the Warren install root {} (config, secrets, data); no tool may {verb} it",
                    install.display()
                ),
            ));
        }
        if let Some(f) = self.forbidden_paths().iter().find(|f| path.starts_with(f)) {
            return Err(Denied::new(
                raw,
                format!(
                    "{} is a forbidden path of agent '{alias}''s risk profile",
                    f.display()
                ),
            ));
        }
        if self.workspace_only() {
            return Err(Denied::new(
                raw,
                format!(
                    "{} is outside agent '{alias}''s workspace {} and its grants \
                     (set [agents.{alias}.workspace] unrestricted_filesystem = true to allow it)",
                    path.display(),
                    workspace.display()
                ),
            ));
        }
        ok(PathBuf::from("/"), Tier::Unrestricted)
    }

    /// `<install>` derived from the workspace `<install>/agents/<alias>/workspace`.
    pub(crate) fn install_root(&self) -> Option<PathBuf> {
        self.workspace()
            .parent()?
            .parent()?
            .parent()
            .map(|p| self.canonical_root(p))
    }

    /// The sibling whose workspace contains `path`, if any (for error messages).
    fn sibling_owning(&self, path: &Path) -> Option<String> {
        let agents = self.canonical_root(self.workspace().parent()?.parent()?);
        let rest = path.strip_prefix(&agents).ok()?;
        let mut parts = rest.components();
        let name = parts.next()?.as_os_str().to_string_lossy().into_owned();
        (parts.next()?.as_os_str() == "workspace").then_some(name)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Write,
}

impl Access {
    fn verb(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
        }
    }
}

impl SecurityPolicy {
    /// A root resolved the same way as the paths compared against it. Roots that exist are
    /// cached for the life of the policy (a reload builds a new policy).
    fn canonical_root(&self, root: &Path) -> PathBuf {
        if let Some(hit) = self.inner.root_cache.get(root) {
            return hit;
        }
        let canonical = resolve_fast(root)
            .or_else(|| resolve_components(root).ok())
            .unwrap_or_else(|| root.to_path_buf());
        if canonical.is_dir() {
            self.inner.root_cache.put(root, &canonical);
        }
        canonical
    }
}

/// One `openat2(O_PATH, RESOLVE_NO_SYMLINKS)`: when it succeeds and the path has no `.` or `..`
/// components, the path is already canonical (every component exists and none is a symlink).
fn resolve_fast(absolute: &Path) -> Option<PathBuf> {
    if absolute
        .components()
        .any(|c| matches!(c, Component::CurDir | Component::ParentDir))
    {
        return None;
    }
    rustix::fs::openat2(
        rustix::fs::CWD,
        absolute,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
        rustix::fs::ResolveFlags::NO_SYMLINKS | rustix::fs::ResolveFlags::NO_MAGICLINKS,
    )
    .ok()
    .map(|_| absolute.components().collect())
}

/// Walks `absolute` component by component, following symlinks, tolerating a missing tail.
fn resolve_components(absolute: &Path) -> Result<PathBuf, String> {
    let mut pending: Vec<std::ffi::OsString> = Vec::new();
    push_components(&mut pending, absolute);
    pending.reverse(); // a stack: next component at the end
    let mut out = PathBuf::from("/");
    let mut missing = false;
    let mut hops = 0;
    while let Some(part) = pending.pop() {
        if part == "/" {
            out = PathBuf::from("/");
            continue;
        }
        if part == "." {
            continue;
        }
        if part == ".." {
            if missing {
                return Err("'..' after a component that does not exist cannot be resolved".into());
            }
            out.pop();
            continue;
        }
        let candidate = out.join(&part);
        if missing {
            out = candidate;
            continue;
        }
        match std::fs::symlink_metadata(&candidate) {
            Ok(meta) if meta.file_type().is_symlink() => {
                hops += 1;
                if hops > MAX_SYMLINK_HOPS {
                    return Err(format!(
                        "too many symbolic links (more than {MAX_SYMLINK_HOPS})"
                    ));
                }
                let target = std::fs::read_link(&candidate)
                    .map_err(|e| format!("cannot read symlink {}: {e}", candidate.display()))?;
                let mut parts = Vec::new();
                push_components(&mut parts, &target);
                pending.extend(parts.into_iter().rev());
            }
            Ok(_) => out = candidate,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                missing = true;
                out = candidate;
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
                return Err(format!("{} is not a directory", out.display()));
            }
            Err(e) => return Err(format!("cannot resolve {}: {e}", candidate.display())),
        }
    }
    Ok(out)
}

fn push_components(out: &mut Vec<std::ffi::OsString>, path: &Path) {
    for c in path.components() {
        out.push(match c {
            Component::RootDir | Component::Prefix(_) => "/".into(),
            Component::CurDir => ".".into(),
            Component::ParentDir => "..".into(),
            Component::Normal(n) => n.to_os_string(),
        });
    }
}
