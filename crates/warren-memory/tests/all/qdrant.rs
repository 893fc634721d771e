//! The Qdrant backend (MEM-5, issue 20 §1) against Qdrant's own engine (`qdrant-edge-py`
//! behind the test kit's REST front, with an API key): round trip and versions, scoped recall
//! that forbidden rows cannot crowd out, a crash between the upsert of a new version and the
//! archiving of the old one (a real child killed at the named failpoint), history and undo,
//! lifecycle (rename, export, purge, import), the MEM-9 lock and the health check. The grant-graph property test runs on Qdrant
//! too (`scope_prop`).

use crate::common;

use std::process::{Command, Stdio};
use std::sync::OnceLock;

use common::{Fixture, R, cats, entry, grant, pairs, seen};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use warren_config::Config;
use warren_config::Secret;
use warren_config::schema::{EmbedderKind, MemoryBackendKind};
use warren_core::AgentAlias;
use warren_memory::{MemoryStores, RecallQuery};
use warren_testkit::qdrant::{FakeEmbeddings, QdrantEngine};

const DIMS: usize = 64;
const KEY: &str = "test-qdrant-key";

/// One engine and one embeddings server for the whole test binary; each fixture gets its own
/// collection.
fn engine() -> &'static QdrantEngine {
    static ENGINE: OnceLock<QdrantEngine> = OnceLock::new();
    ENGINE.get_or_init(|| QdrantEngine::start(Some(KEY)).unwrap_or_else(|e| panic!("{e}")))
}

fn embeddings() -> &'static FakeEmbeddings {
    static E: OnceLock<FakeEmbeddings> = OnceLock::new();
    E.get_or_init(|| FakeEmbeddings::start(DIMS).unwrap_or_else(|e| panic!("{e}")))
}

/// Points `config` at the engine, a fresh collection and the hash embedder.
pub fn configure(config: &mut Config) -> Result<(), Box<dyn std::error::Error>> {
    let collection = format!("t_{}", uuid::Uuid::new_v4().simple());
    configure_at(
        config,
        &engine().url(),
        &collection,
        &embeddings().base_url(),
    );
    Ok(())
}

fn configure_at(config: &mut Config, url: &str, collection: &str, embedder: &str) {
    config.memory.qdrant.url = Some(url.to_string());
    config.memory.qdrant.collection = collection.to_string();
    config.memory.qdrant.api_key = Some(Secret::new(KEY));
    config.memory.embedder.kind = EmbedderKind::Openai;
    config.memory.embedder.base_url = Some(embedder.to_string());
    config.memory.embedder.model = Some("hash".into());
}

/// A raw request to the engine, as the tests' own witness of what is stored.
fn rest(method: &str, path: &str, body: Value) -> Value {
    let url = format!("{}{path}", engine().url());
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let response = if method == "GET" {
        agent.get(&url).header("api-key", KEY).call()
    } else {
        agent
            .post(&url)
            .header("api-key", KEY)
            .header("Content-Type", "application/json")
            .send(body.to_string().as_bytes())
    };
    let text = response
        .and_then(|r| r.into_body().read_to_string())
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    serde_json::from_str::<Value>(&text).unwrap_or_else(|e| panic!("{text}: {e}"))["result"].clone()
}

fn collection(fx: &Fixture) -> String {
    fx.config.memory.qdrant.collection.clone()
}

/// The live points of a key (kept versions have `state` replaced or forgotten).
fn live_points_of_key(fx: &Fixture, agent: &str, key: &str) -> Vec<Value> {
    points_of_key(fx, agent, key)
        .into_iter()
        .filter(|p| p["payload"]["state"] == "current")
        .collect()
}

fn points_of_key(fx: &Fixture, agent: &str, key: &str) -> Vec<Value> {
    rest(
        "POST",
        &format!("/collections/{}/points/scroll", collection(fx)),
        json!({"filter": {"must": [
            {"key": "agent_id", "match": {"value": agent}},
            {"key": "key", "match": {"value": key}}
        ]}, "limit": 100, "with_payload": true}),
    )["points"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[tokio::test]
async fn store_get_recall_overwrite_forget_on_the_engine_mem5() -> R {
    let fx = Fixture::new(MemoryBackendKind::Qdrant, &[("a", vec![]), ("b", vec![])])?;
    let a = fx.mem("a").await?;
    let b = fx.mem("b").await?;
    a.store(entry("a", "pet", "the cat sleeps on the red sofa", "core"))
        .await?;
    a.store(entry("a", "car", "a blue car in the garage", "notes"))
        .await?;
    b.store(entry("b", "pet", "the dog of b", "core")).await?;

    // The payload is the issue's layout, attributed by alias.
    let stored = points_of_key(&fx, "a", "pet");
    assert_eq!(stored.len(), 1);
    let p = &stored[0]["payload"];
    assert_eq!(
        (
            p["agent_id"].as_str(),
            p["key"].as_str(),
            p["category"].as_str()
        ),
        (Some("a"), Some("pet"), Some("core"))
    );
    assert!(p["created_at"].is_i64() && p["content"].is_string(), "{p}");

    let got = a.get("pet".into()).await?.ok_or("no pet")?;
    assert_eq!(
        (got.content.as_str(), got.version),
        ("the cat sleeps on the red sofa", 1)
    );
    // Keyword recall sees only a's rows; the engine's full-text index matches the word.
    assert_eq!(seen(a.as_ref(), "cat", 10).await?, pairs(&[("a", "pet")]));
    assert_eq!(
        seen(a.as_ref(), "garage", 10).await?,
        pairs(&[("a", "car")])
    );
    assert_eq!(seen(b.as_ref(), "cat", 10).await?, pairs(&[]));
    assert_eq!(seen(a.as_ref(), "*", 10).await?.len(), 2);

    // Overwrite: one point, version 2, created_at kept.
    a.store(entry("a", "pet", "the cat moved to the garden", "core"))
        .await?;
    let again = a.get("pet".into()).await?.ok_or("no pet")?;
    assert_eq!(again.version, 2);
    assert_eq!(again.created_at, got.created_at);
    assert_eq!((again.id.as_str(), again.version), (got.id.as_str(), 2));
    assert_eq!(live_points_of_key(&fx, "a", "pet").len(), 1);
    // The replaced version is kept as history, out of every read.
    assert_eq!(points_of_key(&fx, "a", "pet").len(), 2);
    assert_eq!(seen(a.as_ref(), "sofa", 10).await?, pairs(&[]));
    assert_eq!(a.count().await?, 2);

    // Compare-and-set: a writer that read version 1 loses, nothing is written.
    let stale = entry("a", "pet", "stale write", "core").expecting(Some(1));
    common::assert_refused(a.store(stale).await, &["version 2"]);
    assert_eq!(
        a.get("pet".into()).await?.map(|e| e.content),
        Some("the cat moved to the garden".to_string())
    );

    assert!(a.forget("pet".into()).await?);
    assert!(!a.forget("pet".into()).await?);
    assert_eq!(a.get("pet".into()).await?, None);
    // b's row with the same key is untouched.
    assert_eq!(
        b.get("pet".into()).await?.map(|e| e.content),
        Some("the dog of b".to_string())
    );
    Ok(())
}

/// MEM-5: recall over-fetches and post-filters by payload, and fetches again while forbidden
/// rows fill the pages. 80 rows of a category the reader may not see rank above the 3 rows it
/// may see; the first page the engine returns holds none of the allowed rows (shown below with
/// a raw query), so a single over-fetch without refill would answer nothing.
#[tokio::test]
async fn forbidden_rows_never_crowd_out_allowed_ones_mem5() -> R {
    let fx = Fixture::new(
        MemoryBackendKind::Qdrant,
        &[
            ("r", vec![cats("w", &["c1"])]),
            ("w", vec![]),
            ("x", vec![]),
        ],
    )?;
    let w = fx.mem("w").await?;
    let x = fx.mem("x").await?;
    for i in 0..80 {
        w.store(entry("w", &format!("f{i}"), "apple", "c2")).await?;
    }
    for i in 0..20 {
        x.store(entry("x", &format!("x{i}"), "apple", "core"))
            .await?;
    }
    for i in 0..3 {
        w.store(entry("w", &format!("a{i}"), "apple pie crust", "c1"))
            .await?;
    }
    // The attack without the refill: the engine's best 32 (the first page) for the reader's
    // agents hold only forbidden rows.
    let vector = warren_testkit::qdrant::hash_vector("apple", DIMS);
    let page = rest(
        "POST",
        &format!("/collections/{}/points/query", collection(&fx)),
        json!({"query": vector, "limit": 32, "with_payload": true,
               "filter": {"must": [{"key": "agent_id", "match": {"any": ["r", "w"]}}]}}),
    );
    let first: Vec<&str> = page["points"]
        .as_array()
        .ok_or("no points")?
        .iter()
        .filter_map(|p| p["payload"]["category"].as_str())
        .collect();
    assert_eq!(first.len(), 32);
    assert!(first.iter().all(|c| *c == "c2"), "{first:?}");

    let r = fx.mem("r").await?;
    assert_eq!(
        seen(r.as_ref(), "apple", 3).await?,
        pairs(&[("w", "a0"), ("w", "a1"), ("w", "a2")])
    );
    // And never a forbidden row, whatever the limit.
    let all = seen(r.as_ref(), "apple", 200).await?;
    assert_eq!(all, pairs(&[("w", "a0"), ("w", "a1"), ("w", "a2")]));
    // A plain grant sees everything of w, nothing of x.
    let fx2 = Fixture::new(
        MemoryBackendKind::Qdrant,
        &[("r", vec![grant("w")]), ("w", vec![])],
    )?;
    let w2 = fx2.mem("w").await?;
    w2.store(entry("w", "k", "apple", "c2")).await?;
    assert_eq!(
        seen(fx2.mem("r").await?.as_ref(), "apple", 5).await?,
        pairs(&[("w", "k")])
    );
    Ok(())
}

/// Child half of the crash test: writes the new version of `k` with the failpoint armed.
#[test]
fn crash_child() {
    let Ok(spec) = std::env::var("WARREN_QDRANT_CRASH_CHILD") else {
        return;
    };
    let _failpoints = warren_config::failpoint::init_from_env();
    let mut parts = spec.split('|');
    let (url, collection, embedder) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut config = Config::default();
        config.memory.backend = MemoryBackendKind::Qdrant;
        configure_at(&mut config, url, collection, embedder);
        config.agents.insert(
            "a".parse().unwrap_or_else(|e| panic!("{e}")),
            Default::default(),
        );
        let stores = MemoryStores::new(warren_config::InstallRoot::at(dir.path()));
        let a = warren_memory::create_memory_for_agent(
            &stores,
            &config,
            &AgentAlias::new("a").unwrap_or_else(|e| panic!("{e}")),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        a.store(entry("a", "k", "second version", "core"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        panic!(
            "the failpoint {} was not reached",
            warren_memory::qdrant::FAILPOINT_AFTER_UPSERT
        );
    });
}

/// A crash between the upsert of the new version and the archiving of the old one loses
/// nothing: the child is killed there (SIGABRT at the failpoint), both versions are live in
/// the collection, and every read shows the new one once. (Delete-then-insert, the reference's
/// order, would have left no version of the key at a crash between its two steps.)
#[tokio::test]
async fn crash_between_upsert_and_archiving_the_old_version_loses_nothing() -> R {
    use std::os::unix::process::ExitStatusExt;
    let fx = Fixture::new(MemoryBackendKind::Qdrant, &[("a", vec![])])?;
    let a = fx.mem("a").await?;
    a.store(entry("a", "k", "first version", "core")).await?;
    a.store(entry("a", "other", "unrelated first", "core"))
        .await?;

    let out = Command::new(std::env::current_exe()?)
        .args([
            "qdrant::crash_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            "WARREN_QDRANT_CRASH_CHILD",
            format!(
                "{}|{}|{}",
                engine().url(),
                collection(&fx),
                embeddings().base_url()
            ),
        )
        .env(
            "FAILPOINTS",
            format!("{}=return", warren_memory::qdrant::FAILPOINT_AFTER_UPSERT),
        )
        .stdin(Stdio::null())
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(6), "{stderr}");
    assert!(
        stderr.contains(warren_memory::qdrant::FAILPOINT_AFTER_UPSERT),
        "{stderr}"
    );
    // Both versions are live: the crash came between the two steps.
    assert_eq!(live_points_of_key(&fx, "a", "k").len(), 2);

    let got = a.get("k".into()).await?.ok_or("the key was lost")?;
    assert_eq!((got.content.as_str(), got.version), ("second version", 2));
    assert_eq!(seen(a.as_ref(), "version", 10).await?, pairs(&[("a", "k")]));
    assert_eq!(
        seen(a.as_ref(), "first", 10).await?,
        pairs(&[("a", "other")])
    );
    let hits = a.recall(RecallQuery::new("*", 10)).await?;
    assert_eq!(hits.len(), 2, "{hits:?}");
    let exported = a.export().await?;
    assert_eq!(exported.len(), 2);
    assert!(exported.iter().any(|e| e.content == "second version"));

    // The next write of the key archives the leftover.
    a.store(entry("a", "k", "third version", "core")).await?;
    assert_eq!(live_points_of_key(&fx, "a", "k").len(), 1);
    assert_eq!(a.get("k".into()).await?.map(|e| e.version), Some(3));
    Ok(())
}

#[tokio::test]
async fn rename_export_purge_import_lifecycle_life3_life4() -> R {
    let fx = Fixture::new(
        MemoryBackendKind::Qdrant,
        &[("a", vec![]), ("b", vec![]), ("c", vec![])],
    )?;
    let a = fx.mem("a").await?;
    let mut prov = warren_memory::Provenance::operator("api");
    prov.tool_call = Some("call_7".into());
    a.store(entry("a", "k1", "alpha fact", "core").with_provenance(prov.clone()))
        .await?;
    a.store(entry("a", "k2", "beta fact", "notes")).await?;
    fx.mem("c")
        .await?
        .store(entry("c", "kc", "gamma", "core"))
        .await?;
    let store = fx
        .stores
        .store(&fx.config, MemoryBackendKind::Qdrant)
        .await?;
    let (alias_a, alias_b, alias_c) = (
        AgentAlias::new("a")?,
        AgentAlias::new("b")?,
        AgentAlias::new("c")?,
    );

    // Renaming onto an agent that owns points is refused, naming both.
    common::assert_refused(
        store.rename_agent(alias_a.clone(), alias_c.clone()).await,
        &["'c' already owns 1"],
    );
    assert!(store.rename_agent(alias_a.clone(), alias_b.clone()).await?);
    assert!(store.agent_id(&alias_a, false).await?.is_none());
    let b = fx.mem("b").await?;
    assert_eq!(
        seen(b.as_ref(), "fact", 10).await?,
        pairs(&[("b", "k1"), ("b", "k2")])
    );
    // Provenance moves with the rows.
    assert_eq!(
        b.get("k1".into()).await?.map(|e| e.provenance),
        Some(prov.clone())
    );

    let id = store.agent_id(&alias_b, false).await?.ok_or("no b")?;
    let exported = store.export_agent(id.clone()).await?;
    assert_eq!(
        exported.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(),
        vec!["k1", "k2"]
    );
    assert_eq!(store.purge_agent(id.clone()).await?, 2);
    assert_eq!(store.count_for_agent(id).await?, 0);
    assert!(store.agent_id(&alias_b, false).await?.is_none());
    // c is untouched.
    assert_eq!(fx.mem("c").await?.count().await?, 1);

    assert_eq!(
        store
            .import_agent(alias_b.clone(), exported.clone())
            .await?,
        2
    );
    assert_eq!(
        store
            .import_agent(alias_b.clone(), exported.clone())
            .await?,
        0
    );
    let id = store.agent_id(&alias_b, false).await?.ok_or("no b")?;
    assert_eq!(store.export_agent(id).await?, exported);
    Ok(())
}

#[tokio::test]
async fn health_check_and_api_key_errors_name_the_key_not_its_value() -> R {
    let mut fx = Fixture::new(MemoryBackendKind::Qdrant, &[("a", vec![])])?;
    let health = fx.stores.health(&fx.config).await;
    assert_eq!(health["status"], "ok", "{health}");
    assert_eq!(health["qdrant"]["status"], "ok", "{health}");

    // A wrong key: the server refuses; the error names the setting, never the value.
    fx.config.memory.qdrant.api_key = Some(Secret::new("wrong-secret-value"));
    let stores = MemoryStores::new(fx.root.clone());
    let a =
        warren_memory::create_memory_for_agent(&stores, &fx.config, &AgentAlias::new("a")?).await?;
    let err = a
        .store(entry("a", "k", "v", "core"))
        .await
        .err()
        .map(|e| e.to_string())
        .ok_or("a wrong key was accepted")?;
    assert!(err.contains("memory.qdrant.api_key"), "{err}");
    assert!(!err.contains("wrong-secret-value"), "{err}");
    let health = stores.health(&fx.config).await;
    assert_eq!(health["status"], "error", "{health}");
    let said = health["qdrant"]["error"].as_str().unwrap_or_default();
    assert!(
        said.contains("memory.qdrant.api_key") && !said.contains("wrong-secret-value"),
        "{health}"
    );

    // A server that is down: health says error, naming the URL.
    let mut down = QdrantEngine::start(None)?;
    let url = down.url();
    down.stop();
    configure_at(&mut fx.config, &url, "t_down", &embeddings().base_url());
    let health = MemoryStores::new(fx.root.clone()).health(&fx.config).await;
    assert_eq!(health["status"], "error", "{health}");
    assert!(
        health["qdrant"]["error"]
            .as_str()
            .is_some_and(|e| e.contains(&url)),
        "{health}"
    );
    Ok(())
}

/// MEM-9 on Qdrant: an agent with points in the collection cannot leave the backend; the error
/// names the server and collection. An agent without points may.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_the_backend_of_an_agent_with_points_is_refused_mem9() -> R {
    use std::sync::Arc;
    use warren_config::{ConfigStore, InstallRoot, KeyPath};
    let dir = tempfile::tempdir()?;
    let root = InstallRoot::at(dir.path().join("w"));
    root.ensure_layout()?;
    let collection = format!("t_{}", uuid::Uuid::new_v4().simple());
    std::fs::write(
        root.config_file(),
        format!(
            "[memory]\nbackend = \"qdrant\"\n\n[memory.qdrant]\nurl = \"{}\"\ncollection = \"{collection}\"\napi_key = \"{KEY}\"\n\n[memory.embedder]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"hash\"\n\n[agents.a]\n[agents.b]\n",
            engine().url(),
            embeddings().base_url()
        ),
    )?;
    let config = ConfigStore::load(root.clone())?.snapshot();
    let stores = MemoryStores::new(root.clone());
    let a =
        warren_memory::create_memory_for_agent(&stores, &config, &AgentAlias::new("a")?).await?;
    a.store(entry("a", "k", "a fact", "core")).await?;

    let set = |alias: &'static str, backend: &'static str| {
        let root = root.clone();
        tokio::task::spawn_blocking(move || {
            let store = ConfigStore::load(root)?.with_check(Arc::new(warren_memory::BackendLock));
            let mut txn = store.write_blocking()?;
            let path: KeyPath = format!("agents.{alias}.memory.backend").parse()?;
            txn.set_from_str(&path, backend)?;
            txn.commit().map(|_| ())
        })
    };
    let err = set("a", "sqlite")
        .await?
        .err()
        .map(|e: warren_config::ConfigError| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("agents.a.memory.backend")
            && err.contains("locked to qdrant (MEM-9)")
            && err.contains(&collection),
        "{err}"
    );
    set("b", "sqlite").await??;
    Ok(())
}

/// Issue 20 §4 on Qdrant: overwrites and forgets keep the previous version (bounded per key);
/// undo restores the exact previous content as a new version; provenance travels with it and
/// with the agent's export.
#[tokio::test]
async fn history_forget_and_undo_restore_exact_content() -> R {
    use warren_memory::{Provenance, VersionState};
    let mut fx = Fixture::new(MemoryBackendKind::Qdrant, &[("a", vec![])])?;
    fx.config.memory.history_versions = 2;
    let a = fx.mem("a").await?;
    let mut prov = Provenance::operator("cli");
    prov.session = Some("s1".into());
    a.store(entry("a", "k", "first\ncontent  with  spaces", "notes").with_provenance(prov.clone()))
        .await?;
    a.store(entry("a", "k", "second", "core")).await?;
    a.store(entry("a", "k", "third", "core")).await?;
    let history = a.history("k".into()).await?;
    let summary = common::summary(&history);
    assert_eq!(
        summary,
        vec![
            (3, VersionState::Current, "third"),
            (2, VersionState::Replaced, "second"),
            (1, VersionState::Replaced, "first\ncontent  with  spaces"),
        ]
    );
    // Undo to version 1: its exact content, category and provenance, as version 4.
    let undone = a.undo("k".into(), Some(1)).await?;
    assert_eq!(
        (
            undone.version,
            undone.content.as_str(),
            undone.category.as_str()
        ),
        (4, "first\ncontent  with  spaces", "notes")
    );
    assert_eq!(undone.provenance, prov);
    assert_eq!(a.get("k".into()).await?, Some(undone.clone()));
    // Bounded: two kept versions per key (the oldest went).
    let kept: Vec<u64> = a
        .history("k".into())
        .await?
        .iter()
        .filter(|v| v.state != VersionState::Current)
        .map(|v| v.entry.version)
        .collect();
    assert_eq!(kept, vec![3, 2]);
    common::assert_refused(a.undo("k".into(), Some(1)).await, &["kept: 3, 2"]);

    // Forget keeps the row as `forgotten`; undo brings it back; the count continues.
    assert!(a.forget("k".into()).await?);
    assert_eq!(a.get("k".into()).await?, None);
    assert_eq!(seen(a.as_ref(), "content", 10).await?, pairs(&[]));
    assert_eq!(a.count().await?, 0);
    let back = a.undo("k".into(), None).await?;
    assert_eq!(
        (back.version, back.content.as_str(), back.id.as_str()),
        (5, "first\ncontent  with  spaces", undone.id.as_str())
    );
    assert_eq!(seen(a.as_ref(), "content", 10).await?, pairs(&[("a", "k")]));

    // The receipt of the call that wrote a version is attached afterwards, once, live or kept.
    assert!(a.attach_receipt("k".into(), 5, "rcpt-5".into()).await?);
    assert!(!a.attach_receipt("k".into(), 5, "other".into()).await?);
    assert!(a.attach_receipt("k".into(), 4, "rcpt-4".into()).await?);
    assert_eq!(
        a.get("k".into()).await?.and_then(|e| e.provenance.receipt),
        Some("rcpt-5".to_string())
    );
    let receipts: Vec<Option<String>> = a
        .history("k".into())
        .await?
        .into_iter()
        .map(|v| v.entry.provenance.receipt)
        .collect();
    assert_eq!(
        receipts[..2],
        [Some("rcpt-5".into()), Some("rcpt-4".into())]
    );

    // Export carries the kept versions; a restore under another alias brings them back.
    let store = fx
        .stores
        .store(&fx.config, MemoryBackendKind::Qdrant)
        .await?;
    let id = store
        .agent_id(&AgentAlias::new("a")?, false)
        .await?
        .ok_or("no a")?;
    let rows = store.export_agent(id.clone()).await?;
    let kept = store.export_history(id.clone()).await?;
    assert_eq!(rows.len(), 1);
    assert_eq!(
        rows[0].provenance,
        Provenance {
            receipt: Some("rcpt-5".into()),
            ..prov.clone()
        }
    );
    assert_eq!(kept.len(), 2);
    store.purge_agent(id).await?;
    let b = AgentAlias::new("b")?;
    assert_eq!(store.import_agent(b.clone(), rows.clone()).await?, 1);
    assert_eq!(store.import_history(b.clone(), kept.clone()).await?, 2);
    assert_eq!(store.import_history(b.clone(), kept.clone()).await?, 0);
    let id = store.agent_id(&b, false).await?.ok_or("no b")?;
    let history = store.history_for_agent(id, "k".into()).await?;
    assert_eq!(
        history
            .iter()
            .map(|v| (
                v.entry.version,
                v.entry.content.as_str(),
                v.entry.agent.as_str()
            ))
            .collect::<Vec<_>>(),
        vec![
            (5, "first\ncontent  with  spaces", "b"),
            (4, "first\ncontent  with  spaces", "b"),
            (3, "third", "b"),
        ]
    );
    Ok(())
}

/// Vectors of two embedding models are never compared: a collection filled by one model
/// refuses every call from a process configured with another (same vector size), naming both
/// and the way out; the original model keeps working.
#[tokio::test]
async fn a_collection_refuses_another_embedder_model() -> R {
    let fx = Fixture::new(MemoryBackendKind::Qdrant, &[("a", vec![])])?;
    let a = fx.mem("a").await?;
    a.store(entry("a", "k", "made by the first model", "core"))
        .await?;

    let mut other = fx.config.clone();
    other.memory.embedder.model = Some("hash-v2".into());
    let stores = MemoryStores::new(fx.root.clone());
    let a2 =
        warren_memory::create_memory_for_agent(&stores, &other, &AgentAlias::new("a")?).await?;
    let err = a2
        .store(entry("a", "k2", "made by the second model", "core"))
        .await
        .err()
        .map(|e| e.to_string())
        .ok_or("a second embedder model was accepted")?;
    assert!(
        err.contains("openai-compatible:hash")
            && err.contains("openai-compatible:hash-v2")
            && err.contains("memory.qdrant.collection"),
        "{err}"
    );
    assert!(a2.recall(RecallQuery::new("model", 5)).await.is_err());
    let health = stores.health(&other).await;
    assert_eq!(health["qdrant"]["status"], "error", "{health}");
    assert_eq!(seen(a.as_ref(), "model", 5).await?, pairs(&[("a", "k")]));
    Ok(())
}

/// A server that is down: the backend lock lets the agents on it start (their rows are not
/// at risk) but not an agent on another backend; every call fails naming the URL (later ones
/// at once, inside the backoff, saying so); nothing is kept of a failed store; once the engine
/// answers on that address, the same store works again with no new handle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_is_down_fails_calls_naming_it_and_its_first_answer_ends_the_outage() -> R {
    use warren_config::StateCheck;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let mut fx = Fixture::new(MemoryBackendKind::Qdrant, &[("a", vec![]), ("b", vec![])])?;
    let collection = format!("t_{}", uuid::Uuid::new_v4().simple());
    configure_at(&mut fx.config, &url, &collection, &embeddings().base_url());
    fx.stores = MemoryStores::new(fx.root.clone());

    let lock = warren_memory::BackendLock;
    let problems = tokio::task::block_in_place(|| lock.check(&fx.root, None, &fx.config));
    assert!(problems.is_empty(), "{problems:?}");
    let mut other = fx.config.clone();
    let b = other
        .agents
        .get_mut(&AgentAlias::new("b")?)
        .ok_or("no agent b")?;
    b.memory.backend = Some(MemoryBackendKind::Sqlite);
    let problems = tokio::task::block_in_place(|| lock.check(&fx.root, None, &other));
    let said: Vec<String> = problems
        .iter()
        .map(|p| format!("{:?}: {}", p.key, p.message))
        .collect();
    assert!(
        said.len() == 1 && said[0].contains("agent 'b'") && said[0].contains(&url),
        "only b cannot be checked: {said:?}"
    );

    let a = fx.mem("a").await?;
    let first = a
        .store(entry("a", "k", "written while down", "core"))
        .await
        .err()
        .map(|e| e.to_string())
        .ok_or("a store while down succeeded")?;
    assert!(first.contains(&url), "{first}");
    let second = a
        .get("k".into())
        .await
        .err()
        .map(|e| e.to_string())
        .ok_or("a read while down succeeded")?;
    assert!(
        second.contains(&url) && second.contains("unavailable for"),
        "{second}"
    );
    let health = fx.stores.health(&fx.config).await;
    assert_eq!(health["qdrant"]["status"], "error", "{health}");

    let _engine = QdrantEngine::start_on(Some(KEY), port)?;
    let health = fx.stores.health(&fx.config).await;
    assert_eq!(health["qdrant"]["status"], "ok", "{health}");
    let stored = a.store(entry("a", "k", "written once up", "core")).await?;
    assert_eq!(stored.version, 1, "the failed store left no version");
    let got = a.get("k".into()).await?.ok_or("stored row missing")?;
    assert_eq!(got.content, "written once up");
    Ok(())
}
