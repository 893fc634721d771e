//! The SOP share of an agent rename/delete/restore (LIFE-3, LIFE-4; issue 34 §2): an SOP
//! definition naming the agent is a hard reference ([`refusals`]: delete refused, naming the SOP
//! and its file); rename rewrites those definition files (each replaced atomically) and
//! repoints the runs; delete archives the agent's run history (runs, steps, events) into the
//! archive's `stores/sop.json`, then removes it. Restore leaves the history in the archive (a
//! run is not resumed under another agent). A store that does not exist yet holds nothing; the
//! store is lent by the caller ([`StoreHandles::sop_runs`]: inside a daemon the running
//! engine's).

use std::sync::Arc;

use serde_json::Value;
use warren_config::InstallRoot;
use warren_core::AgentAlias;

use super::{AgentState, AgentStateError, StateCause, StoreHandles, WorkspaceMove, scoped};
use crate::sop::SopStore;
use crate::sop_defs as defs;

/// Why a delete of `alias` is refused: each SOP definition that names it.
pub fn refusals(root: &InstallRoot, alias: &AgentAlias) -> Vec<String> {
    defs::naming_agent(root, alias)
        .into_iter()
        .map(|(name, path)| {
            format!(
                "SOP '{name}' runs as this agent ({}: agent); change its agent or remove the file first",
                path.display()
            )
        })
        .collect()
}

/// The SOP share (definition files and run history), over the handles of `H`.
pub struct SopShare<H> {
    handles: Arc<H>,
}

impl<H> SopShare<H> {
    pub fn new(handles: Arc<H>) -> Self {
        Self { handles }
    }
}

impl<H: StoreHandles> SopShare<H> {
    /// The run store; `None` when there is none.
    fn existing(&self) -> Result<Option<Arc<SopStore>>, StateCause> {
        self.handles.sop_runs()
    }
}

impl<H: StoreHandles> AgentState for SopShare<H> {
    fn name(&self) -> &'static str {
        "sop"
    }

    fn count(&self, alias: &AgentAlias) -> Result<u64, AgentStateError> {
        scoped(self.name(), alias, || {
            Ok(match self.existing()? {
                Some(store) => store.export_agent(alias)?.len() as u64,
                None => 0,
            })
        })
    }

    fn export(&self, alias: &AgentAlias) -> Result<(u64, Value), AgentStateError> {
        scoped(self.name(), alias, || {
            let runs = match self.existing()? {
                Some(store) => store.export_agent(alias)?,
                None => Vec::new(),
            };
            Ok((runs.len() as u64, Value::Array(runs)))
        })
    }

    fn purge(&self, alias: &AgentAlias) -> Result<u64, AgentStateError> {
        scoped(self.name(), alias, || {
            Ok(match self.existing()? {
                Some(store) => store.delete_agent(alias)? as u64,
                None => 0,
            })
        })
    }

    fn rename(
        &self,
        from: &AgentAlias,
        to: &AgentAlias,
        _: &WorkspaceMove,
    ) -> Result<u64, AgentStateError> {
        scoped(self.name(), from, || {
            let files = defs::rename_agent(self.handles.root(), from, to)
                // The text of the definitions' error (it names the file).
                .map_err(StateCause::SopDefinitions)?;
            for name in &files {
                tracing::info!(sop = %name, "SOP definition now names agent '{to}'");
            }
            let runs = match self.existing()? {
                Some(store) => store.rename_agent(from, to)?,
                None => 0,
            };
            Ok((files.len() + runs) as u64)
        })
    }

    fn restore(
        &self,
        _alias: &AgentAlias,
        original: &AgentAlias,
        data: Value,
        _: &WorkspaceMove,
    ) -> Result<u64, AgentStateError> {
        if data.as_array().is_some_and(|a| !a.is_empty()) {
            tracing::info!(agent = %original, "SOP run history of the deleted agent stays in its archive (stores/sop.json)");
        }
        Ok(0)
    }
}
