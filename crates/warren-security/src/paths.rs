//! Every path decision of the permission model (PERM-3..6), in one place.
//!
//! A model-supplied path is decided in two steps:
//!
//! 1. **Lexically**, before the path is touched at all: it is made absolute against the
//!    workspace and normalised (`.` dropped, `..` popped), then compared with the allowed roots
//!    (each in its canonical and its configured form). A path outside every root the access
//!    allows is refused here with a message computed from the request and the config alone, so
//!    the refusal is the same whether the path exists, is a file, a directory or a symlink, and
//!    never names a link's target: no existence, type or symlink-target oracle on other agents'
//!    files.
//! 2. **Physically**, only for a path lexically inside an allowed root: it is walked component
//!    by component with `lstat`, following symlinks (including `/proc/self/root`,
//!    `/proc/self/cwd` and `/proc/self/fd/N`, which are symlinks too) with a hop budget, keeping
//!    a tail of components that do not exist yet. The walk never `lstat`s a path that is neither
//!    inside an allowed root nor an ancestor of one: a symlink or `..` leading anywhere else ends
//!    it with ONE fixed message ([`SecurityPolicy::escaped`]), whatever lies there. The canonical
//!    result is decided again:
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
//! Every refusal names the path as given and the grant that is missing. Nothing here opens a
//! file for I/O: [`crate::confined`] does that through handles on the root a decision returns
//! (and refuses to read any hard-linked file, PERM-6).

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

/// Why no allowed root holds a path (the reason of a [`Denied`]).
#[derive(Debug, thiserror::Error)]
enum Refusal {
    #[error("{device} is readable only")]
    DeviceReadOnly { device: &'static str },
    #[error(
        "agent '{agent}' has only a Write grant on '{sibling}'; reading it is not allowed \
         (change it to [agents.{agent}.workspace.access] {sibling} = \"ReadWrite\")"
    )]
    WriteGrantOnly { agent: String, sibling: String },
    #[error(
        "agent '{agent}' has only a Read grant on '{sibling}'; writing is not allowed \
         (change it to [agents.{agent}.workspace.access] {sibling} = \"ReadWrite\")"
    )]
    ReadGrantOnly { agent: String, sibling: String },
    #[error(
        "it is in agent '{sibling}''s workspace and agent '{agent}' has no {level} grant on '{sibling}' \
         (add [agents.{agent}.workspace.access] {sibling} = \"{level}\")"
    )]
    NoGrant {
        agent: String,
        sibling: String,
        level: &'static str,
    },
    #[error(
        "it is part of the Warren install root {} (config, secrets, data); no tool may {verb} it",
        install.display()
    )]
    InstallRoot {
        install: PathBuf,
        verb: &'static str,
    },
    #[error("{} is a forbidden path of agent '{agent}''s risk profile", path.display())]
    Forbidden { path: PathBuf, agent: String },
    #[error(
        "it is outside agent '{agent}''s workspace {} and its grants \
         (set [agents.{agent}.workspace] unrestricted_filesystem = true to allow it)",
        workspace.display()
    )]
    OutsideWorkspace { agent: String, workspace: PathBuf },
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
    /// Makes no permission decision and follows links anywhere: call it only on a path a
    /// decision ([`Self::can_read`], [`Self::can_write`]) already allowed.
    pub fn resolve(&self, raw: &Path) -> Result<PathBuf, Denied> {
        let absolute = self.absolute(raw)?;
        if let Some(fast) = resolve_fast(&absolute) {
            return Ok(fast);
        }
        resolve_components(&absolute, &|_| true).map_err(|walk| match walk {
            Walk::Failed(reason) => Denied::new(raw, reason),
            Walk::Left => Denied::new(raw, "cannot be resolved"),
        })
    }

    /// `raw` made absolute against the workspace, after refusing empty, NUL-bearing and
    /// over-long paths. Touches nothing.
    fn absolute(&self, raw: &Path) -> Result<PathBuf, Denied> {
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
        Ok(if raw.is_absolute() {
            raw.to_path_buf()
        } else {
            self.workspace().join(raw)
        })
    }

    /// Walks the absolute `raw` component by component with `lstat` WITHOUT following any
    /// symlink (GIT-4: repository metadata must be symlink-free, even when a link's target would
    /// be allowed). `..` pops the walked prefix, which is physical because no link was followed.
    /// Returns the canonical path and its file type, `Ok(None)` when some component does not
    /// exist, or a refusal naming the symlink. No permission decision is made here: decide
    /// first ([`Self::can_read`]), so that a path outside the roots is never walked.
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
        self.allow(raw, Access::Read)
    }

    /// May the agent write `raw` (create, replace, or remove it)?
    pub fn can_write(&self, raw: &Path) -> Result<Resolved, Denied> {
        let resolved = self.allow(raw, Access::Write)?;
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

    /// The two-step decision of the module docs.
    fn allow(&self, raw: &Path, access: Access) -> Result<Resolved, Denied> {
        let absolute = self.absolute(raw)?;
        // 1. Lexically: a path outside every allowed root is refused before it is touched.
        self.classify(&lexical(&absolute), access)
            .map_err(|reason| Denied::new(raw, reason))?;
        // 2. Physically, never stepping onto a path outside the roots and their ancestors.
        let path = match resolve_fast(&absolute) {
            Some(fast) => fast,
            None => {
                let visible =
                    |p: &Path| self.classify(p, access).is_ok() || self.is_root_ancestor(p);
                resolve_components(&absolute, &visible).map_err(|walk| match walk {
                    Walk::Failed(reason) => Denied::new(raw, reason),
                    Walk::Left => self.escaped(raw, access),
                })?
            }
        };
        let (root, tier) = self
            .classify(&path, access)
            .map_err(|_| self.escaped(raw, access))?;
        let root_handle = if tier == Tier::Device || tier == Tier::Unrestricted {
            None
        } else {
            self.inner.root_cache.handle(&root)
        };
        Ok(Resolved {
            path,
            root,
            tier,
            root_handle,
        })
    }

    /// The one refusal of a path that is lexically inside an allowed root but leads out of the
    /// allowed set through a symlink or `..`: the same words whatever is there, so it reveals
    /// neither a link's target nor whether anything exists where it points.
    fn escaped(&self, raw: &Path, access: Access) -> Denied {
        let alias = self.alias();
        let allowed = match (self.workspace_only(), access) {
            (true, Access::Read) => "its workspace and its Read and ReadWrite grants",
            (true, Access::Write) => "its workspace and its Write and ReadWrite grants",
            (false, _) => "anything outside the install root and its forbidden paths",
        };
        Denied::new(
            raw,
            format!(
                "a symbolic link or '..' on this path leads outside what agent '{alias}' may {} \
                 ({allowed}); Warren does not follow it there or say where it leads (PERM-6)",
                access.verb()
            ),
        )
    }

    /// Which root and tier allow `path` for `access`, or why none does. Compares `path` with
    /// the roots (each in its canonical and its configured form) and never touches `path`, so a
    /// refusal says nothing about what is on the disk there.
    fn classify(&self, path: &Path, access: Access) -> Result<(PathBuf, Tier), Refusal> {
        if let Some(device) = READABLE_DEVICES.iter().find(|d| path == Path::new(d)) {
            if access == Access::Read || *device == "/dev/null" {
                return Ok((PathBuf::from("/dev"), Tier::Device));
            }
            return Err(Refusal::DeviceReadOnly { device });
        }
        if let Some(root) = self.root_containing(self.workspace(), path) {
            return Ok((root, Tier::Workspace));
        }
        let under = |grants: &'_ [Grant]| -> Option<(Grant, PathBuf)> {
            grants
                .iter()
                .find_map(|g| self.root_containing(&g.root, path).map(|r| (g.clone(), r)))
        };
        let alias = self.alias();
        match access {
            Access::Read => {
                if let Some((g, _)) = under(self.write_only_roots()) {
                    return Err(Refusal::WriteGrantOnly {
                        agent: alias.to_string(),
                        sibling: g.alias.to_string(),
                    });
                }
                if let Some((_, r)) = under(self.read_write_roots()) {
                    return Ok((r, Tier::ReadWrite));
                }
                if let Some((_, r)) = under(self.read_only_roots()) {
                    return Ok((r, Tier::ReadOnly));
                }
            }
            Access::Write => {
                if let Some((_, r)) = under(self.read_write_roots()) {
                    return Ok((r, Tier::ReadWrite));
                }
                if let Some((_, r)) = under(self.write_only_roots()) {
                    return Ok((r, Tier::WriteOnly));
                }
                if let Some((g, _)) = under(self.read_only_roots()) {
                    return Err(Refusal::ReadGrantOnly {
                        agent: alias.to_string(),
                        sibling: g.alias.to_string(),
                    });
                }
            }
        }
        // A sibling's workspace without a grant: name the grant that would allow it.
        if let Some(sibling) = self.sibling_owning(path) {
            let level = if access == Access::Read {
                "Read"
            } else {
                "Write"
            };
            return Err(Refusal::NoGrant {
                agent: alias.to_string(),
                sibling: sibling.to_string(),
                level,
            });
        }
        // The install root holds config, secrets and every store: never reachable by tools.
        if let Some(install) = self.workspace().ancestors().nth(3)
            && let Some(install) = self.root_containing(install, path)
        {
            return Err(Refusal::InstallRoot {
                install,
                verb: access.verb(),
            });
        }
        if let Some(f) = self
            .forbidden_paths()
            .iter()
            .find(|f| self.root_containing(f, path).is_some())
        {
            return Err(Refusal::Forbidden {
                path: f.clone(),
                agent: alias.to_string(),
            });
        }
        if self.workspace_only() {
            return Err(Refusal::OutsideWorkspace {
                agent: alias.to_string(),
                workspace: self.workspace().to_path_buf(),
            });
        }
        Ok((PathBuf::from("/"), Tier::Unrestricted))
    }

    /// The form of `root` that contains `path`: its canonical form, or the configured form
    /// normalised lexically (a model may name a root through a symlinked prefix of it).
    fn root_containing(&self, root: &Path, path: &Path) -> Option<PathBuf> {
        let canonical = self.canonical_root(root);
        if path.starts_with(&canonical) {
            return Some(canonical);
        }
        let configured = lexical(root);
        (configured.is_absolute() && path.starts_with(&configured)).then_some(configured)
    }

    /// Whether `path` is an allowed root or lies on the way to one (`/`, `/home`, ...): the walk
    /// may `lstat` those, since what they are is already in the config.
    fn is_root_ancestor(&self, path: &Path) -> bool {
        let grants = self
            .read_write_roots()
            .iter()
            .chain(self.read_only_roots())
            .chain(self.write_only_roots())
            .map(|g| g.root.as_path());
        Path::new("/dev").starts_with(path)
            || std::iter::once(self.workspace())
                .chain(grants)
                .any(|r| self.canonical_root(r).starts_with(path) || lexical(r).starts_with(path))
    }

    /// The sibling whose workspace contains `path`, if any (for error messages).
    fn sibling_owning(&self, path: &Path) -> Option<String> {
        let agents = self.workspace().parent()?.parent()?;
        let rest = path
            .strip_prefix(self.canonical_root(agents))
            .or_else(|_| path.strip_prefix(lexical(agents)))
            .ok()?;
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
    pub(crate) fn canonical_root(&self, root: &Path) -> PathBuf {
        if let Some(hit) = self.inner.root_cache.get(root) {
            return hit;
        }
        let canonical = resolve_fast(root)
            .or_else(|| resolve_components(root, &|_| true).ok())
            .unwrap_or_else(|| root.to_path_buf());
        if canonical.is_dir() {
            self.inner.root_cache.put(root, &canonical);
        }
        canonical
    }
}

/// `path` normalised without touching the disk: `.` dropped, `..` pops (never above `/`).
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if out.parent().is_some() {
                    out.pop();
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
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

/// Why a walk stopped.
enum Walk {
    /// The walk reached a path it may not look at (see [`resolve_components`]).
    Left,
    /// A failure about a path the walk was allowed to look at.
    Failed(String),
}

/// Walks `absolute` component by component, following symlinks, tolerating a missing tail.
/// Every path is offered to `visible` before it is `lstat`ed; the walk stops with
/// [`Walk::Left`] at the first one refused, so nothing about it can show in the result.
fn resolve_components(absolute: &Path, visible: &dyn Fn(&Path) -> bool) -> Result<PathBuf, Walk> {
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
                return Err(Walk::Failed(
                    "'..' after a component that does not exist cannot be resolved".into(),
                ));
            }
            out.pop();
            continue;
        }
        let candidate = out.join(&part);
        if missing {
            out = candidate;
            continue;
        }
        if !visible(&candidate) {
            return Err(Walk::Left);
        }
        match std::fs::symlink_metadata(&candidate) {
            Ok(meta) if meta.file_type().is_symlink() => {
                hops += 1;
                if hops > MAX_SYMLINK_HOPS {
                    return Err(Walk::Failed(format!(
                        "too many symbolic links (more than {MAX_SYMLINK_HOPS})"
                    )));
                }
                let target = std::fs::read_link(&candidate).map_err(|e| {
                    Walk::Failed(format!("cannot read symlink {}: {e}", candidate.display()))
                })?;
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
                return Err(Walk::Failed(format!(
                    "{} is not a directory",
                    out.display()
                )));
            }
            Err(e) => {
                return Err(Walk::Failed(format!(
                    "cannot resolve {}: {e}",
                    candidate.display()
                )));
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_normalisation_never_touches_the_disk_and_stops_at_the_root() {
        for (raw, want) in [
            ("/a/b/../c/./d", "/a/c/d"),
            ("/a/../../../etc", "/etc"),
            ("/", "/"),
            ("/a/b/..", "/a"),
            ("/missing/file.txt/../x", "/missing/x"),
        ] {
            assert_eq!(lexical(Path::new(raw)), PathBuf::from(want), "{raw}");
        }
    }
}
