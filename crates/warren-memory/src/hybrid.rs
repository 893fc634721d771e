//! Hybrid recall (MEM-2 with an embedder): the in-memory vector index of the SQLite store and
//! the merge of keyword (BM25) and vector (cosine) scores.
//!
//! Vectors are loaded from the store once per agent, on that agent's first hybrid recall, and
//! kept up to date by every write and delete; a query never re-reads BLOBs. Each vector keeps
//! its row's category, session and creation time, so the scope (agent, category grant) and
//! the filters apply BEFORE the top-k cut, exactly as in the keyword SQL.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::entry::{AgentId, MemoryEntry, RecallHit, RecallQuery, ScopeRule};

/// Default weight of the vector score (the keyword score gets `1 - weight`).
pub const DEFAULT_VECTOR_WEIGHT: f64 = 0.7;

/// One stored vector, unit length, with what the filters need.
#[derive(Debug, Clone)]
pub struct VecRow {
    pub category: String,
    pub session: Option<String>,
    pub created_us: i64,
    pub unit: Vec<f32>,
}

impl VecRow {
    pub fn new(
        category: String,
        session: Option<String>,
        created_us: i64,
        v: &[f32],
    ) -> Option<Self> {
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        if !norm.is_finite() || norm == 0.0 {
            return None;
        }
        Some(Self {
            category,
            session,
            created_us,
            unit: v.iter().map(|x| x / norm).collect(),
        })
    }
}

/// Per-agent vectors keyed by row sequence number.
#[derive(Default)]
pub struct VectorIndex {
    agents: Mutex<HashMap<AgentId, HashMap<i64, VecRow>>>,
}

impl VectorIndex {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<AgentId, HashMap<i64, VecRow>>) -> T) -> T {
        match self.agents.lock() {
            Ok(mut g) => f(&mut g),
            Err(p) => f(&mut p.into_inner()),
        }
    }

    pub fn has(&self, agent: &AgentId) -> bool {
        self.with(|m| m.contains_key(agent))
    }

    pub fn load(&self, agent: AgentId, rows: impl Iterator<Item = (i64, VecRow)>) {
        let rows: HashMap<i64, VecRow> = rows.collect();
        self.with(|m| {
            m.insert(agent, rows);
        });
    }

    /// Records a write (`Some`) or a delete / vector-less write (`None`) of a loaded agent.
    /// Agents not loaded yet are left alone: their first recall loads everything.
    pub fn update(&self, agent: &AgentId, seq: i64, row: Option<VecRow>) {
        self.with(|m| {
            if let Some(rows) = m.get_mut(agent) {
                match row {
                    Some(r) => {
                        rows.insert(seq, r);
                    }
                    None => {
                        rows.remove(&seq);
                    }
                }
            }
        });
    }

    pub fn forget_agent(&self, agent: &AgentId) {
        self.with(|m| {
            m.remove(agent);
        });
    }

    /// The `k` rows most similar to `query` among those `scope` and `q`'s filters allow:
    /// `(seq, similarity)` with similarity in (0, 1], best first.
    pub fn nearest(
        &self,
        scope: &[ScopeRule],
        q: &RecallQuery,
        query: &[f32],
        k: usize,
    ) -> Vec<(i64, f64)> {
        let Some(qv) = VecRow::new(String::new(), None, 0, query) else {
            return Vec::new();
        };
        let since = q.since.map(crate::sqlite::micros);
        let until = q.until.map(crate::sqlite::micros);
        let mut out: Vec<(i64, f64)> = self.with(|m| {
            let mut out = Vec::new();
            for rule in scope {
                let Some(rows) = m.get(&rule.agent) else {
                    continue;
                };
                for (seq, row) in rows {
                    if row.unit.len() != qv.unit.len()
                        || !rule
                            .categories
                            .as_ref()
                            .is_none_or(|c| c.iter().any(|x| x == &row.category))
                        || q.session
                            .as_ref()
                            .is_some_and(|s| row.session.as_ref() != Some(s))
                        || since.is_some_and(|t| row.created_us < t)
                        || until.is_some_and(|t| row.created_us > t)
                    {
                        continue;
                    }
                    let sim: f32 = row.unit.iter().zip(&qv.unit).map(|(a, b)| a * b).sum();
                    if sim > 0.0 {
                        out.push((*seq, f64::from(sim.min(1.0))));
                    }
                }
            }
            out
        });
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        out.truncate(k);
        out
    }
}

/// Keyword hits with scores normalised by the best one into (0, 1].
pub fn keyword_only(rows: Vec<(i64, MemoryEntry, f64)>) -> Vec<RecallHit> {
    let max = rows.iter().map(|r| r.2).fold(0.0_f64, f64::max);
    rows.into_iter()
        .map(|(_, entry, s)| RecallHit {
            entry,
            score: if max > 0.0 { s / max } else { 0.0 },
        })
        .collect()
}

/// Merges keyword hits `(seq, entry, bm25)` with vector hits `(seq, similarity)`; `entries`
/// holds the rows of vector hits the keyword side did not return. Final score =
/// weighted mean over the modalities a row appears in (a row found by one side only is not
/// penalised); ties broken by sequence number.
pub fn merge(
    keyword: Vec<(i64, MemoryEntry, f64)>,
    vector: Vec<(i64, f64)>,
    mut entries: HashMap<i64, MemoryEntry>,
    vector_weight: f64,
    limit: usize,
) -> Vec<RecallHit> {
    let kw = 1.0 - vector_weight;
    let max = keyword.iter().map(|r| r.2).fold(0.0_f64, f64::max);
    let mut scored: HashMap<i64, (f64, f64)> = HashMap::new(); // seq -> (weighted sum, weights)
    for (seq, entry, s) in keyword {
        let norm = if max > 0.0 { s / max } else { 0.0 };
        let e = scored.entry(seq).or_default();
        e.0 += kw * norm;
        e.1 += kw;
        entries.insert(seq, entry);
    }
    for (seq, sim) in vector {
        let e = scored.entry(seq).or_default();
        e.0 += vector_weight * sim;
        e.1 += vector_weight;
    }
    let mut ranked: Vec<(i64, f64)> = scored
        .into_iter()
        .map(|(seq, (sum, w))| (seq, if w > 0.0 { sum / w } else { 0.0 }))
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    ranked
        .into_iter()
        .filter_map(|(seq, score)| entries.remove(&seq).map(|entry| RecallHit { entry, score }))
        .take(limit)
        .collect()
}
