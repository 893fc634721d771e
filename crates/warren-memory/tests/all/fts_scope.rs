//! The scope-aware FTS index of the SQLite store (MEM-2/3/8): the scope tokens narrow the
//! MATCH itself, ranking is BM25 over key and content as before, a version-1 file is upgraded
//! in place with its rows, recall and attribution intact, and the index stays consistent
//! through upserts that move a row's category, forget, purge, import and rename.

use std::path::Path;

use pretty_assertions::assert_eq;
use rusqlite::{Connection, params};
use warren_core::AgentAlias;
use warren_memory::{
    AgentId, MemoryEntry, MemoryStore, NewEntry, RecallQuery, ScopeRule, SqliteStore,
};

type R = Result<(), Box<dyn std::error::Error>>;

/// The version-1 schema (2-column FTS index, no `scope` column, no `schema_version`), as
/// shipped before the index became scope-aware.
const V1_SCHEMA: &str = r#"
CREATE TABLE agents (
    id TEXT PRIMARY KEY, alias TEXT NOT NULL UNIQUE, backend TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE TABLE memories (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,
    agent_id TEXT NOT NULL REFERENCES agents(id), key TEXT NOT NULL, content TEXT NOT NULL,
    category TEXT NOT NULL, session TEXT, created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL, embedding BLOB, UNIQUE (agent_id, key)
);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE INDEX memories_agent_updated ON memories(agent_id, updated_at);
CREATE VIRTUAL TABLE memories_fts
    USING fts5(key, content, content='memories', content_rowid='seq');
CREATE TRIGGER memories_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts(rowid, key, content) VALUES (new.seq, new.key, new.content);
END;
CREATE TRIGGER memories_ad AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, key, content)
        VALUES ('delete', old.seq, old.key, old.content);
END;
CREATE TRIGGER memories_au AFTER UPDATE OF key, content ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, key, content)
        VALUES ('delete', old.seq, old.key, old.content);
    INSERT INTO memories_fts(rowid, key, content) VALUES (new.seq, new.key, new.content);
END;
"#;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const CATS: [&str; 3] = ["core", "notes", "decisions"];

/// A version-1 file with `agents` agents and `rows` rows over a small vocabulary, of varying
/// length when `vary` (BM25 scores then differ by term frequency and document length) or all
/// 12 words long.
fn v1_file(
    path: &Path,
    agents: usize,
    rows: usize,
    vary: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut conn = Connection::open(path)?;
    conn.execute_batch(V1_SCHEMA)?;
    let tx = conn.transaction()?;
    let ids: Vec<String> = (0..agents).map(ag).collect();
    for (i, id) in ids.iter().enumerate() {
        tx.execute(
            "INSERT INTO agents (id, alias, backend, created_at) VALUES (?1, ?2, 'sqlite', 0)",
            params![id, format!("ag{i}")],
        )?;
    }
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for n in 0..rows {
        let len = if vary { 1 + rng.below(30) } else { 12 };
        let words: Vec<String> = (0..len).map(|_| format!("w{}", rng.below(40))).collect();
        tx.execute(
            "INSERT INTO memories (id, agent_id, key, content, category, created_at, updated_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)",
            params![
                format!("row-{n}"),
                ids[n % agents],
                format!("k{n}"),
                words.join(" "),
                CATS[n % CATS.len()],
                1_700_000_000_000_000_i64 + n as i64
            ],
        )?;
    }
    tx.commit()?;
    Ok(())
}

fn alias(s: &str) -> Result<AgentAlias, Box<dyn std::error::Error>> {
    Ok(AgentAlias::new(s)?)
}

async fn id(store: &SqliteStore, a: &str) -> Result<AgentId, Box<dyn std::error::Error>> {
    Ok(store
        .agent_id(&alias(a)?, false)
        .await?
        .ok_or("agent not registered")?)
}

fn keys(hits: &[warren_memory::RecallHit]) -> Vec<String> {
    hits.iter()
        .map(|h| format!("{}/{}", h.entry.agent, h.entry.key))
        .collect()
}

/// The pre-upgrade query: unscoped MATCH ranked by FTS5's default BM25, scope in SQL only.
fn v1_recall(
    conn: &Connection,
    words: &str,
    scope: &[(String, Option<&str>)],
    limit: usize,
) -> rusqlite::Result<Vec<String>> {
    let mut out = Vec::new();
    let mut stmt = conn.prepare(
        "SELECT a.alias, t.key, t.agent_id, t.category FROM memories_fts f \
         JOIN memories t ON t.seq = f.rowid JOIN agents a ON a.id = t.agent_id \
         WHERE f.memories_fts MATCH ?1 ORDER BY f.rank, t.seq",
    )?;
    let mut rows = stmt.query([words])?;
    while let Some(r) = rows.next()? {
        let (agent_id, category): (String, String) = (r.get(2)?, r.get(3)?);
        let allowed = scope
            .iter()
            .any(|(a, c)| a == &agent_id && c.is_none_or(|c| c == category));
        if allowed && out.len() < limit {
            out.push(format!(
                "{}/{}",
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?
            ));
        }
    }
    Ok(out)
}

fn integrity(path: &Path) -> rusqlite::Result<()> {
    let conn = Connection::open(path)?;
    conn.execute(
        "INSERT INTO memories_fts(memories_fts, rank) VALUES ('integrity-check', 1)",
        [],
    )?;
    Ok(())
}

/// What version 1 answered for `queries` (top `limit`), captured before the upgrade.
fn v1_answers(
    path: &Path,
    queries: &[&str],
    limit: usize,
) -> Result<Vec<Vec<String>>, Box<dyn std::error::Error>> {
    let v1 = Connection::open(path)?;
    let scope_v1 = [(ag(0), None), (ag(2), Some("decisions"))];
    let mut before = Vec::new();
    for q in queries {
        let expr = warren_memory::fts::fts5_match(&warren_memory::fts::words("t", q)?);
        before.push(v1_recall(&v1, &expr, &scope_v1, limit)?);
    }
    Ok(before)
}

fn ag(i: usize) -> String {
    format!("00000000-0000-4000-8000-{i:012}")
}

const QUERIES: [&str; 6] = [
    "w1",
    "w3 w17",
    "w5 w6 w7",
    "w39 w0",
    "w2*",
    "w11 w12 w13 w14",
];

fn v1_scope(a0: &AgentId, a2: &AgentId) -> Vec<ScopeRule> {
    vec![
        ScopeRule {
            agent: a0.clone(),
            categories: None,
        },
        ScopeRule {
            agent: a2.clone(),
            categories: Some(vec!["decisions".into()]),
        },
    ]
}

/// Ranking is BM25 over key and content with weight 0 for the scope column. BM25's document
/// length still counts the two scope tokens of every row, so among rows of DIFFERENT lengths
/// near-tied scores can swap places compared with version 1 (the matching set is the same);
/// rows of equal length rank exactly as before. Both halves are checked here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgraded_ranking_matches_version_1_mem2() -> R {
    for vary in [false, true] {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("memory.db");
        v1_file(&path, 4, 600, vary)?;
        let top = v1_answers(&path, &QUERIES, 15)?;
        let all = v1_answers(&path, &QUERIES, 10_000)?;
        let store = SqliteStore::open(&path)?;
        let scope = v1_scope(&id(&store, "ag0").await?, &id(&store, "ag2").await?);
        for (i, q) in QUERIES.iter().enumerate() {
            let hits = store
                .recall_for_agents(scope.clone(), RecallQuery::new(*q, 15), None)
                .await?;
            if !vary {
                assert_eq!(
                    keys(&hits),
                    top[i],
                    "query {q:?}: same rows in the same order"
                );
            }
            let mut got = keys(
                &store
                    .recall_for_agents(scope.clone(), RecallQuery::new(*q, 10_000), None)
                    .await?,
            );
            let mut want = all[i].clone();
            got.sort();
            want.sort();
            assert!(!got.is_empty(), "{q}");
            assert_eq!(got, want, "query {q:?} (vary {vary}): same matching rows");
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_file_is_upgraded_in_place_with_rows_recall_and_attribution_mem2() -> R {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("memory.db");
    v1_file(&path, 4, 600, true)?;
    let before = v1_answers(&path, &QUERIES, 10_000)?;
    let store = SqliteStore::open(&path)?;
    let (a0, a2) = (id(&store, "ag0").await?, id(&store, "ag2").await?);
    assert_eq!(a0.as_str(), ag(0), "agent ids survive the upgrade");
    assert_eq!(
        store
            .registered_agents()
            .await?
            .iter()
            .map(|r| r.2)
            .sum::<u64>(),
        600,
        "every row survives"
    );
    let scope = v1_scope(&a0, &a2);
    let mut answers = Vec::new();
    for q in QUERIES {
        let hits = store
            .recall_for_agents(scope.clone(), RecallQuery::new(q, 15), None)
            .await?;
        assert!(!hits.is_empty(), "{q}");
        answers.push(keys(&hits));
        for h in &hits {
            assert!(
                h.entry.agent == "ag0"
                    || (h.entry.agent == "ag2" && h.entry.category == "decisions"),
                "{q}: {h:?}"
            );
        }
    }
    for (q, want) in QUERIES.iter().zip(&before) {
        let mut got = keys(
            &store
                .recall_for_agents(scope.clone(), RecallQuery::new(*q, 10_000), None)
                .await?,
        );
        let mut want = want.clone();
        got.sort();
        want.sort();
        assert_eq!(
            got, want,
            "query {q:?}: every matching row, with its agent, survives"
        );
    }

    integrity(&path)?;
    drop(store);

    // Idempotent: a second open finds the current version (3: versions and provenance) and
    // keeps everything.
    let store = SqliteStore::open(&path)?;
    let hits = store
        .recall_for_agents(scope.clone(), RecallQuery::new(QUERIES[0], 15), None)
        .await?;
    assert_eq!(keys(&hits), answers[0]);
    let conn = Connection::open(&path)?;
    let version: String = conn.query_row(
        "SELECT value FROM meta WHERE key = 'schema_version'",
        [],
        |r| r.get(0),
    )?;
    assert_eq!(version, "3");
    let fts_sql: String = conn.query_row(
        "SELECT sql FROM sqlite_master WHERE name = 'memories_fts'",
        [],
        |r| r.get(0),
    )?;
    assert!(fts_sql.contains("scope"), "{fts_sql}");
    // Writes after the upgrade are indexed with their scope.
    store
        .store_with_agent(
            a2.clone(),
            NewEntry::new("ag2", "fresh", "zebra crossing", Some("decisions"), None)?,
        )
        .await?;
    let hits = store
        .recall_for_agents(scope, RecallQuery::new("zebra", 5), None)
        .await?;
    assert_eq!(keys(&hits), vec!["ag2/fresh".to_string()]);
    integrity(&path)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scope_column_cannot_be_reached_from_query_text_mem2() -> R {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("memory.db");
    let store = SqliteStore::open(&path)?;
    let a = store.agent_id(&alias("a")?, true).await?.ok_or("no id")?;
    let b = store.agent_id(&alias("b")?, true).await?.ok_or("no id")?;
    store
        .store_with_agent(
            a.clone(),
            NewEntry::new("a", "mine", "my note", None, None)?,
        )
        .await?;
    store
        .store_with_agent(
            b.clone(),
            NewEntry::new("b", "theirs", "scope secret", None, None)?,
        )
        .await?;
    let hex = |s: &str| s.bytes().map(|x| format!("{x:02X}")).collect::<String>();
    let b_token = format!("a{}", hex(b.as_str()));
    let a_token = format!("a{}", hex(a.as_str()));
    let own = vec![ScopeRule {
        agent: a.clone(),
        categories: None,
    }];
    for q in [
        "scope:*".to_string(),
        "scope: secret".to_string(),
        format!("scope:{b_token}"),
        format!("{b_token} OR secret"),
        format!("{{scope}}:{b_token}"),
        format!("secret) OR scope:({b_token}"),
        format!("\" OR scope:{b_token} OR \""),
        format!("{a_token}*"),
        "a*".to_string(),
        "c*".to_string(),
    ] {
        let hits = store
            .recall_for_agents(own.clone(), RecallQuery::new(q.clone(), 50), None)
            .await?;
        assert!(
            hits.iter().all(|h| h.entry.agent == "a"),
            "query {q:?} leaked {:?}",
            keys(&hits)
        );
        // The scope tokens are not words of the row either: the own agent token finds nothing.
        if q.starts_with(&a_token) {
            assert_eq!(keys(&hits), Vec::<String>::new(), "{q}");
        }
    }
    // The words are real searches: B finds its own row with them.
    let hits = store
        .recall_for_agents(
            vec![ScopeRule {
                agent: b,
                categories: None,
            }],
            RecallQuery::new("scope: secret", 5),
            None,
        )
        .await?;
    assert_eq!(keys(&hits), vec!["b/theirs".to_string()]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_index_follows_category_moves_forget_purge_import_and_rename_mem3() -> R {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("memory.db");
    let store = SqliteStore::open(&path)?;
    let a = store.agent_id(&alias("a")?, true).await?.ok_or("no id")?;
    let b = store.agent_id(&alias("b")?, true).await?.ok_or("no id")?;
    let put = |agent: &AgentId, who: &str, key: &str, text: &str, cat: &str| {
        let e = NewEntry::new(who, key, text, Some(cat), None);
        let agent = agent.clone();
        let store = &store;
        async move { store.store_with_agent(agent, e?).await }
    };
    put(&b, "b", "d1", "budget approved", "decisions").await?;
    put(&b, "b", "p1", "budget gossip", "personal").await?;
    let grant = |agent: &AgentId| {
        vec![ScopeRule {
            agent: agent.clone(),
            categories: Some(vec!["decisions".into()]),
        }]
    };
    let recall = |scope: Vec<ScopeRule>, q: &'static str| {
        let store = &store;
        async move {
            store
                .recall_for_agents(scope, RecallQuery::new(q, 10), None)
                .await
                .map(|h| keys(&h))
        }
    };
    assert_eq!(recall(grant(&b), "budget").await?, vec!["b/d1".to_string()]);
    // An upsert that moves p1 into the granted category (and changes nothing else).
    put(&b, "b", "p1", "budget gossip", "decisions").await?;
    let mut got = recall(grant(&b), "budget").await?;
    got.sort();
    assert_eq!(got, vec!["b/d1".to_string(), "b/p1".to_string()]);
    // ... and back out of it.
    put(&b, "b", "p1", "budget gossip", "personal").await?;
    assert_eq!(recall(grant(&b), "budget").await?, vec!["b/d1".to_string()]);
    integrity(&path)?;
    // A plain UPDATE of the category alone (no upsert) re-indexes the row's scope too.
    Connection::open(&path)?.execute(
        "UPDATE memories SET category = 'decisions' WHERE key = 'p1'",
        [],
    )?;
    integrity(&path)?;
    let mut got = recall(grant(&b), "budget").await?;
    got.sort();
    assert_eq!(got, vec!["b/d1".to_string(), "b/p1".to_string()]);
    Connection::open(&path)?.execute(
        "UPDATE memories SET category = 'personal' WHERE key = 'p1'",
        [],
    )?;

    assert!(store.forget_for_agent(b.clone(), "d1".into()).await?);
    assert_eq!(recall(grant(&b), "budget").await?, Vec::<String>::new());
    integrity(&path)?;

    // Rename keeps the agent id, so its tokens and rows; export + purge + import moves rows.
    put(&a, "a", "own", "budget draft", "core").await?;
    assert!(store.rename_agent(alias("a")?, alias("z")?).await?);
    let own = vec![ScopeRule {
        agent: a.clone(),
        categories: None,
    }];
    assert_eq!(
        recall(own.clone(), "budget").await?,
        vec!["z/own".to_string()]
    );
    let rows: Vec<MemoryEntry> = store.export_agent(a.clone()).await?;
    assert_eq!(store.purge_agent(a.clone()).await?, 1);
    assert_eq!(recall(own, "budget").await?, Vec::<String>::new());
    integrity(&path)?;
    assert_eq!(store.import_agent(alias("y")?, rows).await?, 1);
    let y = id(&store, "y").await?;
    assert_eq!(
        recall(
            vec![ScopeRule {
                agent: y,
                categories: None
            }],
            "budget"
        )
        .await?,
        vec!["y/own".to_string()]
    );
    integrity(&path)?;
    Ok(())
}
