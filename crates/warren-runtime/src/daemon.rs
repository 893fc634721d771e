//! The daemon: one per install root (LAYOUT-4, BEYOND-4), an outer loop that re-reads config and
//! rebuilds every subsystem in the same process on reload (STATE-19), clean exit on SIGTERM/SIGINT.
//!
//! The lock is an exclusive OS lock (`flock`) on `data/daemon.lock`, which also holds the owner's
//! PID. The kernel drops it when the process dies, so a crashed daemon never blocks the next one.
//! `data/daemon.json` publishes the running generation for `warren status`; only the lock decides
//! whether a daemon runs.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::Notify;
use warren_config::atomic::{self, CrashPoints};
use warren_config::{
    ConfigError, ConfigStore, InitOutcome, InstallRoot, LegacyMigration, PathError,
};

/// Why the daemon could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("another warren daemon (pid {}) owns {}", pid.map_or_else(|| "unknown".to_string(), |p| p.to_string()), root.display())]
    AlreadyRunning { pid: Option<u32>, root: PathBuf },
    #[error("cannot take the daemon lock {path}: {source}")]
    Lock { path: PathBuf, source: io::Error },
    #[error("cannot install signal handlers: {0}")]
    Signals(io::Error),
    #[error("cannot start the async runtime: {0}")]
    Runtime(io::Error),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Path(#[from] PathError),
}

/// The held install-root lock. Dropping it (or the process dying) releases the root.
#[derive(Debug)]
pub struct DaemonLock {
    _file: File,
    path: PathBuf,
}

impl DaemonLock {
    /// Takes the exclusive lock on `data/daemon.lock` and records this process's PID in it.
    pub fn acquire(root: &InstallRoot) -> Result<Self, DaemonError> {
        let path = root.daemon_lock();
        let lock_err = |source| DaemonError::Lock {
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
                    return Err(DaemonError::AlreadyRunning {
                        pid: read_pid(&mut file),
                        root: root.root().to_path_buf(),
                    });
                }
                Err(TryLockError::Error(e)) => return Err(lock_err(e)),
            }
        }
        file.set_len(0).map_err(lock_err)?;
        file.rewind().map_err(lock_err)?;
        writeln!(file, "{}", std::process::id()).map_err(lock_err)?;
        file.sync_all().map_err(lock_err)?;
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
pub fn probe(root: &InstallRoot) -> Result<DaemonStatus, DaemonError> {
    let path = root.daemon_lock();
    let mut file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(DaemonStatus::NotRunning),
        Err(source) => return Err(DaemonError::Lock { path, source }),
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
        Err(TryLockError::Error(source)) => Err(DaemonError::Lock { path, source }),
    }
}

/// Asks a running daemon loop to reload (the in-process side of `POST /admin/reload`).
#[derive(Debug, Clone, Default)]
pub struct ReloadTrigger(Arc<Notify>);

impl ReloadTrigger {
    pub fn reload(&self) {
        self.0.notify_one();
    }
}

enum Exit {
    Reload,
    Shutdown(&'static str),
}

/// Builds a tokio runtime and runs the daemon until SIGTERM/SIGINT.
pub fn run_blocking(root: InstallRoot) -> Result<(), DaemonError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("warren-daemon")
        .build()
        .map_err(DaemonError::Runtime)?;
    runtime.block_on(run(root, ReloadTrigger::default()))
}

/// The daemon: lock, prepare the root, load config, then the outer reload loop.
pub async fn run(root: InstallRoot, reload: ReloadTrigger) -> Result<(), DaemonError> {
    let lock = DaemonLock::acquire(&root)?;
    root.ensure_layout()?;
    if warren_config::init(&root)? == InitOutcome::Created {
        tracing::info!(path = %root.config_file().display(), "no config found: wrote the starter config");
    }
    // MEM-9: an agent's memory backend is locked once it has written; every generation the
    // daemon publishes (start and reload) is checked against the stores themselves.
    let store = ConfigStore::load(root.clone())?
        .with_check(std::sync::Arc::new(warren_memory::BackendLock));
    store.check_current()?;
    match root.migrate_legacy_workspace(store.snapshot().default_agent().as_ref())? {
        LegacyMigration::Moved { from, to } => {
            tracing::info!(from = %from.display(), to = %to.display(), "migrated the legacy workspace into the default agent's workspace");
        }
        LegacyMigration::Skipped { reason } => {
            tracing::warn!("legacy workspace not migrated: {reason}")
        }
        LegacyMigration::NothingToDo => {}
    }
    let mut hup = signal(SignalKind::hangup()).map_err(DaemonError::Signals)?;
    let mut term = signal(SignalKind::terminate()).map_err(DaemonError::Signals)?;
    let mut int = signal(SignalKind::interrupt()).map_err(DaemonError::Signals)?;
    let started = unix_now();

    loop {
        let snapshot = store.snapshot();
        publish_state(
            &root,
            &DaemonState {
                pid: std::process::id(),
                config_generation: snapshot.generation(),
                started_at_unix: started,
                generation_since_unix: unix_now(),
            },
        );
        // Subsystems of this generation are built from `snapshot` here (later issues: gateway,
        // agents, sessions, memory, cost, scheduler) and torn down when the loop turns.
        let _sessions = crate::sessions::open(&root, &snapshot.channels).await;
        tracing::info!(
            pid = std::process::id(),
            root = %root.root().display(),
            generation = snapshot.generation(),
            agents = snapshot.agents.len(),
            lock = %lock.path().display(),
            "warren daemon ready"
        );
        let exit = tokio::select! {
            _ = hup.recv() => Exit::Reload,
            () = reload.0.notified() => Exit::Reload,
            _ = term.recv() => Exit::Shutdown("SIGTERM"),
            _ = int.recv() => Exit::Shutdown("SIGINT"),
        };
        match exit {
            Exit::Reload => match store.reload().await {
                Ok(generation) => tracing::info!(generation, "config reloaded"),
                Err(e) => tracing::error!(
                    generation = snapshot.generation(),
                    "reload refused, keeping the running generation: {e}"
                ),
            },
            Exit::Shutdown(why) => {
                tracing::info!("{why} received: shutting down");
                break;
            }
        }
    }
    let _ = fs::remove_file(root.daemon_state());
    drop(lock);
    tracing::info!("warren daemon stopped");
    Ok(())
}

const STATE_POINTS: CrashPoints = CrashPoints {
    after_temp_write: "daemon-state-after-temp-write",
    after_temp_fsync: "daemon-state-after-temp-fsync",
    after_rename: "daemon-state-after-rename",
    after_dir_sync: "daemon-state-after-dir-sync",
    dir_sync_error: "daemon-state-dir-sync-error",
};

fn publish_state(root: &InstallRoot, state: &DaemonState) {
    let result = serde_json::to_vec_pretty(state)
        .map_err(io::Error::other)
        .and_then(|bytes| {
            atomic::write_durable(&root.daemon_state(), &bytes, 0o600, STATE_POINTS)
                .map_err(io::Error::other)
        });
    if let Err(e) = result {
        tracing::warn!(
            "cannot publish daemon state to {}: {e}",
            root.daemon_state().display()
        );
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
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
            Err(DaemonError::AlreadyRunning { pid, .. }) => {
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
