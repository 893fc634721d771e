//! JSONL→SQLite session migration with receipts (SPEC MIG-1..7).
//!
//! Under the sessions-directory lock, each legacy `data/sessions/<key>.jsonl` is renamed to a
//! private `<key>.jsonl.importing`; the staged file and then the directory are fsynced (MIG-3);
//! its messages (original `created_at` kept), the session row and a receipt `(source name,
//! session key, SHA-256, byte length)` (MIG-2) commit in ONE transaction under
//! `synchronous=FULL`; the JSONL fence goes up (MIG-4); the archive `<key>.jsonl.migrated` is
//! hard-linked (never clobbering), the directory synced, the staged name removed and the
//! directory synced again.
//!
//! Every crash point converges on the next run: a staged file without a receipt is imported
//! again from scratch (nothing committed); a staged file with a receipt is checked against it
//! and only handed off (no duplicate rows). Ambiguous or mismatching files are errors naming
//! every file involved; one file's error never stops the others (unlike the reference, which
//! stopped at the first), and never loses a source: the bytes always sit in the live, staged
//! or archive name.

mod apply;
mod error;

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rusqlite::Connection;
use serde::Serialize;
use warren_config::InstallRoot;
use warren_core::SessionKey;

pub use error::MigrateError;

use super::LineIssue;
use super::lock::{self, DirLock};
use super::sqlite::SqliteBackend;
use crate::sqlite_util;

pub const LIVE_SUFFIX: &str = ".jsonl";
pub const STAGED_SUFFIX: &str = ".jsonl.importing";
pub const ARCHIVE_SUFFIX: &str = ".jsonl.migrated";

/// A committed import receipt (MIG-2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Receipt {
    pub source_name: String,
    pub session_key: String,
    pub sha256: String,
    pub byte_len: u64,
    pub messages: u64,
}

/// What happens (or happened) to one source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// A live `.jsonl` is imported.
    Import,
    /// A `.jsonl.importing` without a receipt (a crash before commit) is imported.
    ResumeImport,
    /// A `.jsonl.importing` with a receipt (a crash after commit) is checked and archived.
    FinishHandoff,
    /// Archived with a matching receipt: nothing to do.
    Done,
}

/// One source file's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileOutcome {
    pub source_name: String,
    pub key: SessionKey,
    pub step: Step,
    pub bytes: u64,
    /// Messages imported (or, in a dry run, that would be).
    pub messages: u64,
    /// Lines skipped (torn tail, bad JSON) or fields dropped.
    pub issues: Vec<LineIssue>,
}

/// The result of one run. `errors` is empty when every source converged.
#[derive(Debug, Default)]
pub struct MigrationReport {
    pub dry_run: bool,
    pub files: Vec<FileOutcome>,
    pub errors: Vec<MigrateError>,
    /// Whether JSONL mutation is off after this run (a receipt exists, MIG-4).
    pub fenced: bool,
}

impl MigrationReport {
    /// Sources that needed work (not `Done`).
    pub fn changed(&self) -> usize {
        self.files.iter().filter(|f| f.step != Step::Done).count()
    }
}

/// Progress after each file (and at the start), for a progress line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    pub files_done: usize,
    pub files_total: usize,
    pub bytes_done: u64,
    pub bytes_total: u64,
    pub messages: u64,
}

/// The names a source may have on disk, by source name `<stem>.jsonl`.
#[derive(Debug, Default)]
struct Files {
    live: Option<PathBuf>,
    staged: Option<PathBuf>,
    archive: Option<PathBuf>,
    bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Action {
    Import { from_staged: bool },
    FinishHandoff(Receipt),
    Done,
}

struct Candidate {
    source_name: String,
    key: SessionKey,
    files: Files,
    action: Action,
}

/// Imports every legacy JSONL file into `backend` (MIG-1). Per-file problems are in the
/// report's `errors`; `Err` means the run could not start (lock, database).
pub fn import(
    backend: &SqliteBackend,
    progress: &mut dyn FnMut(&Progress),
) -> Result<MigrationReport, MigrateError> {
    let root = backend.root().clone();
    let lock = DirLock::open(&root)?;
    let _guard = lock.hold()?;
    let conn = backend.conn();
    let receipts = load_receipts(&conn, backend.path())?;
    if !receipts.is_empty() {
        // MIG-4: restore the fence from persisted receipts before scanning.
        lock::set_fence(&root)?;
    }
    let (candidates, mut errors) = plan(&root, &receipts);
    let mut report = MigrationReport::default();
    let mut ctx = apply::Ctx {
        root: &root,
        db: backend.path(),
        conn: &conn,
        runtime_sync: backend.runtime_sync(),
        progress: totals(&candidates),
    };
    progress(&ctx.progress);
    let (files, more) = ctx.run_all(&candidates, progress);
    report.files = files;
    errors.extend(more);
    report.fenced = lock::is_fenced(&root);
    report.errors = errors;
    Ok(report)
}

/// What [`import`] would do, without changing anything (no file is moved, no database is
/// created). Reads every pending source to count its messages and find MIG-5/MIG-7 problems.
pub fn dry_run(
    root: &InstallRoot,
    progress: &mut dyn FnMut(&Progress),
) -> Result<MigrationReport, MigrateError> {
    let db = root.sessions_db();
    let conn = if db.exists() {
        Some(sqlite_util::open_read_only(&db).map_err(MigrateError::db(&db, "open read-only"))?)
    } else {
        None
    };
    let receipts = match &conn {
        Some(c) if has_table(c, &db, "jsonl_import_receipts")? => load_receipts(c, &db)?,
        _ => HashMap::new(),
    };
    let (candidates, mut errors) = plan(root, &receipts);
    let mut p = totals(&candidates);
    progress(&p);
    let mut report = MigrationReport {
        dry_run: true,
        fenced: !receipts.is_empty() || lock::is_fenced(root),
        ..MigrationReport::default()
    };
    for c in candidates {
        match apply::preview(root, conn.as_ref(), &db, &c) {
            Ok(outcome) => {
                p.messages += outcome.messages;
                report.files.push(outcome);
            }
            Err(e) => errors.push(e),
        }
        if c.action != Action::Done {
            p.files_done += 1;
            p.bytes_done += c.files.bytes;
            progress(&p);
        }
    }
    report.errors = errors;
    Ok(report)
}

/// Progress totals over the sources that need work.
fn totals(candidates: &[Candidate]) -> Progress {
    let work = candidates.iter().filter(|c| c.action != Action::Done);
    Progress {
        files_total: work.clone().count(),
        bytes_total: work.map(|c| c.files.bytes).sum(),
        ..Progress::default()
    }
}

fn has_table(conn: &Connection, db: &Path, name: &str) -> Result<bool, MigrateError> {
    conn.query_row(
        "SELECT EXISTS(SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1)",
        [name],
        |r| r.get(0),
    )
    .map_err(MigrateError::db(db, "inspect the schema"))
}

fn load_receipts(conn: &Connection, db: &Path) -> Result<HashMap<String, Receipt>, MigrateError> {
    let rows: Vec<Receipt> = conn
        .prepare(
            "SELECT source_name, session_key, sha256, byte_len, messages FROM jsonl_import_receipts",
        )
        .and_then(|mut s| {
            s.query_map([], |r| {
                Ok(Receipt {
                    source_name: r.get(0)?,
                    session_key: r.get(1)?,
                    sha256: r.get(2)?,
                    byte_len: r.get::<_, i64>(3)?.try_into().unwrap_or(u64::MAX),
                    messages: r.get::<_, i64>(4)?.try_into().unwrap_or(0),
                })
            })?
            .collect()
        })
        .map_err(MigrateError::db(db, "read import receipts"))?;
    Ok(rows
        .into_iter()
        .map(|r| (r.source_name.clone(), r))
        .collect())
}

/// Scans the sessions directory and decides each source's step. Files whose state is
/// ambiguous become errors here, before anything moves.
fn plan(
    root: &InstallRoot,
    receipts: &HashMap<String, Receipt>,
) -> (Vec<Candidate>, Vec<MigrateError>) {
    let dir = root.sessions_dir();
    let db = root.sessions_db();
    let mut errors = Vec::new();
    let mut sources: BTreeMap<String, Files> = BTreeMap::new();
    match fs::read_dir(&dir) {
        Ok(entries) => {
            for entry in entries {
                let entry = match entry {
                    Ok(e) => e,
                    Err(e) => {
                        errors.push(MigrateError::io(&dir, "list the sessions directory")(e));
                        continue;
                    }
                };
                let path = entry.path();
                let name = entry.file_name();
                let Some((stem, kind)) = classify(&name) else {
                    continue;
                };
                // A source is read only as the regular file at its name: a symlink (which may
                // point anywhere, outside the sessions directory too) is never followed.
                if !matches!(kind, Kind::Archive) {
                    match entry.file_type() {
                        Ok(t) if t.is_symlink() => {
                            errors.push(MigrateError::Symlink { path });
                            continue;
                        }
                        Ok(t) if !t.is_file() => {
                            errors.push(MigrateError::NotAFile { path });
                            continue;
                        }
                        Ok(_) => {}
                        Err(e) => {
                            errors.push(MigrateError::io(&path, "stat the source")(e));
                            continue;
                        }
                    }
                }
                let Some(stem) = stem.to_str() else {
                    errors.push(MigrateError::NonUtf8Name { path });
                    continue;
                };
                let files = sources.entry(format!("{stem}{LIVE_SUFFIX}")).or_default();
                let bytes = entry.metadata().map(|m| m.len()).unwrap_or(0);
                match kind {
                    Kind::Live => files.live = Some(path),
                    Kind::Staged => files.staged = Some(path),
                    Kind::Archive => {
                        files.archive = Some(path);
                        continue; // archives are not read again
                    }
                }
                files.bytes = files.bytes.max(bytes);
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => errors.push(MigrateError::io(&dir, "list the sessions directory")(e)),
    }

    let mut by_key: HashMap<SessionKey, PathBuf> = HashMap::new();
    let mut candidates = Vec::new();
    for (source_name, files) in sources {
        let source_path = dir.join(&source_name);
        let any = files
            .live
            .clone()
            .or_else(|| files.staged.clone())
            .or_else(|| files.archive.clone())
            .unwrap_or_else(|| source_path.clone());
        let stem = source_name
            .strip_suffix(LIVE_SUFFIX)
            .unwrap_or(&source_name);
        let key = match SessionKey::sanitize(stem) {
            Ok(k) => k,
            Err(cause) => {
                errors.push(MigrateError::BadKey { path: any, cause });
                continue;
            }
        };
        if let Some(first) = by_key.get(&key) {
            errors.push(MigrateError::DuplicateKey {
                key,
                first: first.clone(),
                second: any,
            });
            continue;
        }
        by_key.insert(key.clone(), any);
        match decide(
            &dir,
            &db,
            &source_name,
            &key,
            &files,
            receipts.get(&source_name),
        ) {
            Ok(action) => candidates.push(Candidate {
                source_name,
                key,
                files,
                action,
            }),
            Err(e) => errors.push(e),
        }
    }
    // A later duplicate must also stop the first holder of the key.
    let dup_keys: Vec<SessionKey> = errors
        .iter()
        .filter_map(|e| match e {
            MigrateError::DuplicateKey { key, .. } => Some(key.clone()),
            _ => None,
        })
        .collect();
    candidates.retain(|c| !dup_keys.contains(&c.key));
    (candidates, errors)
}

enum Kind {
    Live,
    Staged,
    Archive,
}

fn classify(name: &OsStr) -> Option<(&OsStr, Kind)> {
    let bytes = name.as_bytes();
    for (suffix, kind) in [
        (STAGED_SUFFIX, Kind::Staged),
        (ARCHIVE_SUFFIX, Kind::Archive),
        (LIVE_SUFFIX, Kind::Live),
    ] {
        if let Some(stem) = bytes.strip_suffix(suffix.as_bytes()) {
            return Some((OsStr::from_bytes(stem), kind));
        }
    }
    None
}

fn decide(
    dir: &Path,
    db: &Path,
    source_name: &str,
    key: &SessionKey,
    files: &Files,
    receipt: Option<&Receipt>,
) -> Result<Action, MigrateError> {
    if let Some(r) = receipt
        && r.session_key != key.as_str()
    {
        return Err(MigrateError::ReceiptKeyMismatch {
            source_file: dir.join(source_name),
            db: db.to_path_buf(),
            receipt_key: r.session_key.clone(),
            key: key.clone(),
        });
    }
    match (&files.live, &files.staged, &files.archive, receipt) {
        (Some(live), Some(staged), _, _) => Err(MigrateError::Ambiguous {
            live: live.clone(),
            staged: staged.clone(),
        }),
        (Some(live), None, Some(archive), _) => Err(MigrateError::LiveBesideArchive {
            live: live.clone(),
            archive: archive.clone(),
        }),
        (Some(live), None, None, Some(_)) => Err(MigrateError::LiveAfterReceipt {
            live: live.clone(),
            db: db.to_path_buf(),
        }),
        (Some(_), None, None, None) => Ok(Action::Import { from_staged: false }),
        (None, Some(_), None, None) => Ok(Action::Import { from_staged: true }),
        (None, _, Some(archive), None) => Err(MigrateError::ArchiveWithoutReceipt {
            archive: archive.clone(),
            db: db.to_path_buf(),
        }),
        (None, Some(_), _, Some(r)) => Ok(Action::FinishHandoff(r.clone())),
        (None, None, Some(archive), Some(r)) => {
            let len = fs::metadata(archive)
                .map_err(MigrateError::io(archive, "stat the archive"))?
                .len();
            if len != r.byte_len {
                return Err(MigrateError::ArchiveMismatch {
                    archive: archive.clone(),
                    db: db.to_path_buf(),
                    detail: format!("{len} bytes, receipt says {}", r.byte_len),
                });
            }
            Ok(Action::Done)
        }
        (None, None, None, _) => Ok(Action::Done),
    }
}
