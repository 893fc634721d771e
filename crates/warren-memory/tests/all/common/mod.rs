//! Shared fixtures: a temporary install with a config of agents and grants, on one backend.
//! PostgreSQL fixtures use a fresh schema each, dropped when the fixture is dropped.

#![allow(dead_code)]

use std::sync::Arc;

use warren_config::schema::{AgentConfig, MemoryBackendKind, MemoryGrant};
use warren_config::{Config, InstallRoot, Secret};
use warren_core::AgentAlias;
use warren_memory::{
    Memory, MemoryStores, MemoryVersion, NewEntry, PostgresStore, RecallQuery, VersionState,
    create_memory_for_agent,
};

pub type R = Result<(), Box<dyn std::error::Error>>;

/// `WARREN_TEST_POSTGRES_URL`, when the PostgreSQL suites should run (else "skipped: set
/// WARREN_TEST_POSTGRES_URL" once in the output).
pub use warren_testkit::postgres_url;

/// SQLite always; PostgreSQL when the server is configured.
pub fn shared_kinds() -> Vec<MemoryBackendKind> {
    let mut kinds = vec![MemoryBackendKind::Sqlite];
    if postgres_url().is_some() {
        kinds.push(MemoryBackendKind::Postgres);
    }
    kinds
}

pub struct Fixture {
    _dir: tempfile::TempDir,
    pub root: InstallRoot,
    pub config: Config,
    pub stores: MemoryStores,
    pub kind: MemoryBackendKind,
    pg_schema: Option<(String, String)>,
}

pub fn grant(agent: &str) -> MemoryGrant {
    MemoryGrant::All(agent.parse().unwrap_or_else(|e| panic!("{e}")))
}

pub fn cats(agent: &str, categories: &[&str]) -> MemoryGrant {
    MemoryGrant::Categories {
        agent: agent.parse().unwrap_or_else(|e| panic!("{e}")),
        categories: categories.iter().map(|c| c.to_string()).collect(),
    }
}

impl Fixture {
    /// `agents`: alias and its `read_memory_from`, all on `kind`.
    pub fn new(
        kind: MemoryBackendKind,
        agents: &[(&str, Vec<MemoryGrant>)],
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let root = InstallRoot::at(dir.path().join("warren"));
        let mut config = Config::default();
        config.memory.backend = kind;
        let mut pg_schema = None;
        if kind == MemoryBackendKind::Postgres {
            let url = postgres_url().ok_or("WARREN_TEST_POSTGRES_URL is not set")?;
            let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
            config.memory.postgres.url = Some(Secret::new(url.clone()));
            config.memory.postgres.schema = schema.clone();
            pg_schema = Some((url, schema));
        }
        if kind == MemoryBackendKind::Qdrant {
            crate::qdrant::configure(&mut config)?;
        }
        for (alias, grants) in agents {
            let mut agent = AgentConfig::default();
            agent.memory.read_memory_from = grants.clone();
            config
                .agents
                .insert(alias.parse().unwrap_or_else(|e| panic!("{e}")), agent);
        }
        Ok(Self {
            stores: MemoryStores::new(root.clone()),
            _dir: dir,
            root,
            config,
            kind,
            pg_schema,
        })
    }

    pub async fn mem(&self, alias: &str) -> Result<Arc<dyn Memory>, Box<dyn std::error::Error>> {
        Ok(create_memory_for_agent(&self.stores, &self.config, &AgentAlias::new(alias)?).await?)
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let Some((url, schema)) = self.pg_schema.take() else {
            return;
        };
        // A thread of its own: Drop may run inside a runtime, which cannot block on another.
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                if let Ok(store) = PostgresStore::new(&url, &schema) {
                    let _ = store.drop_schema().await;
                }
            });
        })
        .join();
    }
}

pub fn entry(agent: &str, key: &str, content: &str, category: &str) -> NewEntry {
    match NewEntry::new(agent, key, content, Some(category), None) {
        Ok(e) => e,
        Err(e) => panic!("test entry {key}: {e}"),
    }
}

/// Recall as `(agent, key)` pairs, sorted.
pub async fn seen(
    mem: &dyn Memory,
    text: &str,
    limit: usize,
) -> Result<Vec<(String, String)>, Box<dyn std::error::Error>> {
    let mut out: Vec<(String, String)> = mem
        .recall(RecallQuery::new(text, limit))
        .await?
        .into_iter()
        .map(|h| (h.entry.agent.into(), h.entry.key))
        .collect();
    out.sort();
    Ok(out)
}

pub fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = items
        .iter()
        .map(|(a, k)| (a.to_string(), k.to_string()))
        .collect();
    v.sort();
    v
}

/// Asserts that `r` failed with an error whose text names every one of `needles`.
pub fn assert_refused<T, E: std::fmt::Display>(r: Result<T, E>, needles: &[&str]) {
    let err = r.err().map(|e| e.to_string());
    assert!(
        err.as_deref()
            .is_some_and(|e| needles.iter().all(|n| e.contains(n))),
        "{err:?}"
    );
}

/// Each version of a history as (version, state, content), in the order given.
pub fn summary(history: &[MemoryVersion]) -> Vec<(u64, VersionState, &str)> {
    history
        .iter()
        .map(|v| (v.entry.version, v.state, v.entry.content.as_str()))
        .collect()
}
