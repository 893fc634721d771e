//! Restore's writer: every entry of a backup is created beneath the staging directory and
//! nowhere else (issue 35 §2).
//!
//! A manifest is not authenticated (see docs/operations.md, "what a backup's integrity
//! covers"), so restore treats its paths as hostile even after [`super::manifest::tree_problem`]
//! passed them. Each path is reached from a handle on the staging directory one component at a
//! time with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`: a link at
//! any component — restored earlier from the same manifest, or planted during the restore — is
//! refused by the kernel (`ELOOP`), never followed. Files are created `O_EXCL | O_NOFOLLOW`
//! beneath the handle of their directory; links with `symlinkat`; modes are applied with
//! `fchmod` on the opened file or directory (never `chmod` on a path), masked by
//! [`restored_mode`]. The backup's stored files are opened the same way below its `files/`
//! ([`Beneath::open_stored`]): a link planted there is not followed into another file.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use warren_config::confined::RESOLVE;

use super::BackupError;

/// The permission bits restore gives a file or directory whose manifest mode is `mode`: its
/// rwx bits without setuid, setgid, sticky and write-by-others (an install root holds nothing
/// that other users should replace, and a backup may come from an agent-written workspace).
pub fn restored_mode(mode: u32) -> u32 {
    mode & 0o775
}

/// Directories created on the way to an entry the manifest lists later (or not at all).
const IMPLICIT_DIR: u32 = 0o700;

/// A handle on the staging directory of a restore; everything is created beneath it.
pub struct Beneath {
    top: OwnedFd,
    path: PathBuf,
}

impl Beneath {
    /// Opens the (existing, freshly made) staging directory at `path`.
    pub fn open(path: &Path) -> Result<Self, BackupError> {
        let top = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| BackupError::io(path, e.into()))?;
        Ok(Self {
            top,
            path: path.to_path_buf(),
        })
    }

    /// The error for `rel` from the kernel's answer: a link on the path is
    /// [`BackupError::Beneath`], anything else an I/O error (a full disk is named as such).
    fn fail(&self, rel: &str, e: Errno) -> BackupError {
        let path = self.path.join(rel);
        match e {
            Errno::LOOP | Errno::XDEV | Errno::NOTDIR => BackupError::Beneath { path },
            other => BackupError::io(path, other.into()),
        }
    }

    /// The directory `rel` (`/`-separated plain names), opened beneath the top; with `create`,
    /// missing components are made ([`IMPLICIT_DIR`]).
    fn dir(&self, rel: &str, create: bool) -> Result<OwnedFd, BackupError> {
        let mut fd: Option<OwnedFd> = None;
        for name in rel.split('/').filter(|n| !n.is_empty()) {
            let parent = fd.as_ref().map_or(self.top.as_fd(), AsFd::as_fd);
            let open = || {
                rustix::fs::openat2(
                    parent,
                    name,
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                    RESOLVE,
                )
            };
            let next = match open() {
                Err(Errno::NOENT) if create => {
                    match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(IMPLICIT_DIR)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(self.fail(rel, e)),
                    }
                    open()
                }
                other => other,
            }
            .map_err(|e| self.fail(rel, e))?;
            fd = Some(next);
        }
        match fd {
            Some(fd) => Ok(fd),
            None => rustix::fs::openat(
                &self.top,
                ".",
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| self.fail(rel, e)),
        }
    }

    /// The directory of `rel` (made if missing) and `rel`'s last name.
    fn parent<'r>(&self, rel: &'r str) -> Result<(OwnedFd, &'r str), BackupError> {
        let (dir, name) = rel.rsplit_once('/').unwrap_or(("", rel));
        Ok((self.dir(dir, true)?, name))
    }

    /// Makes the directory `rel` (private until [`Self::set_dir_mode`]).
    pub fn make_dir(&self, rel: &str) -> Result<(), BackupError> {
        self.dir(rel, true).map(drop)
    }

    /// Applies `restored_mode(mode)` to the directory `rel` through its handle.
    pub fn set_dir_mode(&self, rel: &str, mode: u32) -> Result<(), BackupError> {
        let fd = self.dir(rel, false)?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(restored_mode(mode)))
            .map_err(|e| self.fail(rel, e))
    }

    /// Creates the symbolic link `rel` pointing at `target` (which is never followed here).
    pub fn symlink(&self, rel: &str, target: &str) -> Result<(), BackupError> {
        let (dir, name) = self.parent(rel)?;
        rustix::fs::symlinkat(target, &dir, name).map_err(|e| self.fail(rel, e))
    }

    /// Creates the new file `rel` (0600 until [`set_file_mode`]); an existing entry of any
    /// kind at `rel` is refused.
    pub fn create_file(&self, rel: &str) -> Result<File, BackupError> {
        let (dir, name) = self.parent(rel)?;
        rustix::fs::openat2(
            &dir,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
            RESOLVE,
        )
        .map(File::from)
        .map_err(|e| match e {
            Errno::EXIST => BackupError::Verify {
                path: self.path.join(rel),
                cause: "already exists: the manifest lists it twice".to_string(),
            },
            other => self.fail(rel, other),
        })
    }
}

impl Beneath {
    /// Opens the regular file `rel` below this handle for reading (a backup's stored file):
    /// a link at any component, or anything but a regular file, is refused.
    pub fn open_stored(&self, rel: &str) -> Result<File, BackupError> {
        let fd = rustix::fs::openat2(
            &self.top,
            rel,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::empty(),
            RESOLVE,
        )
        .map_err(|e| self.fail(rel, e))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| self.fail(rel, e))?;
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
            return Err(BackupError::Verify {
                path: self.path.join(rel),
                cause: "is not a regular file".to_string(),
            });
        }
        Ok(File::from(fd))
    }
}

/// Applies `restored_mode(mode)` to an opened file.
pub fn set_file_mode(file: &File, path: &Path, mode: u32) -> Result<(), BackupError> {
    rustix::fs::fchmod(file, Mode::from_raw_mode(restored_mode(mode)))
        .map_err(|e| BackupError::io(path, e.into()))
}
