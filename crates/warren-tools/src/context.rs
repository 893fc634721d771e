//! What the front end that submitted a turn lends the turn's tools (issue 19 §3, SESS-3): a
//! [`FileTransport`] (an editor's `fs/read_text_file` / `fs/write_text_file`, so the editor
//! sees its unsaved buffers and records the agent's edits) and an autonomy cap (an ACP
//! session's mode, never above the agent's configured autonomy).
//!
//! The policy decides first, always: a file tool resolves the path with the agent's
//! `SecurityPolicy` and checks the file through its confined handles before a transport is
//! asked, so a path the policy refuses never reaches the transport. The transport only carries
//! bytes; it is never an authority.
//!
//! The context is task-local. The runtime's door takes it from the task that submits a turn
//! and keeps it for the turn's tasks ([`ToolContext::current`], [`ToolContext::scope`]); a turn
//! submitted without one reads and writes the disk at the configured autonomy.

use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex};

use warren_config::schema::Autonomy;

use crate::tool::BoxFuture;

/// Why a front end's transport did not read or write a file: its own error (shown to the
/// model with the path).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct TransportError(pub Box<dyn std::error::Error + Send + Sync>);

/// Reads and writes text files on the agent's behalf, after the policy allowed the call.
pub trait FileTransport: Send + Sync {
    /// Whether [`FileTransport::read_text`] is offered.
    fn reads(&self) -> bool;
    /// Whether [`FileTransport::write_text`] is offered.
    fn writes(&self) -> bool;
    /// The whole text of the file at `path` (an absolute path the policy allowed).
    fn read_text<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, Result<String, TransportError>>;
    /// Replaces (or creates) the file at `path` (an absolute path the policy allowed).
    fn write_text<'a>(
        &'a self,
        path: &'a Path,
        content: &'a str,
    ) -> BoxFuture<'a, Result<(), TransportError>>;
}

/// The context of one turn's tools; the default lends nothing.
#[derive(Clone, Default)]
pub struct ToolContext {
    /// Where file tools read and write allowed files instead of the disk.
    pub files: Option<Arc<dyn FileTransport>>,
    /// The highest autonomy this turn's calls run at (the lower of it and the configured one).
    pub autonomy_cap: Option<Autonomy>,
    /// The channel the turn came in on (`cli`, `gateway`, `cron`, `acp`), for provenance.
    pub channel: Option<&'static str>,
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext")
            .field("files", &self.files.is_some())
            .field("autonomy_cap", &self.autonomy_cap)
            .field("channel", &self.channel)
            .finish()
    }
}

tokio::task_local! {
    static CONTEXT: ToolContext;
    static ORIGIN: CallOrigin;
}

/// Work a tool leaves for when its call's receipt is signed (after it returned): gets the
/// receipt; an error is logged by the runtime (the call's result stands).
pub type ReceiptHook =
    Box<dyn FnOnce(String) -> BoxFuture<'static, Result<(), ReceiptHookError>> + Send>;

/// Why a [`ReceiptHook`] did not record the receipt: what it was for and the cause.
#[derive(Debug, thiserror::Error)]
#[error("{what} not recorded: {source}")]
pub struct ReceiptHookError {
    /// What the receipt was to be recorded with ("memory receipt").
    pub what: &'static str,
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// The call a tool is running for, set by the runtime around each execution: what records
/// that keep provenance (memory writes, issue 20 §3) name as their origin.
#[derive(Clone, Default)]
pub struct CallOrigin {
    /// The chat session of the turn.
    pub session: Option<String>,
    /// The model's id of this tool call.
    pub tool_call: Option<String>,
    /// Run by [`CallOrigin::receipt_signed`] (shared by the clones of one call's origin).
    hooks: Arc<Mutex<Vec<ReceiptHook>>>,
}

impl std::fmt::Debug for CallOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallOrigin")
            .field("session", &self.session)
            .field("tool_call", &self.tool_call)
            .finish_non_exhaustive()
    }
}

impl CallOrigin {
    /// The origin of a call (`session`, the model's `tool_call` id).
    pub fn new(session: Option<String>, tool_call: Option<String>) -> Self {
        Self {
            session,
            tool_call,
            hooks: Arc::default(),
        }
    }

    /// The origin of the running call (empty outside one).
    pub fn current() -> Self {
        ORIGIN.try_with(Clone::clone).unwrap_or_default()
    }

    /// Runs `future` (one tool execution) as this call.
    pub async fn scope<F: Future>(self, future: F) -> F::Output {
        ORIGIN.scope(self, future).await
    }

    /// Asks for the running call's receipt once it is signed (e.g. to record it beside what
    /// the call wrote). Outside a call, or if the call ends without a receipt, `hook` is
    /// dropped unrun.
    pub fn on_receipt(hook: ReceiptHook) {
        let _ = ORIGIN.try_with(|o| o.hooks.lock().unwrap_or_else(|p| p.into_inner()).push(hook));
    }

    /// The runtime signed this call's `receipt`: runs the hooks tools left, in order; the
    /// errors of those that failed.
    pub async fn receipt_signed(&self, receipt: &str) -> Vec<ReceiptHookError> {
        let hooks = std::mem::take(&mut *self.hooks.lock().unwrap_or_else(|p| p.into_inner()));
        let mut errors = Vec::new();
        for hook in hooks {
            if let Err(e) = hook(receipt.to_string()).await {
                errors.push(e);
            }
        }
        errors
    }
}

impl ToolContext {
    /// The context of the running task (the default outside any [`ToolContext::scope`]).
    pub fn current() -> Self {
        CONTEXT.try_with(Clone::clone).unwrap_or_default()
    }

    /// Runs `future` with this context.
    pub async fn scope<F: Future>(self, future: F) -> F::Output {
        CONTEXT.scope(self, future).await
    }

    /// The transport of the running task, if it offers reads (`need_write`: and writes).
    pub(crate) fn files_for(need_read: bool, need_write: bool) -> Option<Arc<dyn FileTransport>> {
        Self::current()
            .files
            .filter(|f| (!need_read || f.reads()) && (!need_write || f.writes()))
    }
}
