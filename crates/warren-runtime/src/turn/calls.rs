//! Running a round's tool calls (LOOP-1, issue 7 §3 and §5): approvals by autonomy level,
//! concurrent execution of an admitted batch, cancellation, receipts, and results in call
//! order. [`AgentRunner::gate`] is the one policy gate of every tool execution, a model's call
//! or an unattended one (`crate::unattended`).

use std::borrow::Cow;
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

    /// THE policy gate of one tool execution, for a model's call and an unattended one (a cron
    /// command job, an SOP tool step) alike: the call's [`Self::requirement`] (autonomy,
    /// `always_ask`, a session's cap, the taint rule); a refusal counts as an `autonomy`
    /// denial; a call that needs approval goes to `ask`, the caller's own handling (a turn asks
    /// the operator, an unattended caller refuses); then a slot in the agent's
    /// `max_actions_per_hour` window. `Ok(approved)`: run it (`approved` when `ask` approved).
    pub async fn gate<A, F>(
        &self,
        call: &ToolCall,
        risk: RiskClass,
        session: Option<&str>,
        ask: impl FnOnce(String) -> F,
    ) -> Result<bool, Stopped<A>>
    where
        F: std::future::Future<Output = Result<(), A>>,
    {
        let approved = match self.requirement(call, risk) {
            Requirement::Refuse(reason) => {
                crate::metrics::denial(self.alias.as_str(), "autonomy");
                return Err(Stopped::Refused(reason));
            }
            Requirement::Ask(reason) => {
                ask(reason).await.map_err(Stopped::Unapproved)?;
                true
            }
            Requirement::Run => false,
        };
        self.admit_tool(&call.name, session)
            .map_err(|refused| Stopped::Refused(refused.to_string()))?;
        Ok(approved)
    }

    /// Takes a slot in the agent's `max_actions_per_hour` window for one execution of `tool`,
    /// whoever runs it (a model's call, a cron command job, an SOP tool step: one window per
    /// agent across every entry point, all through [`Self::gate`]); a refusal is traced as a
    /// `limit` event.
    fn admit_tool(
        &self,
        tool: &str,
        session: Option<&str>,
    ) -> Result<(), crate::actions::ActionLimited> {
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
                    // No call of a parallel batch asks (`may_need_approval`); a refusal still
                    // stops it.
                    let asked = |reason| async { Err(reason) };
                    if let Err(stopped) = self.gate(call, tool.risk(), session, asked).await {
                        results[i] = Some(refused(&stopped.answer(|reason| reason)));
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
            let mut r = result.unwrap_or(CallResult {
                ok: false,
                content: history::INTERRUPTED.to_string(),
                receipt: None,
            });
            // THE one place every tool result passes (file reads, shell, git, MCP, http,
            // delegation, errors) before the telemetry, the trace, the events, the model and
            // the session see it: scrubbed of every configured secret (issue 35 §4). The
            // receipt stays the one signed over the tool's own output.
            if let Cow::Owned(clean) = self.scrubber.scrub(&r.content) {
                r.content = clean;
            }
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
        if matches!(call.name.as_str(), STATUS_TOOL | RESULT_TOOL) && self.can_delegate() {
            return Some(self.delegate_lookup(call).await);
        }
        // The operator decides; `Err(None)`: cancelled while asking.
        let ask = |reason| async move {
            match self.approve(call, reason, session, io).await {
                Some(None) => Ok(()),
                Some(Some(denied)) => Err(Some(denied)),
                None => Err(None),
            }
        };
        if call.name == DELEGATE_TOOL && self.can_delegate() {
            // Handing work to a child is an action of this agent: the same gate (`always_ask`,
            // a session's cap, the taint rule: a tainted turn asks before it delegates; a slot
            // in the window). It reads nothing itself; the child's calls pass its own gate.
            let delegation = match self.delegation(call) {
                Ok(d) => d,
                Err(failed) => return Some(failed),
            };
            if let Err(stopped) = self.gate(call, RiskClass::Read, session, ask).await {
                return stopped.answer(|reason| Some(refused(&reason)));
            }
            return self.delegate(call, delegation, io).await;
        }
        let tool = match self.tool(&call.name) {
            Ok(t) => t,
            Err(_) => return Some(self.unknown_tool(call)),
        };
        let approved = match self.gate(call, tool.risk(), session, ask).await {
            Ok(approved) => approved,
            Err(stopped) => return stopped.answer(|reason| Some(refused(&reason))),
        };
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
            session: session.map(str::to_string),
        };
        let timeout_secs = self.kit.policy().approval_timeout().as_secs();
        let announced = std::sync::Mutex::new(None::<String>);
        let announce = |approval: &str| {
            *announced.lock().unwrap_or_else(|p| p.into_inner()) = Some(approval.to_string());
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
        // Who decided (issue 38 §4: an approver on a channel, the API), kept in the trace.
        let approval = announced.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let by = approval
            .as_deref()
            .and_then(|id| io.approver.decided_by(id));
        self.services.trace.emit(
            "approval",
            &self.alias,
            session,
            json!({"tool": call.name, "id": call.id, "decision": decision, "approval": approval, "by": by}),
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

    /// Counts a tool's own refusal (paths, commands, grants) as a `policy` denial, whoever ran
    /// the call.
    pub fn count_denial(&self, error: &ToolError) {
        if matches!(error, ToolError::Denied(_)) {
            crate::metrics::denial(self.alias.as_str(), "policy");
        }
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
                self.count_denial(&e);
                CallResult {
                    ok: false,
                    content: format!("Error: {e}"),
                    receipt: None,
                }
            }
        }
    }
}

/// Why [`AgentRunner::gate`] stopped a call before it ran.
pub enum Stopped<A> {
    /// Refused, by the policy or by the agent's full `max_actions_per_hour` window: why.
    Refused(String),
    /// The call needed approval and the caller's `ask` did not give it: its answer.
    Unapproved(A),
}

impl<A> Stopped<A> {
    /// The caller's answer: its own for an unapproved call, `refused`'s for a refusal.
    pub fn answer(self, refused: impl FnOnce(String) -> A) -> A {
        match self {
            Self::Refused(reason) => refused(reason),
            Self::Unapproved(answer) => answer,
        }
    }
}

/// A model's call the runtime refused, answered with why.
fn refused(reason: &str) -> CallResult {
    CallResult {
        ok: false,
        content: format!("Error: refused by the runtime: {reason}"),
        receipt: None,
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;
    use warren_config::schema::Autonomy;
    use warren_core::AgentAlias;
    use warren_testkit::fake_llm::{FakeCall, FakeOpenAi, FakeReply};

    use crate::approval::DenyAll;
    use crate::host::{TurnRequest, event_channel};
    use crate::turn::Channel;
    use warren_config::{ConfigStore, InstallRoot};

    use crate::AgentHost;

    /// A host of an install root in a temp dir whose config.toml is `config`.
    fn host_of(config: &str) -> (tempfile::TempDir, InstallRoot, std::sync::Arc<AgentHost>) {
        let dir = tempfile::tempdir().unwrap();
        let root = InstallRoot::at(dir.path().join("warren"));
        root.ensure_layout().unwrap();
        std::fs::write(root.config_file(), config).unwrap();
        let snapshot = ConfigStore::load(root.clone()).unwrap().snapshot();
        let host = std::sync::Arc::new(AgentHost::for_process(&root, snapshot).unwrap());
        (dir, root, host)
    }

    /// The `[providers.fake]` table of `fake`: no retries.
    fn fake_provider(fake: &FakeOpenAi) -> String {
        format!(
            "{}\nmax_retries = 0\n",
            fake.provider_toml("fake", "sk-test")
        )
    }
    use crate::{CancelToken, TurnEvent};

    /// A session whose mode caps the autonomy at `read_only` (an ACP session) refuses every
    /// call with side effects, in a parallel batch too: the batch went through the action
    /// window only, so two writes of a `parallel_tools` agent ran under a read-only mode.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_parallel_batch_is_refused_under_a_read_only_session_mode_like_a_single_call() {
        let fake = FakeOpenAi::start().unwrap();
        let (_dir, root, host) = host_of(&format!(
            "[agents.ada]\nprovider = \"fake\"\nmodel = \"gpt-test\"\nrisk_profile = \"open\"\n\
             runtime_profile = \"parallel\"\n\
             [risk_profiles.open]\nautonomy = \"full\"\n\
             [runtime_profiles.parallel]\nparallel_tools = true\n{}",
            fake_provider(&fake)
        ));
        let ada = AgentAlias::new("ada").unwrap();
        let write = |id: &str, path: &str| {
            FakeCall::new(id, "file_write", json!({"path": path, "content": "x"}))
        };
        fake.push(FakeReply::calls(
            "",
            vec![write("c1", "one.md"), write("c2", "two.md")],
        ));
        fake.push(FakeReply::text("done"));
        let (events, mut rx) = event_channel();
        let read_only = warren_tools::ToolContext {
            autonomy_cap: Some(Autonomy::ReadOnly),
            ..Default::default()
        };
        let turn = read_only
            .scope(host.submit(TurnRequest {
                max_output_tokens: None,
                agent: ada.clone(),
                session: None,
                channel: Channel::Cli,
                input: "write both".into(),
                approver: std::sync::Arc::new(DenyAll),
                cancel: CancelToken::new(),
                events,
            }))
            .await
            .unwrap();
        assert_eq!(turn.finish().await.unwrap().tool_calls, 2);
        let mut results = Vec::new();
        while let Some(event) = rx.recv().await {
            if let TurnEvent::ToolResult { ok, content, .. } = event {
                results.push((ok, content));
            }
        }
        let refusal = "Error: refused by the runtime: the session's mode is read_only: \
                       'file_write' has side effects and is not run";
        assert_eq!(
            results,
            vec![(false, refusal.to_string()), (false, refusal.to_string())]
        );
        let workspace = root.agent_workspace(&ada);
        assert!(
            !workspace.join("one.md").exists() && !workspace.join("two.md").exists(),
            "a refused write ran"
        );
    }
}
