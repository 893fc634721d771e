//! The construction-error policy (MIG-7 [decision]): `[channels] session_store_on_error`
//! decides, for every entry point that opens sessions through `open_chat_sessions`, whether a
//! store that cannot be built stops the session subsystem or runs it without persistence.

#![allow(clippy::unwrap_used)]

use warren_config::InstallRoot;
use warren_config::schema::{ChannelsConfig, SessionStoreOnError};
use warren_store::sessions::{ChatSessions, open_chat_sessions};

/// An install whose session store cannot be built: a live file next to its staged import.
fn broken() -> (tempfile::TempDir, InstallRoot) {
    let dir = tempfile::tempdir().unwrap();
    let root = InstallRoot::at(dir.path().join("w"));
    warren_testkit::unbuildable_sessions(&root.sessions_dir()).unwrap();
    (dir, root)
}

#[test]
fn stop_is_the_default_and_returns_the_error_naming_both_files_mig7() {
    let (_d, root) = broken();
    let channels = ChannelsConfig::default();
    assert_eq!(channels.session_store_on_error, SessionStoreOnError::Stop);
    let err = open_chat_sessions(&root, &channels)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("k.jsonl.importing") && err.contains("k.jsonl"),
        "{err}"
    );
}

#[test]
fn ephemeral_hands_out_a_disabled_in_memory_backend_mig7() {
    let (_d, root) = broken();
    let channels = ChannelsConfig {
        session_store_on_error: SessionStoreOnError::Ephemeral,
        ..ChannelsConfig::default()
    };
    match open_chat_sessions(&root, &channels).unwrap() {
        ChatSessions::Disabled { backend, reason } => {
            assert_eq!(backend.kind(), "memory");
            assert!(reason.contains("k.jsonl.importing"), "{reason}");
        }
        ChatSessions::Durable(_) => panic!("construction should have failed"),
    }
}

#[test]
fn ephemeral_does_not_replace_a_store_that_opens_mig7() {
    let dir = tempfile::tempdir().unwrap();
    let root = InstallRoot::at(dir.path().join("w"));
    let channels = ChannelsConfig {
        session_store_on_error: SessionStoreOnError::Ephemeral,
        ..ChannelsConfig::default()
    };
    let s = open_chat_sessions(&root, &channels).unwrap();
    assert!(s.is_durable());
    assert_eq!(s.backend().kind(), "sqlite");
}
