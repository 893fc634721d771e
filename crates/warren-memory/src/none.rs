//! The `none` backend (MEM-6): stores nothing and recalls nothing, yet an agent on it still gets
//! an [`crate::AgentScopedMemory`], so the runtime and the tools take one path for every agent.
//! [`UnavailableStore`] stands in for a store that did not open (issue 36 §1): every call fails
//! with its error, so only memory stops.

use warren_config::schema::MemoryBackendKind;
use warren_core::AgentAlias;

use crate::entry::{AgentId, ListQuery, MemoryEntry, NewEntry, RecallHit, RecallQuery, ScopeRule};
use crate::error::MemoryError;
use crate::store::{MemFuture, MemoryStore};

/// The no-op store.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoneStore;

impl MemoryStore for NoneStore {
    fn kind(&self) -> MemoryBackendKind {
        MemoryBackendKind::None
    }
    fn location(&self) -> String {
        "nowhere (memory backend \"none\")".into()
    }
    fn agent_id(&self, alias: &AgentAlias, _create: bool) -> MemFuture<'_, Option<AgentId>> {
        let id = AgentId(alias.to_string());
        Box::pin(async move { Ok(Some(id)) })
    }
    /// Answers the entry as it would have been stored; nothing is kept.
    fn store_with_agent(&self, agent: AgentId, entry: NewEntry) -> MemFuture<'_, MemoryEntry> {
        Box::pin(async move {
            let at = crate::entry::now();
            // The id is the alias text `agent_id` made from an `AgentAlias`.
            let agent = AgentAlias::new(agent.0).map_err(|e| MemoryError::Corrupt {
                location: "memory backend none".into(),
                message: e.to_string(),
            })?;
            Ok(MemoryEntry {
                id: String::new(),
                agent,
                key: entry.key,
                content: entry.content,
                category: entry.category,
                session: entry.session,
                created_at: at,
                updated_at: at,
                version: 0,
                provenance: crate::entry::Provenance::default(),
            })
        })
    }
    fn get_for_agent(&self, _: AgentId, _: String) -> MemFuture<'_, Option<MemoryEntry>> {
        Box::pin(async { Ok(None) })
    }
    fn recall_for_agents(
        &self,
        _: Vec<ScopeRule>,
        _: RecallQuery,
        _: Option<Vec<f32>>,
    ) -> MemFuture<'_, Vec<RecallHit>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    fn list_for_agent(&self, _: AgentId, _: ListQuery) -> MemFuture<'_, Vec<MemoryEntry>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    fn forget_for_agent(&self, _: AgentId, _: String) -> MemFuture<'_, bool> {
        Box::pin(async { Ok(false) })
    }
    fn count_for_agent(&self, _: AgentId) -> MemFuture<'_, u64> {
        Box::pin(async { Ok(0) })
    }
    fn export_agent(&self, _: AgentId) -> MemFuture<'_, Vec<MemoryEntry>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    fn purge_agent(&self, _: AgentId) -> MemFuture<'_, u64> {
        Box::pin(async { Ok(0) })
    }
    fn rename_agent(&self, _: AgentAlias, _: AgentAlias) -> MemFuture<'_, bool> {
        Box::pin(async { Ok(false) })
    }
}

/// A store that did not open: every call answers its error (nothing is written anywhere).
#[derive(Debug, Clone)]
pub struct UnavailableStore {
    kind: MemoryBackendKind,
    message: String,
}

impl UnavailableStore {
    pub fn new(kind: MemoryBackendKind, error: &MemoryError) -> Self {
        Self {
            kind,
            message: error.to_string(),
        }
    }

    fn fail<T: Send + 'static>(&self) -> MemFuture<'_, T> {
        let error = MemoryError::Unavailable {
            backend: format!("{:?}", self.kind).to_lowercase(),
            message: self.message.clone(),
        };
        Box::pin(async move { Err(error) })
    }
}

impl MemoryStore for UnavailableStore {
    fn kind(&self) -> MemoryBackendKind {
        self.kind
    }
    fn location(&self) -> String {
        format!("unavailable: {}", self.message)
    }
    fn agent_id(&self, _: &AgentAlias, _: bool) -> MemFuture<'_, Option<AgentId>> {
        self.fail()
    }
    fn store_with_agent(&self, _: AgentId, _: NewEntry) -> MemFuture<'_, MemoryEntry> {
        self.fail()
    }
    fn get_for_agent(&self, _: AgentId, _: String) -> MemFuture<'_, Option<MemoryEntry>> {
        self.fail()
    }
    fn recall_for_agents(
        &self,
        _: Vec<ScopeRule>,
        _: RecallQuery,
        _: Option<Vec<f32>>,
    ) -> MemFuture<'_, Vec<RecallHit>> {
        self.fail()
    }
    fn list_for_agent(&self, _: AgentId, _: ListQuery) -> MemFuture<'_, Vec<MemoryEntry>> {
        self.fail()
    }
    fn forget_for_agent(&self, _: AgentId, _: String) -> MemFuture<'_, bool> {
        self.fail()
    }
    fn count_for_agent(&self, _: AgentId) -> MemFuture<'_, u64> {
        self.fail()
    }
    fn export_agent(&self, _: AgentId) -> MemFuture<'_, Vec<MemoryEntry>> {
        self.fail()
    }
    fn purge_agent(&self, _: AgentId) -> MemFuture<'_, u64> {
        self.fail()
    }
    fn rename_agent(&self, _: AgentAlias, _: AgentAlias) -> MemFuture<'_, bool> {
        self.fail()
    }
}
