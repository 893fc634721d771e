//! The ACP session store (SESS-3, STATE-7) on a real database.

#![allow(clippy::unwrap_used)]

use pretty_assertions::assert_eq;
use warren_config::InstallRoot;
use warren_core::AgentAlias;
use warren_store::acp::{AcpError, AcpSessionStore, AcpState, NewAcpSession, Restore};

fn alias(s: &str) -> AgentAlias {
    AgentAlias::new(s).unwrap()
}

fn new(id: &str, agent: &str) -> NewAcpSession {
    NewAcpSession {
        id: id.into(),
        agent: alias(agent),
        cwd: "/work/project".into(),
        mode: Some("code".into()),
        transcript: Some(format!("acp-{id}")),
    }
}

#[test]
fn new_load_and_resume_survive_a_reopen_sess3() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let root = InstallRoot::at(dir.path().join("w"));
    let store = AcpSessionStore::open(&root)?;
    let created = store.create(&new("s1", "main"))?;
    assert!(matches!(
        store.create(&new("s1", "ops")),
        Err(AcpError::Duplicate { .. })
    ));
    store.set_mode("s1", Some("ask"))?;
    drop(store);

    let store = AcpSessionStore::open(&root)?;
    assert!(root.acp_sessions_db().exists());
    assert!(!root.sessions_db().exists(), "separate from chat sessions");
    let Restore::Restorable(loaded) = store.load("s1")? else {
        panic!("s1 should be restorable");
    };
    assert_eq!(loaded.mode.as_deref(), Some("ask"));
    assert_eq!(
        (loaded.agent.clone(), loaded.cwd.clone(), loaded.created_at),
        (alias("main"), created.cwd, created.created_at)
    );
    let Restore::Restorable(resumed) = store.resume("s1")? else {
        panic!("s1 should resume");
    };
    assert!(resumed.updated_at >= loaded.updated_at);
    assert_eq!(store.load("nope")?, Restore::Missing);
    Ok(())
}

#[test]
fn a_killed_session_is_a_tombstone_that_never_comes_back_sess3()
-> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let root = InstallRoot::at(dir.path().join("w"));
    let store = AcpSessionStore::open(&root)?;
    store.create(&new("k", "main"))?;
    store.create(&new("live", "main"))?;
    store.create(&new("other", "ops"))?;
    let killed = store.end("k", AcpState::Killed)?;
    assert_eq!(killed.state, AcpState::Killed);
    // The first tombstone wins.
    let again = store.end("k", AcpState::Closed)?;
    assert_eq!(
        (again.state, again.closed_at),
        (AcpState::Killed, killed.closed_at)
    );
    assert!(matches!(store.load("k")?, Restore::Tombstoned(_)));
    assert!(matches!(store.resume("k")?, Restore::Tombstoned(_)));
    assert!(matches!(
        store.set_mode("k", Some("x")),
        Err(AcpError::Tombstoned { .. })
    ));
    assert!(matches!(
        store.create(&new("k", "main")),
        Err(AcpError::Duplicate { .. })
    ));
    let ids = |a: Option<&AgentAlias>| -> Vec<String> {
        store.list(a).unwrap().into_iter().map(|s| s.id).collect()
    };
    let mut all = ids(None);
    all.sort();
    assert_eq!(all, ["live", "other"]);
    assert_eq!(ids(Some(&alias("ops"))), ["other"]);
    assert_eq!(store.rename_agent(&alias("ops"), &alias("research"))?, 1);
    assert_eq!(ids(Some(&alias("research"))), ["other"]);
    assert_eq!(store.delete_agent(&alias("main"))?, 2);
    assert_eq!(store.get("k")?, None);
    Ok(())
}

#[test]
fn acp_transcripts_are_exported_imported_and_follow_a_rename_life3_life4()
-> Result<(), Box<dyn std::error::Error>> {
    use warren_store::acp::{AcpSessionStore, AcpState, NewAcpSession};
    let dir = tempfile::tempdir()?;
    let root = warren_config::InstallRoot::at(dir.path());
    let store = AcpSessionStore::open(&root)?;
    let b = warren_core::AgentAlias::new("b")?;
    let bee = warren_core::AgentAlias::new("bee")?;
    store.create(&NewAcpSession {
        id: "s1".into(),
        agent: b.clone(),
        cwd: "/install/agents/b/workspace/src".into(),
        mode: None,
        transcript: None,
    })?;
    assert_eq!(store.append_transcript("s1", "user", "hello")?, 1);
    assert_eq!(store.append_transcript("s1", "agent", "hi")?, 2);
    store.end("s1", AcpState::Closed)?;
    assert!(
        store.append_transcript("s1", "user", "late").is_err(),
        "tombstones take no messages"
    );

    let exported = store.export_agent(&b)?;
    assert_eq!(exported.len(), 1);
    assert_eq!(exported[0].transcript.len(), 2);
    assert_eq!(store.delete_agent(&b)?, 1);
    assert!(
        store.transcript("s1")?.is_empty(),
        "transcripts go with their session"
    );
    assert_eq!(store.count_agent(&b)?, 0);

    assert_eq!(store.import_agent(&b, &exported, None)?, 1);
    assert_eq!(
        store.import_agent(&b, &exported, None)?,
        0,
        "a retry converges"
    );
    assert_eq!(store.export_agent(&b)?, exported);

    let n = store.rename_agent_with_cwd(
        &b,
        &bee,
        Some((
            "/install/agents/b/workspace",
            "/install/agents/bee/workspace",
        )),
    )?;
    assert_eq!(n, 1);
    let s = store.get("s1")?.ok_or("gone")?;
    assert_eq!(s.agent, bee);
    assert_eq!(s.cwd, "/install/agents/bee/workspace/src");
    assert_eq!(store.transcript("s1")?.len(), 2);
    Ok(())
}
