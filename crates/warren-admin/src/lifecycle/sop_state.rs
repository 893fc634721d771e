//! The SOP share of an agent rename/delete/restore (LIFE-3, LIFE-4): an SOP definition naming
//! the agent is a hard reference ([`refusals`]: delete refused, naming the SOP and its file);
//! rename rewrites those definition files (each replaced atomically) and repoints the runs;
//! delete archives the agent's run history (runs, steps, events) into the archive's
//! `stores/sop.json`, then removes it. Restore leaves the history in the archive (a run is not
//! resumed under another agent). A store that does not exist yet holds nothing; inside a daemon
//! the store is the running engine's (through [`StoreContext`]).

use std::sync::Arc;

use serde_json::Value;
use warren_config::InstallRoot;
use warren_core::AgentAlias;
use warren_store::sop::SopStore;

use crate::lifecycle::store_error::{StoreCause, StoreError, scoped};
use crate::lifecycle::stores::{AgentStateStore, StoreContext, WorkspaceMove};
use warren_store::sop_defs as defs;

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

pub struct SopState {
    ctx: StoreContext,
}

impl SopState {
    pub fn new(ctx: StoreContext) -> Self {
        Self { ctx }
    }

    /// The run store (the running engine's inside a daemon); `None` when there is none.
    fn existing(&self) -> Result<Option<Arc<SopStore>>, StoreCause> {
        self.ctx.sop_runs()
    }
}

impl AgentStateStore for SopState {
    fn name(&self) -> &'static str {
        "sop"
    }

    fn count(&self, alias: &AgentAlias) -> Result<u64, StoreError> {
        scoped(self.name(), alias, || {
            Ok(match self.existing()? {
                Some(store) => store.export_agent(alias)?.len() as u64,
                None => 0,
            })
        })
    }

    fn export(&self, alias: &AgentAlias) -> Result<(u64, Value), StoreError> {
        scoped(self.name(), alias, || {
            let runs = match self.existing()? {
                Some(store) => store.export_agent(alias)?,
                None => Vec::new(),
            };
            Ok((runs.len() as u64, Value::Array(runs)))
        })
    }

    fn purge(&self, alias: &AgentAlias) -> Result<u64, StoreError> {
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
    ) -> Result<u64, StoreError> {
        scoped(self.name(), from, || {
            let files =
                defs::rename_agent(&self.ctx.root, from, to).map_err(StoreCause::SopDefinitions)?;
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
    ) -> Result<u64, StoreError> {
        if data.as_array().is_some_and(|a| !a.is_empty()) {
            tracing::info!(agent = %original, "SOP run history of the deleted agent stays in its archive (stores/sop.json)");
        }
        Ok(0)
    }
}
