//! Isolation and grants through the factory's handles, on every shared backend (SQLite always,
//! PostgreSQL when WARREN_TEST_POSTGRES_URL is set): MEM-1/2/3/6/8.

use crate::common;

use common::{Fixture, R, cats, entry, grant, pairs, seen, shared_kinds};
use pretty_assertions::assert_eq;
use warren_memory::{ListQuery, MemoryError, RecallQuery};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recall_never_shows_an_ungranted_siblings_rows_mem2() -> R {
    for kind in shared_kinds() {
        let fx = Fixture::new(kind, &[("a", vec![]), ("b", vec![])])?;
        let (a, b) = (fx.mem("a").await?, fx.mem("b").await?);
        a.store(entry("a", "plan", "launch the rocket on friday", "core"))
            .await?;
        b.store(entry("b", "secret", "rocket codes are 1234", "core"))
            .await?;
        assert_eq!(
            seen(&*a, "rocket", 10).await?,
            pairs(&[("a", "plan")]),
            "{kind:?}"
        );
        assert_eq!(
            seen(&*b, "rocket", 10).await?,
            pairs(&[("b", "secret")]),
            "{kind:?}"
        );
        // Recent recall, get and list are scoped the same way.
        assert_eq!(
            seen(&*a, "*", 10).await?,
            pairs(&[("a", "plan")]),
            "{kind:?}"
        );
        assert_eq!(a.get("secret".into()).await?, None, "{kind:?}");
        assert_eq!(a.count().await?, 1, "{kind:?}");
    }
    Ok(())
}

/// The attack: FTS5 operators, column filters, quotes and wildcards in the recall text. Without
/// the scope in SQL, `*` or `OR` queries would return everything; here they stay plain words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recall_with_crafted_fts_syntax_cannot_reach_sibling_rows_mem2() -> R {
    for kind in shared_kinds() {
        let fx = Fixture::new(kind, &[("a", vec![]), ("b", vec![])])?;
        let (a, b) = (fx.mem("a").await?, fx.mem("b").await?);
        a.store(entry("a", "mine", "my own note", "core")).await?;
        b.store(entry(
            "b",
            "theirs",
            "agent_id secret OR token NEAR rocket",
            "core",
        ))
        .await?;
        for q in [
            "*",
            "secret OR token",
            "\"secret\"",
            "NEAR(secret rocket)",
            "agent_id:*",
            "content:secret",
            "key:theirs",
            "secret*",
            "s*",
            "{key content}:secret",
            "scope:*",
            "scope:secret",
            "{scope content}:secret",
            "secret AND scope:a",
            "secret) OR (note",
            "^secret",
            "note\" OR \"secret",
        ] {
            let got = seen(&*a, q, 50).await?;
            assert!(
                got.iter().all(|(agent, _)| agent == "a"),
                "{kind:?} query {q:?} leaked {got:?}"
            );
        }
        // The same words do reach B's own row, so the queries were real searches.
        assert_eq!(
            seen(&*b, "secret OR token", 5).await?,
            pairs(&[("b", "theirs")])
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_of_punctuation_is_reported_invalid_not_empty() -> R {
    for kind in shared_kinds() {
        let fx = Fixture::new(kind, &[("a", vec![])])?;
        let a = fx.mem("a").await?;
        a.store(entry("a", "k", "content", "core")).await?;
        let err = a.recall(RecallQuery::new("\"()\"", 5)).await.err();
        assert!(
            matches!(&err, Some(MemoryError::InvalidQuery { agent, .. }) if agent == "a"),
            "{kind:?}: {err:?}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn category_grant_filters_sibling_rows_but_never_own_mem3() -> R {
    for kind in shared_kinds() {
        let fx = Fixture::new(
            kind,
            &[("a", vec![cats("b", &["decisions"])]), ("b", vec![])],
        )?;
        let (a, b) = (fx.mem("a").await?, fx.mem("b").await?);
        a.store(entry("a", "own-x", "budget draft", "private"))
            .await?;
        b.store(entry("b", "d1", "budget approved", "decisions"))
            .await?;
        b.store(entry("b", "p1", "budget gossip", "personal"))
            .await?;
        b.store(entry("b", "d2", "budget Decisions case", "Decisions"))
            .await?;
        assert_eq!(
            seen(&*a, "budget", 10).await?,
            pairs(&[("a", "own-x"), ("b", "d1")]),
            "{kind:?}: exact, case-sensitive category match"
        );
        assert_eq!(
            seen(&*a, "", 10).await?,
            pairs(&[("a", "own-x"), ("b", "d1")]),
            "{kind:?}: recent recall too"
        );
    }
    Ok(())
}

/// Many stronger matches in a forbidden category must not push the granted row out of the
/// top-k: the category filter runs inside the query, before the limit (weak spot of the
/// reference implementation, which post-filtered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbidden_rows_cannot_crowd_out_granted_ones_mem3() -> R {
    for kind in shared_kinds() {
        let fx = Fixture::new(kind, &[("a", vec![cats("b", &["shared"])]), ("b", vec![])])?;
        let (a, b) = (fx.mem("a").await?, fx.mem("b").await?);
        for i in 0..40 {
            b.store(entry(
                "b",
                &format!("noise{i}"),
                "apple apple apple apple",
                "private",
            ))
            .await?;
        }
        b.store(entry(
            "b",
            "granted",
            "an apple and a long tail of other words here",
            "shared",
        ))
        .await?;
        assert_eq!(
            seen(&*a, "apple", 3).await?,
            pairs(&[("b", "granted")]),
            "{kind:?}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_are_not_transitive_and_unknown_categories_match_nothing_mem8() -> R {
    for kind in shared_kinds() {
        let fx = Fixture::new(
            kind,
            &[
                ("a", vec![grant("b"), cats("c", &["no-such-category"])]),
                ("b", vec![grant("c")]),
                ("c", vec![]),
            ],
        )?;
        let (a, b, c) = (fx.mem("a").await?, fx.mem("b").await?, fx.mem("c").await?);
        b.store(entry("b", "kb", "shared fact", "core")).await?;
        c.store(entry("c", "kc", "shared fact", "core")).await?;
        assert_eq!(
            seen(&*a, "fact", 10).await?,
            pairs(&[("b", "kb")]),
            "{kind:?}"
        );
        assert_eq!(
            seen(&*b, "fact", 10).await?,
            pairs(&[("b", "kb"), ("c", "kc")]),
            "{kind:?}"
        );
        assert_eq!(
            seen(&*c, "fact", 10).await?,
            pairs(&[("c", "kc")]),
            "{kind:?}"
        );
    }
    Ok(())
}

/// Deletes are own-only, and a key only a sibling has looks exactly like an absent key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_cannot_delete_or_probe_a_siblings_key_mem2() -> R {
    for kind in shared_kinds() {
        let fx = Fixture::new(kind, &[("a", vec![grant("b")]), ("b", vec![])])?;
        let (a, b) = (fx.mem("a").await?, fx.mem("b").await?);
        b.store(entry("b", "shared-key", "b's row", "core")).await?;
        a.store(entry("a", "shared-key", "a's row", "core")).await?;
        assert!(a.forget("shared-key".into()).await?, "{kind:?}");
        assert!(!a.forget("shared-key".into()).await?, "{kind:?}");
        assert!(!a.forget("nothing".into()).await?, "{kind:?}");
        assert_eq!(
            b.get("shared-key".into()).await?.map(|e| e.content),
            Some("b's row".to_string()),
            "{kind:?}"
        );
        assert_eq!(a.purge().await?, 0, "{kind:?}");
        assert_eq!(b.count().await?, 1, "{kind:?}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upsert_by_key_list_paging_windows_and_sessions() -> R {
    for kind in shared_kinds() {
        let fx = Fixture::new(kind, &[("a", vec![])])?;
        let a = fx.mem("a").await?;
        let first = a.store(entry("a", "k", "first version", "core")).await?;
        let second = a.store(entry("a", "k", "second version", "notes")).await?;
        assert_eq!(a.count().await?, 1, "{kind:?}");
        assert_eq!(
            (second.id.as_str(), second.created_at),
            (first.id.as_str(), first.created_at)
        );
        assert!(second.updated_at >= first.updated_at);
        assert_eq!(second.category, "notes");
        assert_eq!(
            seen(&*a, "first", 5).await?,
            vec![],
            "{kind:?}: FTS follows updates"
        );
        for i in 0..5 {
            let mut e = entry("a", &format!("s{i}"), "session talk", "daily");
            e.session = Some(if i % 2 == 0 { "even" } else { "odd" }.into());
            a.store(e).await?;
        }
        let page = |offset, limit| ListQuery {
            category: Some("daily".into()),
            offset,
            limit,
        };
        let p1 = a.list(page(0, 3)).await?;
        let p2 = a.list(page(3, 3)).await?;
        assert_eq!(
            (p1.len(), p2.len()),
            (3, 2),
            "{kind:?}: paging over 5 daily rows"
        );
        assert_eq!(p1[0].key, "s4", "{kind:?}: newest first");
        let mut q = RecallQuery::new("talk", 10);
        q.session = Some("even".into());
        assert_eq!(a.recall(q.clone()).await?.len(), 3, "{kind:?}");
        q.since = Some(time::OffsetDateTime::now_utc() + time::Duration::hours(1));
        assert_eq!(a.recall(q.clone()).await?.len(), 0, "{kind:?}");
        q.since = None;
        q.until = Some(time::OffsetDateTime::now_utc() - time::Duration::hours(1));
        assert_eq!(a.recall(q).await?.len(), 0, "{kind:?}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_and_attribution_survive_reopen_and_rename_mem2() -> R {
    for kind in shared_kinds() {
        let fx = Fixture::new(kind, &[("a", vec![]), ("b", vec![])])?;
        fx.mem("a")
            .await?
            .store(entry("a", "k", "durable fact", "core"))
            .await?;
        // A fresh set of stores: a restarted daemon.
        let reopened = warren_memory::MemoryStores::new(fx.root.clone());
        let store = reopened.store(&fx.config, kind).await?;
        let alias = |s: &str| warren_core::AgentAlias::new(s);
        let a2 =
            warren_memory::create_memory_for_agent(&reopened, &fx.config, &alias("a")?).await?;
        assert_eq!(
            seen(&*a2, "durable", 5).await?,
            pairs(&[("a", "k")]),
            "{kind:?}"
        );
        // b cannot take a's attribution while it has rows...
        fx.mem("b")
            .await?
            .store(entry("b", "kb", "b fact", "core"))
            .await?;
        let refused = store.rename_agent(alias("a")?, alias("b")?).await;
        assert!(
            matches!(refused, Err(MemoryError::Lifecycle { .. })),
            "{kind:?}: {refused:?}"
        );
        // ...but a rename to a free alias keeps every row.
        assert!(
            store.rename_agent(alias("a")?, alias("c")?).await?,
            "{kind:?}"
        );
        let c = store
            .agent_id(&alias("c")?, false)
            .await?
            .ok_or("c missing")?;
        let rows = store.export_agent(c).await?;
        assert_eq!(
            rows.iter()
                .map(|e| (e.agent.as_str(), e.key.as_str()))
                .collect::<Vec<_>>(),
            vec![("c", "k")],
            "{kind:?}"
        );
        assert_eq!(store.agent_id(&alias("a")?, false).await?, None, "{kind:?}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_removes_rows_and_registration_then_the_agent_can_write_again() -> R {
    for kind in shared_kinds() {
        let fx = Fixture::new(kind, &[("a", vec![])])?;
        let a = fx.mem("a").await?;
        a.store(entry("a", "k1", "one", "core")).await?;
        a.store(entry("a", "k2", "two", "core")).await?;
        assert_eq!(a.export().await?.len(), 2, "{kind:?}");
        assert_eq!(a.purge().await?, 2, "{kind:?}");
        assert_eq!(a.count().await?, 0, "{kind:?}");
        a.store(entry("a", "k3", "three", "core")).await?;
        assert_eq!(a.count().await?, 1, "{kind:?}");
    }
    Ok(())
}
