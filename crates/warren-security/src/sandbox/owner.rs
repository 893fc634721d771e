//! Handing an agent's writable roots to the sandbox user when the daemon runs as root.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Gid, Mode, OFlags, Uid, chownat, fstat, open, openat, statat};

use super::SANDBOX_UID;

const DIR: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// Why a root could not be handed to the sandbox user.
#[derive(Debug, Clone, thiserror::Error)]
#[error("cannot hand {} to the sandbox user: {errno}", root.display())]
pub struct HandOverError {
    pub root: PathBuf,
    pub errno: rustix::io::Errno,
}

/// Changes `root` and every root-owned entry below it with one link to the sandbox user.
pub(super) fn hand_over(root: &Path) -> Result<(), HandOverError> {
    let err = |errno: rustix::io::Errno| HandOverError {
        root: root.to_path_buf(),
        errno,
    };
    let fd = open(root, DIR, Mode::empty()).map_err(err)?;
    give(&fd, OsStr::new("."), true).map_err(err)?;
    walk(&fd, 0).map_err(err)
}

/// An entry removed while the walk runs (a `git gc` pruning loose objects, an agent's own
/// process) has nothing left to hand over: `ENOENT` on an entry is not an error.
fn vanished_is_ok<T: Default>(r: rustix::io::Result<T>) -> rustix::io::Result<T> {
    match r {
        Err(rustix::io::Errno::NOENT) => Ok(T::default()),
        other => other,
    }
}

fn give(dir: &impl AsFd, name: &OsStr, is_dir: bool) -> rustix::io::Result<()> {
    let st = match statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e),
    };
    if st.st_uid != 0 || (!is_dir && st.st_nlink > 1) {
        return Ok(());
    }
    vanished_is_ok(chownat(
        dir,
        name,
        Some(Uid::from_raw(SANDBOX_UID)),
        Some(Gid::from_raw(SANDBOX_UID)),
        AtFlags::SYMLINK_NOFOLLOW,
    ))
}

fn walk(dir: &OwnedFd, depth: usize) -> rustix::io::Result<()> {
    if depth > 64 {
        return Ok(());
    }
    let mut entries = rustix::fs::Dir::read_from(dir)?;
    let mut subdirs = Vec::new();
    while let Some(entry) = entries.read() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let name = <OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name).to_os_string();
        let is_dir = entry.file_type() == FileType::Directory;
        give(dir, &name, is_dir)?;
        if is_dir {
            subdirs.push(name);
        }
    }
    for name in subdirs {
        let sub = match openat(dir, &name, DIR, Mode::empty()) {
            Ok(sub) => sub,
            Err(rustix::io::Errno::NOENT) => continue,
            Err(e) => return Err(e),
        };
        if FileType::from_raw_mode(fstat(&sub)?.st_mode) == FileType::Directory {
            walk(&sub, depth + 1)?;
        }
    }
    Ok(())
}
