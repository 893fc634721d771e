//! Snapshots and guarded migrations of the stores' SQLite files (issue 22; BEYOND-2,
//! BEYOND-11): the pre-migration copy through SQLite's backup API, the one migration routine
//! under each file's migration lock, the roll-back from the snapshot when a migration fails
//! (leaving the store read-only at its old schema), and what `warren doctor` reads back.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::Connection;

use super::{BUSY_TIMEOUT, DB_MODE, SharedConn, Sync, code_of, failure, open_read_only, open_wal};

/// Error injection: the migration step fails after it has run (and committed), before the
/// check; the guard must put the snapshot back (`FAILPOINTS=sqlite-migration-fail=return`).
pub const MIGRATION_FAIL: &str = "sqlite-migration-fail";

/// Schema version of the stores opened by [`SharedConn::open_store`] (and `devices.db`).
pub const STORE_SCHEMA_VERSION: i64 = 1;

/// Pre-migration snapshots kept per database file (older ones are removed).
pub const SNAPSHOTS_KEPT: usize = 3;

/// Name of the directory, beside each database, holding its pre-migration snapshots.
pub const SNAPSHOT_DIR: &str = ".pre-migration";

/// Copies the database open on `src` into the new file `dest` (created 0600; it must not
/// exist) through SQLite's online backup API, in one step: the copy is the database as of
/// one read transaction, taken while writers go on (WAL), never the bytes of a file under a
/// writer. The copy is left in rollback-journal mode, a single self-contained file.
pub fn snapshot_into(src: &Connection, dest: &Path) -> rusqlite::Result<()> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(DB_MODE)
        .open(dest)
        .map_err(|e| {
            failure(
                rusqlite::ffi::SQLITE_CANTOPEN,
                format!("cannot create {}: {e}", dest.display()),
            )
        })?;
    let mut out = Connection::open(dest)?;
    copy_all(src, &mut out)?;
    let _: String = out.query_row("PRAGMA journal_mode = DELETE", [], |r| r.get(0))?;
    Ok(())
}

/// Every page of `src` into `dst` (the backup API, all pages per step; retried while busy).
fn copy_all(src: &Connection, dst: &mut Connection) -> rusqlite::Result<()> {
    use rusqlite::backup::{Backup, StepResult};
    let backup = Backup::new(src, dst)?;
    let mut waited = Duration::ZERO;
    loop {
        match backup.step(-1)? {
            StepResult::Done => return Ok(()),
            StepResult::More => {}
            StepResult::Busy | StepResult::Locked if waited < BUSY_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(20));
                waited += Duration::from_millis(20);
            }
            _ => {
                return Err(failure(
                    rusqlite::ffi::SQLITE_BUSY,
                    "the database stayed locked during the copy".to_string(),
                ));
            }
        }
    }
}

/// The schema version a store keeps in `PRAGMA user_version`.
pub fn schema_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
}

/// The pre-migration snapshots of the database `path`, oldest first.
pub fn snapshots_of(path: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Vec::new();
    };
    let prefix = format!("{}.v", name.to_string_lossy());
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir.join(SNAPSHOT_DIR))
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    // Names end in `.<unix ms>.db`: order by that number.
    found.sort_by_key(|p| {
        p.file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.rsplit('.').next())
            .and_then(|n| n.parse::<u128>().ok())
            .unwrap_or(0)
    });
    found
}

/// Brings the store at `path` (open on `conn`, in WAL mode) to schema `version` with `apply`,
/// the one migration routine of every store (sessions, ACP, memory, cron, SOP, control plane,
/// devices). A file at `version` is left alone; a newer one is refused (this build does not
/// know its schema). An older file is migrated under the file's migration lock
/// ([`MIGRATION_LOCK_SUFFIX`]), so one process at a time does it and the others, once it is
/// done, find the new version and leave the file alone; under it, a file with tables is first
/// copied to `<dir>/.pre-migration/<file>.v<old>.<unix ms>.db` ([`snapshot_into`]; the newest
/// [`SNAPSHOTS_KEPT`] are kept); then `apply` runs, `PRAGMA quick_check` must answer `ok`,
/// and only then is the version set. If any of that fails, the snapshot is copied back over the
/// file (through SQLite, under its locks) and the error says so: the file keeps its old schema
/// and the store can be opened read-only ([`open_migrated`] does). Errors do not name the
/// file; callers wrap them.
pub fn migrate(
    conn: &mut Connection,
    path: &Path,
    version: i64,
    apply: impl FnOnce(&mut Connection) -> rusqlite::Result<()>,
) -> rusqlite::Result<()> {
    match migrate_guarded(conn, path, version, apply) {
        Ok(()) => Ok(()),
        Err(MigrateFailure::Failed(e)) => Err(e),
        Err(MigrateFailure::Busy(what)) => Err(failure(rusqlite::ffi::SQLITE_BUSY, what)),
        Err(MigrateFailure::RolledBack(what)) => {
            let message =
                format!("{what} (read-only commands still work; `warren doctor` shows the state)");
            tracing::error!("{}: {message}", path.display());
            Err(failure(rusqlite::ffi::SQLITE_ERROR, message))
        }
    }
}

/// How [`migrate_guarded`] failed.
#[derive(Debug)]
pub enum MigrateFailure {
    /// The migration failed and its snapshot was put back: the file is whole at its old
    /// schema. The text says which migration, why, and where the snapshot is.
    RolledBack(String),
    /// Nothing was migrated (or the snapshot could not be put back; the text says what to do).
    Failed(rusqlite::Error),
    /// Nothing was done: another process is migrating the file and still held its migration
    /// lock after [`MIGRATION_WAIT`]. The text names it and the lock file.
    Busy(String),
}

/// [`migrate`] that tells a rolled-back migration apart from other failures. A rollback also
/// leaves `<dir>/.pre-migration/<file>.failed` with its text (what `warren doctor` shows); the
/// next migration that succeeds removes it.
pub fn migrate_guarded(
    conn: &mut Connection,
    path: &Path,
    version: i64,
    apply: impl FnOnce(&mut Connection) -> rusqlite::Result<()>,
) -> Result<(), MigrateFailure> {
    migrate_waiting(conn, path, version, apply, MIGRATION_WAIT)
}

/// [`migrate_guarded`] waiting at most `wait` for the migration lock.
fn migrate_waiting(
    conn: &mut Connection,
    path: &Path,
    version: i64,
    apply: impl FnOnce(&mut Connection) -> rusqlite::Result<()>,
    wait: Duration,
) -> Result<(), MigrateFailure> {
    let current = |conn: &Connection| -> Result<Option<i64>, MigrateFailure> {
        let found = schema_version(conn).map_err(MigrateFailure::Failed)?;
        if found > version {
            return Err(MigrateFailure::Failed(failure(
                rusqlite::ffi::SQLITE_ERROR,
                format!(
                    "schema version {found} is newer than this warren knows ({version}); run \
                     the warren that wrote it, or restore a backup made by this one"
                ),
            )));
        }
        Ok((found < version).then_some(found))
    };
    // The version only grows, and is written last, once the migrated file passed its check:
    // a file found current needs no lock.
    let Some(old) = current(conn)? else {
        return Ok(());
    };
    // Two processes may open an old file at once (the daemon's reaper and a CLI command on the
    // first start after an upgrade). Unserialised, both snapshot the old file, the first
    // migrates it, the second's migration then fails ("database is locked", "duplicate
    // column") and copies its stale snapshot back over the migrated file: the new columns and
    // everything the first wrote since are gone, and the first keeps a connection whose every
    // write fails. So the version is read again, the snapshot taken and the migration run under
    // the file's migration lock. It is not SQLite's write lock (`BEGIN IMMEDIATE` around
    // `apply`): migrations run their own transactions (memory's its own `BEGIN IMMEDIATE`),
    // which SQLite cannot nest.
    let _lock = migration_lock(path, old, version, wait)?;
    let Some(found) = current(conn)? else {
        // Another process migrated the file while this one waited.
        return Ok(());
    };
    // Changes when another connection commits (never for this one's own commits): a writer
    // that does not take the migration lock (a store opened before this migration began, by a
    // process of the old warren) makes the snapshot older than the file. Read before the
    // snapshot: a commit landing during the copy is then counted, never mistaken for part of
    // the snapshot (read after it, that commit was in the baseline, and putting the snapshot
    // back erased it).
    let data_version = |conn: &Connection| -> Option<i64> {
        conn.query_row("PRAGMA data_version", [], |r| r.get(0)).ok()
    };
    let seen = data_version(conn);
    let tables: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
        .map_err(MigrateFailure::Failed)?;
    let snapshot = if tables > 0 {
        Some(take_snapshot(conn, path, found).map_err(MigrateFailure::Failed)?)
    } else {
        None
    };
    let run = |conn: &mut Connection| -> rusqlite::Result<()> {
        apply(conn)?;
        if crate::failpoint::injected_error(MIGRATION_FAIL) {
            return Err(failure(
                rusqlite::ffi::SQLITE_ERROR,
                format!("injected failure ({MIGRATION_FAIL})"),
            ));
        }
        let check: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0))?;
        if check != "ok" {
            return Err(failure(
                rusqlite::ffi::SQLITE_CORRUPT,
                format!("quick_check after the migration: {check}"),
            ));
        }
        // Last: a process reading the version without the lock (above) opens the file
        // writable at the new schema, so the version is never there on a file whose check
        // has not passed, which the snapshot could still be put back under.
        conn.execute_batch(&format!("PRAGMA user_version = {version}"))
    };
    let Err(cause) = run(conn) else {
        let _ = std::fs::remove_file(failed_marker(path));
        return Ok(());
    };
    let Some(snapshot) = snapshot else {
        return Err(MigrateFailure::Failed(cause));
    };
    let not_restored = |e: rusqlite::Error| {
        let message = format!(
            "migration from schema {found} to {version} failed ({cause}) and putting back \
             the snapshot {} failed too ({e}); stop the daemon and copy the snapshot over \
             the file",
            snapshot.display()
        );
        tracing::error!("{}: {message}", path.display());
        MigrateFailure::Failed(failure(rusqlite::ffi::SQLITE_ERROR, message))
    };
    // Opened before the check, so that the check is the last step before the copy. The copy
    // cannot run under a write lock taken before the check (`BEGIN IMMEDIATE` on `conn`):
    // SQLite's backup refuses a destination with an open transaction ("destination database
    // is in use"), and a lock held by another connection of ours would block the copy itself.
    // What remains is the moment between this check and the copy taking SQLite's write lock.
    let snap = open_read_only(&snapshot).map_err(&not_restored)?;
    if seen.is_none() || data_version(conn) != seen {
        // Putting the snapshot back would erase that commit. A checkpoint that restarted the
        // WAL may also count here: then the file is left as it is too, which loses nothing.
        let message = format!(
            "migration from schema {found} to {version} failed ({cause}); another connection \
             wrote to the file during the migration, so its pre-migration snapshot {} was not \
             put back (that would erase the write) and the file may hold part of the migration \
             at schema {found}: stop every warren process using it, then start warren again, \
             which retries the migration",
            snapshot.display()
        );
        tracing::error!("{}: {message}", path.display());
        return Err(MigrateFailure::Failed(failure(
            rusqlite::ffi::SQLITE_ERROR,
            message,
        )));
    }
    copy_all(&snap, conn).map_err(&not_restored)?;
    let what = format!(
        "migration from schema {found} to {version} failed ({cause}); the file was put back \
         from its pre-migration snapshot {} and keeps schema {found}",
        snapshot.display()
    );
    write_failed_marker(path, &what);
    Err(MigrateFailure::RolledBack(what))
}

/// Suffix of the migration lock of a database: `<dir>/.pre-migration/<file>.lock`, an empty
/// file whose `flock` the process migrating the file holds ([`migrate_guarded`]); while it
/// holds it, the file holds its PID (what a waiter names). It is never removed (a waiter could
/// lock a removed file while a newcomer locks a new one); backups skip the directory.
pub const MIGRATION_LOCK_SUFFIX: &str = ".lock";

/// How long [`migrate_guarded`] waits for another process (or thread) migrating the same file
/// before it gives up: [`open_migrated`] then opens the store read-only, as after a failed
/// migration. Long enough for an ordinary migration (milliseconds to seconds), short enough
/// that a command, or a tokio worker opening a store, is not held for minutes by a big file's
/// migration in another process.
pub const MIGRATION_WAIT: Duration = Duration::from_secs(30);

/// The migration lock of a file, held until dropped (or the process ends, so a crashed
/// migrator never leaves it held).
struct MigrationLock(std::fs::File);

impl Drop for MigrationLock {
    fn drop(&mut self) {
        // Still held here: the PID goes before the lock does, so a waiter never names a
        // process that no longer holds it.
        let _ = self.0.set_len(0);
    }
}

/// Takes the migration lock of `path` (at schema `old`, to be migrated to `version`), waiting
/// up to `wait`; [`MigrateFailure::Busy`] when another process still holds it then. A lock
/// file beside the database rather than the database itself: closing a descriptor of the
/// database would drop the POSIX locks SQLite holds on it ([`open_wal`]).
fn migration_lock(
    path: &Path,
    old: i64,
    version: i64,
    wait: Duration,
) -> Result<MigrationLock, MigrateFailure> {
    use rustix::fs::{FlockOperation, flock};
    use rustix::io::Errno;
    use std::os::unix::fs::FileExt;
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(MigrateFailure::Failed(failure(
            rusqlite::ffi::SQLITE_CANTOPEN,
            "the database path has no directory".to_string(),
        )));
    };
    let snaps = dir.join(SNAPSHOT_DIR);
    let lock_path = snaps.join(format!("{}{MIGRATION_LOCK_SUFFIX}", name.to_string_lossy()));
    let file = std::fs::create_dir_all(&snaps)
        .and_then(|()| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(DB_MODE)
                .open(&lock_path)
        })
        .map_err(|e| {
            MigrateFailure::Failed(failure(
                rusqlite::ffi::SQLITE_CANTOPEN,
                format!(
                    "cannot open the migration lock {} (nothing was migrated): {e}",
                    lock_path.display()
                ),
            ))
        })?;
    let holder = || match std::fs::read_to_string(&lock_path)
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
    {
        Some(pid) => format!("process {pid}"),
        None => "another process".to_string(),
    };
    let start = std::time::Instant::now();
    let mut said = false;
    loop {
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {
                // Best effort: only what a waiter's message names.
                let _ = file.set_len(0).and_then(|()| {
                    file.write_all_at(format!("{}\n", std::process::id()).as_bytes(), 0)
                });
                return Ok(MigrationLock(file));
            }
            Err(Errno::WOULDBLOCK | Errno::INTR) if start.elapsed() < wait => {
                if !said && start.elapsed() >= BUSY_TIMEOUT.min(wait / 2) {
                    said = true;
                    tracing::warn!(
                        "{}: waiting up to {}s for {} migrating it ({} is held)",
                        path.display(),
                        wait.as_secs(),
                        holder(),
                        lock_path.display()
                    );
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(Errno::WOULDBLOCK | Errno::INTR) => {
                return Err(MigrateFailure::Busy(format!(
                    "{} is migrating the file from schema {old} to {version} (it has held the \
                     migration lock {} for over {}s)",
                    holder(),
                    lock_path.display(),
                    wait.as_secs_f64()
                )));
            }
            Err(e) => {
                return Err(MigrateFailure::Failed(failure(
                    rusqlite::ffi::SQLITE_BUSY,
                    format!(
                        "cannot take the migration lock {} (nothing was migrated): {e}",
                        lock_path.display()
                    ),
                )));
            }
        }
    }
}

/// `<dir>/.pre-migration/<file>.failed`: the text of the last migration of `path` that
/// failed and was rolled back.
fn failed_marker(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.parent()
        .unwrap_or(path)
        .join(SNAPSHOT_DIR)
        .join(format!("{name}.failed"))
}

/// Best effort: the marker only feeds `warren doctor`; the store's own error says it all.
fn write_failed_marker(path: &Path, what: &str) {
    let marker = failed_marker(path);
    let written = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(DB_MODE)
        .open(&marker)
        .and_then(|mut f| std::io::Write::write_all(&mut f, what.as_bytes()));
    if let Err(e) = written {
        tracing::warn!("cannot write {}: {e}", marker.display());
    }
}

/// The text of the last migration of `path` that failed and was rolled back, if the file has
/// not been migrated since (`warren doctor`).
pub fn failed_migration(path: &Path) -> Option<String> {
    std::fs::read_to_string(failed_marker(path)).ok()
}

/// The stores of this process opened read-only because their migration rolled back: file and
/// reason (each logged once, at its first open).
static READ_ONLY: Mutex<std::collections::BTreeMap<PathBuf, Arc<str>>> =
    Mutex::new(std::collections::BTreeMap::new());

/// The stores this process opened read-only at their old schema ([`open_migrated`]), with
/// why: what a health report shows.
pub fn read_only_stores() -> Vec<(PathBuf, String)> {
    READ_ONLY
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|(p, r)| (p.clone(), r.to_string()))
        .collect()
}

/// The reason of a write refused on a store [`open_migrated`] opened read-only: SQLite's bare
/// "attempt to write a readonly database" becomes why and what to do.
pub(super) fn read_only_reason(e: &rusqlite::Error, db: &Path) -> Option<String> {
    if code_of(e) & 0xff != rusqlite::ffi::SQLITE_READONLY {
        return None;
    }
    READ_ONLY
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(db)
        .map(|r| r.to_string())
}

/// `e` with the text of [`cause_text`] when `db` was opened read-only by [`open_migrated`]:
/// for stores that keep the `rusqlite::Error` itself in their error.
pub fn explain(e: rusqlite::Error, db: &Path) -> rusqlite::Error {
    match read_only_reason(&e, db) {
        Some(reason) => failure(code_of(&e), reason),
        None => e,
    }
}

/// The store at `path` read-only again when this process already fell back for it and the
/// file is still older than `version`: a second open (the scheduler after the reaper, the next
/// generation) neither retries the migration nor takes another snapshot. A file migrated since
/// (by another process) is forgotten here and opened normally.
fn still_read_only(path: &Path, version: i64) -> Option<SharedConn> {
    let mut known = READ_ONLY.lock().unwrap_or_else(|p| p.into_inner());
    let reason = Arc::clone(known.get(path)?);
    let old = open_read_only(path)
        .ok()
        .filter(|c| schema_version(c).is_ok_and(|v| v < version));
    match old {
        Some(conn) => Some(SharedConn {
            path: path.to_path_buf(),
            conn: Arc::new(Mutex::new(conn)),
            read_only: Some(reason),
        }),
        None => {
            known.remove(path);
            None
        }
    }
}

/// Opens a store's file for writing ([`open_wal`]) at schema `version` ([`migrate_guarded`]
/// with `apply`), the one open path of every store. When the migration fails and its snapshot
/// was put back, or another process is still migrating the file after [`MIGRATION_WAIT`], the
/// store opens READ-ONLY at its old schema instead of failing: reads the old schema can answer
/// keep working, every write fails with why and what to do ([`cause_text`], [`explain`]), the
/// error is logged once per file and process, and [`read_only_stores`] lists it. Later opens in
/// the same process reuse that state, without waiting again, until the file is migrated
/// (after a failure, restart to retry). The caller applies no schema to a read-only store.
pub fn open_migrated(
    path: &Path,
    sync: Sync,
    version: i64,
    apply: impl FnOnce(&mut Connection) -> rusqlite::Result<()>,
) -> rusqlite::Result<SharedConn> {
    open_migrated_waiting(path, sync, version, apply, MIGRATION_WAIT)
}

/// [`open_migrated`] waiting at most `wait` for another process's migration.
fn open_migrated_waiting(
    path: &Path,
    sync: Sync,
    version: i64,
    apply: impl FnOnce(&mut Connection) -> rusqlite::Result<()>,
    wait: Duration,
) -> rusqlite::Result<SharedConn> {
    if let Some(still) = still_read_only(path, version) {
        return Ok(still);
    }
    let mut conn = open_wal(path, sync)?;
    let reason = match migrate_waiting(&mut conn, path, version, apply, wait) {
        Ok(()) => {
            READ_ONLY
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(path);
            return Ok(SharedConn::new(path, conn));
        }
        Err(MigrateFailure::Failed(e)) => return Err(e),
        Err(MigrateFailure::RolledBack(what)) => format!(
            "read-only because the {what}: writes are refused until a migration succeeds (fix \
             the cause, then restart warren, which retries the migration; or restore a backup \
             made by this warren); `warren doctor` shows the state"
        ),
        Err(MigrateFailure::Busy(what)) => format!(
            "read-only because {what}: writes are refused until that migration is done (the \
             store opens writable again once the file is at schema {version}; if that process \
             is stuck, stop it and restart warren)"
        ),
    };
    drop(conn);
    let ro = open_read_only(path).map_err(|e| {
        failure(
            code_of(&e),
            format!("{reason}; opening it read-only failed too: {e}"),
        )
    })?;
    let reason: Arc<str> = reason.into();
    let first = READ_ONLY
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(path.to_path_buf(), Arc::clone(&reason))
        .is_none();
    if first {
        tracing::error!("{}: opened {reason}", path.display());
    }
    Ok(SharedConn {
        path: path.to_path_buf(),
        conn: Arc::new(Mutex::new(ro)),
        read_only: Some(reason),
    })
}

/// [`snapshot_into`] the snapshot directory beside `path`, then prunes old snapshots.
fn take_snapshot(conn: &Connection, path: &Path, found: i64) -> rusqlite::Result<PathBuf> {
    let fail = |what: String| failure(rusqlite::ffi::SQLITE_CANTOPEN, what);
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(fail("the database path has no directory".to_string()));
    };
    let snaps = dir.join(SNAPSHOT_DIR);
    std::fs::create_dir_all(&snaps).map_err(|e| {
        fail(format!(
            "cannot create the snapshot directory {}: {e}",
            snaps.display()
        ))
    })?;
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let dest = snaps.join(format!("{}.v{found}.{ms}.db", name.to_string_lossy()));
    if let Err(e) = snapshot_into(conn, &dest) {
        let _ = std::fs::remove_file(&dest);
        return Err(fail(format!(
            "cannot take the pre-migration snapshot {} (nothing was migrated): {e}",
            dest.display()
        )));
    }
    let all = snapshots_of(path);
    for old in all.iter().take(all.len().saturating_sub(SNAPSHOTS_KEPT)) {
        let _ = std::fs::remove_file(old);
    }
    Ok(dest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqlite::cause_text;

    /// A migration that commits half its work and then fails: the guard puts the snapshot
    /// back (the dropped table and its rows return, the version stays old) and says where the
    /// snapshot is. Without the guard the table would be gone.
    #[test]
    fn failed_migration_is_rolled_back_from_its_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let mut conn = open_wal(&path, Sync::Full).unwrap();
        conn.execute_batch(
            "CREATE TABLE kept (v TEXT); INSERT INTO kept VALUES ('a'), ('b'); \
             PRAGMA user_version = 1;",
        )
        .unwrap();
        let err = migrate(&mut conn, &path, 2, |c| {
            c.execute_batch("DROP TABLE kept")?;
            Err(failure(rusqlite::ffi::SQLITE_ERROR, "step 2 broke".into()))
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("migration from schema 1 to 2 failed"), "{err}");
        assert!(
            err.contains("step 2 broke") && err.contains(SNAPSHOT_DIR),
            "{err}"
        );
        let rows: i64 = conn
            .query_row("SELECT count(*) FROM kept", [], |r| r.get(0))
            .unwrap();
        assert_eq!((rows, schema_version(&conn).unwrap()), (2, 1));
        assert_eq!(snapshots_of(&path).len(), 1);

        // A good migration then runs, and snapshots are bounded.
        for v in 2..=6 {
            migrate(&mut conn, &path, v, |c| {
                c.execute_batch(&format!("INSERT INTO kept VALUES ('v{v}')"))
            })
            .unwrap();
        }
        assert_eq!(schema_version(&conn).unwrap(), 6);
        assert_eq!(snapshots_of(&path).len(), SNAPSHOTS_KEPT);
        // Same version: nothing runs; a newer file is refused.
        migrate(&mut conn, &path, 6, |_| panic!("must not run")).unwrap();
        let newer = migrate(&mut conn, &path, 5, |_| Ok(())).unwrap_err();
        assert!(
            newer.to_string().contains("newer than this warren"),
            "{newer}"
        );
    }

    /// A migration that fails and rolls back leaves the store open READ-ONLY at its old
    /// schema: reads answer, a write fails with why and what to do (not SQLite's bare text),
    /// the state is listed and left for `warren doctor`; a second open in the process does not
    /// retry or snapshot again; once the file is migrated the store opens writable.
    #[test]
    fn a_rolled_back_migration_opens_the_store_read_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ro.db");
        open_wal(&path, Sync::Full)
            .unwrap()
            .execute_batch(
                "CREATE TABLE kept (v TEXT); INSERT INTO kept VALUES ('a'), ('b'); \
                 PRAGMA user_version = 1;",
            )
            .unwrap();
        let store = open_migrated(&path, Sync::Full, 2, |c| {
            c.execute_batch("DROP TABLE kept")?;
            Err(failure(rusqlite::ffi::SQLITE_ERROR, "step 2 broke".into()))
        })
        .unwrap();
        let reason = store.read_only().unwrap().to_string();
        assert!(
            reason.starts_with(
                "read-only because the migration from schema 1 to 2 failed (step 2 broke)"
            ) && reason.contains(SNAPSHOT_DIR),
            "{reason}"
        );
        let rows: i64 = store
            .lock()
            .query_row("SELECT count(*) FROM kept", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 2);
        let e = store
            .lock()
            .execute("INSERT INTO kept VALUES ('c')", [])
            .unwrap_err();
        assert_eq!(cause_text(&e, &path), reason);
        assert_eq!(explain(e, &path).to_string(), reason);
        assert!(
            read_only_stores()
                .iter()
                .any(|(p, r)| p == &path && r == &reason)
        );
        assert!(failed_migration(&path).is_some_and(|t| t.contains("step 2 broke")));

        let again = open_migrated(&path, Sync::Full, 2, |_| panic!("not retried")).unwrap();
        assert_eq!(again.read_only(), Some(reason.as_str()));
        assert_eq!(snapshots_of(&path).len(), 1);

        // Another process migrates the file: the store opens writable again.
        let mut conn = open_wal(&path, Sync::Full).unwrap();
        migrate(&mut conn, &path, 2, |c| {
            c.execute_batch("INSERT INTO kept VALUES ('d')")
        })
        .unwrap();
        let fixed = open_migrated(&path, Sync::Full, 2, |_| panic!("current")).unwrap();
        assert_eq!(fixed.read_only(), None);
        fixed
            .lock()
            .execute("INSERT INTO kept VALUES ('e')", [])
            .unwrap();
        assert!(failed_migration(&path).is_none());
        assert!(!read_only_stores().iter().any(|(p, _)| p == &path));
    }

    /// A store opened while another migrator holds the file's migration lock past the wait
    /// opens read-only at once, saying who holds which lock, instead of blocking its thread
    /// (with the old ten-minute wait it sat there); a second open does not wait again; once
    /// the other migration is done the store opens writable.
    #[test]
    fn a_store_whose_migration_lock_stays_held_opens_read_only_naming_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("busy.db");
        open_wal(&path, Sync::Full)
            .unwrap()
            .execute_batch("CREATE TABLE kept (v TEXT); PRAGMA user_version = 1;")
            .unwrap();
        let (started_tx, started) = std::sync::mpsc::channel();
        let (finish, finish_rx) = std::sync::mpsc::channel::<()>();
        let migrator = std::thread::spawn({
            let path = path.clone();
            move || {
                let mut conn = open_wal(&path, Sync::Full).unwrap();
                migrate(&mut conn, &path, 2, |c| {
                    started_tx.send(()).unwrap();
                    finish_rx.recv().unwrap();
                    c.execute_batch("ALTER TABLE kept ADD COLUMN w TEXT")
                })
                .unwrap();
            }
        });
        started.recv().unwrap();
        let wait = Duration::from_millis(300);
        let t = std::time::Instant::now();
        let store =
            open_migrated_waiting(&path, Sync::Full, 2, |_| panic!("not run"), wait).unwrap();
        let waited = t.elapsed();
        let lock = dir.path().join(SNAPSHOT_DIR).join("busy.db.lock");
        let reason = store.read_only().unwrap().to_string();
        assert_eq!(
            reason,
            format!(
                "read-only because process {} is migrating the file from schema 1 to 2 (it has \
                 held the migration lock {} for over 0.3s): writes are refused until that \
                 migration is done (the store opens writable again once the file is at schema \
                 2; if that process is stuck, stop it and restart warren)",
                std::process::id(),
                lock.display()
            )
        );
        assert!(waited >= wait && waited < wait * 10, "{waited:?}");
        let t = std::time::Instant::now();
        let again =
            open_migrated_waiting(&path, Sync::Full, 2, |_| panic!("not run"), wait).unwrap();
        assert_eq!(again.read_only(), Some(reason.as_str()));
        assert!(t.elapsed() < wait, "waited again");
        assert!(failed_migration(&path).is_none());

        finish.send(()).unwrap();
        migrator.join().unwrap();
        assert_eq!(std::fs::read_to_string(&lock).unwrap(), "", "released");
        let fixed = open_migrated(&path, Sync::Full, 2, |_| panic!("current")).unwrap();
        assert_eq!(fixed.read_only(), None);
        fixed
            .lock()
            .execute("INSERT INTO kept VALUES ('a', 'b')", [])
            .unwrap();
    }

    /// A snapshot is a complete, self-contained copy taken while the source stays open.
    #[test]
    fn snapshot_copies_a_live_wal_database() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("live.db");
        let conn = open_wal(&path, Sync::Normal).unwrap();
        conn.execute_batch("CREATE TABLE t (v INTEGER); INSERT INTO t VALUES (1), (2), (3);")
            .unwrap();
        let dest = dir.path().join("copy.db");
        snapshot_into(&conn, &dest).unwrap();
        assert!(snapshot_into(&conn, &dest).is_err(), "never overwrites");
        let copy = open_read_only(&dest).unwrap();
        let sum: i64 = copy
            .query_row("SELECT sum(v) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(sum, 6);
        let mode: String = copy
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "delete");
    }
}
