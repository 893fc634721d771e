//! One unattended turn through the turn door, for the callers no operator sits behind (cron
//! jobs, SOP turn steps): the first call that needs approval is denied, the turn is cancelled
//! and the reason kept, so the run fails saying which call wanted approval.

use std::sync::{Arc, Mutex};

use warren_core::{AgentAlias, SessionKey};

use crate::approval::{ApprovalDecision, ApprovalRequest, Approver, BoxFuture};
use crate::cancel::CancelToken;
use crate::host::{AgentHost, TurnRequest};
use crate::turn::{Channel, TurnError, TurnEvent, TurnOutcome};

/// What an unattended turn left behind.
pub(crate) struct Unattended {
    pub outcome: Result<TurnOutcome, TurnError>,
    /// Why the turn was stopped: the first call that asked for approval.
    pub asked: Option<String>,
    /// Every tool receipt the turn produced, streamed or in the outcome, once each.
    pub receipts: Vec<String>,
}

/// Denies every approval and remembers the first reason; cancels the turn at the first ask.
struct NoApprovals {
    asked: Mutex<Option<String>>,
    cancel: CancelToken,
    /// The end of the refusal text: who never runs a call unapproved, and what to do.
    refusal: &'static str,
}

impl Approver for NoApprovals {
    fn ask(&self, request: ApprovalRequest) -> BoxFuture<'_, ApprovalDecision> {
        let mut asked = self.asked.lock().unwrap_or_else(|p| p.into_inner());
        if asked.is_none() {
            *asked = Some(format!(
                "'{}' needs the operator's approval ({}); {}",
                request.tool, request.reason, self.refusal
            ));
        }
        self.cancel.cancel();
        Box::pin(async { ApprovalDecision::Denied })
    }
}

/// Runs `input` as one turn of `agent` in `session` (channel `cron`) with no operator.
/// `refusal` ends the text a denied approval gives, e.g. "a scheduled run never runs it
/// unapproved".
pub(crate) async fn turn(
    host: &Arc<AgentHost>,
    agent: AgentAlias,
    session: SessionKey,
    input: String,
    cancel: &CancelToken,
    refusal: &'static str,
) -> Unattended {
    let approver = Arc::new(NoApprovals {
        asked: Mutex::new(None),
        cancel: cancel.clone(),
        refusal,
    });
    let streamed = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&streamed);
    let request = TurnRequest {
        agent,
        session: Some(session),
        channel: Channel::Cron,
        input,
        approver: Arc::clone(&approver) as Arc<dyn Approver>,
        cancel: cancel.clone(),
        events: Arc::new(move |event| {
            if let TurnEvent::ToolResult {
                receipt: Some(r), ..
            } = event
            {
                seen.lock().unwrap_or_else(|p| p.into_inner()).push(r);
            }
        }),
    };
    let outcome = match host.submit(request).await {
        Ok(turn) => turn.finish().await,
        Err(e) => Err(e),
    };
    let asked = approver
        .asked
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let mut receipts: Vec<String> = streamed.lock().unwrap_or_else(|p| p.into_inner()).clone();
    if let Ok(outcome) = &outcome {
        receipts.extend(outcome.receipts.iter().map(|(_, r)| r.clone()));
    }
    receipts.dedup();
    Unattended {
        outcome,
        asked,
        receipts,
    }
}
