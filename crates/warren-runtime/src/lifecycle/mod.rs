//! Agent lifecycle: rename, delete, restore (SPEC LIFE-1..6, BEYOND-1, BEYOND-3, LAYOUT-3).
//! ONE module used by the CLI (`warren agents rename|delete|restore`) and the gateway
//! (`/api/agents/...`).
//!
//! Order of every operation (LIFE-2..4):
//! 1. take the config write lock (in-process mutex + `data/config.lock`);
//! 2. check hard references ([`refs`]) and live ACP sessions (fail closed if the ACP store
//!    cannot be read);
//! 3. edit config (entry + soft references), re-walk the edited config: any reference left
//!    aborts before anything is persisted;
//! 4. write a durable journal record (`data/state/lifecycle/<id>.json`);
//! 5. persist config, release the lock;
//! 6. run the side effects (workspace move, every [`stores::AgentStateStore`]) — each one
//!    idempotent — and clear the journal only when every follower converged.
//!
//! An interrupted operation converges from its journal on the next daemon start or the next
//! lifecycle call ([`Lifecycle::converge_pending`]). Warnings go to the caller, into the
//! archive manifest and into the runtime trace.

pub mod fsops;
pub mod refs;
pub mod stores;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use warren_config::atomic::{self, CrashPoints};
use warren_config::failpoint::crash_point;
use warren_config::schema::MemoryBackendKind;
use warren_config::{Config, ConfigError, ConfigStore, InstallRoot, WriteTxn};
use warren_core::{AgentAlias, AliasError};

use self::fsops::Moved;
use self::refs::{RefSite, Strength};
use self::stores::{StoreContext, WorkspaceMove, registered};

/// Schema version of journal records and archive manifests.
pub const SCHEMA_VERSION: u32 = 1;

/// Crash points, in the order an operation reaches them (tests kill a child at each).
pub const RENAME_CRASH_POINTS: &[&str] = &[
    "lifecycle-after-journal",
    "lifecycle-after-config-persist",
    "lifecycle-after-workspace",
    "lifecycle-after-memory",
    "lifecycle-after-sessions",
    "lifecycle-after-acp",
    "lifecycle-after-costs",
];

/// Crash points of delete (exports are fsynced before each purge).
pub const DELETE_CRASH_POINTS: &[&str] = &[
    "lifecycle-after-journal",
    "lifecycle-after-config-persist",
    "lifecycle-after-workspace",
    "lifecycle-after-export-memory",
    "lifecycle-after-memory",
    "lifecycle-after-export-sessions",
    "lifecycle-after-sessions",
    "lifecycle-after-export-acp",
    "lifecycle-after-acp",
    "lifecycle-after-export-costs",
    "lifecycle-after-costs",
    "lifecycle-after-manifest",
];

const FILE_POINTS: CrashPoints = CrashPoints {
    after_temp_write: "lifecycle-file-after-temp-write",
    after_temp_fsync: "lifecycle-file-after-temp-fsync",
    after_rename: "lifecycle-file-after-rename",
    after_dir_sync: "lifecycle-file-after-dir-sync",
    dir_sync_error: "lifecycle-file-dir-sync-error",
};

static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

const MANIFEST: &str = "manifest.json";
const RESTORED: &str = "restored.json";

/// Why an operation was refused or failed before anything changed.
#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    #[error("agent '{0}' is not configured")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Io(String),
}

impl LifecycleError {
    /// HTTP status the gateway answers with.
    pub fn status(&self) -> u16 {
        match self {
            Self::NotFound(_) => 404,
            Self::Invalid(_) => 400,
            Self::Refused(_) => 409,
            Self::Config(ConfigError::Invalid { .. }) => 400,
            Self::Config(_) | Self::Io(_) => 500,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            Self::NotFound(_) => "not_found",
            Self::Invalid(_) => "validation_failed",
            Self::Refused(_) => "refused",
            Self::Config(ConfigError::Invalid { .. }) => "invalid_config",
            Self::Config(_) => "config_error",
            Self::Io(_) => "io_error",
        }
    }
}

fn alias(s: &str) -> Result<AgentAlias, LifecycleError> {
    AgentAlias::new(s).map_err(|e| match e {
        AliasError::Reserved => LifecycleError::Invalid(
            "the alias 'default' is reserved: it can never be created, renamed or deleted".into(),
        ),
        other => LifecycleError::Invalid(other.to_string()),
    })
}

/// What happens to the workspace of a deleted agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum WorkspaceAction {
    Archive,
    /// Recorded, not moved (shared with another agent, or outside the install root).
    Keep {
        reason: String,
    },
}

/// One operation, as journaled.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    Rename {
        from: String,
        to: String,
        memory_backend: MemoryBackendKind,
        old_workspace: PathBuf,
        new_workspace: PathBuf,
        workspace: WorkspaceAction,
    },
    Delete {
        alias: String,
        /// The removed `[agents.<alias>]` entry, as TOML.
        entry: String,
        memory_backend: MemoryBackendKind,
        workspace_path: PathBuf,
        workspace: WorkspaceAction,
        archive: PathBuf,
        scrubbed: Vec<String>,
    },
    Restore {
        alias: String,
        original: String,
        memory_backend: MemoryBackendKind,
        archive: PathBuf,
        archived_workspace: PathBuf,
        workspace_path: PathBuf,
    },
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

/// What an operation did; returned to the CLI and the HTTP caller.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub op: String,
    pub alias: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub archive: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_generation: Option<u64>,
    /// Config references rewritten (rename) or scrubbed (delete).
    pub references: Vec<String>,
    /// Per store: records moved, archived or restored.
    pub counts: BTreeMap<String, u64>,
    pub warnings: Vec<String>,
    /// Every follower finished; the journal record is gone.
    pub converged: bool,
    /// How long the config write lock was held, and the config save inside it (microseconds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_held_us: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub persist_us: Option<u64>,
}

fn micros(d: std::time::Duration) -> Option<u64> {
    Some(u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The preview of a delete (`--dry-run`, `GET /api/agents/{alias}/delete-plan`).
#[derive(Debug, Clone, Serialize)]
pub struct DeletePlan {
    pub alias: String,
    pub allowed: bool,
    pub blockers: Vec<RefSite>,
    pub scrubs: Vec<RefSite>,
    /// `None` when the ACP store could not be read (then `allowed` is false: fail closed).
    pub live_acp_sessions: Option<u64>,
    pub workspace: PathBuf,
    pub workspace_action: WorkspaceAction,
    /// Records each store would archive (or the error reading it).
    pub stores: BTreeMap<String, Value>,
    pub reasons: Vec<String>,
}

/// The lifecycle of the agents of one install.
#[derive(Clone)]
pub struct Lifecycle {
    store: ConfigStore,
}

fn now_text() -> String {
    OffsetDateTime::now_utc()
        .format(&Rfc3339)
        .unwrap_or_default()
}

fn stamp() -> String {
    let t = OffsetDateTime::now_utc();
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}.{:06}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.microsecond()
    )
}

fn write_json(path: &Path, value: &impl Serialize) -> Result<(), String> {
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| e.to_string())?;
    // A temp file a killed writer left must not end up in an archive.
    atomic::sweep_stale_temps(path);
    atomic::write_durable_no_backup(path, &bytes, 0o600, FILE_POINTS).map_err(|e| e.to_string())?;
    Ok(())
}

/// Whether the workspace may be moved: not a symlink, not shared with another agent, inside
/// the install root.
fn workspace_action(root: &InstallRoot, config: &Config, alias: &AgentAlias) -> WorkspaceAction {
    let ws = root.agent_workspace(alias);
    for p in [root.agent_dir(alias), ws.clone()] {
        if fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink()) {
            let target = fs::canonicalize(&p).unwrap_or_default();
            return WorkspaceAction::Keep {
                reason: format!(
                    "{} is a link to {}; a workspace outside the install root is recorded, not moved",
                    p.display(),
                    target.display()
                ),
            };
        }
    }
    if let Ok(canon) = fs::canonicalize(&ws) {
        let root_canon = fs::canonicalize(root.root()).unwrap_or_default();
        if !canon.starts_with(&root_canon) {
            return WorkspaceAction::Keep {
                reason: format!("{} lies outside the install root", canon.display()),
            };
        }
        for (other, _) in config.agents() {
            if &other != alias
                && fs::canonicalize(root.agent_workspace(&other)).is_ok_and(|c| c == canon)
            {
                return WorkspaceAction::Keep {
                    reason: format!("{} is also the workspace of agent '{other}'", ws.display()),
                };
            }
        }
    }
    WorkspaceAction::Archive
}

fn check_live_acp(root: &InstallRoot, alias: &AgentAlias) -> Result<u64, String> {
    refs::live_acp(root, alias)
}

impl Lifecycle {
    pub fn new(store: ConfigStore) -> Self {
        Self { store }
    }

    pub fn root(&self) -> &InstallRoot {
        self.store.root()
    }

    /// Runs a blocking lifecycle step off the async workers.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Lifecycle, tokio::runtime::Handle) -> T + Send + 'static,
    ) -> Result<T, LifecycleError> {
        let me = self.clone();
        let handle = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            // One lifecycle operation at a time in this process (two requests must not converge
            // the same journal record at once); other processes are kept out by the
            // install-root lock, which the daemon or the CLI holds.
            let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
            f(&me, handle)
        })
        .await
        .map_err(|e| LifecycleError::Io(format!("lifecycle worker failed: {e}")))
    }

    /// `warren agents rename OLD NEW` / `POST /api/agents/{alias}/rename`.
    pub async fn rename(&self, from: &str, to: &str) -> Result<Report, LifecycleError> {
        let (from, to) = (from.to_string(), to.to_string());
        self.blocking(move |me, h| me.rename_blocking(&h, &from, &to))
            .await?
    }

    /// `warren agents delete ALIAS --yes` / `DELETE /api/agents/{alias}`.
    pub async fn delete(&self, alias: &str) -> Result<Report, LifecycleError> {
        let alias = alias.to_string();
        self.blocking(move |me, h| me.delete_blocking(&h, &alias))
            .await?
    }

    /// `warren agents delete ALIAS --dry-run` / `GET /api/agents/{alias}/delete-plan`.
    pub async fn delete_plan(&self, alias: &str) -> Result<DeletePlan, LifecycleError> {
        let alias = alias.to_string();
        self.blocking(move |me, h| me.plan_blocking(&h, &alias))
            .await?
    }

    /// `warren agents restore ARCHIVE [--as NEW]` / `POST /api/agents/restore`.
    pub async fn restore(
        &self,
        archive: &str,
        as_alias: Option<&str>,
    ) -> Result<Report, LifecycleError> {
        let (archive, as_alias) = (archive.to_string(), as_alias.map(str::to_string));
        self.blocking(move |me, h| me.restore_blocking(&h, &archive, as_alias.as_deref()))
            .await?
    }

    /// Converges every journaled operation (daemon start, before each lifecycle call).
    pub async fn converge_pending(&self) -> Vec<Report> {
        self.blocking(|me, h| me.converge_pending_blocking(&h))
            .await
            .unwrap_or_default()
    }

    fn journal_dir(&self) -> PathBuf {
        self.root().lifecycle_journal_dir()
    }

    /// Pending journal records, oldest first. Unreadable records are reported and skipped.
    pub fn pending(&self) -> Vec<(PathBuf, Result<Journal, String>)> {
        let mut out = Vec::new();
        let Ok(rd) = fs::read_dir(self.journal_dir()) else {
            return out;
        };
        let mut paths: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        paths.sort();
        for p in paths {
            let parsed = fs::read(&p)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice::<Journal>(&b).map_err(|e| e.to_string()));
            out.push((p, parsed));
        }
        out
    }

    fn converge_pending_blocking(&self, h: &tokio::runtime::Handle) -> Vec<Report> {
        let mut reports = Vec::new();
        for (path, journal) in self.pending() {
            match journal {
                Ok(j) => reports.push(self.converge(h, &path, &j)),
                Err(e) => tracing::error!(
                    path = %path.display(),
                    "unreadable lifecycle journal record (left in place): {e}"
                ),
            }
        }
        reports
    }

    /// Converges a pending journal matching `matches`, if any.
    fn resume_matching(
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
        let id = format!(
            "{}-{}",
            stamp(),
            match &op {
                Op::Rename { from, .. } => format!("rename-{from}"),
                Op::Delete { alias, .. } => format!("delete-{alias}"),
                Op::Restore { alias, .. } => format!("restore-{alias}"),
            }
        );
        let journal = Journal {
            schema_version: SCHEMA_VERSION,
            id: id.clone(),
            started_at: now_text(),
            config_before: self.config_hash(),
            op,
        };
        let dir = self.journal_dir();
        fs::create_dir_all(&dir)
            .map_err(|e| LifecycleError::Io(format!("cannot create {}: {e}", dir.display())))?;
        let path = dir.join(format!("{id}.json"));
        write_json(&path, &journal).map_err(|e| {
            LifecycleError::Io(format!(
                "cannot write the lifecycle journal {}: {e}",
                path.display()
            ))
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

    fn clear_journal(path: &Path) -> Result<(), String> {
        fs::remove_file(path).map_err(|e| format!("cannot clear {}: {e}", path.display()))?;
        if let Some(dir) = path.parent() {
            let _ = atomic::sync_dir(dir);
        }
        Ok(())
    }

    fn context(&self, h: &tokio::runtime::Handle, backend: MemoryBackendKind) -> StoreContext {
        StoreContext {
            root: self.root().clone(),
            config: Arc::new(self.store.snapshot().config().clone()),
            memory_backend: backend,
            handle: h.clone(),
        }
    }

    // ---- rename ------------------------------------------------------------------------------

    fn rename_blocking(
        &self,
        h: &tokio::runtime::Handle,
        from: &str,
        to: &str,
    ) -> Result<Report, LifecycleError> {
        // A retried rename converges what an earlier attempt left (LIFE-5).
        if let Some(report) = self.resume_matching(
            h,
            |op| matches!(op, Op::Rename { from: f, to: t, .. } if f == from && t == to),
        ) {
            return Ok(report);
        }
        let (from_a, to_a) = (alias(from)?, alias(to)?);
        if from_a == to_a {
            return Err(LifecycleError::Invalid(
                "the new alias must differ from the old one".into(),
            ));
        }
        let root = self.root().clone();
        let mut txn = self.store.write_blocking()?;
        let locked = std::time::Instant::now();
        let base = txn.base().clone();
        let Some(agent) = base.agent(&from_a) else {
            return Err(LifecycleError::NotFound(from.into()));
        };
        if base.agents.contains_key(to) {
            return Err(LifecycleError::Invalid(format!(
                "agent '{to}' already exists; choose another alias"
            )));
        }
        let backend = base.memory_backend_of(agent);
        let (old_ws, new_ws) = (root.agent_workspace(&from_a), root.agent_workspace(&to_a));
        if fs::read_dir(&new_ws).is_ok_and(|mut d| d.next().is_some()) {
            return Err(LifecycleError::Refused(format!(
                "the target workspace {} exists and is not empty; move its contents away first",
                new_ws.display()
            )));
        }
        let workspace = workspace_action(&root, &base, &from_a);
        let found = edit_rename(&mut txn, &base, from, to)?;
        let op = Op::Rename {
            from: from.into(),
            to: to.into(),
            memory_backend: backend,
            old_workspace: old_ws,
            new_workspace: new_ws,
            workspace,
        };
        let mut report = self.journal_persist_converge(h, txn, op, Some(locked))?;
        report.references = found.into_iter().map(|r| r.path).collect();
        Ok(report)
    }

    // ---- delete ------------------------------------------------------------------------------

    fn plan_blocking(
        &self,
        h: &tokio::runtime::Handle,
        name: &str,
    ) -> Result<DeletePlan, LifecycleError> {
        let a = alias(name)?;
        let snapshot = self.store.snapshot();
        let config = snapshot.config();
        let Some(agent) = config.agent(&a) else {
            return Err(LifecycleError::NotFound(name.into()));
        };
        let found = refs::collect(config, name);
        let (reasons, live) = refusals(self.root(), &found, &a);
        let (blockers, scrubs): (Vec<_>, Vec<_>) = found
            .into_iter()
            .partition(|r| r.strength == Strength::Hard);
        let ctx = self.context(h, config.memory_backend_of(agent));
        let stores = registered(&ctx)
            .iter()
            .map(|s| {
                let v = match s.count(&a) {
                    Ok(n) => json!(n),
                    Err(e) => json!({"error": e}),
                };
                (s.name().to_string(), v)
            })
            .collect();
        Ok(DeletePlan {
            alias: name.into(),
            allowed: reasons.is_empty(),
            blockers,
            scrubs,
            live_acp_sessions: live,
            workspace: self.root().agent_workspace(&a),
            workspace_action: workspace_action(self.root(), config, &a),
            stores,
            reasons,
        })
    }

    fn delete_blocking(
        &self,
        h: &tokio::runtime::Handle,
        name: &str,
    ) -> Result<Report, LifecycleError> {
        if let Some(report) = self.resume_matching(
            h,
            |op| matches!(op, Op::Delete { alias, .. } if alias == name),
        ) && !self.store.snapshot().agents.contains_key(name)
        {
            return Ok(report);
        }
        let a = alias(name)?;
        let root = self.root().clone();
        let mut txn = self.store.write_blocking()?;
        let locked = std::time::Instant::now();
        let base = txn.base().clone();
        let Some(agent) = base.agent(&a) else {
            return Err(LifecycleError::NotFound(name.into()));
        };
        let backend = base.memory_backend_of(agent);
        let found = refs::collect(&base, name);
        let (reasons, _) = refusals(&root, &found, &a);
        if !reasons.is_empty() {
            return Err(LifecycleError::Refused(format!(
                "cannot delete agent '{name}': {}",
                reasons.join("; ")
            )));
        }
        let workspace = workspace_action(&root, &base, &a);
        let mut archive = root
            .deleted_agents_dir()
            .join(format!("{name}-{}", stamp()));
        let mut n = 2;
        while archive.exists() {
            archive = root
                .deleted_agents_dir()
                .join(format!("{name}-{}-{n}", stamp()));
            n += 1;
        }
        let entry = edit_delete(&mut txn, &base, &found, name)?;
        let scrubbed: Vec<String> = found.iter().map(|r| r.path.clone()).collect();
        let op = Op::Delete {
            alias: name.into(),
            entry,
            memory_backend: backend,
            workspace_path: root.agent_workspace(&a),
            workspace,
            archive,
            scrubbed: scrubbed.clone(),
        };
        let mut report = self.journal_persist_converge(h, txn, op, Some(locked))?;
        report.references = scrubbed;
        Ok(report)
    }

    // ---- restore -----------------------------------------------------------------------------

    fn restore_blocking(
        &self,
        h: &tokio::runtime::Handle,
        archive_arg: &str,
        as_alias: Option<&str>,
    ) -> Result<Report, LifecycleError> {
        let _ = self.converge_pending_blocking(h);
        let root = self.root().clone();
        let archive = {
            let p = PathBuf::from(archive_arg);
            if p.is_dir() {
                p
            } else {
                root.deleted_agents_dir().join(archive_arg)
            }
        };
        let archive = fs::canonicalize(&archive).map_err(|e| {
            LifecycleError::NotFound(format!("archive {} ({e})", archive.display()))
        })?;
        if archive.join(RESTORED).exists() {
            return Err(LifecycleError::Refused(format!(
                "{} was already restored",
                archive.display()
            )));
        }
        let manifest = read_manifest(&archive)?;
        if manifest.schema_version != SCHEMA_VERSION {
            return Err(LifecycleError::Refused(format!(
                "{}: schema_version {} is not {SCHEMA_VERSION}",
                archive.join(MANIFEST).display(),
                manifest.schema_version
            )));
        }
        let actual = fsops::checksums(&archive, &[MANIFEST, RESTORED])
            .map_err(|e| LifecycleError::Io(e.to_string()))?;
        if actual != manifest.files {
            let mut diffs = Vec::new();
            for (k, v) in &manifest.files {
                match actual.get(k) {
                    None => diffs.push(format!("{k} is missing")),
                    Some(a) if a != v => diffs.push(format!("{k} does not match its checksum")),
                    _ => {}
                }
            }
            for k in actual.keys() {
                if !manifest.files.contains_key(k) {
                    diffs.push(format!("{k} is not in the manifest"));
                }
            }
            diffs.truncate(5);
            return Err(LifecycleError::Refused(format!(
                "{} does not match its manifest: {}",
                archive.display(),
                diffs.join("; ")
            )));
        }
        if !manifest.warnings.is_empty() || !manifest.complete {
            return Err(LifecycleError::Refused(format!(
                "{} is incomplete (its delete did not converge): {}",
                archive.display(),
                manifest.warnings.join("; ")
            )));
        }
        let target = as_alias.unwrap_or(&manifest.alias).to_string();
        let a = alias(&target)?;
        let mut txn = self.store.write_blocking()?;
        if txn.base().agents.contains_key(&target) {
            return Err(LifecycleError::Refused(format!(
                "agent '{target}' exists; restore with --as NEW_ALIAS"
            )));
        }
        let ws = root.agent_workspace(&a);
        if fs::read_dir(&ws).is_ok_and(|mut d| d.next().is_some()) {
            return Err(LifecycleError::Refused(format!(
                "the workspace {} exists and is not empty",
                ws.display()
            )));
        }
        txn.set_item_text(&refs::agent_key(&target), &manifest.config_entry)?;
        txn.preview()?;
        let op = Op::Restore {
            alias: target.clone(),
            original: manifest.alias.clone(),
            memory_backend: manifest.memory_backend,
            archive: archive.clone(),
            archived_workspace: manifest.workspace_path.clone(),
            workspace_path: ws,
        };
        let mut report = self.journal_persist_converge(h, txn, op, None)?;
        // Grants other agents had on the deleted agent belong to their entries: a restore does
        // not hand access back on its own, it names what the delete removed.
        if !manifest.scrubbed_references.is_empty() {
            report.warnings.push(format!(
                "the delete of '{}' removed these references to it from other agents, and the restore does not add them back: {}; re-add the ones still wanted in config.toml",
                manifest.alias,
                manifest.scrubbed_references.join(", ")
            ));
            report.references = manifest.scrubbed_references;
        }
        Ok(report)
    }

    /// LIFE-2: writes the journal record durably, then persists the config change (which
    /// releases the config write lock), then runs the side effects. A failed save drops the
    /// record: nothing happened. `locked` (when the lock was taken) feeds the report's
    /// lock-held and persist timings.
    fn journal_persist_converge(
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

    // ---- convergence -------------------------------------------------------------------------

    /// Runs (or re-runs) the side effects of a journaled operation; clears the record when
    /// every follower converged.
    fn converge(&self, h: &tokio::runtime::Handle, path: &Path, journal: &Journal) -> Report {
        // A crash between the journal and the config save: roll the config step forward (the
        // journal holds the whole intent), or drop the record if it can no longer be applied.
        if !committed(self.store.snapshot().config(), &journal.op)
            && let Err(e) = self.recommit(&journal.op, &journal.config_before)
        {
            let mut report = Report {
                op: op_name(&journal.op).into(),
                alias: op_alias(&journal.op).into(),
                converged: true,
                ..Report::default()
            };
            report.warnings.push(format!(
                "the operation was interrupted before its config change was saved and cannot \
                 be redone ({e}); nothing was changed and the journal record was dropped"
            ));
            if let Err(e) = Self::clear_journal(path) {
                report.warnings.push(e);
                report.converged = false;
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
                report.warnings.push(e);
                report.converged = false;
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
        let trace = crate::trace::Trace::new(self.root(), self.store.snapshot().config());
        trace.emit(
            "lifecycle",
            &report.alias,
            None,
            serde_json::to_value(&report).unwrap_or(Value::Null),
        );
        report
    }

    /// Redoes the config step of a journaled operation whose save never happened.
    fn recommit(&self, op: &Op, config_before: &str) -> Result<(), LifecycleError> {
        let mut txn = self.store.write_blocking()?;
        if self.config_hash() != config_before {
            return Err(LifecycleError::Refused(
                "config.toml changed since the operation started (was the agent re-created?)"
                    .into(),
            ));
        }
        let base = txn.base().clone();
        match op {
            Op::Rename { from, to, .. } => {
                if !base.agents.contains_key(from) || base.agents.contains_key(to) {
                    return Err(LifecycleError::Refused(format!(
                        "config no longer has '{from}' without '{to}'"
                    )));
                }
                edit_rename(&mut txn, &base, from, to)?;
            }
            Op::Delete { alias: name, .. } => {
                let found = refs::collect(&base, name);
                let (reasons, _) = refusals(self.root(), &found, &alias(name)?);
                if !reasons.is_empty() {
                    return Err(LifecycleError::Refused(reasons.join("; ")));
                }
                edit_delete(&mut txn, &base, &found, name)?;
            }
            Op::Restore {
                alias: name,
                archive,
                ..
            } => {
                let manifest = read_manifest(archive)?;
                txn.set_item_text(&refs::agent_key(name), &manifest.config_entry)?;
                txn.preview()?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    fn converge_rename(&self, h: &tokio::runtime::Handle, op: &Op) -> Report {
        let Op::Rename {
            from,
            to,
            memory_backend,
            old_workspace,
            new_workspace,
            workspace,
        } = op
        else {
            return Report::default();
        };
        let mut report = Report {
            op: "rename".into(),
            alias: from.clone(),
            to: Some(to.clone()),
            converged: true,
            ..Report::default()
        };
        let (Ok(fa), Ok(ta)) = (AgentAlias::new(from.as_str()), AgentAlias::new(to.as_str()))
        else {
            report
                .warnings
                .push("journal names an invalid alias".into());
            report.converged = false;
            return report;
        };
        match workspace {
            WorkspaceAction::Archive => match fsops::move_dir(old_workspace, new_workspace) {
                Ok(_) => {
                    if let Some(parent) = old_workspace.parent() {
                        fsops::remove_if_empty(parent);
                    }
                }
                Err(e) => {
                    report.warnings.push(format!("workspace move failed: {e}"));
                    report.converged = false;
                }
            },
            WorkspaceAction::Keep { reason } => report
                .warnings
                .push(format!("workspace not moved: {reason}")),
        }
        crash_point("lifecycle-after-workspace");
        let ws = WorkspaceMove {
            from: old_workspace.clone(),
            to: new_workspace.clone(),
        };
        let ctx = self.context(h, *memory_backend);
        for store in registered(&ctx) {
            match store.rename(&fa, &ta, &ws) {
                Ok(n) => {
                    report.counts.insert(store.name().into(), n);
                }
                Err(e) => {
                    report.warnings.push(format!(
                        "{}: rename '{from}' -> '{to}' failed: {e}",
                        store.name()
                    ));
                    report.converged = false;
                }
            }
            crash_point(&format!("lifecycle-after-{}", store.name()));
        }
        report
    }

    fn converge_delete(&self, h: &tokio::runtime::Handle, op: &Op) -> Report {
        let Op::Delete {
            alias: name,
            entry,
            memory_backend,
            workspace_path,
            workspace,
            archive,
            scrubbed,
        } = op
        else {
            return Report::default();
        };
        let mut report = Report {
            op: "delete".into(),
            alias: name.clone(),
            archive: Some(archive.clone()),
            converged: true,
            ..Report::default()
        };
        let Ok(a) = AgentAlias::new(name.as_str()) else {
            report
                .warnings
                .push("journal names an invalid alias".into());
            report.converged = false;
            return report;
        };
        let stores_dir = archive.join("stores");
        if let Err(e) = fs::create_dir_all(&stores_dir) {
            report.warnings.push(format!(
                "cannot create the archive {}: {e}; nothing was archived or purged",
                archive.display()
            ));
            report.converged = false;
            return report;
        }
        let mut notes = Vec::new();
        let mut workspace_archived = false;
        match workspace {
            WorkspaceAction::Archive => {
                match fsops::move_dir(workspace_path, &archive.join("workspace")) {
                    Ok(m) => {
                        workspace_archived = m != Moved::Nothing;
                        if let Some(parent) = workspace_path.parent() {
                            fsops::remove_if_empty(parent);
                        }
                    }
                    Err(e) => {
                        report.warnings.push(format!("workspace not archived: {e}"));
                        report.converged = false;
                    }
                }
            }
            WorkspaceAction::Keep { reason } => {
                notes.push(format!(
                    "workspace {} kept in place: {reason}",
                    workspace_path.display()
                ));
            }
        }
        crash_point("lifecycle-after-workspace");
        let ctx = self.context(h, *memory_backend);
        for store in registered(&ctx) {
            let name = store.name();
            let file = stores_dir.join(format!("{name}.json"));
            let count = if file.exists() {
                // Written by an interrupted run of this delete: its count is in the file.
                fs::read(&file)
                    .ok()
                    .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                    .and_then(|v| v["count"].as_u64())
                    .unwrap_or(0)
            } else {
                let exported = store.export(&a).and_then(|(count, items)| {
                    write_json(
                        &file,
                        &json!({"store": name, "alias": a, "count": count, "items": items}),
                    )
                    .map(|()| count)
                });
                match exported {
                    Ok(count) => count,
                    Err(e) => {
                        report.warnings.push(format!(
                            "{name}: export failed ({e}); this store was left untouched"
                        ));
                        report.converged = false;
                        continue;
                    }
                }
            };
            crash_point(&format!("lifecycle-after-export-{name}"));
            // Purge only after the export is durably written (LIFE-4).
            if let Err(e) = store.purge(&a) {
                report.warnings.push(format!(
                    "{name}: purge failed ({e}); its export is archived"
                ));
                report.converged = false;
            }
            crash_point(&format!("lifecycle-after-{name}"));
            report.counts.insert(name.into(), count);
        }
        let files = match fsops::checksums(archive, &[MANIFEST, RESTORED]) {
            Ok(f) => f,
            Err(e) => {
                report
                    .warnings
                    .push(format!("cannot checksum the archive: {e}"));
                report.converged = false;
                BTreeMap::new()
            }
        };
        let manifest = Manifest {
            schema_version: SCHEMA_VERSION,
            alias: name.clone(),
            deleted_at: now_text(),
            config_entry: entry.clone(),
            memory_backend: *memory_backend,
            workspace_path: workspace_path.clone(),
            workspace_archived,
            scrubbed_references: scrubbed.clone(),
            counts: report.counts.clone(),
            warnings: report.warnings.clone(),
            notes: notes.clone(),
            complete: report.converged,
            files,
        };
        if let Err(e) = write_json(&archive.join(MANIFEST), &manifest) {
            report.warnings.push(format!(
                "cannot write {}: {e}",
                archive.join(MANIFEST).display()
            ));
            report.converged = false;
        }
        crash_point("lifecycle-after-manifest");
        report.warnings.extend(notes);
        report
    }

    fn converge_restore(&self, h: &tokio::runtime::Handle, op: &Op) -> Report {
        let Op::Restore {
            alias: name,
            original,
            memory_backend,
            archive,
            archived_workspace,
            workspace_path,
        } = op
        else {
            return Report::default();
        };
        let mut report = Report {
            op: "restore".into(),
            alias: name.clone(),
            archive: Some(archive.clone()),
            converged: true,
            ..Report::default()
        };
        let (Ok(a), Ok(orig)) = (
            AgentAlias::new(name.as_str()),
            AgentAlias::new(original.as_str()),
        ) else {
            report
                .warnings
                .push("journal names an invalid alias".into());
            report.converged = false;
            return report;
        };
        if let Err(e) = fsops::move_dir(&archive.join("workspace"), workspace_path) {
            report.warnings.push(format!("workspace not restored: {e}"));
            report.converged = false;
        }
        crash_point("lifecycle-after-workspace");
        let ws = WorkspaceMove {
            from: archived_workspace.clone(),
            to: workspace_path.clone(),
        };
        let ctx = self.context(h, *memory_backend);
        for store in registered(&ctx) {
            let file = archive
                .join("stores")
                .join(format!("{}.json", store.name()));
            let data = match fs::read(&file) {
                Ok(b) => serde_json::from_slice::<Value>(&b).map_err(|e| e.to_string()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    crash_point(&format!("lifecycle-after-{}", store.name()));
                    continue;
                }
                Err(e) => Err(e.to_string()),
            };
            match data.and_then(|v| store.restore(&a, &orig, v["items"].clone(), &ws)) {
                Ok(n) => {
                    report.counts.insert(store.name().into(), n);
                }
                Err(e) => {
                    report
                        .warnings
                        .push(format!("{}: restore failed: {e}", store.name()));
                    report.converged = false;
                }
            }
            crash_point(&format!("lifecycle-after-{}", store.name()));
        }
        if report.converged
            && let Err(e) = write_json(
                &archive.join(RESTORED),
                &json!({"restored_as": name, "restored_at": now_text()}),
            )
        {
            report
                .warnings
                .push(format!("cannot mark the archive restored: {e}"));
            report.converged = false;
        }
        report
    }
}

fn read_manifest(archive: &Path) -> Result<Manifest, LifecycleError> {
    fs::read(archive.join(MANIFEST))
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
        .map_err(|e| {
            LifecycleError::Refused(format!(
                "{}: manifest unreadable ({e}); the archive cannot be verified",
                archive.join(MANIFEST).display()
            ))
        })
}

/// Whether the config already shows the operation's change.
fn committed(config: &Config, op: &Op) -> bool {
    match op {
        Op::Rename { from, to, .. } => {
            !config.agents.contains_key(from) && config.agents.contains_key(to)
        }
        Op::Delete { alias, .. } => !config.agents.contains_key(alias),
        Op::Restore { alias, .. } => config.agents.contains_key(alias),
    }
}

fn op_name(op: &Op) -> &'static str {
    match op {
        Op::Rename { .. } => "rename",
        Op::Delete { .. } => "delete",
        Op::Restore { .. } => "restore",
    }
}

fn op_alias(op: &Op) -> &str {
    match op {
        Op::Rename { from, .. } => from,
        Op::Delete { alias, .. } | Op::Restore { alias, .. } => alias,
    }
}

/// The config edit of a rename: move the entry, rewrite every reference, re-walk.
fn edit_rename(
    txn: &mut WriteTxn<'_>,
    base: &Config,
    from: &str,
    to: &str,
) -> Result<Vec<RefSite>, LifecycleError> {
    let found = refs::collect(base, from);
    let entry = txn
        .item_text(&refs::agent_key(from))
        .ok_or_else(|| LifecycleError::NotFound(from.into()))?;
    txn.remove(&refs::agent_key(from))?;
    txn.set_item_text(&refs::agent_key(to), &entry)?;
    refs::apply(txn, base, &found, from, Some(to))?;
    let after = txn.preview()?;
    let left = refs::collect(after, from);
    if !left.is_empty() || after.agents.contains_key(from) || !after.agents.contains_key(to) {
        return Err(LifecycleError::Refused(format!(
            "post-condition failed: references to '{from}' remain ({}); nothing was saved",
            left.iter()
                .map(|r| r.path.clone())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(found)
}

/// Why a delete of `a` is refused (LIFE-4): hard config references among `found` and live ACP
/// sessions, failing closed when the ACP store cannot be read. Also the live-session count
/// (`None`: unreadable).
fn refusals(root: &InstallRoot, found: &[RefSite], a: &AgentAlias) -> (Vec<String>, Option<u64>) {
    let mut reasons: Vec<String> = found
        .iter()
        .filter(|r| r.strength == Strength::Hard)
        .map(|r| format!("{} (hard config reference)", r.path))
        .collect();
    let live = match check_live_acp(root, a) {
        Ok(0) => Some(0),
        Ok(n) => {
            reasons.push(format!(
                "{n} live ACP session(s); close the editor's session, or end stored ones with `warren acp -a {a} --end-sessions`"
            ));
            Some(n)
        }
        Err(e) => {
            reasons.push(format!(
                "cannot verify live ACP sessions ({e}); refusing (fail closed)"
            ));
            None
        }
    };
    (reasons, live)
}

/// The config edit of a delete: remove the entry, scrub soft references, re-walk. Returns the
/// removed entry as TOML.
fn edit_delete(
    txn: &mut WriteTxn<'_>,
    base: &Config,
    found: &[RefSite],
    name: &str,
) -> Result<String, LifecycleError> {
    let entry = txn
        .item_text(&refs::agent_key(name))
        .ok_or_else(|| LifecycleError::NotFound(name.into()))?;
    txn.remove(&refs::agent_key(name))?;
    refs::apply(txn, base, found, name, None)?;
    let after = txn.preview()?;
    let left = refs::collect(after, name);
    if !left.is_empty() || after.agents.contains_key(name) {
        return Err(LifecycleError::Refused(format!(
            "post-condition failed: references to '{name}' remain ({}); nothing was saved",
            left.iter()
                .map(|r| r.path.clone())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(entry)
}

/// `manifest.json` of a delete archive.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub schema_version: u32,
    pub alias: String,
    pub deleted_at: String,
    /// The removed `[agents.<alias>]` entry (TOML).
    pub config_entry: String,
    pub memory_backend: MemoryBackendKind,
    /// Where the workspace was.
    pub workspace_path: PathBuf,
    pub workspace_archived: bool,
    pub scrubbed_references: Vec<String>,
    /// Records archived per store.
    pub counts: BTreeMap<String, u64>,
    /// Failures: a store whose export failed was left untouched.
    pub warnings: Vec<String>,
    /// Things recorded rather than done (a workspace kept in place).
    pub notes: Vec<String>,
    /// Every follower converged when this manifest was written.
    pub complete: bool,
    /// SHA-256 of every archived file (relative path → hex); restore refuses on a mismatch.
    pub files: BTreeMap<String, String>,
}
