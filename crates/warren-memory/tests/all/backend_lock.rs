//! MEM-9: once an agent has written, changing its memory backend is refused by config
//! validation with an error naming where its rows live; the lock is read from the store.

use std::sync::Arc;

use warren_config::{ConfigError, ConfigStore, InstallRoot, KeyPath};
use warren_core::AgentAlias;
use warren_memory::{BackendLock, MemoryStores, NewEntry, create_memory_for_agent};

type R = Result<(), Box<dyn std::error::Error>>;

fn install(text: &str) -> Result<(tempfile::TempDir, InstallRoot), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let root = InstallRoot::at(dir.path().join("w"));
    root.ensure_layout()?;
    std::fs::write(root.config_file(), text)?;
    Ok((dir, root))
}

async fn write_as(root: &InstallRoot, alias: &str) -> R {
    let store = ConfigStore::load(root.clone())?;
    let config = store.snapshot();
    let stores = MemoryStores::new(root.clone());
    let mem = create_memory_for_agent(&stores, &config, &AgentAlias::new(alias)?).await?;
    mem.store(NewEntry::new(alias, "k", "a fact", None, None)?)
        .await?;
    Ok(())
}

fn set_backend(root: &InstallRoot, alias: &str, backend: &str) -> Result<(), ConfigError> {
    let store = ConfigStore::load(root.clone())?.with_check(Arc::new(BackendLock));
    let mut txn = store.write_blocking()?;
    let path: KeyPath = format!("agents.{alias}.memory.backend").parse()?;
    txn.set_from_str(&path, backend)?;
    txn.commit().map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_the_backend_of_an_agent_that_wrote_is_refused_mem9() -> R {
    let (_dir, root) = install("[agents.a]\n[agents.b]\n")?;
    write_as(&root, "a").await?;
    let root2 = root.clone();
    let err = tokio::task::spawn_blocking(move || set_backend(&root2, "a", "markdown"))
        .await?
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("agents.a.memory.backend")
            && err.contains("memory.db")
            && err.contains("locked to sqlite (MEM-9)"),
        "{err}"
    );
    assert!(!std::fs::read_to_string(root.config_file())?.contains("markdown"));
    // b never wrote: its backend may change, and a, back on its own backend, is fine.
    let root3 = root.clone();
    tokio::task::spawn_blocking(move || set_backend(&root3, "b", "markdown")).await??;
    let root4 = root.clone();
    tokio::task::spawn_blocking(move || set_backend(&root4, "a", "sqlite")).await??;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_edited_backend_change_fails_check_current_and_reload_mem9() -> R {
    let (_dir, root) = install("[agents.a]\nmemory.backend = \"markdown\"\n")?;
    write_as(&root, "a").await?;
    let store = ConfigStore::load(root.clone())?.with_check(Arc::new(BackendLock));
    assert!(store.check_current().is_ok());
    std::fs::write(
        root.config_file(),
        "[agents.a]\nmemory.backend = \"sqlite\"\n",
    )?;
    let err = store
        .reload()
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    let ws = root.agent_workspace(&AgentAlias::new("a")?);
    assert!(
        err.contains("locked to markdown") && err.contains(&ws.display().to_string()),
        "{err}"
    );
    let fresh = ConfigStore::load(root.clone())?.with_check(Arc::new(BackendLock));
    assert!(fresh.check_current().is_err());
    Ok(())
}

/// After a purge (lifecycle: export, then purge) the registration is gone and the lock lifts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_releases_the_lock_mem9() -> R {
    let (_dir, root) = install("[agents.a]\n")?;
    write_as(&root, "a").await?;
    let config = ConfigStore::load(root.clone())?.snapshot();
    let stores = MemoryStores::new(root.clone());
    let mem = create_memory_for_agent(&stores, &config, &AgentAlias::new("a")?).await?;
    assert_eq!(mem.purge().await?, 1);
    let root2 = root.clone();
    tokio::task::spawn_blocking(move || set_backend(&root2, "a", "none")).await??;
    Ok(())
}
