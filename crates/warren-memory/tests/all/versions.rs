//! Provenance and versioned writes (issue 20 §3, §4) on SQLite and, when
//! WARREN_TEST_POSTGRES_URL is set, PostgreSQL: every entry records who wrote it; overwrites and
//! forgets keep the replaced version (bounded per key); undo restores the exact earlier content;
//! compare-and-set writers racing on one key from separate connections (on Qdrant too): exactly
//! one wins and the others get a conflict; writers without CAS never lose a version; old stores
//! are migrated in place with their rows kept.

use std::sync::{Arc, Barrier};

use crate::common;

use common::{Fixture, R, entry, shared_kinds};
use warren_config::schema::MemoryBackendKind;
use warren_core::AgentAlias;
use warren_memory::{
    MemoryError, MemoryStore, MemoryStores, NewEntry, PostgresStore, Provenance, RecallQuery,
    SqliteStore, Trust, VersionState,
};

fn prov(trust: Trust, call: &str) -> Provenance {
    Provenance {
        trust,
        agent: Some("a".into()),
        session: Some("s-42".into()),
        channel: Some("gateway".into()),
        tool_call: Some(call.into()),
        receipt: Some(format!("rcpt-{call}")),
    }
}

fn write(key: &str, content: &str, p: Provenance) -> NewEntry {
    entry("a", key, content, "core").with_provenance(p)
}

#[tokio::test]
async fn provenance_is_stored_and_shown_by_get_and_recall() -> R {
    for kind in shared_kinds() {
        let fx = Fixture::new(kind, &[("a", vec![]), ("b", vec![common::grant("a")])])?;
        let a = fx.mem("a").await?;
        let p = prov(Trust::Untrusted, "call_1");
        let stored = a
            .store(write("web", "the page said: zebra", p.clone()))
            .await?;
        assert_eq!((stored.version, &stored.provenance), (1, &p), "{kind:?}");
        let got = a.get("web".into()).await?.ok_or("no entry")?;
        assert_eq!(got.provenance, p, "{kind:?}");
        // A sibling recalling through its grant sees who wrote it and how far to trust it.
        let b = fx.mem("b").await?;
        let hits = b.recall(RecallQuery::new("zebra", 5)).await?;
        assert_eq!(hits.len(), 1, "{kind:?}");
        assert_eq!(hits[0].entry.provenance.trust, Trust::Untrusted, "{kind:?}");
        assert_eq!(
            hits[0].entry.provenance.receipt.as_deref(),
            Some("rcpt-call_1")
        );
        // Recent-recall too.
        let recent = b.recall(RecallQuery::new("*", 5)).await?;
        assert_eq!(recent[0].entry.provenance, p, "{kind:?}");
        // A default write is an agent write with nothing else known.
        let plain = a.store(entry("a", "plain", "x", "core")).await?;
        assert_eq!(plain.provenance, Provenance::default(), "{kind:?}");
        assert_eq!(plain.provenance.trust, Trust::Agent);
    }
    Ok(())
}

#[tokio::test]
async fn undo_restores_the_exact_previous_content_and_its_provenance() -> R {
    for kind in shared_kinds() {
        let fx = Fixture::new(kind, &[("a", vec![])])?;
        let a = fx.mem("a").await?;
        // Whitespace, unicode and newlines: undo gives these bytes back, not a re-rendering.
        let first = "  first\tversion — ünïcode ✓\n\nwith trailing space ";
        a.store(write("k", first, prov(Trust::Agent, "c1"))).await?;
        let second = a
            .store(
                entry("a", "k", "second version", "notes")
                    .with_provenance(Provenance::operator("cli")),
            )
            .await?;
        assert_eq!(second.version, 2, "{kind:?}");
        assert_eq!(second.provenance.trust, Trust::Operator);

        let history = a.history("k".into()).await?;
        let states = common::summary(&history);
        assert_eq!(
            states,
            vec![
                (2, VersionState::Current, "second version"),
                (1, VersionState::Replaced, first)
            ],
            "{kind:?}"
        );

        let undone = a.undo("k".into(), None).await?;
        assert_eq!(undone.content, first, "{kind:?}");
        assert_eq!(undone.category, "core", "{kind:?}");
        assert_eq!(undone.version, 3, "{kind:?}");
        assert_eq!(undone.provenance, prov(Trust::Agent, "c1"), "{kind:?}");
        assert_eq!(a.get("k".into()).await?.ok_or("gone")?.content, first);
        // Keyword recall finds the restored text and no longer the replaced one.
        assert_eq!(a.recall(RecallQuery::new("ünïcode", 5)).await?.len(), 1);
        assert!(a.recall(RecallQuery::new("second", 5)).await?.is_empty());

        // Undo is itself a version: --to 2 brings the operator's text back.
        let redo = a.undo("k".into(), Some(2)).await?;
        assert_eq!(
            (redo.content.as_str(), redo.category.as_str(), redo.version),
            ("second version", "notes", 4)
        );
        // The current version and unknown ones are refused with the kept list.
        common::assert_refused(a.undo("k".into(), Some(4)).await, &["already the current"]);
        common::assert_refused(
            a.undo("k".into(), Some(99)).await,
            &["version 99 is not kept", "'k'"],
        );
    }
    Ok(())
}

#[tokio::test]
async fn forget_then_undo_brings_the_entry_back() -> R {
    for kind in shared_kinds() {
        let fx = Fixture::new(kind, &[("a", vec![])])?;
        let a = fx.mem("a").await?;
        a.store(write("plan", "launch on tuesday", prov(Trust::Agent, "c1")))
            .await?;
        assert!(a.forget("plan".into()).await?, "{kind:?}");
        assert!(a.get("plan".into()).await?.is_none());
        assert!(a.recall(RecallQuery::new("tuesday", 5)).await?.is_empty());
        let history = a.history("plan".into()).await?;
        assert_eq!(history.len(), 1, "{kind:?}");
        assert_eq!(history[0].state, VersionState::Forgotten);

        let back = a.undo("plan".into(), None).await?;
        assert_eq!(back.content, "launch on tuesday", "{kind:?}");
        assert_eq!(back.version, 2, "{kind:?}");
        assert_eq!(a.count().await?, 1);
        let hits = a.recall(RecallQuery::new("tuesday", 5)).await?;
        assert_eq!(hits.len(), 1, "{kind:?}");
        assert_eq!(hits[0].entry.provenance.tool_call.as_deref(), Some("c1"));

        // Forget, write anew: the count continues, the forgotten text stays in the history.
        a.forget("plan".into()).await?;
        let fresh = a
            .store(entry("a", "plan", "launch on friday", "core"))
            .await?;
        assert_eq!(fresh.version, 3, "{kind:?}");
        let kept: Vec<(u64, VersionState, String)> = a
            .history("plan".into())
            .await?
            .into_iter()
            .map(|v| (v.entry.version, v.state, v.entry.content))
            .collect();
        let tue = || "launch on tuesday".to_string();
        assert_eq!(
            kept,
            vec![
                (3, VersionState::Current, "launch on friday".to_string()),
                (2, VersionState::Forgotten, tue()),
                (1, VersionState::Forgotten, tue()),
            ],
            "{kind:?}"
        );
        // Nothing to undo on a key that never existed.
        let err = a.undo("never".into(), None).await.err();
        assert!(
            matches!(err, Some(MemoryError::NoVersion { .. })),
            "{err:?}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn history_per_key_is_bounded_by_memory_history_versions() -> R {
    for kind in shared_kinds() {
        let mut fx = Fixture::new(kind, &[("a", vec![])])?;
        fx.config.memory.history_versions = 3;
        let a = fx.mem("a").await?;
        for i in 1..=10 {
            a.store(entry("a", "k", &format!("v{i}"), "core")).await?;
        }
        a.store(entry("a", "other", "untouched", "core")).await?;
        let versions: Vec<u64> = a
            .history("k".into())
            .await?
            .iter()
            .map(|v| v.entry.version)
            .collect();
        assert_eq!(versions, vec![10, 9, 8, 7], "{kind:?}");
        common::assert_refused(a.undo("k".into(), Some(2)).await, &["kept: 9, 8, 7"]);
        assert_eq!(a.undo("k".into(), Some(7)).await?.content, "v7");
    }
    Ok(())
}

#[tokio::test]
async fn a_stale_expected_version_is_a_conflict_and_writes_nothing() -> R {
    for kind in shared_kinds() {
        let fx = Fixture::new(kind, &[("a", vec![])])?;
        let a = fx.mem("a").await?;
        // 0 = the key must not exist yet.
        let v1 = a
            .store(entry("a", "k", "one", "core").expecting(Some(0)))
            .await?;
        assert_eq!(v1.version, 1);
        let err = a
            .store(entry("a", "k", "again", "core").expecting(Some(0)))
            .await
            .err();
        match err {
            Some(MemoryError::Conflict {
                expected, actual, ..
            }) => assert_eq!((expected, actual), (0, 1), "{kind:?}"),
            other => panic!("{kind:?}: expected a conflict, got {other:?}"),
        }
        a.store(entry("a", "k", "two", "core").expecting(Some(1)))
            .await?;
        common::assert_refused(
            a.store(entry("a", "k", "lost update", "core").expecting(Some(1)))
                .await,
            &["'k'", "version 2, not the expected 1"],
        );
        assert_eq!(a.get("k".into()).await?.ok_or("gone")?.content, "two");
        assert_eq!(a.history("k".into()).await?.len(), 2, "{kind:?}");
    }
    Ok(())
}

/// A store of its own for one racing thread: its own connection, as another process has.
fn own_store(fx: &Fixture, kind: MemoryBackendKind) -> Result<Arc<dyn MemoryStore>, String> {
    Ok(match kind {
        MemoryBackendKind::Postgres => {
            let pg = &fx.config.memory.postgres;
            let url = pg.url.as_ref().ok_or("no url")?.expose().to_string();
            Arc::new(PostgresStore::new(&url, &pg.schema).map_err(|e| e.to_string())?)
        }
        _ => Arc::new(SqliteStore::open(&fx.root.memory_db()).map_err(|e| e.to_string())?),
    })
}

/// Runs `writers` threads, each with its own store and runtime, released together; each
/// stores `make(i)` under agent `a`'s key `race`. Results in thread order. On Qdrant each
/// thread has a factory of its own (its own client, as the daemon and a CLI command have)
/// over the same install and collection.
fn race(
    fx: &Fixture,
    kind: MemoryBackendKind,
    writers: usize,
    make: impl Fn(usize) -> NewEntry + Send + Sync + 'static,
) -> Result<Vec<Result<u64, MemoryError>>, Box<dyn std::error::Error>> {
    let barrier = Arc::new(Barrier::new(writers));
    let make = Arc::new(make);
    let mut threads = Vec::new();
    for i in 0..writers {
        let store = match kind {
            MemoryBackendKind::Qdrant => None,
            _ => Some(own_store(fx, kind)?),
        };
        let (root, config) = (fx.root.clone(), fx.config.clone());
        let (barrier, make) = (Arc::clone(&barrier), Arc::clone(&make));
        threads.push(std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(async {
                let ready = async {
                    let store = match store {
                        Some(s) => s,
                        None => MemoryStores::new(root)
                            .store(&config, kind)
                            .await
                            .map_err(|e| e.to_string())?,
                    };
                    let alias = AgentAlias::new("a").map_err(|e| e.to_string())?;
                    let id = store
                        .agent_id(&alias, true)
                        .await
                        .map_err(|e| e.to_string())?
                        .ok_or("no agent id")?;
                    // Connect before the start line, so the race is the write itself.
                    store
                        .count_for_agent(id.clone())
                        .await
                        .map_err(|e| e.to_string())?;
                    Ok::<_, String>((store, id))
                }
                .await;
                // Every thread reaches the line, even one whose setup failed.
                barrier.wait();
                let (store, id) = ready?;
                Ok::<_, String>(store.store_with_agent(id, make(i)).await.map(|e| e.version))
            })
        }));
    }
    let mut out = Vec::new();
    for t in threads {
        out.push(t.join().map_err(|_| "writer thread panicked")??);
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_compare_and_set_writers_exactly_one_wins() -> R {
    for kind in shared_kinds()
        .into_iter()
        .chain([MemoryBackendKind::Qdrant])
    {
        let fx = Fixture::new(kind, &[("a", vec![])])?;
        let a = fx.mem("a").await?;
        a.store(entry("a", "race", "base", "core")).await?;
        let results = race(&fx, kind, 8, |i| {
            entry("a", "race", &format!("writer {i}"), "core").expecting(Some(1))
        })?;
        let winners: Vec<usize> = (0..results.len()).filter(|i| results[*i].is_ok()).collect();
        assert_eq!(winners.len(), 1, "{kind:?}: {results:?}");
        for (i, r) in results.iter().enumerate() {
            match r {
                Ok(v) => assert_eq!(*v, 2, "{kind:?}"),
                Err(MemoryError::Conflict {
                    expected, actual, ..
                }) => assert_eq!((*expected, *actual), (1, 2), "{kind:?} writer {i}"),
                Err(other) => panic!("{kind:?} writer {i}: {other}"),
            }
        }
        let now = a.get("race".into()).await?.ok_or("gone")?;
        assert_eq!(now.content, format!("writer {}", winners[0]), "{kind:?}");
        assert_eq!(a.history("race".into()).await?.len(), 2, "{kind:?}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_writers_without_cas_never_lose_a_version() -> R {
    for kind in shared_kinds()
        .into_iter()
        .chain([MemoryBackendKind::Qdrant])
    {
        let fx = Fixture::new(kind, &[("a", vec![])])?;
        let n = 8;
        let results = race(&fx, kind, n, |i| {
            entry("a", "race", &format!("writer {i}"), "core")
        })?;
        let mut versions: Vec<u64> = results
            .into_iter()
            .map(|r| r.map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?;
        versions.sort_unstable();
        assert_eq!(versions, (1..=n as u64).collect::<Vec<_>>(), "{kind:?}");
        let a = fx.mem("a").await?;
        let history = a.history("race".into()).await?;
        let mut contents: Vec<String> = history.iter().map(|v| v.entry.content.clone()).collect();
        contents.sort();
        let mut want: Vec<String> = (0..n).map(|i| format!("writer {i}")).collect();
        want.sort();
        assert_eq!(contents, want, "{kind:?}: every write is live or kept");
    }
    Ok(())
}

#[tokio::test]
async fn provenance_and_history_survive_rename_export_and_restore() -> R {
    for kind in shared_kinds() {
        let fx = Fixture::new(kind, &[("a", vec![]), ("b", vec![]), ("c", vec![])])?;
        let a = fx.mem("a").await?;
        a.store(write("k", "old", prov(Trust::Untrusted, "c1")))
            .await?;
        a.store(write("k", "new", prov(Trust::Agent, "c2"))).await?;
        a.store(write("gone", "forgotten text", prov(Trust::Agent, "c3")))
            .await?;
        a.forget("gone".into()).await?;
        let before = a.history("k".into()).await?;

        let store = fx.stores.store(&fx.config, kind).await?;
        let (aa, b, c) = (
            AgentAlias::new("a")?,
            AgentAlias::new("b")?,
            AgentAlias::new("c")?,
        );
        assert!(store.rename_agent(aa, b.clone()).await?);
        let bm = fx.mem("b").await?;
        let renamed = bm.history("k".into()).await?;
        assert_eq!(renamed.len(), 2, "{kind:?}");
        for (x, y) in renamed.iter().zip(&before) {
            assert_eq!(
                (
                    &x.entry.content,
                    x.entry.version,
                    &x.entry.provenance,
                    x.state
                ),
                (
                    &y.entry.content,
                    y.entry.version,
                    &y.entry.provenance,
                    y.state
                ),
                "{kind:?}"
            );
            assert_eq!(x.entry.agent, "b");
        }

        // Export (rows and history), purge, restore under another alias.
        let id = store.agent_id(&b, false).await?.ok_or("no id")?;
        let rows = store.export_agent(id.clone()).await?;
        let kept = store.export_history(id.clone()).await?;
        assert_eq!(kept.len(), 2, "{kind:?}: one replaced, one forgotten");
        // Through JSON, as the lifecycle archive keeps them.
        let rows: Vec<warren_memory::MemoryEntry> =
            serde_json::from_str(&serde_json::to_string(&rows)?)?;
        let kept: Vec<warren_memory::MemoryVersion> =
            serde_json::from_str(&serde_json::to_string(&kept)?)?;
        store.purge_agent(id).await?;
        store.import_agent(c.clone(), rows).await?;
        assert_eq!(store.import_history(c.clone(), kept.clone()).await?, 2);
        assert_eq!(
            store.import_history(c.clone(), kept).await?,
            0,
            "idempotent"
        );

        let cm = fx.mem("c").await?;
        let restored = cm.history("k".into()).await?;
        assert_eq!(
            restored
                .iter()
                .map(|v| (
                    v.entry.content.as_str(),
                    v.entry.version,
                    &v.entry.provenance
                ))
                .collect::<Vec<_>>(),
            vec![
                ("new", 2, &prov(Trust::Agent, "c2")),
                ("old", 1, &prov(Trust::Untrusted, "c1"))
            ],
            "{kind:?}"
        );
        assert_eq!(cm.undo("k".into(), None).await?.content, "old");
        assert_eq!(
            cm.undo("gone".into(), None).await?.content,
            "forgotten text",
            "{kind:?}"
        );
    }
    Ok(())
}

/// The version-1 SQLite schema (before the scope-aware index, versions and provenance).
const SQLITE_V1: &str = r#"
CREATE TABLE agents (id TEXT PRIMARY KEY, alias TEXT NOT NULL UNIQUE, backend TEXT NOT NULL,
    created_at INTEGER NOT NULL);
CREATE TABLE memories (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,
    agent_id TEXT NOT NULL REFERENCES agents(id), key TEXT NOT NULL, content TEXT NOT NULL,
    category TEXT NOT NULL, session TEXT, created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL, embedding BLOB, UNIQUE (agent_id, key));
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE VIRTUAL TABLE memories_fts USING fts5(key, content, content='memories', content_rowid='seq');
CREATE TRIGGER memories_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts(rowid, key, content) VALUES (new.seq, new.key, new.content);
END;
INSERT INTO agents VALUES ('11111111-1111-4111-8111-111111111111', 'a', 'sqlite', 1700000000000000);
INSERT INTO memories (id, agent_id, key, content, category, session, created_at, updated_at)
    VALUES ('22222222-2222-4222-8222-222222222222', '11111111-1111-4111-8111-111111111111',
            'legacy', 'written before versions existed', 'core', 'old-session',
            1700000000000000, 1700000000000001);
"#;

#[tokio::test]
async fn an_old_sqlite_store_is_migrated_with_its_rows() -> R {
    let fx = Fixture::new(MemoryBackendKind::Sqlite, &[("a", vec![])])?;
    let path = fx.root.memory_db();
    std::fs::create_dir_all(path.parent().ok_or("no parent")?)?;
    rusqlite::Connection::open(&path)?.execute_batch(SQLITE_V1)?;

    let a = fx.mem("a").await?;
    let old = a.get("legacy".into()).await?.ok_or("the old row is gone")?;
    assert_eq!(old.content, "written before versions existed");
    assert_eq!(old.id, "22222222-2222-4222-8222-222222222222");
    assert_eq!(old.session.as_deref(), Some("old-session"));
    assert_eq!((old.version, old.provenance), (1, Provenance::default()));
    assert_eq!(a.recall(RecallQuery::new("versions", 5)).await?.len(), 1);
    // The migrated row takes part in versioning like any other.
    a.store(entry("a", "legacy", "rewritten", "core").expecting(Some(1)))
        .await?;
    assert_eq!(
        a.undo("legacy".into(), None).await?.content,
        "written before versions existed"
    );
    let version: String = rusqlite::Connection::open(&path)?.query_row(
        "SELECT value FROM meta WHERE key = 'schema_version'",
        [],
        |r| r.get(0),
    )?;
    assert_eq!(version, "3");
    Ok(())
}

#[tokio::test]
async fn an_old_postgres_store_is_migrated_with_its_rows() -> R {
    let Some(url) = common::postgres_url() else {
        return Ok(());
    };
    let fx = Fixture::new(MemoryBackendKind::Postgres, &[("a", vec![])])?;
    let schema = fx.config.memory.postgres.schema.clone();
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    // The schema as it was before versions and provenance.
    client
        .batch_execute(&format!(
            r#"CREATE SCHEMA "{schema}";
            CREATE TABLE "{schema}".agents (id UUID PRIMARY KEY, alias TEXT NOT NULL UNIQUE,
                backend TEXT NOT NULL, created_at TIMESTAMPTZ NOT NULL);
            CREATE TABLE "{schema}".memories (seq BIGSERIAL PRIMARY KEY, id UUID NOT NULL UNIQUE,
                agent_id UUID NOT NULL REFERENCES "{schema}".agents(id), key TEXT NOT NULL,
                content TEXT NOT NULL, category TEXT NOT NULL, session TEXT,
                created_at TIMESTAMPTZ NOT NULL, updated_at TIMESTAMPTZ NOT NULL, embedding REAL[],
                tsv TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple', key || ' ' || content)) STORED,
                UNIQUE (agent_id, key));
            INSERT INTO "{schema}".agents VALUES
                ('11111111-1111-4111-8111-111111111111', 'a', 'postgres', now());
            INSERT INTO "{schema}".memories (id, agent_id, key, content, category, created_at, updated_at)
                VALUES ('22222222-2222-4222-8222-222222222222',
                        '11111111-1111-4111-8111-111111111111', 'legacy',
                        'written before versions existed', 'core', now(), now());"#
        ))
        .await?;
    let a = fx.mem("a").await?;
    let old = a.get("legacy".into()).await?.ok_or("the old row is gone")?;
    assert_eq!(old.content, "written before versions existed");
    assert_eq!((old.version, old.provenance), (1, Provenance::default()));
    assert_eq!(a.recall(RecallQuery::new("versions", 5)).await?.len(), 1);
    a.store(entry("a", "legacy", "rewritten", "core").expecting(Some(1)))
        .await?;
    assert_eq!(
        a.undo("legacy".into(), None).await?.content,
        "written before versions existed"
    );
    Ok(())
}

#[tokio::test]
async fn markdown_says_it_keeps_no_history() -> R {
    let fx = Fixture::new(MemoryBackendKind::Markdown, &[("a", vec![])])?;
    let a = fx.mem("a").await?;
    a.store(entry("a", "k", "v", "core")).await?;
    common::assert_refused(a.history("k".into()).await, &["markdown", "no history"]);
    Ok(())
}

#[tokio::test]
async fn a_receipt_signed_after_the_write_is_attached_to_that_version_only() -> R {
    for kind in shared_kinds() {
        let fx = Fixture::new(kind, &[("a", vec![])])?;
        let a = fx.mem("a").await?;
        let mut p = prov(Trust::Agent, "c1");
        p.receipt = None;
        a.store(write("k", "one", p.clone())).await?;
        a.store(write("k", "two", p)).await?;
        // Version 1 is kept in the history by now; version 2 is live.
        assert!(
            a.attach_receipt("k".into(), 1, "wr1-1".into()).await?,
            "{kind:?}"
        );
        assert!(
            a.attach_receipt("k".into(), 2, "wr1-2".into()).await?,
            "{kind:?}"
        );
        // A receipt is never replaced, and an unknown version matches nothing.
        assert!(!a.attach_receipt("k".into(), 2, "wr1-forged".into()).await?);
        assert!(!a.attach_receipt("k".into(), 7, "wr1-7".into()).await?);
        let receipts: Vec<Option<String>> = a
            .history("k".into())
            .await?
            .into_iter()
            .map(|v| v.entry.provenance.receipt)
            .collect();
        assert_eq!(
            receipts,
            vec![Some("wr1-2".to_string()), Some("wr1-1".to_string())],
            "{kind:?}"
        );
    }
    Ok(())
}
