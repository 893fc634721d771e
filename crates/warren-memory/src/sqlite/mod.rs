//! The SQLite memory store (MEM-2, the default backend): one install-wide file
//! `data/memory/memory.db` in WAL mode with tables `agents(id, alias UNIQUE, backend,
//! created_at)` and `memories(..., agent_id NOT NULL REFERENCES agents(id), UNIQUE(agent_id,
//! key))`, plus an FTS5 index over key, content and a generated `scope` column for BM25
//! keyword recall.
//!
//! The scope of a recall (agent ids and their category lists) is part of the SQL `WHERE`, so
//! it applies before `ORDER BY ... LIMIT`: rows a grant forbids can never crowd out allowed
//! ones. The same scope, as FTS tokens, is ANDed into the MATCH so FTS5 intersects doclists
//! before ranking (only a speed-up: it can narrow, never widen, what the `WHERE` allows). Timestamps are INTEGER microseconds since the Unix epoch (UTC), compared as numbers.
//! The file is opened by the one routine of every store (`warren_config::sqlite`: 0600,
//! verified WAL); all SQLite work runs on the blocking pool through its `SharedConn`, never on
//! an async worker.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params};
use warren_config::schema::MemoryBackendKind;
use warren_config::sqlite::{self, SharedConn};
use warren_core::AgentAlias;

use crate::entry::{
    AgentId, DEFAULT_HISTORY_VERSIONS, ListQuery, MemoryEntry, MemoryVersion, NewEntry, Provenance,
    RecallHit, RecallQuery, ScopeRule, VersionState, now,
};
use crate::error::MemoryError;
use crate::hybrid::{self, VecRow, VectorIndex};
use crate::store::{MemFuture, MemoryStore};

mod rows;
mod schema;
mod vectors;

use rows::{
    agent_in, alias_of, archive, current_row, entries, kept_versions, keyword_recall, next_version,
    prune, recent_recall, registered, sql,
};
use schema::{SCHEMA, SCHEMA_VERSION, migrate};
use vectors::{VectorSync, agent_version, encode_vector, load_vectors};

pub(crate) use rows::micros;
pub use rows::registered_agents_at;
pub use schema::VERSION_CRASH_POINTS;

/// The install-wide SQLite store. Cheap to share (`Arc`); one [`SharedConn`].
pub struct SqliteStore {
    conn: SharedConn,
    vectors: Arc<VectorIndex>,
    sync: Arc<Mutex<VectorSync>>,
    vector_weight: f64,
    /// Earlier versions kept per key (`[memory] history_versions`).
    history_limit: u32,
}

impl SqliteStore {
    /// The schema version of the file (`PRAGMA user_version`; `warren doctor`).
    pub const SCHEMA_VERSION: i64 = SCHEMA_VERSION;

    /// Opens (creating if needed) the store at `path` and its schema.
    pub fn open(path: &Path) -> Result<Self, MemoryError> {
        let err = |source| sql(path)(source);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| MemoryError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        // A migration that fails and rolls back leaves the store read-only at its old schema
        // (recall works, writes say why; issue 22 §4).
        let conn = sqlite::open_migrated(path, sqlite::Sync::Normal, SCHEMA_VERSION, |c| {
            c.execute_batch(SCHEMA)?;
            migrate(c)
        })
        .map_err(err)?;
        if conn.read_only().is_none() {
            let mut c = conn.lock();
            c.execute_batch(SCHEMA).map_err(err)?;
            migrate(&mut c).map_err(err)?;
        }
        Ok(Self {
            conn,
            vectors: Arc::new(VectorIndex::default()),
            sync: Arc::new(Mutex::new(VectorSync::default())),
            vector_weight: hybrid::DEFAULT_VECTOR_WEIGHT,
            history_limit: DEFAULT_HISTORY_VERSIONS,
        })
    }

    /// How many earlier versions of each key are kept (`[memory] history_versions`).
    pub fn with_history_limit(mut self, versions: u32) -> Self {
        self.history_limit = versions;
        self
    }

    /// Weight of the vector score in hybrid recall (0..=1; the keyword score gets the rest).
    pub fn with_vector_weight(mut self, weight: f64) -> Self {
        self.vector_weight = weight.clamp(0.0, 1.0);
        self
    }

    pub fn path(&self) -> &Path {
        self.conn.path()
    }

    /// Runs `f` on the connection on the blocking pool.
    fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection, &Path) -> Result<T, MemoryError> + Send + 'static,
    ) -> MemFuture<'_, T> {
        Box::pin(
            self.conn
                .run(f, |_, e| MemoryError::Worker(format!("SQLite worker: {e}"))),
        )
    }

    /// Registered aliases with their backend name and row count (MEM-9 probe, CLI).
    pub fn registered_agents(&self) -> MemFuture<'_, Vec<(String, String, u64)>> {
        self.run(|conn, path| registered(conn, path))
    }
}

impl MemoryStore for SqliteStore {
    fn kind(&self) -> MemoryBackendKind {
        MemoryBackendKind::Sqlite
    }

    fn location(&self) -> String {
        self.conn.path().display().to_string()
    }

    fn agent_id(&self, alias: &AgentAlias, create: bool) -> MemFuture<'_, Option<AgentId>> {
        let alias = alias.to_string();
        self.run(move |conn, path| {
            let find = |conn: &Connection| {
                conn.prepare_cached("SELECT id FROM agents WHERE alias = ?1")
                    .and_then(|mut s| s.query_row([&alias], |r| r.get::<_, String>(0)).optional())
                    .map_err(sql(path))
            };
            if let Some(id) = find(conn)? {
                return Ok(Some(AgentId(id)));
            }
            if !create {
                return Ok(None);
            }
            conn.execute(
                "INSERT INTO agents (id, alias, backend, created_at) VALUES (?1, ?2, 'sqlite', ?3) \
                 ON CONFLICT(alias) DO NOTHING",
                params![uuid::Uuid::new_v4().to_string(), alias, micros(now())],
            )
            .map_err(sql(path))?;
            Ok(find(conn)?.map(AgentId))
        })
    }

    fn store_with_agent(&self, agent: AgentId, entry: NewEntry) -> MemFuture<'_, MemoryEntry> {
        let vectors = Arc::clone(&self.vectors);
        let vsync = Arc::clone(&self.sync);
        let history_limit = self.history_limit;
        self.run(move |conn, path| {
            let at = micros(now());
            let blob = entry.embedding.as_deref().map(encode_vector);
            let p = entry.provenance.clone().sanitized();
            // Immediate: the version read below cannot change before this write commits, so
            // concurrent writers (threads or processes) queue and each gets its own version.
            let tx = conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(sql(path))?;
            let current = current_row(&tx, path, &agent, &entry.key)?;
            let current_version = current.as_ref().map_or(0, |(_, v)| *v);
            if let Some(expected) = entry.expected_version
                && expected != current_version
            {
                return Err(MemoryError::Conflict {
                    agent: alias_of(&tx, path, &agent)?,
                    key: entry.key,
                    expected,
                    actual: current_version,
                });
            }
            let next = next_version(&tx, path, &agent, &entry.key, current_version)?;
            if let Some((seq, _)) = current {
                archive(&tx, path, seq, VersionState::Replaced, at)?;
            }
            warren_config::failpoint::crash_point(VERSION_CRASH_POINTS[0]);
            let (seq, id): (i64, String) = tx
                .prepare_cached(
                    "INSERT INTO memories (id, agent_id, key, content, category, session, created_at, updated_at, embedding, \
                       version, trust, prov_agent, prov_session, prov_channel, prov_tool_call, prov_receipt) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15) \
                     ON CONFLICT (agent_id, key) DO UPDATE SET content = excluded.content, \
                       category = excluded.category, session = excluded.session, \
                       updated_at = excluded.updated_at, embedding = excluded.embedding, \
                       version = excluded.version, trust = excluded.trust, \
                       prov_agent = excluded.prov_agent, prov_session = excluded.prov_session, \
                       prov_channel = excluded.prov_channel, prov_tool_call = excluded.prov_tool_call, \
                       prov_receipt = excluded.prov_receipt \
                     RETURNING seq, id",
                )
                .and_then(|mut s| {
                    s.query_row(
                        params![
                            uuid::Uuid::new_v4().to_string(),
                            agent.0,
                            entry.key,
                            entry.content,
                            entry.category,
                            entry.session,
                            at,
                            blob,
                            i64::try_from(next).unwrap_or(i64::MAX),
                            p.trust.as_str(),
                            p.agent,
                            p.session,
                            p.channel,
                            p.tool_call,
                            p.receipt,
                        ],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                })
                .map_err(sql(path))?;
            prune(&tx, path, &agent, &entry.key, history_limit)?;
            let stored = entries(&tx, path, "WHERE t.seq = ?1", &[Value::Integer(seq)])?
                .pop()
                .ok_or_else(|| MemoryError::Corrupt {
                    location: path.display().to_string(),
                    message: format!("row {id} vanished after its write"),
                })?;
            let row = entry.embedding.as_deref().and_then(|v| {
                VecRow::new(
                    stored.category.clone(),
                    stored.session.clone(),
                    micros(stored.created_at),
                    v,
                )
            });
            let version = agent_version(&tx, path, &agent)?;
            tx.commit().map_err(sql(path))?;
            let mut vsync = vsync.lock().unwrap_or_else(|p| p.into_inner());
            vsync.own_write(&vectors, &agent, version, || {
                vectors.update(&agent, seq, row)
            });
            Ok(stored)
        })
    }

    fn get_for_agent(&self, agent: AgentId, key: String) -> MemFuture<'_, Option<MemoryEntry>> {
        self.run(move |conn, path| {
            Ok(entries(
                conn,
                path,
                "WHERE t.agent_id = ?1 AND t.key = ?2",
                &[Value::Text(agent.0), Value::Text(key)],
            )?
            .pop())
        })
    }

    fn recall_for_agents(
        &self,
        scope: Vec<ScopeRule>,
        query: RecallQuery,
        query_vector: Option<Vec<f32>>,
    ) -> MemFuture<'_, Vec<RecallHit>> {
        let vectors = Arc::clone(&self.vectors);
        let vsync = Arc::clone(&self.sync);
        let weight = self.vector_weight;
        self.run(move |conn, path| {
            if scope.is_empty() {
                return Ok(Vec::new());
            }
            let agent = scope.first().map(|r| r.agent.0.clone()).unwrap_or_default();
            if query.is_recent() {
                return recent_recall(conn, path, &scope, &query);
            }
            let Some(qv) = query_vector else {
                let rows = keyword_recall(conn, path, &agent, &scope, &query, query.limit)?;
                return Ok(hybrid::keyword_only(rows));
            };
            // Hybrid: twice the limit from each side, merged (MEM-2 scope on both sides).
            let wide = query.limit.saturating_mul(2);
            let keyword = keyword_recall(conn, path, &agent, &scope, &query, wide)?;
            let ids: Vec<AgentId> = scope.iter().map(|r| r.agent.clone()).collect();
            load_vectors(conn, path, &vectors, &vsync, &ids)?;
            let nearest = vectors.nearest(&scope, &query, &qv, wide);
            let mut extra: HashMap<i64, MemoryEntry> = HashMap::new();
            for (seq, _) in &nearest {
                if keyword.iter().any(|(k, _, _)| k == seq) {
                    continue;
                }
                if let Some(e) =
                    entries(conn, path, "WHERE t.seq = ?1", &[Value::Integer(*seq)])?.pop()
                {
                    extra.insert(*seq, e);
                }
            }
            Ok(hybrid::merge(keyword, nearest, extra, weight, query.limit))
        })
    }

    fn list_for_agent(&self, agent: AgentId, query: ListQuery) -> MemFuture<'_, Vec<MemoryEntry>> {
        self.run(move |conn, path| {
            let mut params = vec![Value::Text(agent.0)];
            let mut clause = "WHERE t.agent_id = ?1".to_string();
            if let Some(c) = query.category {
                params.push(Value::Text(c));
                clause.push_str(" AND t.category = ?2");
            }
            params.push(Value::Integer(
                i64::try_from(query.limit).unwrap_or(i64::MAX),
            ));
            params.push(Value::Integer(
                i64::try_from(query.offset).unwrap_or(i64::MAX),
            ));
            clause.push_str(&format!(
                " ORDER BY t.updated_at DESC, t.seq DESC LIMIT ?{} OFFSET ?{}",
                params.len() - 1,
                params.len()
            ));
            entries(conn, path, &clause, &params)
        })
    }

    fn forget_for_agent(&self, agent: AgentId, key: String) -> MemFuture<'_, bool> {
        let vectors = Arc::clone(&self.vectors);
        let vsync = Arc::clone(&self.sync);
        let history_limit = self.history_limit;
        self.run(move |conn, path| {
            let tx = conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(sql(path))?;
            let seq = current_row(&tx, path, &agent, &key)?.map(|(seq, _)| seq);
            if let Some(seq) = seq {
                archive(&tx, path, seq, VersionState::Forgotten, micros(now()))?;
                warren_config::failpoint::crash_point(VERSION_CRASH_POINTS[1]);
                tx.execute("DELETE FROM memories WHERE seq = ?1", [seq])
                    .map_err(sql(path))?;
                prune(&tx, path, &agent, &key, history_limit)?;
            }
            let version = agent_version(&tx, path, &agent)?;
            tx.commit().map_err(sql(path))?;
            if let Some(seq) = seq {
                let mut vsync = vsync.lock().unwrap_or_else(|p| p.into_inner());
                vsync.own_write(&vectors, &agent, version, || {
                    vectors.update(&agent, seq, None)
                });
            }
            Ok(seq.is_some())
        })
    }

    fn count_for_agent(&self, agent: AgentId) -> MemFuture<'_, u64> {
        self.run(move |conn, path| {
            let n: i64 = conn
                .query_row(
                    "SELECT COUNT(*) FROM memories WHERE agent_id = ?1",
                    [&agent.0],
                    |r| r.get(0),
                )
                .map_err(sql(path))?;
            Ok(u64::try_from(n).unwrap_or(0))
        })
    }

    fn export_agent(&self, agent: AgentId) -> MemFuture<'_, Vec<MemoryEntry>> {
        self.run(move |conn, path| {
            entries(
                conn,
                path,
                "WHERE t.agent_id = ?1 ORDER BY t.created_at, t.seq",
                &[Value::Text(agent.0)],
            )
        })
    }

    fn purge_agent(&self, agent: AgentId) -> MemFuture<'_, u64> {
        let vectors = Arc::clone(&self.vectors);
        let vsync = Arc::clone(&self.sync);
        self.run(move |conn, path| {
            let tx = conn.transaction().map_err(sql(path))?;
            let n = tx
                .execute("DELETE FROM memories WHERE agent_id = ?1", [&agent.0])
                .map_err(sql(path))?;
            tx.execute(
                "DELETE FROM memory_versions WHERE agent_id = ?1",
                [&agent.0],
            )
            .map_err(sql(path))?;
            tx.execute("DELETE FROM agents WHERE id = ?1", [&agent.0])
                .map_err(sql(path))?;
            tx.commit().map_err(sql(path))?;
            vectors.forget_agent(&agent);
            vsync
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .versions
                .remove(&agent);
            Ok(n as u64)
        })
    }

    fn set_embedder_identity(&self, identity: String) -> MemFuture<'_, bool> {
        let vectors = Arc::clone(&self.vectors);
        let vsync = Arc::clone(&self.sync);
        self.run(move |conn, path| {
            let tx = conn.transaction().map_err(sql(path))?;
            let old: Option<String> = tx
                .query_row("SELECT value FROM meta WHERE key = 'embedder'", [], |r| {
                    r.get(0)
                })
                .optional()
                .map_err(sql(path))?;
            if old.as_deref() == Some(identity.as_str()) {
                return Ok(false);
            }
            let changed = old.is_some();
            if changed {
                tx.execute("UPDATE memories SET embedding = NULL WHERE embedding IS NOT NULL", [])
                    .map_err(sql(path))?;
            }
            tx.execute(
                "INSERT INTO meta (key, value) VALUES ('embedder', ?1) \
                 ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                [&identity],
            )
            .map_err(sql(path))?;
            tx.commit().map_err(sql(path))?;
            if changed {
                vectors.clear();
                vsync
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .versions
                    .clear();
                tracing::warn!(path = %path.display(), embedder = %identity, "embedder changed: stored vectors dropped; recall uses keywords for older rows");
            }
            Ok(changed)
        })
    }

    fn import_agent(&self, alias: AgentAlias, rows: Vec<MemoryEntry>) -> MemFuture<'_, u64> {
        self.run(move |conn, path| {
            let tx = conn.transaction().map_err(sql(path))?;
            let agent = agent_in(&tx, path, &alias)?;
            let mut inserted = 0u64;
            {
                let mut stmt = tx
                    .prepare_cached(
                        "INSERT INTO memories (id, agent_id, key, content, category, session, created_at, updated_at, \
                           version, trust, prov_agent, prov_session, prov_channel, prov_tool_call, prov_receipt) \
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15) ON CONFLICT DO NOTHING",
                    )
                    .map_err(sql(path))?;
                for e in &rows {
                    let p = e.provenance.clone().sanitized();
                    inserted += stmt
                        .execute(params![
                            e.id,
                            agent,
                            e.key,
                            e.content,
                            e.category,
                            e.session,
                            micros(e.created_at),
                            micros(e.updated_at),
                            // Archives from before versions existed carry none: version 1.
                            i64::try_from(e.version.max(1)).unwrap_or(i64::MAX),
                            p.trust.as_str(),
                            p.agent,
                            p.session,
                            p.channel,
                            p.tool_call,
                            p.receipt,
                        ])
                        .map_err(sql(path))? as u64;
                }
            }
            tx.commit().map_err(sql(path))?;
            Ok(inserted)
        })
    }

    fn history_for_agent(&self, agent: AgentId, key: String) -> MemFuture<'_, Vec<MemoryVersion>> {
        self.run(move |conn, path| {
            // One read transaction: the live row and the kept ones are the same instant's.
            let tx = conn.transaction().map_err(sql(path))?;
            let mut out: Vec<MemoryVersion> = entries(
                &tx,
                path,
                "WHERE t.agent_id = ?1 AND t.key = ?2",
                &[Value::Text(agent.0.clone()), Value::Text(key.clone())],
            )?
            .into_iter()
            .map(|entry| MemoryVersion {
                entry,
                state: VersionState::Current,
                archived_at: None,
            })
            .collect();
            out.extend(kept_versions(&tx, path, &agent, Some(&key))?);
            Ok(out)
        })
    }

    fn undo_for_agent(
        &self,
        agent: AgentId,
        key: String,
        to: Option<u64>,
    ) -> MemFuture<'_, MemoryEntry> {
        let vectors = Arc::clone(&self.vectors);
        let vsync = Arc::clone(&self.sync);
        let history_limit = self.history_limit;
        self.run(move |conn, path| {
            let tx = conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(sql(path))?;
            let current = current_row(&tx, path, &agent, &key)?;
            let kept: Vec<u64> = tx
                .prepare_cached(
                    "SELECT version FROM memory_versions WHERE agent_id = ?1 AND key = ?2 \
                     ORDER BY version DESC",
                )
                .and_then(|mut s| {
                    s.query_map(params![agent.0, key], |r| r.get::<_, i64>(0))?
                        .map(|v| v.map(|v| u64::try_from(v).unwrap_or(0)))
                        .collect::<Result<Vec<_>, _>>()
                })
                .map_err(sql(path))?;
            let no_version = |message: String| -> Result<MemoryEntry, MemoryError> {
                Err(MemoryError::NoVersion {
                    agent: alias_of(&tx, path, &agent)?,
                    key: key.clone(),
                    message,
                })
            };
            let target = match to {
                Some(v) if current.is_some_and(|(_, c)| c == v) => {
                    return no_version(format!("version {v} is already the current one"));
                }
                Some(v) if !kept.contains(&v) => {
                    return no_version(if kept.is_empty() {
                        format!("version {v} is not kept (no earlier versions are)")
                    } else {
                        let list: Vec<String> = kept.iter().map(u64::to_string).collect();
                        format!("version {v} is not kept (kept: {})", list.join(", "))
                    });
                }
                Some(v) => v,
                None => match kept.first() {
                    Some(v) => *v,
                    None if current.is_some() => {
                        return no_version("no earlier version is kept".into());
                    }
                    None => return no_version("no such key and no kept version of it".into()),
                },
            };
            let current_version = current.map_or(0, |(_, v)| v);
            let next = next_version(&tx, path, &agent, &key, current_version)?;
            let at = micros(now());
            let (next, target) = (
                i64::try_from(next).unwrap_or(i64::MAX),
                i64::try_from(target).unwrap_or(i64::MAX),
            );
            match current {
                Some((seq, _)) => {
                    archive(&tx, path, seq, VersionState::Replaced, at)?;
                    warren_config::failpoint::crash_point(VERSION_CRASH_POINTS[2]);
                    tx.execute(
                        "UPDATE memories SET content = v.content, category = v.category, \
                           session = v.session, updated_at = ?5, embedding = v.embedding, \
                           version = ?6, trust = v.trust, prov_agent = v.prov_agent, \
                           prov_session = v.prov_session, prov_channel = v.prov_channel, \
                           prov_tool_call = v.prov_tool_call, prov_receipt = v.prov_receipt \
                         FROM memory_versions v \
                         WHERE memories.seq = ?1 AND v.agent_id = ?2 AND v.key = ?3 AND v.version = ?4",
                        params![seq, agent.0, key, target, at, next],
                    )
                    .map_err(sql(path))?;
                }
                None => {
                    tx.execute(
                        "INSERT INTO memories (id, agent_id, key, content, category, session, \
                           created_at, updated_at, embedding, version, trust, prov_agent, \
                           prov_session, prov_channel, prov_tool_call, prov_receipt) \
                         SELECT id, agent_id, key, content, category, session, created_at, ?4, \
                           embedding, ?5, trust, prov_agent, prov_session, prov_channel, \
                           prov_tool_call, prov_receipt \
                         FROM memory_versions WHERE agent_id = ?1 AND key = ?2 AND version = ?3",
                        params![agent.0, key, target, at, next],
                    )
                    .map_err(sql(path))?;
                }
            }
            prune(&tx, path, &agent, &key, history_limit)?;
            let restored = entries(
                &tx,
                path,
                "WHERE t.agent_id = ?1 AND t.key = ?2",
                &[Value::Text(agent.0.clone()), Value::Text(key.clone())],
            )?
            .pop()
            .ok_or_else(|| MemoryError::Corrupt {
                location: path.display().to_string(),
                message: format!("key '{key}' vanished after its undo"),
            })?;
            tx.commit().map_err(sql(path))?;
            // The restored row's vector comes back with it: reload the agent's vectors.
            vectors.forget_agent(&agent);
            vsync
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .versions
                .remove(&agent);
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
        self.run(move |conn, path| {
            let receipt = Provenance {
                receipt: Some(receipt),
                ..Provenance::default()
            }
            .sanitized()
            .receipt;
            let Some(receipt) = receipt else {
                return Ok(false);
            };
            let version = i64::try_from(version).unwrap_or(i64::MAX);
            let tx = conn.transaction().map_err(sql(path))?;
            let mut n = 0;
            for table in ["memories", "memory_versions"] {
                n += tx
                    .execute(
                        &format!(
                            "UPDATE {table} SET prov_receipt = ?4 WHERE agent_id = ?1 AND key = ?2 \
                             AND version = ?3 AND prov_receipt IS NULL"
                        ),
                        params![agent.0, key, version, receipt],
                    )
                    .map_err(sql(path))?;
            }
            tx.commit().map_err(sql(path))?;
            Ok(n > 0)
        })
    }

    fn export_history(&self, agent: AgentId) -> MemFuture<'_, Vec<MemoryVersion>> {
        self.run(move |conn, path| kept_versions(conn, path, &agent, None))
    }

    fn import_history(
        &self,
        alias: AgentAlias,
        versions: Vec<MemoryVersion>,
    ) -> MemFuture<'_, u64> {
        self.run(move |conn, path| {
            let tx = conn.transaction().map_err(sql(path))?;
            let agent = agent_in(&tx, path, &alias)?;
            let mut inserted = 0u64;
            {
                let mut stmt = tx
                    .prepare_cached(
                        "INSERT INTO memory_versions (agent_id, key, version, id, content, category, \
                           session, created_at, updated_at, trust, prov_agent, prov_session, \
                           prov_channel, prov_tool_call, prov_receipt, state, archived_at) \
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17) \
                         ON CONFLICT DO NOTHING",
                    )
                    .map_err(sql(path))?;
                for v in versions.iter().filter(|v| v.state != VersionState::Current) {
                    let (e, p) = (&v.entry, v.entry.provenance.clone().sanitized());
                    inserted += stmt
                        .execute(params![
                            agent,
                            e.key,
                            i64::try_from(e.version).unwrap_or(i64::MAX),
                            e.id,
                            e.content,
                            e.category,
                            e.session,
                            micros(e.created_at),
                            micros(e.updated_at),
                            p.trust.as_str(),
                            p.agent,
                            p.session,
                            p.channel,
                            p.tool_call,
                            p.receipt,
                            v.state.as_str(),
                            micros(v.archived_at.unwrap_or(e.updated_at)),
                        ])
                        .map_err(sql(path))? as u64;
                }
            }
            tx.commit().map_err(sql(path))?;
            Ok(inserted)
        })
    }

    fn rename_agent(&self, from: AgentAlias, to: AgentAlias) -> MemFuture<'_, bool> {
        self.run(move |conn, path| {
            let tx = conn.transaction().map_err(sql(path))?;
            let id_of = |alias: &str| {
                tx.query_row("SELECT id FROM agents WHERE alias = ?1", [alias], |r| {
                    r.get::<_, String>(0)
                })
                .optional()
                .map_err(sql(path))
            };
            let Some(from_id) = id_of(from.as_str())? else {
                return Ok(false);
            };
            if let Some(to_id) = id_of(to.as_str())? {
                let (rows, versions): (i64, i64) = tx
                    .query_row(
                        "SELECT (SELECT COUNT(*) FROM memories WHERE agent_id = ?1), \
                                (SELECT COUNT(*) FROM memory_versions WHERE agent_id = ?1)",
                        [&to_id],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .map_err(sql(path))?;
                if rows > 0 || versions > 0 {
                    return Err(MemoryError::Lifecycle {
                        agent: from.to_string(),
                        message: format!(
                            "cannot rename to '{to}': '{to}' already owns {rows} memory rows and {versions} earlier versions in {}",
                            path.display()
                        ),
                    });
                }
                tx.execute("DELETE FROM agents WHERE id = ?1", [&to_id])
                    .map_err(sql(path))?;
            }
            tx.execute(
                "UPDATE agents SET alias = ?1 WHERE id = ?2",
                params![to.as_str(), from_id],
            )
            .map_err(sql(path))?;
            tx.commit().map_err(sql(path))?;
            Ok(true)
        })
    }
}

/// Whether the SQLite memory store's file (`data/memory/memory.db`) exists; creates nothing.
/// A daemon start probes an existing store only (issue 36 §1).
pub fn store_exists(root: &warren_config::InstallRoot) -> bool {
    root.memory_db().exists()
}
