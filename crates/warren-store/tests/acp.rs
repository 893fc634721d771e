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
