//! The ACP sessions' share of an agent rename/delete/restore (LIFE-3, LIFE-4; issue 34 §2):
//! rename repoints the agent's sessions (and their `cwd` when the workspace moved); delete
//! exports them with their transcripts into the archive, then removes them; restore imports
//! them back under the (possibly new) alias. The store is lent by the caller
//! ([`StoreHandles::with_acp`]).

use std::sync::Arc;

use serde_json::Value;
use warren_core::AgentAlias;

use super::{AgentState, AgentStateError, StoreHandles, WorkspaceMove, from_json, json, scoped};
use crate::acp::AcpExport;

/// The ACP sessions' share, over the handles of `H`.
pub struct AcpShare<H> {
    handles: Arc<H>,
}

impl<H> AcpShare<H> {
    pub fn new(handles: Arc<H>) -> Self {
        Self { handles }
    }
}

impl<H: StoreHandles> AgentState for AcpShare<H> {
    fn name(&self) -> &'static str {
        "acp"
    }
    fn count(&self, alias: &AgentAlias) -> Result<u64, AgentStateError> {
        scoped(self.name(), alias, || {
            self.handles.with_acp(|s| s.count_agent(alias))
        })
    }
    fn export(&self, alias: &AgentAlias) -> Result<(u64, Value), AgentStateError> {
        scoped(self.name(), alias, || {
            let rows = self.handles.with_acp(|s| s.export_agent(alias))?;
            Ok((rows.len() as u64, json(&rows)?))
        })
    }
    fn purge(&self, alias: &AgentAlias) -> Result<u64, AgentStateError> {
        scoped(self.name(), alias, || {
            self.handles
                .with_acp(|s| s.delete_agent(alias).map(|n| n as u64))
        })
    }
    fn rename(
        &self,
        from: &AgentAlias,
        to: &AgentAlias,
        ws: &WorkspaceMove,
    ) -> Result<u64, AgentStateError> {
        let rewrite = ws.rewrite();
        scoped(self.name(), from, || {
            self.handles.with_acp(|s| {
                s.rename_agent_with_cwd(
                    from,
                    to,
                    rewrite.as_ref().map(|(a, b)| (a.as_str(), b.as_str())),
                )
                .map(|n| n as u64)
            })
        })
    }
    fn restore(
        &self,
        alias: &AgentAlias,
        _: &AgentAlias,
        data: Value,
        ws: &WorkspaceMove,
    ) -> Result<u64, AgentStateError> {
        let rewrite = ws.rewrite();
        scoped(self.name(), alias, || {
            let rows: Vec<AcpExport> = from_json(data)?;
            self.handles.with_acp(|s| {
                s.import_agent(
                    alias,
                    &rows,
                    rewrite.as_ref().map(|(a, b)| (a.as_str(), b.as_str())),
                )
            })
        })
    }
}
