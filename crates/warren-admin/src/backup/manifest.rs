//! `manifest.json`: what a backup holds, with the size and SHA-256 of every stored file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::BackupError;

/// The `format` field of every manifest.
pub const FORMAT: &str = "warren-backup";
/// Version of the layout; [`Manifest::read`] refuses others.
pub const VERSION: u32 = 1;
/// The manifest's file name in a backup.
pub const FILE: &str = "manifest.json";
/// The directory of the stored files in a backup.
pub const FILES_DIR: &str = "files";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub version: u32,
    pub warren_version: String,
    /// RFC 3339 time the snapshot started: what was acknowledged before it is in the backup.
    pub created_at: String,
    pub source_root: PathBuf,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<super::crypt::Params>,
    /// `PRAGMA user_version` of each database, by its path.
    pub schemas: BTreeMap<String, i64>,
    pub entries: Vec<Entry>,
    pub files: u64,
    pub bytes: u64,
    /// What was left out, and why (a hard-linked workspace file, a socket, a remote memory
    /// backend).
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// One entry, by its path relative to the install root (`/`-separated).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub path: String,
    #[serde(flatten)]
    pub kind: EntryKind,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EntryKind {
    Dir {
        mode: u32,
    },
    File {
        mode: u32,
        class: Class,
        /// Size and SHA-256 (hex) of the bytes stored under `files/` (encrypted, if so).
        size: u64,
        sha256: String,
    },
    Symlink {
        target: String,
    },
}

/// How a file was read from the live install.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// An SQLite database, copied through the online backup API.
    Sqlite,
    /// A JSONL ledger, copied up to its last complete line.
    Ledger,
    /// Any other file, copied as read.
    Plain,
}

impl Manifest {
    /// Reads and checks `<backup>/manifest.json`.
    pub fn read(backup: &Path) -> Result<Self, BackupError> {
        let path = backup.join(FILE);
        let bytes = std::fs::read(&path).map_err(|e| BackupError::NotABackup {
            path: backup.to_path_buf(),
            cause: format!("cannot read {}: {e}", path.display()),
        })?;
        let m: Self = serde_json::from_slice(&bytes).map_err(|e| BackupError::Verify {
            path: path.clone(),
            cause: format!("does not parse: {e}"),
        })?;
        if m.format != FORMAT || m.version != VERSION {
            return Err(BackupError::NotABackup {
                path: path.clone(),
                cause: format!("format {} version {}", m.format, m.version),
            });
        }
        for e in &m.entries {
            if !safe_rel(&e.path) {
                return Err(BackupError::Verify {
                    path: path.clone(),
                    cause: format!("entry '{}' is not a plain relative path", e.path),
                });
            }
        }
        Ok(m)
    }
}

/// Whether `rel` is a relative path of plain components (no `..`, no absolute path): a
/// manifest cannot make restore write outside its target.
pub fn safe_rel(rel: &str) -> bool {
    !rel.is_empty()
        && !rel.starts_with('/')
        && rel
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_relative_paths_are_safe() {
        for ok in [
            "config.toml",
            "agents/main/workspace/a b.txt",
            ".secret_key",
        ] {
            assert!(safe_rel(ok), "{ok}");
        }
        for bad in ["", "/etc/passwd", "../x", "a/../../x", "a//b", "./a"] {
            assert!(!safe_rel(bad), "{bad}");
        }
    }
}
