//! Errors of backup, verify and restore: each names the path at fault.

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error(
        "disk full writing {path} ({what}); nothing was left half-written and the install was not touched"
    )]
    DiskFull { path: PathBuf, what: String },
    #[error("{path}: {cause}")]
    Io { path: PathBuf, cause: io::Error },
    #[error("{path}: {cause}")]
    Db { path: PathBuf, cause: String },
    #[error("{path}: {cause}")]
    Read { path: PathBuf, cause: String },
    #[error("{path} already exists; choose another destination")]
    Exists { path: PathBuf },
    #[error(
        "the destination {dest} is inside the install root {root}; put backups elsewhere (default ~/warren-backups/)"
    )]
    InsideRoot { dest: PathBuf, root: PathBuf },
    #[error("{path}: not a Warren backup ({cause})")]
    NotABackup { path: PathBuf, cause: String },
    #[error("backup check failed: {path}: {cause}")]
    Verify { path: PathBuf, cause: String },
    #[error(
        "{path} is encrypted: set {env} to its passphrase (or run from a terminal to be asked)",
        env = super::PASSPHRASE_ENV
    )]
    NeedPassphrase { path: PathBuf },
    #[error("wrong passphrase for {path} (its key check does not decrypt)")]
    WrongPassphrase { path: PathBuf },
    #[error("{what}: {cause}")]
    Crypto { what: String, cause: String },
    #[error(
        "a warren daemon (pid {pid}) is running on {root}; stop it before restoring over it",
        pid = pid.map_or_else(|| "?".to_string(), |p| p.to_string())
    )]
    Live { root: PathBuf, pid: Option<u32> },
    #[error(
        "{root} is not empty; restore into an empty directory (--to DIR), or add --force to move the current install aside first (it is kept, never deleted)"
    )]
    NotEmpty { root: PathBuf },
    #[error(
        "{path}: a symbolic link (or something not a directory) is on the path; restore writes only beneath its target and follows no link (a hand-edited backup?)"
    )]
    Beneath { path: PathBuf },
    #[error(
        "{path}: the stored data ({got} bytes) does not fill the sparse file's extents ({want} bytes): the manifest and the file disagree"
    )]
    Extents { path: PathBuf, got: u64, want: u64 },
}

impl BackupError {
    /// An I/O error at `path`; a full disk becomes [`BackupError::DiskFull`].
    pub fn io(path: impl Into<PathBuf>, cause: io::Error) -> Self {
        let path = path.into();
        if cause.raw_os_error() == Some(libc::ENOSPC) || cause.raw_os_error() == Some(libc::EDQUOT)
        {
            return Self::DiskFull {
                path,
                what: cause.to_string(),
            };
        }
        Self::Io { path, cause }
    }

    /// An SQLite error at `path` (the file written, for a full disk).
    pub fn db(path: impl Into<PathBuf>, cause: &warren_config::sqlite::rusqlite::Error) -> Self {
        let path = path.into();
        if warren_config::sqlite::full_disk_at(cause, &path).is_some() {
            return Self::DiskFull {
                path,
                what: cause.to_string(),
            };
        }
        Self::Db {
            path,
            cause: cause.to_string(),
        }
    }

    pub fn is_disk_full(&self) -> bool {
        matches!(self, Self::DiskFull { .. })
    }
}
