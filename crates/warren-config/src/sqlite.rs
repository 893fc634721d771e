//! The one SQLite open routine and the one connection-access pattern of every store (issue 14
//! §7; STATE-6/7/16, MEM-2).
//!
//! [`open_wal`] creates the file with mode 0600 (it holds conversations, memories or device
//! names) and re-applies 0600 to an existing one, sets a busy timeout, switches to WAL and
//! verifies SQLite really is in WAL mode (a file system without shared memory, or a sidecar
//! that cannot be created, leaves it in another mode: refused with an error naming the file),
//! then sets `synchronous` from the store's durability ([`Sync`]) and turns foreign keys on.
//! [`open_read_only`] opens an existing file for reading and never creates it.
//!
//! [`SharedConn`] is the access pattern: one connection behind a mutex, reached from async code
//! only through [`SharedConn::run`] on tokio's blocking pool, never from an async worker.
//!
//! It lives here, below `warren-store` and `warren-memory` (both layer 2), so every store can
//! reach it; `warren_store::sqlite_util` re-exports it.

use std::fs::OpenOptions;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

pub use rusqlite;
use rusqlite::Connection;

mod migration;

use migration::read_only_reason;

pub use migration::{
    MIGRATION_FAIL, MIGRATION_LOCK_SUFFIX, MIGRATION_WAIT, MigrateFailure, SNAPSHOT_DIR,
    SNAPSHOTS_KEPT, STORE_SCHEMA_VERSION, explain, failed_migration, migrate, migrate_guarded,
    open_migrated, read_only_stores, schema_version, snapshot_into, snapshots_of,
};

/// How long a statement waits for another connection's lock before `SQLITE_BUSY`.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// File mode of every database file (and, as SQLite copies it, of its `-wal`/`-shm`).
pub const DB_MODE: u32 = 0o600;

/// `PRAGMA synchronous` levels, chosen by a store's durability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sync {
    /// fsync at every commit (acknowledged = durable).
    Full,
    /// WAL `NORMAL`: commits are atomic; the last ones may roll back after a power loss.
    Normal,
}

impl Sync {
    pub fn pragma(self) -> &'static str {
        match self {
            Sync::Full => "PRAGMA synchronous = FULL",
            Sync::Normal => "PRAGMA synchronous = NORMAL",
        }
    }
}

/// An error of this module: SQLite's code and a message. It does not name the file: every
/// store wraps these errors in its own error, which does (`session database <path>: open: ...`).
fn failure(code: i32, what: String) -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), Some(what))
}

/// Opens (creating, mode 0600) `path` in verified WAL mode with `sync`, a busy timeout and
/// foreign keys on. Errors do not name the file; callers wrap them in an error that does.
pub fn open_wal(path: &Path, sync: Sync) -> rusqlite::Result<Connection> {
    // Create the file private before SQLite sees it, so it is never readable by others even
    // for a moment; an existing file is brought back to 0600 below. An existing file is not
    // opened here: closing a descriptor on a database this process already has open drops
    // every POSIX lock SQLite holds on it for the other connections (fcntl locks belong to the
    // process and inode), and another process could then take it for unused, checkpoint and
    // delete the WAL under them, losing their next commits.
    let created = match path.symlink_metadata() {
        Ok(_) => Ok(()),
        Err(_) => OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(DB_MODE)
            .open(path)
            .map(drop),
    };
    if let Err(e) = created {
        let no_space = e.kind() == std::io::ErrorKind::StorageFull;
        return Err(failure(
            if no_space {
                rusqlite::ffi::SQLITE_FULL
            } else {
                rusqlite::ffi::SQLITE_CANTOPEN
            },
            format!("cannot create the database file: {e}"),
        ));
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(DB_MODE)).map_err(|e| {
        failure(
            rusqlite::ffi::SQLITE_PERM,
            format!("cannot set mode 0600: {e}"),
        )
    })?;
    let conn = Connection::open(path)?;
    configure(conn, sync)
}

/// The settings of [`open_wal`] on an open connection.
fn configure(conn: Connection, sync: Sync) -> rusqlite::Result<Connection> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .map_err(|e| {
            failure(
                code_of(&e),
                format!("cannot switch to WAL journal mode ({e}); Warren keeps its stores in WAL mode, so check the file and its directory (a leftover -wal/-shm, a read-only or network file system)"),
            )
        })?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(failure(
            rusqlite::ffi::SQLITE_CANTOPEN,
            format!(
                "journal_mode is {mode}, expected wal (the file system may not support WAL's shared memory; keep data/ on a local disk)"
            ),
        ));
    }
    conn.execute_batch(sync.pragma())?;
    conn.execute_batch("PRAGMA foreign_keys = ON; PRAGMA temp_store = MEMORY;")?;
    Ok(conn)
}

fn code_of(e: &rusqlite::Error) -> i32 {
    match e {
        rusqlite::Error::SqliteFailure(f, _) => f.extended_code,
        _ => rusqlite::ffi::SQLITE_ERROR,
    }
}

/// Opens an existing database read-only (never creates it), with the busy timeout.
///
/// On a full disk a WAL database cannot be read the ordinary way: SQLite must size its `-shm`
/// file first (`disk I/O error`). When that happens and the `-wal` holds nothing (every commit
/// is in the main file), the file is opened `immutable` instead — no `-shm`, no locks — so
/// read-only commands keep working on a full disk (issue 15 §8). With a non-empty `-wal` the
/// error stands: reading the main file alone would miss commits.
pub fn open_read_only(path: &Path) -> rusqlite::Result<Connection> {
    let flags =
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // SQLite opens the `-wal`/`-shm` at the first read.
    let probe = conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| {
        r.get::<_, i64>(0)
    });
    match probe {
        Err(e) if full_disk_at(&e, path).is_some() && wal_is_empty(path) => {
            drop(conn);
            let conn = Connection::open_with_flags(
                immutable_uri(path),
                flags | rusqlite::OpenFlags::SQLITE_OPEN_URI,
            )?;
            tracing::warn!(
                "{}: disk full; read without its -shm (the -wal is empty, so nothing is missed)",
                path.display()
            );
            Ok(conn)
        }
        Err(e) => Err(e),
        Ok(_) => Ok(conn),
    }
}

/// Opens an existing database to copy it (the backup's source): reads like [`open_read_only`]
/// (`query_only`, so nothing is written through it), but opened read-write so that, as the last
/// connection, it closes the `-wal` and `-shm` files it had to create. A read-only connection
/// cannot remove them and would leave the install changed by a backup.
pub fn open_for_snapshot(path: &Path) -> rusqlite::Result<Connection> {
    let flags =
        rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "query_only", true)?;
    Ok(conn)
}

/// Whether `path`'s `-wal` is absent or empty.
fn wal_is_empty(path: &Path) -> bool {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(PathBuf::from(wal)).map_or(true, |m| m.len() == 0)
}

/// `file:<percent-encoded path>?immutable=1`.
fn immutable_uri(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut uri = String::from("file:");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            uri.push(char::from(b));
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri.push_str("?immutable=1");
    uri
}

/// Free space below which a file system counts as full (SQLite's `-shm` alone needs 32 KiB).
const FULL_BELOW: u64 = 64 * 1024;

/// Whether the file system holding `path` (or its nearest existing ancestor) is full.
pub fn disk_full(path: &Path) -> bool {
    let mut at = Some(path);
    while let Some(p) = at {
        if let Ok(st) = rustix::fs::statvfs(p) {
            return st.f_bavail.saturating_mul(st.f_frsize) < FULL_BELOW;
        }
        at = p.parent();
    }
    false
}

/// The directory of `db` when `e` is what a full disk gives: `SQLITE_FULL`, or an I/O error
/// (the `-shm` or `-wal` could not grow: `disk I/O error`) on a file system with no space
/// left. Stores report it as "disk full at <dir>" rather than SQLite's text.
pub fn full_disk_at(e: &rusqlite::Error, db: &Path) -> Option<PathBuf> {
    let primary = code_of(e) & 0xff;
    let dir = db.parent().unwrap_or(db);
    let full = primary == rusqlite::ffi::SQLITE_FULL
        || (primary == rusqlite::ffi::SQLITE_IOERR && disk_full(dir));
    full.then(|| dir.to_path_buf())
}

/// The cause of a store's SQLite error `e` on `db`, as a store's error message carries it:
/// "disk full at <dir> (free some space there and retry)" when a full disk caused it
/// ([`full_disk_at`]), SQLite's own text otherwise (issue 15 §8).
pub fn cause_text(e: &rusqlite::Error, db: &Path) -> String {
    match full_disk_at(e, db) {
        Some(dir) => format!(
            "disk full at {} (free some space there and retry)",
            dir.display()
        ),
        None => match read_only_reason(e, db) {
            Some(reason) => reason,
            None => e.to_string(),
        },
    }
}

/// Why [`SharedConn::open_store`] or [`SharedConn::open_existing`] could not open a store's
/// file: the file (or its directory) and the cause. A store whose own error already names the
/// file takes [`OpenError::cause`] alone.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot create the directory {}: {cause}", dir.display())]
    Dir { dir: PathBuf, cause: std::io::Error },
    /// SQLite's failure, as [`cause_text`] words it (a full disk is named as one).
    #[error("{}: {cause}", path.display())]
    Sqlite { path: PathBuf, cause: String },
}

impl OpenError {
    /// The cause without the file's name.
    pub fn cause(&self) -> String {
        match self {
            OpenError::Dir { dir, cause } => {
                format!("cannot create the directory {}: {cause}", dir.display())
            }
            OpenError::Sqlite { cause, .. } => cause.clone(),
        }
    }

    fn sqlite(e: &rusqlite::Error, path: &Path) -> Self {
        OpenError::Sqlite {
            path: path.to_path_buf(),
            cause: cause_text(e, path),
        }
    }
}

/// One store connection behind a mutex: the single access pattern of Warren's SQLite stores.
/// Synchronous callers [`lock`](Self::lock) it; async callers go through [`run`](Self::run),
/// which runs the closure on tokio's blocking pool. A poisoned lock is taken over (a panic in
/// one closure rolls back its open transaction when the statement is dropped).
#[derive(Debug, Clone)]
pub struct SharedConn {
    path: PathBuf,
    conn: Arc<Mutex<Connection>>,
    /// Why the store is read-only, when [`open_migrated`] fell back to the old schema.
    read_only: Option<Arc<str>>,
}

impl SharedConn {
    pub fn new(path: &Path, conn: Connection) -> Self {
        Self {
            path: path.to_path_buf(),
            conn: Arc::new(Mutex::new(conn)),
            read_only: None,
        }
    }

    /// Why this store is read-only at its old schema (a migration that failed and was rolled
    /// back; [`open_migrated`]), `None` when it is writable as opened.
    pub fn read_only(&self) -> Option<&str> {
        self.read_only.as_deref()
    }

    /// A store's database for writing: creates its directory, opens it with [`open_wal`] and
    /// applies `schema` (idempotent `CREATE ... IF NOT EXISTS`).
    pub fn open_store(path: &Path, sync: Sync, schema: &str) -> Result<Self, OpenError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|cause| OpenError::Dir {
                dir: dir.to_path_buf(),
                cause,
            })?;
        }
        // Version 1 of the file ([`migrate`]: a file without one is snapshotted first); a
        // failed migration leaves it read-only at its old schema ([`open_migrated`]).
        let shared = open_migrated(path, sync, STORE_SCHEMA_VERSION, |c| {
            c.execute_batch(schema)
        })
        .map_err(|e| OpenError::sqlite(&e, path))?;
        if shared.read_only().is_none() {
            shared
                .lock()
                .execute_batch(schema)
                .map_err(|e| OpenError::sqlite(&e, path))?;
        }
        Ok(shared)
    }

    /// An existing store's database read-only; `None` when there is no file yet (read paths
    /// never create one).
    pub fn open_existing(path: &Path) -> Result<Option<Self>, OpenError> {
        if !path.exists() {
            return Ok(None);
        }
        let conn = open_read_only(path).map_err(|e| OpenError::sqlite(&e, path))?;
        Ok(Some(Self::new(path, conn)))
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The connection, for synchronous callers (not from an async worker).
    pub fn lock(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The connection if no one holds it now (a caller that has another way to do its work).
    pub fn try_lock(&self) -> Option<MutexGuard<'_, Connection>> {
        match self.conn.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Runs `f` on the connection on the blocking pool. `joined` maps a blocking task that
    /// panicked or was cancelled into the caller's error type.
    pub async fn run<T, E>(
        &self,
        f: impl FnOnce(&mut Connection, &Path) -> Result<T, E> + Send + 'static,
        joined: impl FnOnce(&Path, String) -> E,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: Send + 'static,
    {
        let this = self.clone();
        match tokio::task::spawn_blocking(move || f(&mut this.lock(), &this.path)).await {
            Ok(r) => r,
            Err(e) => Err(joined(&self.path, e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_private_wal_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.db");
        let conn = open_wal(&path, Sync::Normal).unwrap();
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let sync: i64 = conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .unwrap();
        assert_eq!(sync, 1, "NORMAL");
        let perm = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(perm, 0o600);
    }

    #[test]
    fn existing_file_is_made_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.db");
        std::fs::write(&path, b"").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let conn = open_wal(&path, Sync::Full).unwrap();
        let sync: i64 = conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .unwrap();
        assert_eq!(sync, 2, "FULL");
        let perm = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(perm, 0o600);
    }

    /// SQLite's `unix-none` VFS has no shared memory, as on some network file systems: the
    /// pragma answers the old mode instead of failing. The same pragma without the check would
    /// leave the store silently in rollback mode.
    #[test]
    fn refuses_a_journal_mode_that_stays_rollback() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("n.db");
        let uri = format!("file:{}?vfs=unix-none", file.display());
        let raw = Connection::open(&uri).unwrap();
        let probe = Connection::open(&uri).unwrap();
        let mode: String = probe
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "delete", "the VFS really refuses WAL");
        drop(probe);
        let err = configure(raw, Sync::Normal).unwrap_err().to_string();
        assert!(
            err.contains("journal_mode is delete, expected wal"),
            "{err}"
        );
    }
}
