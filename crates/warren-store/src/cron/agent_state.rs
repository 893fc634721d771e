//! One agent's rows in the cron store ([`CronStore::rename_agent`], `export_agent`,
//! `delete_agent`, `import_agent`), and the cron store's and the control plane's share of an
//! agent rename/delete/restore (LIFE-3, LIFE-4, BEYOND-1; issue 34 §2): rename repoints the
//! agent's jobs and runs (and its control-plane rows); delete exports jobs with their run
//! history into the archive, then removes them; restore puts them back under the (possibly new)
//! alias, every job disabled with a note until the operator resumes it. A store that does not
//! exist yet holds nothing (never created by a count). The stores are lent by the caller
//! ([`StoreHandles::cron`], [`StoreHandles::control_plane`]: inside a daemon the running
//! scheduler's).

use std::sync::Arc;

use rusqlite::params;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use warren_core::AgentAlias;

use super::rows::{RUN_COLUMNS, get_job, insert_job};
use super::{CronError, CronStore, Job, Run};
use crate::agent_state::{
    AgentState, AgentStateError, StateCause, StoreHandles, WorkspaceMove, from_json, json, scoped,
};
use crate::control_plane::ControlPlane;

/// One agent's jobs and runs in the store (LIFE-3, LIFE-4, BEYOND-1).
impl CronStore {
    /// Repoints the jobs and runs of agent `from` to `to` (LIFE-3); returns the rows changed.
    pub fn rename_agent(&self, from: &AgentAlias, to: &AgentAlias) -> Result<usize, CronError> {
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(|e| self.err(e))?;
        let jobs = tx
            .execute(
                "UPDATE jobs SET agent = ?2 WHERE agent = ?1",
                params![from.as_str(), to.as_str()],
            )
            .map_err(|e| self.err(e))?;
        let runs = tx
            .execute(
                "UPDATE runs SET agent = ?2 WHERE agent = ?1",
                params![from.as_str(), to.as_str()],
            )
            .map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))?;
        Ok(jobs + runs)
    }

    /// The jobs and runs of `agent` (the archive of an agent delete, LIFE-4).
    pub fn export_agent(&self, agent: &AgentAlias) -> Result<AgentCron, CronError> {
        let jobs: Vec<Job> = self
            .list()?
            .into_iter()
            .filter(|j| &j.agent == agent)
            .collect();
        let mut runs = Vec::new();
        for job in &jobs {
            runs.extend(self.runs(&job.name, u32::MAX)?);
        }
        Ok(AgentCron { jobs, runs })
    }

    /// Removes the jobs and runs of `agent` (after [`CronStore::export_agent`] archived them).
    pub fn delete_agent(&self, agent: &AgentAlias) -> Result<usize, CronError> {
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(|e| self.err(e))?;
        let runs = tx
            .execute("DELETE FROM runs WHERE agent = ?1", params![agent.as_str()])
            .map_err(|e| self.err(e))?;
        let jobs = tx
            .execute("DELETE FROM jobs WHERE agent = ?1", params![agent.as_str()])
            .map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))?;
        Ok(jobs + runs)
    }

    /// Brings archived jobs and runs back under `agent`, every job disabled with `note` until
    /// the operator resumes it (BEYOND-1). Jobs whose name is taken are skipped (returned).
    pub fn import_agent(
        &self,
        archive: &AgentCron,
        agent: &AgentAlias,
        note: &str,
    ) -> Result<Vec<String>, CronError> {
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(|e| self.err(e))?;
        let mut skipped = Vec::new();
        for job in &archive.jobs {
            if get_job(&tx, &job.name).map_err(|e| self.err(e))?.is_some() {
                skipped.push(job.name.clone());
                continue;
            }
            let restored = Job {
                agent: agent.clone(),
                enabled: false,
                paused_reason: Some(note.to_string()),
                note: Some(note.to_string()),
                source: "runtime".into(),
                next_fire_ms: None,
                lock_run: None,
                lock_pid: None,
                lock_boot: None,
                locked_at: None,
                ..job.clone()
            };
            insert_job(&tx, &restored).map_err(|e| self.err(e))?;
        }
        for run in &archive.runs {
            if skipped.contains(&run.job) {
                continue;
            }
            let status = if run.status == "running" {
                "lost"
            } else {
                run.status.as_str()
            };
            tx.execute(
                &format!("INSERT OR IGNORE INTO runs ({RUN_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)"),
                params![
                    run.id, run.job, agent.as_str(), run.trigger, run.started_at, run.finished_at, status,
                    run.error, run.output, run.tokens_in, run.tokens_out, run.cost_usd,
                    serde_json::to_string(&run.receipts).unwrap_or_else(|_| "[]".into()),
                    run.session, run.delivery, run.delivery_error, run.owner_pid, run.owner_boot
                ],
            )
            .map_err(|e| self.err(e))?;
        }
        tx.commit().map_err(|e| self.err(e))?;
        Ok(skipped)
    }
}

/// An agent's cron jobs and runs as archived by an agent delete.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentCron {
    pub jobs: Vec<Job>,
    pub runs: Vec<Run>,
}

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
