//! The Qdrant memory store (MEM-5): one shared collection on a Qdrant server, reached over its
//! REST API with `ureq` (the HTTP client the workspace already builds; the official
//! `qdrant-client` crate would add tonic/prost/hyper to a 2-core build for a dozen calls).
//!
//! - Each point is one entry: id = the entry id (a UUID), vector = the embedding of
//!   `key\ncontent`, payload `agent_id` (the agent's alias), `key`, `category`, `session`,
//!   `created_at`/`updated_at` (UTC microseconds), `content`, `version`, `provenance`.
//! - Scoped recall (MEM-5) over-fetches and post-filters by payload: Qdrant is asked for a page
//!   of the best candidates among the allowlist's agents (a payload filter that only narrows),
//!   every candidate is checked against the exact allowlist (agent and category grant), and
//!   further pages are fetched until `limit` allowed rows are found or the candidates are
//!   exhausted, so forbidden rows never crowd out allowed ones.
//! - Writes (store, forget, undo, import) read the key's versions, check `expected_version`
//!   and write under an exclusive `flock` on `data/memory/qdrant.lock` (`Http::lock_writes`),
//!   so the daemon and CLI commands of one install never take the same version of a key.
//! - A write upserts the NEW point first and only then marks the older live versions of the key
//!   `replaced` (crash point [`FAILPOINT_AFTER_UPSERT`] between the two): a crash leaves two
//!   live versions, never none. Readers take the newest live version of each key, and the next
//!   write of the key archives the leftover.
//! - History (issue 20 §4): replaced and forgotten versions stay as points with `state`
//!   `replaced`/`forgotten` (out of every read but `history`), at most `[memory]
//!   history_versions` per key; `undo` writes a kept version back as the next version.
//! - Keyword recall uses Qdrant's full-text payload index (`text_any` on `content` and `key`),
//!   ranked by vector similarity; without a query vector (the embedder failed for this call)
//!   the matching rows come newest first. A `word*` prefix term matches the whole word only.
//!
//! All HTTP (the client is in `rest.rs`) runs on the blocking pool, never on an async worker.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::{Value, json};
use warren_config::schema::MemoryBackendKind;
use warren_config::schema::memory_backends::QdrantConfig;
use warren_core::AgentAlias;

use crate::embed::Embedder;
use crate::entry::{
    AgentId, DEFAULT_HISTORY_VERSIONS, ListQuery, MemoryEntry, MemoryVersion, NewEntry, RecallHit,
    RecallQuery, ScopeRule, VersionState, now, scope_allows,
};
use crate::error::MemoryError;
use crate::store::{MemFuture, MemoryStore};

mod history;
mod points;
mod recall;
mod rest;
use history::{archive, no_version, prune, undo_plan, version_of};
use points::{Row, agent_filter, key_filter, live, micros, newer, not_live, payload, row_of};
use recall::{drop_stale, newest_per_key, recall_filter};
use rest::Http;

/// Crash point between the upsert of a new version and the archiving of the old ones.
pub const FAILPOINT_AFTER_UPSERT: &str = "qdrant-store-after-upsert";

/// The install's Qdrant collection.
pub struct QdrantStore {
    http: Arc<Http>,
    embedder: Option<Arc<dyn Embedder>>,
    /// Kept versions per key (`[memory] history_versions`).
    history: u32,
}

impl QdrantStore {
    /// A store for `[memory.qdrant]`; nothing is contacted until the first call.
    pub fn new(
        config: &QdrantConfig,
        embedder: Option<Arc<dyn Embedder>>,
    ) -> Result<Self, MemoryError> {
        let url = config.url.as_deref().map(str::trim).unwrap_or("");
        if url.is_empty() {
            return Err(MemoryError::Config(
                "an agent uses the qdrant memory backend but memory.qdrant.url is not set \
                 (warren config set memory.qdrant.url http://127.0.0.1:6333)"
                    .into(),
            ));
        }
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(MemoryError::Config(format!(
                "memory.qdrant.url {url:?} must start with http:// or https://"
            )));
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(config.timeout_secs.max(1))))
            .build()
            .into();
        Ok(Self {
            http: Arc::new(Http {
                base: url.trim_end_matches('/').to_string(),
                collection: config.collection.clone(),
                api_key: config
                    .api_key
                    .as_ref()
                    .map(|k| k.expose().to_string())
                    .filter(|k| !k.is_empty()),
                vector_size: config.vector_size.and_then(|v| usize::try_from(v).ok()),
                agent,
                ready: OnceLock::new(),
                identity: embedder.as_ref().map(|e| e.identity()),
                outage: Mutex::new(None),
                write_lock: None,
            }),
            embedder,
            history: DEFAULT_HISTORY_VERSIONS,
        })
    }

    /// Keeps at most `versions` earlier versions per key.
    pub fn with_history_limit(mut self, versions: u32) -> Self {
        self.history = versions;
        self
    }

    /// Serializes this install's writes through `path` (`data/memory/qdrant.lock`), so
    /// compare-and-set and version numbers hold between the daemon and CLI commands; without
    /// it (a store made by hand) writes of one key may race.
    pub fn with_write_lock(mut self, path: std::path::PathBuf) -> Self {
        if let Some(http) = Arc::get_mut(&mut self.http) {
            http.write_lock = Some(path);
        }
        self
    }

    /// The server's URL and collection, for messages.
    pub fn describe(&self) -> String {
        format!("{} (collection {})", self.http.base, self.http.collection)
    }

    /// The health check shown in `/api/health`: the server answers `/healthz` and accepts the
    /// API key for the collection (which may not exist before the first write). It asks even
    /// during an outage's backoff, and an answer ends the outage.
    pub async fn health(&self) -> Result<(), MemoryError> {
        self.run(|h| {
            h.retry_now();
            h.call("GET", "/healthz", None)?;
            // With the key: a refused key (or a collection made by another embedder) shows
            // here, not at the first write. A collection not made yet is fine.
            h.ensure(None)?;
            Ok(())
        })
        .await
    }

    /// How many points each of `aliases` has (those with none are left out): the MEM-9 probe.
    pub async fn points_per_agent(
        &self,
        aliases: Vec<AgentAlias>,
    ) -> Result<Vec<(String, u64)>, MemoryError> {
        self.run(move |h| {
            let mut out = Vec::new();
            if !h.ensure(None)? {
                return Ok(out);
            }
            for alias in aliases {
                let n = h.count(agent_filter(&AgentId(alias.to_string())))?;
                if n > 0 {
                    out.push((alias.to_string(), n));
                }
            }
            Ok(out)
        })
        .await
    }

    async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Http) -> Result<T, MemoryError> + Send + 'static,
    ) -> Result<T, MemoryError> {
        let http = Arc::clone(&self.http);
        tokio::task::spawn_blocking(move || f(&http))
            .await
            .map_err(|e| MemoryError::Worker(e.to_string()))?
    }

    async fn vector_of(&self, text: String) -> Result<Vec<f32>, MemoryError> {
        let Some(embedder) = &self.embedder else {
            return Err(MemoryError::Config(
                "the qdrant memory backend stores vectors and needs [memory.embedder]".into(),
            ));
        };
        let mut v = embedder.embed(vec![text]).await?;
        match (v.pop(), v.is_empty()) {
            (Some(x), true) if !x.is_empty() => Ok(x),
            _ => Err(MemoryError::Embedder {
                url: embedder.describe(),
                message: "expected exactly one vector".into(),
            }),
        }
    }
}

impl Http {
    /// The newest live version of `agent`'s `key` (see [`newer`]).
    fn current(&self, agent: &AgentId, key: &str) -> Result<Option<Row>, MemoryError> {
        Ok(self
            .versions(agent, key)?
            .into_iter()
            .filter(|r| r.state == VersionState::Current)
            .reduce(|a, b| if newer(&b, &a) { b } else { a }))
    }

    /// Every point of `agent`'s `key`: live and kept versions.
    fn versions(&self, agent: &AgentId, key: &str) -> Result<Vec<Row>, MemoryError> {
        let mut out = Vec::new();
        for p in self.scroll_all(key_filter(agent, key))? {
            let row = self.row(&p)?;
            if row.entry.key == key {
                out.push(row);
            }
        }
        Ok(out)
    }

    fn row(&self, point: &Value) -> Result<Row, MemoryError> {
        row_of(point).map_err(|m| MemoryError::Corrupt {
            location: format!("{} (collection {})", self.base, self.collection),
            message: m.to_string(),
        })
    }
}

/// Upserts `entry` as a new live point, then marks the older live versions of its key
/// `replaced` (they become its history, pruned to `keep`).
fn write(
    h: &Http,
    agent: &AgentId,
    entry: &MemoryEntry,
    vector: &[f32],
    keep: u32,
) -> Result<(), MemoryError> {
    let point = uuid::Uuid::new_v4().to_string();
    h.points(
        "",
        json!({ "points": [ { "id": point, "vector": vector, "payload": payload(agent, entry) } ] }),
    )?;
    warren_config::failpoint::crash_point(FAILPOINT_AFTER_UPSERT);
    let mut older = live(key_filter(agent, &entry.key));
    if let Some(must_not) = older["must_not"].as_array_mut() {
        must_not.push(json!({ "has_id": [point] }));
    }
    if let Some(must) = older["must"].as_array_mut() {
        // Strictly older: a racing write of the same version stays live (readers pick one of
        // the two by `newer`; the next write archives the other), never both archived.
        must.push(json!({ "key": "version", "range": { "lt": entry.version } }));
    }
    archive(h, older, VersionState::Replaced)?;
    prune(h, agent, &entry.key, keep)
}

impl MemoryStore for QdrantStore {
    fn kind(&self) -> MemoryBackendKind {
        MemoryBackendKind::Qdrant
    }

    fn location(&self) -> String {
        format!(
            "{} (collection {})",
            crate::error::redact_url(&self.http.base),
            self.http.collection
        )
    }

    /// Points carry the alias itself: nothing to register. Without `create`, an agent with no
    /// point is `None`, as in the SQL stores.
    fn agent_id(&self, alias: &AgentAlias, create: bool) -> MemFuture<'_, Option<AgentId>> {
        let id = AgentId(alias.to_string());
        Box::pin(self.run(move |h| {
            if create {
                return Ok(Some(id));
            }
            if !h.ensure(None)? || h.count(agent_filter(&id))? == 0 {
                return Ok(None);
            }
            Ok(Some(id))
        }))
    }

    fn store_with_agent(&self, agent: AgentId, entry: NewEntry) -> MemFuture<'_, MemoryEntry> {
        Box::pin(async move {
            let vector = match entry.embedding.clone() {
                Some(v) if !v.is_empty() => v,
                _ => self.vector_of(entry.embedding_text()).await?,
            };
            let keep = self.history;
            self.run(move |h| {
                h.ensure(Some(vector.len()))?;
                // Read, check and write under the install's write lock.
                let _lock = h.lock_writes()?;
                let versions = h.versions(&agent, &entry.key)?;
                let last = versions.iter().map(|r| r.entry.version).max().unwrap_or(0);
                let current = versions
                    .into_iter()
                    .filter(|r| r.state == VersionState::Current)
                    .reduce(|a, b| if newer(&b, &a) { b } else { a });
                let version = current.as_ref().map_or(0, |c| c.entry.version);
                if let Some(expected) = entry.expected_version
                    && expected != version
                {
                    return Err(MemoryError::Conflict {
                        agent: agent.as_str().to_string(),
                        key: entry.key,
                        expected,
                        actual: version,
                    });
                }
                let at = now();
                let stored = MemoryEntry {
                    id: current
                        .as_ref()
                        .map_or_else(|| uuid::Uuid::new_v4().to_string(), |c| c.entry.id.clone()),
                    agent: AgentAlias::new(agent.as_str()).map_err(|e| h.err(e.to_string()))?,
                    key: entry.key,
                    content: entry.content,
                    category: entry.category,
                    session: entry.session,
                    created_at: current.as_ref().map_or(at, |c| c.entry.created_at),
                    updated_at: at,
                    // A key forgotten and stored again continues its count.
                    version: last.max(version) + 1,
                    provenance: entry.provenance.sanitized(),
                };
                write(h, &agent, &stored, &vector, keep)?;
                Ok(stored)
            })
            .await
        })
    }

    fn get_for_agent(&self, agent: AgentId, key: String) -> MemFuture<'_, Option<MemoryEntry>> {
        Box::pin(self.run(move |h| {
            if !h.ensure(None)? {
                return Ok(None);
            }
            Ok(h.current(&agent, &key)?.map(|r| r.entry))
        }))
    }

    fn recall_for_agents(
        &self,
        scope: Vec<ScopeRule>,
        query: RecallQuery,
        query_vector: Option<Vec<f32>>,
    ) -> MemFuture<'_, Vec<RecallHit>> {
        Box::pin(self.run(move |h| {
            if scope.is_empty() || !h.ensure(None)? {
                return Ok(Vec::new());
            }
            let filter = recall_filter(&scope, &query)?;
            let ranked = if query.is_recent() {
                None
            } else {
                query_vector
            };
            // Over-fetch: a page several times the limit, then the next page while forbidden
            // rows (or stale versions) left the result short (MEM-5).
            let page = query.limit.saturating_mul(4).clamp(32, 512);
            let mut offset = 0usize;
            let mut kept: Vec<Row> = Vec::new();
            loop {
                let mut body = json!({
                    "filter": filter,
                    "limit": page,
                    "offset": offset,
                    "with_payload": true,
                });
                body["query"] = match &ranked {
                    Some(v) => json!(v),
                    None => json!({ "order_by": { "key": "updated_at", "direction": "desc" } }),
                };
                let result = h.points("/query", body)?;
                let points = result["points"].as_array().cloned().unwrap_or_default();
                let exhausted = points.len() < page;
                for p in &points {
                    let mut row = h.row(p)?;
                    let id = AgentId(row.entry.agent.to_string());
                    if !scope_allows(&scope, &id, &row.entry.category) {
                        continue;
                    }
                    if ranked.is_none() {
                        row.score = 1.0;
                    }
                    kept.push(row);
                }
                kept = newest_per_key(kept);
                drop_stale(h, &mut kept)?;
                if kept.len() >= query.limit || exhausted {
                    break;
                }
                offset += page;
            }
            kept.truncate(query.limit);
            Ok(kept
                .into_iter()
                .map(|r| RecallHit {
                    entry: r.entry,
                    score: r.score,
                })
                .collect())
        }))
    }

    fn list_for_agent(&self, agent: AgentId, query: ListQuery) -> MemFuture<'_, Vec<MemoryEntry>> {
        Box::pin(self.run(move |h| {
            if !h.ensure(None)? {
                return Ok(Vec::new());
            }
            let mut filter = live(agent_filter(&agent));
            if let (Some(c), Some(must)) = (&query.category, filter["must"].as_array_mut()) {
                must.push(json!({ "key": "category", "match": { "value": c } }));
            }
            let mut rows = Vec::new();
            for p in h.scroll_all(filter)? {
                rows.push(h.row(&p)?);
            }
            let mut rows = newest_per_key(rows);
            rows.sort_by(|a, b| {
                (b.entry.updated_at, &b.entry.id).cmp(&(a.entry.updated_at, &a.entry.id))
            });
            Ok(rows
                .into_iter()
                .skip(query.offset)
                .take(query.limit)
                .map(|r| r.entry)
                .collect())
        }))
    }

    fn forget_for_agent(&self, agent: AgentId, key: String) -> MemFuture<'_, bool> {
        let keep = self.history;
        Box::pin(self.run(move |h| {
            if !h.ensure(None)? {
                return Ok(false);
            }
            let _lock = h.lock_writes()?;
            let filter = live(key_filter(&agent, &key));
            if h.count(filter.clone())? == 0 {
                return Ok(false);
            }
            // Kept as a `forgotten` version (undo brings it back), pruned like the others.
            archive(h, filter, VersionState::Forgotten)?;
            prune(h, &agent, &key, keep)?;
            Ok(true)
        }))
    }

    fn count_for_agent(&self, agent: AgentId) -> MemFuture<'_, u64> {
        Box::pin(self.run(move |h| {
            if !h.ensure(None)? {
                return Ok(0);
            }
            h.count(live(agent_filter(&agent)))
        }))
    }

    fn export_agent(&self, agent: AgentId) -> MemFuture<'_, Vec<MemoryEntry>> {
        Box::pin(self.run(move |h| {
            if !h.ensure(None)? {
                return Ok(Vec::new());
            }
            let mut rows = Vec::new();
            for p in h.scroll_all(live(agent_filter(&agent)))? {
                rows.push(h.row(&p)?);
            }
            let mut entries: Vec<MemoryEntry> =
                newest_per_key(rows).into_iter().map(|r| r.entry).collect();
            entries.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
            Ok(entries)
        }))
    }

    fn purge_agent(&self, agent: AgentId) -> MemFuture<'_, u64> {
        Box::pin(self.run(move |h| {
            if !h.ensure(None)? {
                return Ok(0);
            }
            let n = h.count(live(agent_filter(&agent)))?;
            // Every point: live rows and kept versions.
            h.points("/delete", json!({ "filter": agent_filter(&agent) }))?;
            Ok(n)
        }))
    }

    fn rename_agent(&self, from: AgentAlias, to: AgentAlias) -> MemFuture<'_, bool> {
        Box::pin(self.run(move |h| {
            if !h.ensure(None)? {
                return Ok(false);
            }
            let (from_id, to_id) = (AgentId(from.to_string()), AgentId(to.to_string()));
            let held = h.count(agent_filter(&to_id))?;
            if held > 0 {
                return Err(MemoryError::Lifecycle {
                    agent: from.to_string(),
                    message: format!(
                        "cannot rename to '{to}': '{to}' already owns {held} memory points in {} (collection {})",
                        h.base, h.collection
                    ),
                });
            }
            if h.count(agent_filter(&from_id))? == 0 {
                return Ok(false);
            }
            // One operation on the server: every point of `from` moves at once.
            h.points(
                "/payload",
                json!({ "filter": agent_filter(&from_id), "payload": { "agent_id": to.as_str() } }),
            )?;
            Ok(true)
        }))
    }

    fn history_for_agent(&self, agent: AgentId, key: String) -> MemFuture<'_, Vec<MemoryVersion>> {
        Box::pin(self.run(move |h| {
            if !h.ensure(None)? {
                return Ok(Vec::new());
            }
            let mut rows = h.versions(&agent, &key)?;
            rows.sort_by(|a, b| {
                (
                    a.state != VersionState::Current,
                    std::cmp::Reverse(a.entry.version),
                )
                    .cmp(&(
                        b.state != VersionState::Current,
                        std::cmp::Reverse(b.entry.version),
                    ))
            });
            Ok(rows.into_iter().map(version_of).collect())
        }))
    }

    fn undo_for_agent(
        &self,
        agent: AgentId,
        key: String,
        to: Option<u64>,
    ) -> MemFuture<'_, MemoryEntry> {
        Box::pin(async move {
            let keep = self.history;
            // The vector is made outside the write lock (the embedder may be slow); the plan is
            // made again under it, and a version written meanwhile that changes what is
            // restored starts over.
            let mut attempts = 0;
            loop {
                attempts += 1;
                let (plan_agent, plan_key) = (agent.clone(), key.clone());
                let planned = self
                    .run(move |h| {
                        if !h.ensure(None)? {
                            return Err(no_version(&plan_agent, &plan_key, "no such key"));
                        }
                        undo_plan(h, &plan_agent, &plan_key, to)
                    })
                    .await?;
                let vector = self
                    .vector_of(format!("{}\n{}", planned.key, planned.content))
                    .await?;
                let (write_agent, write_key) = (agent.clone(), key.clone());
                let done = self
                    .run(move |h| {
                        let _lock = h.lock_writes()?;
                        let restored = undo_plan(h, &write_agent, &write_key, to)?;
                        if (&restored.key, &restored.content) != (&planned.key, &planned.content) {
                            return Ok(None);
                        }
                        write(h, &write_agent, &restored, &vector, keep)?;
                        Ok(Some(restored))
                    })
                    .await?;
                match done {
                    Some(restored) => return Ok(restored),
                    None if attempts >= 3 => {
                        return Err(no_version(
                            &agent,
                            &key,
                            "other writers kept changing it during the undo; try again",
                        ));
                    }
                    None => {}
                }
            }
        })
    }

    fn attach_receipt(
        &self,
        agent: AgentId,
        key: String,
        version: u64,
        receipt: String,
    ) -> MemFuture<'_, bool> {
        Box::pin(self.run(move |h| {
            if !h.ensure(None)? {
                return Ok(false);
            }
            let mut attached = false;
            for row in h.versions(&agent, &key)? {
                if row.entry.version != version || row.entry.provenance.receipt.is_some() {
                    continue;
                }
                let mut provenance = row.entry.provenance;
                provenance.receipt = Some(receipt.clone());
                h.points(
                    "/payload",
                    json!({ "points": [row.point], "payload": { "provenance": provenance } }),
                )?;
                attached = true;
            }
            Ok(attached)
        }))
    }

    fn export_history(&self, agent: AgentId) -> MemFuture<'_, Vec<MemoryVersion>> {
        Box::pin(self.run(move |h| {
            if !h.ensure(None)? {
                return Ok(Vec::new());
            }
            let mut filter = agent_filter(&agent);
            if let Some(must) = filter["must"].as_array_mut() {
                must.push(not_live());
            }
            let mut out = Vec::new();
            for p in h.scroll_all(filter)? {
                out.push(version_of(h.row(&p)?));
            }
            out.sort_by(|a, b| {
                (&a.entry.key, std::cmp::Reverse(a.entry.version))
                    .cmp(&(&b.entry.key, std::cmp::Reverse(b.entry.version)))
            });
            Ok(out)
        }))
    }

    fn import_history(
        &self,
        alias: AgentAlias,
        versions: Vec<MemoryVersion>,
    ) -> MemFuture<'_, u64> {
        Box::pin(async move {
            let agent = AgentId(alias.to_string());
            let mut added = 0;
            for v in versions {
                if v.state == VersionState::Current {
                    continue;
                }
                let vector = self
                    .vector_of(format!("{}\n{}", v.entry.key, v.entry.content))
                    .await?;
                let agent = agent.clone();
                let done = self
                    .run(move |h| {
                        h.ensure(Some(vector.len()))?;
                        let _lock = h.lock_writes()?;
                        let present = h.versions(&agent, &v.entry.key)?.iter().any(|r| {
                            r.state != VersionState::Current && r.entry.version == v.entry.version
                        });
                        if present {
                            return Ok(false);
                        }
                        let mut p = payload(&agent, &v.entry);
                        p["state"] = json!(v.state.as_str());
                        p["archived_at"] = json!(micros(v.archived_at.unwrap_or_else(now)));
                        let point = uuid::Uuid::new_v4().to_string();
                        h.points(
                            "",
                            json!({ "points": [ { "id": point, "vector": vector, "payload": p } ] }),
                        )?;
                        Ok(true)
                    })
                    .await?;
                added += u64::from(done);
            }
            Ok(added)
        })
    }

    fn import_agent(&self, alias: AgentAlias, entries: Vec<MemoryEntry>) -> MemFuture<'_, u64> {
        Box::pin(async move {
            let agent = AgentId(alias.to_string());
            let keep = self.history;
            let mut inserted = 0;
            for mut e in entries {
                let vector = self.vector_of(format!("{}\n{}", e.key, e.content)).await?;
                let agent = agent.clone();
                let added = self
                    .run(move |h| {
                        h.ensure(Some(vector.len()))?;
                        let _lock = h.lock_writes()?;
                        if h.current(&agent, &e.key)?.is_some() {
                            return Ok(false);
                        }
                        e.version = e.version.max(1);
                        write(h, &agent, &e, &vector, keep)?;
                        Ok(true)
                    })
                    .await?;
                inserted += u64::from(added);
            }
            Ok(inserted)
        })
    }
}
