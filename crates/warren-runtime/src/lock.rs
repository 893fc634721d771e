//! The install root's daemon lock (LAYOUT-4, BEYOND-4): an exclusive OS lock (`flock`) on
//! `data/daemon.lock`, which also holds the owner's PID. The kernel drops it when the process
//! dies, so a crashed daemon never blocks the next one. `data/daemon.json` publishes the running
//! generation for `warren status`; only the lock decides whether a daemon runs ([`probe`]).
//! Here, below every client, so that `warren backup`, `doctor` and ACP can ask without knowing
//! the daemon crate.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read, Seek};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use warren_config::InstallRoot;
use warren_config::atomic;

/// Why the install-root lock could not be taken or read.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("another warren daemon (pid {}) owns {}", pid.map_or_else(|| "unknown".to_string(), |p| p.to_string()), root.display())]
    AlreadyRunning { pid: Option<u32>, root: PathBuf },
    #[error("cannot take the daemon lock {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

/// The held install-root lock. Dropping it (or the process dying) releases the root.
#[derive(Debug)]
pub struct DaemonLock {
    _file: File,
    path: PathBuf,
}

impl DaemonLock {
    /// Takes the exclusive lock on `data/daemon.lock` and records this process's PID in it.
    pub fn acquire(root: &InstallRoot) -> Result<Self, LockError> {
        let path = root.daemon_lock();
        let lock_err = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        fs::create_dir_all(root.data_dir()).map_err(lock_err)?;
        let mut file = atomic::open_lock_file(&path).map_err(lock_err)?;
        // A `warren status` probe holds a shared lock for microseconds; retry briefly past it.
        let mut attempts = 0;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) if attempts < 10 => {
                    attempts += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(TryLockError::WouldBlock) => {
                    return Err(LockError::AlreadyRunning {
                        pid: read_pid(&mut file),
                        root: root.root().to_path_buf(),
                    });
                }
                Err(TryLockError::Error(e)) => return Err(lock_err(e)),
            }
        }
        // No fsync: the PID only names the holder to other processes (they read the page
        // cache), and after a power loss the lock is gone with the process anyway. Written in
        // place, truncated only when the old text was longer: truncating to zero first costs
        // an ext4 journal transaction on the start path (issue 26).
        let pid = format!("{}\n", std::process::id());
        std::os::unix::fs::FileExt::write_all_at(&file, pid.as_bytes(), 0).map_err(lock_err)?;
        let len = u64::try_from(pid.len()).unwrap_or(u64::MAX);
        if file.metadata().map_err(lock_err)?.len() != len {
            file.set_len(len).map_err(lock_err)?;
        }
        Ok(Self { _file: file, path })
    }

    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

fn read_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.rewind().ok()?;
    file.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

/// What the running daemon publishes in `data/daemon.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonState {
    pub pid: u32,
    pub config_generation: u64,
    pub started_at_unix: u64,
    pub generation_since_unix: u64,
}

/// Whether a daemon owns the root, as seen from another process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum DaemonStatus {
    NotRunning,
    Running {
        pid: Option<u32>,
        state: Option<DaemonState>,
    },
}

/// Asks the lock (not the state file) whether a daemon runs on `root`.
pub fn probe(root: &InstallRoot) -> Result<DaemonStatus, LockError> {
    let path = root.daemon_lock();
    let mut file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(DaemonStatus::NotRunning),
        Err(source) => return Err(LockError::Io { path, source }),
    };
    match file.try_lock_shared() {
        Ok(()) => Ok(DaemonStatus::NotRunning),
        Err(TryLockError::WouldBlock) => {
            let state = fs::read(root.daemon_state())
                .ok()
                .and_then(|b| serde_json::from_slice::<DaemonState>(&b).ok());
            Ok(DaemonStatus::Running {
                pid: read_pid(&mut file),
                state,
            })
        }
        Err(TryLockError::Error(source)) => Err(LockError::Io { path, source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_lock_on_the_same_root_names_the_holder() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let root = InstallRoot::at(dir.path());
        let first = DaemonLock::acquire(&root)?;
        match DaemonLock::acquire(&root) {
            Err(LockError::AlreadyRunning { pid, .. }) => {
                assert_eq!(pid, Some(std::process::id()))
            }
            other => panic!("expected AlreadyRunning, got {other:?}"),
        }
        assert!(matches!(probe(&root)?, DaemonStatus::Running { .. }));
        drop(first);
        assert_eq!(probe(&root)?, DaemonStatus::NotRunning);
        let _again = DaemonLock::acquire(&root)?;
        Ok(())
    }
}
