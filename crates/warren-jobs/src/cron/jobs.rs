//! A job as the CLI (`warren cron add`), the API (`POST /api/cron`) and config
//! (`[cron.jobs.<name>]`) describe it: [`JobSpec`], checked against the running config (the
//! agent exists, the schedule parses, message xor command, the webhook is valid) and turned
//! into a stored [`Job`]. One routine for every source, so a job the API accepts is one the
//! config would accept too.

use serde::{Deserialize, Serialize};
use warren_config::Config;
use warren_config::schema::cron::{
    CronJobDecl, HEARTBEAT_MESSAGE, Schedule, heartbeat_job, heartbeat_session, validate_name,
    validate_webhook,
};
use warren_core::AgentAlias;
use warren_store::cron::{Job, now_ms};
use warren_store::timefmt;

/// A job to add (also the `job` of the control seam's `cron_add` verb).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    pub name: String,
    pub agent: AgentAlias,
    #[serde(default)]
    pub cron: Option<String>,
    #[serde(default)]
    pub tz: Option<String>,
    #[serde(default)]
    pub every: Option<String>,
    #[serde(default)]
    pub at: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub session: Option<String>,
    #[serde(default)]
    pub budget_usd: Option<f64>,
    #[serde(default)]
    pub daily_budget_usd: Option<f64>,
    #[serde(default)]
    pub catch_up: Option<String>,
    #[serde(default)]
    pub webhook: Option<String>,
    #[serde(default)]
    pub enabled: Option<bool>,
}

/// A spec that cannot become a job: the field at fault and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SpecError {
    pub field: &'static str,
    pub message: String,
}

fn bad(field: &'static str, message: impl Into<String>) -> SpecError {
    SpecError {
        field,
        message: message.into(),
    }
}

impl JobSpec {
    /// A spec with only its name and agent set.
    pub fn new(name: impl Into<String>, agent: AgentAlias) -> Self {
        Self {
            name: name.into(),
            agent,
            cron: None,
            tz: None,
            every: None,
            at: None,
            message: None,
            command: None,
            session: None,
            budget_usd: None,
            daily_budget_usd: None,
            catch_up: None,
            webhook: None,
            enabled: None,
        }
    }

    /// The spec of a declared job.
    pub fn from_decl(name: &str, decl: &CronJobDecl) -> Self {
        Self {
            name: name.to_string(),
            agent: decl.agent.clone(),
            cron: decl.cron.clone(),
            tz: decl.tz.clone(),
            every: decl.every.clone(),
            at: decl.at.clone(),
            message: decl.message.clone(),
            command: decl.command.clone(),
            session: decl.session.clone(),
            budget_usd: decl.budget_usd,
            daily_budget_usd: decl.daily_budget_usd,
            catch_up: decl.catch_up.clone(),
            webhook: decl.delivery.as_ref().and_then(|d| d.webhook.clone()),
            enabled: decl.enabled,
        }
    }

    pub fn schedule(&self) -> Result<Schedule, SpecError> {
        match (&self.cron, &self.every, &self.at) {
            (Some(expr), None, None) => {
                Schedule::cron(expr, self.tz.as_deref()).map_err(|e| bad("cron", e.to_string()))
            }
            (None, Some(every), None) => {
                Schedule::every(every).map_err(|e| bad("every", e.to_string()))
            }
            (None, None, Some(at)) => Schedule::at(at).map_err(|e| bad("at", e.to_string())),
            _ => Err(bad("schedule", "set exactly one of cron, every, at")),
        }
    }

    /// The stored job (`source` = `declared` or `runtime`), checked against `config`.
    pub fn into_job(self, config: &Config, source: &str) -> Result<Job, SpecError> {
        validate_name(&self.name).map_err(|e| bad("name", e.to_string()))?;
        if !config.agents.contains_key(&self.agent) {
            return Err(bad(
                "agent",
                format!("unknown agent '{}' (see `warren agents list`)", self.agent),
            ));
        }
        let schedule = self.schedule()?;
        if self.tz.is_some() && self.cron.is_none() {
            return Err(bad("tz", "tz applies only to a cron expression"));
        }
        match (&self.message, &self.command) {
            (Some(m), None) if !m.trim().is_empty() => {}
            (None, Some(c)) if !c.trim().is_empty() => {}
            _ => {
                return Err(bad(
                    "message",
                    "set exactly one of message (an agent turn) or command (a shell command)",
                ));
            }
        }
        if let Some(session) = &self.session {
            warren_core::SessionKey::new(session.as_str())
                .map_err(|e| bad("session", e.to_string()))?;
        }
        for (field, v) in [
            ("budget_usd", self.budget_usd),
            ("daily_budget_usd", self.daily_budget_usd),
        ] {
            if let Some(v) = v
                && !(v.is_finite() && v > 0.0)
            {
                return Err(bad(field, "a budget is a positive number of USD"));
            }
        }
        let catch_up = self.catch_up.clone().unwrap_or_else(|| "skip".into());
        if catch_up != "skip" && catch_up != "once" {
            return Err(bad("catch_up", "use skip or once"));
        }
        if let Some(url) = &self.webhook {
            validate_webhook(url).map_err(|e| bad("webhook", e.to_string()))?;
        }
        let (kind, spec, tz) = schedule.parts();
        let enabled = self.enabled.unwrap_or(true);
        let now = timefmt::format(timefmt::now());
        Ok(Job {
            name: self.name,
            agent: self.agent,
            schedule_kind: kind.into(),
            schedule: spec,
            tz,
            message: self.message,
            command: self.command,
            session: self.session,
            enabled,
            paused_reason: None,
            source: source.into(),
            catch_up,
            budget_usd: self.budget_usd,
            daily_budget_usd: self.daily_budget_usd,
            webhook: self.webhook,
            next_fire_ms: if enabled {
                schedule.next_after(now_ms())
            } else {
                None
            },
            failures: 0,
            note: None,
            created_at: now.clone(),
            updated_at: now,
            lock_run: None,
            lock_pid: None,
            lock_boot: None,
            locked_at: None,
            probe: None,
            probe_state: None,
        })
    }
}

/// A stored job whose schedule does not parse (the cron database was written by hand or by
/// another version): the job and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cron job '{job}': stored schedule '{spec}' does not parse: {message}")]
pub struct ScheduleError {
    pub job: String,
    pub spec: String,
    pub message: String,
}

/// The schedule of a stored job.
pub fn schedule_of(job: &Job) -> Result<Schedule, ScheduleError> {
    Schedule::from_parts(&job.schedule_kind, &job.schedule, job.tz.as_deref()).map_err(|message| {
        ScheduleError {
            job: job.name.clone(),
            spec: job.schedule.clone(),
            message: message.to_string(),
        }
    })
}

/// The declared jobs of `config` as stored jobs (config validation already checked them; a
/// job that fails here is skipped with a warning).
pub fn declared(config: &Config) -> Vec<Job> {
    config
        .cron
        .jobs
        .iter()
        .filter_map(|(name, decl)| {
            match JobSpec::from_decl(name, decl).into_job(config, "declared") {
                Ok(job) => Some(job),
                Err(e) => {
                    tracing::warn!(job = %name, "declared cron job skipped: {e}");
                    None
                }
            }
        })
        .chain(heartbeats(config))
        .collect()
}

/// Each agent's `[agents.<alias>.heartbeat]` as a config-owned job (`source = heartbeat`) in
/// the agent's own session `heartbeat-<alias>`, with its check as the job's probe.
fn heartbeats(config: &Config) -> Vec<Job> {
    let mut out = Vec::new();
    for (alias, agent) in config.agents() {
        let Some(hb) = &agent.heartbeat else { continue };
        let spec = JobSpec {
            every: Some(hb.every.clone()),
            message: Some(
                hb.message
                    .clone()
                    .unwrap_or_else(|| HEARTBEAT_MESSAGE.into()),
            ),
            session: Some(heartbeat_session(alias.as_str())),
            daily_budget_usd: hb.daily_budget_usd,
            enabled: hb.enabled,
            ..JobSpec::new(heartbeat_job(alias.as_str()), alias.clone())
        };
        match spec.into_job(config, "heartbeat") {
            Ok(mut job) => {
                let probe = super::probe::Probe {
                    files_changed: hb.files_changed,
                    command: hb.command.clone(),
                    session: hb.session.clone(),
                };
                job.probe = serde_json::to_string(&probe).ok();
                out.push(job);
            }
            Err(e) => tracing::warn!(agent = %alias, "heartbeat skipped: {e}"),
        }
    }
    out
}
