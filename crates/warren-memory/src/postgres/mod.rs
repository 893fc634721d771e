//! The PostgreSQL memory store (MEM-2): the same two tables as SQLite, `agents` and `memories`
//! (`agent_id UUID NOT NULL REFERENCES agents(id)`, `UNIQUE (agent_id, key)`), in the
//! configured schema, with a generated `tsvector` column and a GIN index for keyword recall
//! and vectors kept as `real[]` (loaded once per agent into the same in-memory index as SQLite
//! for hybrid recall).
//!
//! The scope predicate is part of the `WHERE` before `LIMIT`, as in SQLite. The connection is
//! made on first use and re-made after it drops, so a server that is down fails memory calls
//! with an error naming the URL (without its password) while the agent keeps working.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::Client;
use tokio_postgres::types::ToSql;
use uuid::Uuid;
use warren_config::schema::MemoryBackendKind;
use warren_core::AgentAlias;

use crate::entry::{
    AgentId, DEFAULT_HISTORY_VERSIONS, ListQuery, MemoryEntry, MemoryVersion, NewEntry, Provenance,
    RecallHit, RecallQuery, ScopeRule, VersionState, now,
};
use crate::error::{MemoryError, redact_url};
use crate::hybrid::{self, VectorIndex};
use crate::store::{MemFuture, MemoryStore};

mod connect;
mod rows;
mod vectors;
mod writes;

use rows::{VERSION_COLUMNS, big, limit_param};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Columns of an entry query over `t` (memories) joined with `a` (agents).
const ENTRY_COLUMNS: &str = "t.id, a.alias, t.key, t.content, t.category, t.session, t.created_at, t.updated_at, \
     t.version, t.trust, t.prov_agent, t.prov_session, t.prov_channel, t.prov_tool_call, \
     t.prov_receipt, t.seq";

/// How many columns [`ENTRY_COLUMNS`] selects (`t.seq` last).
const ENTRY_COLUMN_COUNT: usize = 16;

/// Provenance and version columns shared by `memories` and `memory_versions` (issue 20).
const PROVENANCE_COLUMNS: &str =
    "trust, prov_agent, prov_session, prov_channel, prov_tool_call, prov_receipt";

/// The install-wide PostgreSQL store.
pub struct PostgresStore {
    config: tokio_postgres::Config,
    display_url: String,
    schema: String,
    client: tokio::sync::Mutex<Option<Arc<Client>>>,
    /// Per-agent vectors for hybrid recall, loaded once per agent (as in SQLite).
    vectors: VectorIndex,
    /// The `vector_versions` value each cached agent's vectors reflect: a recall reloads an
    /// agent another process wrote since (see the trigger in the schema).
    versions: std::sync::Mutex<HashMap<AgentId, i64>>,
    vector_weight: f64,
    /// Earlier versions kept per key (`[memory] history_versions`).
    history_limit: u32,
    /// The connection versioned writes run their transactions on (one at a time per process;
    /// an advisory lock per key orders them across processes).
    writer: tokio::sync::Mutex<Option<Client>>,
}

type Param = Box<dyn ToSql + Sync + Send>;

impl PostgresStore {
    /// Checks the URL and schema name; does not connect.
    pub fn new(url: &str, schema: &str) -> Result<Self, MemoryError> {
        let display_url = redact_url(url);
        let err = |message: String| MemoryError::Postgres {
            url: display_url.clone(),
            schema: schema.to_string(),
            message,
        };
        let valid_schema = !schema.is_empty()
            && schema.len() <= 63
            && schema.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            && schema
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !valid_schema {
            return Err(err(
                "memory.postgres.schema must be 1-63 characters of a-z, 0-9 and _, not starting with a digit".into(),
            ));
        }
        let mut config: tokio_postgres::Config = url
            .parse()
            .map_err(|_| err("memory.postgres.url is not a valid PostgreSQL URL".into()))?;
        config.connect_timeout(CONNECT_TIMEOUT);
        Ok(Self {
            config,
            display_url,
            schema: schema.to_string(),
            client: tokio::sync::Mutex::new(None),
            vectors: VectorIndex::default(),
            versions: std::sync::Mutex::new(HashMap::new()),
            vector_weight: hybrid::DEFAULT_VECTOR_WEIGHT,
            history_limit: DEFAULT_HISTORY_VERSIONS,
            writer: tokio::sync::Mutex::new(None),
        })
    }

    /// How many earlier versions of each key are kept (`[memory] history_versions`).
    pub fn with_history_limit(mut self, versions: u32) -> Self {
        self.history_limit = versions;
        self
    }

    /// The writer connection, (re)made when absent or closed; the schema exists after it.
    async fn writer(&self) -> Result<tokio::sync::MutexGuard<'_, Option<Client>>, MemoryError> {
        self.client().await?;
        let mut guard = self.writer.lock().await;
        if guard.as_ref().is_none_or(Client::is_closed) {
            *guard = Some(self.fresh().await?);
        }
        Ok(guard)
    }

    /// Weight of the vector score in hybrid recall (0..=1; the keyword score gets the rest).
    pub fn with_vector_weight(mut self, weight: f64) -> Self {
        self.vector_weight = weight.clamp(0.0, 1.0);
        self
    }

    pub fn schema(&self) -> &str {
        &self.schema
    }

    fn err(&self, e: impl std::fmt::Display) -> MemoryError {
        MemoryError::Postgres {
            url: self.display_url.clone(),
            schema: self.schema.clone(),
            message: e.to_string(),
        }
    }

    fn pg(&self, e: tokio_postgres::Error) -> MemoryError {
        // `{:#}`-style detail: the server's message is in the source, not the top error.
        let detail = match e.as_db_error() {
            Some(db) => db.message().to_string(),
            None => match std::error::Error::source(&e) {
                Some(src) => format!("{e}: {src}"),
                None => e.to_string(),
            },
        };
        self.err(detail)
    }

    /// Registered aliases with their backend name and row count (MEM-9 probe, CLI).
    pub async fn registered_agents(&self) -> Result<Vec<(String, String, u64)>, MemoryError> {
        let s = &self.schema;
        let rows = self
            .query(
                &format!(
                    r#"SELECT a.alias, a.backend, (SELECT COUNT(*) FROM "{s}".memories m WHERE m.agent_id = a.id)
                       FROM "{s}".agents a ORDER BY a.alias"#
                ),
                &[],
            )
            .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get(0).map_err(|e| self.pg(e))?,
                    r.try_get(1).map_err(|e| self.pg(e))?,
                    u64::try_from(r.try_get::<_, i64>(2).map_err(|e| self.pg(e))?).unwrap_or(0),
                ))
            })
            .collect()
    }

    /// [`Self::registered_agents`] without creating anything: a schema or table that does not
    /// exist has no agents (MEM-9 probe).
    pub async fn probe_registered(&self) -> Result<Vec<(String, String, u64)>, MemoryError> {
        let client = self.fresh().await?;
        let table = format!(r#""{}".agents"#, self.schema);
        let exists = client
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
            .await
            .and_then(|r| r.try_get::<_, bool>(0))
            .map_err(|e| self.pg(e))?;
        if !exists {
            return Ok(Vec::new());
        }
        self.registered_agents().await
    }

    /// Drops the schema and everything in it (tests and `warren memory` maintenance).
    pub async fn drop_schema(&self) -> Result<(), MemoryError> {
        let client = self.client().await?;
        client
            .batch_execute(&format!(
                r#"DROP SCHEMA IF EXISTS "{}" CASCADE"#,
                self.schema
            ))
            .await
            .map_err(|e| self.pg(e))?;
        *self.client.lock().await = None;
        Ok(())
    }
}

impl MemoryStore for PostgresStore {
    fn kind(&self) -> MemoryBackendKind {
        MemoryBackendKind::Postgres
    }

    fn location(&self) -> String {
        format!("{} (schema {})", self.display_url, self.schema)
    }

    fn agent_id(&self, alias: &AgentAlias, create: bool) -> MemFuture<'_, Option<AgentId>> {
        let alias = alias.to_string();
        Box::pin(async move {
            let s = &self.schema;
            let find = format!(r#"SELECT id FROM "{s}".agents WHERE alias = $1"#);
            let rows = self.query(&find, &[Box::new(alias.clone())]).await?;
            if let Some(r) = rows.first() {
                return Ok(Some(AgentId(
                    r.try_get::<_, Uuid>(0).map_err(|e| self.pg(e))?.to_string(),
                )));
            }
            if !create {
                return Ok(None);
            }
            self.query(
                &format!(
                    r#"INSERT INTO "{s}".agents (id, alias, backend, created_at) VALUES ($1, $2, 'postgres', $3)
                       ON CONFLICT (alias) DO NOTHING"#
                ),
                &[Box::new(Uuid::new_v4()), Box::new(alias.clone()), Box::new(now())],
            )
            .await?;
            let rows = self.query(&find, &[Box::new(alias)]).await?;
            rows.first()
                .map(|r| {
                    r.try_get::<_, Uuid>(0)
                        .map(|u| AgentId(u.to_string()))
                        .map_err(|e| self.pg(e))
                })
                .transpose()
        })
    }

    fn store_with_agent(&self, agent: AgentId, entry: NewEntry) -> MemFuture<'_, MemoryEntry> {
        Box::pin(self.store_entry(agent, entry))
    }

    fn get_for_agent(&self, agent: AgentId, key: String) -> MemFuture<'_, Option<MemoryEntry>> {
        Box::pin(async move {
            Ok(self
                .entries(
                    "WHERE t.agent_id = $1 AND t.key = $2",
                    &[Box::new(self.uuid(&agent)?), Box::new(key)],
                )
                .await?
                .pop())
        })
    }

    fn recall_for_agents(
        &self,
        scope: Vec<ScopeRule>,
        query: RecallQuery,
        query_vector: Option<Vec<f32>>,
    ) -> MemFuture<'_, Vec<RecallHit>> {
        Box::pin(async move {
            if scope.is_empty() {
                return Ok(Vec::new());
            }
            if query.is_recent() {
                let mut params: Vec<Param> = Vec::new();
                let pred = self.predicate(&mut params, &scope, &query)?;
                params.push(limit_param(query.limit));
                let tail = format!(
                    "WHERE {pred} ORDER BY t.updated_at DESC, t.seq DESC LIMIT ${}",
                    params.len()
                );
                let rows = self.entries(&tail, &params).await?;
                return Ok(rows
                    .into_iter()
                    .map(|entry| RecallHit { entry, score: 1.0 })
                    .collect());
            }
            let Some(qv) = query_vector else {
                let hits = self.keyword(&scope, &query, query.limit).await?;
                return Ok(hybrid::keyword_only(hits));
            };
            let wide = query.limit.saturating_mul(2);
            let keyword = self.keyword(&scope, &query, wide).await?;
            self.load_vectors(&scope).await?;
            let nearest = self.vectors.nearest(&scope, &query, &qv, wide);
            let missing: Vec<i64> = nearest
                .iter()
                .map(|(seq, _)| *seq)
                .filter(|seq| !keyword.iter().any(|(k, _, _)| k == seq))
                .collect();
            let mut extra = std::collections::HashMap::new();
            if !missing.is_empty() {
                let s = &self.schema;
                let rows = self
                    .query(
                        &format!(
                            r#"SELECT {ENTRY_COLUMNS} FROM "{s}".memories t
                               JOIN "{s}".agents a ON a.id = t.agent_id WHERE t.seq = ANY($1)"#
                        ),
                        &[Box::new(missing)],
                    )
                    .await?;
                for r in &rows {
                    let seq: i64 = r.try_get(ENTRY_COLUMN_COUNT - 1).map_err(|e| self.pg(e))?;
                    extra.insert(seq, self.entry(r)?);
                }
            }
            Ok(hybrid::merge(
                keyword,
                nearest,
                extra,
                self.vector_weight,
                query.limit,
            ))
        })
    }

    fn list_for_agent(&self, agent: AgentId, query: ListQuery) -> MemFuture<'_, Vec<MemoryEntry>> {
        Box::pin(async move {
            let mut params: Vec<Param> = vec![Box::new(self.uuid(&agent)?)];
            let mut tail = "WHERE t.agent_id = $1".to_string();
            if let Some(c) = query.category {
                params.push(Box::new(c));
                tail.push_str(" AND t.category = $2");
            }
            params.push(limit_param(query.limit));
            params.push(limit_param(query.offset));
            tail.push_str(&format!(
                " ORDER BY t.updated_at DESC, t.seq DESC LIMIT ${} OFFSET ${}",
                params.len() - 1,
                params.len()
            ));
            self.entries(&tail, &params).await
        })
    }

    fn forget_for_agent(&self, agent: AgentId, key: String) -> MemFuture<'_, bool> {
        Box::pin(async move {
            let s = &self.schema;
            let id = self.uuid(&agent)?;
            let mut guard = self.writer().await?;
            let client = guard
                .as_mut()
                .ok_or_else(|| self.err("no writer connection"))?;
            let tx = client.transaction().await.map_err(|e| self.pg(e))?;
            let Some((seq, _)) = self.lock_key(&tx, id, &key).await? else {
                tx.rollback().await.map_err(|e| self.pg(e))?;
                return Ok(false);
            };
            self.archive(&tx, seq, VersionState::Forgotten, now())
                .await?;
            tx.execute(
                &format!(r#"DELETE FROM "{s}".memories WHERE seq = $1"#),
                &[&seq],
            )
            .await
            .map_err(|e| self.pg(e))?;
            self.prune(&tx, id, &key).await?;
            tx.commit().await.map_err(|e| self.pg(e))?;
            drop(guard);
            self.own_write(&agent, || self.vectors.update(&agent, seq, None))
                .await?;
            Ok(true)
        })
    }

    fn count_for_agent(&self, agent: AgentId) -> MemFuture<'_, u64> {
        Box::pin(async move {
            let s = &self.schema;
            let rows = self
                .query(
                    &format!(r#"SELECT COUNT(*) FROM "{s}".memories WHERE agent_id = $1"#),
                    &[Box::new(self.uuid(&agent)?)],
                )
                .await?;
            let n: i64 = rows
                .first()
                .map(|r| r.try_get(0))
                .transpose()
                .map_err(|e| self.pg(e))?
                .unwrap_or(0);
            Ok(u64::try_from(n).unwrap_or(0))
        })
    }

    fn export_agent(&self, agent: AgentId) -> MemFuture<'_, Vec<MemoryEntry>> {
        Box::pin(async move {
            self.entries(
                "WHERE t.agent_id = $1 ORDER BY t.created_at, t.seq",
                &[Box::new(self.uuid(&agent)?)],
            )
            .await
        })
    }

    fn purge_agent(&self, agent: AgentId) -> MemFuture<'_, u64> {
        Box::pin(async move {
            let s = &self.schema;
            let id = self.uuid(&agent)?;
            self.client().await?;
            let mut client = self.fresh().await?;
            let tx = client.transaction().await.map_err(|e| self.pg(e))?;
            let n = tx
                .execute(
                    &format!(r#"DELETE FROM "{s}".memories WHERE agent_id = $1"#),
                    &[&id],
                )
                .await
                .map_err(|e| self.pg(e))?;
            tx.execute(
                &format!(r#"DELETE FROM "{s}".memory_versions WHERE agent_id = $1"#),
                &[&id],
            )
            .await
            .map_err(|e| self.pg(e))?;
            tx.execute(
                &format!(r#"DELETE FROM "{s}".agents WHERE id = $1"#),
                &[&id],
            )
            .await
            .map_err(|e| self.pg(e))?;
            tx.commit().await.map_err(|e| self.pg(e))?;
            self.vectors.forget_agent(&agent);
            self.known().remove(&agent);
            Ok(n)
        })
    }

    fn set_embedder_identity(&self, identity: String) -> MemFuture<'_, bool> {
        Box::pin(async move {
            let s = &self.schema;
            self.client().await?;
            let mut client = self.fresh().await?;
            let tx = client.transaction().await.map_err(|e| self.pg(e))?;
            let old: Option<String> = tx
                .query_opt(
                    &format!(r#"SELECT value FROM "{s}".meta WHERE key = 'embedder' FOR UPDATE"#),
                    &[],
                )
                .await
                .map_err(|e| self.pg(e))?
                .map(|r| r.try_get(0))
                .transpose()
                .map_err(|e| self.pg(e))?;
            if old.as_deref() == Some(identity.as_str()) {
                return Ok(false);
            }
            let changed = old.is_some();
            if changed {
                tx.execute(
                    &format!(
                        r#"UPDATE "{s}".memories SET embedding = NULL WHERE embedding IS NOT NULL"#
                    ),
                    &[],
                )
                .await
                .map_err(|e| self.pg(e))?;
            }
            tx.execute(
                &format!(
                    r#"INSERT INTO "{s}".meta (key, value) VALUES ('embedder', $1)
                       ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"#
                ),
                &[&identity],
            )
            .await
            .map_err(|e| self.pg(e))?;
            tx.commit().await.map_err(|e| self.pg(e))?;
            if changed {
                self.vectors.clear();
                self.known().clear();
            }
            Ok(changed)
        })
    }

    fn import_agent(&self, alias: AgentAlias, rows: Vec<MemoryEntry>) -> MemFuture<'_, u64> {
        Box::pin(async move {
            let s = &self.schema;
            self.client().await?;
            let mut client = self.fresh().await?;
            let tx = client.transaction().await.map_err(|e| self.pg(e))?;
            let agent = self.agent_in(&tx, &alias).await?;
            let insert = tx
                .prepare(&format!(
                    r#"INSERT INTO "{s}".memories (id, agent_id, key, content, category, session, created_at,
                         updated_at, version, {PROVENANCE_COLUMNS})
                       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
                       ON CONFLICT DO NOTHING"#
                ))
                .await
                .map_err(|e| self.pg(e))?;
            let mut inserted = 0u64;
            for e in &rows {
                let id = Uuid::parse_str(&e.id).unwrap_or_else(|_| Uuid::new_v4());
                let p = e.provenance.clone().sanitized();
                inserted += tx
                    .execute(
                        &insert,
                        &[
                            &id,
                            &agent,
                            &e.key,
                            &e.content,
                            &e.category,
                            &e.session,
                            &e.created_at,
                            &e.updated_at,
                            // Archives from before versions existed carry none: version 1.
                            &big(e.version.max(1)),
                            &p.trust.as_str(),
                            &p.agent,
                            &p.session,
                            &p.channel,
                            &p.tool_call,
                            &p.receipt,
                        ],
                    )
                    .await
                    .map_err(|e| self.pg(e))?;
            }
            tx.commit().await.map_err(|e| self.pg(e))?;
            Ok(inserted)
        })
    }

    fn history_for_agent(&self, agent: AgentId, key: String) -> MemFuture<'_, Vec<MemoryVersion>> {
        Box::pin(async move {
            let id = self.uuid(&agent)?;
            let mut out: Vec<MemoryVersion> = self
                .entries(
                    "WHERE t.agent_id = $1 AND t.key = $2",
                    &[Box::new(id), Box::new(key.clone())],
                )
                .await?
                .into_iter()
                .map(|entry| MemoryVersion {
                    entry,
                    state: VersionState::Current,
                    archived_at: None,
                })
                .collect();
            out.extend(self.kept(id, Some(key)).await?);
            Ok(out)
        })
    }

    fn undo_for_agent(
        &self,
        agent: AgentId,
        key: String,
        to: Option<u64>,
    ) -> MemFuture<'_, MemoryEntry> {
        Box::pin(self.undo(agent, key, to))
    }

    fn attach_receipt(
        &self,
        agent: AgentId,
        key: String,
        version: u64,
        receipt: String,
    ) -> MemFuture<'_, bool> {
        Box::pin(async move {
            let s = &self.schema;
            let receipt = Provenance {
                receipt: Some(receipt),
                ..Provenance::default()
            }
            .sanitized()
            .receipt;
            let Some(receipt) = receipt else {
                return Ok(false);
            };
            let rows = self
                .query(
                    &format!(
                        r#"WITH live AS (
                             UPDATE "{s}".memories SET prov_receipt = $4 WHERE agent_id = $1
                               AND key = $2 AND version = $3 AND prov_receipt IS NULL RETURNING 1),
                           kept AS (
                             UPDATE "{s}".memory_versions SET prov_receipt = $4 WHERE agent_id = $1
                               AND key = $2 AND version = $3 AND prov_receipt IS NULL RETURNING 1)
                           SELECT (SELECT COUNT(*) FROM live) + (SELECT COUNT(*) FROM kept)"#
                    ),
                    &[
                        Box::new(self.uuid(&agent)?),
                        Box::new(key),
                        Box::new(big(version)),
                        Box::new(receipt),
                    ],
                )
                .await?;
            let n: i64 = rows
                .first()
                .map(|r| r.try_get(0))
                .transpose()
                .map_err(|e| self.pg(e))?
                .unwrap_or(0);
            Ok(n > 0)
        })
    }

    fn export_history(&self, agent: AgentId) -> MemFuture<'_, Vec<MemoryVersion>> {
        Box::pin(async move { self.kept(self.uuid(&agent)?, None).await })
    }

    fn import_history(
        &self,
        alias: AgentAlias,
        versions: Vec<MemoryVersion>,
    ) -> MemFuture<'_, u64> {
        Box::pin(async move {
            let s = &self.schema;
            self.client().await?;
            let mut client = self.fresh().await?;
            let tx = client.transaction().await.map_err(|e| self.pg(e))?;
            let agent = self.agent_in(&tx, &alias).await?;
            let insert = tx
                .prepare(&format!(
                    r#"INSERT INTO "{s}".memory_versions (agent_id, key, version, id, content, category,
                         session, created_at, updated_at, {PROVENANCE_COLUMNS}, state, archived_at)
                       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
                       ON CONFLICT DO NOTHING"#
                ))
                .await
                .map_err(|e| self.pg(e))?;
            let mut inserted = 0u64;
            for v in versions.iter().filter(|v| v.state != VersionState::Current) {
                let e = &v.entry;
                let p = e.provenance.clone().sanitized();
                let id = Uuid::parse_str(&e.id).unwrap_or_else(|_| Uuid::new_v4());
                inserted += tx
                    .execute(
                        &insert,
                        &[
                            &agent,
                            &e.key,
                            &big(e.version),
                            &id,
                            &e.content,
                            &e.category,
                            &e.session,
                            &e.created_at,
                            &e.updated_at,
                            &p.trust.as_str(),
                            &p.agent,
                            &p.session,
                            &p.channel,
                            &p.tool_call,
                            &p.receipt,
                            &v.state.as_str(),
                            &v.archived_at.unwrap_or(e.updated_at),
                        ],
                    )
                    .await
                    .map_err(|e| self.pg(e))?;
            }
            tx.commit().await.map_err(|e| self.pg(e))?;
            Ok(inserted)
        })
    }

    fn rename_agent(&self, from: AgentAlias, to: AgentAlias) -> MemFuture<'_, bool> {
        Box::pin(async move {
            let s = &self.schema;
            self.client().await?;
            let mut client = self.fresh().await?;
            let tx = client.transaction().await.map_err(|e| self.pg(e))?;
            // Serialise renames: both alias rows are read and changed under this lock.
            tx.batch_execute(&format!(
                r#"LOCK TABLE "{s}".agents IN SHARE ROW EXCLUSIVE MODE"#
            ))
            .await
            .map_err(|e| self.pg(e))?;
            let from_id: Option<Uuid> = tx
                .query_opt(
                    &format!(r#"SELECT id FROM "{s}".agents WHERE alias = $1"#),
                    &[&from.as_str()],
                )
                .await
                .map_err(|e| self.pg(e))?
                .map(|r| r.try_get(0))
                .transpose()
                .map_err(|e| self.pg(e))?;
            let Some(from_id) = from_id else {
                return Ok(false);
            };
            let to_row = tx
                .query_opt(
                    &format!(
                        r#"SELECT a.id, (SELECT COUNT(*) FROM "{s}".memories m WHERE m.agent_id = a.id)
                             + (SELECT COUNT(*) FROM "{s}".memory_versions v WHERE v.agent_id = a.id)
                           FROM "{s}".agents a WHERE a.alias = $1"#
                    ),
                    &[&to.as_str()],
                )
                .await
                .map_err(|e| self.pg(e))?;
            if let Some(r) = to_row {
                let to_id: Uuid = r.try_get(0).map_err(|e| self.pg(e))?;
                let rows: i64 = r.try_get(1).map_err(|e| self.pg(e))?;
                if rows > 0 {
                    return Err(MemoryError::Lifecycle {
                        agent: from.to_string(),
                        message: format!(
                            "cannot rename to '{to}': '{to}' already owns {rows} memory rows and earlier versions in {}",
                            self.location()
                        ),
                    });
                }
                tx.execute(
                    &format!(r#"DELETE FROM "{s}".agents WHERE id = $1"#),
                    &[&to_id],
                )
                .await
                .map_err(|e| self.pg(e))?;
            }
            tx.execute(
                &format!(r#"UPDATE "{s}".agents SET alias = $1 WHERE id = $2"#),
                &[&to.as_str(), &from_id],
            )
            .await
            .map_err(|e| self.pg(e))?;
            tx.commit().await.map_err(|e| self.pg(e))?;
            Ok(true)
        })
    }
}
