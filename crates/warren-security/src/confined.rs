//! File access confined to the root a path decision returned (PERM-6; docs/architecture.md,
//! "directory handles").
//!
//! Every open goes through `openat2(root_fd, relative, .., RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS)`. The path was resolved to a symlink-free canonical form before the
//! decision, so any symlink found at open time was swapped in after the check: the kernel refuses
//! it (`ELOOP`) instead of following it out of the root. Writes are atomic: a temp file in the
//! target directory, fsync, `renameat` over the target, fsync of the directory; parent directories
//! are created only after the check, one `mkdirat` at a time under the same handles. Both steps
//! are `warren_config::confined`'s, shared with the daemon's own handles ([`crate::confined_dir`]).

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path};

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};

use crate::paths::{Resolved, Tier};

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// Why a confined operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ConfinedError {
    #[error(
        "{path}: a symbolic link appeared on the path after the permission check; refusing to follow it"
    )]
    SymlinkSwapped { path: String },
    #[error("{path}: file is larger than the {limit}-byte limit")]
    TooLarge { path: String, limit: u64 },
    #[error("{path}: not a regular file")]
    NotAFile { path: String },
    #[error("{path}: no such file")]
    NotFound { path: String },
    #[error(
        "{path}: has {links} hard links; Warren refuses to read hard-linked files anywhere, even in \
         the agent's own workspace, because another name of the same file may lie outside the \
         agent's readable roots (PERM-6)"
    )]
    HardLinked { path: String, links: u64 },
    #[error("{path}: {source}")]
    Io { path: String, source: io::Error },
}

fn io_err(path: &Path) -> impl Fn(rustix::io::Errno) -> ConfinedError + '_ {
    move |e| {
        let path = path.display().to_string();
        match e {
            rustix::io::Errno::LOOP | rustix::io::Errno::XDEV => {
                ConfinedError::SymlinkSwapped { path }
            }
            rustix::io::Errno::NOENT => ConfinedError::NotFound { path },
            // Opening a socket fails with ENXIO.
            rustix::io::Errno::NXIO => ConfinedError::NotAFile { path },
            other => ConfinedError::Io {
                path,
                source: other.into(),
            },
        }
    }
}

/// A handle on the allowed root: the policy's cached one, or one opened for this call.
enum RootFd {
    Shared(std::sync::Arc<OwnedFd>),
    Owned(OwnedFd),
}

impl AsFd for RootFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Self::Shared(fd) => fd.as_fd(),
            Self::Owned(fd) => fd.as_fd(),
        }
    }
}

impl RootFd {
    fn into_owned(self, resolved: &Resolved) -> Result<OwnedFd, ConfinedError> {
        match self {
            Self::Owned(fd) => Ok(fd),
            Self::Shared(fd) => fd.try_clone().map_err(|source| ConfinedError::Io {
                path: resolved.root.display().to_string(),
                source,
            }),
        }
    }
}

/// The allowed root: the policy's cached handle, or opened now (no symlink may lead to it).
fn open_root(resolved: &Resolved) -> Result<RootFd, ConfinedError> {
    if let Some(handle) = &resolved.root_handle {
        return Ok(RootFd::Shared(std::sync::Arc::clone(handle)));
    }
    rustix::fs::openat2(
        rustix::fs::CWD,
        &resolved.root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map(RootFd::Owned)
    .map_err(io_err(&resolved.root))
}

/// Reads the whole file at an allowed path, refusing files over `limit` bytes and regular files
/// with more than one hard link, wherever they are (PERM-6; the count is `fstat` of the opened
/// descriptor, i.e. of the very inode that is read, not of a path looked up beside it).
pub fn read(resolved: &Resolved, limit: u64) -> Result<Vec<u8>, ConfinedError> {
    let root = open_root(resolved)?;
    let rel = relative_or_dot(resolved);
    let fd = rustix::fs::openat2(
        &root,
        rel,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
        Mode::empty(),
        RESOLVE,
    )
    .map_err(io_err(&resolved.path))?;
    let stat = rustix::fs::fstat(&fd).map_err(io_err(&resolved.path))?;
    let kind = FileType::from_raw_mode(stat.st_mode);
    let device = resolved.tier == Tier::Device && kind == FileType::CharacterDevice;
    if kind != FileType::RegularFile && !device {
        return Err(ConfinedError::NotAFile {
            path: resolved.path.display().to_string(),
        });
    }
    // PERM-6: the link count of the opened file, not of a path stat'ed beside it.
    #[allow(clippy::useless_conversion)] // `nlink_t` is u64 on x86_64, u32 on other targets
    let links = u64::from(stat.st_nlink);
    if kind == FileType::RegularFile && links > 1 {
        return Err(ConfinedError::HardLinked {
            path: resolved.path.display().to_string(),
            links,
        });
    }
    let size = u64::try_from(stat.st_size).unwrap_or(0);
    if size > limit {
        return Err(ConfinedError::TooLarge {
            path: resolved.path.display().to_string(),
            limit,
        });
    }
    let mut bytes = Vec::new();
    let file = File::from(fd);
    let read = if device {
        // Devices report no size: the cap bounds the read.
        file.take(limit.saturating_add(1)).read_to_end(&mut bytes)
    } else {
        // A regular file of known size: one read of the whole file (std sizes the buffer from
        // fstat); a file that grew past the limit meanwhile is refused below.
        (&file).read_to_end(&mut bytes)
    };
    read.map_err(|source| ConfinedError::Io {
        path: resolved.path.display().to_string(),
        source,
    })?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > limit {
        if device {
            bytes.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        } else {
            return Err(ConfinedError::TooLarge {
                path: resolved.path.display().to_string(),
                limit,
            });
        }
    }
    Ok(bytes)
}

/// The size of the regular file at an allowed path (`None` when absent), from `fstat` of a
/// handle opened beneath the root without following links (issue 35 §8: how much a write
/// grows the workspace).
pub fn len(resolved: &Resolved) -> Result<Option<u64>, ConfinedError> {
    if resolved.tier == Tier::Device {
        return Ok(Some(0));
    }
    let root = open_root(resolved)?;
    let fd = match rustix::fs::openat2(
        &root,
        relative_or_dot(resolved),
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        RESOLVE,
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e) => return Err(io_err(&resolved.path)(e)),
    };
    let stat = rustix::fs::fstat(&fd).map_err(io_err(&resolved.path))?;
    Ok(Some(u64::try_from(stat.st_size).unwrap_or(0)))
}

/// Atomically replaces (or creates) the file at an allowed path with `bytes`. Missing parent
/// directories are created when `create_parents`. An existing file keeps its permission bits.
pub fn write_atomic(
    resolved: &Resolved,
    bytes: &[u8],
    create_parents: bool,
) -> Result<(), ConfinedError> {
    let path = &resolved.path;
    if resolved.tier == Tier::Device {
        // Only /dev/null is writable: accept and discard.
        return Ok(());
    }
    let root = open_root(resolved)?;
    let rel = resolved.relative();
    let (Some(name), parent) = (rel.file_name(), rel.parent().unwrap_or(Path::new(""))) else {
        return Err(ConfinedError::NotAFile {
            path: path.display().to_string(),
        });
    };
    let dir = open_dir_chain(root.into_owned(resolved)?, parent, create_parents, path)?;
    // The one atomic write (warren_config::confined): a link at the target is ELOOP, another
    // kind of file ENXIO, mapped like every other errno here.
    warren_config::confined::write_replacing(&dir, name, bytes).map_err(io_err(path))
}

/// Opens `parent` under `root` one component at a time (creating missing ones if asked).
fn open_dir_chain(
    root: OwnedFd,
    parent: &Path,
    create: bool,
    full: &Path,
) -> Result<OwnedFd, ConfinedError> {
    let mut dir = root;
    for comp in parent.components() {
        let Component::Normal(name) = comp else {
            return Err(ConfinedError::NotAFile {
                path: full.display().to_string(),
            });
        };
        dir = warren_config::confined::open_subdir(&dir, name, create).map_err(io_err(full))?;
    }
    Ok(dir)
}

fn relative_or_dot(resolved: &Resolved) -> &Path {
    let rel = resolved.relative();
    if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    }
}
