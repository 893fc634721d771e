//! The daemon's session stores follow `[channels] session_store_on_error` (MIG-7 [decision]),
//! the same policy as the CLI: `stop` leaves the chat-session subsystem off for the generation,
//! `ephemeral` runs it in memory.

#![allow(clippy::unwrap_used)]

use warren_config::InstallRoot;
use warren_config::schema::{ChannelsConfig, SessionStoreOnError};

fn broken() -> (tempfile::TempDir, InstallRoot) {
    let dir = tempfile::tempdir().unwrap();
    let root = InstallRoot::at(dir.path().join("w"));
    warren_testkit::unbuildable_sessions(&root.sessions_dir()).unwrap();
    (dir, root)
}

#[tokio::test]
async fn the_daemon_stops_chat_sessions_under_stop_and_runs_them_in_memory_under_ephemeral() {
    let (_d, root) = broken();
    let stop = warren_runtime::sessions::open(&root, &ChannelsConfig::default(), true).await;
    let why = stop
        .chat
        .expect_err("stop: the chat-session subsystem is off");
    assert!(
        matches!(&why, warren_runtime::sessions::ChatUnavailable::Open(cause) if !cause.to_string().is_empty()),
        "the cause is kept for the health report: {why}"
    );
    let ephemeral = ChannelsConfig {
        session_store_on_error: SessionStoreOnError::Ephemeral,
        ..ChannelsConfig::default()
    };
    let opened = warren_runtime::sessions::open(&root, &ephemeral, true).await;
    let chat = opened
        .chat
        .unwrap_or_else(|e| panic!("ephemeral: sessions run in memory: {e}"));
    assert!(!chat.is_durable());
    assert_eq!(chat.backend().kind(), "memory");
}
