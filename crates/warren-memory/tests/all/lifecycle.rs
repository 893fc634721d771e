//! What agent lifecycle needs from every memory backend (LIFE-3, LIFE-4, BEYOND-1): export,
//! purge and import keep rows exactly (ids, keys, contents, categories, timestamps) on SQLite
//! and, when WARREN_TEST_POSTGRES_URL is set, PostgreSQL; import is idempotent; Markdown
//! rename moves memory files left under the old workspace.

use crate::common;

use common::{Fixture, R, entry, shared_kinds};
use warren_config::schema::MemoryBackendKind;
use warren_core::AgentAlias;
use warren_memory::MemoryStore;

#[tokio::test]
async fn export_purge_import_gives_back_the_same_rows_beyond1() -> R {
    for kind in shared_kinds() {
        let fx = Fixture::new(kind, &[("b", vec![]), ("bee", vec![])])?;
        let mem = fx.mem("b").await?;
        for i in 0..5 {
            mem.store(entry("b", &format!("k{i}"), &format!("fact {i}"), "notes"))
                .await?;
        }
        let store = fx.stores.store(&fx.config, kind).await?;
        let b = AgentAlias::new("b")?;
        let id = store.agent_id(&b, false).await?.ok_or("no id")?;
        let exported = store.export_agent(id.clone()).await?;
        assert_eq!(exported.len(), 5, "{kind:?}");
        assert_eq!(store.purge_agent(id).await?, 5, "{kind:?}");
        assert!(store.agent_id(&b, false).await?.is_none(), "{kind:?}");

        assert_eq!(store.import_agent(b.clone(), exported.clone()).await?, 5);
        // A retried import converges: nothing twice.
        assert_eq!(store.import_agent(b.clone(), exported.clone()).await?, 0);
        let id = store.agent_id(&b, false).await?.ok_or("no id")?;
        assert_eq!(store.export_agent(id).await?, exported, "{kind:?}");

        // Under another alias (restore --as): same rows, new attribution.
        let bee = AgentAlias::new("bee")?;
        let id = store.agent_id(&b, false).await?.ok_or("no id")?;
        let rows = store.export_agent(id.clone()).await?;
        store.purge_agent(id).await?;
        store.import_agent(bee.clone(), rows.clone()).await?;
        let id = store.agent_id(&bee, false).await?.ok_or("no id")?;
        let again = store.export_agent(id).await?;
        assert_eq!(again.len(), 5);
        assert!(again.iter().all(|e| e.agent == "bee"));
        assert_eq!(
            again
                .iter()
                .map(|e| (&e.id, &e.key, &e.content, e.created_at))
                .collect::<Vec<_>>(),
            rows.iter()
                .map(|e| (&e.id, &e.key, &e.content, e.created_at))
                .collect::<Vec<_>>()
        );
    }
    Ok(())
}

#[tokio::test]
async fn markdown_rename_moves_memory_files_left_under_the_old_workspace_life3() -> R {
    let fx = Fixture::new(MemoryBackendKind::Markdown, &[("b", vec![])])?;
    let mem = fx.mem("b").await?;
    mem.store(entry("b", "k", "remember this", "core")).await?;
    let store = fx.stores.markdown();
    let (b, bee) = (AgentAlias::new("b")?, AgentAlias::new("bee")?);
    assert!(store.rename_agent(b.clone(), bee.clone()).await?);
    assert!(fx.root.agent_workspace(&bee).join("MEMORY.md").exists());
    assert!(!fx.root.agent_workspace(&b).join("MEMORY.md").exists());
    // Nothing left: a retry is a no-op.
    assert!(!store.rename_agent(b, bee.clone()).await?);
    let id = store.agent_id(&bee, false).await?.ok_or("no id")?;
    assert_eq!(store.count_for_agent(id).await?, 1);
    Ok(())
}
