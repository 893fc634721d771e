//! The per-agent vector cache of the SQLite store follows writes made by ANOTHER process (or
//! another store instance on the same file): a vector stored, re-embedded or forgotten
//! elsewhere is seen by the next hybrid recall, without a restart (MEM-2, issue 5). The same
//! scenario runs on PostgreSQL when `WARREN_TEST_POSTGRES_URL` is set.

use warren_core::AgentAlias;
use warren_memory::{MemoryStore, NewEntry, PostgresStore, RecallQuery, ScopeRule, SqliteStore};

type R = Result<(), Box<dyn std::error::Error>>;

const DIMS: usize = 8;

fn axis(i: usize) -> Vec<f32> {
    let mut v = vec![0.0; DIMS];
    v[i] = 1.0;
    v
}

fn entry(key: &str, content: &str, dim: usize) -> Result<NewEntry, Box<dyn std::error::Error>> {
    let mut e = NewEntry::new("main", key, content, None, None)?;
    e.embedding = Some(axis(dim));
    Ok(e)
}

/// Keys of a hybrid recall whose keywords match nothing: only vector hits come back.
async fn vector_hits(
    store: &dyn MemoryStore,
    scope: &[ScopeRule],
    dim: usize,
) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let hits = store
        .recall_for_agents(
            scope.to_vec(),
            RecallQuery::new("nothingmatchesthis", 5),
            Some(axis(dim)),
        )
        .await?;
    Ok(hits.into_iter().map(|h| h.entry.key).collect())
}

#[tokio::test]
async fn writes_by_another_store_on_the_same_file_reach_the_cache_before_recall() -> R {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("memory").join("brain.db");
    let a = SqliteStore::open(&path)?;
    let b = SqliteStore::open(&path)?;
    scenario(&a, &b).await
}

#[tokio::test]
async fn writes_by_another_postgres_store_reach_the_cache_before_recall() -> R {
    let Some(url) = warren_testkit::postgres_url() else {
        return Ok(());
    };
    let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    let a = PostgresStore::new(&url, &schema)?;
    let b = PostgresStore::new(&url, &schema)?;
    let result = scenario(&a, &b).await;
    a.drop_schema().await?;
    result
}

async fn scenario(a: &dyn MemoryStore, b: &dyn MemoryStore) -> R {
    let alias = AgentAlias::new("main")?;
    let id = a.agent_id(&alias, true).await?.ok_or("no agent id")?;
    let id_b = b.agent_id(&alias, false).await?.ok_or("no agent id in b")?;
    let scope = vec![ScopeRule {
        agent: id.clone(),
        categories: None,
    }];

    a.store_with_agent(id.clone(), entry("k1", "alpha", 1)?)
        .await?;
    a.store_with_agent(id.clone(), entry("k2", "beta", 2)?)
        .await?;
    // A loads its cache.
    assert_eq!(vector_hits(a, &scope, 1).await?, ["k1"]);

    // B stores a new row: A's next recall sees it.
    b.store_with_agent(id_b.clone(), entry("k3", "gamma", 3)?)
        .await?;
    assert_eq!(vector_hits(a, &scope, 3).await?, ["k3"]);

    // B re-embeds k1: A follows (the old vector no longer matches).
    b.store_with_agent(id_b.clone(), entry("k1", "alpha", 4)?)
        .await?;
    assert_eq!(vector_hits(a, &scope, 4).await?, ["k1"]);
    assert!(vector_hits(a, &scope, 1).await?.is_empty());

    // B forgets k3: A stops returning it.
    assert!(b.forget_for_agent(id_b.clone(), "k3".into()).await?);
    assert!(vector_hits(a, &scope, 3).await?.is_empty());

    // A's own writes still update its cache in place, also right after a foreign write.
    b.store_with_agent(id_b.clone(), entry("k6", "zeta", 6)?)
        .await?;
    a.store_with_agent(id.clone(), entry("k5", "epsilon", 5)?)
        .await?;
    assert_eq!(vector_hits(a, &scope, 5).await?, ["k5"]);
    assert_eq!(vector_hits(a, &scope, 6).await?, ["k6"]);
    assert_eq!(vector_hits(a, &scope, 2).await?, ["k2"]);
    Ok(())
}
