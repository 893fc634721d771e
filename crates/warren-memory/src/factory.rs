//! The one way to obtain an agent's memory: [`create_memory_for_agent`] (MEM-1).
//!
//! It dispatches on the agent's OWN backend (`agents.<alias>.memory.backend`, else `[memory]
//! backend`), wraps every backend, `none` included, in [`AgentScopedMemory`] (MEM-6), and
//! resolves `read_memory_from` into grants under the validator's own rule set
//! (`warren_config::grants`), because a handle may be built from a config that never went
//! through `ConfigStore` (MEM-4/7/8).
//!
//! [`MemoryStores`] opens each install-wide store once and shares it between agents.

use std::sync::Arc;

use tokio::sync::OnceCell;
use warren_config::grants::memory_grants;
use warren_config::schema::MemoryBackendKind;
use warren_config::{Config, InstallRoot};
use warren_core::AgentAlias;

use crate::embed::Embedder;
use crate::error::MemoryError;
use crate::lucid::LucidStore;
use crate::markdown::MarkdownStore;
use crate::none::NoneStore;
use crate::postgres::PostgresStore;
use crate::qdrant::QdrantStore;
use crate::scoped::{AgentScopedMemory, Grant};
use crate::sqlite::SqliteStore;
use crate::store::{Memory, MemoryStore};

/// The install's memory stores, each opened on first use and then shared.
pub struct MemoryStores {
    root: InstallRoot,
    sqlite: OnceCell<Arc<SqliteStore>>,
    postgres: OnceCell<Arc<PostgresStore>>,
    qdrant: OnceCell<Arc<QdrantStore>>,
    lucid: OnceCell<Arc<LucidStore>>,
    markdown: Arc<MarkdownStore>,
    /// Why the SQLite store did not open at its last try (cleared when it opens; issue 36 §1).
    sqlite_error: std::sync::Mutex<Option<String>>,
}

impl MemoryStores {
    pub fn new(root: InstallRoot) -> Self {
        Self {
            markdown: Arc::new(MarkdownStore::new(root.clone())),
            root,
            sqlite: OnceCell::new(),
            postgres: OnceCell::new(),
            qdrant: OnceCell::new(),
            lucid: OnceCell::new(),
            sqlite_error: std::sync::Mutex::new(None),
        }
    }

    /// Why the SQLite store (`data/memory/memory.db`) did not open at its last try; `None`
    /// once it opened or before any try. Memory calls fail with this error meanwhile; nothing
    /// is written to the file.
    pub fn sqlite_error(&self) -> Option<String> {
        self.sqlite_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn root(&self) -> &InstallRoot {
        &self.root
    }

    /// The SQLite store (`data/memory/memory.db`), opened off the async workers.
    pub async fn sqlite(&self, config: &Config) -> Result<Arc<SqliteStore>, MemoryError> {
        let path = self.root.memory_db();
        let (weight, history) = (
            config.memory.embedder.vector_weight,
            config.memory.history_versions,
        );
        let opened = self
            .sqlite
            .get_or_try_init(|| async move {
                let open = move || SqliteStore::open(&path).map(|s| s.with_history_limit(history));
                let store = tokio::task::spawn_blocking(open)
                    .await
                    .map_err(|e| MemoryError::Worker(e.to_string()))??;
                let store = match weight {
                    Some(w) => store.with_vector_weight(w),
                    None => store,
                };
                Ok(Arc::new(store))
            })
            .await
            .cloned();
        *self.sqlite_error.lock().unwrap_or_else(|p| p.into_inner()) =
            opened.as_ref().err().map(ToString::to_string);
        opened
    }

    /// The PostgreSQL store of `[memory.postgres]`. Connecting is lazy: a server that is down
    /// fails memory calls with a clear error, not the construction of the agent.
    pub async fn postgres(&self, config: &Config) -> Result<Arc<PostgresStore>, MemoryError> {
        let pg = &config.memory.postgres;
        let Some(url) = pg.url.as_ref() else {
            return Err(MemoryError::Config(
                "an agent uses the postgres memory backend but memory.postgres.url is not set \
                 (warren config set memory.postgres.url --secret)"
                    .into(),
            ));
        };
        let (url, schema) = (url.expose().to_string(), pg.schema.clone());
        let (weight, history) = (
            config.memory.embedder.vector_weight,
            config.memory.history_versions,
        );
        self.postgres
            .get_or_try_init(|| async move {
                let store = PostgresStore::new(&url, &schema)?.with_history_limit(history);
                Ok(Arc::new(match weight {
                    Some(w) => store.with_vector_weight(w),
                    None => store,
                }))
            })
            .await
            .cloned()
    }

    /// The Qdrant collection of `[memory.qdrant]`, with the configured embedder (points need
    /// vectors). Nothing is contacted until the first memory call.
    pub async fn qdrant(&self, config: &Config) -> Result<Arc<QdrantStore>, MemoryError> {
        let embedder = crate::openai::from_config(config)?;
        let (qdrant, history) = (config.memory.qdrant.clone(), config.memory.history_versions);
        let lock = self.root.qdrant_lock();
        self.qdrant
            .get_or_try_init(|| async move {
                Ok(Arc::new(
                    QdrantStore::new(&qdrant, embedder)?
                        .with_history_limit(history)
                        .with_write_lock(lock),
                ))
            })
            .await
            .cloned()
    }

    /// The SQLite store enriched by `[memory.lucid]`'s CLI; projects under
    /// `data/memory/lucid/<alias>/`.
    pub async fn lucid(&self, config: &Config) -> Result<Arc<LucidStore>, MemoryError> {
        let sqlite = self.sqlite(config).await?;
        let (lucid, projects) = (
            config.memory.lucid.clone(),
            self.root.memory_dir().join("lucid"),
        );
        self.lucid
            .get_or_try_init(
                || async move { Ok(Arc::new(LucidStore::new(sqlite, lucid, projects))) },
            )
            .await
            .cloned()
    }

    /// `/api/health`'s `memory_backends` component: each external backend an agent of `config`
    /// uses. Qdrant: its `/healthz` answers (`error` otherwise). Lucid: `warning` when the
    /// command is missing or its last run failed (recall then uses SQLite only).
    pub async fn health(&self, config: &Config) -> serde_json::Value {
        use serde_json::json;
        let uses = |kind: MemoryBackendKind| {
            config
                .agents()
                .any(|(_, a)| config.memory_backend_of(a) == kind)
        };
        let mut out = serde_json::Map::new();
        let mut status = "ok";
        if uses(MemoryBackendKind::Qdrant) {
            let v = match self.qdrant(config).await {
                Ok(q) => match q.health().await {
                    Ok(()) => json!({"status": "ok", "location": q.location()}),
                    Err(e) => {
                        json!({"status": "error", "location": q.location(), "error": e.to_string()})
                    }
                },
                Err(e) => json!({"status": "error", "error": e.to_string()}),
            };
            if v["status"] != "ok" {
                status = "error";
            }
            out.insert("qdrant".into(), v);
        }
        if uses(MemoryBackendKind::Lucid) {
            let v = match self.lucid(config).await {
                Ok(l) => l.health(),
                Err(e) => json!({"status": "error", "error": e.to_string()}),
            };
            if v["status"] == "error" {
                status = "error";
            } else if v["status"] != "ok" && status == "ok" {
                status = "warning";
            }
            out.insert("lucid".into(), v);
        }
        out.insert("status".into(), status.into());
        serde_json::Value::Object(out)
    }

    pub fn markdown(&self) -> Arc<MarkdownStore> {
        Arc::clone(&self.markdown)
    }

    /// The store of one backend kind.
    pub async fn store(
        &self,
        config: &Config,
        kind: MemoryBackendKind,
    ) -> Result<Arc<dyn MemoryStore>, MemoryError> {
        Ok(match kind {
            MemoryBackendKind::Sqlite => self.sqlite(config).await?,
            MemoryBackendKind::Postgres => self.postgres(config).await?,
            MemoryBackendKind::Markdown => self.markdown(),
            MemoryBackendKind::None => Arc::new(NoneStore),
            MemoryBackendKind::Qdrant => self.qdrant(config).await?,
            MemoryBackendKind::Lucid => self.lucid(config).await?,
        })
    }
}

/// MEM-1: builds `alias`'s memory handle from `config`.
pub async fn create_memory_for_agent(
    stores: &MemoryStores,
    config: &Config,
    alias: &AgentAlias,
) -> Result<Arc<dyn Memory>, MemoryError> {
    let agent = config
        .agent(alias)
        .ok_or_else(|| MemoryError::UnknownAgent {
            agent: alias.to_string(),
        })?;
    let kind = config.memory_backend_of(agent);
    let grants = resolve_grants(config, alias)?;
    // A store that does not open (a damaged file) stops only memory: the agent runs on and
    // its memory calls say why (issue 36 §1; `/api/health` names the store).
    let store = match stores.store(config, kind).await {
        Ok(store) => store,
        Err(e) => {
            tracing::debug!(agent = %alias, "memory is unavailable to this agent: {e}");
            Arc::new(crate::none::UnavailableStore::new(kind, &e))
        }
    };
    let mut embedder: Option<Arc<dyn Embedder>> = match kind {
        MemoryBackendKind::Sqlite
        | MemoryBackendKind::Postgres
        | MemoryBackendKind::Lucid
        | MemoryBackendKind::Qdrant => crate::openai::from_config(config)?,
        _ => None,
    };
    if let Some(e) = &embedder {
        // Vectors of another model are incomparable: the store drops them on a change. If the
        // store cannot be asked (a server that is down), this handle stays keyword-only rather
        // than mixing vectors of two models; memory calls report the store's error themselves.
        if let Err(err) = store.set_embedder_identity(e.identity()).await {
            tracing::warn!(agent = %alias, error = %err, "cannot check the embedder identity; keyword recall only");
            embedder = None;
        }
    }
    Ok(Arc::new(AgentScopedMemory::new(
        store,
        alias.clone(),
        grants,
        embedder,
    )))
}

/// `read_memory_from` → grants under the one rule set of `warren_config::grants` (the one
/// config validation applies): the first refused grant is an error naming the agent, the grant
/// and the rule.
pub fn resolve_grants(config: &Config, alias: &AgentAlias) -> Result<Vec<Grant>, MemoryError> {
    if config.agent(alias).is_none() {
        return Err(MemoryError::UnknownAgent {
            agent: alias.to_string(),
        });
    }
    let (grants, refused) = memory_grants(config, alias);
    if let Some(p) = refused.first() {
        return Err(MemoryError::Grant {
            agent: alias.to_string(),
            grant: p.grant.to_string(),
            rule: p.rule(alias.as_str()),
        });
    }
    Ok(grants
        .into_iter()
        .map(|g| Grant {
            agent: g.agent,
            categories: g.categories,
        })
        .collect())
}
