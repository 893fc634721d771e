//! Restore (BEYOND-1): a delete archive comes back — under its alias or `--as NEW` — only when
//! every archived file matches the SHA-256 its manifest recorded and the delete converged;
//! then the config entry returns, the workspace moves back and every store re-imports its
//! export (attribution rewritten to the new alias), and `restored.json` marks the archive.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use warren_config::InstallRoot;
use warren_config::failpoint::crash_point;

use super::delete::{MANIFEST, Manifest, RESTORED, archive_checksums, is_archive_temp};
use super::error::{LifecycleError, read_json};
use super::journal::{Op, RESTORED_POINTS, SCHEMA_VERSION, write_json};
use super::registered;
use super::store_error::ShareError;
use super::stores::WorkspaceMove;
use super::{Lifecycle, Report, fsops, now_text, refs};
use warren_core::AgentAlias;

/// Reads and parses an archive's manifest.
pub(crate) fn read_manifest(archive: &Path) -> Result<Manifest, LifecycleError> {
    let path = archive.join(MANIFEST);
    read_json(&path).map_err(|reason| LifecycleError::ManifestUnreadable { path, reason })
}

/// One delete archive, as a restore list shows it.
#[derive(Debug)]
pub struct ArchiveListing {
    /// The archive's directory name: what a restore takes.
    pub name: String,
    pub path: PathBuf,
    /// Its manifest, or why it cannot be read (the error names the file).
    pub manifest: Result<Manifest, LifecycleError>,
    /// A `restored.json` marks it as restored already.
    pub restored: bool,
}

/// The delete archives a restore can name, newest first, those with an unreadable manifest
/// last. A directory without a manifest is a delete still under way and is left out; no
/// archive directory yet is no archive.
pub fn list_archives(root: &InstallRoot) -> Result<Vec<ArchiveListing>, LifecycleError> {
    let dir = root.deleted_agents_dir();
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(cause) => return Err(LifecycleError::Io { path: dir, cause }),
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if !entry.file_type().is_ok_and(|t| t.is_dir())
            || path.join(MANIFEST).try_exists().is_ok_and(|e| !e)
        {
            continue;
        }
        out.push(ArchiveListing {
            name: entry.file_name().to_string_lossy().into_owned(),
            manifest: read_manifest(&path),
            restored: path.join(RESTORED).exists(),
            path,
        });
    }
    let deleted_at = |a: &ArchiveListing| a.manifest.as_ref().ok().map(|m| m.deleted_at.clone());
    out.sort_by_key(|a| std::cmp::Reverse(deleted_at(a)));
    Ok(out)
}

/// Checks an archive against its manifest: schema, every checksum, a converged delete.
fn verify(archive: &Path, manifest: &Manifest) -> Result<(), LifecycleError> {
    if manifest.schema_version != SCHEMA_VERSION {
        return Err(LifecycleError::SchemaVersion {
            path: archive.join(MANIFEST),
            found: manifest.schema_version,
            expected: SCHEMA_VERSION,
        });
    }
    let actual = archive_checksums(archive).map_err(|cause| LifecycleError::Io {
        path: archive.to_path_buf(),
        cause,
    })?;
    // A manifest written by an older `resume` may list a killed writer's temp file, which is
    // no archived data (issue 15 §2): it is not asked for.
    let mut wanted = manifest.files.clone();
    wanted.retain(|rel, _| !is_archive_temp(rel));
    if actual != wanted {
        let mut diffs = Vec::new();
        for (k, v) in &wanted {
            match actual.get(k) {
                None => diffs.push(format!("{k} is missing")),
                Some(a) if a != v => diffs.push(format!("{k} does not match its checksum")),
                _ => {}
            }
        }
        for k in actual.keys() {
            if !wanted.contains_key(k) {
                diffs.push(format!("{k} is not in the manifest"));
            }
        }
        diffs.truncate(5);
        return Err(LifecycleError::ArchiveMismatch {
            archive: archive.to_path_buf(),
            diffs,
        });
    }
    if !manifest.warnings.is_empty() || !manifest.complete {
        return Err(LifecycleError::ArchiveIncomplete {
            archive: archive.to_path_buf(),
            warnings: manifest.warnings.clone(),
        });
    }
    Ok(())
}

impl Lifecycle {
    pub(crate) fn restore_blocking(
        &self,
        h: &tokio::runtime::Handle,
        archive_arg: &str,
        as_alias: Option<&AgentAlias>,
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
        let archive =
            fs::canonicalize(&archive).map_err(|cause| LifecycleError::ArchiveNotFound {
                path: archive.clone(),
                cause,
            })?;
        if archive.join(RESTORED).exists() {
            return Err(LifecycleError::AlreadyRestored { archive });
        }
        super::journal::sweep_dir(&archive);
        super::journal::sweep_dir(&archive.join("stores"));
        let manifest = read_manifest(&archive)?;
        verify(&archive, &manifest)?;
        let a = match as_alias {
            Some(other) => other.clone(),
            None => manifest.alias.clone(),
        };
        let mut txn = self.store.write_blocking()?;
        if txn.base().agents.contains_key(&a) {
            return Err(LifecycleError::RestoreTargetExists {
                alias: a.to_string(),
            });
        }
        let ws = root.agent_workspace(&a);
        if fsops::holds_content(&ws) {
            return Err(LifecycleError::WorkspaceNotEmpty { path: ws });
        }
        txn.set_item_text(&refs::agent_key(a.as_str()), &manifest.config_entry)?;
        txn.preview()?;
        let op = Op::Restore {
            alias: a,
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

    pub(crate) fn converge_restore(&self, h: &tokio::runtime::Handle, op: &Op) -> Report {
        let Op::Restore {
            alias: a,
            original,
            memory_backend,
            archive,
            archived_workspace,
            workspace_path,
        } = op
        else {
            return Report::new(op.name(), op.alias());
        };
        let mut report = Report::new("restore", a);
        report.archive = Some(archive.clone());
        if let Err(e) = fsops::move_dir(&archive.join("workspace"), workspace_path) {
            report.fail(format!("workspace not restored: {e}"));
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
            let restored = match fs::read(&file) {
                Ok(b) => match serde_json::from_slice::<Value>(&b) {
                    Ok(v) => store
                        .restore(a, original, v["items"].clone(), &ws)
                        .map_err(ShareError::from),
                    Err(cause) => Err(ShareError::Parse {
                        path: file.clone(),
                        cause,
                    }),
                },
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    crash_point(&format!("lifecycle-after-{}", store.name()));
                    continue;
                }
                Err(cause) => Err(ShareError::Read {
                    path: file.clone(),
                    cause,
                }),
            };
            match restored {
                Ok(n) => {
                    report.counts.insert(store.name().into(), n);
                }
                Err(e) => report.fail(format!("{}: restore failed: {e}", store.name())),
            }
            crash_point(&format!("lifecycle-after-{}", store.name()));
        }
        if report.converged
            && let Err(e) = write_json(
                &archive.join(RESTORED),
                &json!({"restored_as": a, "restored_at": now_text()}),
                RESTORED_POINTS,
            )
        {
            report.fail(format!("cannot mark the archive restored: {e}"));
        }
        report
    }
}
