//! The two traits: [`Memory`], the agent-facing handle (always an [`crate::AgentScopedMemory`],
//! MEM-1/MEM-6), and [`MemoryStore`], the install-wide backend that takes an explicit agent on
//! every call (MEM-2). Only the scoped wrapper and lifecycle code talk to a `MemoryStore`.

use std::future::Future;
use std::pin::Pin;

use warren_config::schema::MemoryBackendKind;
use warren_core::AgentAlias;

use crate::entry::{
    AgentId, ListQuery, MemoryEntry, MemoryVersion, NewEntry, RecallHit, RecallQuery, ScopeRule,
};
use crate::error::MemoryError;

/// A boxed future, so both traits stay object safe (`Arc<dyn Memory>`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Shorthand for the futures the traits return.
pub type MemFuture<'a, T> = BoxFuture<'a, Result<T, MemoryError>>;

/// One agent's memory, as tools and the runtime see it. Every method acts as the bound agent:
/// writes and deletes touch only its rows; reads see its rows plus what its grants allow.
pub trait Memory: Send + Sync {
    /// The agent this handle is bound to.
    fn agent(&self) -> &AgentAlias;
    /// The backend kind behind the handle.
    fn backend(&self) -> MemoryBackendKind;
    /// Stores (or replaces, by key) one entry of the bound agent.
    fn store(&self, entry: NewEntry) -> MemFuture<'_, MemoryEntry>;
    /// The bound agent's entry with this key.
    fn get(&self, key: String) -> MemFuture<'_, Option<MemoryEntry>>;
    /// Keyword (or hybrid) recall over the bound agent's rows and its grants.
    fn recall(&self, query: RecallQuery) -> MemFuture<'_, Vec<RecallHit>>;
    /// A page of the bound agent's own entries.
    fn list(&self, query: ListQuery) -> MemFuture<'_, Vec<MemoryEntry>>;
    /// Deletes the bound agent's entry with this key; `false` if it had none.
    fn forget(&self, key: String) -> MemFuture<'_, bool>;
    /// How many entries the bound agent has.
    fn count(&self) -> MemFuture<'_, u64>;
    /// Every entry of the bound agent, oldest first.
    fn export(&self) -> MemFuture<'_, Vec<MemoryEntry>>;
    /// Deletes every entry of the bound agent; returns how many.
    fn purge(&self) -> MemFuture<'_, u64>;
    /// Every kept version of the bound agent's `key`, newest first (the live one first when
    /// the key exists).
    fn history(&self, key: String) -> MemFuture<'_, Vec<MemoryVersion>>;
    /// Makes version `to` (default: the newest kept earlier version) of the bound agent's `key`
    /// current again, as a new version; the replaced one stays in the history.
    fn undo(&self, key: String, to: Option<u64>) -> MemFuture<'_, MemoryEntry>;
    /// Records the signed receipt of the tool call that wrote `version` of `key` (known only
    /// after the call returned). Only fills an empty receipt; `false` if nothing matched.
    fn attach_receipt(&self, key: String, version: u64, receipt: String) -> MemFuture<'_, bool>;
}

/// An install-wide memory backend. Every row carries its agent; every read is filtered by an
/// explicit scope, pushed into the query before any limit (MEM-2/3).
pub trait MemoryStore: Send + Sync {
    fn kind(&self) -> MemoryBackendKind;
    /// Where rows live, for messages: a file path, a directory or a URL without password.
    fn location(&self) -> String;
    /// The backend id of `alias`; with `create`, registers the agent (first write).
    fn agent_id(&self, alias: &AgentAlias, create: bool) -> MemFuture<'_, Option<AgentId>>;
    /// Stores `entry` as the next version of its key; the replaced version goes to the key's
    /// history (bounded by `[memory] history_versions`). With `entry.expected_version`, fails
    /// with [`MemoryError::Conflict`] unless the key is at that version (issue 20 §4).
    fn store_with_agent(&self, agent: AgentId, entry: NewEntry) -> MemFuture<'_, MemoryEntry>;
    fn get_for_agent(&self, agent: AgentId, key: String) -> MemFuture<'_, Option<MemoryEntry>>;
    /// Rows allowed by `scope` matching `query`, best first, at most `query.limit`.
    /// `query_vector` enables hybrid recall where the backend keeps vectors.
    fn recall_for_agents(
        &self,
        scope: Vec<ScopeRule>,
        query: RecallQuery,
        query_vector: Option<Vec<f32>>,
    ) -> MemFuture<'_, Vec<RecallHit>>;
    fn list_for_agent(&self, agent: AgentId, query: ListQuery) -> MemFuture<'_, Vec<MemoryEntry>>;
    /// Deletes the key's live row; the row is kept in the key's history as `forgotten`.
    fn forget_for_agent(&self, agent: AgentId, key: String) -> MemFuture<'_, bool>;
    /// Every kept version of `key`, newest first: the live row (if any) and the history.
    fn history_for_agent(
        &self,
        _agent: AgentId,
        _key: String,
    ) -> MemFuture<'_, Vec<MemoryVersion>> {
        Box::pin(async move {
            Err(MemoryError::Unsupported {
                backend: format!("{:?}", self.kind()).to_lowercase(),
                message: "keeps no history of memory versions".into(),
            })
        })
    }
    /// Restores version `to` of `key` (default: the newest version in the history) as a new
    /// current version, with that version's content, category, session and provenance.
    fn undo_for_agent(
        &self,
        _agent: AgentId,
        _key: String,
        _to: Option<u64>,
    ) -> MemFuture<'_, MemoryEntry> {
        Box::pin(async move {
            Err(MemoryError::Unsupported {
                backend: format!("{:?}", self.kind()).to_lowercase(),
                message: "keeps no history of memory versions, so nothing can be undone".into(),
            })
        })
    }
    /// Fills the empty receipt of `version` of `key` (live or kept); `false` if none matched.
    fn attach_receipt(
        &self,
        _agent: AgentId,
        _key: String,
        _version: u64,
        _receipt: String,
    ) -> MemFuture<'_, bool> {
        Box::pin(async { Ok(false) })
    }
    /// Every history row (not the live rows) of `agent`, for lifecycle export.
    fn export_history(&self, _agent: AgentId) -> MemFuture<'_, Vec<MemoryVersion>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    /// Puts exported history rows back under `alias` (after [`MemoryStore::import_agent`]);
    /// rows already present (same key and version) are skipped. Returns how many were added.
    fn import_history(
        &self,
        alias: AgentAlias,
        versions: Vec<MemoryVersion>,
    ) -> MemFuture<'_, u64> {
        Box::pin(async move {
            if versions.is_empty() {
                return Ok(0);
            }
            Err(MemoryError::Lifecycle {
                agent: alias.to_string(),
                message: format!(
                    "the {:?} memory backend keeps no history; {} archived versions cannot be restored",
                    self.kind(),
                    versions.len()
                ),
            })
        })
    }
    fn count_for_agent(&self, agent: AgentId) -> MemFuture<'_, u64>;
    /// Every row of `agent`, oldest first (lifecycle: archive before delete).
    fn export_agent(&self, agent: AgentId) -> MemFuture<'_, Vec<MemoryEntry>>;
    /// Deletes every row of `agent` and its registration; returns the row count.
    fn purge_agent(&self, agent: AgentId) -> MemFuture<'_, u64>;
    /// Moves `from`'s attribution to `to` (rows keep their agent id). Refuses when `to`
    /// already has rows. Returns whether anything was renamed.
    fn rename_agent(&self, from: AgentAlias, to: AgentAlias) -> MemFuture<'_, bool>;
    /// Puts exported rows back under `alias` (agent restore, BEYOND-1), keeping each row's id,
    /// key, content, category, session and timestamps; registers the agent if needed. Rows
    /// whose id (or key) is already present are skipped, so a retried restore converges.
    /// Returns how many rows were inserted. Stores that keep no rows accept only an empty list.
    fn import_agent(&self, alias: AgentAlias, entries: Vec<MemoryEntry>) -> MemFuture<'_, u64> {
        Box::pin(async move {
            if entries.is_empty() {
                return Ok(0);
            }
            Err(MemoryError::Lifecycle {
                agent: alias.to_string(),
                message: format!(
                    "the {:?} memory backend cannot import rows; its memory travels inside the workspace",
                    self.kind()
                ),
            })
        })
    }
    /// Records the embedder identity vectors are made with. When it differs from the one
    /// recorded, every stored vector is dropped (they are incomparable with new ones) and
    /// `true` is returned. Stores without vectors ignore it.
    fn set_embedder_identity(&self, _identity: String) -> MemFuture<'_, bool> {
        Box::pin(async { Ok(false) })
    }
}
