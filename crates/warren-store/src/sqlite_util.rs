//! Connection setup shared by the SQLite stores of this crate: WAL, sync level, busy timeout,
//! foreign keys, and a file mode of 0600 for the database files.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;

/// `PRAGMA synchronous` levels this crate uses.
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

/// Opens (creating) `path` in WAL mode with `sync`.
pub fn open_wal(path: &Path, sync: Sync) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    // The file is created by the open above; it holds conversations, so keep it private.
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
    conn.busy_timeout(Duration::from_secs(5))?;
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
            Some(format!("journal_mode is {mode}, expected wal")),
        ));
    }
    conn.execute_batch(sync.pragma())?;
    conn.execute_batch("PRAGMA foreign_keys = ON; PRAGMA temp_store = MEMORY;")?;
    Ok(conn)
}

/// Opens an existing database read-only (never creates it).
pub fn open_read_only(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(Duration::from_secs(5))?;
    Ok(conn)
}
