//! The in-memory session backend: what runs when persistence is disabled by the construction
//! policy (MIG-7 [decision]). Nothing survives the process; the runtime says so loudly.

use std::collections::BTreeMap;
use std::sync::Mutex;

use warren_core::{AgentAlias, SessionKey};

use super::{
    History, NewMessage, Page, SearchHit, SessionBackend, SessionError, SessionInit, SessionMeta,
    SessionState, StoredMessage,
};
use crate::timefmt;

#[derive(Debug, Default)]
pub struct MemoryBackend {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next_seq: u64,
    sessions: BTreeMap<SessionKey, (SessionMeta, Vec<StoredMessage>)>,
}

impl MemoryBackend {
    pub fn new() -> Self {
        Self::default()
    }

    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        f(&mut self.inner.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

fn fresh(key: &SessionKey, init: &SessionInit) -> SessionMeta {
    let now = timefmt::now();
    SessionMeta {
        key: key.clone(),
        name: init.name.clone(),
        agent: init.agent.clone(),
        channel: init.channel.clone(),
        state: SessionState::Idle,
        created_at: now,
        updated_at: now,
        message_count: 0,
    }
}

impl SessionBackend for MemoryBackend {
    fn kind(&self) -> &'static str {
        "memory"
    }

    fn ensure(&self, key: &SessionKey, init: &SessionInit) -> Result<SessionMeta, SessionError> {
        Ok(self.with(|i| {
            i.sessions
                .entry(key.clone())
                .or_insert_with(|| (fresh(key, init), Vec::new()))
                .0
                .clone()
        }))
    }

    fn append(
        &self,
        key: &SessionKey,
        message: &NewMessage,
    ) -> Result<StoredMessage, SessionError> {
        Ok(self.with(|i| {
            i.next_seq += 1;
            let seq = i.next_seq;
            let (meta, msgs) = i.sessions.entry(key.clone()).or_insert_with(|| {
                let init = SessionInit {
                    agent: message.agent.clone(),
                    ..SessionInit::default()
                };
                (fresh(key, &init), Vec::new())
            });
            let stored = StoredMessage {
                seq,
                role: message.role,
                content: message.content.clone(),
                agent: message.agent.clone(),
                created_at: message.created_at.unwrap_or_else(timefmt::now),
            };
            meta.message_count += 1;
            meta.updated_at = meta.updated_at.max(stored.created_at);
            if meta.agent.is_none() {
                meta.agent = message.agent.clone();
            }
            msgs.push(stored.clone());
            stored
        }))
    }

    fn load(&self, key: &SessionKey, page: Page) -> Result<History, SessionError> {
        let all = self.with(|i| i.sessions.get(key).map(|s| s.1.clone()).unwrap_or_default());
        let messages = match page {
            Page::All => all,
            Page::After { after, limit } => all
                .into_iter()
                .filter(|m| m.seq > after)
                .take(limit)
                .collect(),
            Page::Last(n) => {
                let skip = all.len().saturating_sub(n);
                all.into_iter().skip(skip).collect()
            }
        };
        Ok(History {
            messages,
            issues: Vec::new(),
        })
    }

    fn list(&self) -> Result<Vec<SessionMeta>, SessionError> {
        let mut v: Vec<SessionMeta> =
            self.with(|i| i.sessions.values().map(|s| s.0.clone()).collect());
        v.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then(a.key.cmp(&b.key)));
        Ok(v)
    }

    fn meta(&self, key: &SessionKey) -> Result<Option<SessionMeta>, SessionError> {
        Ok(self.with(|i| i.sessions.get(key).map(|s| s.0.clone())))
    }

    fn rename(&self, from: &SessionKey, to: &SessionKey) -> Result<(), SessionError> {
        self.with(|i| {
            if i.sessions.contains_key(to) {
                return Err(SessionError::AlreadyExists { key: to.clone() });
            }
            let (mut meta, msgs) = i
                .sessions
                .remove(from)
                .ok_or_else(|| SessionError::NotFound { key: from.clone() })?;
            meta.key = to.clone();
            i.sessions.insert(to.clone(), (meta, msgs));
            Ok(())
        })
    }

    fn delete(&self, key: &SessionKey) -> Result<bool, SessionError> {
        Ok(self.with(|i| i.sessions.remove(key).is_some()))
    }

    fn clear(&self, key: &SessionKey) -> Result<u64, SessionError> {
        self.with(|i| {
            let (meta, msgs) = i
                .sessions
                .get_mut(key)
                .ok_or_else(|| SessionError::NotFound { key: key.clone() })?;
            let n = msgs.len() as u64;
            msgs.clear();
            meta.message_count = 0;
            Ok(n)
        })
    }

    fn set_name(&self, key: &SessionKey, name: Option<&str>) -> Result<(), SessionError> {
        self.update(key, |m| m.name = name.map(str::to_string))
    }

    fn set_state(&self, key: &SessionKey, state: SessionState) -> Result<(), SessionError> {
        self.update(key, |m| m.state = state)
    }

    fn set_agent(&self, key: &SessionKey, agent: Option<&AgentAlias>) -> Result<(), SessionError> {
        self.update(key, |m| m.agent = agent.cloned())
    }

    fn rename_agent(&self, from: &AgentAlias, to: &AgentAlias) -> Result<u64, SessionError> {
        Ok(self.with(|i| {
            let mut n = 0;
            for (meta, msgs) in i.sessions.values_mut() {
                if meta.agent.as_ref() == Some(from) {
                    meta.agent = Some(to.clone());
                    n += 1;
                }
                for m in msgs.iter_mut().filter(|m| m.agent.as_ref() == Some(from)) {
                    m.agent = Some(to.clone());
                }
            }
            n
        }))
    }

    fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>, SessionError> {
        let words: Vec<String> = query.split_whitespace().map(str::to_lowercase).collect();
        if words.is_empty() {
            return Err(SessionError::EmptySearch);
        }
        Ok(self.with(|i| {
            i.sessions
                .iter()
                .flat_map(|(k, (_, msgs))| msgs.iter().map(move |m| (k, m)))
                .filter(|(_, m)| {
                    let lower = m.content.to_lowercase();
                    words.iter().all(|w| lower.contains(w.as_str()))
                })
                .take(limit)
                .map(|(k, m)| SearchHit {
                    key: k.clone(),
                    seq: m.seq,
                    role: m.role,
                    content: m.content.clone(),
                })
                .collect()
        }))
    }
}

impl MemoryBackend {
    fn update(
        &self,
        key: &SessionKey,
        f: impl FnOnce(&mut SessionMeta),
    ) -> Result<(), SessionError> {
        self.with(|i| match i.sessions.get_mut(key) {
            Some((meta, _)) => {
                f(meta);
                Ok(())
            }
            None => Err(SessionError::NotFound { key: key.clone() }),
        })
    }
}
