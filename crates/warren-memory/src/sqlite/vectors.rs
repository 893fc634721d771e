//! The vectors of hybrid recall in the SQLite memory store (MEM-2): their encoding in the
//! file, their loading into this process's [`VectorIndex`], and [`VectorSync`], which tells
//! when another process wrote an agent's rows so its cached vectors are reloaded.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use rusqlite::{Connection, OptionalExtension};

use crate::entry::AgentId;
use crate::error::MemoryError;
use crate::hybrid::{VecRow, VectorIndex};

use super::rows::sql;

/// What the cached vectors of this process have seen of the file (MEM-2 hybrid recall across
/// processes). `PRAGMA data_version` changes only when ANOTHER connection committed, so a
/// recall pays one pragma when nothing foreign happened; otherwise each cached agent's
/// `vector_versions` row is compared with the version its vectors were loaded at, and agents
/// written elsewhere are reloaded.
#[derive(Default)]
pub(super) struct VectorSync {
    data_version: Option<i64>,
    pub(super) versions: HashMap<AgentId, i64>,
}

pub(super) fn agent_version(
    conn: &Connection,
    path: &Path,
    agent: &AgentId,
) -> Result<i64, MemoryError> {
    conn.prepare_cached("SELECT version FROM vector_versions WHERE agent_id = ?1")
        .and_then(|mut s| s.query_row([&agent.0], |r| r.get(0)).optional())
        .map(|v| v.unwrap_or(0))
        .map_err(sql(path))
}

impl VectorSync {
    /// Drops cached agents that another process wrote since they were loaded.
    pub(super) fn refresh(
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
    pub(super) fn own_write(
        &mut self,
        index: &VectorIndex,
        agent: &AgentId,
        new: i64,
        apply: impl FnOnce(),
    ) {
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

pub(super) fn encode_vector(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub(crate) fn decode_vector(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Loads the stored vectors of `agents` that the index does not hold yet.
pub(super) fn load_vectors(
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
