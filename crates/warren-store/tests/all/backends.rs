//! The session backend contract (SESS-1, SESS-2) run against the real SQLite and JSONL
//! backends on temporary install roots.

// Helpers outside #[test] fns unwrap too: a broken fixture should fail the test loudly.
#![allow(clippy::unwrap_used)]

use std::fs;
use std::sync::Arc;

use pretty_assertions::assert_eq;
use warren_config::InstallRoot;
use warren_config::schema::SessionDurability;
use warren_core::{AgentAlias, Role, SessionKey};
use warren_store::sessions::{
    JsonlBackend, LineIssueKind, NewMessage, Page, SessionBackend, SessionError, SessionInit,
    SessionState, SqliteBackend,
};

type R = Result<(), Box<dyn std::error::Error>>;

fn key(s: &str) -> SessionKey {
    SessionKey::new(s).unwrap()
}

fn alias(s: &str) -> AgentAlias {
    AgentAlias::new(s).unwrap()
}

fn root() -> (tempfile::TempDir, InstallRoot) {
    let dir = tempfile::tempdir().unwrap();
    let root = InstallRoot::at(dir.path().join("w"));
    (dir, root)
}

fn backends(root: &InstallRoot) -> Vec<Arc<dyn SessionBackend>> {
    vec![
        Arc::new(SqliteBackend::open(root, SessionDurability::Turn).unwrap()),
        Arc::new(JsonlBackend::open(root, SessionDurability::Turn).unwrap()),
    ]
}

fn contents(b: &dyn SessionBackend, k: &SessionKey, page: Page) -> Vec<String> {
    b.load(k, page)
        .unwrap()
        .messages
        .into_iter()
        .map(|m| m.content)
        .collect()
}

#[test]
fn append_load_and_page_history_sess1() -> R {
    let (_d, root) = root();
    for b in backends(&root) {
        let k = key("chat-1");
        for i in 0..5 {
            b.append(
                &k,
                &NewMessage::new(Role::User, format!("m{i}")).by(alias("main")),
            )?;
        }
        assert_eq!(
            contents(b.as_ref(), &k, Page::All),
            ["m0", "m1", "m2", "m3", "m4"],
            "{}",
            b.kind()
        );
        assert_eq!(contents(b.as_ref(), &k, Page::Last(2)), ["m3", "m4"]);
        let all = b.load(&k, Page::All)?.messages;
        let after = contents(
            b.as_ref(),
            &k,
            Page::After {
                after: all[1].seq,
                limit: 2,
            },
        );
        assert_eq!(after, ["m2", "m3"], "{}", b.kind());
        let meta = b.meta(&k)?.unwrap();
        assert_eq!(meta.message_count, 5);
        assert_eq!(meta.agent, Some(alias("main")));
        assert!(contents(b.as_ref(), &key("nobody"), Page::All).is_empty());
    }
    Ok(())
}

#[test]
fn original_timestamps_are_kept_in_utc_sess1() -> R {
    let (_d, root) = root();
    let at = time::OffsetDateTime::parse(
        "2024-05-06T07:08:09.5+02:00",
        &time::format_description::well_known::Rfc3339,
    )?;
    for b in backends(&root) {
        b.append(&key("t"), &NewMessage::new(Role::User, "old").at(at))?;
        let m = &b.load(&key("t"), Page::All)?.messages[0];
        assert_eq!(m.created_at, at, "{}", b.kind());
        assert_eq!(m.created_at.offset(), time::UtcOffset::UTC);
    }
    Ok(())
}

#[test]
fn rename_delete_clear_and_list() -> R {
    let (_d, root) = root();
    for b in backends(&root) {
        let (a, c) = (key("a"), key("c"));
        b.append(&a, &NewMessage::new(Role::User, "x"))?;
        b.append(&c, &NewMessage::new(Role::User, "y"))?;
        assert!(matches!(
            b.rename(&a, &c),
            Err(SessionError::AlreadyExists { .. })
        ));
        b.rename(&a, &key("b"))?;
        assert!(b.meta(&a)?.is_none());
        assert_eq!(contents(b.as_ref(), &key("b"), Page::All), ["x"]);
        assert_eq!(b.clear(&key("b"))?, 1);
        assert_eq!(b.meta(&key("b"))?.map(|m| m.message_count), Some(0));
        let mut keys: Vec<String> = b.list()?.into_iter().map(|m| m.key.to_string()).collect();
        keys.sort();
        assert_eq!(keys, ["b", "c"], "{}", b.kind());
        assert!(b.delete(&c)?);
        assert!(!b.delete(&c)?);
        assert!(contents(b.as_ref(), &c, Page::All).is_empty());
        b.delete(&key("b"))?;
    }
    Ok(())
}

#[test]
fn sqlite_keeps_name_state_agent_and_channel() -> R {
    let (_d, root) = root();
    let b = SqliteBackend::open(&root, SessionDurability::Batched)?;
    let k = key("tg_1");
    let init = SessionInit {
        agent: Some(alias("ops")),
        channel: Some("telegram.ops".into()),
        name: None,
    };
    let meta = b.ensure(&k, &init)?;
    assert_eq!(
        (meta.agent.clone(), meta.channel.clone()),
        (Some(alias("ops")), Some("telegram.ops".into()))
    );
    b.set_name(&k, Some("Standup"))?;
    b.set_state(&k, SessionState::Running)?;
    b.set_agent(&k, Some(&alias("research")))?;
    let meta = b.meta(&k)?.unwrap();
    assert_eq!(meta.name.as_deref(), Some("Standup"));
    assert_eq!(meta.state, SessionState::Running);
    assert_eq!(meta.agent, Some(alias("research")));
    assert!(matches!(
        b.set_name(&key("nope"), Some("x")),
        Err(SessionError::NotFound { .. })
    ));
    // The row survives a reopen.
    drop(b);
    let b = SqliteBackend::open(&root, SessionDurability::Turn)?;
    assert_eq!(b.meta(&k)?.unwrap().name.as_deref(), Some("Standup"));
    Ok(())
}

#[test]
fn search_treats_quotes_and_operators_as_text_sess1() -> R {
    let (_d, root) = root();
    for b in backends(&root) {
        b.append(
            &key("s1"),
            &NewMessage::new(Role::User, "deploy the \"blue\" build NEAR lunch"),
        )?;
        b.append(
            &key("s2"),
            &NewMessage::new(Role::Assistant, "rollback (of blue) done"),
        )?;
        let hits = |q: &str| -> Vec<String> {
            let mut v: Vec<String> = b
                .search(q, 10)
                .unwrap()
                .into_iter()
                .map(|h| h.key.to_string())
                .collect();
            v.sort();
            v
        };
        // Quotes, NEAR and parentheses are not FTS syntax errors; they are searched as words
        // (SQLite: tokens; JSONL: substrings).
        let blue: &[&str] = if b.kind() == "sqlite" {
            &["s1", "s2"]
        } else {
            &["s1"]
        };
        assert_eq!(hits("\"blue\""), blue, "{}", b.kind());
        assert_eq!(hits("deploy NEAR"), ["s1"], "{}", b.kind());
        assert_eq!(hits("(of blue)"), ["s2"], "{}", b.kind());
        assert!(hits("AND OR NOT *").is_empty());
        assert!(matches!(b.search("   ", 5), Err(SessionError::EmptySearch)));
    }
    Ok(())
}

#[test]
fn deleted_messages_leave_the_search_index() -> R {
    let (_d, root) = root();
    let b = SqliteBackend::open(&root, SessionDurability::Turn)?;
    b.append(&key("gone"), &NewMessage::new(Role::User, "needle"))?;
    b.rename(&key("gone"), &key("moved"))?;
    assert_eq!(b.search("needle", 5)?[0].key, key("moved"));
    b.delete(&key("moved"))?;
    assert!(b.search("needle", 5)?.is_empty());
    Ok(())
}

#[test]
fn jsonl_torn_last_line_is_reported_and_the_next_append_starts_clean_sess1() -> R {
    let (_d, root) = root();
    let b = JsonlBackend::open(&root, SessionDurability::Turn)?;
    let k = key("torn");
    b.append(&k, &NewMessage::new(Role::User, "first"))?;
    let path = root.sessions_dir().join("torn.jsonl");
    let mut bytes = fs::read(&path)?;
    bytes.extend_from_slice(b"{\"role\":\"assistant\",\"cont");
    fs::write(&path, &bytes)?;
    let h = b.load(&k, Page::All)?;
    assert_eq!(h.messages.len(), 1);
    assert_eq!(h.issues.len(), 1);
    assert_eq!(h.issues[0].kind, LineIssueKind::TornTail);
    b.append(&k, &NewMessage::new(Role::User, "second"))?;
    let h = b.load(&k, Page::All)?;
    assert_eq!(
        h.messages
            .iter()
            .map(|m| m.content.as_str())
            .collect::<Vec<_>>(),
        ["first", "second"]
    );
    assert!(
        matches!(h.issues[0].kind, LineIssueKind::Invalid(_)),
        "the torn line is now a closed invalid line"
    );
    Ok(())
}

#[test]
fn jsonl_keeps_name_state_agent_and_channel_in_an_atomic_sidecar_sess1() -> R {
    let (_d, root) = root();
    let b = JsonlBackend::open(&root, SessionDurability::Turn)?;
    let k = key("tg_1");
    let init = SessionInit {
        agent: Some(alias("ops")),
        channel: Some("telegram.ops".into()),
        name: None,
    };
    let meta = b.ensure(&k, &init)?;
    assert_eq!(
        (meta.agent.clone(), meta.channel.clone()),
        (Some(alias("ops")), Some("telegram.ops".into()))
    );
    b.append(&k, &NewMessage::new(Role::User, "hi"))?;
    b.set_name(&k, Some("Standup"))?;
    b.set_state(&k, SessionState::Running)?;
    b.set_agent(&k, Some(&alias("research")))?;
    let meta = b.meta(&k)?.unwrap();
    assert_eq!(meta.name.as_deref(), Some("Standup"));
    assert_eq!(meta.state, SessionState::Running);
    assert_eq!(meta.agent, Some(alias("research")));
    assert_eq!(meta.channel.as_deref(), Some("telegram.ops"));
    assert_eq!(meta.message_count, 1);
    assert!(matches!(
        b.set_name(&key("nope"), Some("x")),
        Err(SessionError::NotFound { .. })
    ));
    // The sidecar is the only extra file (no temp left behind); the messages file is intact.
    let mut names: Vec<String> = fs::read_dir(root.sessions_dir())?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("tg_1") || n.ends_with(".tmp"))
        .collect();
    names.sort();
    assert_eq!(names, ["tg_1.jsonl", "tg_1.meta.json"]);
    // Survives a reopen; list shows it too.
    drop(b);
    let b = JsonlBackend::open(&root, SessionDurability::Turn)?;
    assert_eq!(b.meta(&k)?.unwrap().name.as_deref(), Some("Standup"));
    assert_eq!(b.list()?[0].state, SessionState::Running);
    // Rename carries the metadata; delete removes it.
    b.rename(&k, &key("tg_2"))?;
    let moved = b.meta(&key("tg_2"))?.unwrap();
    assert_eq!(
        (moved.name.as_deref(), moved.state),
        (Some("Standup"), SessionState::Running)
    );
    assert!(!root.sessions_dir().join("tg_1.meta.json").exists());
    assert!(b.delete(&key("tg_2"))?);
    assert!(!root.sessions_dir().join("tg_2.meta.json").exists());
    // A fresh session of the same key starts without the old metadata.
    b.append(&key("tg_2"), &NewMessage::new(Role::User, "again"))?;
    let fresh = b.meta(&key("tg_2"))?.unwrap();
    assert_eq!((fresh.name, fresh.state), (None, SessionState::Idle));
    Ok(())
}

#[test]
fn a_corrupt_jsonl_sidecar_is_an_error_naming_the_file() -> R {
    let (_d, root) = root();
    let b = JsonlBackend::open(&root, SessionDurability::Turn)?;
    b.append(&key("k"), &NewMessage::new(Role::User, "x"))?;
    fs::write(
        root.sessions_dir().join("k.meta.json"),
        "{\"state\": \"dancing\"}",
    )?;
    let err = b.meta(&key("k")).unwrap_err().to_string();
    assert!(
        err.contains("k.meta.json") && err.contains("dancing"),
        "{err}"
    );
    fs::write(root.sessions_dir().join("k.meta.json"), "{not json")?;
    let err = b.set_name(&key("k"), Some("n")).unwrap_err().to_string();
    assert!(err.contains("k.meta.json"), "{err}");
    Ok(())
}

#[test]
fn concurrent_jsonl_writers_never_interleave_lines_sess2() -> R {
    let (_d, root) = root();
    let b = Arc::new(JsonlBackend::open(&root, SessionDurability::Batched)?);
    // A second handle on the same directory, as another subsystem would open.
    let b2 = Arc::new(JsonlBackend::open(&root, SessionDurability::Batched)?);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let b: Arc<dyn SessionBackend> = if t % 2 == 0 { b.clone() } else { b2.clone() };
            std::thread::spawn(move || {
                for i in 0..50 {
                    b.append(
                        &key("shared"),
                        &NewMessage::new(Role::User, format!("{t}-{i} {}", "x".repeat(3000))),
                    )
                    .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let h = b.load(&key("shared"), Page::All)?;
    assert_eq!((h.messages.len(), h.issues.len()), (200, 0));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_handle_runs_off_the_workers() -> R {
    let (_d, root) = root();
    let h = warren_store::sessions::SessionHandle::new(Arc::new(SqliteBackend::open(
        &root,
        SessionDurability::Turn,
    )?));
    h.append(key("a"), NewMessage::new(Role::User, "hi"))
        .await?;
    assert_eq!(h.load(key("a"), Page::All).await?.messages.len(), 1);
    Ok(())
}

/// LIFE-3: an agent rename repoints the sessions it owns AND every message attributed to it,
/// in sessions of other agents too, leaves other agents alone, and is idempotent.
#[test]
fn rename_agent_repoints_owners_and_message_attribution_life3() -> R {
    let (_d, root) = root();
    let mut all = backends(&root);
    all.push(Arc::new(warren_store::sessions::MemoryBackend::new()));
    for b in all {
        let own = key("own");
        let theirs = key("theirs");
        b.append(&own, &NewMessage::new(Role::User, "hi").by(alias("old")))?;
        b.append(
            &own,
            &NewMessage::new(Role::Assistant, "yo").by(alias("old")),
        )?;
        b.ensure(
            &theirs,
            &SessionInit {
                agent: Some(alias("other")),
                ..SessionInit::default()
            },
        )?;
        b.append(
            &theirs,
            &NewMessage::new(Role::User, "q").by(alias("other")),
        )?;
        b.append(
            &theirs,
            &NewMessage::new(Role::Assistant, "a").by(alias("old")),
        )?;

        assert_eq!(
            b.rename_agent(&alias("old"), &alias("new"))?,
            1,
            "{}",
            b.kind()
        );

        let owner = |k: &SessionKey| b.meta(k).unwrap().unwrap().agent;
        assert_eq!(owner(&own), Some(alias("new")), "{}", b.kind());
        assert_eq!(owner(&theirs), Some(alias("other")), "{}", b.kind());
        let by = |k: &SessionKey| -> Vec<(String, Option<AgentAlias>)> {
            b.load(k, Page::All)
                .unwrap()
                .messages
                .into_iter()
                .map(|m| (m.content, m.agent))
                .collect()
        };
        assert_eq!(
            by(&own),
            vec![
                ("hi".to_string(), Some(alias("new"))),
                ("yo".to_string(), Some(alias("new")))
            ],
            "{}",
            b.kind()
        );
        assert_eq!(
            by(&theirs),
            vec![
                ("q".to_string(), Some(alias("other"))),
                ("a".to_string(), Some(alias("new")))
            ],
            "{}",
            b.kind()
        );
        assert_eq!(
            b.rename_agent(&alias("old"), &alias("new"))?,
            0,
            "{}",
            b.kind()
        );
        b.delete(&own)?;
        b.delete(&theirs)?;
    }
    Ok(())
}

/// A torn last line survives a JSONL agent rename byte for byte (it is not "repaired" away).
#[test]
fn jsonl_rename_agent_keeps_a_torn_tail() -> R {
    let (_d, root) = root();
    let b = JsonlBackend::open(&root, SessionDurability::Turn)?;
    let k = key("torn");
    b.append(&k, &NewMessage::new(Role::User, "hi").by(alias("old")))?;
    let path = root.sessions_dir().join("torn.jsonl");
    let mut bytes = fs::read(&path)?;
    bytes.extend_from_slice(b"{\"role\":\"user\",\"cont");
    fs::write(&path, &bytes)?;
    b.rename_agent(&alias("old"), &alias("new"))?;
    let after = fs::read_to_string(&path)?;
    assert!(after.ends_with("\n{\"role\":\"user\",\"cont"), "{after}");
    assert!(after.contains("\"agent\":\"new\""), "{after}");
    assert!(!after.contains("\"agent\":\"old\""), "{after}");
    Ok(())
}
