//! One claimed run: the daily budget, the job itself (an agent turn through the turn door, or a
//! shell command through the agent's shell tool), the per-run budget, storing the result with
//! its status (one transaction), the job's backoff or pause, the control-plane state, the trace
//! event and the delivery (the session, or a webhook with retries whose failure is recorded on
//! the run).

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use warren_config::failpoint;
use warren_core::AgentAlias;
use warren_store::cron::{Job, JobAfterRun, Run, RunResult, RunStatus, now_ms};
use warren_store::timefmt;

use super::{FAILPOINT_BEFORE_FINISH, FAILPOINT_RUN_STARTED, Scheduler, blocking, schedule_of};
use crate::unattended::ToolCall;
use warren_runtime::cancel::CancelToken;
use warren_runtime::turn::TurnError;

/// The session a run talks in: the job's named session, else `cron-<job>-<run>`.
pub(super) fn session_of(job: &Job, run_id: &str) -> String {
    job.session
        .clone()
        .unwrap_or_else(|| format!("cron-{}-{run_id}", job.name))
}

impl Scheduler {
    /// Runs the claimed `job` as `run_id` to its stored end.
    pub(super) async fn execute(
        self: &Arc<Self>,
        job: Job,
        run_id: &str,
        cancel: CancelToken,
    ) -> Option<Run> {
        failpoint::crash_point(FAILPOINT_RUN_STARTED);
        let config = self.host.snapshot().config().cron.clone();
        let result = match self.over_daily_budget(&job).await {
            Some(reason) => RunResult {
                status: RunStatus::Failed,
                error: Some(reason),
                ..RunResult::default()
            },
            None => match (&job.message, &job.command) {
                (Some(message), _) => {
                    let fired = self
                        .fired
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&job.name);
                    let message = match fired {
                        Some(why) => format!("{message}\n\nCheck: {why}"),
                        None => message.clone(),
                    };
                    self.turn(&job, run_id, &message, &cancel).await
                }
                (None, Some(command)) => self.command(&job, command, &cancel).await,
                (None, None) => RunResult {
                    error: Some("the job has neither message nor command".into()),
                    ..RunResult::default()
                },
            },
        };
        let result = check_run_budget(&job, result);
        failpoint::crash_point(FAILPOINT_BEFORE_FINISH);
        let after = after_run(&job, &result, &config);
        let store = Arc::clone(&self.store);
        let (id, r, a, keep) = (
            run_id.to_string(),
            result.clone(),
            after.clone(),
            config.max_run_history,
        );
        match blocking(move || store.finish(&id, &r, &a, keep)).await {
            Ok(Ok(true)) => {}
            Ok(Ok(false)) => {
                tracing::warn!(run = %run_id, "cron run ended after it was marked lost; kept lost")
            }
            Ok(Err(e)) => tracing::error!(run = %run_id, "cron run result not stored: {e}"),
            Err(e) => tracing::error!(run = %run_id, "cron run result not stored: {e}"),
        }
        let control = Arc::clone(&self.control);
        let (id, state, error) = (
            run_id.to_string(),
            result.status.as_str(),
            result.error.clone(),
        );
        let _ = blocking(move || control.finish(&id, state, error.as_deref())).await;
        warren_runtime::metrics::cron_run(&job.name, result.status.as_str());
        self.host.trace().emit(
            "cron_run",
            &job.agent,
            None,
            json!({"job": job.name, "run": run_id, "status": result.status.as_str(),
                   "error": result.error, "tokens_in": result.tokens_in,
                   "tokens_out": result.tokens_out, "cost_usd": result.cost_usd,
                   "paused": after.pause}),
        );
        if let Some(reason) = &after.pause {
            tracing::warn!(job = %job.name, "cron job paused: {reason}");
        }
        self.deliver(&job, run_id, &result).await;
        if let Some(probe) = job
            .probe
            .as_deref()
            .and_then(|p| serde_json::from_str::<super::probe::Probe>(p).ok())
        {
            // The heartbeat's own changes are the next tick's baseline.
            let state = self.baseline(&job, &probe).await;
            let store = Arc::clone(&self.store);
            let name = job.name.clone();
            let _ = blocking(move || store.set_probe_state(&name, Some(&state), None)).await;
        }
        let store = Arc::clone(&self.store);
        let id = run_id.to_string();
        blocking(move || store.run(&id)).await.ok()?.ok()?
    }

    async fn over_daily_budget(&self, job: &Job) -> Option<String> {
        let limit = job.daily_budget_usd?;
        let today = timefmt::now().replace_time(time::Time::MIDNIGHT);
        let since = timefmt::format(today);
        let store = Arc::clone(&self.store);
        let name = job.name.clone();
        let spent = blocking(move || store.spent_since(&name, &since))
            .await
            .ok()?
            .ok()?;
        (spent >= limit).then(|| {
            format!("daily budget reached: ${spent:.4} of ${limit:.4} spent today (UTC); not run")
        })
    }

    /// The job's message as one turn through the turn door.
    async fn turn(
        &self,
        job: &Job,
        run_id: &str,
        message: &str,
        cancel: &CancelToken,
    ) -> RunResult {
        let failed = |e: String| RunResult {
            status: RunStatus::Failed,
            error: Some(e),
            ..RunResult::default()
        };
        let agent = job.agent.clone();
        let crate::unattended::Unattended {
            outcome,
            asked,
            receipts,
        } = crate::unattended::turn(
            &self.host,
            agent.clone(),
            &session_of(job, run_id),
            message.to_string(),
            cancel,
            "a scheduled run never runs it unapproved",
        )
        .await;
        match outcome {
            Ok(outcome) => {
                let cost = self.cost_of(
                    &agent,
                    outcome.usage.input_tokens,
                    outcome.usage.output_tokens,
                );
                RunResult {
                    status: if asked.is_some() {
                        RunStatus::Failed
                    } else {
                        RunStatus::Ok
                    },
                    error: asked,
                    output: outcome.reply,
                    tokens_in: outcome.usage.input_tokens,
                    tokens_out: outcome.usage.output_tokens,
                    cost_usd: cost,
                    receipts,
                }
            }
            Err(TurnError::Cancelled) if asked.is_some() => failed(asked.unwrap_or_default()),
            Err(TurnError::Cancelled) => RunResult {
                status: RunStatus::Cancelled,
                error: Some("cancelled".into()),
                ..RunResult::default()
            },
            Err(e) => failed(e.to_string()),
        }
    }

    /// What `input`/`output` tokens cost at the agent's model rate.
    fn cost_of(&self, agent: &AgentAlias, input: u64, output: u64) -> f64 {
        let config = self.host.snapshot().config();
        let model = config.agent(agent).and_then(|a| a.model.clone());
        model
            .and_then(|m| self.host.costs().rate(&m))
            .map_or(0.0, |r| {
                (input as f64 * r.input_per_mtok + output as f64 * r.output_per_mtok) / 1_000_000.0
            })
    }

    /// The job's command through the agent's shell tool: its policy, sandbox and approvals.
    pub(super) async fn command(
        &self,
        job: &Job,
        command: &str,
        cancel: &CancelToken,
    ) -> RunResult {
        let call = crate::unattended::tool_call(
            &self.host,
            &job.agent,
            "shell",
            json!({"command": command}),
            cancel,
            "a scheduled run never runs it unapproved",
        )
        .await;
        match call {
            ToolCall::Done(output) => RunResult {
                status: RunStatus::Ok,
                output: output.to_string(),
                ..RunResult::default()
            },
            ToolCall::Failed { error, output } => RunResult {
                status: RunStatus::Failed,
                error: Some(error),
                output: output.map(|o| o.to_string()).unwrap_or_default(),
                ..RunResult::default()
            },
            ToolCall::Cancelled => RunResult {
                status: RunStatus::Cancelled,
                error: Some("cancelled".into()),
                ..RunResult::default()
            },
        }
    }

    /// Sends the result to the job's webhook (3 attempts, 1 s then 2 s apart); the outcome is
    /// recorded on the run. Without a webhook the result stays in the session and the run.
    async fn deliver(&self, job: &Job, run_id: &str, result: &RunResult) {
        let Some(url) = job.webhook.clone() else {
            let store = Arc::clone(&self.store);
            let id = run_id.to_string();
            let _ = blocking(move || store.set_delivery(&id, "session", None)).await;
            return;
        };
        let body = json!({
            "job": job.name, "agent": job.agent, "run": run_id,
            "status": result.status.as_str(), "error": result.error,
            "output": result.output, "tokens_in": result.tokens_in,
            "tokens_out": result.tokens_out, "cost_usd": result.cost_usd,
        })
        .to_string();
        let mut last_error = None;
        for attempt in 0..3u32 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_secs(u64::from(attempt))).await;
            }
            let (u, b) = (url.clone(), body.clone());
            let sent = tokio::task::spawn_blocking(move || post_json(&u, &b)).await;
            match sent {
                Ok(Ok(())) => {
                    last_error = None;
                    break;
                }
                Ok(Err(e)) => last_error = Some(e.to_string()),
                Err(e) => last_error = Some(e.to_string()),
            }
        }
        let error = last_error.map(|e| format!("webhook delivery failed after 3 attempts: {e}"));
        if let Some(e) = &error {
            tracing::warn!(job = %job.name, run = %run_id, "{e}");
        }
        let store = Arc::clone(&self.store);
        let id = run_id.to_string();
        let _ = blocking(move || {
            store.set_delivery(
                &id,
                if error.is_some() {
                    "webhook_failed"
                } else {
                    "webhook"
                },
                error.as_deref(),
            )
        })
        .await;
    }
}

/// Why one webhook delivery attempt failed.
#[derive(Debug, thiserror::Error)]
enum WebhookError {
    #[error("POST {url}: {cause}")]
    Send {
        url: String,
        cause: Box<ureq::Error>,
    },
    #[error("{url} answered HTTP {status}")]
    Status { url: String, status: u16 },
}

fn post_json(url: &str, body: &str) -> Result<(), WebhookError> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let response = agent
        .post(url)
        .header("Content-Type", "application/json")
        .send(body.as_bytes())
        .map_err(|e| WebhookError::Send {
            url: url.to_string(),
            cause: Box::new(e),
        })?;
    let status = response.status().as_u16();
    if (200..300).contains(&status) {
        Ok(())
    } else {
        Err(WebhookError::Status {
            url: url.to_string(),
            status,
        })
    }
}

/// A run that cost more than the job's per-run budget fails (it counts towards pausing).
fn check_run_budget(job: &Job, result: RunResult) -> RunResult {
    match job.budget_usd {
        Some(limit) if result.cost_usd > limit && result.status == RunStatus::Ok => RunResult {
            status: RunStatus::Failed,
            error: Some(format!(
                "the run cost ${:.4}, over the job's per-run budget of ${limit:.4}",
                result.cost_usd
            )),
            ..result
        },
        _ => result,
    }
}

/// Backoff or pause after a failure; nothing after a success (the claim already advanced the
/// schedule).
fn after_run(
    job: &Job,
    result: &RunResult,
    config: &warren_config::schema::CronConfig,
) -> JobAfterRun {
    if matches!(result.status, RunStatus::Ok | RunStatus::Cancelled) {
        return JobAfterRun {
            next_fire_ms: None,
            pause: None,
        };
    }
    let failures = job.failures + 1;
    if config.max_failures > 0 && failures >= config.max_failures {
        return JobAfterRun {
            next_fire_ms: Some(None),
            pause: Some(format!(
                "paused after {failures} consecutive failures; last: {}",
                result.error.as_deref().unwrap_or("failed")
            )),
        };
    }
    let shift = failures.saturating_sub(1).min(20);
    let delay = config
        .backoff_secs
        .saturating_mul(1u64 << shift)
        .min(config.backoff_max_secs);
    let backoff = now_ms() + i64::try_from(delay.saturating_mul(1000)).unwrap_or(i64::MAX / 2);
    let scheduled = job
        .next_fire_ms
        .or_else(|| schedule_of(job).ok().and_then(|s| s.next_after(now_ms())));
    JobAfterRun {
        next_fire_ms: Some(scheduled.map(|s| s.max(backoff))),
        pause: None,
    }
}
