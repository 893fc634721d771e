//! The cron verbs of the typed control seam (issue 34 §3): `warren cron add|remove|pause|
//! resume|run` build one [`CronOp`], and one executor runs it, [`CronControl::execute`] — in
//! the daemon on its generation's scheduler, or in the CLI's process (no daemon) on that
//! process's stores. The seam itself (the one `AdminOp` enum, the `Control` trait) is
//! `warren_gateway::control`.
//!
//! A verb on a job that is not there creates no store; a manual run claims the job's lock row
//! like a scheduled one ([`Scheduler::run_now`]), so the two never overlap.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use warren_config::Config;
use warren_runtime::AgentHost;
use warren_runtime::stores::Stores;
use warren_store::cron::{CronError, Job, Run, now_ms};

use super::{CronRunError, JobSpec, ScheduleError, Scheduler, SpecError, schedule_of};

/// One cron verb, as the CLI asks for it and the daemon's admin route receives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum CronOp {
    CronAdd { job: Box<JobSpec> },
    CronRemove { name: String },
    CronPause { name: String },
    CronResume { name: String },
    CronRun { name: String },
}

/// The wire names of the cron verbs.
pub const CRON_OPS: &[&str] = &[
    "cron_add",
    "cron_remove",
    "cron_pause",
    "cron_resume",
    "cron_run",
];

impl CronOp {
    /// The verb's name, as on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            CronOp::CronAdd { .. } => "cron_add",
            CronOp::CronRemove { .. } => "cron_remove",
            CronOp::CronPause { .. } => "cron_pause",
            CronOp::CronResume { .. } => "cron_resume",
            CronOp::CronRun { .. } => "cron_run",
        }
    }
}

/// Whose scheduler fires the stored jobs, as the executor saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SchedulerState {
    /// The daemon's scheduler runs and was told to re-read the store.
    Running,
    /// The daemon runs with `[cron] enabled = false`: nothing fires.
    Off,
    /// No daemon runs (the CLI ran the verb itself).
    NoDaemon,
}

/// What a cron verb did: the job as stored now (add, pause, resume), the removed job's name,
/// or the finished run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CronReply {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<Job>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<Run>,
    pub scheduler: SchedulerState,
    /// Why the daemon's scheduler is off (`[cron] enabled = false`, or a store that does not
    /// open: the real cause, issue 36 §2); `None` when it runs or no daemon answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Why a cron verb did not run.
#[derive(Debug, thiserror::Error)]
pub enum CronControlError {
    #[error(transparent)]
    Store(#[from] CronError),
    #[error("cron job '{name}' not added: {spec}")]
    Spec { name: String, spec: SpecError },
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    #[error(transparent)]
    Run(CronRunError),
    /// The scheduler is off; the reason is the daemon's (`[cron] enabled = false`, or the store
    /// that kept it from starting).
    #[error("the cron scheduler is not running ({0})")]
    SchedulerOff(String),
    #[error("the cron store task failed: {0}")]
    Task(String),
}

impl From<CronRunError> for CronControlError {
    fn from(e: CronRunError) -> Self {
        match e {
            CronRunError::Store(e) => Self::Store(e),
            other => Self::Run(other),
        }
    }
}

/// Where cron verbs run: the process's stores, the config jobs are checked against, and the
/// scheduler that fires them (the daemon generation's, or one this process built to run a
/// job now; `None` for a verb that needs none).
pub struct CronControl<'a> {
    pub stores: &'a Arc<Stores>,
    pub config: &'a Config,
    pub scheduler: Option<Arc<Scheduler>>,
    /// What to report about the scheduler (`Running` is only true with `scheduler` set).
    pub state: SchedulerState,
    /// With no `scheduler`, a manual run opens a one-off scheduler on this host (`warren cron
    /// run` runs the job daemon or not, `[cron] enabled = false` included); `None`: refused.
    pub run_host: Option<Arc<AgentHost>>,
    /// Why the scheduler is off, reported with every reply (see [`CronReply::reason`]).
    pub off_reason: Option<String>,
}

impl CronControl<'_> {
    /// THE executor of a [`CronOp`]. The store work runs on the blocking pool; a change wakes
    /// the scheduler, which re-reads the store.
    pub async fn execute(&self, op: &CronOp) -> Result<CronReply, CronControlError> {
        let reply = |job: Option<Job>, removed: Option<String>, run: Option<Run>| CronReply {
            job,
            removed,
            run,
            scheduler: self.state,
            reason: self.off_reason.clone(),
        };
        let stores = Arc::clone(self.stores);
        let done = match op {
            CronOp::CronAdd { job } => {
                let name = job.name.clone();
                let job = (**job)
                    .clone()
                    .into_job(self.config, "runtime")
                    .map_err(|spec| CronControlError::Spec { name, spec })?;
                let stored = job.clone();
                blocking(move || stores.cron()?.insert(&stored)).await??;
                reply(Some(job), None, None)
            }
            CronOp::CronRemove { name } => {
                let removed = name.clone();
                blocking(move || {
                    existing(&stores, &removed)?;
                    stores.cron()?.remove(&removed)
                })
                .await??;
                reply(None, Some(name.clone()), None)
            }
            CronOp::CronPause { name } | CronOp::CronResume { name } => {
                let enabled = matches!(op, CronOp::CronResume { .. });
                let name = name.clone();
                let job = blocking(move || {
                    existing(&stores, &name)?;
                    let store = stores.cron()?;
                    let job = store
                        .get(&name)?
                        .ok_or_else(|| CronError::NotFound(name.clone()))?;
                    let next = match enabled {
                        true => schedule_of(&job)?.next_after(now_ms()),
                        false => None,
                    };
                    let reason = (!enabled).then_some("paused by the operator");
                    Ok::<_, CronControlError>(store.set_enabled(&name, enabled, reason, next)?)
                })
                .await??;
                reply(Some(job), None, None)
            }
            CronOp::CronRun { name } => {
                let probe = name.clone();
                blocking(move || existing(&stores, &probe)).await??;
                let scheduler = match (&self.scheduler, &self.run_host) {
                    (Some(s), _) => Arc::clone(s),
                    (None, Some(host)) => Scheduler::open(self.stores.root(), Arc::clone(host))?,
                    (None, None) => {
                        return Err(CronControlError::SchedulerOff(
                            self.off_reason
                                .clone()
                                .unwrap_or_else(|| "[cron] enabled = false".to_string()),
                        ));
                    }
                };
                let run = scheduler.run_now(name).await?;
                return Ok(reply(None, None, Some(run)));
            }
        };
        if let Some(s) = &self.scheduler {
            s.wake();
        }
        Ok(done)
    }
}

/// `name`'s stored job, without creating the store when there is none.
fn existing(stores: &Stores, name: &str) -> Result<Job, CronError> {
    stores
        .cron_existing()?
        .map(|s| s.get(name))
        .transpose()?
        .flatten()
        .ok_or_else(|| CronError::NotFound(name.to_string()))
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, CronControlError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| CronControlError::Task(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every cron verb round-trips in its wire form; unknown fields are refused.
    #[test]
    fn every_cron_verb_round_trips_in_its_wire_form_issue34() {
        let spec: JobSpec =
            serde_json::from_str(r#"{"name":"tick","agent":"main","every":"1s","message":"hi"}"#)
                .unwrap_or_else(|e| panic!("{e}"));
        let ops = [
            CronOp::CronAdd {
                job: Box::new(spec),
            },
            CronOp::CronRemove {
                name: "tick".into(),
            },
            CronOp::CronPause {
                name: "tick".into(),
            },
            CronOp::CronResume {
                name: "tick".into(),
            },
            CronOp::CronRun {
                name: "tick".into(),
            },
        ];
        for op in ops {
            let wire = serde_json::to_value(&op).unwrap_or_default();
            assert_eq!(wire["op"], op.name(), "{wire}");
            assert!(CRON_OPS.contains(&op.name()));
            let back: CronOp =
                serde_json::from_value(wire.clone()).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(back, op, "{wire}");
        }
        let pause: CronOp = serde_json::from_str(r#"{"op":"cron_pause","name":"tick"}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            pause,
            CronOp::CronPause {
                name: "tick".into()
            }
        );
        assert!(serde_json::from_str::<CronOp>(r#"{"op":"cron_pause","name":"t","x":1}"#).is_err());
        assert!(
            serde_json::from_str::<CronOp>(r#"{"op":"cron_add","job":{"name":"t","bogus":1}}"#)
                .is_err(),
            "the job spec refuses unknown fields too"
        );
    }
}
