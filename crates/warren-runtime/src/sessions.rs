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
    ChatSessions, SessionHandle, SessionInit, open_chat_sessions_reporting,
};

use crate::turn::TurnError;

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

/// A session claimed for one agent's turns: only [`claim`] makes one, so a turn cannot run
/// on a session it was not checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedSession {
    key: SessionKey,
    agent: AgentAlias,
}

impl ClaimedSession {
    pub fn key(&self) -> &SessionKey {
        &self.key
    }

    pub fn agent(&self) -> &AgentAlias {
        &self.agent
    }

    /// Refuses a turn of any agent but the claimant.
    pub fn check(&self, agent: &AgentAlias) -> Result<(), SessionOwned> {
        if &self.agent == agent {
            return Ok(());
        }
        Err(SessionOwned {
            session: self.key.clone(),
            owner: self.agent.clone(),
            agent: agent.clone(),
        })
    }
}

/// Makes `key` a session of `agent` (created with `channel` when new; an unowned one is
/// taken), or refuses it with the agent that owns it. Reads only the session's row, never its
/// messages into a turn. Run inside the session's queue slot: `ensure` never replaces an
/// owner, so when two agents race for a new key, what it returns is who won.
pub async fn claim(
    sessions: &SessionHandle,
    key: &SessionKey,
    agent: &AgentAlias,
    channel: &str,
) -> Result<ClaimedSession, TurnError> {
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
                None => b.ensure(&k, &init)?.agent,
            };
            Ok(owner.filter(|o| *o != me))
        })
        .await?;
    match owner {
        None => Ok(ClaimedSession {
            key: key.clone(),
            agent: agent.clone(),
        }),
        Some(owner) => Err(SessionOwned {
            session: key.clone(),
            owner,
            agent: agent.clone(),
        }
        .into()),
    }
}

/// Chat and ACP session stores; where construction failed, why (already logged).
#[derive(Debug)]
pub struct SessionStores {
    pub chat: Result<ChatSessions, String>,
    /// `None` when not opened (a CLI process needs no ACP store) or when it failed.
    pub acp: Option<AcpSessionStore>,
    /// Legacy JSONL files the import left in place on their own account (no valid message, a
    /// symlink, ...), each with what to do; the rest of the store is open (MIG-5, issue 15 §7).
    pub skipped: Vec<String>,
}

/// Opens the chat store (and the ACP store with `with_acp`) off the async workers (the import
/// may read and fsync many files).
pub async fn open(root: &InstallRoot, channels: &ChannelsConfig, with_acp: bool) -> SessionStores {
    let (root, channels) = (root.clone(), channels.clone());
    let opened = tokio::task::spawn_blocking(move || {
        let mut skipped = Vec::new();
        let chat = match open_chat_sessions_reporting(&root, &channels) {
            Ok((chat, left)) => {
                for e in left {
                    tracing::warn!("{e}");
                    skipped.push(e.to_string());
                }
                tracing::info!(
                    backend = chat.backend().kind(),
                    durable = chat.is_durable(),
                    "chat sessions ready"
                );
                Ok(chat)
            }
            Err(e) => {
                tracing::error!("chat sessions stopped for this generation: {e}");
                Err(e.to_string())
            }
        };
        let acp = if with_acp {
            match AcpSessionStore::open(&root) {
                Ok(store) => Some(store),
                Err(e) => {
                    tracing::error!("ACP sessions stopped for this generation: {e}");
                    None
                }
            }
        } else {
            None
        };
        SessionStores { chat, acp, skipped }
    })
    .await;
    opened.unwrap_or_else(|e| {
        tracing::error!("session stores could not be opened: {e}");
        SessionStores {
            chat: Err(format!("opening the session stores failed: {e}")),
            acp: None,
            skipped: Vec::new(),
        }
    })
}
