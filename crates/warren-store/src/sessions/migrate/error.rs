//! Migration errors (MIG-5, MIG-7): each names every file (and the database) involved and the
//! way out.

use std::io;
use std::path::PathBuf;

use warren_core::{SessionKey, SessionKeyError};

use crate::sessions::SessionError;

/// As with [`SessionError`], a wrapped error's text is in the message and not also `source()`.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error("{path}: {op}: {cause}")]
    Io {
        path: PathBuf,
        op: &'static str,
        cause: io::Error,
    },
    #[error("{db}: {op}: {cause}")]
    Db {
        db: PathBuf,
        op: &'static str,
        cause: rusqlite::Error,
    },
    #[error("{path}: the file name is not UTF-8; rename it to import it")]
    NonUtf8Name { path: PathBuf },
    #[error("{path}: cannot derive a session key from the file name: {cause}")]
    BadKey {
        path: PathBuf,
        cause: SessionKeyError,
    },
    #[error("{first} and {second} would both become session '{key}'; rename one of them (MIG-7)")]
    DuplicateKey {
        key: SessionKey,
        first: PathBuf,
        second: PathBuf,
    },
    #[error(
        "both {live} and {staged} exist (an interrupted import next to a newer live file); \
         keep the one you want and move the other out of the sessions directory"
    )]
    Ambiguous { live: PathBuf, staged: PathBuf },
    #[error(
        "{live} exists next to its archive {archive} (it was imported already); move it away or \
         rename it to import it under another session key"
    )]
    LiveBesideArchive { live: PathBuf, archive: PathBuf },
    #[error(
        "{live} was already imported (its receipt is in {db}) and has reappeared; move it away or \
         rename it to import it under another session key"
    )]
    LiveAfterReceipt { live: PathBuf, db: PathBuf },
    #[error(
        "{archive} has no import receipt in {db} (was sessions.db replaced?); rename it back to \
         .jsonl to import it again, or move it away"
    )]
    ArchiveWithoutReceipt { archive: PathBuf, db: PathBuf },
    #[error("{archive} does not match its import receipt in {db}: {detail}")]
    ArchiveMismatch {
        archive: PathBuf,
        db: PathBuf,
        detail: String,
    },
    #[error(
        "{staged} changed after its import was committed ({detail}; receipt in {db}); it was not \
         imported again. Compare it with the session in SQLite, then move it away"
    )]
    StagedMismatch {
        staged: PathBuf,
        db: PathBuf,
        detail: String,
    },
    #[error(
        "the import receipt for {source_file} in {db} names session '{receipt_key}', but the file \
         maps to '{key}'"
    )]
    ReceiptKeyMismatch {
        source_file: PathBuf,
        db: PathBuf,
        receipt_key: String,
        key: SessionKey,
    },
    #[error(
        "{file} is not empty but holds no valid message ({lines} unreadable line(s)); it was left \
         in place and not imported (MIG-5). Fix or delete its bad lines, or move it out of the \
         sessions directory; then `warren sessions migrate` imports it"
    )]
    NoValidMessages { file: PathBuf, lines: usize },
    #[error(
        "{path} is a symlink; sessions are imported only from regular files in the sessions \
         directory, so its target was not read. Replace it with a copy of the file you mean, or \
         move it away"
    )]
    Symlink { path: PathBuf },
    #[error("{path} is not a regular file; move it out of the sessions directory")]
    NotAFile { path: PathBuf },
    #[error(
        "{file} was not imported: session '{key}' already exists in {db} and an import never \
         merges into an existing session (MIG-7); rename the file to import it under another key"
    )]
    WouldMerge {
        file: PathBuf,
        key: SessionKey,
        db: PathBuf,
    },
    #[error("{live} appeared while {staged} was being imported; both were kept, resolve by hand")]
    LiveReappeared { live: PathBuf, staged: PathBuf },
}

impl MigrateError {
    /// Whether the error is about one source file only, which was left where it is with the
    /// database untouched: the rest of the store stays usable and the file is reported
    /// instead of stopping every session (issue 15). Incompatible receipts, staged sources,
    /// archives and conflicts still stop construction (MIG-7).
    pub fn leaves_store_usable(&self) -> bool {
        matches!(
            self,
            MigrateError::NoValidMessages { .. }
                | MigrateError::Symlink { .. }
                | MigrateError::NotAFile { .. }
                | MigrateError::NonUtf8Name { .. }
                | MigrateError::BadKey { .. }
        )
    }

    pub(crate) fn io(path: &std::path::Path, op: &'static str) -> impl FnOnce(io::Error) -> Self {
        let path = path.to_path_buf();
        move |cause| MigrateError::Io { path, op, cause }
    }

    pub(crate) fn db(
        db: &std::path::Path,
        op: &'static str,
    ) -> impl FnOnce(rusqlite::Error) -> Self {
        let db = db.to_path_buf();
        move |cause| MigrateError::Db { db, op, cause }
    }
}
