//! The memory tools end to end over a real SQLite store (and PostgreSQL when
//! WARREN_TEST_POSTGRES_URL is set): isolation against crafted FTS syntax (MEM-2), bad input,
//! and a PostgreSQL server that is down.

use std::collections::HashMap;
use std::sync::Arc;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use warren_config::schema::{AgentConfig, MemoryBackendKind};
use warren_config::{Config, InstallRoot, Secret};
use warren_core::AgentAlias;
use warren_memory::{MemoryStores, PostgresStore, create_memory_for_agent};
use warren_tools::{Tool, ToolError, memory_tools};

type R = Result<(), Box<dyn std::error::Error>>;

struct Agents {
    _dir: tempfile::TempDir,
    tools: HashMap<String, HashMap<String, Arc<dyn Tool>>>,
    pg: Option<(String, String)>,
}

impl Agents {
    async fn new(
        kind: MemoryBackendKind,
        pg_url: Option<&str>,
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let root = InstallRoot::at(dir.path().join("w"));
        let mut config = Config::default();
        config.memory.backend = kind;
        let mut pg = None;
        if let Some(url) = pg_url {
            let schema = format!("tools_{}", std::process::id());
            config.memory.postgres.url = Some(Secret::new(url));
            config.memory.postgres.schema = schema.clone();
            pg = Some((url.to_string(), schema));
        }
        for a in ["alice", "bob"] {
            config.agents.insert(a.parse()?, AgentConfig::default());
        }
        let stores = MemoryStores::new(root);
        let mut tools = HashMap::new();
        for a in ["alice", "bob"] {
            let mem = create_memory_for_agent(&stores, &config, &AgentAlias::new(a)?).await?;
            let by_name = memory_tools(mem)
                .into_iter()
                .map(|t| (t.name().to_string(), t))
                .collect();
            tools.insert(a.to_string(), by_name);
        }
        Ok(Self {
            _dir: dir,
            tools,
            pg,
        })
    }

    async fn call(&self, agent: &str, tool: &str, args: Value) -> Result<Value, ToolError> {
        let t = self
            .tools
            .get(agent)
            .and_then(|m| m.get(tool))
            .ok_or_else(|| ToolError::Failed(format!("no tool {tool} for {agent}")))?;
        t.execute(args).await.map(|o| o.content)
    }

    async fn drop_pg(&self) {
        if let Some((url, schema)) = &self.pg
            && let Ok(store) = PostgresStore::new(url, schema)
        {
            let _ = store.drop_schema().await;
        }
    }
}

fn agents_of(results: &Value) -> Vec<String> {
    results["results"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|h| h["agent"].as_str().unwrap_or("?").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The attack of issue 5: alice's `memory_recall` with FTS5 operators, column filters,
/// quotes and wildcards. Each query does find bob's row when bob runs it (the syntax is live
/// input), yet alice only ever sees her own rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recall_tool_with_crafted_fts_syntax_cannot_see_siblings_rows_mem2() -> R {
    let mut kinds = vec![(MemoryBackendKind::Sqlite, None)];
    let url = warren_testkit::postgres_url();
    if let Some(u) = url.as_deref() {
        kinds.push((MemoryBackendKind::Postgres, Some(u)));
    }
    for (kind, url) in kinds {
        let ag = Agents::new(kind, url).await?;
        ag.call(
            "alice",
            "memory_store",
            json!({"key": "todo", "content": "water the plants"}),
        )
        .await?;
        ag.call(
            "bob",
            "memory_store",
            json!({"key": "vault", "content": "the vault password is swordfish", "category": "secrets"}),
        )
        .await?;
        for q in [
            "*",
            "password OR plants",
            "\"password\"",
            "NEAR(vault password, 5)",
            "agent_id:*",
            "agent_id: password",
            "content:swordfish",
            "{key content}:vault",
            "sword*",
            "vault) OR (plants",
            "plants\" OR \"vault",
            "password AND NOT plants",
        ] {
            let got = ag
                .call("alice", "memory_recall", json!({"query": q, "limit": 50}))
                .await?;
            let who = agents_of(&got);
            assert!(
                who.iter().all(|a| a == "alice"),
                "{kind:?} {q:?} leaked: {got}"
            );
        }
        let bob = ag
            .call(
                "bob",
                "memory_recall",
                json!({"query": "password OR plants"}),
            )
            .await?;
        assert_eq!(agents_of(&bob), vec!["bob"], "{kind:?}");
        // Nor can alice delete bob's row by key.
        let out = ag
            .call("alice", "memory_forget", json!({"key": "vault"}))
            .await?;
        assert_eq!(out["forgotten"], json!(false));
        let still = ag
            .call("bob", "memory_recall", json!({"query": "vault"}))
            .await?;
        assert_eq!(agents_of(&still), vec!["bob"], "{kind:?}");
        ag.drop_pg().await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_clear_invalid_arguments_error() -> R {
    let ag = Agents::new(MemoryBackendKind::Sqlite, None).await?;
    let huge = "x".repeat(warren_memory::MAX_CONTENT_BYTES + 1);
    let cases = [
        (
            "memory_store",
            json!({"key": "k", "content": huge}),
            "limit is 65536",
        ),
        (
            "memory_store",
            json!({"key": "k", "content": "   "}),
            "is empty",
        ),
        (
            "memory_store",
            json!({"key": "", "content": "c"}),
            "key must not be empty",
        ),
        (
            "memory_store",
            json!({"key": "k", "content": 5}),
            "'content' must be a string",
        ),
        (
            "memory_store",
            json!({"key": "k\u{0}x", "content": "c"}),
            "control characters",
        ),
        ("memory_store", json!(["k", "c"]), "must be a JSON object"),
        (
            "memory_recall",
            json!({"query": "\"()\""}),
            "invalid recall query",
        ),
        (
            "memory_recall",
            json!({"query": "a", "limit": 0}),
            "'limit'",
        ),
        (
            "memory_recall",
            json!({"query": "a", "since": "yesterday"}),
            "RFC 3339",
        ),
        ("memory_forget", json!({"key": " "}), "must not be empty"),
    ];
    for (tool, args, needle) in cases {
        match ag.call("alice", tool, args.clone()).await {
            Err(ToolError::InvalidArguments(msg)) => {
                assert!(msg.contains(needle), "{tool} {args}: {msg}")
            }
            other => panic!("{tool} {args}: expected invalid arguments, got {other:?}"),
        }
    }
    // Invalid UTF-8 never reaches a tool: it fails at JSON decoding, before any call.
    assert!(serde_json::from_slice::<Value>(b"{\"key\":\"\xff\xfe\"}").is_err());
    Ok(())
}

/// A server that is down: building the agent's memory succeeds (connection is lazy), each
/// memory call fails with the URL minus its password, and nothing panics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_down_names_the_url_without_password() -> R {
    let url = "postgres://warren:hunter2@127.0.0.1:1/memory";
    let ag = Agents::new(MemoryBackendKind::Postgres, Some(url)).await?;
    let err = ag
        .call("alice", "memory_recall", json!({"query": "x"}))
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("postgres://warren@127.0.0.1:1/memory"),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn none_backend_says_nothing_was_kept() -> R {
    let ag = Agents::new(MemoryBackendKind::None, None).await?;
    let out = ag
        .call("alice", "memory_store", json!({"key": "k", "content": "c"}))
        .await?;
    assert_eq!(out["stored"], json!(false));
    let got = ag
        .call("alice", "memory_recall", json!({"query": "c"}))
        .await?;
    assert_eq!(got, json!({"results": []}));
    Ok(())
}
