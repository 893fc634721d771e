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
use time::OffsetDateTime;
use warren_config::schema::MemoryBackendKind;
use warren_config::sqlite::{self, SharedConn};
use warren_core::AgentAlias;

use crate::entry::{
    AgentId, DEFAULT_HISTORY_VERSIONS, ListQuery, MemoryEntry, MemoryVersion, NewEntry, Provenance,
    RecallHit, RecallQuery, ScopeRule, Trust, VersionState, now,
};
use crate::error::MemoryError;
use crate::fts;
use crate::hybrid::{self, VecRow, VectorIndex};
use crate::store::{MemFuture, MemoryStore};

const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS agents (
    id          TEXT PRIMARY KEY,          -- UUID v4
    alias       TEXT NOT NULL UNIQUE,
    backend     TEXT NOT NULL,
    created_at  INTEGER NOT NULL           -- unix microseconds, UTC
);
CREATE TABLE IF NOT EXISTS memories (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,  -- FTS rowid; never reused, so a cached
                                           -- vector cannot name a later row
    id          TEXT NOT NULL UNIQUE,      -- UUID v4
    agent_id    TEXT NOT NULL REFERENCES agents(id),
    key         TEXT NOT NULL,
    content     TEXT NOT NULL,
    category    TEXT NOT NULL,
    session     TEXT,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    embedding   BLOB,                      -- little-endian f32s
    UNIQUE (agent_id, key)
);
CREATE TABLE IF NOT EXISTS meta (
    key         TEXT PRIMARY KEY,
    value       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS memories_agent_updated ON memories(agent_id, updated_at);
-- Earlier versions of each key (issue 20 §4): the row as it was when an overwrite, undo or
-- forget replaced it, newest `history_versions` per key.
CREATE TABLE IF NOT EXISTS memory_versions (
    agent_id    TEXT NOT NULL REFERENCES agents(id),
    key         TEXT NOT NULL,
    version     INTEGER NOT NULL,
    id          TEXT NOT NULL,
    content     TEXT NOT NULL,
    category    TEXT NOT NULL,
    session     TEXT,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    embedding   BLOB,
    trust       TEXT NOT NULL,
    prov_agent  TEXT,
    prov_session TEXT,
    prov_channel TEXT,
    prov_tool_call TEXT,
    prov_receipt TEXT,
    state       TEXT NOT NULL,             -- replaced | forgotten
    archived_at INTEGER NOT NULL,
    PRIMARY KEY (agent_id, key, version)
);
-- Per-agent write counter, bumped in the same transaction as every row change by any
-- process (triggers), so a process's cached vectors can tell foreign writes (see
-- `VectorSync`).
CREATE TABLE IF NOT EXISTS vector_versions (
    agent_id    TEXT PRIMARY KEY,
    version     INTEGER NOT NULL
);
CREATE TRIGGER IF NOT EXISTS memories_version_ai AFTER INSERT ON memories BEGIN
    INSERT INTO vector_versions (agent_id, version) VALUES (new.agent_id, 1)
        ON CONFLICT(agent_id) DO UPDATE SET version = version + 1;
END;
CREATE TRIGGER IF NOT EXISTS memories_version_au AFTER UPDATE ON memories BEGIN
    INSERT INTO vector_versions (agent_id, version) VALUES (new.agent_id, 1)
        ON CONFLICT(agent_id) DO UPDATE SET version = version + 1;
END;
CREATE TRIGGER IF NOT EXISTS memories_version_au_moved AFTER UPDATE OF agent_id ON memories
WHEN old.agent_id IS NOT new.agent_id BEGIN
    INSERT INTO vector_versions (agent_id, version) VALUES (old.agent_id, 1)
        ON CONFLICT(agent_id) DO UPDATE SET version = version + 1;
END;
CREATE TRIGGER IF NOT EXISTS memories_version_ad AFTER DELETE ON memories BEGIN
    INSERT INTO vector_versions (agent_id, version) VALUES (old.agent_id, 1)
        ON CONFLICT(agent_id) DO UPDATE SET version = version + 1;
END;
"#;

/// Crash points of versioned writes (between archiving the replaced version and changing the
/// live row): a process killed there must leave the key as it was, history included.
pub const VERSION_CRASH_POINTS: [&str; 3] = [
    "memory-store-after-archive",
    "memory-forget-after-archive",
    "memory-undo-after-archive",
];

/// Schema version kept in `meta` under `schema_version`. Version 2 made the FTS index
/// scope-aware (see [`SCOPE_COLUMN`]); version 3 added each row's version and provenance
/// ([`V3_COLUMNS`]); files without the key are version 1.
const SCHEMA_VERSION: i64 = 3;

/// The columns version 3 adds to `memories` (issue 20 §3/§4). Rows of older files read as
/// version 1 with `agent` trust and no other provenance.
const V3_COLUMNS: [(&str, &str); 7] = [
    ("version", "INTEGER NOT NULL DEFAULT 1"),
    ("trust", "TEXT NOT NULL DEFAULT 'agent'"),
    ("prov_agent", "TEXT"),
    ("prov_session", "TEXT"),
    ("prov_channel", "TEXT"),
    ("prov_tool_call", "TEXT"),
    ("prov_receipt", "TEXT"),
];

/// The generated `memories.scope` column (MEM-2): two opaque FTS tokens per row, one for the
/// agent and one for the agent and category, so a scoped MATCH intersects doclists inside FTS5
/// before BM25 ranks anything. Must compute exactly what [`fts::agent_token`] and
/// [`fts::category_token`] compute. Only ever narrows: the SQL `WHERE` scope stays.
const SCOPE_COLUMN: &str = "scope TEXT GENERATED ALWAYS AS \
     ('a' || hex(agent_id) || ' c' || hex(agent_id || ':' || category)) VIRTUAL";

/// BM25 column weights of keyword recall: `key`, `content`, and 0 for `scope`, so the scope
/// tokens never move a score. Passed to `bm25()` explicitly: ordering by FTS5's `rank` column
/// makes FTS5 compile an internal sorting statement on every query, which costs more than the
/// whole scoped search at 10k rows. BM25's document length still counts the two scope tokens
/// of every row (FTS5 has no per-column length), so rows of different lengths with nearly equal
/// scores may order differently than with the version-1 index; the matching set is the same.
const BM25_WEIGHTS: &str = "1.0, 1.0, 0.0";

/// The version-2 FTS index over the key, content and scope of each row and the triggers that
/// keep it in step. The update trigger covers every column `scope` derives from.
const FTS_SCHEMA: &str = r#"
CREATE VIRTUAL TABLE memories_fts
    USING fts5(key, content, scope, content='memories', content_rowid='seq');
CREATE TRIGGER memories_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts(rowid, key, content, scope)
        VALUES (new.seq, new.key, new.content, new.scope);
END;
CREATE TRIGGER memories_ad AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, key, content, scope)
        VALUES ('delete', old.seq, old.key, old.content, old.scope);
END;
CREATE TRIGGER memories_au AFTER UPDATE OF key, content, category, agent_id ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, key, content, scope)
        VALUES ('delete', old.seq, old.key, old.content, old.scope);
    INSERT INTO memories_fts(rowid, key, content, scope)
        VALUES (new.seq, new.key, new.content, new.scope);
END;
INSERT INTO memories_fts(memories_fts) VALUES ('rebuild');
"#;

/// Brings the file to [`SCHEMA_VERSION`] in one immediate transaction: a version-1 file (or a
/// new one) gets the `scope` column, a rebuilt scope-aware FTS index and its triggers. Safe to
/// run from several processes at once: the second sees the version the first committed.
fn migrate(conn: &mut Connection) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let version: i64 = tx
        .query_row(
            "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .optional()?
        .unwrap_or(1);
    if version >= SCHEMA_VERSION {
        return Ok(());
    }
    let has_column = |name: &str| -> rusqlite::Result<bool> {
        tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM pragma_table_xinfo('memories') WHERE name = ?1)",
            [name],
            |r| r.get(0),
        )
    };
    if version < 2 {
        let has_scope = has_column("scope")?;
        tx.execute_batch(
            "DROP TRIGGER IF EXISTS memories_ai; DROP TRIGGER IF EXISTS memories_ad; \
             DROP TRIGGER IF EXISTS memories_au; DROP TABLE IF EXISTS memories_fts;",
        )?;
        if !has_scope {
            tx.execute_batch(&format!("ALTER TABLE memories ADD COLUMN {SCOPE_COLUMN};"))?;
        }
        tx.execute_batch(FTS_SCHEMA)?;
    }
    for (name, decl) in V3_COLUMNS {
        if !has_column(name)? {
            tx.execute_batch(&format!("ALTER TABLE memories ADD COLUMN {name} {decl};"))?;
        }
    }
    tx.execute(
        "INSERT INTO meta (key, value) VALUES ('schema_version', ?1) \
         ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        [SCHEMA_VERSION.to_string()],
    )?;
    tx.commit()
}

/// What the cached vectors of this process have seen of the file (MEM-2 hybrid recall across
/// processes). `PRAGMA data_version` changes only when ANOTHER connection committed, so a
/// recall pays one pragma when nothing foreign happened; otherwise each cached agent's
/// `vector_versions` row is compared with the version its vectors were loaded at, and agents
/// written elsewhere are reloaded.
#[derive(Default)]
struct VectorSync {
    data_version: Option<i64>,
    versions: HashMap<AgentId, i64>,
}

fn agent_version(conn: &Connection, path: &Path, agent: &AgentId) -> Result<i64, MemoryError> {
    conn.prepare_cached("SELECT version FROM vector_versions WHERE agent_id = ?1")
        .and_then(|mut s| s.query_row([&agent.0], |r| r.get(0)).optional())
        .map(|v| v.unwrap_or(0))
        .map_err(sql(path))
}

impl VectorSync {
    /// Drops cached agents that another process wrote since they were loaded.
    fn refresh(
        &mut self,
        conn: &Connection,
        path: &Path,
        index: &VectorIndex,
    ) -> Result<(), MemoryError> {
        let dv: i64 = conn
            .query_row("PRAGMA data_version", [], |r| r.get(0))
            .map_err(sql(path))?;
        if self.data_version == Some(dv) {
            return Ok(());
        }
        let cached: Vec<(AgentId, i64)> =
            self.versions.iter().map(|(a, v)| (a.clone(), *v)).collect();
        for (agent, known) in cached {
            if agent_version(conn, path, &agent)? != known {
                index.forget_agent(&agent);
                self.versions.remove(&agent);
            }
        }
        self.data_version = Some(dv);
        Ok(())
    }

    /// After this process's own write to `agent` (inside its transaction, `new` read after the
    /// write): the cache may apply the write itself only if nothing else happened in between.
    fn own_write(&mut self, index: &VectorIndex, agent: &AgentId, new: i64, apply: impl FnOnce()) {
        match self.versions.get(agent) {
            Some(&known) if known + 1 == new => {
                apply();
                self.versions.insert(agent.clone(), new);
            }
            Some(_) => {
                index.forget_agent(agent);
                self.versions.remove(agent);
            }
            None => {}
        }
    }
}

/// Columns every entry query selects, in [`entry_from_row`] order; `t` is the memories row.
const ENTRY_COLUMNS: &str = "t.id, (SELECT alias FROM agents WHERE id = t.agent_id), t.key, \
     t.content, t.category, t.session, t.created_at, t.updated_at, t.version, t.trust, \
     t.prov_agent, t.prov_session, t.prov_channel, t.prov_tool_call, t.prov_receipt";

/// How many columns [`ENTRY_COLUMNS`] selects.
const ENTRY_COLUMN_COUNT: usize = 15;

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

/// [`SqliteStore::registered_agents`] of the store file at `path`, opened read-only; an
/// absent file has no agents. Synchronous: for config validation (MEM-9).
pub fn registered_agents_at(path: &Path) -> Result<Vec<(String, String, u64)>, MemoryError> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    let conn = sqlite::open_read_only(path).map_err(sql(path))?;
    let has_agents: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'agents')",
            [],
            |r| r.get(0),
        )
        .map_err(sql(path))?;
    if !has_agents {
        return Ok(Vec::new());
    }
    registered(&conn, path)
}

fn registered(conn: &Connection, path: &Path) -> Result<Vec<(String, String, u64)>, MemoryError> {
    let mut stmt = conn
        .prepare(
            "SELECT a.alias, a.backend, (SELECT COUNT(*) FROM memories m WHERE m.agent_id = a.id) \
             FROM agents a ORDER BY a.alias",
        )
        .map_err(sql(path))?;
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
            ))
        })
        .map_err(sql(path))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(sql(path))?;
    Ok(rows
        .into_iter()
        .map(|(a, b, n)| (a, b, u64::try_from(n).unwrap_or(0)))
        .collect())
}

/// A SQLite error on the store file; one a full disk caused reads "disk full at <dir>"
/// (issue 15 §8).
fn sql(path: &Path) -> impl Fn(rusqlite::Error) -> MemoryError + '_ {
    move |source| match sqlite::full_disk_at(&source, path) {
        Some(dir) => MemoryError::DiskFull {
            path: path.to_path_buf(),
            dir,
        },
        None => MemoryError::Sqlite {
            path: path.to_path_buf(),
            source: sqlite::explain(source, path),
        },
    }
}

pub(crate) fn micros(t: OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos() / 1000).unwrap_or(i64::MAX)
}

fn instant(us: i64) -> rusqlite::Result<OffsetDateTime> {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(us) * 1000).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Integer, Box::new(e))
    })
}

/// The writer's alias in column `i`: a row whose alias is missing or not an alias does not
/// decode (a hand-edited store is reported, never carried on as a string).
fn alias_at(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<AgentAlias> {
    let text: Option<String> = r.get(i)?;
    AgentAlias::new(text.unwrap_or_default()).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, Box::new(e))
    })
}

fn entry_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<MemoryEntry> {
    entry_at(r, 0)
}

/// The [`ENTRY_COLUMNS`] starting at column `b`.
fn entry_at(r: &rusqlite::Row<'_>, b: usize) -> rusqlite::Result<MemoryEntry> {
    let trust: String = r.get(b + 9)?;
    Ok(MemoryEntry {
        id: r.get(b)?,
        agent: alias_at(r, b + 1)?,
        key: r.get(b + 2)?,
        content: r.get(b + 3)?,
        category: r.get(b + 4)?,
        session: r.get(b + 5)?,
        created_at: instant(r.get(b + 6)?)?,
        updated_at: instant(r.get(b + 7)?)?,
        version: u64::try_from(r.get::<_, i64>(b + 8)?).unwrap_or(0),
        provenance: Provenance {
            trust: Trust::parse(&trust).ok_or_else(|| {
                rusqlite::Error::FromSqlConversionFailure(
                    b + 9,
                    rusqlite::types::Type::Text,
                    format!("unknown trust level {trust:?}").into(),
                )
            })?,
            agent: r.get(b + 10)?,
            session: r.get(b + 11)?,
            channel: r.get(b + 12)?,
            tool_call: r.get(b + 13)?,
            receipt: r.get(b + 14)?,
        },
    })
}

/// Appends the scope predicate over `t` and its parameters: `(t.agent_id = ? [AND
/// t.category IN (...)]) OR ...`. An empty category list matches nothing (MEM-8).
fn push_scope(sql: &mut String, params: &mut Vec<Value>, scope: &[ScopeRule]) {
    sql.push('(');
    for (i, rule) in scope.iter().enumerate() {
        if i > 0 {
            sql.push_str(" OR ");
        }
        params.push(Value::Text(rule.agent.0.clone()));
        sql.push_str(&format!("(t.agent_id = ?{}", params.len()));
        if let Some(cats) = &rule.categories {
            if cats.is_empty() {
                sql.push_str(" AND 0");
            } else {
                sql.push_str(" AND t.category IN (");
                for (j, c) in cats.iter().enumerate() {
                    params.push(Value::Text(c.clone()));
                    if j > 0 {
                        sql.push(',');
                    }
                    sql.push_str(&format!("?{}", params.len()));
                }
                sql.push(')');
            }
        }
        sql.push(')');
    }
    if scope.is_empty() {
        sql.push('0');
    }
    sql.push(')');
}

fn push_filters(sql: &mut String, params: &mut Vec<Value>, q: &RecallQuery) {
    if let Some(s) = &q.session {
        params.push(Value::Text(s.clone()));
        sql.push_str(&format!(" AND t.session = ?{}", params.len()));
    }
    if let Some(since) = q.since {
        params.push(Value::Integer(micros(since)));
        sql.push_str(&format!(" AND t.created_at >= ?{}", params.len()));
    }
    if let Some(until) = q.until {
        params.push(Value::Integer(micros(until)));
        sql.push_str(&format!(" AND t.created_at <= ?{}", params.len()));
    }
}

/// Scoped keyword recall: `(seq, entry, bm25 score)` best first (higher score is better).
fn keyword_recall(
    conn: &Connection,
    path: &Path,
    agent: &str,
    scope: &[ScopeRule],
    q: &RecallQuery,
    limit: usize,
) -> Result<Vec<(i64, MemoryEntry, f64)>, MemoryError> {
    let words = fts::words(agent, &q.text)?;
    // The scope tokens narrow the MATCH itself, so FTS5 ranks only rows in scope; the SQL
    // scope below still decides what is visible (defence in depth).
    let Some(expr) = fts::fts5_scoped_match(&words, scope) else {
        return Ok(Vec::new());
    };
    let mut params = vec![Value::Text(expr)];
    let mut sql = format!(
        "SELECT t.seq, {ENTRY_COLUMNS}, -bm25(memories_fts, {BM25_WEIGHTS}) AS score \
         FROM memories_fts f \
         JOIN memories t ON t.seq = f.rowid WHERE f.memories_fts MATCH ?1 AND "
    );
    push_scope(&mut sql, &mut params, scope);
    push_filters(&mut sql, &mut params, q);
    params.push(Value::Integer(i64::try_from(limit).unwrap_or(i64::MAX)));
    sql.push_str(&format!(
        " ORDER BY score DESC, t.seq LIMIT ?{}",
        params.len()
    ));
    let invalid = |e: rusqlite::Error| {
        if e.to_string().contains("fts5") {
            MemoryError::InvalidQuery {
                agent: agent.to_string(),
                query: q.text.chars().take(80).collect(),
                message: e.to_string(),
            }
        } else {
            sql_err(path)(e)
        }
    };
    let mut stmt = conn.prepare_cached(&sql).map_err(invalid)?;
    let rows = stmt
        .query_map(rusqlite::params_from_iter(params), |r| {
            let seq: i64 = r.get(0)?;
            let entry = entry_at(r, 1)?;
            Ok((seq, entry, r.get::<_, f64>(1 + ENTRY_COLUMN_COUNT)?))
        })
        .map_err(invalid)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(invalid)?;
    Ok(rows)
}

fn recent_recall(
    conn: &Connection,
    path: &Path,
    scope: &[ScopeRule],
    q: &RecallQuery,
) -> Result<Vec<RecallHit>, MemoryError> {
    let mut params = Vec::new();
    let mut sql = format!("SELECT {ENTRY_COLUMNS} FROM memories t WHERE ");
    push_scope(&mut sql, &mut params, scope);
    push_filters(&mut sql, &mut params, q);
    params.push(Value::Integer(i64::try_from(q.limit).unwrap_or(i64::MAX)));
    sql.push_str(&format!(
        " ORDER BY t.updated_at DESC, t.seq DESC LIMIT ?{}",
        params.len()
    ));
    let mut stmt = conn.prepare_cached(&sql).map_err(sql_err(path))?;
    let rows = stmt
        .query_map(rusqlite::params_from_iter(params), entry_from_row)
        .map_err(sql_err(path))?
        .map(|r| r.map(|entry| RecallHit { entry, score: 1.0 }))
        .collect::<Result<Vec<_>, _>>()
        .map_err(sql_err(path))?;
    Ok(rows)
}

fn sql_err(path: &Path) -> impl Fn(rusqlite::Error) -> MemoryError + '_ {
    sql(path)
}

/// Every row `query` answers for `params`, each read by `row` (a cached statement).
fn all_rows<T>(
    conn: &Connection,
    path: &Path,
    query: &str,
    params: &[Value],
    row: fn(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> Result<Vec<T>, MemoryError> {
    let mut stmt = conn.prepare_cached(query).map_err(sql(path))?;
    stmt.query_map(rusqlite::params_from_iter(params), row)
        .map_err(sql(path))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(sql(path))
}

fn entries(
    conn: &Connection,
    path: &Path,
    where_order: &str,
    params: &[Value],
) -> Result<Vec<MemoryEntry>, MemoryError> {
    all_rows(
        conn,
        path,
        &format!("SELECT {ENTRY_COLUMNS} FROM memories t {where_order}"),
        params,
        entry_from_row,
    )
}

/// The live row of `key`: its seq and version.
fn current_row(
    conn: &Connection,
    path: &Path,
    agent: &AgentId,
    key: &str,
) -> Result<Option<(i64, u64)>, MemoryError> {
    conn.prepare_cached("SELECT seq, version FROM memories WHERE agent_id = ?1 AND key = ?2")
        .and_then(|mut s| {
            s.query_row(params![agent.0, key], |r| {
                Ok((r.get(0)?, u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0)))
            })
            .optional()
        })
        .map_err(sql(path))
}

/// The id of the agent called `alias`, registered first when it is not there yet (an import
/// into a store that has not seen the agent).
fn agent_in(conn: &Connection, path: &Path, alias: &AgentAlias) -> Result<String, MemoryError> {
    conn.execute(
        "INSERT INTO agents (id, alias, backend, created_at) VALUES (?1, ?2, 'sqlite', ?3) \
         ON CONFLICT(alias) DO NOTHING",
        params![
            uuid::Uuid::new_v4().to_string(),
            alias.as_str(),
            micros(now())
        ],
    )
    .map_err(sql(path))?;
    conn.query_row(
        "SELECT id FROM agents WHERE alias = ?1",
        [alias.as_str()],
        |r| r.get(0),
    )
    .map_err(sql(path))
}

fn alias_of(conn: &Connection, path: &Path, agent: &AgentId) -> Result<String, MemoryError> {
    conn.query_row("SELECT alias FROM agents WHERE id = ?1", [&agent.0], |r| {
        r.get(0)
    })
    .optional()
    .map(|a| a.unwrap_or_else(|| agent.0.clone()))
    .map_err(sql(path))
}

/// The version the next write of `key` gets: one above everything the key ever had that is
/// still known (live or kept), so a key forgotten and written again continues its count.
fn next_version(
    conn: &Connection,
    path: &Path,
    agent: &AgentId,
    key: &str,
    current: u64,
) -> Result<u64, MemoryError> {
    let kept: i64 = conn
        .prepare_cached(
            "SELECT COALESCE(MAX(version), 0) FROM memory_versions WHERE agent_id = ?1 AND key = ?2",
        )
        .and_then(|mut s| s.query_row(params![agent.0, key], |r| r.get(0)))
        .map_err(sql(path))?;
    Ok(current.max(u64::try_from(kept).unwrap_or(0)) + 1)
}

/// Copies the live row `seq` into the history as `state`.
fn archive(
    conn: &Connection,
    path: &Path,
    seq: i64,
    state: VersionState,
    at: i64,
) -> Result<(), MemoryError> {
    conn.prepare_cached(
        "INSERT INTO memory_versions (agent_id, key, version, id, content, category, session, \
           created_at, updated_at, embedding, trust, prov_agent, prov_session, prov_channel, \
           prov_tool_call, prov_receipt, state, archived_at) \
         SELECT agent_id, key, version, id, content, category, session, created_at, updated_at, \
           embedding, trust, prov_agent, prov_session, prov_channel, prov_tool_call, prov_receipt, \
           ?2, ?3 FROM memories WHERE seq = ?1",
    )
    .and_then(|mut s| s.execute(params![seq, state.as_str(), at]))
    .map_err(sql(path))?;
    Ok(())
}

/// Keeps the newest `limit` kept versions of `key`.
fn prune(
    conn: &Connection,
    path: &Path,
    agent: &AgentId,
    key: &str,
    limit: u32,
) -> Result<(), MemoryError> {
    conn.prepare_cached(
        "DELETE FROM memory_versions WHERE agent_id = ?1 AND key = ?2 AND version <= \
           (SELECT version FROM memory_versions WHERE agent_id = ?1 AND key = ?2 \
            ORDER BY version DESC LIMIT 1 OFFSET ?3)",
    )
    .and_then(|mut s| s.execute(params![agent.0, key, i64::from(limit)]))
    .map_err(sql(path))?;
    Ok(())
}

/// Columns of a `memory_versions` row `v` in [`ENTRY_COLUMNS`] order, then state and
/// archived_at.
const VERSION_COLUMNS: &str = "v.id, (SELECT alias FROM agents WHERE id = v.agent_id), v.key, \
     v.content, v.category, v.session, v.created_at, v.updated_at, v.version, v.trust, \
     v.prov_agent, v.prov_session, v.prov_channel, v.prov_tool_call, v.prov_receipt, v.state, \
     v.archived_at";

fn version_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<MemoryVersion> {
    let state: String = r.get(ENTRY_COLUMN_COUNT)?;
    Ok(MemoryVersion {
        entry: entry_at(r, 0)?,
        state: VersionState::parse(&state).ok_or_else(|| {
            rusqlite::Error::FromSqlConversionFailure(
                ENTRY_COLUMN_COUNT,
                rusqlite::types::Type::Text,
                format!("unknown version state {state:?}").into(),
            )
        })?,
        archived_at: Some(instant(r.get(ENTRY_COLUMN_COUNT + 1)?)?),
    })
}

/// Kept versions of `agent` (one key, or every key), newest first per key.
fn kept_versions(
    conn: &Connection,
    path: &Path,
    agent: &AgentId,
    key: Option<&str>,
) -> Result<Vec<MemoryVersion>, MemoryError> {
    let (clause, params) = match key {
        Some(k) => (
            "WHERE v.agent_id = ?1 AND v.key = ?2 ORDER BY v.version DESC",
            vec![Value::Text(agent.0.clone()), Value::Text(k.to_string())],
        ),
        None => (
            "WHERE v.agent_id = ?1 ORDER BY v.key, v.version DESC",
            vec![Value::Text(agent.0.clone())],
        ),
    };
    all_rows(
        conn,
        path,
        &format!("SELECT {VERSION_COLUMNS} FROM memory_versions v {clause}"),
        &params,
        version_from_row,
    )
}

fn encode_vector(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub(crate) fn decode_vector(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Loads the stored vectors of `agents` that the index does not hold yet.
fn load_vectors(
    conn: &Connection,
    path: &Path,
    index: &VectorIndex,
    sync: &Mutex<VectorSync>,
    agents: &[AgentId],
) -> Result<(), MemoryError> {
    let mut sync = sync.lock().unwrap_or_else(|p| p.into_inner());
    sync.refresh(conn, path, index)?;
    for agent in agents {
        if index.has(agent) {
            continue;
        }
        // The version first: a write landing between the two reads makes the version stale,
        // so the next recall reloads (never the other way round).
        let version = agent_version(conn, path, agent)?;
        sync.versions.insert(agent.clone(), version);
        let mut stmt = conn
            .prepare_cached(
                "SELECT seq, category, session, created_at, embedding FROM memories \
                 WHERE agent_id = ?1 AND embedding IS NOT NULL",
            )
            .map_err(sql(path))?;
        let rows = stmt
            .query_map([&agent.0], |r| {
                let blob: Vec<u8> = r.get(4)?;
                Ok((
                    r.get::<_, i64>(0)?,
                    VecRow::new(r.get(1)?, r.get(2)?, r.get(3)?, &decode_vector(&blob)),
                ))
            })
            .map_err(sql(path))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(sql(path))?;
        index.load(
            agent.clone(),
            rows.into_iter()
                .filter_map(|(seq, row)| row.map(|r| (seq, r))),
        );
    }
    Ok(())
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
