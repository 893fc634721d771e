//! The process-level construction policy (MIG-7 [decision]), in its own test binary because it
//! is set once per process.

#![allow(clippy::unwrap_used)]

use std::fs;

use warren_config::InstallRoot;
use warren_config::schema::ChannelsConfig;
use warren_store::sessions::{
    ChatSessions, ConstructionPolicy, construction_policy, open_chat_sessions,
    set_construction_policy,
};

#[test]
fn run_without_persistence_hands_out_a_disabled_backend_for_every_entry_point() {
    assert_eq!(
        construction_policy(),
        ConstructionPolicy::Stop,
        "fail closed by default"
    );
    assert_eq!(
        set_construction_policy(ConstructionPolicy::RunWithoutPersistence),
        ConstructionPolicy::RunWithoutPersistence
    );
    // Set once: a later call cannot flip it.
    assert_eq!(
        set_construction_policy(ConstructionPolicy::Stop),
        ConstructionPolicy::RunWithoutPersistence
    );
    let dir = tempfile::tempdir().unwrap();
    let root = InstallRoot::at(dir.path().join("w"));
    fs::create_dir_all(root.sessions_dir()).unwrap();
    fs::write(root.sessions_dir().join("k.jsonl"), "").unwrap();
    fs::write(root.sessions_dir().join("k.jsonl.importing"), "").unwrap();
    match open_chat_sessions(&root, &ChannelsConfig::default()).unwrap() {
        ChatSessions::Disabled { backend, reason } => {
            assert_eq!(backend.kind(), "memory");
            assert!(reason.contains("k.jsonl.importing"), "{reason}");
        }
        ChatSessions::Durable(_) => panic!("construction should have failed"),
    }
}
