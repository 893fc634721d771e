//! The session stores of one daemon generation (SESS-1, SESS-3, MIG-1, MIG-7): built from the
//! generation's `[channels]` through the one factory in `warren_store::sessions`, dropped when
//! the reload loop turns.
//!
//! Construction errors follow `[channels] session_store_on_error`, the one policy every entry
//! point shares: `stop` (default) stops the chat-session subsystem of this generation (loudly,
//! with the files at fault) while the daemon keeps running, and the next reload tries again;
//! `ephemeral` runs the generation with in-memory sessions and a loud error.
//!
//! A session belongs to one agent (SESS-1): [`claim`] creates a session for its agent, or
//! refuses a key another agent owns before anything of it is loaded.

use warren_config::InstallRoot;
use warren_config::schema::ChannelsConfig;
use warren_core::{AgentAlias, SessionKey};
use warren_store::acp::AcpSessionStore;
use warren_store::sessions::{
    ChatSessions, SessionError, SessionHandle, SessionInit, open_chat_sessions,
};

/// Why a turn may not use a session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "session '{session}' belongs to agent '{owner}'; agent '{agent}' cannot use it (choose another session key, or leave it out for {agent}'s own session)"
)]
pub struct SessionOwned {
    pub session: SessionKey,
    pub owner: AgentAlias,
    pub agent: AgentAlias,
}

/// Makes `key` a session of `agent` (created with `channel` when new; an unowned one is
/// taken), or says which agent owns it. Reads only the session's row, never its messages'
/// content into a turn. Run inside the session's queue slot: the owner a concurrent first turn
/// wrote is the one `ensure` keeps and reports, so two agents racing for a new key cannot
/// both win.
pub async fn claim(
    sessions: &SessionHandle,
    key: &SessionKey,
    agent: &AgentAlias,
    channel: &str,
) -> Result<Result<(), SessionOwned>, SessionError> {
    let (k, me) = (key.clone(), agent.clone());
    let init = SessionInit {
        agent: Some(agent.clone()),
        channel: Some(channel.to_string()),
        name: None,
    };
    let owner = sessions
        .run(move |b| {
            let existing = b.meta(&k)?;
            let owner = match existing.as_ref().and_then(|m| m.agent.as_ref()) {
                Some(owner) => Some(owner.clone()),
                // New or unowned: created (or taken) for this agent; `ensure` never replaces
                // an owner, so what it returns is who won.
                None => b.ensure(&k, &init)?.agent,
            };
            Ok(owner.filter(|o| *o != me))
        })
        .await?;
    Ok(match owner {
        None => Ok(()),
        Some(owner) => Err(SessionOwned {
            session: key.clone(),
            owner,
            agent: agent.clone(),
        }),
    })
}

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
