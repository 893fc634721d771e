//! Approvals over HTTP (issue 8 §2): [`PendingApprovals`] is an [`Approver`] like the CLI's
//! terminal prompt. A tool call that needs approval waits here as a pending entry until an
//! operator decides it (`POST /api/approvals/{id}`) or the risk profile's
//! `approval_timeout_secs` passes (the loop's `ask_with_timeout`: no answer = denied). An entry
//! leaves the list as soon as it is decided, times out or its turn is cancelled.
//!
//! One instance lives for the whole daemon process, so a pending call stays decidable across a
//! reload of the gateway.
//!
//! Watchers ([`ApprovalWatcher`], issue 38 §4) hear of every entry as it is listed and as it
//! ends: the daemon's channel hook registers one that puts the request on the approvers'
//! phones with Approve / Deny buttons, whose answer comes back through [`PendingApprovals::decide_by`]
//! — the same one path as `POST /api/approvals/{id}`. The engine knows nothing of channels.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
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
    /// The asking turn's session (who asked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    pub created_unix: u64,
}

/// How a listed approval ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    /// `Approved` / `Denied` when decided; `TimedOut` when it left the list undecided (no
    /// answer in time, or its turn ended).
    pub decision: ApprovalDecision,
    /// Who decided (`api`, `telegram.home:7`), when someone did.
    pub by: Option<String>,
}

/// Hears of pending approvals (a channel that asks approvers on their phones). Called on the
/// asking or deciding task: implementations hand slow work (network) to a task of their own.
pub trait ApprovalWatcher: Send + Sync {
    /// `view` was just listed and can be decided.
    fn pending(&self, view: &PendingView);
    /// The approval `id` left the list.
    fn settled(&self, id: &str, settled: &Settled);
}

/// Who decides over `POST /api/approvals/{id}`.
pub const BY_API: &str = "api";

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
    watchers: Mutex<Vec<(u64, Arc<dyn ApprovalWatcher>)>>,
    /// Who decided each decided id, until its turn reads it ([`Approver::decided_by`]).
    deciders: Mutex<HashMap<String, String>>,
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

    /// Registers `watcher`; the number unregisters it ([`PendingApprovals::unwatch`]).
    pub fn watch(&self, watcher: Arc<dyn ApprovalWatcher>) -> u64 {
        let n = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.watchers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((n, watcher));
        n
    }

    /// Whether any watcher is registered (someone besides the API is asked).
    pub fn watched(&self) -> bool {
        !self
            .watchers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// Unregisters watcher `n`.
    pub fn unwatch(&self, n: u64) {
        self.watchers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(m, _)| *m != n);
    }

    fn watchers(&self) -> Vec<Arc<dyn ApprovalWatcher>> {
        self.watchers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(_, w)| Arc::clone(w))
            .collect()
    }

    /// The pending call `id`, if it is still pending.
    pub fn get(&self, id: &str) -> Option<PendingView> {
        let n = id.strip_prefix("apr-")?.parse::<u64>().ok()?;
        self.lock().get(&n).map(|e| e.view.clone())
    }

    /// Decides the pending call `id` (`apr-<n>`) over the API ([`BY_API`]).
    pub fn decide(&self, id: &str, approve: bool) -> Result<(), NotPending> {
        self.decide_by(id, approve, BY_API)
    }

    /// Decides the pending call `id` (`apr-<n>`) for `by` (who decided, kept in the trace):
    /// the one path every approver's answer takes.
    pub fn decide_by(&self, id: &str, approve: bool, by: &str) -> Result<(), NotPending> {
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
            .map_err(|_| NotPending(id.to_string()))?;
        self.deciders
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_string(), by.to_string());
        let settled = Settled {
            decision,
            by: Some(by.to_string()),
        };
        for w in self.watchers() {
            w.settled(id, &settled);
        }
        Ok(())
    }
}

/// Removes the entry when the asking future ends (answered, timed out or dropped).
struct Remove<'a> {
    pending: &'a PendingApprovals,
    n: u64,
}

impl Drop for Remove<'_> {
    fn drop(&mut self) {
        let left = self.pending.lock().remove(&self.n);
        // Still listed: nobody decided (no answer in time, or the turn ended) = denied.
        if let Some(entry) = left {
            let settled = Settled {
                decision: ApprovalDecision::TimedOut,
                by: None,
            };
            for w in self.pending.watchers() {
                w.settled(&entry.view.id, &settled);
            }
        }
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
            session: request.session,
            created_unix: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        };
        tracing::info!(id = %view.id, agent = %view.agent, tool = %view.tool, "approval pending (GET /api/approvals)");
        let id = view.id.clone();
        let watched = view.clone();
        self.lock().insert(n, Entry { view, answer: tx });
        for w in self.watchers() {
            w.pending(&watched);
        }
        announce(&id);
        Box::pin(async move {
            let _remove = Remove { pending: self, n };
            rx.await.unwrap_or(ApprovalDecision::Denied)
        })
    }

    fn decided_by(&self, id: &str) -> Option<String> {
        self.deciders
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id)
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
            session: Some("tg_home_7_7".into()),
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

    #[derive(Default)]
    struct Heard(Mutex<Vec<String>>);

    impl ApprovalWatcher for Heard {
        fn pending(&self, view: &PendingView) {
            self.0
                .lock()
                .unwrap()
                .push(format!("pending {} {:?}", view.id, view.session));
        }
        fn settled(&self, id: &str, settled: &Settled) {
            self.0.lock().unwrap().push(format!(
                "settled {id} {:?} {:?}",
                settled.decision, settled.by
            ));
        }
    }

    #[tokio::test]
    async fn watchers_hear_of_listing_deciding_and_expiry_and_who_decided_is_kept_issue38() {
        let pending = Arc::new(PendingApprovals::new());
        let heard = Arc::new(Heard::default());
        let n = pending.watch(Arc::clone(&heard) as Arc<dyn ApprovalWatcher>);
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
        assert_eq!(pending.get(&id).map(|v| v.tool), Some("file_write".into()));
        pending.decide_by(&id, true, "telegram.home:7").unwrap();
        assert_eq!(asking.await.ok(), Some(ApprovalDecision::Approved));
        assert_eq!(pending.decided_by(&id).as_deref(), Some("telegram.home:7"));
        assert_eq!(pending.decided_by(&id), None, "read once");

        let d = ask_with_timeout(&*pending, request(), Duration::from_millis(20)).await;
        assert_eq!(d, ApprovalDecision::TimedOut);
        pending.unwatch(n);
        let _ = ask_with_timeout(&*pending, request(), Duration::from_millis(5)).await;
        let heard = heard.0.lock().unwrap().clone();
        assert_eq!(heard.len(), 4, "{heard:?}");
        assert!(
            heard[0].starts_with("pending apr-") && heard[0].ends_with("Some(\"tg_home_7_7\")")
        );
        assert!(
            heard[1].ends_with("Approved Some(\"telegram.home:7\")"),
            "{heard:?}"
        );
        assert!(heard[3].ends_with("TimedOut None"), "{heard:?}");
    }
}
