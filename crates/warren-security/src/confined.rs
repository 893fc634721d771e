//! File access confined to the root a path decision returned (PERM-6, STYLE "directory handles").
//!
//! Every open goes through `openat2(root_fd, relative, .., RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS)`. The path was resolved to a symlink-free canonical form before the
//! decision, so any symlink found at open time was swapped in after the check: the kernel refuses
//! it (`ELOOP`) instead of following it out of the root. Writes are atomic: a temp file in the
//! target directory, fsync, `renameat` over the target, fsync of the directory; parent directories
//! are created only after the check, one `mkdirat` at a time under the same handles.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};

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

/// Reads the whole file at an allowed path, refusing files over `limit` bytes.
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
    let mode = match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile => {
            Mode::from_raw_mode(st.st_mode) & Mode::from_raw_mode(0o7777)
        }
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
            return Err(ConfinedError::SymlinkSwapped {
                path: path.display().to_string(),
            });
        }
        Ok(_) => {
            return Err(ConfinedError::NotAFile {
                path: path.display().to_string(),
            });
        }
        Err(rustix::io::Errno::NOENT) => Mode::from_raw_mode(0o644),
        Err(e) => return Err(io_err(path)(e)),
    };
    let temp = temp_name(name);
    let fd = rustix::fs::openat(
        &dir,
        &temp,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        mode,
    )
    .map_err(io_err(path))?;
    let result = (|| {
        let mut file = File::from(fd);
        file.write_all(bytes).map_err(|source| ConfinedError::Io {
            path: path.display().to_string(),
            source,
        })?;
        file.sync_all().map_err(|source| ConfinedError::Io {
            path: path.display().to_string(),
            source,
        })?;
        rustix::fs::renameat(&dir, &temp, &dir, name).map_err(io_err(path))?;
        rustix::fs::fsync(&dir).map_err(io_err(path))
    })();
    if result.is_err() {
        let _ = rustix::fs::unlinkat(&dir, &temp, AtFlags::empty());
    }
    result
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
        let open = |dir: &OwnedFd| {
            rustix::fs::openat2(
                dir,
                name,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
                RESOLVE,
            )
        };
        dir = match open(&dir) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) if create => {
                match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o755)) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => return Err(io_err(full)(e)),
                }
                open(&dir).map_err(io_err(full))?
            }
            Err(e) => return Err(io_err(full)(e)),
        };
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

fn temp_name(name: &OsStr) -> std::ffi::OsString {
    let mut buf = [0u8; 8];
    let _ = rustix::rand::getrandom(&mut buf, rustix::rand::GetRandomFlags::empty());
    let mut temp = std::ffi::OsString::from(".");
    temp.push(name);
    temp.push(format!(".warren-tmp-{:016x}", u64::from_ne_bytes(buf)));
    temp
}
