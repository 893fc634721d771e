//! The `delegate` tool's execution (PERM-7): a child turn under a narrowed policy. The
//! arguments and the definition live in [`crate::delegate`].

use std::sync::Arc;

use serde_json::json;
use warren_core::{ChatMessage, ToolCall};
use warren_security::NarrowRequest;
use warren_tools::ToolOutput;

use super::calls::CallResult;
use super::{AgentRunner, TurnError, TurnIo, TurnOutcome};
use crate::delegate::DelegateArgs;

impl AgentRunner {
    /// Runs a `delegate` call as a child turn under a narrowed policy (PERM-7).
    /// (Boxed and `Send` by its signature: the loop reaches itself through this call.)
    pub(super) fn delegate<'a>(
        &'a self,
        call: &'a ToolCall,
        io: &'a TurnIo,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<CallResult>> + Send + 'a>> {
        Box::pin(async move {
            let fail = |m: String| CallResult {
                ok: false,
                content: format!("Error: {m}"),
                receipt: None,
            };
            let args: DelegateArgs = match serde_json::from_value(call.arguments.clone()) {
                Ok(a) => a,
                Err(e) => return Some(fail(format!("invalid arguments: {e}"))),
            };
            let max = args
                .max_iterations
                .unwrap_or((self.max_iterations() / 2).max(1));
            let request = NarrowRequest {
                autonomy: args.autonomy,
                allowed_tools: args.tools.clone(),
                allowed_commands: args.allowed_commands.clone(),
                max_tool_iterations: Some(max),
                ..NarrowRequest::default()
            };
            let kit = match self.kit.narrowed(request) {
                Ok(k) => k,
                Err(e) => return Some(fail(e.to_string())),
            };
            // Every limit of the child is its narrowed policy's; only the delegation depth
            // (not a policy axis) is counted down here.
            let mut behaviour = self.behaviour.clone();
            behaviour.delegation_depth = behaviour.delegation_depth.saturating_sub(1);
            let child = AgentRunner::assemble(
                self.alias.clone(),
                kit,
                Arc::clone(&self.route),
                self.model.clone(),
                behaviour,
                Arc::clone(&self.services),
            );
            // The child asks the same operator and stops with the parent; its events stay quiet.
            let child_io = TurnIo {
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
}

/// A child turn's future, boxed: the loop runs itself recursively through `delegate`.
type ChildTurn<'a> = std::pin::Pin<
    Box<
        dyn std::future::Future<Output = Result<(TurnOutcome, Vec<ChatMessage>), TurnError>>
            + Send
            + 'a,
    >,
>;
