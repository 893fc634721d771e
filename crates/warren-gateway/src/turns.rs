//! Turn tracking (issue 16 §2): the records of the turns a JSON chat caller follows, and a
//! turn's errors as API errors. A JSON `POST /api/agents/{alias}/chat` whose turn stops on an
//! approval answers at once with 202 `{"turn": ID, "approval": {...}}`; the caller decides the
//! approval (`POST /api/approvals/{id}`) and reads the outcome with `GET /api/turns/{id}`
//! (`crate::turns_api`).
//!
//! The records are process-local: held in memory by the daemon process (they survive a reload,
//! not a restart), at most [`MAX_TURNS`] of them, and a finished turn's record is dropped
//! [`KEEP_FINISHED`] after its end. The turn itself runs at the runtime's one door
//! ([`warren_runtime::AgentHost::submit`]); this module only records what it reports.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use serde_json::{Value, json};
use tokio::sync::watch;
use warren_core::AgentAlias;
use warren_runtime::cost::CostError;
use warren_runtime::{TurnError, TurnEvent};
use warren_store::sessions::QueueError;

use crate::error::ApiError;

/// The most turn records a process keeps (the oldest finished ones go first).
pub const MAX_TURNS: usize = 1024;
/// How long a finished turn's record stays readable.
pub const KEEP_FINISHED: Duration = Duration::from_secs(3600);

/// Where a turn stands.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnStatus {
    Running,
    /// A tool call waits for an operator's decision (the approval as 202 and the poll show it).
    WaitingApproval(Value),
    /// The turn ended; the body a 200 chat answer has.
    Done(Value),
    /// The turn failed; the error a chat answer would have had.
    Failed(ApiError),
}

impl TurnStatus {
    pub(crate) fn finished(&self) -> bool {
        matches!(self, Self::Done(_) | Self::Failed(_))
    }
}

struct Record {
    agent: AgentAlias,
    session: String,
    status: watch::Receiver<TurnStatus>,
    /// When the turn ended (`None` while it runs).
    ended: Option<Instant>,
    created: Instant,
}

/// The process's turn records.
#[derive(Default)]
pub struct Turns {
    records: Mutex<HashMap<String, Record>>,
}

impl std::fmt::Debug for Turns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Turns")
            .field("records", &self.lock().len())
            .finish()
    }
}

/// The writing end of one turn's record.
pub struct TurnTracker {
    pub id: String,
    status: watch::Sender<TurnStatus>,
}

impl TurnTracker {
    /// A receiver of the turn's status (the chat handler waits on it).
    pub fn subscribe(&self) -> watch::Receiver<TurnStatus> {
        self.status.subscribe()
    }

    /// Follows the turn's events: an announced approval is `waiting_approval` until that call's
    /// result arrives (approved, denied or timed out).
    pub fn observe(&self, event: &TurnEvent) {
        match event {
            TurnEvent::ApprovalPending {
                call,
                approval,
                reason,
                timeout_secs,
            } => {
                let _ = self.status.send(TurnStatus::WaitingApproval(approval_json(
                    &call.id,
                    &call.name,
                    &call.arguments,
                    approval,
                    reason,
                    *timeout_secs,
                )));
            }
            TurnEvent::ToolResult { call, .. } => {
                self.status.send_if_modified(|s| match s {
                    TurnStatus::WaitingApproval(a) if a["call"] == call.id.as_str() => {
                        *s = TurnStatus::Running;
                        true
                    }
                    _ => false,
                });
            }
            _ => {}
        }
    }

    /// Records the turn's end.
    pub fn finish(&self, status: TurnStatus) {
        let _ = self.status.send(status);
    }
}

/// An approval as the 202 answer and `GET /api/turns/{id}` show it.
fn approval_json(
    call_id: &str,
    tool: &str,
    arguments: &Value,
    approval: &str,
    reason: &str,
    timeout_secs: u64,
) -> Value {
    let mut args = arguments.to_string();
    if args.len() > 160 {
        let mut end = 160;
        while !args.is_char_boundary(end) {
            end -= 1;
        }
        args.truncate(end);
        args.push('…');
    }
    json!({
        "id": approval,
        "tool": tool,
        "summary": format!("{tool} {args}"),
        "arguments": arguments,
        "reason": reason,
        "call": call_id,
        "timeout_secs": timeout_secs,
        "decide": format!("POST /api/approvals/{approval}"),
    })
}

impl Turns {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Record>> {
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new record for a turn of `agent` (its id is random; the session follows once the
    /// door admitted the turn, [`Turns::set_session`]).
    pub fn start(&self, agent: &AgentAlias) -> Result<TurnTracker, ApiError> {
        let id = crate::pairing::new_key()
            .map_err(|e| ApiError::internal("turn id", e))?
            .chars()
            .take(24)
            .collect::<String>();
        let (tx, rx) = watch::channel(TurnStatus::Running);
        let mut records = self.lock();
        let now = Instant::now();
        records.retain(|_, r| {
            r.ended
                .is_none_or(|t| now.duration_since(t) < KEEP_FINISHED)
        });
        for r in records.values_mut() {
            if r.ended.is_none() && r.status.borrow().finished() {
                r.ended = Some(now);
            }
        }
        while records.len() >= MAX_TURNS {
            // The oldest finished record goes; if none has finished, the oldest one.
            let oldest = records
                .iter()
                .min_by_key(|(_, r)| (r.ended.is_none(), r.created))
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => records.remove(&k),
                None => break,
            };
        }
        records.insert(
            id.clone(),
            Record {
                agent: agent.clone(),
                session: String::new(),
                status: rx,
                ended: None,
                created: now,
            },
        );
        Ok(TurnTracker { id, status: tx })
    }

    /// The session the door gave the turn.
    pub fn set_session(&self, id: &str, session: &str) {
        if let Some(r) = self.lock().get_mut(id) {
            r.session = session.to_string();
        }
    }

    /// Drops a record (a turn that answered 200, or never started).
    pub fn forget(&self, id: &str) {
        self.lock().remove(id);
    }

    /// A turn's agent, session and status (`None` once its record is gone).
    pub(crate) fn get(
        &self,
        id: &str,
    ) -> Option<(AgentAlias, String, watch::Receiver<TurnStatus>)> {
        let mut records = self.lock();
        let record = records.get_mut(id)?;
        if record.ended.is_none() && record.status.borrow().finished() {
            record.ended = Some(Instant::now());
        }
        if record.ended.is_some_and(|t| t.elapsed() >= KEEP_FINISHED) {
            records.remove(id);
            return None;
        }
        Some((
            record.agent.clone(),
            record.session.clone(),
            record.status.clone(),
        ))
    }
}

/// A turn's record as JSON.
pub fn status_json(id: &str, agent: &AgentAlias, session: &str, status: &TurnStatus) -> Value {
    let mut body = json!({"turn": id, "agent": agent, "session": session});
    match status {
        TurnStatus::Running => body["status"] = "running".into(),
        TurnStatus::WaitingApproval(a) => {
            body["status"] = "waiting_approval".into();
            body["approval"] = a.clone();
        }
        TurnStatus::Done(result) => {
            body["status"] = "done".into();
            body["result"] = result.clone();
        }
        TurnStatus::Failed(e) => {
            body["status"] = "failed".into();
            body["error"] =
                json!({"error": e.code, "message": e.message, "status": e.status.as_u16()});
        }
    }
    body
}

/// A turn's refusal or failure as the API error a chat answers with (the JSON and SSE chat
/// and the OpenAI-compatible routes map it the same way).
pub(crate) fn turn_error(route: &'static str, e: &TurnError) -> ApiError {
    let (status, code) = match e {
        TurnError::Queue(q) => return queue_error(route, q),
        TurnError::SessionsUnavailable(m) => return sessions_unavailable(route)(m.clone()),
        TurnError::UnknownAgent { .. } => (StatusCode::NOT_FOUND, "unknown_agent"),
        TurnError::Unconfigured { .. } => (StatusCode::CONFLICT, "agent_unconfigured"),
        TurnError::SessionOwned(_) | TurnError::DefaultKeyReserved(_) => {
            (StatusCode::CONFLICT, "session_owned_by_other_agent")
        }
        TurnError::Cost(CostError::LimitReached { .. }) => {
            (StatusCode::TOO_MANY_REQUESTS, "cost_limit_reached")
        }
        // The ledger cannot take the turn's cost (issue 36 §7): refused, nothing stored.
        TurnError::Cost(CostError::Io { .. }) => {
            (StatusCode::SERVICE_UNAVAILABLE, "cost_ledger_unavailable")
        }
        TurnError::Provider(_) | TurnError::SingleToolViolation { .. } => {
            (StatusCode::BAD_GATEWAY, "provider_error")
        }
        TurnError::Cancelled => (StatusCode::SERVICE_UNAVAILABLE, "cancelled"),
        TurnError::Agent(_) => (StatusCode::SERVICE_UNAVAILABLE, "agent_unavailable"),
        TurnError::Session(_) | TurnError::SessionKey(_) | TurnError::Task(_) => {
            (StatusCode::INTERNAL_SERVER_ERROR, "internal_error")
        }
    };
    ApiError::new(status, code, format!("{route}: {e}"))
}

fn queue_error(route: &str, e: &QueueError) -> ApiError {
    match e {
        QueueError::Full { .. } => ApiError {
            retry_after_secs: Some(1),
            ..ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "queue_full",
                format!("{route}: {e}"),
            )
        },
        QueueError::TimedOut { .. } => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "queue_timeout",
            format!("{route}: {e}"),
        ),
    }
}

/// 503 when the generation's session store is not (yet, or no longer) open.
pub(crate) fn sessions_unavailable(
    route: &'static str,
) -> impl Fn(warren_runtime::sessions::ChatUnavailable) -> ApiError {
    move |e| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "sessions_unavailable",
            format!("{route}: {e}"),
        )
    }
}
