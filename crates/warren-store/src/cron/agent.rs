//! One agent's jobs and runs in the cron store (LIFE-3, LIFE-4, BEYOND-1): repointed by a
//! rename, exported into a delete's archive ([`AgentCron`]) and removed, imported back by a
//! restore, every job disabled with a note. The lifecycle's share that drives them is
//! [`crate::agent_state::cron`].

use rusqlite::params;
use serde::{Deserialize, Serialize};
use warren_core::AgentAlias;

use super::rows::{RUN_COLUMNS, get_job, insert_job};
use super::{CronError, CronStore, Job, Run};

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
