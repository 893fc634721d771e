//! Rename (LIFE-3): the config entry and every reference to the agent move to the new alias in
//! one config save; then the workspace moves and every store rewrites its owner, attribution
//! and `cwd` fields ([`super::stores`]), each step idempotent so a retry converges.

use warren_config::failpoint::crash_point;
use warren_config::{Config, WriteTxn};
use warren_core::AgentAlias;

use super::delete::workspace_action;
use super::error::LifecycleError;
use super::journal::{Op, WorkspaceAction};
use super::refs::{self, RefSite};
use super::registered;
use super::stores::WorkspaceMove;
use super::{Lifecycle, Report, fsops};

/// The config edit of a rename: move the entry, rewrite every reference, re-walk.
pub(crate) fn edit_rename(
    txn: &mut WriteTxn<'_>,
    base: &Config,
    from: &AgentAlias,
    to: &AgentAlias,
) -> Result<Vec<RefSite>, LifecycleError> {
    let found = refs::collect(base, from.as_str());
    let entry = txn
        .item_text(&refs::agent_key(from.as_str()))
        .ok_or_else(|| LifecycleError::AgentNotFound {
            alias: from.to_string(),
        })?;
    txn.remove(&refs::agent_key(from.as_str()))?;
    txn.set_item_text(&refs::agent_key(to.as_str()), &entry)?;
    refs::apply(txn, base, &found, from.as_str(), Some(to.as_str()))?;
    let after = txn.preview()?;
    let left = refs::collect(after, from.as_str());
    if !left.is_empty() || after.agents.contains_key(from) || !after.agents.contains_key(to) {
        return Err(LifecycleError::ReferencesRemain {
            alias: from.to_string(),
            left: left.into_iter().map(|r| r.path).collect(),
        });
    }
    Ok(found)
}

impl Lifecycle {
    pub(crate) fn rename_blocking(
        &self,
        h: &tokio::runtime::Handle,
        from_a: &AgentAlias,
        to_a: &AgentAlias,
    ) -> Result<Report, LifecycleError> {
        // A retried rename converges what an earlier attempt left (LIFE-5).
        if let Some(report) = self.resume_matching(
            h,
            |op| matches!(op, Op::Rename { from: f, to: t, .. } if f == from_a && t == to_a),
        ) {
            return Ok(report);
        }
        if from_a == to_a {
            return Err(LifecycleError::SameAlias);
        }
        let root = self.root().clone();
        let mut txn = self.store.write_blocking()?;
        let locked = std::time::Instant::now();
        let base = txn.base().clone();
        let Some(agent) = base.agent(from_a) else {
            return Err(LifecycleError::AgentNotFound {
                alias: from_a.to_string(),
            });
        };
        if base.agents.contains_key(to_a) {
            return Err(LifecycleError::AgentExists {
                alias: to_a.to_string(),
            });
        }
        let backend = base.memory_backend_of(agent);
        let (old_ws, new_ws) = (root.agent_workspace(from_a), root.agent_workspace(to_a));
        if fsops::holds_content(&new_ws) {
            return Err(LifecycleError::WorkspaceNotEmpty { path: new_ws });
        }
        let workspace = workspace_action(&root, &base, from_a);
        let found = edit_rename(&mut txn, &base, from_a, to_a)?;
        let op = Op::Rename {
            from: from_a.clone(),
            to: to_a.clone(),
            memory_backend: backend,
            old_workspace: old_ws,
            new_workspace: new_ws,
            workspace,
        };
        let mut report = self.journal_persist_converge(h, txn, op, Some(locked))?;
        report.references = found.into_iter().map(|r| r.path).collect();
        Ok(report)
    }

    pub(crate) fn converge_rename(&self, h: &tokio::runtime::Handle, op: &Op) -> Report {
        let Op::Rename {
            from,
            to,
            memory_backend,
            old_workspace,
            new_workspace,
            workspace,
        } = op
        else {
            return Report::new(op.name(), op.alias());
        };
        let mut report = Report::new("rename", from);
        report.to = Some(to.clone());
        match workspace {
            WorkspaceAction::Archive => match fsops::move_dir(old_workspace, new_workspace) {
                Ok(_) => {
                    if let Some(parent) = old_workspace.parent() {
                        fsops::remove_if_empty(parent);
                    }
                }
                Err(e) => report.fail(format!("workspace move failed: {e}")),
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
            match store.rename(from, to, &ws) {
                Ok(n) => {
                    report.counts.insert(store.name().into(), n);
                }
                Err(e) => report.fail(format!(
                    "{}: rename '{from}' -> '{to}' failed: {e}",
                    store.name()
                )),
            }
            crash_point(&format!("lifecycle-after-{}", store.name()));
        }
        report
    }
}
