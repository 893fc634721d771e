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
        let norm = dot(v, v).sqrt();
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

/// Dot product in eight independent lanes, so the compiler can vectorise it.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0_f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Row metadata beside the vector matrix.
struct Meta {
    seq: i64,
    category: String,
    session: Option<String>,
    created_us: i64,
}

/// One agent's vectors: a contiguous matrix (row `i` at `data[i*dims..]`), so a scan walks
/// memory in order.
#[derive(Default)]
struct AgentVectors {
    dims: usize,
    data: Vec<f32>,
    meta: Vec<Meta>,
    pos: HashMap<i64, usize>,
}

impl AgentVectors {
    fn upsert(&mut self, seq: i64, row: VecRow) {
        if self.meta.is_empty() {
            self.dims = row.unit.len();
        }
        if row.unit.len() != self.dims {
            // A vector from another embedding model: leave it out rather than compare
            // incomparable vectors.
            self.remove(seq);
            return;
        }
        let meta = Meta {
            seq,
            category: row.category,
            session: row.session,
            created_us: row.created_us,
        };
        match self.pos.get(&seq) {
            Some(&i) => {
                self.data[i * self.dims..(i + 1) * self.dims].copy_from_slice(&row.unit);
                self.meta[i] = meta;
            }
            None => {
                self.pos.insert(seq, self.meta.len());
                self.data.extend_from_slice(&row.unit);
                self.meta.push(meta);
            }
        }
    }

    fn remove(&mut self, seq: i64) {
        let Some(i) = self.pos.remove(&seq) else {
            return;
        };
        let last = self.meta.len() - 1;
        if i != last {
            let (d, moved) = (self.dims, self.meta[last].seq);
            self.data.copy_within(last * d..(last + 1) * d, i * d);
            self.pos.insert(moved, i);
        }
        self.meta.swap_remove(i);
        self.data.truncate(last * self.dims);
    }
}

/// Per-agent vectors keyed by row sequence number.
#[derive(Default)]
pub struct VectorIndex {
    agents: Mutex<HashMap<AgentId, AgentVectors>>,
}

impl VectorIndex {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<AgentId, AgentVectors>) -> T) -> T {
        match self.agents.lock() {
            Ok(mut g) => f(&mut g),
            Err(p) => f(&mut p.into_inner()),
        }
    }

    pub fn has(&self, agent: &AgentId) -> bool {
        self.with(|m| m.contains_key(agent))
    }

    pub fn load(&self, agent: AgentId, rows: impl Iterator<Item = (i64, VecRow)>) {
        let mut vectors = AgentVectors::default();
        for (seq, row) in rows {
            vectors.upsert(seq, row);
        }
        self.with(|m| {
            m.insert(agent, vectors);
        });
    }

    /// Records a write (`Some`) or a delete / vector-less write (`None`) of a loaded agent.
    /// Agents not loaded yet are left alone: their first recall loads everything.
    pub fn update(&self, agent: &AgentId, seq: i64, row: Option<VecRow>) {
        self.with(|m| {
            if let Some(v) = m.get_mut(agent) {
                match row {
                    Some(r) => v.upsert(seq, r),
                    None => v.remove(seq),
                }
            }
        });
    }

    /// Drops every loaded agent (the embedder changed).
    pub fn clear(&self) {
        self.with(HashMap::clear);
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
        let mut out: Vec<(i64, f32)> = self.with(|m| {
            let mut out = Vec::new();
            for rule in scope {
                let Some(v) = m.get(&rule.agent) else {
                    continue;
                };
                if v.dims != qv.unit.len() {
                    continue;
                }
                let plain = rule.categories.is_none()
                    && q.session.is_none()
                    && since.is_none()
                    && until.is_none();
                for (i, row) in v.data.chunks_exact(v.dims.max(1)).enumerate() {
                    if !plain {
                        let meta = &v.meta[i];
                        if !rule
                            .categories
                            .as_ref()
                            .is_none_or(|c| c.iter().any(|x| x == &meta.category))
                            || q.session
                                .as_ref()
                                .is_some_and(|s| meta.session.as_ref() != Some(s))
                            || since.is_some_and(|t| meta.created_us < t)
                            || until.is_some_and(|t| meta.created_us > t)
                        {
                            continue;
                        }
                    }
                    let sim = dot(row, &qv.unit);
                    if sim > 0.0 {
                        out.push((v.meta[i].seq, sim.min(1.0)));
                    }
                }
            }
            out
        });
        let by_score = |a: &(i64, f32), b: &(i64, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if out.len() > k && k > 0 {
            out.select_nth_unstable_by(k - 1, by_score);
            out.truncate(k);
        }
        out.sort_by(by_score);
        out.truncate(k);
        out.into_iter().map(|(s, x)| (s, f64::from(x))).collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn row(v: &[f32]) -> Option<VecRow> {
        VecRow::new("core".into(), None, 0, v)
    }

    #[test]
    fn swap_remove_keeps_every_other_vector_findable() {
        let index = VectorIndex::default();
        let a = AgentId("a".into());
        index.load(a.clone(), std::iter::empty());
        for (seq, v) in [
            (1, [1.0, 0.0, 0.0]),
            (2, [0.0, 1.0, 0.0]),
            (3, [0.0, 0.0, 1.0]),
        ] {
            index.update(&a, seq, row(&v));
        }
        index.update(&a, 1, None);
        index.update(&a, 2, row(&[0.0, 0.0, 1.0])); // overwrite in place
        let scope = [ScopeRule {
            agent: a.clone(),
            categories: None,
        }];
        let q = RecallQuery::new("x", 5);
        let seqs = |v: &[f32]| -> Vec<i64> {
            index
                .nearest(&scope, &q, v, 5)
                .into_iter()
                .map(|h| h.0)
                .collect()
        };
        assert_eq!(seqs(&[0.0, 0.0, 1.0]), vec![2, 3]);
        assert_eq!(seqs(&[1.0, 0.0, 0.0]), Vec::<i64>::new());
        assert_eq!(
            seqs(&[0.0, 0.0, 1.0, 0.0]),
            Vec::<i64>::new(),
            "other dimension"
        );
    }
}
