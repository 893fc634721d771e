//! The lifecycle journal (LIFE-2, LIFE-5, BEYOND-3): one durable record per operation
//! (`data/state/lifecycle/<id>.json`) written before the config is saved, the durable files an
//! operation writes (journal, archive exports, manifest, restore marker) with a named crash
//! point at every write, fsync and rename, and the convergence of a record: roll its config
//! step forward when the save never happened, run its followers, clear it when all converged.
//!
//! Temp files of killed runs (`data/state/lifecycle/.*.tmp-*`, `data/state/.costs.jsonl.tmp-*`,
//! and those inside delete archives) are swept before every operation — only those whose
//! writer is dead ([`warren_config::atomic::sweep_stale_temps`]) — and never counted into an
//! archive's manifest (issue 15 §2).

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use warren_config::atomic::{self, CrashPoints};
use warren_config::failpoint::{CONFIG_SAVE, crash_point};
use warren_config::schema::MemoryBackendKind;
use warren_config::{Config, InstallRoot, WriteTxn};
use warren_core::AgentAlias;

use super::error::{LifecycleError, Unreadable, read_json};
use super::{Lifecycle, Report, fsops, micros, now_text, refs, stamp};

/// Schema version of journal records and archive manifests.
pub const SCHEMA_VERSION: u32 = 1;

/// Crash points of the four durable steps of one kind of file.
macro_rules! file_points {
    ($prefix:literal) => {
        CrashPoints {
            after_temp_write: concat!($prefix, "-after-temp-write"),
            after_temp_fsync: concat!($prefix, "-after-temp-fsync"),
            after_rename: concat!($prefix, "-after-rename"),
            after_dir_sync: concat!($prefix, "-after-dir-sync"),
            dir_sync_error: concat!($prefix, "-dir-sync-error"),
        }
    };
}

pub(crate) const JOURNAL_POINTS: CrashPoints = file_points!("lifecycle-journal");
pub(crate) const MANIFEST_POINTS: CrashPoints = file_points!("lifecycle-manifest");
pub(crate) const RESTORED_POINTS: CrashPoints = file_points!("lifecycle-restored");

/// Crash points of the archive export of store `name` (`stores/<name>.json`).
pub(crate) fn export_points(name: &str) -> CrashPoints {
    match name {
        "memory" => file_points!("lifecycle-export-memory"),
        "sessions" => file_points!("lifecycle-export-sessions"),
        "acp" => file_points!("lifecycle-export-acp"),
        "costs" => file_points!("lifecycle-export-costs"),
        "cron" => file_points!("lifecycle-export-cron"),
        "sop" => file_points!("lifecycle-export-sop"),
        _ => file_points!("lifecycle-export-other"),
    }
}

macro_rules! file_steps {
    ($prefix:literal) => {
        [
            concat!($prefix, "-after-temp-write"),
            concat!($prefix, "-after-temp-fsync"),
            concat!($prefix, "-after-rename"),
            concat!($prefix, "-after-dir-sync"),
        ]
    };
}

const fn join<const A: usize, const B: usize, const C: usize>(
    a: [&'static str; A],
    b: [&'static str; B],
) -> [&'static str; C] {
    let mut out = [""; C];
    let mut i = 0;
    while i < A {
        out[i] = a[i];
        i += 1;
    }
    while i < A + B {
        out[i] = b[i - A];
        i += 1;
    }
    out
}

const JOURNAL_STEPS: [&str; 4] = file_steps!("lifecycle-journal");
/// Journal record written, config saved (the config save's own steps included).
const PERSIST_STEPS: [&str; 10] = join(
    join::<4, 1, 5>(JOURNAL_STEPS, ["lifecycle-after-journal"]),
    join::<4, 1, 5>(CONFIG_SAVE, ["lifecycle-after-config-persist"]),
);

/// Every crash point of a rename, in the order it reaches them (tests kill a child at each):
/// every write, fsync and rename of the journal, the config and the cost ledger, and the end
/// of every follower.
pub const RENAME_CRASH_POINTS: &[&str] = &join::<10, 12, 22>(
    PERSIST_STEPS,
    join::<6, 6, 12>(
        [
            "lifecycle-after-workspace",
            "lifecycle-after-memory",
            "lifecycle-after-sessions",
            "lifecycle-after-acp",
            "lifecycle-ledger-after-temp-write",
            "lifecycle-ledger-after-temp-fsync",
        ],
        [
            "lifecycle-ledger-after-rename",
            "lifecycle-ledger-after-dir-sync",
            "lifecycle-after-costs",
            "lifecycle-after-cron",
            "lifecycle-after-sop",
            "lifecycle-after-journal-clear",
        ],
    ),
);

/// The export of one store (its four file steps), then the export done, then its purge.
macro_rules! export_steps {
    ($name:literal) => {
        [
            concat!("lifecycle-export-", $name, "-after-temp-write"),
            concat!("lifecycle-export-", $name, "-after-temp-fsync"),
            concat!("lifecycle-export-", $name, "-after-rename"),
            concat!("lifecycle-export-", $name, "-after-dir-sync"),
            concat!("lifecycle-after-export-", $name),
            concat!("lifecycle-after-", $name),
        ]
    };
}

/// Every crash point of a delete, in order: journal and config as for a rename, the
/// workspace move, each store's export (every step of its file) and purge, the manifest
/// (every step: a kill at its rename must leave a restorable archive) and the journal clear.
pub const DELETE_CRASH_POINTS: &[&str] = &join::<11, 42, 53>(
    join::<10, 1, 11>(PERSIST_STEPS, ["lifecycle-after-workspace"]),
    join::<36, 6, 42>(
        join::<18, 18, 36>(
            join::<12, 6, 18>(
                join::<6, 6, 12>(export_steps!("memory"), export_steps!("sessions")),
                export_steps!("acp"),
            ),
            join::<12, 6, 18>(
                join::<6, 6, 12>(export_steps!("costs"), export_steps!("cron")),
                export_steps!("sop"),
            ),
        ),
        join::<5, 1, 6>(
            join::<4, 1, 5>(
                file_steps!("lifecycle-manifest"),
                ["lifecycle-after-manifest"],
            ),
            ["lifecycle-after-journal-clear"],
        ),
    ),
);

/// Every crash point of a restore, in order: journal and config, the workspace move, every
/// store, the `restored.json` marker (every step) and the journal clear.
pub const RESTORE_CRASH_POINTS: &[&str] = &join::<10, 12, 22>(
    PERSIST_STEPS,
    join::<7, 5, 12>(
        [
            "lifecycle-after-workspace",
            "lifecycle-after-memory",
            "lifecycle-after-sessions",
            "lifecycle-after-acp",
            "lifecycle-after-costs",
            "lifecycle-after-cron",
            "lifecycle-after-sop",
        ],
        join::<4, 1, 5>(
            file_steps!("lifecycle-restored"),
            ["lifecycle-after-journal-clear"],
        ),
    ),
);

/// Writes `value` durably at `path` (temp file, fsync, rename, directory fsync), with the
/// crash points `points`. A temp file a killed writer left beside it is swept first.
pub(crate) fn write_json(
    path: &Path,
    value: &impl Serialize,
    points: CrashPoints,
) -> Result<(), atomic::AtomicWriteError> {
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| atomic::AtomicWriteError {
        path: path.to_path_buf(),
        step: "serialize",
        cause: std::io::Error::other(e),
    })?;
    atomic::sweep_stale_temps(path);
    atomic::write_durable_no_backup(path, &bytes, 0o600, points)?;
    Ok(())
}

/// Whether `name` is a temp file of an atomic write (`.<target>.tmp-<pid>-<random>`): the
/// target it was for.
pub(crate) fn temp_target(name: &str) -> Option<&str> {
    let rest = name.strip_prefix('.')?;
    let at = rest.find(".tmp-")?;
    (at > 0).then(|| &rest[..at])
}

/// Sweeps the temp files killed writers left in `dir` (not recursive); a live writer's temp
/// file (its pid running, or its lock held) is left alone.
pub(crate) fn sweep_dir(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if let Some(target) = temp_target(&name.to_string_lossy()) {
            atomic::sweep_stale_temps(&dir.join(target));
        }
    }
}

/// Sweeps what killed lifecycle runs left: journal temp files, a half-written cost ledger
/// rewrite, and temp files inside delete archives (top level and `stores/`).
pub(crate) fn sweep_killed_temps(root: &InstallRoot) {
    sweep_dir(&root.lifecycle_journal_dir());
    atomic::sweep_stale_temps(&root.costs_ledger());
    if let Ok(archives) = fs::read_dir(root.deleted_agents_dir()) {
        for archive in archives.flatten() {
            let path = archive.path();
            if archive.file_type().is_ok_and(|t| t.is_dir()) {
                sweep_dir(&path);
                sweep_dir(&path.join("stores"));
            }
        }
    }
}

/// What happens to the workspace of an agent (rename: moved or not; delete: archived or not).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum WorkspaceAction {
    Archive,
    /// Recorded, not moved (shared with another agent, or outside the install root).
    Keep {
        reason: String,
    },
}

/// One operation, as journaled. Aliases are stored as their plain strings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    Rename {
        from: AgentAlias,
        to: AgentAlias,
        memory_backend: MemoryBackendKind,
        old_workspace: PathBuf,
        new_workspace: PathBuf,
        workspace: WorkspaceAction,
    },
    Delete {
        alias: AgentAlias,
        /// The removed `[agents.<alias>]` entry, as TOML.
        entry: String,
        memory_backend: MemoryBackendKind,
        workspace_path: PathBuf,
        workspace: WorkspaceAction,
        archive: PathBuf,
        scrubbed: Vec<String>,
    },
    Restore {
        alias: AgentAlias,
        original: AgentAlias,
        memory_backend: MemoryBackendKind,
        archive: PathBuf,
        archived_workspace: PathBuf,
        workspace_path: PathBuf,
    },
}

impl Op {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Rename { .. } => "rename",
            Self::Delete { .. } => "delete",
            Self::Restore { .. } => "restore",
        }
    }

    pub(crate) fn alias(&self) -> &AgentAlias {
        match self {
            Self::Rename { from, .. } => from,
            Self::Delete { alias, .. } | Self::Restore { alias, .. } => alias,
        }
    }

    /// Whether the config already shows the operation's change.
    fn committed(&self, config: &Config) -> bool {
        match self {
            Self::Rename { from, to, .. } => {
                !config.agents.contains_key(from.as_str())
                    && config.agents.contains_key(to.as_str())
            }
            Self::Delete { alias, .. } => !config.agents.contains_key(alias.as_str()),
            Self::Restore { alias, .. } => config.agents.contains_key(alias.as_str()),
        }
    }
}

/// A journal record (`data/state/lifecycle/<id>.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Journal {
    pub schema_version: u32,
    pub id: String,
    pub started_at: String,
    /// SHA-256 of config.toml before the change: a record whose change was never saved is
    /// rolled forward only while the file is still exactly this (never over later edits, e.g.
    /// an agent re-created under the same alias).
    #[serde(default)]
    pub config_before: String,
    #[serde(flatten)]
    pub op: Op,
}

/// A pending journal record that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct UnreadableRecord {
    pub path: PathBuf,
    pub reason: Unreadable,
}

impl Lifecycle {
    fn journal_dir(&self) -> PathBuf {
        self.root().lifecycle_journal_dir()
    }

    /// Pending journal records, oldest first. Unreadable records are reported and skipped.
    pub fn pending(&self) -> Vec<(PathBuf, Result<Journal, UnreadableRecord>)> {
        let mut out = Vec::new();
        let Ok(rd) = fs::read_dir(self.journal_dir()) else {
            return out;
        };
        let mut paths: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .filter(|p| {
                // A temp file of a live writer is not a record.
                p.file_name()
                    .is_some_and(|n| temp_target(&n.to_string_lossy()).is_none())
            })
            .collect();
        paths.sort();
        for p in paths {
            let parsed = read_json::<Journal>(&p).map_err(|reason| UnreadableRecord {
                path: p.clone(),
                reason,
            });
            out.push((p, parsed));
        }
        out
    }

    pub(crate) fn converge_pending_blocking(&self, h: &tokio::runtime::Handle) -> Vec<Report> {
        let mut reports = Vec::new();
        for (path, journal) in self.pending() {
            match journal {
                Ok(j) => reports.push(self.converge(h, &path, &j)),
                Err(e) => {
                    tracing::error!("unreadable lifecycle journal record (left in place): {e}")
                }
            }
        }
        reports
    }

    /// Converges every pending journal; returns the report of the first matching `matches`.
    pub(crate) fn resume_matching(
        &self,
        h: &tokio::runtime::Handle,
        matches: impl Fn(&Op) -> bool,
    ) -> Option<Report> {
        let mut found = None;
        for (path, journal) in self.pending() {
            if let Ok(j) = journal {
                let report = self.converge(h, &path, &j);
                if matches(&j.op) && found.is_none() {
                    found = Some(report);
                }
            }
        }
        found
    }

    fn write_journal(&self, op: Op) -> Result<(PathBuf, Journal), LifecycleError> {
        let id = format!("{}-{}-{}", stamp(), op.name(), op.alias());
        let journal = Journal {
            schema_version: SCHEMA_VERSION,
            id: id.clone(),
            started_at: now_text(),
            config_before: self.config_hash(),
            op,
        };
        let dir = self.journal_dir();
        fs::create_dir_all(&dir).map_err(|cause| LifecycleError::Io {
            path: dir.clone(),
            cause,
        })?;
        let path = dir.join(format!("{id}.json"));
        write_json(&path, &journal, JOURNAL_POINTS).map_err(|cause| LifecycleError::Journal {
            path: path.clone(),
            cause: Box::new(cause),
        })?;
        crash_point("lifecycle-after-journal");
        Ok((path, journal))
    }

    /// SHA-256 of config.toml as it is on disk now.
    fn config_hash(&self) -> String {
        fs::read(self.root().config_file())
            .map(|b| fsops::sha256_hex(&b))
            .unwrap_or_default()
    }

    fn clear_journal(path: &Path) -> Result<(), LifecycleError> {
        fs::remove_file(path).map_err(|cause| LifecycleError::JournalClear {
            path: path.to_path_buf(),
            cause,
        })?;
        if let Some(dir) = path.parent() {
            let _ = atomic::sync_dir(dir);
        }
        crash_point("lifecycle-after-journal-clear");
        Ok(())
    }

    /// LIFE-2: writes the journal record durably, then persists the config change (which
    /// releases the config write lock), then runs the side effects. A failed save drops the
    /// record: nothing happened. `locked` (when the lock was taken) feeds the report's
    /// lock-held and persist timings.
    pub(crate) fn journal_persist_converge(
        &self,
        h: &tokio::runtime::Handle,
        txn: WriteTxn<'_>,
        op: Op,
        locked: Option<std::time::Instant>,
    ) -> Result<Report, LifecycleError> {
        let (path, journal) = self.write_journal(op)?;
        let persisting = std::time::Instant::now();
        let outcome = match txn.commit() {
            Ok(o) => o,
            Err(e) => {
                let _ = Self::clear_journal(&path);
                return Err(e.into());
            }
        };
        let persist = persisting.elapsed();
        let lock_held = locked.map(|l| l.elapsed());
        crash_point("lifecycle-after-config-persist");
        let mut report = self.converge(h, &path, &journal);
        if let Some(held) = lock_held {
            report.lock_held_us = micros(held);
            report.persist_us = micros(persist);
        }
        report.config_generation = Some(outcome.generation);
        report.warnings.extend(outcome.warnings);
        Ok(report)
    }

    /// Runs (or re-runs) the side effects of a journaled operation; clears the record when
    /// every follower converged.
    fn converge(&self, h: &tokio::runtime::Handle, path: &Path, journal: &Journal) -> Report {
        // A crash between the journal and the config save: roll the config step forward (the
        // journal holds the whole intent), or drop the record if it can no longer be applied.
        if !journal.op.committed(self.store.snapshot().config())
            && let Err(e) = self.recommit(h, &journal.op, &journal.config_before)
        {
            let mut report = Report::new(journal.op.name(), journal.op.alias());
            report.warnings.push(format!(
                "the operation was interrupted before its config change was saved and cannot \
                 be redone ({e}); nothing was changed and the journal record was dropped"
            ));
            if let Err(e) = Self::clear_journal(path) {
                report.fail(e.to_string());
            }
            return report;
        }
        let mut report = match &journal.op {
            Op::Rename { .. } => self.converge_rename(h, &journal.op),
            Op::Delete { .. } => self.converge_delete(h, &journal.op),
            Op::Restore { .. } => self.converge_restore(h, &journal.op),
        };
        if report.converged {
            if let Err(e) = Self::clear_journal(path) {
                report.fail(e.to_string());
            }
        } else {
            report.warnings.push(format!(
                "not every follower converged; the journal {} keeps the operation and the next \
                 daemon start (or the same command again) retries it",
                path.display()
            ));
        }
        for w in &report.warnings {
            tracing::warn!(op = %report.op, agent = %report.alias, "{w}");
        }
        let trace = warren_runtime::trace::Trace::new(self.root(), self.store.snapshot().config());
        trace.emit(
            "lifecycle",
            &report.alias,
            None,
            serde_json::to_value(&report).unwrap_or(Value::Null),
        );
        report
    }

    /// Redoes the config step of a journaled operation whose save never happened.
    fn recommit(
        &self,
        h: &tokio::runtime::Handle,
        op: &Op,
        config_before: &str,
    ) -> Result<(), LifecycleError> {
        let mut txn = self.store.write_blocking()?;
        if self.config_hash() != config_before {
            return Err(LifecycleError::CannotRedo(
                "config.toml changed since the operation started (was the agent re-created?)"
                    .into(),
            ));
        }
        let base = txn.base().clone();
        match op {
            Op::Rename { from, to, .. } => {
                if !base.agents.contains_key(from.as_str()) || base.agents.contains_key(to.as_str())
                {
                    return Err(LifecycleError::CannotRedo(format!(
                        "config no longer has '{from}' without '{to}'"
                    )));
                }
                super::rename::edit_rename(&mut txn, &base, from, to)?;
            }
            Op::Delete {
                alias,
                memory_backend,
                ..
            } => {
                let found = refs::collect(&base, alias.as_str());
                let ctx = self.context(h, *memory_backend);
                let (reasons, _) = super::delete::refusals(&ctx, &found, alias);
                if !reasons.is_empty() {
                    return Err(LifecycleError::CannotRedo(reasons.join("; ")));
                }
                super::delete::edit_delete(&mut txn, &base, &found, alias)?;
            }
            Op::Restore { alias, archive, .. } => {
                let manifest = super::restore::read_manifest(archive)?;
                txn.set_item_text(&refs::agent_key(alias.as_str()), &manifest.config_entry)?;
                txn.preview()?;
            }
        }
        txn.commit()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_are_recognised_and_map_to_their_target() {
        assert_eq!(
            temp_target(".manifest.json.tmp-123-abc"),
            Some("manifest.json")
        );
        assert_eq!(temp_target("manifest.json"), None);
        assert_eq!(temp_target(".tmp-1-2"), None);
        assert_eq!(temp_target(".notes"), None);
    }

    #[test]
    fn crash_point_lists_are_unique_and_complete() {
        for list in [
            RENAME_CRASH_POINTS,
            DELETE_CRASH_POINTS,
            RESTORE_CRASH_POINTS,
        ] {
            let mut seen = std::collections::BTreeSet::new();
            for p in list {
                assert!(!p.is_empty());
                assert!(seen.insert(*p), "{p} twice");
            }
        }
        assert!(DELETE_CRASH_POINTS.contains(&"lifecycle-manifest-after-temp-fsync"));
        assert!(RESTORE_CRASH_POINTS.contains(&"lifecycle-restored-after-rename"));
    }
}
