//! The chat sessions' share of an agent rename/delete/restore (LIFE-3, LIFE-4; issue 34 §2):
//! rename moves the session owners and the per-message attribution together; delete exports
//! each session with every message into the archive, then removes it; restore imports them back
//! under the (possibly new) alias, never over a session someone else owns. The backend is lent
//! by the caller ([`StoreHandles::chat`]: the daemon generation's, or the one its process
//! opened).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;
use warren_core::{AgentAlias, Role, SessionKey};

use super::{
    AgentState, AgentStateError, StateCause, StoreHandles, WorkspaceMove, from_json, json, scoped,
};
use crate::sessions::{NewMessage, Page, SessionBackend, SessionInit, SessionState};

/// The chat sessions' share, over the handles of `H`.
pub struct SessionsShare<H> {
    handles: Arc<H>,
}

impl<H> SessionsShare<H> {
    pub fn new(handles: Arc<H>) -> Self {
        Self { handles }
    }
}

/// A chat session as archived: its row and every message.
#[derive(Debug, Serialize, Deserialize)]
struct ArchivedSession {
    key: String,
    name: Option<String>,
    channel: Option<String>,
    state: String,
    #[serde(with = "time::serde::rfc3339")]
    created_at: OffsetDateTime,
    messages: Vec<ArchivedMessage>,
}

#[derive(Debug, Serialize, Deserialize)]
struct ArchivedMessage {
    seq: u64,
    role: Role,
    content: String,
    agent: Option<AgentAlias>,
    #[serde(with = "time::serde::rfc3339")]
    created_at: OffsetDateTime,
}

impl<H: StoreHandles> SessionsShare<H> {
    fn backend(&self) -> Result<Arc<dyn SessionBackend>, StateCause> {
        self.handles.chat()
    }

    fn owned(&self, alias: &AgentAlias) -> Result<Vec<SessionKey>, StateCause> {
        Ok(self
            .backend()?
            .list()?
            .into_iter()
            .filter(|m| m.agent.as_ref() == Some(alias))
            .map(|m| m.key)
            .collect())
    }

    fn restore_one(
        backend: &dyn SessionBackend,
        s: ArchivedSession,
        alias: &AgentAlias,
        original: &AgentAlias,
    ) -> Result<(), StateCause> {
        let key = SessionKey::new(s.key.clone()).map_err(|cause| StateCause::SessionKey {
            key: s.key.clone(),
            cause,
        })?;
        if let Some(existing) = backend.meta(&key)? {
            if existing.agent.as_ref() != Some(alias) {
                return Err(StateCause::SessionTaken {
                    key: s.key,
                    owner: existing.agent,
                });
            }
            // Left by an interrupted restore: import it again whole.
            backend.delete(&key)?;
        }
        backend.ensure(
            &key,
            &SessionInit {
                agent: Some(alias.clone()),
                channel: s.channel.clone(),
                name: s.name.clone(),
            },
        )?;
        for m in &s.messages {
            let agent = m
                .agent
                .as_ref()
                .map(|a| if a == original { alias } else { a }.clone());
            let mut msg = NewMessage::new(m.role, m.content.clone()).at(m.created_at);
            msg.agent = agent;
            backend.append(&key, &msg)?;
        }
        if let Some(state) = SessionState::parse(&s.state)
            && state != SessionState::Idle
        {
            backend.set_state(&key, state)?;
        }
        Ok(())
    }
}

impl<H: StoreHandles> AgentState for SessionsShare<H> {
    fn name(&self) -> &'static str {
        "sessions"
    }
    fn count(&self, alias: &AgentAlias) -> Result<u64, AgentStateError> {
        scoped(self.name(), alias, || Ok(self.owned(alias)?.len() as u64))
    }
    fn export(&self, alias: &AgentAlias) -> Result<(u64, Value), AgentStateError> {
        scoped(self.name(), alias, || {
            let backend = self.backend()?;
            let mut out = Vec::new();
            for meta in backend.list()? {
                if meta.agent.as_ref() != Some(alias) {
                    continue;
                }
                let history = backend.load(&meta.key, Page::All)?;
                out.push(ArchivedSession {
                    key: meta.key.to_string(),
                    name: meta.name,
                    channel: meta.channel,
                    state: meta.state.as_str().to_string(),
                    created_at: meta.created_at,
                    messages: history
                        .messages
                        .into_iter()
                        .map(|m| ArchivedMessage {
                            seq: m.seq,
                            role: m.role,
                            content: m.content,
                            agent: m.agent,
                            created_at: m.created_at,
                        })
                        .collect(),
                });
            }
            out.sort_by(|a, b| a.key.cmp(&b.key));
            Ok((out.len() as u64, json(&out)?))
        })
    }
    fn purge(&self, alias: &AgentAlias) -> Result<u64, AgentStateError> {
        scoped(self.name(), alias, || {
            let backend = self.backend()?;
            let mut n = 0;
            for key in self.owned(alias)? {
                if backend.delete(&key)? {
                    n += 1;
                }
            }
            Ok(n)
        })
    }
    fn rename(
        &self,
        from: &AgentAlias,
        to: &AgentAlias,
        _: &WorkspaceMove,
    ) -> Result<u64, AgentStateError> {
        // Session owners and per-message attribution together (LIFE-3).
        scoped(self.name(), from, || {
            Ok(self.backend()?.rename_agent(from, to)?)
        })
    }
    fn restore(
        &self,
        alias: &AgentAlias,
        original: &AgentAlias,
        data: Value,
        _: &WorkspaceMove,
    ) -> Result<u64, AgentStateError> {
        scoped(self.name(), alias, || {
            let backend = self.backend()?;
            let sessions: Vec<ArchivedSession> = from_json(data)?;
            let mut n = 0;
            for s in sessions {
                Self::restore_one(backend.as_ref(), s, alias, original)?;
                n += 1;
            }
            Ok(n)
        })
    }
}
