//! The session stores of one daemon generation (SESS-1, SESS-3, MIG-1, MIG-7): built from the
//! generation's `[channels]` through the one factory in `warren_store::sessions`, dropped when
//! the reload loop turns.
//!
//! Construction errors follow `[channels] session_store_on_error`, the one policy every entry
//! point shares: `stop` (default) stops the chat-session subsystem of this generation (loudly,
//! with the files at fault) while the daemon keeps running, and the next reload tries again;
//! `ephemeral` runs the generation with in-memory sessions and a loud error.

use warren_config::InstallRoot;
use warren_config::schema::ChannelsConfig;
use warren_store::acp::AcpSessionStore;
use warren_store::sessions::{ChatSessions, open_chat_sessions};

/// Chat and ACP session stores; `None` where construction failed (already logged).
#[derive(Debug, Default)]
pub struct SessionStores {
    pub chat: Option<ChatSessions>,
    pub acp: Option<AcpSessionStore>,
}

/// Opens both stores off the async workers (the import may read and fsync many files).
pub async fn open(root: &InstallRoot, channels: &ChannelsConfig) -> SessionStores {
    let (root, channels) = (root.clone(), channels.clone());
    let opened = tokio::task::spawn_blocking(move || {
        let chat = match open_chat_sessions(&root, &channels) {
            Ok(chat) => {
                tracing::info!(
                    backend = chat.backend().kind(),
                    durable = chat.is_durable(),
                    "chat sessions ready"
                );
                Some(chat)
            }
            Err(e) => {
                tracing::error!("chat sessions stopped for this generation: {e}");
                None
            }
        };
        let acp = match AcpSessionStore::open(&root) {
            Ok(store) => Some(store),
            Err(e) => {
                tracing::error!("ACP sessions stopped for this generation: {e}");
                None
            }
        };
        SessionStores { chat, acp }
    })
    .await;
    opened.unwrap_or_else(|e| {
        tracing::error!("session stores could not be opened: {e}");
        SessionStores::default()
    })
}
