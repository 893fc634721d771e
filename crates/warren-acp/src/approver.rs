//! Approvals through the editor: a call that needs approval becomes `session/request_permission`
//! (allow once / reject). The runtime gives up after the risk profile's
//! `approval_timeout_secs` (= denied); then, or when the turn is cancelled, the pending request
//! is cancelled with `$/cancel_request`. Anything but "allow once" is a denial.

use std::sync::{Arc, Mutex};

use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    PermissionOption, PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest,
    SessionId, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields,
};
use agent_client_protocol::{Client, RequestCancellationHandle};
use warren_core::ToolCall;
use warren_runtime::approval::{ApprovalDecision, ApprovalRequest, Approver, BoxFuture};

use crate::server::{AGENT, TOOL, kind, title};

const ALLOW: &str = "allow-once";
const REJECT: &str = "reject-once";

/// What one turn showed the client: the calls announced and not yet finished (the approver
/// names the call it asks about), and the transcript to store, in order.
#[derive(Debug, Default)]
pub struct Tracker {
    pub announced: Vec<Arc<ToolCall>>,
    /// `(role, content)` in the order the client saw them; agent text deltas are merged.
    pub log: Vec<(&'static str, String)>,
}

impl Tracker {
    pub fn text(&mut self, delta: &str) {
        match self.log.last_mut() {
            Some((role, text)) if *role == AGENT => text.push_str(delta),
            _ => self.log.push((AGENT, delta.to_string())),
        }
    }

    pub fn tool(&mut self, value: serde_json::Value) {
        self.log.push((TOOL, value.to_string()));
    }
}

/// Asks the editor on the turn's connection.
pub struct ClientApprover {
    cx: ConnectionTo<Client>,
    session: SessionId,
    tracker: Arc<Mutex<Tracker>>,
}

impl ClientApprover {
    pub fn new(cx: ConnectionTo<Client>, session: SessionId, tracker: Arc<Mutex<Tracker>>) -> Self {
        Self {
            cx,
            session,
            tracker,
        }
    }

    /// The announced call this request is about (same tool and arguments, latest first).
    fn call_id(&self, request: &ApprovalRequest) -> String {
        let t = self.tracker.lock().unwrap_or_else(|p| p.into_inner());
        t.announced
            .iter()
            .rev()
            .find(|c| c.name == request.tool && c.arguments == request.arguments)
            .map(|c| c.id.clone())
            .unwrap_or_else(|| format!("approval-{}", request.tool))
    }
}

/// Cancels the permission request if the ask is dropped unanswered (timeout, cancelled turn).
struct CancelUnanswered(Option<RequestCancellationHandle>);

impl CancelUnanswered {
    fn answered(&mut self) {
        self.0 = None;
    }
}

impl Drop for CancelUnanswered {
    fn drop(&mut self) {
        if let Some(handle) = self.0.take() {
            let _ = handle.cancel();
        }
    }
}

impl Approver for ClientApprover {
    fn ask(&self, request: ApprovalRequest) -> BoxFuture<'_, ApprovalDecision> {
        let call_id = self.call_id(&request);
        let fields = ToolCallUpdateFields::new()
            .title(format!(
                "{} — {}",
                title(&request.tool, &request.arguments),
                request.reason
            ))
            .kind(kind(&request.tool))
            .status(ToolCallStatus::Pending)
            .raw_input(request.arguments.clone());
        let ask = RequestPermissionRequest::new(
            self.session.clone(),
            ToolCallUpdate::new(call_id, fields),
            vec![
                PermissionOption::new(ALLOW, "Allow once", PermissionOptionKind::AllowOnce),
                PermissionOption::new(REJECT, "Reject", PermissionOptionKind::RejectOnce),
            ],
        );
        let sent = self.cx.send_request(ask);
        let mut guard = CancelUnanswered(Some(sent.cancellation_handle()));
        Box::pin(async move {
            let answer = sent.block_task().await;
            guard.answered();
            match answer {
                Ok(response) => match response.outcome {
                    RequestPermissionOutcome::Selected(s) if &*s.option_id.0 == ALLOW => {
                        ApprovalDecision::Approved
                    }
                    _ => ApprovalDecision::Denied,
                },
                Err(e) => {
                    tracing::debug!("session/request_permission failed: {e}");
                    ApprovalDecision::Denied
                }
            }
        })
    }
}
