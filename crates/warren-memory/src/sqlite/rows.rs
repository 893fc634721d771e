//! Rows of the SQLite memory store (MEM-2, issue 20): entry and version decoding, the
//! scope and filter clauses of recall (the grant scope is part of the `WHERE`), keyword and
//! recent recall, the agents table, and the versions kept per key.

use std::path::Path;

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params};
use time::OffsetDateTime;
use warren_config::sqlite;
use warren_core::AgentAlias;

use crate::entry::{
    AgentId, MemoryEntry, MemoryVersion, Provenance, RecallHit, RecallQuery, ScopeRule, Trust,
    VersionState, now,
};
use crate::error::MemoryError;
use crate::fts;

use super::schema::BM25_WEIGHTS;

/// Columns every entry query selects, in [`entry_from_row`] order; `t` is the memories row.
pub(super) const ENTRY_COLUMNS: &str = "t.id, (SELECT alias FROM agents WHERE id = t.agent_id), t.key, \
     t.content, t.category, t.session, t.created_at, t.updated_at, t.version, t.trust, \
     t.prov_agent, t.prov_session, t.prov_channel, t.prov_tool_call, t.prov_receipt";

/// How many columns [`ENTRY_COLUMNS`] selects.
pub(super) const ENTRY_COLUMN_COUNT: usize = 15;

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

pub(super) fn registered(
    conn: &Connection,
    path: &Path,
) -> Result<Vec<(String, String, u64)>, MemoryError> {
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
pub(super) fn sql(path: &Path) -> impl Fn(rusqlite::Error) -> MemoryError + '_ {
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

pub(super) fn instant(us: i64) -> rusqlite::Result<OffsetDateTime> {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(us) * 1000).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Integer, Box::new(e))
    })
}

/// The writer's alias in column `i`: a row whose alias is missing or not an alias does not
/// decode (a hand-edited store is reported, never carried on as a string).
pub(super) fn alias_at(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<AgentAlias> {
    let text: Option<String> = r.get(i)?;
    AgentAlias::new(text.unwrap_or_default()).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, Box::new(e))
    })
}

pub(super) fn entry_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<MemoryEntry> {
    entry_at(r, 0)
}

/// The [`ENTRY_COLUMNS`] starting at column `b`.
pub(super) fn entry_at(r: &rusqlite::Row<'_>, b: usize) -> rusqlite::Result<MemoryEntry> {
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
pub(super) fn push_scope(sql: &mut String, params: &mut Vec<Value>, scope: &[ScopeRule]) {
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

pub(super) fn push_filters(sql: &mut String, params: &mut Vec<Value>, q: &RecallQuery) {
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
pub(super) fn keyword_recall(
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

pub(super) fn recent_recall(
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

pub(super) fn sql_err(path: &Path) -> impl Fn(rusqlite::Error) -> MemoryError + '_ {
    sql(path)
}

/// Every row `query` answers for `params`, each read by `row` (a cached statement).
pub(super) fn all_rows<T>(
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

pub(super) fn entries(
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
pub(super) fn current_row(
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
pub(super) fn agent_in(
    conn: &Connection,
    path: &Path,
    alias: &AgentAlias,
) -> Result<String, MemoryError> {
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

pub(super) fn alias_of(
    conn: &Connection,
    path: &Path,
    agent: &AgentId,
) -> Result<String, MemoryError> {
    conn.query_row("SELECT alias FROM agents WHERE id = ?1", [&agent.0], |r| {
        r.get(0)
    })
    .optional()
    .map(|a| a.unwrap_or_else(|| agent.0.clone()))
    .map_err(sql(path))
}

/// The version the next write of `key` gets: one above everything the key ever had that is
/// still known (live or kept), so a key forgotten and written again continues its count.
pub(super) fn next_version(
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
pub(super) fn archive(
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
pub(super) fn prune(
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
pub(super) const VERSION_COLUMNS: &str = "v.id, (SELECT alias FROM agents WHERE id = v.agent_id), v.key, \
     v.content, v.category, v.session, v.created_at, v.updated_at, v.version, v.trust, \
     v.prov_agent, v.prov_session, v.prov_channel, v.prov_tool_call, v.prov_receipt, v.state, \
     v.archived_at";

pub(super) fn version_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<MemoryVersion> {
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
pub(super) fn kept_versions(
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
