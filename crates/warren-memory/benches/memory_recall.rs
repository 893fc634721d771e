//! Memory benchmarks (MEM-2), each as a ratio against a baseline measured in the same run on
//! the same SQLite file:
//!
//! 1. Scoped keyword recall top-10 (an agent with a plain and a category grant, through
//!    `AgentScopedMemory`, async, on the blocking pool) vs the same raw FTS5 query on a direct
//!    connection; 20 agents, 10k and 100k rows. Targets: ratio ≤ 1.5; p50 ≤ 0.5 ms at 10k.
//! 2. Hybrid recall (384-dimension vectors, in-process embedder so the network is not timed)
//!    vs raw FTS5 + a brute-force cosine scan of the same vectors in a flat array. Target:
//!    p50 ≤ 2 ms at 10k rows over 20 agents; the worst case (one agent owning all 10k rows,
//!    every vector in scope) is printed for information.
//! 3. Store throughput through the scoped handle vs raw autocommit INSERTs into the same schema.
//! 4. Qdrant recall (issue 20 §5): the same 10k rows and vectors in a Qdrant collection (Qdrant's
//!    own engine from `qdrant-edge-py`, behind the test kit's local REST front), keyword top-10
//!    through `AgentScopedMemory` over `QdrantStore`, p50 beside SQLite's hybrid p50 of part 2
//!    (printed for information: the front is a Python HTTP server, not a Qdrant server).
//!
//! Run: `cargo bench -p warren-memory --bench memory_recall`. Exits 1 when a target is missed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::{Connection, params};
use warren_config::InstallRoot;
use warren_core::AgentAlias;
use warren_memory::{
    AgentScopedMemory, Embedder, Grant, MemFuture, Memory, MemoryStore, NewEntry, QdrantStore,
    RecallQuery, SqliteStore,
};

const DIMS: usize = 384;
const AGENTS: usize = 20;
const VOCAB: u64 = 5000;
const ITER: usize = 400;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Skewed word choice: low indexes are common, like natural text.
    fn word(&mut self) -> String {
        format!("w{}", (VOCAB as f64 * self.unit().powi(3)) as u64)
    }
    fn vector(&mut self) -> Vec<f32> {
        (0..DIMS).map(|_| self.unit() as f32 - 0.5).collect()
    }
}

struct FixedEmbedder(Vec<f32>);
impl Embedder for FixedEmbedder {
    fn describe(&self) -> String {
        "in-process fixed vector".into()
    }
    fn embed(&self, texts: Vec<String>) -> MemFuture<'_, Vec<Vec<f32>>> {
        let v = self.0.clone();
        Box::pin(async move { Ok(texts.iter().map(|_| v.clone()).collect()) })
    }
}

fn p50(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn alias(i: usize) -> Result<AgentAlias, Box<dyn std::error::Error>> {
    Ok(AgentAlias::new(format!("a{i}"))?)
}

/// Registers the agents through the store, then bulk-loads `rows` rows (raw SQL, one
/// transaction), spread over `owners` agents, with vectors when `vectors`.
async fn seed(
    store: &SqliteStore,
    path: &std::path::Path,
    rows: usize,
    owners: usize,
    vectors: bool,
    rng: &mut Rng,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut ids = Vec::new();
    for i in 0..AGENTS {
        ids.push(
            store
                .agent_id(&alias(i)?, true)
                .await?
                .ok_or("no id")?
                .as_str()
                .to_string(),
        );
    }
    let mut conn = Connection::open(path)?;
    let tx = conn.transaction()?;
    {
        let mut stmt = tx.prepare(
            "INSERT INTO memories (id, agent_id, key, content, category, created_at, updated_at, embedding) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7)",
        )?;
        for n in 0..rows {
            let owner = n % owners;
            let content: Vec<String> = (0..12).map(|_| rng.word()).collect();
            let blob: Option<Vec<u8>> =
                vectors.then(|| rng.vector().iter().flat_map(|x| x.to_le_bytes()).collect());
            stmt.execute(params![
                uuid::Uuid::new_v4().to_string(),
                ids[owner],
                format!("k{n}"),
                content.join(" "),
                ["c1", "c2", "core"][n % 3],
                1_700_000_000_000_000_i64 + n as i64,
                blob
            ])?;
        }
    }
    tx.commit()?;
    Ok(())
}

fn raw_fts(conn: &Connection, q: &str, limit: usize) -> rusqlite::Result<usize> {
    let mut stmt = conn.prepare_cached(
        "SELECT t.id, t.agent_id, t.key, t.content, t.category, t.session, t.created_at, t.updated_at, -f.rank \
         FROM memories_fts f JOIN memories t ON t.seq = f.rowid WHERE f.memories_fts MATCH ?1 \
         ORDER BY f.rank LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![q, limit as i64], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, String>(3)?))
    })?;
    Ok(rows.count())
}

/// Agent a0, reading all of a1 and category c1 of a2.
fn scoped(
    store: Arc<SqliteStore>,
    embedder: Option<Arc<dyn Embedder>>,
) -> Result<AgentScopedMemory, Box<dyn std::error::Error>> {
    let grants = vec![
        Grant {
            agent: alias(1)?,
            categories: None,
        },
        Grant {
            agent: alias(2)?,
            categories: Some(vec!["c1".into()]),
        },
    ];
    Ok(AgentScopedMemory::new(store, alias(0)?, grants, embedder))
}

/// Bulk-loads the rows `seed` would make (same generator) into the Qdrant collection, in the
/// payload layout of `QdrantStore`.
fn seed_qdrant(
    url: &str,
    collection: &str,
    rows: usize,
    rng: &mut Rng,
) -> Result<(), Box<dyn std::error::Error>> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into();
    let mut batch = Vec::new();
    for n in 0..rows {
        let content: Vec<String> = (0..12).map(|_| rng.word()).collect();
        let at = 1_700_000_000_000_000_i64 + n as i64;
        let category = ["c1", "c2", "core"][n % 3];
        batch.push(serde_json::json!({
            "id": uuid::Uuid::new_v4().to_string(),
            "vector": rng.vector(),
            "payload": {
                "agent_id": format!("a{}", n % AGENTS),
                "key": format!("k{n}"),
                "content": content.join(" "),
                "category": category,
                "created_at": at,
                "updated_at": at,
                "version": 1,
                "provenance": {},
            }
        }));
        if batch.len() == 500 || n + 1 == rows {
            let body = serde_json::json!({ "points": std::mem::take(&mut batch) }).to_string();
            agent
                .put(&format!("{url}/collections/{collection}/points?wait=true"))
                .header("Content-Type", "application/json")
                .send(body.as_bytes())?;
        }
    }
    Ok(())
}

struct Report {
    failed: bool,
}

impl Report {
    fn line(&mut self, what: &str, value: f64, target: f64, unit: &str) {
        let ok = value <= target;
        self.failed |= !ok;
        println!(
            "{what:<58} {value:>8.3}{unit:<3} (target ≤ {target}{unit}) {}",
            if ok { "ok" } else { "MISSED" }
        );
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut report = Report { failed: false };
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let base = std::env::var_os("BENCH_DIR").unwrap_or_else(|| std::env::temp_dir().into());

    // 1. Keyword recall, 10k and 100k rows.
    for rows in [10_000, 100_000] {
        let dir = tempfile::tempdir_in(&base)?;
        let root = InstallRoot::at(dir.path());
        let path = root.memory_db();
        let store = Arc::new(SqliteStore::open(&path)?);
        rt.block_on(seed(&store, &path, rows, AGENTS, false, &mut rng))?;
        let mem = scoped(Arc::clone(&store), None)?;
        let raw = Connection::open(&path)?;
        let query = "w40 w41";
        let match_expr = "\"w40\" OR \"w41\"";
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for i in 0..ITER + 20 {
            let t = Instant::now();
            let hits = rt.block_on(mem.recall(RecallQuery::new(query, 10)))?;
            let scoped_t = t.elapsed();
            let t = Instant::now();
            let n = raw_fts(&raw, match_expr, 10)?;
            let raw_t = t.elapsed();
            if i >= 20 {
                a.push(scoped_t);
                b.push(raw_t);
            }
            assert!(!hits.is_empty() && n > 0);
        }
        let (sa, sb) = (p50(a), p50(b));
        println!(
            "keyword top-10, {rows} rows / {AGENTS} agents: scoped p50 {:.3} ms, raw FTS5 p50 {:.3} ms",
            ms(sa),
            ms(sb)
        );
        report.line(
            &format!("  scoped / raw FTS5 ratio ({rows} rows)"),
            sa.as_secs_f64() / sb.as_secs_f64(),
            1.5,
            "x",
        );
        if rows == 10_000 {
            report.line("  scoped keyword p50 at 10k rows", ms(sa), 0.5, "ms");
        }
    }

    // 2. Hybrid recall at 10k rows: 20 agents, then one agent owning everything.
    for owners in [AGENTS, 1] {
        let dir = tempfile::tempdir_in(&base)?;
        let root = InstallRoot::at(dir.path());
        let path = root.memory_db();
        let store = Arc::new(SqliteStore::open(&path)?);
        rt.block_on(seed(&store, &path, 10_000, owners, true, &mut rng))?;
        let qv = rng.vector();
        let mem = scoped(
            Arc::clone(&store),
            Some(Arc::new(FixedEmbedder(qv.clone()))),
        )?;
        // Baseline: the same FTS query plus a flat brute-force cosine over the same vectors.
        let raw = Connection::open(&path)?;
        let flat: Vec<f32> = {
            let mut stmt = raw.prepare(
                "SELECT embedding FROM memories WHERE agent_id IN \
                 (SELECT id FROM agents WHERE alias IN ('a0','a1','a2'))",
            )?;
            let blobs = stmt.query_map([], |r| r.get::<_, Vec<u8>>(0))?;
            let mut flat = Vec::new();
            for b in blobs {
                flat.extend(
                    b?.chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                );
            }
            flat
        };
        rt.block_on(mem.recall(RecallQuery::new("w40 w41", 10)))?; // loads the vectors once
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..ITER {
            let t = Instant::now();
            let hits = rt.block_on(mem.recall(RecallQuery::new("w40 w41", 10)))?;
            a.push(t.elapsed());
            let t = Instant::now();
            raw_fts(&raw, "\"w40\" OR \"w41\"", 20)?;
            let mut sims: Vec<(usize, f32)> = flat
                .chunks_exact(DIMS)
                .enumerate()
                .map(|(i, v)| (i, v.iter().zip(&qv).map(|(x, y)| x * y).sum::<f32>()))
                .collect();
            sims.sort_by(|x, y| y.1.total_cmp(&x.1));
            sims.truncate(20);
            b.push(t.elapsed());
            assert!(!hits.is_empty());
        }
        let (sa, sb) = (p50(a), p50(b));
        let vectors = flat.len() / DIMS;
        println!(
            "hybrid top-10, 10k rows / {owners} agent(s), {vectors} vectors in scope: p50 {:.3} ms, raw FTS5 + flat scan p50 {:.3} ms, ratio {:.2}x",
            ms(sa),
            ms(sb),
            sa.as_secs_f64() / sb.as_secs_f64()
        );
        if owners == AGENTS {
            report.line("  hybrid p50 at 10k rows (20 agents)", ms(sa), 2.0, "ms");
        } else {
            // Worst case, for information: every vector in scope (no target in issue 5).
            println!(
                "  hybrid p50 at 10k rows, all in one agent's scope: {:.3} ms (no target)",
                ms(sa)
            );
        }
    }

    // 4. Qdrant recall at 10k rows, beside SQLite's hybrid recall on the same rows.
    let (sqlite_p50, qv) = {
        let dir = tempfile::tempdir_in(&base)?;
        let root = InstallRoot::at(dir.path());
        let path = root.memory_db();
        let store = Arc::new(SqliteStore::open(&path)?);
        let mut seed_rng = Rng(0x5eed);
        rt.block_on(seed(&store, &path, 10_000, AGENTS, true, &mut seed_rng))?;
        let qv = rng.vector();
        let mem = scoped(store, Some(Arc::new(FixedEmbedder(qv.clone()))))?;
        rt.block_on(mem.recall(RecallQuery::new("w40 w41", 10)))?;
        let mut a = Vec::new();
        for _ in 0..ITER {
            let t = Instant::now();
            rt.block_on(mem.recall(RecallQuery::new("w40 w41", 10)))?;
            a.push(t.elapsed());
        }
        (p50(a), qv)
    };
    {
        let engine = warren_testkit::qdrant::QdrantEngine::start(None)?;
        let config = warren_config::schema::memory_backends::QdrantConfig {
            url: Some(engine.url()),
            ..Default::default()
        };
        let embedder: Arc<dyn Embedder> = Arc::new(FixedEmbedder(qv.clone()));
        let store = Arc::new(QdrantStore::new(&config, Some(Arc::clone(&embedder)))?);
        // The first write creates the collection and its payload indexes; the rest is bulk.
        let first = rt
            .block_on(store.agent_id(&alias(0)?, true))?
            .ok_or("no id")?;
        rt.block_on(
            store.store_with_agent(first, NewEntry::new("a0", "seed", "seed", None, None)?),
        )?;
        let mut seed_rng = Rng(0x5eed);
        seed_qdrant(&engine.url(), &config.collection, 10_000, &mut seed_rng)?;
        let mem = AgentScopedMemory::new(
            store,
            alias(0)?,
            vec![
                Grant {
                    agent: alias(1)?,
                    categories: None,
                },
                Grant {
                    agent: alias(2)?,
                    categories: Some(vec!["c1".into()]),
                },
            ],
            Some(embedder),
        );
        rt.block_on(mem.recall(RecallQuery::new("w40 w41", 10)))?;
        let mut a = Vec::new();
        for _ in 0..ITER / 4 {
            let t = Instant::now();
            let hits = rt.block_on(mem.recall(RecallQuery::new("w40 w41", 10)))?;
            a.push(t.elapsed());
            assert!(!hits.is_empty());
        }
        let qa = p50(a);
        println!(
            "qdrant top-10, 10k rows / {AGENTS} agents (engine behind a local Python REST front): p50 {:.3} ms; SQLite hybrid p50 {:.3} ms on the same rows; ratio {:.1}x (no target)",
            ms(qa),
            ms(sqlite_p50),
            qa.as_secs_f64() / sqlite_p50.as_secs_f64()
        );
    }

    // 3. Store throughput.
    let n = 2000;
    let dir = tempfile::tempdir_in(&base)?;
    let root = InstallRoot::at(dir.path());
    let store = Arc::new(SqliteStore::open(&root.memory_db())?);
    let mem = scoped(Arc::clone(&store), None)?;
    let contents: Vec<String> = (0..n)
        .map(|_| (0..12).map(|_| rng.word()).collect::<Vec<_>>().join(" "))
        .collect();
    let t = Instant::now();
    for (i, c) in contents.iter().enumerate() {
        rt.block_on(mem.store(NewEntry::new("a0", &format!("k{i}"), c, None, None)?))?;
    }
    let scoped_t = t.elapsed();
    let raw_path = dir.path().join("raw.db");
    let raw_store = SqliteStore::open(&raw_path)?;
    let id = rt
        .block_on(raw_store.agent_id(&alias(0)?, true))?
        .ok_or("no id")?;
    drop(raw_store);
    let raw = Connection::open(&raw_path)?;
    raw.pragma_update(None, "journal_mode", "WAL")?;
    raw.pragma_update(None, "synchronous", "NORMAL")?;
    let t = Instant::now();
    for (i, c) in contents.iter().enumerate() {
        raw.prepare_cached(
            "INSERT INTO memories (id, agent_id, key, content, category, created_at, updated_at) \
             VALUES (?1, ?2, ?3, ?4, 'core', ?5, ?5)",
        )?
        .execute(params![
            uuid::Uuid::new_v4().to_string(),
            id.as_str(),
            format!("k{i}"),
            c,
            i as i64
        ])?;
    }
    let raw_t = t.elapsed();
    println!(
        "store: scoped {:.0} rows/s, raw INSERT {:.0} rows/s",
        n as f64 / scoped_t.as_secs_f64(),
        n as f64 / raw_t.as_secs_f64()
    );
    report.line(
        "  store time scoped / raw INSERT",
        scoped_t.as_secs_f64() / raw_t.as_secs_f64(),
        3.0,
        "x",
    );

    // 4. Overwrites (issue 20 §4): each one archives the replaced version and trims the key's
    // history, against a raw UPDATE of the same rows.
    let t = Instant::now();
    for (i, c) in contents.iter().rev().enumerate() {
        rt.block_on(mem.store(NewEntry::new("a0", &format!("k{i}"), c, None, None)?))?;
    }
    let versioned_t = t.elapsed();
    let t = Instant::now();
    for (i, c) in contents.iter().rev().enumerate() {
        raw.prepare_cached(
            "UPDATE memories SET content = ?2, updated_at = ?3 WHERE agent_id = ?1 AND key = ?4",
        )?
        .execute(params![id.as_str(), c, (n + i) as i64, format!("k{i}")])?;
    }
    let raw_update_t = t.elapsed();
    println!(
        "overwrite: versioned {:.0} rows/s, raw UPDATE {:.0} rows/s",
        n as f64 / versioned_t.as_secs_f64(),
        n as f64 / raw_update_t.as_secs_f64()
    );
    report.line(
        "  overwrite time versioned / raw UPDATE",
        versioned_t.as_secs_f64() / raw_update_t.as_secs_f64(),
        2.0,
        "x",
    );
    if report.failed {
        std::process::exit(1);
    }
    Ok(())
}
