//! `AgentScopedMemory`: the only [`Memory`] an agent gets (MEM-1/2/3/6/8).
//!
//! - Every write is stamped with the bound agent's id (`store_with_agent`); the agent is
//!   registered in the store on its first write, never for merely being granted (no phantom
//!   `agents` rows, which would also trip the MEM-9 lock).
//! - Every read goes through `recall_for_agents` with the resolved allowlist: the bound agent
//!   with all its categories, plus each grant with its exact, case-sensitive category list.
//!   Grants are not transitive: only the bound agent's own `read_memory_from` is consulted.
//! - Deletes (`forget`, `purge`) touch only the bound agent's rows, and a key that only a
//!   sibling has answers `false` like any absent key (no existence oracle).
//! - Results are post-filtered by the same allowlist, defensively, whatever the backend did.

use std::sync::{Arc, Mutex, OnceLock};

use warren_config::schema::MemoryBackendKind;
use warren_core::AgentAlias;

use crate::embed::Embedder;
use crate::entry::{
    AgentId, ListQuery, MemoryEntry, MemoryVersion, NewEntry, RecallHit, RecallQuery, ScopeRule,
};
use crate::error::MemoryError;
use crate::store::{MemFuture, Memory, MemoryStore};

/// A sibling the bound agent may read, and which categories (`None` = all).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub agent: AgentAlias,
    pub categories: Option<Vec<String>>,
}

struct ResolvedGrant {
    grant: Grant,
    id: OnceLock<AgentId>,
}

/// One agent's view of an install-wide [`MemoryStore`].
pub struct AgentScopedMemory {
    alias: AgentAlias,
    store: Arc<dyn MemoryStore>,
    embedder: Option<Arc<dyn Embedder>>,
    /// Cleared by `purge`, which also removes the registration.
    own: Mutex<Option<AgentId>>,
    grants: Vec<ResolvedGrant>,
}

impl AgentScopedMemory {
    /// Binds `store` to `alias` with `grants`. A grant naming the bound agent itself is
    /// ignored (the bound agent always sees all its own categories).
    pub fn new(
        store: Arc<dyn MemoryStore>,
        alias: AgentAlias,
        grants: Vec<Grant>,
        embedder: Option<Arc<dyn Embedder>>,
    ) -> Self {
        let grants = grants
            .into_iter()
            .filter(|g| g.agent != alias)
            .map(|grant| ResolvedGrant {
                grant,
                id: OnceLock::new(),
            })
            .collect();
        Self {
            alias,
            store,
            embedder,
            own: Mutex::new(None),
            grants,
        }
    }

    /// The grants this handle honours.
    pub fn grants(&self) -> impl Iterator<Item = &Grant> {
        self.grants.iter().map(|g| &g.grant)
    }

    async fn own_id(&self, create: bool) -> Result<Option<AgentId>, MemoryError> {
        if let Some(id) = self.cached_own() {
            return Ok(Some(id));
        }
        let id = self.store.agent_id(&self.alias, create).await?;
        if let Some(id) = &id {
            self.set_own(Some(id.clone()));
        }
        Ok(id)
    }

    fn cached_own(&self) -> Option<AgentId> {
        match self.own.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    fn set_own(&self, id: Option<AgentId>) {
        match self.own.lock() {
            Ok(mut g) => *g = id,
            Err(p) => *p.into_inner() = id,
        }
    }

    /// The allowlist of a read: own rows (all categories) and every grant whose agent exists
    /// in the store. Ids are cached once found; agents that never wrote are looked up again.
    async fn scope(&self) -> Result<Vec<ScopeRule>, MemoryError> {
        let mut scope = Vec::with_capacity(self.grants.len() + 1);
        if let Some(own) = self.own_id(false).await? {
            scope.push(ScopeRule {
                agent: own,
                categories: None,
            });
        }
        for g in &self.grants {
            let id = match g.id.get() {
                Some(id) => Some(id.clone()),
                None => {
                    let found = self.store.agent_id(&g.grant.agent, false).await?;
                    if let Some(id) = &found {
                        let _ = g.id.set(id.clone());
                    }
                    found
                }
            };
            if let Some(id) = id {
                scope.push(ScopeRule {
                    agent: id,
                    categories: g.grant.categories.clone(),
                });
            }
        }
        Ok(scope)
    }

    /// The defensive post-filter: by alias and category, mirroring [`Self::scope`].
    fn visible(&self, entry: &MemoryEntry) -> bool {
        if entry.agent == self.alias.as_str() {
            return true;
        }
        self.grants.iter().any(|g| {
            g.grant.agent.as_str() == entry.agent
                && g.grant
                    .categories
                    .as_ref()
                    .is_none_or(|c| c.iter().any(|x| x == &entry.category))
        })
    }

    async fn embed_one(&self, text: String) -> Option<Vec<f32>> {
        let embedder = self.embedder.as_ref()?;
        match embedder.embed(vec![text]).await {
            Ok(mut v) if v.len() == 1 => v.pop(),
            Ok(v) => {
                tracing::warn!(agent = %self.alias, got = v.len(), "embedder returned the wrong number of vectors; keyword recall only");
                None
            }
            Err(e) => {
                tracing::warn!(agent = %self.alias, error = %e, "embedding failed; keyword recall only for this call");
                None
            }
        }
    }
}

impl Memory for AgentScopedMemory {
    fn agent(&self) -> &AgentAlias {
        &self.alias
    }

    fn backend(&self) -> MemoryBackendKind {
        self.store.kind()
    }

    fn store(&self, mut entry: NewEntry) -> MemFuture<'_, MemoryEntry> {
        Box::pin(async move {
            if entry.embedding.is_none() {
                entry.embedding = self.embed_one(entry.embedding_text()).await;
            }
            let Some(own) = self.own_id(true).await? else {
                return Err(MemoryError::Lifecycle {
                    agent: self.alias.to_string(),
                    message: "the store did not register the agent".into(),
                });
            };
            self.store.store_with_agent(own, entry).await
        })
    }

    fn get(&self, key: String) -> MemFuture<'_, Option<MemoryEntry>> {
        Box::pin(async move {
            match self.own_id(false).await? {
                Some(own) => Ok(self
                    .store
                    .get_for_agent(own, key)
                    .await?
                    .filter(|e| e.agent == self.alias.as_str())),
                None => Ok(None),
            }
        })
    }

    fn recall(&self, query: RecallQuery) -> MemFuture<'_, Vec<RecallHit>> {
        Box::pin(async move {
            query.check(self.alias.as_str())?;
            if !query.is_recent() {
                // Reject a query with no words here, so the error names the agent.
                crate::fts::words(self.alias.as_str(), &query.text)?;
            }
            let scope = self.scope().await?;
            if scope.is_empty() {
                return Ok(Vec::new());
            }
            let vector = if query.is_recent() {
                None
            } else {
                self.embed_one(query.text.clone()).await
            };
            let hits = self.store.recall_for_agents(scope, query, vector).await?;
            Ok(hits
                .into_iter()
                .filter(|h| self.visible(&h.entry))
                .collect())
        })
    }

    fn list(&self, query: ListQuery) -> MemFuture<'_, Vec<MemoryEntry>> {
        Box::pin(async move {
            query.check(self.alias.as_str())?;
            match self.own_id(false).await? {
                Some(own) => Ok(self
                    .store
                    .list_for_agent(own, query)
                    .await?
                    .into_iter()
                    .filter(|e| e.agent == self.alias.as_str())
                    .collect()),
                None => Ok(Vec::new()),
            }
        })
    }

    fn forget(&self, key: String) -> MemFuture<'_, bool> {
        Box::pin(async move {
            match self.own_id(false).await? {
                Some(own) => self.store.forget_for_agent(own, key).await,
                None => Ok(false),
            }
        })
    }

    fn count(&self) -> MemFuture<'_, u64> {
        Box::pin(async move {
            match self.own_id(false).await? {
                Some(own) => self.store.count_for_agent(own).await,
                None => Ok(0),
            }
        })
    }

    fn export(&self) -> MemFuture<'_, Vec<MemoryEntry>> {
        Box::pin(async move {
            match self.own_id(false).await? {
                Some(own) => self.store.export_agent(own).await,
                None => Ok(Vec::new()),
            }
        })
    }

    fn purge(&self) -> MemFuture<'_, u64> {
        Box::pin(async move {
            match self.own_id(false).await? {
                Some(own) => {
                    let n = self.store.purge_agent(own).await?;
                    self.set_own(None);
                    Ok(n)
                }
                None => Ok(0),
            }
        })
    }

    fn history(&self, key: String) -> MemFuture<'_, Vec<MemoryVersion>> {
        Box::pin(async move {
            match self.own_id(false).await? {
                Some(own) => Ok(self
                    .store
                    .history_for_agent(own, key.trim().to_string())
                    .await?
                    .into_iter()
                    .filter(|v| v.entry.agent == self.alias.as_str())
                    .collect()),
                None => Ok(Vec::new()),
            }
        })
    }

    fn attach_receipt(&self, key: String, version: u64, receipt: String) -> MemFuture<'_, bool> {
        Box::pin(async move {
            match self.own_id(false).await? {
                Some(own) => self.store.attach_receipt(own, key, version, receipt).await,
                None => Ok(false),
            }
        })
    }

    fn undo(&self, key: String, to: Option<u64>) -> MemFuture<'_, MemoryEntry> {
        Box::pin(async move {
            let key = key.trim().to_string();
            match self.own_id(false).await? {
                Some(own) => self.store.undo_for_agent(own, key, to).await,
                None => Err(MemoryError::NoVersion {
                    agent: self.alias.to_string(),
                    key,
                    message: "the agent has no memory, so there is nothing to undo".into(),
                }),
            }
        })
    }
}
