//! Conversations without a named session (issue 37 §2). The OpenAI API is stateless: a client
//! holding many conversations sends each one whole, with no session id. A request with neither
//! the `X-Warren-Session` header nor `user` therefore goes to the session whose conversation
//! its earlier messages are: after each turn, a digest of the conversation as the client now
//! holds it (its earlier messages, its input and the reply, or the streamed text) is
//! remembered for that session; a request whose earlier messages have that digest continues
//! it. A request that matches none (a first message, an edited earlier message, a conversation
//! Warren never held) starts a new session, `oai-<scope>-<random>`, where the scope is a hash
//! of the token and the model, so unrelated conversations never share a session (nor its turn
//! queue) and one token never continues another's.
//!
//! The digests live in memory; after a restart the first miss of a scope reads that scope's
//! sessions once and digests their stored conversations ([`Threads::scan`]).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Instant;

use sha2::{Digest, Sha256};
use warren_core::{AgentAlias, Role, SessionKey};

use super::history::Visible;
use super::retry::KEEP;

/// At most this many digests (or first-message starts) are kept; past it they are forgotten
/// and re-read from the store on the next miss.
const MAX_ENTRIES: usize = 65_536;

/// The session key prefix of a token's conversations with one model: `oai-<16 hex>-`.
pub fn prefix(token_hash: &str, alias: &AgentAlias) -> String {
    let mut hash = Sha256::new();
    for part in ["warren-openai-thread", token_hash, alias.as_str()] {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    let hex = warren_core::hex::encode(&hash.finalize());
    format!("oai-{}-", hex.get(..16).unwrap_or(&hex))
}

/// The digest of a conversation in a scope (roles and trimmed texts, in order).
pub fn digest<'a>(prefix: &str, messages: impl IntoIterator<Item = (Role, &'a str)>) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update(prefix.as_bytes());
    for (role, text) in messages {
        let text = text.trim();
        hash.update([role as u8]);
        hash.update((text.len() as u64).to_le_bytes());
        hash.update(text.as_bytes());
    }
    hash.finalize().into()
}

/// The digest of a stored conversation as far as it is answered (a failed turn's unanswered
/// user message at its end does not count, as in [`super::history::check_history`]).
pub fn digest_stored(prefix: &str, stored: &[Visible]) -> [u8; 32] {
    let answered = stored
        .iter()
        .rposition(|m| m.role == Role::Assistant)
        .map_or(0, |i| i + 1);
    let stored = stored.get(..answered).unwrap_or_default();
    digest(prefix, stored.iter().map(|m| (m.role, m.text.as_str())))
}

/// The remembered conversations (see the module docs).
#[derive(Default)]
pub struct Threads {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Conversation digest → the session holding it.
    sessions: HashMap<[u8; 32], SessionKey>,
    /// Prefixes whose stored sessions were read.
    scanned: HashSet<String>,
    /// (prefix, request fingerprint) of a first message → the session it started, so the SDK's
    /// retry of it joins that session's turn instead of starting another.
    starts: HashMap<[u8; 32], (SessionKey, Instant)>,
}

impl Threads {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The session holding the conversation with this digest.
    pub fn find(&self, digest: &[u8; 32]) -> Option<SessionKey> {
        self.lock().sessions.get(digest).cloned()
    }

    /// Remembers that `session` holds the conversation with this digest.
    pub fn remember(&self, digest: [u8; 32], session: SessionKey) {
        let mut inner = self.lock();
        if inner.sessions.len() >= MAX_ENTRIES {
            inner.sessions.clear();
            inner.scanned.clear();
        }
        inner.sessions.insert(digest, session);
    }

    /// Whether the sessions of `prefix` still need to be read from the store; marks them read.
    pub fn needs_scan(&self, prefix: &str) -> bool {
        self.lock().scanned.insert(prefix.to_string())
    }

    /// The session a first message with this fingerprint started recently.
    pub fn started(&self, prefix: &str, fingerprint: &[u8; 32]) -> Option<SessionKey> {
        let key = start_key(prefix, fingerprint);
        let inner = self.lock();
        inner
            .starts
            .get(&key)
            .filter(|(_, at)| at.elapsed() < KEEP)
            .map(|(s, _)| s.clone())
    }

    /// Remembers the session a first message with this fingerprint started.
    pub fn start(&self, prefix: &str, fingerprint: &[u8; 32], session: SessionKey) {
        let mut inner = self.lock();
        if inner.starts.len() >= MAX_ENTRIES {
            inner.starts.retain(|_, (_, at)| at.elapsed() < KEEP);
            if inner.starts.len() >= MAX_ENTRIES {
                inner.starts.clear();
            }
        }
        inner
            .starts
            .insert(start_key(prefix, fingerprint), (session, Instant::now()));
    }
}

fn start_key(prefix: &str, fingerprint: &[u8; 32]) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update(prefix.as_bytes());
    hash.update(fingerprint);
    hash.finalize().into()
}

/// The text a new session's first turn gets when the client sent earlier messages Warren does
/// not hold (an edited conversation, one from before a restart that no stored session
/// matches): those messages, quoted, then the input, so the agent answers in context.
pub fn seeded_input(earlier: &[(usize, Visible)], input: &str) -> String {
    if earlier.is_empty() {
        return input.to_string();
    }
    let mut out = String::from(
        "[The conversation so far, as the client sent it (Warren did not hold it):]\n",
    );
    for (_, m) in earlier {
        let who = if m.role == Role::Assistant {
            "assistant"
        } else {
            "user"
        };
        out.push_str(&format!("{who}: {}\n", m.text.trim()));
    }
    out.push_str("[The new message:]\n");
    out.push_str(input);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(role: Role, text: &str) -> Visible {
        Visible {
            role,
            text: text.into(),
        }
    }

    #[test]
    fn digests_tell_conversations_apart_and_scopes_apart() {
        let main = AgentAlias::new("main").unwrap();
        let helper = AgentAlias::new("helper").unwrap();
        let p = prefix("tokenA", &main);
        assert!(p.starts_with("oai-") && p.ends_with('-') && p.len() == 21);
        assert_ne!(p, prefix("tokenB", &main));
        assert_ne!(p, prefix("tokenA", &helper));
        let a = [(Role::User, "hi"), (Role::Assistant, "Hello.")];
        let b = [(Role::User, "hi"), (Role::Assistant, "Hello!")];
        assert_ne!(digest(&p, a), digest(&p, b));
        assert_ne!(digest(&p, a), digest(&prefix("tokenB", &main), a));
        // Whitespace around a message does not matter; roles do.
        assert_eq!(
            digest(&p, a),
            digest(&p, [(Role::User, " hi\n"), (Role::Assistant, "Hello.")])
        );
        assert_ne!(
            digest(&p, a),
            digest(&p, [(Role::Assistant, "hi"), (Role::Assistant, "Hello.")])
        );
        // A stored conversation digests as the client holds it; an unanswered tail is left out.
        let stored = vec![
            v(Role::User, "hi"),
            v(Role::Assistant, "Hello."),
            v(Role::User, "failed"),
        ];
        assert_eq!(digest_stored(&p, &stored), digest(&p, a));
    }

    #[test]
    fn threads_remember_sessions_and_first_message_starts() {
        let threads = Threads::default();
        let key = SessionKey::new("oai-x-1").unwrap();
        assert_eq!(threads.find(&[1; 32]), None);
        threads.remember([1; 32], key.clone());
        assert_eq!(threads.find(&[1; 32]), Some(key.clone()));
        assert!(threads.needs_scan("oai-x-"));
        assert!(!threads.needs_scan("oai-x-"));
        assert_eq!(threads.started("oai-x-", &[2; 32]), None);
        threads.start("oai-x-", &[2; 32], key.clone());
        assert_eq!(threads.started("oai-x-", &[2; 32]), Some(key));
        assert_eq!(threads.started("oai-y-", &[2; 32]), None);
    }

    #[test]
    fn a_seeded_input_quotes_the_earlier_messages() {
        assert_eq!(seeded_input(&[], "hi"), "hi");
        let earlier = vec![(0, v(Role::User, "one")), (1, v(Role::Assistant, "First."))];
        let seeded = seeded_input(&earlier, "two");
        assert!(
            seeded.contains("user: one\nassistant: First.\n"),
            "{seeded}"
        );
        assert!(seeded.ends_with("[The new message:]\ntwo"), "{seeded}");
    }
}
