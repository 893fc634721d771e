//! Backend-specific behaviour: Markdown files and grants (MEM-4), None through the wrapper
//! (MEM-6), each agent's own backend honoured by the factory (MEM-1) and its grant refusals
//! (MEM-7/8).

use crate::common;

use common::{Fixture, R, cats, entry, grant, pairs, seen};
use pretty_assertions::assert_eq;
use warren_config::schema::MemoryBackendKind;
use warren_core::AgentAlias;
use warren_memory::{MemoryError, MemoryStores, create_memory_for_agent};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markdown_writes_memory_md_and_daily_files_in_the_agents_workspace_mem4() -> R {
    let fx = Fixture::new(
        MemoryBackendKind::Markdown,
        &[("a", vec![grant("b")]), ("b", vec![])],
    )?;
    let (a, b) = (fx.mem("a").await?, fx.mem("b").await?);
    a.store(entry(
        "a",
        "pref",
        "likes **bold** tea\nand two lines",
        "core",
    ))
    .await?;
    a.store(entry("a", "standup", "talked about tea", "daily"))
        .await?;
    b.store(entry("b", "bk", "tea supplier list", "core"))
        .await?;
    let ws = fx.root.agent_workspace(&AgentAlias::new("a")?);
    let core = std::fs::read_to_string(ws.join("MEMORY.md"))?;
    assert!(
        core.contains("- **pref**: likes **bold** tea\\nand two lines"),
        "{core}"
    );
    let daily: Vec<_> = std::fs::read_dir(ws.join("memory"))?.collect();
    assert_eq!(daily.len(), 1);
    // Round trip keeps key, multi-line content and category.
    let got = a.get("pref".into()).await?.ok_or("pref missing")?;
    assert_eq!(
        (got.content.as_str(), got.category.as_str()),
        ("likes **bold** tea\nand two lines", "core")
    );
    assert_eq!(
        seen(&*a, "tea", 10).await?,
        pairs(&[("a", "pref"), ("a", "standup"), ("b", "bk")])
    );
    assert_eq!(seen(&*b, "tea", 10).await?, pairs(&[("b", "bk")]));
    // Upsert moves nothing around and keeps one line; forget removes it.
    a.store(entry("a", "pref", "likes green tea", "core"))
        .await?;
    assert_eq!(a.count().await?, 2);
    assert!(a.forget("pref".into()).await?);
    assert!(!b.forget("pref".into()).await?);
    assert!(!std::fs::read_to_string(ws.join("MEMORY.md"))?.contains("pref"));
    // A line written by hand is recallable under a synthetic key.
    std::fs::write(
        ws.join("MEMORY.md"),
        "# Notes\n\n- remember the tea kettle\n",
    )?;
    assert_eq!(seen(&*a, "kettle", 5).await?, pairs(&[("a", "MEMORY:3")]));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn factory_refuses_category_grants_on_markdown_mem4() -> R {
    let fx = Fixture::new(
        MemoryBackendKind::Markdown,
        &[("a", vec![cats("b", &["x"])]), ("b", vec![])],
    )?;
    let err = fx
        .mem("a")
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("agent 'a'") && err.contains("'b'") && err.contains("MEM-4"),
        "{err}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn factory_refuses_cross_backend_self_and_empty_grants_mem7_mem8() -> R {
    let mut fx = Fixture::new(
        MemoryBackendKind::Sqlite,
        &[("a", vec![grant("b")]), ("b", vec![])],
    )?;
    if let Some(b) = fx.config.agents.get_mut("b") {
        b.memory.backend = Some(MemoryBackendKind::Markdown);
    }
    let stores = MemoryStores::new(fx.root.clone());
    let a = AgentAlias::new("a")?;
    let err = create_memory_for_agent(&stores, &fx.config, &a).await.err();
    assert!(
        matches!(&err, Some(MemoryError::Grant { rule, .. }) if rule.contains("MEM-7")),
        "{err:?}"
    );
    for bad in [grant("a"), cats("b", &[]), grant("ghost")] {
        if let Some(cfg) = fx.config.agents.get_mut("a") {
            cfg.memory.read_memory_from = vec![bad.clone()];
        }
        if let Some(b) = fx.config.agents.get_mut("b") {
            b.memory.backend = None;
        }
        let err = create_memory_for_agent(&stores, &fx.config, &a).await.err();
        assert!(
            matches!(err, Some(MemoryError::Grant { .. })),
            "{bad:?}: {err:?}"
        );
    }
    let ghost = AgentAlias::new("ghost")?;
    let err = create_memory_for_agent(&stores, &fx.config, &ghost)
        .await
        .err();
    assert!(
        matches!(err, Some(MemoryError::UnknownAgent { .. })),
        "{err:?}"
    );
    Ok(())
}

/// MEM-1: an agent on `markdown` next to SQLite agents gets Markdown, not the global backend
/// (the reference implementation used the global backend for every SQL-kind agent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_agent_gets_its_own_backend_mem1() -> R {
    let mut fx = Fixture::new(
        MemoryBackendKind::Sqlite,
        &[("a", vec![]), ("m", vec![]), ("n", vec![])],
    )?;
    if let Some(m) = fx.config.agents.get_mut("m") {
        m.memory.backend = Some(MemoryBackendKind::Markdown);
    }
    if let Some(n) = fx.config.agents.get_mut("n") {
        n.memory.backend = Some(MemoryBackendKind::None);
    }
    let (a, m, n) = (fx.mem("a").await?, fx.mem("m").await?, fx.mem("n").await?);
    assert_eq!(
        (a.backend(), m.backend(), n.backend()),
        (
            MemoryBackendKind::Sqlite,
            MemoryBackendKind::Markdown,
            MemoryBackendKind::None
        )
    );
    m.store(entry("m", "k", "markdown fact", "core")).await?;
    assert!(
        fx.root
            .agent_workspace(&AgentAlias::new("m")?)
            .join("MEMORY.md")
            .is_file()
    );
    // None: the write "succeeds" through the wrapper and nothing is kept (MEM-6).
    n.store(entry("n", "k", "gone", "core")).await?;
    assert_eq!((n.count().await?, seen(&*n, "*", 5).await?), (0, vec![]));
    Ok(())
}
