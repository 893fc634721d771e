//! The cron store's and the control plane's share of an agent rename/delete/restore (LIFE-3,
//! LIFE-4, BEYOND-1; issue 34 §2): rename repoints the agent's jobs and runs (and its
//! control-plane rows); delete exports jobs with their run history into the archive, then
//! removes them; restore puts them back under the (possibly new) alias, every job disabled with
//! a note until the operator resumes it. A store that does not exist yet holds nothing (never
//! created by a count). The stores are lent by the caller ([`StoreHandles::cron`],
//! [`StoreHandles::control_plane`]: inside a daemon the running scheduler's).

use std::sync::Arc;

use serde_json::Value;
use warren_core::AgentAlias;

use super::{
    AgentState, AgentStateError, StateCause, StoreHandles, WorkspaceMove, from_json, json, scoped,
};
use crate::control_plane::ControlPlane;
use crate::cron::{AgentCron, CronStore};

/// The note a restored job carries until it is resumed.
pub fn restore_note(original: &AgentAlias) -> String {
    format!(
        "restored with agent '{original}' from its archive; disabled until `warren cron resume`"
    )
}

/// The cron share (jobs, their runs, the agent's control-plane rows), over the handles of `H`.
pub struct CronShare<H> {
    handles: Arc<H>,
}

impl<H> CronShare<H> {
    pub fn new(handles: Arc<H>) -> Self {
        Self { handles }
    }
}

impl<H: StoreHandles> CronShare<H> {
    /// The cron store; `None` when there is none.
    fn existing(&self) -> Result<Option<Arc<CronStore>>, StateCause> {
        self.handles.cron(false)
    }

    fn plane(&self) -> Result<Option<Arc<ControlPlane>>, StateCause> {
        self.handles.control_plane()
    }
}

impl<H: StoreHandles> AgentState for CronShare<H> {
    fn name(&self) -> &'static str {
        "cron"
    }

    fn count(&self, alias: &AgentAlias) -> Result<u64, AgentStateError> {
        scoped(self.name(), alias, || {
            let Some(store) = self.existing()? else {
                return Ok(0);
            };
            let export = store.export_agent(alias)?;
            Ok((export.jobs.len() + export.runs.len()) as u64)
        })
    }

    fn export(&self, alias: &AgentAlias) -> Result<(u64, Value), AgentStateError> {
        scoped(self.name(), alias, || {
            let export = match self.existing()? {
                Some(store) => store.export_agent(alias)?,
                None => AgentCron::default(),
            };
            let n = (export.jobs.len() + export.runs.len()) as u64;
            Ok((n, json(&export)?))
        })
    }

    fn purge(&self, alias: &AgentAlias) -> Result<u64, AgentStateError> {
        scoped(self.name(), alias, || {
            if let Some(plane) = self.plane()? {
                plane.delete_agent(alias)?;
            }
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
            if let Some(plane) = self.plane()? {
                plane.rename_agent(from.as_str(), to.as_str())?;
            }
            Ok(match self.existing()? {
                Some(store) => store.rename_agent(from, to)? as u64,
                None => 0,
            })
        })
    }

    fn restore(
        &self,
        alias: &AgentAlias,
        original: &AgentAlias,
        data: Value,
        _: &WorkspaceMove,
    ) -> Result<u64, AgentStateError> {
        scoped(self.name(), alias, || {
            let archive: AgentCron = from_json(data)?;
            if archive.jobs.is_empty() && archive.runs.is_empty() {
                return Ok(0);
            }
            let store = self.handles.cron(true)?.ok_or(StateCause::CronNotOpened)?;
            let skipped = store.import_agent(&archive, alias, &restore_note(original))?;
            for name in &skipped {
                tracing::warn!(job = %name, "archived cron job not restored: a job of that name exists");
            }
            Ok((archive.jobs.len() - skipped.len() + archive.runs.len()) as u64)
        })
    }
}
