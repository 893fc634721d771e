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
use std::sync::Arc;

use warren_config::schema::Autonomy;

use crate::tool::BoxFuture;

/// Reads and writes text files on the agent's behalf, after the policy allowed the call.
/// Errors are the transport's own words (shown to the model with the path).
pub trait FileTransport: Send + Sync {
    /// Whether [`FileTransport::read_text`] is offered.
    fn reads(&self) -> bool;
    /// Whether [`FileTransport::write_text`] is offered.
    fn writes(&self) -> bool;
    /// The whole text of the file at `path` (an absolute path the policy allowed).
    fn read_text<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, Result<String, String>>;
    /// Replaces (or creates) the file at `path` (an absolute path the policy allowed).
    fn write_text<'a>(
        &'a self,
        path: &'a Path,
        content: &'a str,
    ) -> BoxFuture<'a, Result<(), String>>;
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

/// The call a tool is running for, set by the runtime around each execution: what records
/// that keep provenance (memory writes, issue 20 §3) name as their origin.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallOrigin {
    /// The chat session of the turn.
    pub session: Option<String>,
    /// The model's id of this tool call.
    pub tool_call: Option<String>,
}

impl CallOrigin {
    /// The origin of the running call (empty outside one).
    pub fn current() -> Self {
        ORIGIN.try_with(Clone::clone).unwrap_or_default()
    }

    /// Runs `future` (one tool execution) as this call.
    pub async fn scope<F: Future>(self, future: F) -> F::Output {
        ORIGIN.scope(self, future).await
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
