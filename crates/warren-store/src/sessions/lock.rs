//! The sessions-directory lock and the JSONL fence (SESS-2, MIG-4).
//!
//! JSONL mutations and the migration hold [`DirLock`]: a process-local mutex plus an exclusive
//! OS lock (`flock`) on `data/sessions/.sessions.lock`, so writers in *other* processes are
//! serialised too. The fence is durable: once a receipt is committed, the marker file
//! `data/sessions/.jsonl-migrated` exists and every JSONL mutation (in any process) checks it
//! under the lock. The reference implementation kept this state per process only, so a second
//! process could keep writing JSONL after a migration elsewhere.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};

use warren_config::InstallRoot;
use warren_config::atomic::sync_dir;

use super::SessionError;
use crate::sqlite_util;

/// The lock on one sessions directory. Cheap to hold; every mutation takes it.
#[derive(Debug)]
pub struct DirLock {
    path: PathBuf,
    file: Mutex<File>,
}

/// Held lock; released on drop.
pub struct DirGuard<'a> {
    file: MutexGuard<'a, File>,
}

impl Drop for DirGuard<'_> {
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}

impl DirLock {
    /// Creates the sessions directory (0700) if needed and opens its lock file.
    pub fn open(root: &InstallRoot) -> Result<Self, SessionError> {
        let dir = root.sessions_dir();
        ensure_dir(&dir)?;
        let path = root.sessions_lock();
        let file = warren_config::atomic::open_lock_file(&path)
            .map_err(SessionError::io(&path, "open the sessions lock"))?;
        Ok(Self {
            path,
            file: Mutex::new(file),
        })
    }

    /// Waits for the lock (other threads, then other processes).
    pub fn hold(&self) -> Result<DirGuard<'_>, SessionError> {
        let file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        file.lock()
            .map_err(SessionError::io(&self.path, "lock the sessions directory"))?;
        Ok(DirGuard { file })
    }
}

pub(crate) fn ensure_dir(dir: &Path) -> Result<(), SessionError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(SessionError::io(dir, "create the sessions directory"))
}

fn fenced_dirs() -> &'static Mutex<HashSet<PathBuf>> {
    static FENCED: OnceLock<Mutex<HashSet<PathBuf>>> = OnceLock::new();
    FENCED.get_or_init(|| Mutex::new(HashSet::new()))
}

/// Whether JSONL mutation is off for this install (MIG-4). Call under [`DirLock`].
pub(crate) fn is_fenced(root: &InstallRoot) -> bool {
    root.sessions_jsonl_fence().exists()
        || fenced_dirs()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&root.sessions_dir())
}

/// Turns JSONL mutation off for good: in this process at once, and durably through the marker
/// file. The in-process fence holds even if writing the marker fails (the next construction
/// restores the marker from the receipts).
pub(crate) fn set_fence(root: &InstallRoot) -> Result<(), SessionError> {
    fenced_dirs()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(root.sessions_dir());
    let marker = root.sessions_jsonl_fence();
    if marker.exists() {
        return Ok(());
    }
    let write = || -> std::io::Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&marker)?;
        f.write_all(
            b"JSONL sessions in this directory were imported into sessions.db; JSONL writes are off.\n",
        )?;
        f.sync_all()?;
        sync_dir(&root.sessions_dir())
    };
    write().map_err(SessionError::io(&marker, "write the JSONL fence marker"))
}

/// MIG-4: restores the fence from persisted receipts. `sessions.db` is opened read-only and
/// only if it exists; an unreadable receipt table fails closed.
pub(crate) fn restore_fence_from_receipts(root: &InstallRoot) -> Result<bool, SessionError> {
    if root.sessions_jsonl_fence().exists() {
        return Ok(true);
    }
    let db = root.sessions_db();
    if !db.exists() {
        return Ok(false);
    }
    let uncertain = |cause| SessionError::FenceUncertain {
        dir: root.sessions_dir(),
        db: db.clone(),
        cause,
    };
    let conn = sqlite_util::open_read_only(&db).map_err(uncertain)?;
    let has_table: bool = conn
        .query_row(
            "SELECT EXISTS(SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'jsonl_import_receipts')",
            [],
            |r| r.get(0),
        )
        .map_err(uncertain)?;
    if !has_table {
        return Ok(false);
    }
    let any: bool = conn
        .query_row(
            "SELECT EXISTS(SELECT 1 FROM jsonl_import_receipts)",
            [],
            |r| r.get(0),
        )
        .map_err(uncertain)?;
    if any {
        set_fence(root)?;
    }
    Ok(any)
}
