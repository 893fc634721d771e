//! The config write lock (SPEC CFG-3): one in-process mutex in front of `data/config.lock`.
//!
//! `flock` belongs to an open file description, not to a thread: two threads locking through
//! one shared descriptor do not exclude each other, and either one's unlock releases the lock
//! for both. So every acquisition opens its own descriptor, and the guard releases the file lock
//! (by closing that descriptor) before it lets the next in-process writer in.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::MetadataExt;

use crate::atomic;
use crate::error::ConfigError;
use crate::paths::InstallRoot;

/// A held config write lock. Fields drop in order: the file lock first, then the in-process
/// mutex, so the next in-process writer never finds the file lock still held by this guard.
pub(crate) struct WriteLock<'a> {
    _file: Option<FileLock>,
    _mutex: tokio::sync::MutexGuard<'a, ()>,
}

impl<'a> WriteLock<'a> {
    pub(crate) fn new(mutex: tokio::sync::MutexGuard<'a, ()>, file: Option<FileLock>) -> Self {
        Self {
            _file: file,
            _mutex: mutex,
        }
    }
}

/// `data/config.lock`, locked through a descriptor of its own; closing it releases the lock.
pub(crate) struct FileLock(File);

impl Drop for FileLock {
    fn drop(&mut self) {
        // Closing the descriptor releases the lock too; unlocking first makes it explicit.
        let _ = self.0.unlock();
    }
}

impl FileLock {
    /// Takes the cross-process config write lock, blocking until other writers finish. If the
    /// lock file was replaced while we waited (someone deleted it), the lock is retaken on the
    /// file now at the path.
    pub(crate) fn acquire(root: &InstallRoot) -> Result<Self, ConfigError> {
        let path = root.config_lock();
        let lock_err = |cause: io::Error| ConfigError::Lock {
            path: path.clone(),
            cause,
        };
        loop {
            fs::create_dir_all(root.data_dir()).map_err(lock_err)?;
            let file = atomic::open_lock_file(&path).map_err(lock_err)?;
            file.lock().map_err(lock_err)?;
            let held = file.metadata().map_err(lock_err)?;
            match fs::symlink_metadata(&path) {
                Ok(now) if now.dev() == held.dev() && now.ino() == held.ino() => {
                    return Ok(Self(file));
                }
                // Dropping `file` closes it, which releases the lock on the replaced inode.
                _ => continue,
            }
        }
    }
}
