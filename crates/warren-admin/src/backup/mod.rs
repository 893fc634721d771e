//! Backup, verify, restore and `doctor` of an install root (SPEC BAK-1, BEYOND-2, BEYOND-11,
//! STATE-1..16; issue 22).
//!
//! A backup is a directory (not a `.tar.zst`: no archive or compressor dependency, each file
//! is checked and restored on its own, a half-written backup is a directory that is simply
//! removed, and `tar` remains one command away for whoever wants one file):
//!
//! ```text
//! <backup>/manifest.json   every entry (file, directory, symbolic link) with its mode, and for
//!                          files the size and SHA-256 of the stored bytes; schema versions of
//!                          the databases; encryption parameters
//! <backup>/files/<path>    the install's files at their relative paths
//! ```
//!
//! It is written as `<backup>.partial-<pid>` and renamed into place when complete; any error
//! (a full disk included) removes the partial directory and names the path that failed. The
//! install root is only read: SQLite databases through the online backup API
//! ([`warren_config::sqlite::snapshot_into`], never a copy of a file under a writer), JSONL
//! ledgers up to their last complete line, everything else through confined handles
//! ([`warren_config::confined`]: no symbolic link is followed, links are stored as links).
//! [`stores`] is the state map of the files; [`create`], [`check`] (verify) and [`restore`]
//! use it; [`doctor`] reports schema versions, snapshots and disk use.
//!
//! `.secret_key` is in the backup (without it the encrypted secrets in config.toml are lost),
//! so a plain backup must be kept like the key itself; [`crypt`] encrypts every file with a
//! key derived from a passphrase (Argon2id, ChaCha20-Poly1305 in 64 KiB chunks bound to the
//! file's path).

pub mod beneath;
mod bytes;
pub mod cap;
pub mod check;
pub mod create;
pub mod crypt;
pub mod doctor;
mod error;
pub mod manifest;
pub mod restore;
pub mod sparse;
pub mod stores;

pub use check::{VerifyReport, verify};
pub use create::{Summary, create};
pub use doctor::{DoctorReport, doctor};
pub use error::BackupError;
pub use manifest::Manifest;
pub use restore::{RestoreReport, restore};

/// Environment variable holding the passphrase of `--encrypt` (or prompted for).
pub const PASSPHRASE_ENV: &str = "WARREN_BACKUP_PASSPHRASE";

/// Receives the progress of a backup or restore (the CLI draws a bar on stderr).
pub trait Progress: Send + Sync {
    /// The work ahead: files and bytes (an estimate: files may grow while read).
    fn start(&self, _files: u64, _bytes: u64) {}
    /// One file done, with its size.
    fn file_done(&self, _path: &str, _bytes: u64) {}
    fn finish(&self) {}
}

/// No progress output.
pub struct Quiet;

impl Progress for Quiet {}
