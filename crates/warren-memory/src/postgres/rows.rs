//! Rows of the PostgreSQL memory store: entry and version decoding, and the scope and filter
//! predicate of recall (part of the `WHERE`, before `LIMIT`).

use time::OffsetDateTime;
use tokio_postgres::Row;
use uuid::Uuid;
use warren_core::AgentAlias;

use crate::entry::{
    AgentId, MemoryEntry, MemoryVersion, Provenance, RecallQuery, ScopeRule, Trust, VersionState,
};
use crate::error::MemoryError;
use crate::store::MemoryStore;

use super::*;

/// A `memory_versions` row `v` (joined with `a`) in [`ENTRY_COLUMNS`] order, then state and
/// archived_at.
pub(super) const VERSION_COLUMNS: &str = "v.id, a.alias, v.key, v.content, v.category, v.session, v.created_at, v.updated_at, \
     v.version, v.trust, v.prov_agent, v.prov_session, v.prov_channel, v.prov_tool_call, \
     v.prov_receipt, 0::BIGINT, v.state, v.archived_at";

pub(super) fn big(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub(super) fn limit_param(n: usize) -> Param {
    Box::new(i64::try_from(n).unwrap_or(i64::MAX))
}

impl PostgresStore {
    pub(super) fn uuid(&self, agent: &AgentId) -> Result<Uuid, MemoryError> {
        Uuid::parse_str(&agent.0).map_err(|e| MemoryError::Corrupt {
            location: self.location(),
            message: format!("agent id {:?} is not a UUID: {e}", agent.0),
        })
    }

    pub(super) fn entry(&self, r: &Row) -> Result<MemoryEntry, MemoryError> {
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
    pub(super) fn version(&self, r: &Row) -> Result<MemoryVersion, MemoryError> {
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

    pub(super) async fn entries(
        &self,
        tail: &str,
        params: &[Param],
    ) -> Result<Vec<MemoryEntry>, MemoryError> {
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
    pub(super) fn predicate(
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
}
