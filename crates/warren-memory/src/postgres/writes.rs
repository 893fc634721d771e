//! Versioned writes of the PostgreSQL memory store (issue 20 §4): the key's advisory lock,
//! archiving the replaced version, pruning kept versions, and the store and undo of a key.

use time::OffsetDateTime;
use tokio_postgres::Transaction;
use uuid::Uuid;
use warren_core::AgentAlias;

use crate::entry::{AgentId, MemoryEntry, MemoryVersion, NewEntry, VersionState, now};
use crate::error::MemoryError;
use crate::hybrid::VecRow;
use crate::sqlite::micros;
use crate::store::MemoryStore;

use super::*;

/// Versioned writes (issue 20 §4): each runs in one transaction on the writer connection that
/// first takes an advisory lock on the key, so writers of one key queue, in this process or
/// another, and every replaced version is archived.
impl PostgresStore {
    /// Takes the key's lock; the live row's seq and version.
    pub(super) async fn lock_key(
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
    pub(super) async fn next_version(
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
    pub(super) async fn archive(
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
    pub(super) async fn prune(
        &self,
        tx: &Transaction<'_>,
        agent: Uuid,
        key: &str,
    ) -> Result<(), MemoryError> {
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
    pub(super) async fn agent_in(
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

    pub(super) async fn alias_in(
        &self,
        tx: &Transaction<'_>,
        agent: Uuid,
    ) -> Result<String, MemoryError> {
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
    pub(super) async fn live_in(
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
    pub(super) async fn kept(
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

    /// [`MemoryStore::store_with_agent`]: a versioned write of `entry` under its key.
    pub(super) async fn store_entry(
        &self,
        agent: AgentId,
        entry: NewEntry,
    ) -> Result<MemoryEntry, MemoryError> {
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
    }

    /// [`MemoryStore::undo_for_agent`]: the key put back to an earlier version.
    pub(super) async fn undo(
        &self,
        agent: AgentId,
        key: String,
        to: Option<u64>,
    ) -> Result<MemoryEntry, MemoryError> {
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
            .map(|r| {
                r.try_get::<_, i64>(0)
                    .map(|v| u64::try_from(v).unwrap_or(0))
            })
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
    }
}
