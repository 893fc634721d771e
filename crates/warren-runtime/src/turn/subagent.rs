//! The `delegate` tool's execution (PERM-7): a child turn under a narrowed policy, in the
//! foreground or (issue 18 §3) in the background with a result record and a control-plane
//! row; and the `delegate_status` / `delegate_result` lookups. The arguments, the record and
//! its confined file live in [`crate::delegate`].

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use warren_core::{ChatMessage, ToolCall};
use warren_security::NarrowRequest;
use warren_store::control_plane::{ControlPlane, Owner};
use warren_tools::ToolOutput;

use super::calls::CallResult;
use super::{AgentRunner, TurnError, TurnIo, TurnOutcome};
use crate::cancel::CancelToken;
use crate::delegate::{
    self, DelegateArgs, DelegateError, RESULT_TOOL, RUN_KIND, ResultRecord, TaskArgs,
};

/// How often a background delegate looks for a cancel request on its control-plane row.
const CANCEL_POLL: Duration = Duration::from_millis(500);
/// Characters of the task shown in the control plane's label.
const LABEL_CHARS: usize = 40;

fn fail(m: String) -> CallResult {
    CallResult {
        ok: false,
        content: format!("Error: {m}"),
        receipt: None,
    }
}

impl AgentRunner {
    /// A `delegate` call's arguments and its child runner (this agent's kit narrowed by the
    /// request), or the call's failed result: checked before the call passes the gate, so an
    /// invalid delegation neither asks the operator nor takes a slot.
    pub(super) fn delegation(
        &self,
        call: &ToolCall,
    ) -> Result<(DelegateArgs, AgentRunner), CallResult> {
        let args: DelegateArgs = serde_json::from_value(call.arguments.clone())
            .map_err(|e| fail(format!("invalid arguments: {e}")))?;
        let child = self.child(&args).map_err(|e| fail(e.to_string()))?;
        Ok((args, child))
    }

    /// Runs a `delegate` call (its [`Self::delegation`]) as a child turn under a narrowed
    /// policy (PERM-7). (Boxed and `Send` by its signature: the loop reaches itself through
    /// this call.)
    pub(super) fn delegate<'a>(
        &'a self,
        call: &'a ToolCall,
        (args, child): (DelegateArgs, AgentRunner),
        io: &'a TurnIo,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<CallResult>> + Send + 'a>> {
        Box::pin(async move {
            if args.background {
                return Some(match self.start_background(child, args, io).await {
                    Ok(started) => self.finish_call(call, Ok(ToolOutput::json(started))),
                    Err(e) => fail(e.to_string()),
                });
            }
            // The child asks the same operator and stops with the parent; its events stay quiet.
            let child_io = TurnIo {
                max_output_tokens: None,
                approver: Arc::clone(&io.approver),
                cancel: io.cancel.clone(),
                events: Arc::new(|_| {}),
            };
            let turn: ChildTurn<'_> =
                Box::pin(
                    async move { child.run_detached(Vec::new(), &args.task, &child_io).await },
                );
            match turn.await {
                Ok((o, _)) => Some(self.finish_call(
                    call,
                    Ok(ToolOutput::json(json!({
                        "reply": o.reply,
                        "tool_calls": o.tool_calls,
                        "provider_calls": o.provider_calls,
                        "hit_iteration_cap": o.hit_iteration_cap,
                    }))),
                )),
                Err(TurnError::Cancelled) => None,
                Err(e) => Some(fail(format!("the subagent failed: {e}"))),
            }
        })
    }

    /// The child runner: this agent's kit narrowed by the call's request (refused naming the
    /// first axis that would widen it). Every limit of the child is its narrowed policy's;
    /// only the delegation depth (not a policy axis) is counted down here.
    fn child(&self, args: &DelegateArgs) -> Result<AgentRunner, crate::agent::AgentError> {
        let max = args
            .max_iterations
            .unwrap_or((self.max_iterations() / 2).max(1));
        let request = NarrowRequest {
            autonomy: args.autonomy,
            allowed_tools: args.tools.clone(),
            allowed_commands: args.allowed_commands.clone(),
            max_tool_iterations: Some(max),
            max_cost_per_day_usd: args.max_cost_usd,
            read_write: args.read_write.clone(),
            read_only: args.read_only.clone(),
            ..NarrowRequest::default()
        };
        let kit = self.kit.narrowed(request)?;
        let mut behaviour = self.behaviour.clone();
        behaviour.delegation_depth = behaviour.delegation_depth.saturating_sub(1);
        let mut child = AgentRunner::assemble(
            self.alias.clone(),
            kit,
            Arc::clone(&self.route),
            self.model.clone(),
            behaviour,
            Arc::clone(&self.services),
        );
        child.control_plane.clone_from(&self.control_plane);
        child.scrubber = Arc::clone(&self.scrubber);
        Ok(child)
    }

    /// Starts `child` in the background: writes its `running` record, registers it in the
    /// control plane and spawns the turn; returns what the model is told (the task id).
    async fn start_background(
        &self,
        child: AgentRunner,
        args: DelegateArgs,
        io: &TurnIo,
    ) -> Result<serde_json::Value, DelegateError> {
        let Some(plane_path) = self.control_plane.clone() else {
            return Err(DelegateError::NoControlPlane);
        };
        let id = crate::new_run_id("dlg-");
        let owner = Owner::current();
        let agent = self.alias.to_string();
        let record = ResultRecord::running(&id, &self.alias, &args.task, &owner);
        let workspace = self.kit.policy().workspace().to_path_buf();
        let label: String = format!(
            "delegate:{}",
            args.task.chars().take(LABEL_CHARS).collect::<String>()
        );
        let stores = Arc::clone(&self.services.stores);
        let (r, ws, a, o) = (
            record.clone(),
            workspace.clone(),
            agent.clone(),
            owner.clone(),
        );
        let (dir, plane) = tokio::task::spawn_blocking(move || {
            let dir =
                delegate::results_dir(&ws, true)?.ok_or_else(|| DelegateError::NotCreated {
                    path: ws.join(delegate::RESULTS_DIR),
                })?;
            delegate::write_record(&dir, &r)?;
            let registered = stores
                .control_plane()
                .and_then(|p| p.register(&r.task_id, RUN_KIND, &a, &label, &o).map(|()| p));
            match registered {
                Ok(p) => Ok((dir, p)),
                Err(e) => {
                    let failed = ResultRecord {
                        error: Some(e.to_string()),
                        ..r.finished("failed")
                    };
                    let _ = delegate::write_record(&dir, &failed);
                    Err(DelegateError::from(e))
                }
            }
        })
        .await
        .map_err(DelegateError::Start)??;
        // Its row's heartbeat, in a `warren agent` process too (the daemon's task already
        // runs in the daemon).
        crate::heartbeat::keep_beating(
            plane_path,
            None,
            false,
            warren_store::control_plane::HEARTBEAT,
        );
        let cancel = CancelToken::new();
        let child_io = TurnIo {
            max_output_tokens: None,
            approver: Arc::clone(&io.approver),
            cancel: cancel.clone(),
            events: Arc::new(|_| {}),
        };
        let task = args.task;
        let watcher = tokio::spawn(watch_cancel(Arc::clone(&plane), id.clone(), cancel));
        // The child keeps the parent's tool context (an ACP session's autonomy cap and editor
        // transport) and taint marker: a new task starts without them.
        let context = warren_tools::ToolContext::current();
        tokio::spawn(context.scope(super::taint::Taint::carry(async move {
            let turn: ChildTurn<'_> =
                Box::pin(async { child.run_detached(Vec::new(), &task, &child_io).await });
            let outcome = turn.await;
            watcher.abort();
            let ended = match outcome {
                Ok((o, _)) => ResultRecord {
                    reply: Some(o.reply),
                    tool_calls: o.tool_calls,
                    provider_calls: o.provider_calls,
                    hit_iteration_cap: o.hit_iteration_cap,
                    ..record.finished("ok")
                },
                Err(TurnError::Cancelled) => ResultRecord {
                    error: Some("cancelled (warren runs cancel)".into()),
                    ..record.finished("cancelled")
                },
                Err(e) => ResultRecord {
                    error: Some(e.to_string()),
                    ..record.finished("failed")
                },
            };
            let _ = tokio::task::spawn_blocking(move || {
                // The file first: it is the result; the row then says the run ended.
                if let Err(e) = delegate::write_record(&dir, &ended) {
                    tracing::error!(task = %ended.task_id, "background delegate: {e}");
                }
                if let Err(e) = plane.finish(&ended.task_id, &ended.status, ended.error.as_deref())
                {
                    tracing::error!(task = %ended.task_id, "background delegate: {e}");
                }
            })
            .await;
        })));
        Ok(json!({
            "task_id": id,
            "status": "running",
            "result_file": format!("{}/{id}.json", delegate::RESULTS_DIR),
            "note": format!("the subagent runs in the background; ask delegate_status or {RESULT_TOOL} with this task_id"),
        }))
    }

    /// `delegate_status` / `delegate_result`: the record of a background delegate of this
    /// agent (the file first, the control plane's `lost`/`timed_out` only while it says
    /// `running`).
    pub(super) async fn delegate_lookup(&self, call: &ToolCall) -> CallResult {
        let args: TaskArgs = match serde_json::from_value(call.arguments.clone()) {
            Ok(a) => a,
            Err(e) => return fail(format!("invalid arguments: {e}")),
        };
        let workspace = self.kit.policy().workspace().to_path_buf();
        let stores = self
            .control_plane
            .is_some()
            .then(|| Arc::clone(&self.services.stores));
        let id = args.task_id;
        let read = tokio::task::spawn_blocking(move || {
            let plane = stores.and_then(|s| s.control_plane_existing().ok().flatten());
            delegate::read_status(&workspace, plane.as_deref(), &id)
        })
        .await;
        let record = match read {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return fail(e.to_string()),
            Err(e) => return fail(format!("the lookup failed: {e}")),
        };
        let content = if call.name == RESULT_TOOL {
            serde_json::to_value(&record).unwrap_or_default()
        } else {
            json!({
                "task_id": record.task_id,
                "status": record.status,
                "started_at": record.started_at,
                "finished_at": record.finished_at,
                "error": record.error,
            })
        };
        self.finish_call(call, Ok(ToolOutput::json(content)))
    }
}

/// Cancels `cancel` when `warren runs cancel` flags the run's row (until aborted).
async fn watch_cancel(plane: Arc<ControlPlane>, id: String, cancel: CancelToken) {
    loop {
        tokio::time::sleep(CANCEL_POLL).await;
        let (p, i) = (Arc::clone(&plane), id.clone());
        let flagged = tokio::task::spawn_blocking(move || p.get(&i))
            .await
            .ok()
            .and_then(Result::ok)
            .flatten()
            .is_some_and(|r| r.cancel_requested);
        if flagged {
            cancel.cancel();
            return;
        }
    }
}

/// A child turn's future, boxed: the loop runs itself recursively through `delegate`.
type ChildTurn<'a> = std::pin::Pin<
    Box<
        dyn std::future::Future<Output = Result<(TurnOutcome, Vec<ChatMessage>), TurnError>>
            + Send
            + 'a,
    >,
>;
