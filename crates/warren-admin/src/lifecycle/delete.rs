//! Delete (LIFE-4, BEYOND-1): refused on a hard reference or a live ACP session (failing closed
//! when the ACP store cannot be read); otherwise the config entry goes and soft references are
//! scrubbed in one save, then the workspace and every store's records are archived under
//! `data/deleted-agents/<alias>-<stamp>/` — each export durably written before its purge —
//! and a manifest with the SHA-256 of every archived file is written last.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use warren_config::failpoint::crash_point;
use warren_config::schema::MemoryBackendKind;
use warren_config::{Config, InstallRoot, WriteTxn};
use warren_core::AgentAlias;

use super::error::LifecycleError;
use super::fsops::{self, Moved};
use super::journal::{
    MANIFEST_POINTS, Op, SCHEMA_VERSION, WorkspaceAction, export_points, temp_target, write_json,
};
use super::refs::{self, RefSite, Strength};
use super::registered;
use super::store_error::ShareError;
use super::stores::StoreContext;
use super::{Lifecycle, Report, now_text, stamp};

pub(crate) const MANIFEST: &str = "manifest.json";
pub(crate) const RESTORED: &str = "restored.json";

/// The preview of a delete (`--dry-run`, `GET /api/agents/{alias}/delete-plan`).
#[derive(Debug, Clone, Serialize)]
pub struct DeletePlan {
    pub alias: AgentAlias,
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

/// `manifest.json` of a delete archive.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub schema_version: u32,
    pub alias: AgentAlias,
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

/// Whether `rel` (a path inside an archive) is a temp file of an atomic write in one of the
/// archive's own directories (top level, `stores/`): never archived data (issue 15 §2).
pub(crate) fn is_archive_temp(rel: &str) -> bool {
    let (dir, name) = rel.rsplit_once('/').unwrap_or(("", rel));
    (dir.is_empty() || dir == "stores") && temp_target(name).is_some()
}

/// SHA-256 of every archived file (manifest and restore marker excluded, temp files of
/// atomic writes excluded: a killed writer's leftover is not part of the archive).
pub(crate) fn archive_checksums(archive: &Path) -> std::io::Result<BTreeMap<String, String>> {
    let mut files = fsops::checksums(archive, &[MANIFEST, RESTORED])?;
    files.retain(|rel, _| !is_archive_temp(rel));
    Ok(files)
}

/// Whether the workspace may be moved: not a symlink, not shared with another agent, inside
/// the install root.
pub(crate) fn workspace_action(
    root: &InstallRoot,
    config: &Config,
    alias: &AgentAlias,
) -> WorkspaceAction {
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

/// Why a delete of `a` is refused (LIFE-4): hard config references among `found` and live ACP
/// sessions, failing closed when the ACP store cannot be read. Also the live-session count
/// (`None`: unreadable).
pub(crate) fn refusals(
    ctx: &StoreContext,
    found: &[RefSite],
    a: &AgentAlias,
) -> (Vec<String>, Option<u64>) {
    let mut reasons: Vec<String> = found
        .iter()
        .filter(|r| r.strength == Strength::Hard)
        .map(|r| format!("{} (hard config reference)", r.path))
        .collect();
    reasons.extend(refs::sop_refusals(&ctx.root, a));
    let live = match refs::live_acp(ctx, a) {
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
pub(crate) fn edit_delete(
    txn: &mut WriteTxn<'_>,
    base: &Config,
    found: &[RefSite],
    name: &AgentAlias,
) -> Result<String, LifecycleError> {
    let entry = txn
        .item_text(&refs::agent_key(name.as_str()))
        .ok_or_else(|| LifecycleError::AgentNotFound {
            alias: name.to_string(),
        })?;
    txn.remove(&refs::agent_key(name.as_str()))?;
    refs::apply(txn, base, found, name.as_str(), None)?;
    let after = txn.preview()?;
    let left = refs::collect(after, name.as_str());
    if !left.is_empty() || after.agents.contains_key(name.as_str()) {
        return Err(LifecycleError::ReferencesRemain {
            alias: name.to_string(),
            left: left.into_iter().map(|r| r.path).collect(),
        });
    }
    Ok(entry)
}

impl Lifecycle {
    pub(crate) fn plan_blocking(
        &self,
        h: &tokio::runtime::Handle,
        a: &AgentAlias,
    ) -> Result<DeletePlan, LifecycleError> {
        let snapshot = self.store.snapshot();
        let config = snapshot.config();
        let Some(agent) = config.agent(a) else {
            return Err(LifecycleError::AgentNotFound {
                alias: a.to_string(),
            });
        };
        let found = refs::collect(config, a.as_str());
        let ctx = self.context(h, config.memory_backend_of(agent));
        let (reasons, live) = refusals(&ctx, &found, a);
        let (blockers, scrubs): (Vec<_>, Vec<_>) = found
            .into_iter()
            .partition(|r| r.strength == Strength::Hard);
        let stores = registered(&ctx)
            .iter()
            .map(|s| {
                let v = match s.count(a) {
                    Ok(n) => json!(n),
                    Err(e) => json!({"error": e.to_string()}),
                };
                (s.name().to_string(), v)
            })
            .collect();
        Ok(DeletePlan {
            workspace: self.root().agent_workspace(a),
            workspace_action: workspace_action(self.root(), config, a),
            alias: a.clone(),
            allowed: reasons.is_empty(),
            blockers,
            scrubs,
            live_acp_sessions: live,
            stores,
            reasons,
        })
    }

    pub(crate) fn delete_blocking(
        &self,
        h: &tokio::runtime::Handle,
        a: &AgentAlias,
    ) -> Result<Report, LifecycleError> {
        if let Some(report) =
            self.resume_matching(h, |op| matches!(op, Op::Delete { alias, .. } if alias == a))
            && !self.store.snapshot().agents.contains_key(a)
        {
            return Ok(report);
        }
        let name = a.as_str();
        let root = self.root().clone();
        let mut txn = self.store.write_blocking()?;
        let locked = std::time::Instant::now();
        let base = txn.base().clone();
        let Some(agent) = base.agent(a) else {
            return Err(LifecycleError::AgentNotFound { alias: name.into() });
        };
        let backend = base.memory_backend_of(agent);
        let found = refs::collect(&base, name);
        let (reasons, _) = refusals(&self.context(h, backend), &found, a);
        if !reasons.is_empty() {
            return Err(LifecycleError::DeleteRefused {
                alias: name.into(),
                reasons,
            });
        }
        let workspace = workspace_action(&root, &base, a);
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
        let entry = edit_delete(&mut txn, &base, &found, a)?;
        let scrubbed: Vec<String> = found.iter().map(|r| r.path.clone()).collect();
        let op = Op::Delete {
            workspace_path: root.agent_workspace(a),
            alias: a.clone(),
            entry,
            memory_backend: backend,
            workspace,
            archive,
            scrubbed: scrubbed.clone(),
        };
        let mut report = self.journal_persist_converge(h, txn, op, Some(locked))?;
        report.references = scrubbed;
        Ok(report)
    }

    pub(crate) fn converge_delete(&self, h: &tokio::runtime::Handle, op: &Op) -> Report {
        let Op::Delete {
            alias: a,
            entry,
            memory_backend,
            workspace_path,
            workspace,
            archive,
            scrubbed,
        } = op
        else {
            return Report::new(op.name(), op.alias());
        };
        let mut report = Report::new("delete", a);
        report.archive = Some(archive.clone());
        let stores_dir = archive.join("stores");
        if let Err(e) = fs::create_dir_all(&stores_dir) {
            report.fail(format!(
                "cannot create the archive {}: {e}; nothing was archived or purged",
                archive.display()
            ));
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
                    Err(e) => report.fail(format!("workspace not archived: {e}")),
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
                let failed =
                    store
                        .export(a)
                        .map_err(ShareError::from)
                        .and_then(|(count, items)| {
                            write_json(
                                &file,
                                &json!({"store": name, "alias": a, "count": count, "items": items}),
                                export_points(name),
                            )
                            .map(|()| count)
                            .map_err(|cause| ShareError::Write {
                                path: file.clone(),
                                cause,
                            })
                        });
                match failed {
                    Ok(count) => count,
                    Err(e) => {
                        report.fail(format!(
                            "{name}: export failed ({e}); this store was left untouched"
                        ));
                        continue;
                    }
                }
            };
            crash_point(&format!("lifecycle-after-export-{name}"));
            // Purge only after the export is durably written (LIFE-4).
            if let Err(e) = store.purge(a) {
                report.fail(format!(
                    "{name}: purge failed ({e}); its export is archived"
                ));
            }
            crash_point(&format!("lifecycle-after-{name}"));
            report.counts.insert(name.into(), count);
        }
        // A temp file a killed run left is not archived data: swept (its writer is dead) and
        // never hashed into the manifest (issue 15 §2).
        super::journal::sweep_dir(archive);
        super::journal::sweep_dir(&stores_dir);
        let files = match archive_checksums(archive) {
            Ok(f) => f,
            Err(e) => {
                report.fail(format!("cannot checksum the archive: {e}"));
                BTreeMap::new()
            }
        };
        let manifest = Manifest {
            schema_version: SCHEMA_VERSION,
            alias: a.clone(),
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
        if let Err(e) = write_json(&archive.join(MANIFEST), &manifest, MANIFEST_POINTS) {
            report.fail(format!(
                "cannot write {}: {e}",
                archive.join(MANIFEST).display()
            ));
        }
        crash_point("lifecycle-after-manifest");
        report.warnings.extend(notes);
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_temp_files_of_the_archive_s_own_directories_are_left_out() {
        assert!(is_archive_temp(".manifest.json.tmp-1-2"));
        assert!(is_archive_temp("stores/.memory.json.tmp-1-2"));
        assert!(!is_archive_temp("stores/memory.json"));
        // An agent's own file of that shape is workspace data.
        assert!(!is_archive_temp("workspace/.notes.txt.tmp-1-2"));
    }
}
