//! The durable steps of one source's import and handoff (MIG-1..5, MIG-7), each followed by
//! its named crash point (`crate::failpoints`).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rusqlite::{Connection, TransactionBehavior, params};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use warren_config::InstallRoot;
use warren_config::atomic::sync_dir;
use warren_config::failpoint::{crash_point, injected_error};

use super::{
    ARCHIVE_SUFFIX, Action, Candidate, FileOutcome, MigrateError, Progress, Receipt, STAGED_SUFFIX,
    Step,
};
use crate::failpoints as fp;
use crate::sessions::jsonl_format::{self, Parsed};
use crate::sessions::jsonl_meta;
use crate::sessions::lock;
use crate::sqlite_util::Sync;
use crate::timefmt;

pub(super) struct Ctx<'a> {
    pub root: &'a InstallRoot,
    pub db: &'a Path,
    pub conn: &'a Connection,
    pub runtime_sync: Sync,
    pub progress: Progress,
}

/// A staged source read in full, fsynced and fingerprinted.
struct Source {
    bytes: Vec<u8>,
    sha256: String,
    meta: fs::Metadata,
}

/// Reads `path` whole and fingerprints it. Never through a symlink (the plan refused those; a
/// name swapped for one since is refused here), and only a regular file.
fn read_source(path: &Path) -> Result<Source, MigrateError> {
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => MigrateError::Symlink {
                path: path.to_path_buf(),
            },
            _ => MigrateError::io(path, "open the source")(e),
        })?;
    let meta = file
        .metadata()
        .map_err(MigrateError::io(path, "stat the source"))?;
    if !meta.is_file() {
        return Err(MigrateError::NotAFile {
            path: path.to_path_buf(),
        });
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.read_to_end(&mut bytes)
        .map_err(MigrateError::io(path, "read the source"))?;
    let sha256 = warren_core::hex::encode(&Sha256::digest(&bytes));
    Ok(Source {
        bytes,
        sha256,
        meta,
    })
}

fn mtime(meta: &fs::Metadata) -> OffsetDateTime {
    meta.modified()
        .map(OffsetDateTime::from)
        .unwrap_or_else(|_| timefmt::now())
}

fn with_suffix(dir: &Path, source_name: &str, suffix: &str) -> PathBuf {
    let stem = source_name
        .strip_suffix(super::LIVE_SUFFIX)
        .unwrap_or(source_name);
    dir.join(format!("{stem}{suffix}"))
}

fn outcome(c: &Candidate, step: Step, bytes: u64, parsed: Option<Parsed>) -> FileOutcome {
    let (messages, issues) =
        parsed.map_or((0, Vec::new()), |p| (p.messages.len() as u64, p.issues));
    FileOutcome {
        source_name: c.source_name.clone(),
        key: c.key.clone(),
        step,
        bytes,
        messages,
        issues,
    }
}

/// Dry-run view of one candidate: reads the source, changes nothing.
pub(super) fn preview(
    root: &InstallRoot,
    conn: Option<&Connection>,
    db: &Path,
    c: &Candidate,
) -> Result<FileOutcome, MigrateError> {
    let dir = root.sessions_dir();
    match &c.action {
        Action::Done => Ok(outcome(c, Step::Done, 0, None)),
        Action::FinishHandoff(r) => {
            let staged = with_suffix(&dir, &c.source_name, STAGED_SUFFIX);
            let src = read_source(&staged)?;
            check_receipt(&staged, db, &src, r, false)?;
            Ok(outcome(
                c,
                Step::FinishHandoff,
                src.bytes.len() as u64,
                None,
            ))
        }
        Action::Import { from_staged } => {
            let path = if *from_staged {
                with_suffix(&dir, &c.source_name, STAGED_SUFFIX)
            } else {
                dir.join(&c.source_name)
            };
            let src = read_source(&path)?;
            let parsed = jsonl_format::parse(&src.bytes);
            if parsed.non_blank && parsed.messages.is_empty() {
                return Err(MigrateError::NoValidMessages {
                    file: path,
                    lines: parsed.issues.len(),
                });
            }
            if let Some(conn) = conn {
                let exists: bool = conn
                    .query_row(
                        "SELECT EXISTS(SELECT 1 FROM sessions WHERE key = ?1)",
                        [c.key.as_str()],
                        |r| r.get(0),
                    )
                    .map_err(MigrateError::db(db, "look up the session"))?;
                if exists {
                    return Err(MigrateError::WouldMerge {
                        file: path,
                        key: c.key.clone(),
                        db: db.to_path_buf(),
                    });
                }
            }
            let step = if *from_staged {
                Step::ResumeImport
            } else {
                Step::Import
            };
            Ok(outcome(c, step, src.bytes.len() as u64, Some(parsed)))
        }
    }
}

/// Whether `src` is the file `r` was made from. With `archive`, the error blames an archive.
fn check_receipt(
    path: &Path,
    db: &Path,
    src: &Source,
    r: &Receipt,
    archive: bool,
) -> Result<(), MigrateError> {
    let len = src.bytes.len() as u64;
    let detail = if len != r.byte_len {
        format!("{len} bytes, receipt says {}", r.byte_len)
    } else if src.sha256 != r.sha256 {
        format!("SHA-256 {}, receipt says {}", src.sha256, r.sha256)
    } else {
        return Ok(());
    };
    Err(if archive {
        MigrateError::ArchiveMismatch {
            archive: path.to_path_buf(),
            db: db.to_path_buf(),
            detail,
        }
    } else {
        MigrateError::StagedMismatch {
            staged: path.to_path_buf(),
            db: db.to_path_buf(),
            detail,
        }
    })
}

/// A source whose receipt is committed, waiting for its archive handoff.
struct Committed {
    staged: PathBuf,
    archive: PathBuf,
    meta: fs::Metadata,
    receipt: Receipt,
    outcome: FileOutcome,
}

/// A staged source about to be imported.
struct Staged<'c> {
    c: &'c Candidate,
    live: PathBuf,
    staged: PathBuf,
    resumed: bool,
}

impl Ctx<'_> {
    fn dir(&self) -> PathBuf {
        self.root.sessions_dir()
    }

    /// Runs every candidate in phases, so the directory syncs MIG-3 asks for are shared by all
    /// files instead of paid per file: stage every source (rename), fsync each staged file,
    /// sync the directory once; import each file in its own receipt transaction; hard-link
    /// every archive, sync once; remove every staged name, sync once. Each durable step still
    /// precedes the step that depends on it, and every crash point converges.
    pub(super) fn run_all(
        &mut self,
        candidates: &[Candidate],
        progress: &mut dyn FnMut(&Progress),
    ) -> (Vec<FileOutcome>, Vec<MigrateError>) {
        let dir = self.dir();
        let mut outcomes = Vec::new();
        let mut errors = Vec::new();
        let mut staged = Vec::new();
        let mut committed = Vec::new();

        // Phase 1: stage (MIG-1).
        for c in candidates {
            let live = dir.join(&c.source_name);
            let staged_path = with_suffix(&dir, &c.source_name, STAGED_SUFFIX);
            match &c.action {
                Action::Done => outcomes.push(outcome(c, Step::Done, 0, None)),
                Action::FinishHandoff(r) => match self.check_staged(c, &staged_path, r) {
                    Ok(h) => committed.push(h),
                    Err(e) => errors.push(e),
                },
                Action::Import { from_staged } => {
                    if !from_staged {
                        if let Err(e) = stage(&live, &staged_path) {
                            errors.push(e);
                            continue;
                        }
                        crash_point(fp::MIGRATE_AFTER_STAGE_RENAME);
                    }
                    staged.push(Staged {
                        c,
                        live,
                        staged: staged_path,
                        resumed: *from_staged,
                    });
                }
            }
        }

        // Phase 2: fsync each staged file, then the directory once (MIG-3).
        let mut synced = Vec::new();
        for s in staged {
            match File::open(&s.staged).and_then(|f| f.sync_all()) {
                Ok(()) => {
                    crash_point(fp::MIGRATE_AFTER_STAGED_FSYNC);
                    synced.push(s);
                }
                Err(e) => errors.push(self.restore(
                    &s.staged,
                    &s.live,
                    MigrateError::io(&s.staged, "fsync the staged source")(e),
                )),
            }
        }
        if !synced.is_empty() {
            if let Err(e) = sync_dir(&dir) {
                for s in synced.drain(..) {
                    let cause = io::Error::new(e.kind(), e.to_string());
                    errors.push(self.restore(
                        &s.staged,
                        &s.live,
                        MigrateError::io(&dir, "sync the sessions directory")(cause),
                    ));
                }
            } else {
                crash_point(fp::MIGRATE_AFTER_DIR_SYNC);
            }
        }

        // Phase 3: one receipt transaction per file (MIG-1..3, MIG-5, MIG-7).
        for s in synced {
            // The size the plan counted into the total, so the progress never passes 100 %.
            let bytes = s.c.files.bytes;
            match self.import(&s) {
                Ok(h) => {
                    self.progress.messages += h.outcome.messages;
                    committed.push(h);
                }
                Err(e) => errors.push(e),
            }
            self.progress.files_done += 1;
            self.progress.bytes_done += bytes;
            progress(&self.progress);
        }

        // Phase 4: archive handoff (MIG-1, MIG-3).
        let mut linked = Vec::new();
        for h in committed {
            match link_archive(&h, self.db) {
                Ok(()) => {
                    crash_point(fp::MIGRATE_AFTER_ARCHIVE_LINK);
                    linked.push(h);
                }
                Err(e) => errors.push(e),
            }
        }
        if linked.is_empty() {
            return (outcomes, errors);
        }
        if let Err(e) = sync_dir(&dir) {
            // The staged names stay; the next run finishes the handoff.
            errors.push(MigrateError::io(&dir, "sync the sessions directory")(e));
            return (outcomes, errors);
        }
        for h in linked {
            match fs::remove_file(&h.staged) {
                Ok(()) => {
                    crash_point(fp::MIGRATE_AFTER_STAGED_REMOVE);
                    outcomes.push(h.outcome);
                }
                Err(e) => errors.push(MigrateError::io(&h.staged, "remove the staged source")(e)),
            }
        }
        if let Err(e) = sync_dir(&dir) {
            errors.push(MigrateError::io(&dir, "sync the sessions directory")(e));
        }
        (outcomes, errors)
    }

    /// A staged file with a committed receipt (a crash after commit): it must match.
    fn check_staged(
        &self,
        c: &Candidate,
        staged: &Path,
        r: &Receipt,
    ) -> Result<Committed, MigrateError> {
        let src = read_source(staged)?;
        check_receipt(staged, self.db, &src, r, false)?;
        lock::set_fence(self.root)?;
        Ok(Committed {
            staged: staged.to_path_buf(),
            archive: with_suffix(&self.dir(), &c.source_name, ARCHIVE_SUFFIX),
            meta: src.meta,
            receipt: r.clone(),
            outcome: outcome(c, Step::FinishHandoff, src.bytes.len() as u64, None),
        })
    }

    fn import(&mut self, s: &Staged<'_>) -> Result<Committed, MigrateError> {
        let c = s.c;
        let prepared = read_source(&s.staged).and_then(|src| {
            let parsed = jsonl_format::parse(&src.bytes);
            if parsed.non_blank && parsed.messages.is_empty() {
                return Err(MigrateError::NoValidMessages {
                    file: s.live.clone(),
                    lines: parsed.issues.len(),
                });
            }
            Ok((src, parsed))
        });
        let (src, parsed) = match prepared {
            Ok(v) => v,
            Err(e) => return Err(self.restore(&s.staged, &s.live, e)),
        };
        let receipt = Receipt {
            source_name: c.source_name.clone(),
            session_key: c.key.as_str().to_string(),
            sha256: src.sha256.clone(),
            byte_len: src.bytes.len() as u64,
            messages: parsed.messages.len() as u64,
        };
        if let Err(e) = self.commit(c, &s.live, &src, &parsed, &receipt) {
            // A failed COMMIT may still have reached the disk: ask the database.
            return Err(match self.receipt_committed(&c.source_name) {
                Ok(true) => {
                    let _ = lock::set_fence(self.root);
                    e
                }
                Ok(false) => self.restore(&s.staged, &s.live, e),
                Err(query) => {
                    let _ = lock::set_fence(self.root);
                    query
                }
            });
        }
        crash_point(fp::MIGRATE_AFTER_COMMIT);
        if let Err(e) = lock::set_fence(self.root) {
            tracing::warn!("{e}; the next start restores it from the receipts");
        }
        let step = if s.resumed {
            Step::ResumeImport
        } else {
            Step::Import
        };
        Ok(Committed {
            staged: s.staged.clone(),
            archive: with_suffix(&self.dir(), &c.source_name, ARCHIVE_SUFFIX),
            outcome: outcome(c, step, src.bytes.len() as u64, Some(parsed)),
            meta: src.meta,
            receipt,
        })
    }

    /// MIG-7: a definite pre-commit failure puts the source back at its live name.
    fn restore(&self, staged: &Path, live: &Path, cause: MigrateError) -> MigrateError {
        if live.exists() {
            return MigrateError::LiveReappeared {
                live: live.to_path_buf(),
                staged: staged.to_path_buf(),
            };
        }
        match fs::rename(staged, live).and_then(|()| sync_dir(&self.dir())) {
            Ok(()) => cause,
            Err(e) => {
                tracing::error!(
                    "could not put {} back at {}: {e}; it stays staged and the next run imports it",
                    staged.display(),
                    live.display()
                );
                cause
            }
        }
    }

    fn receipt_committed(&self, source_name: &str) -> Result<bool, MigrateError> {
        self.conn
            .query_row(
                "SELECT EXISTS(SELECT 1 FROM jsonl_import_receipts WHERE source_name = ?1)",
                [source_name],
                |r| r.get(0),
            )
            .map_err(MigrateError::db(self.db, "check the import receipt"))
    }

    /// Messages, session row and receipt in ONE transaction under `synchronous=FULL` (MIG-1..3).
    fn commit(
        &self,
        c: &Candidate,
        live: &Path,
        src: &Source,
        parsed: &Parsed,
        receipt: &Receipt,
    ) -> Result<(), MigrateError> {
        let db_err = |op| MigrateError::db(self.db, op);
        let side_path = jsonl_meta::sidecar_path(live);
        let side = jsonl_meta::read(&side_path)?.unwrap_or_default();
        let side_state = side.state(&side_path)?;
        if self.runtime_sync != Sync::Full {
            self.conn
                .execute_batch(Sync::Full.pragma())
                .map_err(db_err("set synchronous = FULL"))?;
        }
        let result = (|| {
            let tx =
                rusqlite::Transaction::new_unchecked(self.conn, TransactionBehavior::Immediate)
                    .map_err(db_err("begin the import"))?;
            let exists: bool = tx
                .query_row(
                    "SELECT EXISTS(SELECT 1 FROM sessions WHERE key = ?1)",
                    [c.key.as_str()],
                    |r| r.get(0),
                )
                .map_err(db_err("look up the session"))?;
            if exists {
                return Err(MigrateError::WouldMerge {
                    file: live.to_path_buf(),
                    key: c.key.clone(),
                    db: self.db.to_path_buf(),
                });
            }
            let fallback = mtime(&src.meta);
            let times: Vec<OffsetDateTime> = parsed
                .messages
                .iter()
                .map(|m| m.created_at.unwrap_or(fallback))
                .collect();
            let created = times.first().copied().unwrap_or(fallback);
            let updated = times.iter().copied().max().unwrap_or(fallback);
            let agent = side.agent.as_deref().or_else(|| {
                parsed
                    .messages
                    .iter()
                    .rev()
                    .find_map(|m| m.agent.as_ref())
                    .map(|a| a.as_str())
            });
            // The JSONL sidecar's name, state and channel move into the row, in the same
            // transaction as the messages and the receipt.
            tx.execute(
                "INSERT INTO sessions
                    (key, name, agent, channel, state, created_at, updated_at, message_count)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    c.key.as_str(),
                    side.name,
                    agent,
                    side.channel,
                    side_state.as_str(),
                    timefmt::format(created),
                    timefmt::format(updated),
                    parsed.messages.len() as i64
                ],
            )
            .map_err(db_err("insert the session"))?;
            {
                let mut insert = tx
                    .prepare_cached(
                        "INSERT INTO messages (session_key, role, content, agent, created_at)
                         VALUES (?1, ?2, ?3, ?4, ?5)",
                    )
                    .map_err(db_err("prepare the message insert"))?;
                for (m, at) in parsed.messages.iter().zip(&times) {
                    insert
                        .execute(params![
                            c.key.as_str(),
                            m.role.as_str(),
                            m.content,
                            m.agent.as_ref().map(|a| a.as_str()),
                            timefmt::format(*at)
                        ])
                        .map_err(db_err("insert a message"))?;
                }
            }
            tx.execute(
                "INSERT INTO jsonl_import_receipts
                    (source_name, session_key, sha256, byte_len, messages, imported_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    receipt.source_name,
                    receipt.session_key,
                    receipt.sha256,
                    receipt.byte_len as i64,
                    receipt.messages as i64,
                    timefmt::format(timefmt::now())
                ],
            )
            .map_err(db_err("insert the import receipt"))?;
            crash_point(fp::MIGRATE_BEFORE_COMMIT);
            if injected_error(fp::MIGRATE_DISK_FULL_ERROR) {
                return Err(db_err("commit the import")(rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
                    Some("database or disk is full (injected)".into()),
                )));
            }
            tx.commit().map_err(db_err("commit the import"))
        })();
        if self.runtime_sync != Sync::Full
            && let Err(e) = self.conn.execute_batch(self.runtime_sync.pragma())
        {
            tracing::warn!(
                "{}: could not restore the runtime sync mode: {e}",
                self.db.display()
            );
        }
        result
    }
}

/// Renames the live source to its private staged name. The plan checked that the staged name
/// is free, and under the directory lock no writer can take it meanwhile.
fn stage(live: &Path, staged: &Path) -> Result<(), MigrateError> {
    if injected_error(fp::MIGRATE_READ_ONLY_ERROR) {
        return Err(MigrateError::io(live, "stage for import (rename)")(
            io::Error::from_raw_os_error(libc::EROFS),
        ));
    }
    fs::rename(live, staged).map_err(MigrateError::io(live, "stage for import (rename)"))
}

/// Hard-links the archive (never clobbering). An archive already there must be the same inode
/// (a crash after the link) or match the receipt byte for byte.
fn link_archive(h: &Committed, db: &Path) -> Result<(), MigrateError> {
    match fs::hard_link(&h.staged, &h.archive) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let a = fs::metadata(&h.archive)
                .map_err(MigrateError::io(&h.archive, "stat the archive"))?;
            if a.dev() == h.meta.dev() && a.ino() == h.meta.ino() {
                return Ok(());
            }
            let existing = read_source(&h.archive)?;
            check_receipt(&h.archive, db, &existing, &h.receipt, true)
        }
        Err(e) => Err(MigrateError::io(
            &h.archive,
            "create the archive (hard link)",
        )(e)),
    }
}
