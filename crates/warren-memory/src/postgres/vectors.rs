//! Hybrid recall's vectors in the PostgreSQL memory store (MEM-2): keyword recall, the
//! per-agent vector versions that tell when another process wrote, and loading an agent's
//! vectors into this process's index.

use std::collections::HashMap;

use time::OffsetDateTime;
use uuid::Uuid;

use crate::entry::{AgentId, MemoryEntry, RecallQuery, ScopeRule};
use crate::error::MemoryError;
use crate::fts;
use crate::hybrid::VecRow;
use crate::sqlite::micros;

use super::*;

impl PostgresStore {
    /// Scoped keyword recall: `(seq, entry, rank)` best first.
    pub(super) async fn keyword(
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

    pub(super) fn known(&self) -> std::sync::MutexGuard<'_, HashMap<AgentId, i64>> {
        self.versions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current `vector_versions` of `agents` (0 for an agent never written).
    pub(super) async fn current_versions(
        &self,
        agents: &[&AgentId],
    ) -> Result<Vec<i64>, MemoryError> {
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
    pub(super) async fn own_write(
        &self,
        agent: &AgentId,
        apply: impl FnOnce(),
    ) -> Result<(), MemoryError> {
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
    pub(super) async fn load_vectors(&self, scope: &[ScopeRule]) -> Result<(), MemoryError> {
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
}
