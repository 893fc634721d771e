//! Chat/channel sessions (SPEC STATE-6): the [`SessionBackend`] contract shared by chat and code
//! sessions (SESS-1), its SQLite and JSONL backends, the JSONL→SQLite migration with receipts
//! (MIG-1..7), the per-session turn queue (SESS-2) and the one factory every entry point uses
//! to open a backend, with one process-level policy for construction errors (MIG-7).

mod error;
mod factory;
mod group;
mod handle;
pub mod jsonl;
mod jsonl_format;
mod jsonl_meta;
mod lock;
mod memory;
pub mod migrate;
pub mod queue;
pub mod sqlite;

use std::fmt;

use serde::Serialize;
use time::OffsetDateTime;
use warren_core::{AgentAlias, Role, SessionKey};

pub use error::SessionError;
pub use factory::{
    ChatSessions, OpenError, open_chat_sessions, open_chat_sessions_for_reading,
    open_chat_sessions_reporting,
};
pub use handle::SessionHandle;

pub use jsonl::JsonlBackend;
pub use jsonl_format::{LineIssue, LineIssueKind};
pub use jsonl_meta::META_SUFFIX;
pub use memory::MemoryBackend;
pub use queue::{QueueError, SessionActorQueue, TurnGuard};
pub use sqlite::SqliteBackend;

/// Creates `data/sessions/` (0700) if missing.
pub fn ensure_sessions_dir(root: &warren_config::InstallRoot) -> Result<(), SessionError> {
    lock::ensure_dir(&root.sessions_dir())
}

/// A message to append. `created_at` defaults to now; an import passes the original time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewMessage {
    pub role: Role,
    pub content: String,
    /// The agent that produced or received the message (attribution).
    pub agent: Option<AgentAlias>,
    pub created_at: Option<OffsetDateTime>,
}

impl NewMessage {
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            agent: None,
            created_at: None,
        }
    }

    pub fn by(mut self, agent: AgentAlias) -> Self {
        self.agent = Some(agent);
        self
    }

    pub fn at(mut self, created_at: OffsetDateTime) -> Self {
        self.created_at = Some(created_at);
        self
    }
}

/// The answer to a queued append ([`SessionBackend::queue_append`]).
pub type AppendReceiver = tokio::sync::oneshot::Receiver<Result<StoredMessage, SessionError>>;

/// A message as stored. `seq` orders messages within a session (ascending).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoredMessage {
    pub seq: u64,
    pub role: Role,
    pub content: String,
    pub agent: Option<AgentAlias>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

/// Turn state of a session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionState {
    #[default]
    Idle,
    Running,
    Error,
}

impl SessionState {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::Idle => "idle",
            SessionState::Running => "running",
            SessionState::Error => "error",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::Idle, Self::Running, Self::Error]
            .into_iter()
            .find(|v| v.as_str() == s)
    }
}

impl fmt::Display for SessionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One session row: attribution, channel and UTC timestamps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionMeta {
    pub key: SessionKey,
    pub name: Option<String>,
    pub agent: Option<AgentAlias>,
    /// Where the session talks (`"<channel type>.<alias>"`, `"cli"`, ...).
    pub channel: Option<String>,
    pub state: SessionState,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
    pub message_count: u64,
}

/// Which messages of a session to load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Page {
    All,
    /// Up to `limit` messages with `seq > after`, oldest first.
    After {
        after: u64,
        limit: usize,
    },
    /// The newest `n` messages, oldest first.
    Last(usize),
}

/// A loaded history, with what the backend had to skip to read it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    pub messages: Vec<StoredMessage>,
    /// Lines that could not be read (JSONL only): a torn last line after a crash, bad JSON, ...
    pub issues: Vec<LineIssue>,
}

/// A message matching a search.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SearchHit {
    pub key: SessionKey,
    pub seq: u64,
    pub role: Role,
    pub content: String,
}

/// Session attributes set when a session is first created (or filled in later).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionInit {
    pub agent: Option<AgentAlias>,
    pub channel: Option<String>,
    pub name: Option<String>,
}

/// The session storage contract shared by chat and code sessions (SESS-1).
///
/// Methods block (SQLite, file I/O); async callers go through [`SessionHandle`], which runs
/// them off the async workers.
pub trait SessionBackend: Send + Sync + fmt::Debug {
    /// `"sqlite"`, `"jsonl"` or `"memory"`.
    fn kind(&self) -> &'static str;

    /// Creates `key` if missing (attributes from `init`); returns the row.
    fn ensure(&self, key: &SessionKey, init: &SessionInit) -> Result<SessionMeta, SessionError>;

    /// Appends one message, creating the session if needed. The message and the session's
    /// metadata change together or not at all.
    fn append(&self, key: &SessionKey, message: &NewMessage)
    -> Result<StoredMessage, SessionError>;

    /// Queues an append without blocking, for backends that group-commit appends (SQLite):
    /// the receiver yields the result once the append's batch committed. `None` means the
    /// backend has no queue; call [`SessionBackend::append`] on a blocking thread instead.
    fn queue_append(
        &self,
        _key: &SessionKey,
        _message: &NewMessage,
    ) -> Option<Result<AppendReceiver, SessionError>> {
        None
    }

    /// Loads a page of history, oldest first. A missing session is empty.
    fn load(&self, key: &SessionKey, page: Page) -> Result<History, SessionError>;

    /// Every session, most recently active first.
    fn list(&self) -> Result<Vec<SessionMeta>, SessionError>;

    fn meta(&self, key: &SessionKey) -> Result<Option<SessionMeta>, SessionError>;

    /// Renames `from` to `to`; refuses if `to` exists.
    fn rename(&self, from: &SessionKey, to: &SessionKey) -> Result<(), SessionError>;

    /// Deletes the session and its messages; `false` if it did not exist.
    fn delete(&self, key: &SessionKey) -> Result<bool, SessionError>;

    /// Removes every message but keeps the session; returns how many were removed.
    fn clear(&self, key: &SessionKey) -> Result<u64, SessionError>;

    /// Sets (or with `None` clears) the display name.
    fn set_name(&self, key: &SessionKey, name: Option<&str>) -> Result<(), SessionError>;

    fn set_state(&self, key: &SessionKey, state: SessionState) -> Result<(), SessionError>;

    /// Sets the agent the session belongs to.
    fn set_agent(&self, key: &SessionKey, agent: Option<&AgentAlias>) -> Result<(), SessionError>;

    /// Repoints every session owned by `from`, and every message attributed to `from`, to `to`
    /// (agent rename, LIFE-3). Idempotent: a second call finds nothing left. Returns how many
    /// sessions changed owner.
    fn rename_agent(&self, from: &AgentAlias, to: &AgentAlias) -> Result<u64, SessionError>;

    /// Messages containing every word of `query` (words are matched literally; quotes and
    /// operators in `query` have no special meaning), best first.
    fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>, SessionError>;
}
