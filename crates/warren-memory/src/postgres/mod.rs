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

use time::OffsetDateTime;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls, Row, Transaction};
use uuid::Uuid;
use warren_config::schema::MemoryBackendKind;
use warren_core::AgentAlias;

use crate::entry::{
    AgentId, DEFAULT_HISTORY_VERSIONS, ListQuery, MemoryEntry, MemoryVersion, NewEntry, Provenance,
    RecallHit, RecallQuery, ScopeRule, Trust, VersionState, now,
};
use crate::error::{MemoryError, redact_url};
use crate::fts;
use crate::hybrid::{self, VecRow, VectorIndex};
use crate::sqlite::micros;
use crate::store::{MemFuture, MemoryStore};

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

    /// Scoped keyword recall: `(seq, entry, rank)` best first.
    async fn keyword(
        &self,
        scope: &[ScopeRule],
        query: &RecallQuery,
        limit: usize,
    ) -> Result<Vec<(i64, MemoryEntry, f64)>, MemoryError> {
        let s = &self.schema;
        let words = fts::words(&scope[0].agent.0, &query.text)?;
        let mut params: Vec<Param> = vec![Box::new(fts::pg_tsquery(&words))];
        let pred = self.predicate(&mut params, scope, query)?;
        params.push(limit_param(limit));
        let sql = format!(
            r#"SELECT {ENTRY_COLUMNS}, ts_rank_cd(t.tsv, q)::float8 AS score
               FROM "{s}".memories t JOIN "{s}".agents a ON a.id = t.agent_id,
                    to_tsquery('simple', $1) q
               WHERE t.tsv @@ q AND {pred}
               ORDER BY score DESC, t.seq LIMIT ${}"#,
            params.len()
        );
        let rows = self.query(&sql, &params).await?;
        let mut hits = Vec::with_capacity(rows.len());
        for r in &rows {
            let score: f64 = r.try_get(ENTRY_COLUMN_COUNT).map_err(|e| self.pg(e))?;
            let seq: i64 = r.try_get(ENTRY_COLUMN_COUNT - 1).map_err(|e| self.pg(e))?;
            hits.push((seq, self.entry(r)?, score));
        }
        Ok(hits)
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<AgentId, i64>> {
        self.versions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current `vector_versions` of `agents` (0 for an agent never written).
    async fn current_versions(&self, agents: &[&AgentId]) -> Result<Vec<i64>, MemoryError> {
        let s = &self.schema;
        let ids: Vec<Uuid> = agents
            .iter()
            .map(|a| self.uuid(a))
            .collect::<Result<_, _>>()?;
        let rows = self
            .query(
                &format!(
                    r#"SELECT agent_id, version FROM "{s}".vector_versions
                       WHERE agent_id = ANY($1)"#
                ),
                &[Box::new(ids.clone())],
            )
            .await?;
        let mut found: HashMap<Uuid, i64> = HashMap::new();
        for r in &rows {
            found.insert(
                r.try_get(0).map_err(|e| self.pg(e))?,
                r.try_get(1).map_err(|e| self.pg(e))?,
            );
        }
        Ok(ids
            .iter()
            .map(|id| found.get(id).copied().unwrap_or(0))
            .collect())
    }

    /// After this process's own write to `agent`: the cache applies it in place only if the
    /// agent's version moved by exactly this write; otherwise another process wrote too and the
    /// agent is reloaded at the next recall.
    async fn own_write(&self, agent: &AgentId, apply: impl FnOnce()) -> Result<(), MemoryError> {
        if !self.known().contains_key(agent) {
            return Ok(());
        }
        let new = self.current_versions(&[agent]).await?[0];
        let mut known = self.known();
        match known.get(agent) {
            Some(&k) if k + 1 == new => {
                apply();
                known.insert(agent.clone(), new);
            }
            _ => {
                self.vectors.forget_agent(agent);
                known.remove(agent);
            }
        }
        Ok(())
    }

    /// Loads the stored vectors of scope agents the index does not hold yet, and reloads those
    /// another process wrote since they were loaded (one query for the versions).
    async fn load_vectors(&self, scope: &[ScopeRule]) -> Result<(), MemoryError> {
        let s = &self.schema;
        let agents: Vec<&AgentId> = scope.iter().map(|r| &r.agent).collect();
        // Versions first: a write landing before the rows are read makes the version stale, so
        // the next recall reloads (never the other way round).
        let current = self.current_versions(&agents).await?;
        for (rule, version) in scope.iter().zip(current) {
            if self.vectors.has(&rule.agent) {
                if self.known().get(&rule.agent) == Some(&version) {
                    continue;
                }
                self.vectors.forget_agent(&rule.agent);
            }
            let rows = self
                .query(
                    &format!(
                        r#"SELECT seq, category, session, created_at, embedding FROM "{s}".memories
                           WHERE agent_id = $1 AND embedding IS NOT NULL"#
                    ),
                    &[Box::new(self.uuid(&rule.agent)?)],
                )
                .await?;
            let mut loaded = Vec::with_capacity(rows.len());
            for r in &rows {
                let get = || -> Result<Option<(i64, VecRow)>, tokio_postgres::Error> {
                    let seq: i64 = r.try_get(0)?;
                    let v: Vec<f32> = r.try_get(4)?;
                    let created: OffsetDateTime = r.try_get(3)?;
                    Ok(
                        VecRow::new(r.try_get(1)?, r.try_get(2)?, micros(created), &v)
                            .map(|row| (seq, row)),
                    )
                };
                if let Some(pair) = get().map_err(|e| self.pg(e))? {
                    loaded.push(pair);
                }
            }
            self.vectors.load(rule.agent.clone(), loaded.into_iter());
            self.known().insert(rule.agent.clone(), version);
        }
        Ok(())
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

    /// The live client, connecting (and creating the schema) when there is none.
    async fn client(&self) -> Result<Arc<Client>, MemoryError> {
        let mut guard = self.client.lock().await;
        if let Some(c) = guard.as_ref()
            && !c.is_closed()
        {
            return Ok(Arc::clone(c));
        }
        let client = self.fresh().await?;
        let s = &self.schema;
        client
            .batch_execute(&format!(
                r#"BEGIN;
                SELECT pg_advisory_xact_lock(hashtext('warren-memory-schema'));
                CREATE SCHEMA IF NOT EXISTS "{s}";
                CREATE TABLE IF NOT EXISTS "{s}".agents (
                    id          UUID PRIMARY KEY,
                    alias       TEXT NOT NULL UNIQUE,
                    backend     TEXT NOT NULL,
                    created_at  TIMESTAMPTZ NOT NULL
                );
                CREATE TABLE IF NOT EXISTS "{s}".memories (
                    seq         BIGSERIAL PRIMARY KEY,
                    id          UUID NOT NULL UNIQUE,
                    agent_id    UUID NOT NULL REFERENCES "{s}".agents(id),
                    key         TEXT NOT NULL,
                    content     TEXT NOT NULL,
                    category    TEXT NOT NULL,
                    session     TEXT,
                    created_at  TIMESTAMPTZ NOT NULL,
                    updated_at  TIMESTAMPTZ NOT NULL,
                    embedding   REAL[],
                    tsv         TSVECTOR GENERATED ALWAYS AS
                                  (to_tsvector('simple', key || ' ' || content)) STORED,
                    UNIQUE (agent_id, key)
                );
                CREATE TABLE IF NOT EXISTS "{s}".meta (
                    key         TEXT PRIMARY KEY,
                    value       TEXT NOT NULL
                );
                -- Per-agent write counter bumped by a trigger in the writing transaction, so
                -- each process's cached vectors can tell writes made by other processes.
                CREATE TABLE IF NOT EXISTS "{s}".vector_versions (
                    agent_id    UUID PRIMARY KEY,
                    version     BIGINT NOT NULL
                );
                CREATE OR REPLACE FUNCTION "{s}".bump_vector_version() RETURNS trigger
                LANGUAGE plpgsql AS $fn$
                BEGIN
                    IF TG_OP <> 'DELETE' THEN
                        INSERT INTO "{s}".vector_versions AS v (agent_id, version)
                            VALUES (NEW.agent_id, 1)
                            ON CONFLICT (agent_id) DO UPDATE SET version = v.version + 1;
                    END IF;
                    IF TG_OP = 'DELETE'
                        OR (TG_OP = 'UPDATE' AND OLD.agent_id IS DISTINCT FROM NEW.agent_id) THEN
                        INSERT INTO "{s}".vector_versions AS v (agent_id, version)
                            VALUES (OLD.agent_id, 1)
                            ON CONFLICT (agent_id) DO UPDATE SET version = v.version + 1;
                    END IF;
                    RETURN NULL;
                END
                $fn$;
                DO $do$
                BEGIN
                    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                                   WHERE tgname = 'memories_vector_version'
                                     AND tgrelid = '"{s}".memories'::regclass) THEN
                        CREATE TRIGGER memories_vector_version
                            AFTER INSERT OR UPDATE OR DELETE ON "{s}".memories
                            FOR EACH ROW EXECUTE FUNCTION "{s}".bump_vector_version();
                    END IF;
                END
                $do$;
                -- Version and provenance of each row (issue 20): added to existing tables,
                -- whose rows read as version 1 written with `agent` trust.
                ALTER TABLE "{s}".memories
                    ADD COLUMN IF NOT EXISTS version BIGINT NOT NULL DEFAULT 1,
                    ADD COLUMN IF NOT EXISTS trust TEXT NOT NULL DEFAULT 'agent',
                    ADD COLUMN IF NOT EXISTS prov_agent TEXT,
                    ADD COLUMN IF NOT EXISTS prov_session TEXT,
                    ADD COLUMN IF NOT EXISTS prov_channel TEXT,
                    ADD COLUMN IF NOT EXISTS prov_tool_call TEXT,
                    ADD COLUMN IF NOT EXISTS prov_receipt TEXT;
                -- Earlier versions of each key, newest `history_versions` per key.
                CREATE TABLE IF NOT EXISTS "{s}".memory_versions (
                    agent_id    UUID NOT NULL REFERENCES "{s}".agents(id),
                    key         TEXT NOT NULL,
                    version     BIGINT NOT NULL,
                    id          UUID NOT NULL,
                    content     TEXT NOT NULL,
                    category    TEXT NOT NULL,
                    session     TEXT,
                    created_at  TIMESTAMPTZ NOT NULL,
                    updated_at  TIMESTAMPTZ NOT NULL,
                    embedding   REAL[],
                    trust       TEXT NOT NULL,
                    prov_agent  TEXT,
                    prov_session TEXT,
                    prov_channel TEXT,
                    prov_tool_call TEXT,
                    prov_receipt TEXT,
                    state       TEXT NOT NULL,
                    archived_at TIMESTAMPTZ NOT NULL,
                    PRIMARY KEY (agent_id, key, version)
                );
                CREATE INDEX IF NOT EXISTS memories_tsv ON "{s}".memories USING GIN (tsv);
                CREATE INDEX IF NOT EXISTS memories_agent_updated
                    ON "{s}".memories (agent_id, updated_at);
                COMMIT;"#
            ))
            .await
            .map_err(|e| self.pg(e))?;
        let client = Arc::new(client);
        *guard = Some(Arc::clone(&client));
        Ok(client)
    }

    /// A new connection of its own (for transactions, which must not share the client).
    async fn fresh(&self) -> Result<Client, MemoryError> {
        let (client, connection) = self.config.connect(NoTls).await.map_err(|e| self.pg(e))?;
        let url = self.display_url.clone();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(url = %url, error = %e, "PostgreSQL memory connection closed");
            }
        });
        Ok(client)
    }

    async fn query(&self, sql: &str, params: &[Param]) -> Result<Vec<Row>, MemoryError> {
        let client = self.client().await?;
        let refs: Vec<&(dyn ToSql + Sync)> = params
            .iter()
            .map(|p| p.as_ref() as &(dyn ToSql + Sync))
            .collect();
        client.query(sql, &refs).await.map_err(|e| self.pg(e))
    }

    fn uuid(&self, agent: &AgentId) -> Result<Uuid, MemoryError> {
        Uuid::parse_str(&agent.0).map_err(|e| MemoryError::Corrupt {
            location: self.location(),
            message: format!("agent id {:?} is not a UUID: {e}", agent.0),
        })
    }

    fn entry(&self, r: &Row) -> Result<MemoryEntry, MemoryError> {
        let corrupt = |message: String| MemoryError::Corrupt {
            location: self.location(),
            message,
        };
        let agent = r
            .try_get::<_, String>(1)
            .map_err(|e| corrupt(e.to_string()))
            .and_then(|a| AgentAlias::new(a).map_err(|e| corrupt(e.to_string())))?;
        let get = || -> Result<(MemoryEntry, String), tokio_postgres::Error> {
            Ok((
                MemoryEntry {
                    id: r.try_get::<_, Uuid>(0)?.to_string(),
                    agent,
                    key: r.try_get(2)?,
                    content: r.try_get(3)?,
                    category: r.try_get(4)?,
                    session: r.try_get(5)?,
                    created_at: r.try_get::<_, OffsetDateTime>(6)?,
                    updated_at: r.try_get::<_, OffsetDateTime>(7)?,
                    version: u64::try_from(r.try_get::<_, i64>(8)?).unwrap_or(0),
                    provenance: Provenance {
                        trust: Trust::Agent,
                        agent: r.try_get(10)?,
                        session: r.try_get(11)?,
                        channel: r.try_get(12)?,
                        tool_call: r.try_get(13)?,
                        receipt: r.try_get(14)?,
                    },
                },
                r.try_get(9)?,
            ))
        };
        let (mut entry, trust) = get().map_err(|e| corrupt(e.to_string()))?;
        entry.provenance.trust = Trust::parse(&trust)
            .ok_or_else(|| corrupt(format!("unknown trust level {trust:?}")))?;
        Ok(entry)
    }

    /// A `memory_versions` row selected as [`VERSION_COLUMNS`].
    fn version(&self, r: &Row) -> Result<MemoryVersion, MemoryError> {
        let entry = self.entry(r)?;
        let corrupt = |message: String| MemoryError::Corrupt {
            location: self.location(),
            message,
        };
        let state: String = r
            .try_get(ENTRY_COLUMN_COUNT)
            .map_err(|e| corrupt(e.to_string()))?;
        let archived_at: OffsetDateTime = r
            .try_get(ENTRY_COLUMN_COUNT + 1)
            .map_err(|e| corrupt(e.to_string()))?;
        Ok(MemoryVersion {
            entry,
            state: VersionState::parse(&state)
                .ok_or_else(|| corrupt(format!("unknown version state {state:?}")))?,
            archived_at: Some(archived_at),
        })
    }

    async fn entries(&self, tail: &str, params: &[Param]) -> Result<Vec<MemoryEntry>, MemoryError> {
        let s = &self.schema;
        let sql = format!(
            r#"SELECT {ENTRY_COLUMNS} FROM "{s}".memories t JOIN "{s}".agents a ON a.id = t.agent_id {tail}"#
        );
        self.query(&sql, params)
            .await?
            .iter()
            .map(|r| self.entry(r))
            .collect()
    }

    /// `(scope) [AND session/window]` over `t`, appending to `params`.
    fn predicate(
        &self,
        params: &mut Vec<Param>,
        scope: &[ScopeRule],
        q: &RecallQuery,
    ) -> Result<String, MemoryError> {
        let mut parts = Vec::new();
        for rule in scope {
            params.push(Box::new(self.uuid(&rule.agent)?));
            let mut p = format!("(t.agent_id = ${}", params.len());
            if let Some(c) = &rule.categories {
                params.push(Box::new(c.clone()));
                p.push_str(&format!(" AND t.category = ANY(${})", params.len()));
            }
            p.push(')');
            parts.push(p);
        }
        let mut sql = if parts.is_empty() {
            "(FALSE)".to_string()
        } else {
            format!("({})", parts.join(" OR "))
        };
        if let Some(s) = &q.session {
            params.push(Box::new(s.clone()));
            sql.push_str(&format!(" AND t.session = ${}", params.len()));
        }
        if let Some(t) = q.since {
            params.push(Box::new(t));
            sql.push_str(&format!(" AND t.created_at >= ${}", params.len()));
        }
        if let Some(t) = q.until {
            params.push(Box::new(t));
            sql.push_str(&format!(" AND t.created_at <= ${}", params.len()));
        }
        Ok(sql)
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

/// A `memory_versions` row `v` (joined with `a`) in [`ENTRY_COLUMNS`] order, then state and
/// archived_at.
const VERSION_COLUMNS: &str = "v.id, a.alias, v.key, v.content, v.category, v.session, v.created_at, v.updated_at, \
     v.version, v.trust, v.prov_agent, v.prov_session, v.prov_channel, v.prov_tool_call, \
     v.prov_receipt, 0::BIGINT, v.state, v.archived_at";

fn big(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Versioned writes (issue 20 §4): each runs in one transaction on the writer connection that
/// first takes an advisory lock on the key, so writers of one key queue, in this process or
/// another, and every replaced version is archived.
impl PostgresStore {
    /// Takes the key's lock; the live row's seq and version.
    async fn lock_key(
        &self,
        tx: &Transaction<'_>,
        agent: Uuid,
        key: &str,
    ) -> Result<Option<(i64, u64)>, MemoryError> {
        let s = &self.schema;
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
            &[&format!("warren-memory/{s}/{agent}/{key}")],
        )
        .await
        .map_err(|e| self.pg(e))?;
        let row = tx
            .query_opt(
                &format!(
                    r#"SELECT seq, version FROM "{s}".memories WHERE agent_id = $1 AND key = $2"#
                ),
                &[&agent, &key],
            )
            .await
            .map_err(|e| self.pg(e))?;
        row.map(|r| {
            Ok((
                r.try_get(0).map_err(|e| self.pg(e))?,
                u64::try_from(r.try_get::<_, i64>(1).map_err(|e| self.pg(e))?).unwrap_or(0),
            ))
        })
        .transpose()
    }

    /// One above every version of the key still known (live or kept).
    async fn next_version(
        &self,
        tx: &Transaction<'_>,
        agent: Uuid,
        key: &str,
        current: u64,
    ) -> Result<u64, MemoryError> {
        let s = &self.schema;
        let kept: i64 = tx
            .query_one(
                &format!(
                    r#"SELECT COALESCE(MAX(version), 0)::BIGINT FROM "{s}".memory_versions
                       WHERE agent_id = $1 AND key = $2"#
                ),
                &[&agent, &key],
            )
            .await
            .and_then(|r| r.try_get(0))
            .map_err(|e| self.pg(e))?;
        Ok(current.max(u64::try_from(kept).unwrap_or(0)) + 1)
    }

    /// Copies the live row `seq` into the history as `state`.
    async fn archive(
        &self,
        tx: &Transaction<'_>,
        seq: i64,
        state: VersionState,
        at: OffsetDateTime,
    ) -> Result<(), MemoryError> {
        let s = &self.schema;
        tx.execute(
            &format!(
                r#"INSERT INTO "{s}".memory_versions (agent_id, key, version, id, content, category,
                     session, created_at, updated_at, embedding, {PROVENANCE_COLUMNS}, state, archived_at)
                   SELECT agent_id, key, version, id, content, category, session, created_at,
                     updated_at, embedding, {PROVENANCE_COLUMNS}, $2, $3
                   FROM "{s}".memories WHERE seq = $1"#
            ),
            &[&seq, &state.as_str(), &at],
        )
        .await
        .map_err(|e| self.pg(e))?;
        Ok(())
    }

    /// Keeps the newest `history_limit` kept versions of the key.
    async fn prune(&self, tx: &Transaction<'_>, agent: Uuid, key: &str) -> Result<(), MemoryError> {
        let s = &self.schema;
        tx.execute(
            &format!(
                r#"DELETE FROM "{s}".memory_versions WHERE agent_id = $1 AND key = $2 AND version <=
                     (SELECT version FROM "{s}".memory_versions WHERE agent_id = $1 AND key = $2
                      ORDER BY version DESC OFFSET $3 LIMIT 1)"#
            ),
            &[&agent, &key, &i64::from(self.history_limit)],
        )
        .await
        .map_err(|e| self.pg(e))?;
        Ok(())
    }

    /// The id of the agent called `alias`, registered inside `tx` when it is not there yet
    /// (an import into a store that has not seen the agent).
    async fn agent_in(
        &self,
        tx: &Transaction<'_>,
        alias: &AgentAlias,
    ) -> Result<Uuid, MemoryError> {
        let s = &self.schema;
        tx.execute(
            &format!(
                r#"INSERT INTO "{s}".agents (id, alias, backend, created_at) VALUES ($1, $2, 'postgres', $3)
                   ON CONFLICT (alias) DO NOTHING"#
            ),
            &[&Uuid::new_v4(), &alias.as_str(), &now()],
        )
        .await
        .map_err(|e| self.pg(e))?;
        tx.query_one(
            &format!(r#"SELECT id FROM "{s}".agents WHERE alias = $1"#),
            &[&alias.as_str()],
        )
        .await
        .and_then(|r| r.try_get(0))
        .map_err(|e| self.pg(e))
    }

    async fn alias_in(&self, tx: &Transaction<'_>, agent: Uuid) -> Result<String, MemoryError> {
        let s = &self.schema;
        let row = tx
            .query_opt(
                &format!(r#"SELECT alias FROM "{s}".agents WHERE id = $1"#),
                &[&agent],
            )
            .await
            .map_err(|e| self.pg(e))?;
        Ok(match row {
            Some(r) => r.try_get(0).map_err(|e| self.pg(e))?,
            None => agent.to_string(),
        })
    }

    /// The live entry of the key and its seq, read inside `tx`.
    async fn live_in(
        &self,
        tx: &Transaction<'_>,
        agent: Uuid,
        key: &str,
    ) -> Result<(i64, MemoryEntry), MemoryError> {
        let s = &self.schema;
        let rows = tx
            .query(
                &format!(
                    r#"SELECT {ENTRY_COLUMNS} FROM "{s}".memories t JOIN "{s}".agents a ON a.id = t.agent_id
                       WHERE t.agent_id = $1 AND t.key = $2"#
                ),
                &[&agent, &key],
            )
            .await
            .map_err(|e| self.pg(e))?;
        match rows.first() {
            Some(r) => Ok((
                r.try_get(ENTRY_COLUMN_COUNT - 1).map_err(|e| self.pg(e))?,
                self.entry(r)?,
            )),
            None => Err(MemoryError::Corrupt {
                location: self.location(),
                message: format!("key '{key}' vanished after its write"),
            }),
        }
    }

    /// Kept versions of `agent` (one key or all), newest first per key.
    async fn kept(
        &self,
        agent: Uuid,
        key: Option<String>,
    ) -> Result<Vec<MemoryVersion>, MemoryError> {
        let s = &self.schema;
        let from = format!(
            r#"SELECT {VERSION_COLUMNS} FROM "{s}".memory_versions v JOIN "{s}".agents a ON a.id = v.agent_id"#
        );
        let rows = match key {
            Some(k) => {
                self.query(
                    &format!("{from} WHERE v.agent_id = $1 AND v.key = $2 ORDER BY v.version DESC"),
                    &[Box::new(agent), Box::new(k)],
                )
                .await?
            }
            None => {
                self.query(
                    &format!("{from} WHERE v.agent_id = $1 ORDER BY v.key, v.version DESC"),
                    &[Box::new(agent)],
                )
                .await?
            }
        };
        rows.iter().map(|r| self.version(r)).collect()
    }
}

fn limit_param(n: usize) -> Param {
    Box::new(i64::try_from(n).unwrap_or(i64::MAX))
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
        Box::pin(async move {
            let s = &self.schema;
            let at = now();
            let id = self.uuid(&agent)?;
            let p = entry.provenance.clone().sanitized();
            let embedding = entry.embedding.clone();
            let mut guard = self.writer().await?;
            let client = guard
                .as_mut()
                .ok_or_else(|| self.err("no writer connection"))?;
            let tx = client.transaction().await.map_err(|e| self.pg(e))?;
            let current = self.lock_key(&tx, id, &entry.key).await?;
            let current_version = current.map_or(0, |(_, v)| v);
            if let Some(expected) = entry.expected_version
                && expected != current_version
            {
                let agent = self.alias_in(&tx, id).await?;
                // Ended here, not on drop: a dropped transaction's ROLLBACK waits for the
                // connection task, and the key's lock with it.
                tx.rollback().await.map_err(|e| self.pg(e))?;
                return Err(MemoryError::Conflict {
                    agent,
                    key: entry.key,
                    expected,
                    actual: current_version,
                });
            }
            let next = self
                .next_version(&tx, id, &entry.key, current_version)
                .await?;
            if let Some((seq, _)) = current {
                self.archive(&tx, seq, VersionState::Replaced, at).await?;
            }
            tx.execute(
                &format!(
                    r#"INSERT INTO "{s}".memories (id, agent_id, key, content, category, session, created_at,
                         updated_at, embedding, version, {PROVENANCE_COLUMNS})
                       VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8, $9, $10, $11, $12, $13, $14, $15)
                       ON CONFLICT (agent_id, key) DO UPDATE SET content = EXCLUDED.content,
                         category = EXCLUDED.category, session = EXCLUDED.session,
                         updated_at = EXCLUDED.updated_at, embedding = EXCLUDED.embedding,
                         version = EXCLUDED.version, trust = EXCLUDED.trust,
                         prov_agent = EXCLUDED.prov_agent, prov_session = EXCLUDED.prov_session,
                         prov_channel = EXCLUDED.prov_channel,
                         prov_tool_call = EXCLUDED.prov_tool_call,
                         prov_receipt = EXCLUDED.prov_receipt"#
                ),
                &[
                    &Uuid::new_v4(),
                    &id,
                    &entry.key,
                    &entry.content,
                    &entry.category,
                    &entry.session,
                    &at,
                    &entry.embedding,
                    &big(next),
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
            self.prune(&tx, id, &entry.key).await?;
            let (seq, stored) = self.live_in(&tx, id, &entry.key).await?;
            tx.commit().await.map_err(|e| self.pg(e))?;
            drop(guard);
            let row = embedding.as_deref().and_then(|v| {
                VecRow::new(
                    stored.category.clone(),
                    stored.session.clone(),
                    micros(stored.created_at),
                    v,
                )
            });
            self.own_write(&agent, || self.vectors.update(&agent, seq, row))
                .await?;
            Ok(stored)
        })
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
        Box::pin(async move {
            let s = &self.schema;
            let id = self.uuid(&agent)?;
            let mut guard = self.writer().await?;
            let client = guard
                .as_mut()
                .ok_or_else(|| self.err("no writer connection"))?;
            let tx = client.transaction().await.map_err(|e| self.pg(e))?;
            let current = self.lock_key(&tx, id, &key).await?;
            let kept: Vec<u64> = tx
                .query(
                    &format!(
                        r#"SELECT version FROM "{s}".memory_versions WHERE agent_id = $1 AND key = $2
                           ORDER BY version DESC"#
                    ),
                    &[&id, &key],
                )
                .await
                .map_err(|e| self.pg(e))?
                .iter()
                .map(|r| r.try_get::<_, i64>(0).map(|v| u64::try_from(v).unwrap_or(0)))
                .collect::<Result<_, _>>()
                .map_err(|e| self.pg(e))?;
            let message = match to {
                Some(v) if current.is_some_and(|(_, c)| c == v) => {
                    Some(format!("version {v} is already the current one"))
                }
                Some(v) if !kept.contains(&v) => Some(if kept.is_empty() {
                    format!("version {v} is not kept (no earlier versions are)")
                } else {
                    let list: Vec<String> = kept.iter().map(u64::to_string).collect();
                    format!("version {v} is not kept (kept: {})", list.join(", "))
                }),
                None if kept.is_empty() && current.is_some() => {
                    Some("no earlier version is kept".into())
                }
                None if kept.is_empty() => Some("no such key and no kept version of it".into()),
                _ => None,
            };
            if let Some(message) = message {
                let agent = self.alias_in(&tx, id).await?;
                tx.rollback().await.map_err(|e| self.pg(e))?;
                return Err(MemoryError::NoVersion {
                    agent,
                    key,
                    message,
                });
            }
            let target = big(to.or(kept.first().copied()).unwrap_or(0));
            let current_version = current.map_or(0, |(_, v)| v);
            let next = big(self.next_version(&tx, id, &key, current_version).await?);
            let at = now();
            match current {
                Some((seq, _)) => {
                    self.archive(&tx, seq, VersionState::Replaced, at).await?;
                    tx.execute(
                        &format!(
                            r#"UPDATE "{s}".memories m SET content = v.content, category = v.category,
                                 session = v.session, updated_at = $5, embedding = v.embedding,
                                 version = $6, trust = v.trust, prov_agent = v.prov_agent,
                                 prov_session = v.prov_session, prov_channel = v.prov_channel,
                                 prov_tool_call = v.prov_tool_call, prov_receipt = v.prov_receipt
                               FROM "{s}".memory_versions v
                               WHERE m.seq = $1 AND v.agent_id = $2 AND v.key = $3 AND v.version = $4"#
                        ),
                        &[&seq, &id, &key, &target, &at, &next],
                    )
                    .await
                    .map_err(|e| self.pg(e))?;
                }
                None => {
                    tx.execute(
                        &format!(
                            r#"INSERT INTO "{s}".memories (id, agent_id, key, content, category, session,
                                 created_at, updated_at, embedding, version, {PROVENANCE_COLUMNS})
                               SELECT id, agent_id, key, content, category, session, created_at, $4,
                                 embedding, $5, {PROVENANCE_COLUMNS}
                               FROM "{s}".memory_versions
                               WHERE agent_id = $1 AND key = $2 AND version = $3"#
                        ),
                        &[&id, &key, &target, &at, &next],
                    )
                    .await
                    .map_err(|e| self.pg(e))?;
                }
            }
            self.prune(&tx, id, &key).await?;
            let (_, restored) = self.live_in(&tx, id, &key).await?;
            tx.commit().await.map_err(|e| self.pg(e))?;
            drop(guard);
            // The restored row's vector comes back with it: reload the agent's vectors.
            self.vectors.forget_agent(&agent);
            self.known().remove(&agent);
            Ok(restored)
        })
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
