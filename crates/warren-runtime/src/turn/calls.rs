//! Running a round's tool calls (LOOP-1, issue 7 §3 and §5): approvals by autonomy level,
//! concurrent execution of an admitted batch, cancellation, receipts, and results in call
//! order.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use time::OffsetDateTime;
use warren_core::{ChatMessage, ToolCall};
use warren_tools::{RiskClass, ToolError, ToolOutput};

use super::{AgentRunner, MAX_RESULT_CHARS, TurnEvent, TurnIo, TurnOutcome};
use crate::approval::{
    ApprovalDecision, ApprovalRequest, NO_OPERATOR, Requirement, ask_announced_with_timeout,
    requirement_for,
};
use crate::cancel::CancelToken;
use crate::delegate::{DELEGATE_TOOL, RESULT_TOOL, STATUS_TOOL};
use crate::history;

impl AgentRunner {
    /// What this call needs: the policy's autonomy, `always_ask` and `approve_own_writes`.
    /// A turn whose context caps the autonomy (an ACP session's mode) never runs above it.
    /// After untrusted content, a call with side effects asks (the taint rule, issue 24 §4).
    fn requirement(&self, call: &ToolCall, risk: RiskClass) -> Requirement {
        let risk = super::taint::effective_risk(call, risk);
        let needed = requirement_for(self.kit.policy(), &call.name, risk, &call.arguments);
        let needed = match warren_tools::ToolContext::current().autonomy_cap {
            Some(cap) if cap < self.kit.policy().autonomy() => {
                crate::approval::capped(needed, cap, &call.name, risk)
            }
            _ => needed,
        };
        super::taint::apply(self.kit.policy(), needed, call, risk)
    }

    /// Takes a slot in the agent's `max_actions_per_hour` window (its policy's limit) for one
    /// tool execution; a refused call is answered with the limit and when it frees.
    fn admit_action(&self, call: &ToolCall, session: Option<&str>) -> Result<(), CallResult> {
        self.admit_tool(&call.name, session)
            .map_err(|refused| CallResult {
                ok: false,
                content: format!("Error: refused by the runtime: {refused}"),
                receipt: None,
            })
    }

    /// Takes a slot in the agent's `max_actions_per_hour` window for one execution of `tool`,
    /// whoever runs it (a model's call, a cron command job, an SOP tool step: one window per
    /// agent across every entry point); a refusal is traced as a `limit` event.
    pub(crate) fn admit_tool(
        &self,
        tool: &str,
        session: Option<&str>,
    ) -> Result<(), crate::turn::limits::ActionLimited> {
        let limit = self.kit.policy().max_actions_per_hour();
        self.services
            .actions
            .admit(&self.alias, limit)
            .inspect_err(|refused| {
                self.services.trace.emit(
                    "limit",
                    &self.alias,
                    session,
                    json!({"limit": "max_actions_per_hour", "value": limit, "tool": tool,
                           "resets_in_secs": refused.resets_in.as_secs()}),
                );
            })
    }

    /// Whether `call` may need the operator (then the batch runs sequentially).
    pub(super) fn may_need_approval(&self, call: &ToolCall) -> bool {
        if call.name == DELEGATE_TOOL {
            return true; // a child turn may ask; never run it inside a parallel batch
        }
        match self.tool(&call.name) {
            Ok(tool) => {
                tool.risk() == RiskClass::Execute
                    || matches!(self.requirement(call, tool.risk()), Requirement::Ask(_))
            }
            Err(_) => false,
        }
    }

    /// Runs a round's calls; results in call order (LOOP-1, issue 7 §3). Gives the calls
    /// back with their result messages (the events share each call instead of copying it; it
    /// is taken back without a copy when no event consumer kept it). `known`: the names of
    /// this turn's tools (built-in and MCP), the only values of the metrics' tool label.
    pub(super) async fn run_calls(
        &self,
        calls: Vec<ToolCall>,
        known: &[String],
        session: Option<&str>,
        io: &TurnIo,
        outcome: &mut TurnOutcome,
    ) -> (Vec<ToolCall>, Vec<ChatMessage>) {
        let (cancel, events) = (&io.cancel, &io.events);
        let calls: Vec<Arc<ToolCall>> = calls.into_iter().map(Arc::new).collect();
        for c in &calls {
            events(TurnEvent::ToolCall(Arc::clone(c)));
        }
        let parallel = self.behaviour.parallel_tools
            && calls.len() > 1
            && !calls.iter().any(|c| self.may_need_approval(c));
        let mut results: Vec<Option<CallResult>> = vec![None; calls.len()];
        // Each call's start and end (its `execute_tool` span).
        let mut times = vec![(0, 0); calls.len()];
        if parallel {
            let mut set = tokio::task::JoinSet::new();
            let mut origins = vec![None; calls.len()];
            for (i, call) in calls.iter().enumerate() {
                if let Ok(tool) = self.tool(&call.name) {
                    if let Err(refused) = self.admit_action(call, session) {
                        results[i] = Some(refused);
                        continue;
                    }
                    let args = call.arguments.clone();
                    let cancel = cancel.clone();
                    // The turn's tool context (an editor's files) goes with the call's task.
                    let context = warren_tools::ToolContext::current();
                    let origin = call_origin(call, session);
                    origins[i] = Some(origin.clone());
                    set.spawn(context.scope(super::taint::Taint::carry(async move {
                        let start = crate::telemetry::span_start();
                        let run = origin.scope(tool.execute(args));
                        (i, start, race(run, &cancel).await)
                    })));
                }
            }
            while let Some(joined) = set.join_next().await {
                if let Ok((i, start, Some(r))) = joined {
                    times[i] = (start, crate::telemetry::span_start());
                    let result = self.finish_call(&calls[i], r);
                    if let Some(origin) = &origins[i] {
                        self.receipt_signed(origin, &result).await;
                    }
                    results[i] = Some(result);
                }
            }
            for (i, call) in calls.iter().enumerate() {
                if results[i].is_none() && self.tool(&call.name).is_err() {
                    results[i] = Some(self.unknown_tool(call));
                }
            }
        } else {
            for (i, call) in calls.iter().enumerate() {
                if cancel.is_cancelled() {
                    break;
                }
                let start = crate::telemetry::span_start();
                results[i] = self.run_one(call, session, io).await;
                times[i] = (start, crate::telemetry::span_start());
            }
        }
        let mut out = Vec::with_capacity(calls.len());
        for ((call, result), times) in calls.iter().zip(results).zip(times) {
            let r = result.unwrap_or(CallResult {
                ok: false,
                content: history::INTERRUPTED.to_string(),
                receipt: None,
            });
            outcome.tool_calls += 1;
            // A name the model made up is `unknown` (metric labels stay bounded).
            let tool = known
                .iter()
                .find(|k| **k == call.name)
                .map_or("unknown", |k| k);
            crate::telemetry::tool_call(
                self.alias.as_str(),
                tool,
                &call.id,
                times,
                r.ok,
                &call.arguments,
                &r.content,
            );
            self.services
                .trace
                .emit_with("tool_call", &self.alias, session, || {
                    json!({"tool": call.name, "id": call.id, "ok": r.ok, "receipt": r.receipt,
                           "chars": r.content.len()})
                });
            // History gets the result with its receipt; the event gets both as they are.
            let text = match &r.receipt {
                Some(receipt) => {
                    outcome.receipts.push((call.name.clone(), receipt.clone()));
                    let mut text = String::with_capacity(r.content.len() + 13 + receipt.len());
                    text.push_str(&r.content);
                    text.push_str("\n\n[receipt: ");
                    text.push_str(receipt);
                    text.push(']');
                    text
                }
                None => r.content.clone(),
            };
            events(TurnEvent::ToolResult {
                call: Arc::clone(call),
                ok: r.ok,
                content: r.content,
                receipt: r.receipt,
            });
            out.push(ChatMessage::tool_result(call, text));
        }
        let calls = calls
            .into_iter()
            .map(|c| Arc::try_unwrap(c).unwrap_or_else(|shared| (*shared).clone()))
            .collect();
        (calls, out)
    }

    pub(super) fn unknown_tool(&self, call: &ToolCall) -> CallResult {
        let msg = match self.tool(&call.name) {
            Err(e) => e.to_string(),
            Ok(_) => String::new(),
        };
        CallResult {
            ok: false,
            content: format!("Error: {msg}"),
            receipt: None,
        }
    }

    /// One call with its approvals; `None` if cancelled before a result.
    pub(super) async fn run_one(
        &self,
        call: &Arc<ToolCall>,
        session: Option<&str>,
        io: &TurnIo,
    ) -> Option<CallResult> {
        let cancel = &io.cancel;
        if call.name == DELEGATE_TOOL && self.can_delegate() {
            return self.delegate(call, io).await;
        }
        if matches!(call.name.as_str(), STATUS_TOOL | RESULT_TOOL) && self.can_delegate() {
            return Some(self.delegate_lookup(call).await);
        }
        let tool = match self.tool(&call.name) {
            Ok(t) => t,
            Err(_) => return Some(self.unknown_tool(call)),
        };
        let mut approved = false;
        match self.requirement(call, tool.risk()) {
            Requirement::Refuse(reason) => {
                crate::metrics::denial(self.alias.as_str(), "autonomy");
                return Some(CallResult {
                    ok: false,
                    content: format!("Error: refused by the runtime: {reason}"),
                    receipt: None,
                });
            }
            Requirement::Ask(reason) => {
                if let Some(denied) = self.approve(call, reason, session, io).await? {
                    return Some(denied);
                }
                approved = true;
            }
            Requirement::Run => {}
        }
        if let Err(refused) = self.admit_action(call, session) {
            return Some(refused);
        }
        let origin = call_origin(call, session);
        let run = |approved: bool| {
            let tool = Arc::clone(&tool);
            let args = call.arguments.clone();
            origin.clone().scope(async move {
                if approved {
                    tool.execute_approved(args).await
                } else {
                    tool.execute(args).await
                }
            })
        };
        let mut result = race(run(approved), cancel).await?;
        if let Err(ToolError::ApprovalRequired(reason)) = &result {
            if let Some(denied) = self.approve(call, reason.clone(), session, io).await? {
                return Some(denied);
            }
            result = race(run(true), cancel).await?;
        }
        let result = self.finish_call(call, result);
        self.receipt_signed(&origin, &result).await;
        Some(result)
    }

    /// Hands a call's receipt to what its tool left for it (memory provenance, issue 20 §3).
    async fn receipt_signed(&self, origin: &warren_tools::CallOrigin, result: &CallResult) {
        if let Some(receipt) = &result.receipt {
            for error in origin.receipt_signed(receipt).await {
                tracing::warn!(agent = %self.alias, %error, "after the call's receipt");
            }
        }
    }

    /// Asks the operator. `Some(Some(denied result))` when refused, `Some(None)` approved,
    /// `None` cancelled.
    pub(super) async fn approve(
        &self,
        call: &Arc<ToolCall>,
        reason: String,
        session: Option<&str>,
        io: &TurnIo,
    ) -> Option<Option<CallResult>> {
        let (cancel, events) = (&io.cancel, &io.events);
        let request = ApprovalRequest {
            agent: self.alias.clone(),
            tool: call.name.clone(),
            arguments: call.arguments.clone(),
            reason: reason.clone(),
        };
        let timeout_secs = self.kit.policy().approval_timeout().as_secs();
        let announce = |approval: &str| {
            events(TurnEvent::ApprovalPending {
                call: Arc::clone(call),
                approval: approval.to_string(),
                reason: reason.clone(),
                timeout_secs,
            });
        };
        let ask = ask_announced_with_timeout(
            io.approver.as_ref(),
            request,
            Duration::from_secs(timeout_secs),
            &announce,
        );
        let decision = tokio::select! {
            d = ask => d,
            () = cancel.cancelled() => return None,
        };
        self.services.trace.emit(
            "approval",
            &self.alias,
            session,
            json!({"tool": call.name, "id": call.id, "decision": decision}),
        );
        crate::metrics::approval_decision(self.alias.as_str(), decision);
        Some(match decision {
            ApprovalDecision::Approved => None,
            ApprovalDecision::Denied => Some(CallResult {
                ok: false,
                content: "Error: the operator denied this call; it was not run".into(),
                receipt: None,
            }),
            ApprovalDecision::NoOperator => Some(CallResult {
                ok: false,
                content: format!("Error: {NO_OPERATOR}; the call was not run"),
                receipt: None,
            }),
            ApprovalDecision::TimedOut => Some(CallResult {
                ok: false,
                content: "Error: no approval arrived in time; the call was denied and not run"
                    .into(),
                receipt: None,
            }),
        })
    }

    pub(super) fn finish_call(
        &self,
        call: &ToolCall,
        result: Result<ToolOutput, ToolError>,
    ) -> CallResult {
        match result {
            Ok(out) => {
                if let Some(source) =
                    super::taint::untrusted_input(self.kit.policy(), self.kit.sandbox(), call)
                {
                    super::taint::Taint::mark(source);
                }
                let mut content = match out.content {
                    serde_json::Value::String(s) => s,
                    other => other.to_string(),
                };
                if content.is_empty() {
                    content = "(no output)".into();
                }
                let secs = OffsetDateTime::now_utc().unix_timestamp();
                let receipt =
                    self.services
                        .receipts
                        .sign(&call.name, &call.arguments, &content, secs);
                if content.len() > MAX_RESULT_CHARS && content.chars().count() > MAX_RESULT_CHARS {
                    content = content.chars().take(MAX_RESULT_CHARS).collect::<String>()
                        + "\n[truncated]";
                }
                CallResult {
                    ok: true,
                    content,
                    receipt: Some(receipt),
                }
            }
            Err(e) => {
                if matches!(e, ToolError::Denied(_)) {
                    crate::metrics::denial(self.alias.as_str(), "policy");
                }
                CallResult {
                    ok: false,
                    content: format!("Error: {e}"),
                    receipt: None,
                }
            }
        }
    }
}

/// What a tool call runs as: its session and call id (memory provenance, issue 20 §3).
fn call_origin(call: &ToolCall, session: Option<&str>) -> warren_tools::CallOrigin {
    warren_tools::CallOrigin::new(
        session.map(str::to_string),
        Some(call.id.clone()).filter(|id| !id.is_empty()),
    )
}

/// Races a tool future against cancellation (dropping the future kills its process).
async fn race<F>(fut: F, cancel: &CancelToken) -> Option<Result<ToolOutput, ToolError>>
where
    F: std::future::Future<Output = Result<ToolOutput, ToolError>>,
{
    // Biased: a tool that is ready at once never registers with the cancel token.
    tokio::select! {
        biased;
        r = fut => Some(r),
        () = cancel.cancelled() => None,
    }
}

#[derive(Debug, Clone)]
pub(super) struct CallResult {
    pub(super) ok: bool,
    pub(super) content: String,
    pub(super) receipt: Option<String>,
}
