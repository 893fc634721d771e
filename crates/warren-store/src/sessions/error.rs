//! Errors of the session backends (SESS-1, SESS-2): each names the file, database or session at
//! fault.

use std::io;
use std::path::PathBuf;

use warren_core::{AgentAlias, SessionKey, SessionKeyError};

/// An io or SQLite error's text is part of its variant's message and is not also returned by
/// `source()`: a printed chain (`{:#}`) then names it once, not "X (os error 28): X (os error
/// 28)".
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("session database {path}: {op}: {cause}")]
    Sqlite {
        path: PathBuf,
        op: &'static str,
        cause: rusqlite::Error,
    },
    /// A SQLite error a full disk caused (`SQLITE_FULL`, or `disk I/O error` growing the
    /// `-shm`/`-wal` with no space left), in words that say so (issue 15 §8).
    #[error("session database {path}: {op}: disk full at {dir} (free some space there and retry)")]
    DiskFull {
        path: PathBuf,
        op: &'static str,
        dir: PathBuf,
    },
    #[error("{path}: {op}: {cause}")]
    Io {
        path: PathBuf,
        op: &'static str,
        cause: io::Error,
    },
    #[error("session '{key}' does not exist")]
    NotFound { key: SessionKey },
    #[error("session '{key}' already exists; pick another name or delete it first")]
    AlreadyExists { key: SessionKey },
    #[error("session '{key}' belongs to agent '{actual}', not '{expected}'")]
    WrongAgent {
        key: SessionKey,
        expected: AgentAlias,
        actual: String,
    },
    #[error("the {backend} session backend cannot {op}")]
    Unsupported {
        backend: &'static str,
        op: &'static str,
    },
    #[error(
        "the JSONL session store in {dir} is inactive: its sessions were migrated to SQLite \
         ({marker} exists); set [channels] session_backend = \"sqlite\" (MIG-4)"
    )]
    JsonlFenced { dir: PathBuf, marker: PathBuf },
    #[error(
        "cannot tell whether the JSONL sessions in {dir} were migrated ({db}: {cause}); JSONL \
         writes stay off until it can be read (MIG-4)"
    )]
    FenceUncertain {
        dir: PathBuf,
        db: PathBuf,
        cause: rusqlite::Error,
    },
    #[error("{path} holds an unreadable row: {detail}")]
    Corrupt { path: PathBuf, detail: String },
    #[error(transparent)]
    Key(#[from] SessionKeyError),
    #[error("session search needs at least one word")]
    EmptySearch,
    #[error("session storage task failed: {0}")]
    Task(String),
}

impl SessionError {
    pub(crate) fn sqlite(
        path: &std::path::Path,
        op: &'static str,
    ) -> impl FnOnce(rusqlite::Error) -> Self {
        let path = path.to_path_buf();
        move |cause| SessionError::from_sqlite(path, op, cause)
    }

    /// A SQLite error of `op` on `path`; [`SessionError::DiskFull`] when a full disk caused it.
    pub(crate) fn from_sqlite(path: PathBuf, op: &'static str, cause: rusqlite::Error) -> Self {
        match warren_config::sqlite::full_disk_at(&cause, &path) {
            Some(dir) => SessionError::DiskFull { path, op, dir },
            None => SessionError::Sqlite {
                // A store left read-only by a failed migration says so (issue 22 §4).
                cause: warren_config::sqlite::explain(cause, &path),
                path,
                op,
            },
        }
    }

    pub(crate) fn io(path: &std::path::Path, op: &'static str) -> impl FnOnce(io::Error) -> Self {
        let path = path.to_path_buf();
        move |cause| SessionError::Io { path, op, cause }
    }
}
