//! `warren doctor`: for each database of the state map its schema version against this
//! build's (a pending migration, or a file left at its old schema by a migration that rolled
//! back), its pre-migration snapshots, and the disk use of the install (BEYOND-11).

use std::path::{Path, PathBuf};

use serde::Serialize;
use warren_config::InstallRoot;
use warren_config::sqlite;

use super::manifest::Class;
use super::stores::state_map;
use warren_runtime::lock::{DaemonStatus, probe};

#[derive(Debug, Clone, Serialize)]
pub struct DoctorReport {
    pub root: PathBuf,
    pub daemon_running: bool,
    pub databases: Vec<DbState>,
    /// Bytes used below the root, by top-level entry (`data`, `agents`, ...).
    pub disk_use: Vec<(String, u64)>,
    pub total_bytes: u64,
    /// Free bytes on the root's file system.
    pub free_bytes: Option<u64>,
    /// Problems found (a failed or pending migration, an unreadable database).
    pub problems: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct DbState {
    pub state: String,
    pub store: String,
    pub path: PathBuf,
    pub exists: bool,
    /// Size of the file and its `-wal`.
    pub bytes: u64,
    pub schema: Option<i64>,
    pub expected: Option<i64>,
    /// `current`, `pending` (older: migrates at next open), `read-only` (older, and its last
    /// migration failed and rolled back: stores open it read-only until one succeeds), `newer`,
    /// or `absent`.
    pub status: String,
    /// For `read-only`: the failed migration, its cause and the snapshot put back.
    pub read_only: Option<String>,
    pub snapshots: Vec<PathBuf>,
}

/// The report of `root` (read-only: no file is created or changed).
pub fn doctor(root: &InstallRoot) -> DoctorReport {
    let mut problems = Vec::new();
    let mut databases = Vec::new();
    for row in state_map(root) {
        if row.class != Class::Sqlite {
            continue;
        }
        let exists = row.path.is_file();
        let bytes = size(&row.path) + size(&with_suffix(&row.path, "-wal"));
        let schema = if exists {
            match sqlite::open_read_only(&row.path).and_then(|c| sqlite::schema_version(&c)) {
                Ok(v) => Some(v),
                Err(e) => {
                    problems.push(format!("{}: cannot be read: {e}", row.path.display()));
                    None
                }
            }
        } else {
            None
        };
        // The text a rolled-back migration left (issue 22 §4), while the file is still old.
        let read_only = match (schema, row.schema) {
            (Some(v), Some(want)) if v < want => sqlite::failed_migration(&row.path),
            _ => None,
        };
        let status = match (schema, row.schema) {
            _ if !exists => "absent",
            (Some(v), Some(want)) if v == want => "current",
            (Some(v), Some(want)) if v < want => {
                if read_only.is_some() {
                    "read-only"
                } else {
                    "pending"
                }
            }
            (Some(_), Some(_)) => "newer",
            _ => "unknown",
        };
        let snapshots = sqlite::snapshots_of(&row.path);
        match status {
            "read-only" => problems.push(format!(
                "{}: read-only at schema {} (this warren: {}): the {}; writes to it are refused until a migration succeeds (fix the cause, then restart warren; or restore a backup)",
                row.path.display(),
                schema.unwrap_or(0),
                row.schema.unwrap_or(0),
                read_only.as_deref().unwrap_or_default()
            )),
            "pending" if !snapshots.is_empty() => problems.push(format!(
                "{}: schema {} is older than this warren's {} and a pre-migration snapshot exists: a migration may have failed and rolled back (see the daemon log); the newest snapshot is {}",
                row.path.display(),
                schema.unwrap_or(0),
                row.schema.unwrap_or(0),
                snapshots.last().map(|p| p.display().to_string()).unwrap_or_default()
            )),
            "newer" => problems.push(format!(
                "{}: schema {} is newer than this warren's {}: run the warren that wrote it",
                row.path.display(),
                schema.unwrap_or(0),
                row.schema.unwrap_or(0)
            )),
            _ => {}
        }
        databases.push(DbState {
            state: row.state.to_string(),
            store: row.store.to_string(),
            path: row.path,
            exists,
            bytes,
            schema,
            expected: row.schema,
            status: status.to_string(),
            read_only,
            snapshots,
        });
    }
    let mut disk_use = Vec::new();
    if let Ok(rd) = std::fs::read_dir(root.root()) {
        let mut names: Vec<_> = rd.filter_map(Result::ok).collect();
        names.sort_by_key(|e| e.file_name());
        for e in names {
            disk_use.push((
                e.file_name().to_string_lossy().into_owned(),
                tree_size(&e.path()),
            ));
        }
    }
    let total_bytes = disk_use.iter().map(|(_, b)| b).sum();
    let free_bytes = rustix::fs::statvfs(root.root())
        .ok()
        .map(|st| st.f_bavail.saturating_mul(st.f_frsize));
    DoctorReport {
        root: root.root().to_path_buf(),
        daemon_running: matches!(probe(root), Ok(DaemonStatus::Running { .. })),
        databases,
        disk_use,
        total_bytes,
        free_bytes,
        problems,
    }
}

fn with_suffix(p: &Path, suffix: &str) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

fn size(p: &Path) -> u64 {
    std::fs::metadata(p).map_or(0, |m| m.len())
}

/// Bytes of the files below `p` (links not followed).
fn tree_size(p: &Path) -> u64 {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::read_dir(p)
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .map(|e| tree_size(&e.path()))
                    .sum()
            })
            .unwrap_or(0),
        Ok(m) if m.is_file() => m.len(),
        _ => 0,
    }
}
