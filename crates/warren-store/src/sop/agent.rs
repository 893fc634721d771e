//! One agent's runs in the SOP store (LIFE-3, LIFE-4): repointed by a rename, exported with
//! their steps and events into a delete's archive, then removed. The lifecycle's share that
//! drives them is [`crate::agent_state::sop`].

use rusqlite::params;

use super::{SopRun, SopStore, SopStoreError};

/// One agent's runs in the store (LIFE-3, LIFE-4).
impl SopStore {
    /// Repoints the runs of agent `from` to `to` (an agent rename).
    pub fn rename_agent(
        &self,
        from: &warren_core::AgentAlias,
        to: &warren_core::AgentAlias,
    ) -> Result<usize, SopStoreError> {
        self.conn()
            .execute(
                "UPDATE runs SET agent = ?2 WHERE agent = ?1",
                params![from.as_str(), to.as_str()],
            )
            .map_err(|e| self.err(e))
    }

    /// Every run of `agent` with its steps and events (an agent delete archives them).
    pub fn export_agent(
        &self,
        agent: &warren_core::AgentAlias,
    ) -> Result<Vec<serde_json::Value>, SopStoreError> {
        let runs: Vec<SopRun> = self
            .list(None, u32::MAX)?
            .into_iter()
            .filter(|r| &r.agent == agent)
            .collect();
        let mut out = Vec::new();
        for run in runs {
            let steps = self.steps(&run.id)?;
            let events = self.events(&run.id)?;
            out.push(serde_json::json!({"run": run, "steps": steps, "events": events}));
        }
        Ok(out)
    }

    /// Deletes every run of `agent` (with its steps, events and approvals).
    pub fn delete_agent(&self, agent: &warren_core::AgentAlias) -> Result<usize, SopStoreError> {
        self.conn()
            .execute("DELETE FROM runs WHERE agent = ?1", params![agent.as_str()])
            .map_err(|e| self.err(e))
    }
}
