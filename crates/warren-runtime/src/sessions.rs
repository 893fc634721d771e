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
//! refuses a key another agent owns before anything of it is loaded. A turn sees its session
//! through [`for_turn`], which keeps a retried input from being stored twice.

use std::sync::{Arc, Mutex};

use warren_config::InstallRoot;
use warren_config::schema::ChannelsConfig;
use warren_core::{AgentAlias, Role, SessionKey};
use warren_store::acp::AcpSessionStore;
use warren_store::sessions::{
    AppendReceiver, ChatSessions, History, NewMessage, Page, SearchHit, SessionBackend,
    SessionError, SessionHandle, SessionInit, SessionMeta, SessionState, StoredMessage,
    open_chat_sessions_reporting,
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

/// Why a turn may not use a session.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error(transparent)]
    Session(#[from] warren_store::sessions::SessionError),
    #[error(transparent)]
    Owned(#[from] SessionOwned),
    #[error(transparent)]
    Reserved(#[from] crate::session_keys::DefaultKeyReserved),
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
) -> Result<ClaimedSession, ClaimError> {
    claim_reserved(sessions, key, agent, channel, None).await
}

/// [`claim`] of a key that may be a default key of `reserved_for` (issue 35 §7,
/// [`crate::session_keys`]): when it is another agent's, `agent` may use the session only if
/// it already owns it; creating it, or taking it unowned, is refused naming that agent.
/// Decided in the same read as the claim (under the session's slot).
pub async fn claim_reserved(
    sessions: &SessionHandle,
    key: &SessionKey,
    agent: &AgentAlias,
    channel: &str,
    reserved_for: Option<AgentAlias>,
) -> Result<ClaimedSession, ClaimError> {
    let reserved_for = reserved_for.filter(|r| r != agent);
    let (k, me) = (key.clone(), agent.clone());
    let reserved = reserved_for.clone();
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
                None if reserved.is_some() => return Ok(Err(())),
                None => b.ensure(&k, &init)?.agent,
            };
            Ok(Ok(owner.filter(|o| *o != me)))
        })
        .await?;
    match owner {
        Err(()) => Err(crate::session_keys::DefaultKeyReserved {
            session: key.clone(),
            owner: reserved_for.unwrap_or_else(|| agent.clone()),
            agent: agent.clone(),
        }
        .into()),
        Ok(None) => Ok(ClaimedSession {
            key: key.clone(),
            agent: agent.clone(),
        }),
        Ok(Some(owner)) => Err(SessionOwned {
            session: key.clone(),
            owner,
            agent: agent.clone(),
        }
        .into()),
    }
}

/// The session store as the turn answering `input` in `key` sees it. When the session's
/// newest message is the user message of a turn that failed (a provider error, a timeout, a
/// cancel before any answer) and `input` repeats it (a client's retry, a user asking again),
/// the turn goes on from that message instead of storing it twice: the turn's history load
/// leaves it out (the turn sends it as its input, so the provider sees it once) and the
/// turn's append of it writes nothing. Run under the session's queue slot, so no other turn
/// of this generation answers the message in between (which is why the door decides it for
/// every entry point, rather than each caller checking before it submits). The slot is per
/// generation and per process: a turn of the old generation still running in a reload's grace
/// period, or a `warren agent` run on the same session beside the daemon, may still be
/// answering the message; the repeat then joins it and the session gets two answers to it
/// (two turns on one session from two processes had that effect before too).
pub(crate) fn for_turn(sessions: &SessionHandle, key: &SessionKey, input: &str) -> SessionHandle {
    SessionHandle::new(Arc::new(TurnStore {
        inner: Arc::clone(sessions.blocking()),
        key: key.clone(),
        input: input.to_string(),
        unanswered: Mutex::new(Unanswered::NotLoaded),
    }))
}

/// What the turn's first load found at the end of its session.
#[derive(Debug)]
enum Unanswered {
    NotLoaded,
    /// The failed turn's user message the input repeats, until the turn appends it.
    Repeated(StoredMessage),
    None,
}

/// [`for_turn`]'s store: the backend, but for one session's repeated user message.
#[derive(Debug)]
struct TurnStore {
    inner: Arc<dyn SessionBackend>,
    key: SessionKey,
    input: String,
    unanswered: Mutex<Unanswered>,
}

impl TurnStore {
    /// The stored message `message` repeats, once: the turn's append of its input.
    fn repeats(&self, key: &SessionKey, message: &NewMessage) -> Option<StoredMessage> {
        if *key != self.key || message.role != Role::User || message.content != self.input {
            return None;
        }
        let mut unanswered = self.unanswered.lock().unwrap_or_else(|p| p.into_inner());
        match std::mem::replace(&mut *unanswered, Unanswered::None) {
            Unanswered::Repeated(stored) => Some(stored),
            _ => None,
        }
    }
}

impl SessionBackend for TurnStore {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    fn ensure(&self, key: &SessionKey, init: &SessionInit) -> Result<SessionMeta, SessionError> {
        self.inner.ensure(key, init)
    }

    fn append(
        &self,
        key: &SessionKey,
        message: &NewMessage,
    ) -> Result<StoredMessage, SessionError> {
        match self.repeats(key, message) {
            Some(stored) => Ok(stored),
            None => self.inner.append(key, message),
        }
    }

    fn queue_append(
        &self,
        key: &SessionKey,
        message: &NewMessage,
    ) -> Option<Result<AppendReceiver, SessionError>> {
        let Some(stored) = self.repeats(key, message) else {
            return self.inner.queue_append(key, message);
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let _ = tx.send(Ok(stored));
        Some(Ok(rx))
    }

    fn load(&self, key: &SessionKey, page: Page) -> Result<History, SessionError> {
        let mut history = self.inner.load(key, page)?;
        if *key != self.key {
            return Ok(history);
        }
        let mut unanswered = self.unanswered.lock().unwrap_or_else(|p| p.into_inner());
        if matches!(*unanswered, Unanswered::NotLoaded) {
            let repeated = history
                .messages
                .last()
                .is_some_and(|m| m.role == Role::User && m.content == self.input);
            *unanswered = match history.messages.pop() {
                Some(last) if repeated => Unanswered::Repeated(last),
                Some(last) => {
                    history.messages.push(last);
                    Unanswered::None
                }
                None => Unanswered::None,
            };
        }
        Ok(history)
    }

    fn list(&self) -> Result<Vec<SessionMeta>, SessionError> {
        self.inner.list()
    }

    fn meta(&self, key: &SessionKey) -> Result<Option<SessionMeta>, SessionError> {
        self.inner.meta(key)
    }

    fn rename(&self, from: &SessionKey, to: &SessionKey) -> Result<(), SessionError> {
        self.inner.rename(from, to)
    }

    fn delete(&self, key: &SessionKey) -> Result<bool, SessionError> {
        self.inner.delete(key)
    }

    fn clear(&self, key: &SessionKey) -> Result<u64, SessionError> {
        self.inner.clear(key)
    }

    fn set_name(&self, key: &SessionKey, name: Option<&str>) -> Result<(), SessionError> {
        self.inner.set_name(key, name)
    }

    fn set_state(&self, key: &SessionKey, state: SessionState) -> Result<(), SessionError> {
        self.inner.set_state(key, state)
    }

    fn set_agent(&self, key: &SessionKey, agent: Option<&AgentAlias>) -> Result<(), SessionError> {
        self.inner.set_agent(key, agent)
    }

    fn rename_agent(&self, from: &AgentAlias, to: &AgentAlias) -> Result<u64, SessionError> {
        self.inner.rename_agent(from, to)
    }

    fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>, SessionError> {
        self.inner.search(query, limit)
    }
}

/// Why the chat sessions are unavailable this generation (logged once when the stores were
/// opened; every later caller gets this).
#[derive(Debug, Clone, thiserror::Error)]
pub enum ChatUnavailable {
    #[error("chat sessions could not be opened: {0}")]
    Open(Arc<warren_store::sessions::OpenError>),
    #[error("chat sessions could not be opened: opening the session stores failed: {0}")]
    Task(Arc<tokio::task::JoinError>),
}

/// Chat and ACP session stores; where construction failed, why (already logged).
#[derive(Debug)]
pub struct SessionStores {
    pub chat: Result<ChatSessions, ChatUnavailable>,
    /// `None` when not opened (a CLI process needs no ACP store) or when it failed.
    pub acp: Option<AcpSessionStore>,
    /// Why the ACP store did not open (issue 36 §1: reported as a degraded store).
    pub acp_error: Option<String>,
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
                Err(ChatUnavailable::Open(Arc::new(e)))
            }
        };
        let (acp, acp_error) = if with_acp {
            match AcpSessionStore::open(&root) {
                Ok(store) => (Some(store), None),
                Err(e) => {
                    tracing::error!("ACP sessions stopped for this generation: {e}");
                    (None, Some(e.to_string()))
                }
            }
        } else {
            (None, None)
        };
        SessionStores {
            chat,
            acp,
            acp_error,
            skipped,
        }
    })
    .await;
    opened.unwrap_or_else(|e| {
        tracing::error!("session stores could not be opened: {e}");
        SessionStores {
            chat: Err(ChatUnavailable::Task(Arc::new(e))),
            acp: None,
            acp_error: None,
            skipped: Vec::new(),
        }
    })
}

#[cfg(test)]
mod tests {
    use warren_store::sessions::MemoryBackend;

    use super::*;

    fn texts(history: &History) -> Vec<(Role, &str)> {
        history
            .messages
            .iter()
            .map(|m| (m.role, m.content.as_str()))
            .collect()
    }

    #[tokio::test]
    async fn a_turn_repeating_a_failed_turns_message_does_not_store_it_twice() {
        let store = SessionHandle::new(Arc::new(MemoryBackend::new()));
        let key = SessionKey::new("s").unwrap();
        let user = |text: &str| NewMessage::new(Role::User, text);
        store.append(key.clone(), user("one")).await.unwrap();
        store
            .append(key.clone(), NewMessage::new(Role::Assistant, "First."))
            .await
            .unwrap();
        store.append(key.clone(), user("two")).await.unwrap(); // its turn failed

        // Another input: loaded and stored as it is.
        let other = for_turn(&store, &key, "three");
        let loaded = other.load(key.clone(), Page::All).await.unwrap();
        assert_eq!(loaded.messages.len(), 3);
        // The same input: the turn loads the history before it and stores its input once.
        let again = for_turn(&store, &key, "two");
        let loaded = again.load(key.clone(), Page::All).await.unwrap();
        assert_eq!(
            texts(&loaded),
            vec![(Role::User, "one"), (Role::Assistant, "First.")]
        );
        again.append(key.clone(), user("two")).await.unwrap();
        again
            .append(key.clone(), NewMessage::new(Role::Assistant, "Second."))
            .await
            .unwrap();
        // A second append of the same text is a new message ("two" asked again).
        again.append(key.clone(), user("two")).await.unwrap();
        let stored = store.load(key.clone(), Page::All).await.unwrap();
        assert_eq!(
            texts(&stored),
            vec![
                (Role::User, "one"),
                (Role::Assistant, "First."),
                (Role::User, "two"),
                (Role::Assistant, "Second."),
                (Role::User, "two"),
            ]
        );
    }
}
