//! Approvals over HTTP (issue 8 §2): [`PendingApprovals`] is an [`Approver`] like the CLI's
//! terminal prompt. A tool call that needs approval waits here as a pending entry until an
//! operator decides it (`POST /api/approvals/{id}`) or the risk profile's
//! `approval_timeout_secs` passes (the loop's `ask_with_timeout`: no answer = denied). An entry
//! leaves the list as soon as it is decided, times out or its turn is cancelled.
//!
//! One instance lives for the whole daemon process, so a pending call stays decidable across a
//! reload of the gateway.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use serde::Serialize;
use tokio::sync::oneshot;

use crate::approval::{ApprovalDecision, ApprovalRequest, Approver, BoxFuture};

/// One pending tool call, as `GET /api/approvals` lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PendingView {
    pub id: String,
    pub agent: warren_core::AgentAlias,
    pub tool: String,
    pub arguments: serde_json::Value,
    pub reason: String,
    pub created_unix: u64,
}

struct Entry {
    view: PendingView,
    answer: oneshot::Sender<ApprovalDecision>,
}

/// Why a decision was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no pending approval '{0}' (it was decided, timed out or its turn ended)")]
pub struct NotPending(pub String);

/// The pending approvals of a process.
#[derive(Default)]
pub struct PendingApprovals {
    next: AtomicU64,
    entries: Mutex<BTreeMap<u64, Entry>>,
}

impl std::fmt::Debug for PendingApprovals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingApprovals")
            .field("pending", &self.lock().len())
            .finish()
    }
}

impl PendingApprovals {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Pending calls, oldest first.
    pub fn list(&self) -> Vec<PendingView> {
        self.lock().values().map(|e| e.view.clone()).collect()
    }

    /// Decides the pending call `id` (`apr-<n>`).
    pub fn decide(&self, id: &str, approve: bool) -> Result<(), NotPending> {
        let entry = id
            .strip_prefix("apr-")
            .and_then(|n| n.parse::<u64>().ok())
            .and_then(|n| self.lock().remove(&n))
            .ok_or_else(|| NotPending(id.to_string()))?;
        let decision = if approve {
            ApprovalDecision::Approved
        } else {
            ApprovalDecision::Denied
        };
        // The asking turn may have given up in between: then it is already denied.
        entry
            .answer
            .send(decision)
            .map_err(|_| NotPending(id.to_string()))
    }
}

/// Removes the entry when the asking future ends (answered, timed out or dropped).
struct Remove<'a> {
    pending: &'a PendingApprovals,
    n: u64,
}

impl Drop for Remove<'_> {
    fn drop(&mut self) {
        self.pending.lock().remove(&self.n);
    }
}

impl Approver for PendingApprovals {
    fn ask(&self, request: ApprovalRequest) -> BoxFuture<'_, ApprovalDecision> {
        self.ask_announced(request, &|_| {})
    }

    /// Lists the request, then announces its id (`apr-<n>`).
    fn ask_announced(
        &self,
        request: ApprovalRequest,
        announce: &(dyn Fn(&str) + Send + Sync),
    ) -> BoxFuture<'_, ApprovalDecision> {
        let n = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, rx) = oneshot::channel();
        let view = PendingView {
            id: format!("apr-{n}"),
            agent: request.agent,
            tool: request.tool,
            arguments: request.arguments,
            reason: request.reason,
            created_unix: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        };
        tracing::info!(id = %view.id, agent = %view.agent, tool = %view.tool, "approval pending (GET /api/approvals)");
        let id = view.id.clone();
        self.lock().insert(n, Entry { view, answer: tx });
        announce(&id);
        Box::pin(async move {
            let _remove = Remove { pending: self, n };
            rx.await.unwrap_or(ApprovalDecision::Denied)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::approval::ask_with_timeout;

    fn request() -> ApprovalRequest {
        ApprovalRequest {
            agent: "main".parse().unwrap(),
            tool: "file_write".into(),
            arguments: serde_json::json!({"path": "a"}),
            reason: "supervised".into(),
        }
    }

    #[tokio::test]
    async fn a_pending_call_is_listed_until_decided() {
        let pending = Arc::new(PendingApprovals::new());
        let asking = {
            let p = Arc::clone(&pending);
            tokio::spawn(async move { p.ask(request()).await })
        };
        let id = loop {
            if let Some(v) = pending.list().first() {
                break v.id.clone();
            }
            tokio::task::yield_now().await;
        };
        assert_eq!(
            pending.decide("apr-999", true),
            Err(NotPending("apr-999".into()))
        );
        assert_eq!(pending.decide(&id, true), Ok(()));
        assert_eq!(asking.await.ok(), Some(ApprovalDecision::Approved));
        assert!(pending.list().is_empty());
        assert!(pending.decide(&id, false).is_err(), "decided once only");
    }

    #[tokio::test]
    async fn no_answer_in_time_is_denied_and_leaves_the_list() {
        let pending = PendingApprovals::new();
        let d = ask_with_timeout(&pending, request(), Duration::from_millis(20)).await;
        assert_eq!(d, ApprovalDecision::TimedOut);
        assert!(pending.list().is_empty());
    }
}
