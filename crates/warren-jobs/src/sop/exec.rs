//! One run's walk through its steps: receipt first, then the move past the step (compare-and-
//! set on the run's revision), so a step whose receipt exists is never run again.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use warren_config::failpoint;
use warren_config::schema::sop::{Branch, SopDef, Step, StepKind};
use warren_store::sop::{SopRun, StepOutcome};

use super::{Engine, FAILPOINT_STEP_RECORDED, blocking, defs};
use crate::unattended::ToolCall;
use warren_runtime::cancel::CancelToken;
use warren_runtime::turn::TurnError;

/// How a step ended.
enum StepResult {
    Done {
        output: String,
        receipt: Option<String>,
    },
    /// The run ends: `status` (failed, denied, cancelled) with why.
    End { status: &'static str, error: String },
    /// The generation stops: the run stays active for the next one.
    Park,
}

impl Engine {
    /// Walks `run` from its first incomplete step to its end (or parks it).
    pub(super) async fn execute(self: &Arc<Self>, run: SopRun, cancel: CancelToken) {
        let def: SopDef = match serde_json::from_value(run.definition.clone()) {
            Ok(d) => d,
            Err(e) => {
                self.end(
                    &run,
                    "failed",
                    &format!("the stored definition does not read: {e}"),
                )
                .await;
                return;
            }
        };
        let mut revision = run.revision;
        let mut index = run.step_index as usize;
        loop {
            let Some(step) = def.steps.get(index) else {
                self.end(&run, "ok", "").await;
                return;
            };
            if self.is_parking() {
                tracing::info!(run = %run.id, step = %step.id, "SOP run parked for the next generation");
                return;
            }
            if cancel.is_cancelled() || self.cancel_requested(&run.id).await {
                self.end(&run, "cancelled", "cancelled by the operator")
                    .await;
                return;
            }
            let store = Arc::clone(&self.store);
            let (id, sid) = (run.id.clone(), step.id.clone());
            let recorded = blocking(move || store.step(&id, &sid))
                .await
                .ok()
                .and_then(Result::ok)
                .flatten();
            let output = match recorded {
                // The side effect happened before the process died: never again.
                Some(record) => {
                    tracing::info!(run = %run.id, step = %step.id, "SOP step has its receipt: not repeated");
                    record.output
                }
                None => {
                    let outputs = self.outputs(&run.id).await;
                    let result = self
                        .run_step(&run, &def, step, index, &outputs, &cancel, &mut revision)
                        .await;
                    match result {
                        StepResult::Done { output, receipt } => {
                            let store = Arc::clone(&self.store);
                            let (id, sid, kind, out, rc) = (
                                run.id.clone(),
                                step.id.clone(),
                                step.kind.name(),
                                output.clone(),
                                receipt.clone(),
                            );
                            let idx = u32::try_from(index).unwrap_or(u32::MAX);
                            let stored = blocking(move || {
                                store.record_step(
                                    &id,
                                    &StepOutcome {
                                        step_id: &sid,
                                        idx,
                                        kind,
                                        output: &out,
                                        receipt: rc.as_deref(),
                                    },
                                )
                            })
                            .await;
                            if let Err(e) = stored
                                .map_err(|e| e.to_string())
                                .and_then(|r| r.map_err(|e| e.to_string()))
                            {
                                self.end(
                                    &run,
                                    "failed",
                                    &format!(
                                        "step '{}' ran but its receipt was not stored: {e}",
                                        step.id
                                    ),
                                )
                                .await;
                                return;
                            }
                            output
                        }
                        StepResult::End { status, error } => {
                            self.end(&run, status, &error).await;
                            return;
                        }
                        StepResult::Park => return,
                    }
                }
            };
            failpoint::crash_point(FAILPOINT_STEP_RECORDED);
            let next = match next_of(&def, step, index, &output) {
                Some(n) => n,
                None => {
                    // A condition chose `stop`: the run ends well, the rest skipped.
                    self.mark_done(
                        &run,
                        step,
                        def.steps.len(),
                        &mut revision,
                        Some("stopped by the condition; the rest skipped"),
                    )
                    .await;
                    self.end(&run, "ok", "").await;
                    return;
                }
            };
            if !self.mark_done(&run, step, next, &mut revision, None).await {
                return;
            }
            index = next;
        }
    }

    /// Moves the run past `step` to `next` (CAS). `false` when the run changed meanwhile (it
    /// was cancelled or another owner took it): this walk stops.
    async fn mark_done(
        &self,
        run: &SopRun,
        step: &Step,
        next: usize,
        revision: &mut i64,
        why: Option<&str>,
    ) -> bool {
        let store = Arc::clone(&self.store);
        let (id, sid, rev) = (run.id.clone(), step.id.clone(), *revision);
        let what = format!("step {} done", step.id);
        let why = why.map(str::to_string);
        let next = u32::try_from(next).unwrap_or(u32::MAX);
        match blocking(move || {
            store.advance(
                &id,
                Some(&sid),
                next,
                rev,
                ("engine", &what, why.as_deref()),
            )
        })
        .await
        {
            Ok(Ok(r)) => {
                *revision = r;
                true
            }
            Ok(Err(e)) => {
                tracing::warn!(run = %run.id, "SOP run stopped here: {e}");
                false
            }
            Err(e) => {
                tracing::error!(run = %run.id, "SOP run stopped here: {e}");
                false
            }
        }
    }

    async fn cancel_requested(&self, id: &str) -> bool {
        let store = Arc::clone(&self.store);
        let id = id.to_string();
        matches!(blocking(move || store.get(&id)).await, Ok(Ok(Some(r))) if r.cancel_requested || !r.is_active())
    }

    /// Outputs of the steps that ran, by id.
    async fn outputs(&self, id: &str) -> BTreeMap<String, String> {
        let store = Arc::clone(&self.store);
        let id = id.to_string();
        blocking(move || store.steps(&id))
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default()
            .into_iter()
            .map(|s| (s.step_id, s.output))
            .collect()
    }

    /// Ends the run with `status` in the store and the control plane, prunes old runs.
    async fn end(&self, run: &SopRun, status: &str, error: &str) {
        let store = Arc::clone(&self.store);
        let (id, st, err, sop, keep) = (
            run.id.clone(),
            status.to_string(),
            (!error.is_empty()).then(|| error.to_string()),
            run.sop.clone(),
            self.settings.keep_finished_runs,
        );
        let ended = blocking(move || {
            let ended = store.finish(&id, &st, err.as_deref(), "engine", None);
            let _ = store.prune(&sop, keep);
            ended
        })
        .await;
        if let Some(control) = &self.control {
            let control = Arc::clone(control);
            let state = match status {
                "ok" => "ok",
                "cancelled" => "cancelled",
                _ => "failed",
            };
            let (id, e) = (
                run.id.clone(),
                (!error.is_empty()).then(|| error.to_string()),
            );
            let _ = blocking(move || control.finish(&id, state, e.as_deref())).await;
        }
        if matches!(ended, Ok(Ok(true))) {
            self.host.trace().emit(
                "sop_run",
                &run.agent,
                None,
                json!({"sop": run.sop, "run": run.id, "status": status,
                       "error": (!error.is_empty()).then_some(error),
                       "durable": self.fallback.is_none()}),
            );
            tracing::info!(sop = %run.sop, run = %run.id, status, "SOP run ended");
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_step(
        &self,
        run: &SopRun,
        def: &SopDef,
        step: &Step,
        index: usize,
        outputs: &BTreeMap<String, String>,
        cancel: &CancelToken,
        revision: &mut i64,
    ) -> StepResult {
        match step.action() {
            StepKind::Turn { prompt } => {
                let prompt = defs::render(&prompt, &run.input, outputs);
                self.turn(run, def, &prompt, cancel).await
            }
            StepKind::Tool { tool, args } => {
                let args = defs::render_args(&args, &run.input, outputs);
                self.tool(def, &tool, args, cancel).await
            }
            StepKind::Condition {
                contains,
                equals,
                regex,
                ..
            } => {
                // The previous step that ran (a goto may have skipped some).
                let previous = def.steps[..index]
                    .iter()
                    .rev()
                    .find_map(|s| outputs.get(&s.id))
                    .cloned()
                    .unwrap_or_default();
                let matched = if let Some(c) = contains {
                    previous.contains(c.as_str())
                } else if let Some(e) = equals {
                    previous.trim() == e.trim()
                } else if let Some(r) = regex {
                    match regex::Regex::new(&r) {
                        Ok(re) => re.is_match(&previous),
                        Err(e) => {
                            return StepResult::End {
                                status: "failed",
                                error: format!("step '{}': regex: {e}", step.id),
                            };
                        }
                    }
                } else {
                    false
                };
                StepResult::Done {
                    output: if matched { "match" } else { "miss" }.to_string(),
                    receipt: None,
                }
            }
            StepKind::Approval {
                message,
                timeout_secs,
            } => {
                let message = message
                    .as_deref()
                    .map(|m| defs::render(m, &run.input, outputs));
                let timeout = timeout_secs.unwrap_or(self.settings.approval_timeout_secs);
                self.approval(run, step, message, timeout, cancel, revision)
                    .await
            }
        }
    }

    /// A turn step through THE turn door.
    async fn turn(
        &self,
        run: &SopRun,
        def: &SopDef,
        prompt: &str,
        cancel: &CancelToken,
    ) -> StepResult {
        let failed = |e: String| StepResult::End {
            status: "failed",
            error: e,
        };
        let crate::unattended::Unattended {
            outcome,
            asked,
            receipts,
        } = crate::unattended::turn(
            &self.host,
            def.agent.clone(),
            &format!("sop-{}-{}", run.sop, run.id),
            prompt.to_string(),
            cancel,
            "an SOP turn never runs it unapproved (add an approval step and allow the tool in the agent's profile)",
        )
        .await;
        match (outcome, asked) {
            (_, Some(asked)) => failed(asked),
            (Ok(outcome), None) => StepResult::Done {
                output: outcome.reply,
                receipt: (!receipts.is_empty()).then(|| receipts.join(",")),
            },
            (Err(TurnError::Cancelled), None) if self.is_parking() => StepResult::Park,
            (Err(TurnError::Cancelled), None) => StepResult::End {
                status: "cancelled",
                error: "cancelled by the operator".into(),
            },
            (Err(e), None) => failed(e.to_string()),
        }
    }

    /// A tool step: the agent's tool under its policy (a call that needs approval fails; a
    /// command that exits non-zero fails the run).
    async fn tool(
        &self,
        def: &SopDef,
        name: &str,
        args: serde_json::Value,
        cancel: &CancelToken,
    ) -> StepResult {
        let call = crate::unattended::tool_call(
            &self.host,
            &def.agent,
            name,
            args,
            cancel,
            "an SOP tool step never runs it unapproved (allow it in the agent's profile, or gate it with an approval step and a turn)",
        )
        .await;
        match call {
            ToolCall::Done(output) => StepResult::Done {
                output: match output {
                    serde_json::Value::String(s) => s,
                    other => other.to_string(),
                },
                receipt: None,
            },
            ToolCall::Failed { error, .. } => StepResult::End {
                status: "failed",
                error,
            },
            ToolCall::Cancelled => StepResult::End {
                status: "cancelled",
                error: "cancelled by the operator".into(),
            },
        }
    }

    /// An approval gate: the run waits (status `waiting`) for the operator's decision in the
    /// store; no decision within `timeout_secs` (counted from when the run first reached the
    /// gate, across restarts) is a denial.
    async fn approval(
        &self,
        run: &SopRun,
        step: &Step,
        message: Option<String>,
        timeout_secs: u64,
        cancel: &CancelToken,
        revision: &mut i64,
    ) -> StepResult {
        let waiting_event = format!("waiting {}", step.id);
        let store = Arc::clone(&self.store);
        let (id, ev) = (run.id.clone(), waiting_event.clone());
        let since = blocking(move || store.events(&id))
            .await
            .ok()
            .and_then(Result::ok)
            .and_then(|events| events.into_iter().find(|e| e.what == ev))
            .and_then(|e| warren_store::timefmt::parse(&e.at));
        let since = match since {
            Some(t) => t,
            None => {
                let store = Arc::clone(&self.store);
                let (id, rev, ev, msg) = (
                    run.id.clone(),
                    *revision,
                    waiting_event.clone(),
                    message.clone(),
                );
                let set = blocking(move || {
                    let r = store.set_waiting(&id, true, rev)?;
                    store.event(&id, "engine", &ev, msg.as_deref())?;
                    Ok::<_, warren_store::sop::SopStoreError>(r)
                })
                .await;
                match set {
                    Ok(Ok(r)) => *revision = r,
                    Ok(Err(e)) => {
                        return StepResult::End {
                            status: "failed",
                            error: e.to_string(),
                        };
                    }
                    Err(e) => {
                        return StepResult::End {
                            status: "failed",
                            error: e.to_string(),
                        };
                    }
                }
                tracing::warn!(sop = %run.sop, run = %run.id, step = %step.id, "SOP run waits for approval: `warren sop approve {} {}` or `warren sop deny {} {}`{}", run.id, step.id, run.id, step.id, message.as_deref().map(|m| format!(" ({m})")).unwrap_or_default());
                warren_store::timefmt::now()
            }
        };
        let deadline =
            since + time::Duration::seconds(i64::try_from(timeout_secs).unwrap_or(i64::MAX / 2));
        loop {
            let store = Arc::clone(&self.store);
            let (id, sid) = (run.id.clone(), step.id.clone());
            let decided = blocking(move || {
                let d = store.approval(&id, &sid)?;
                let r = store.get(&id)?;
                Ok::<_, warren_store::sop::SopStoreError>((d, r))
            })
            .await;
            if let Ok(Ok((decision, current))) = decided {
                if let Some(current) = &current {
                    *revision = current.revision;
                    if current.cancel_requested || !current.is_active() {
                        return StepResult::End {
                            status: "cancelled",
                            error: "cancelled by the operator".into(),
                        };
                    }
                }
                if let Some(d) = decision {
                    if d.decision == "approved" {
                        return StepResult::Done {
                            output: format!("approved by {}", d.who),
                            receipt: Some(format!("approval:{}:{}", d.who, d.at)),
                        };
                    }
                    return StepResult::End {
                        status: "denied",
                        error: format!(
                            "step '{}' denied by {}{}",
                            step.id,
                            d.who,
                            d.reason.map(|r| format!(": {r}")).unwrap_or_default()
                        ),
                    };
                }
            }
            if warren_store::timefmt::now() >= deadline {
                return StepResult::End {
                    status: "denied",
                    error: format!(
                        "step '{}': no decision within {timeout_secs} s (a timeout denies)",
                        step.id
                    ),
                };
            }
            if self.is_parking() {
                return StepResult::Park;
            }
            if cancel.is_cancelled() {
                return StepResult::End {
                    status: "cancelled",
                    error: "cancelled by the operator".into(),
                };
            }
            let _ = tokio::time::timeout(Duration::from_millis(250), self.changed.notified()).await;
        }
    }
}

/// The index after `step` given its `output`; `None` = stop the run.
fn next_of(def: &SopDef, step: &Step, index: usize, output: &str) -> Option<usize> {
    let StepKind::Condition {
        on_match, on_miss, ..
    } = step.action()
    else {
        return Some(index + 1);
    };
    let branch = if output == "match" { on_match } else { on_miss };
    match Branch::parse(&branch).unwrap_or(Branch::Stop) {
        Branch::Continue => Some(index + 1),
        Branch::Stop => None,
        Branch::Goto(id) => def.steps.iter().position(|s| s.id == id),
    }
}
