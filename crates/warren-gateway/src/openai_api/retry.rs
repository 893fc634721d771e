//! Retried requests. OpenAI's SDKs resend the same body after their timeout, a dropped
//! connection, a 408, a 409, a 429 or a 5xx (`x-stainless-retry-count: 1`, `2`, ...). A turn
//! keeps running when its client goes away, so a retry must not run the same turn again (the
//! user message would be appended twice and the provider paid twice): it joins the attempt it
//! repeats and answers that attempt's reply.
//!
//! [`Recent`] keeps, per session, the latest turn started through `/v1` (a fingerprint of its
//! request and a watch on its answer) for [`KEEP`]. A request is a retry of it when it has the
//! same fingerprint and either carries the SDK's retry count or resends earlier messages (a
//! client resending the whole conversation sends a longer one for a new turn, so the same
//! conversation twice is a retry). A request that only sends its newest message is a retry only
//! with the retry count: "yes" twice may be meant. A turn that failed is not joined: the retry
//! runs it again, going on from the user message the failed attempt stored (the runtime's door
//! does not store a failed turn's message twice when the next turn repeats it). The
//! stored-history side of the rule (a retry whose first attempt ended before the daemon
//! restarted or the entry expired) is [`super::history::repeated_reply`].

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use warren_core::{AgentAlias, SessionKey};
use warren_runtime::{Turn, TurnError};

use super::OpenAiError;
use super::history::Visible;

/// How long a finished turn can still be joined by a retry (the SDK's longest wait is its
/// 10 minute timeout plus its backoff).
pub const KEEP: Duration = Duration::from_secs(15 * 60);
/// At most this many sessions are remembered (the oldest entries go first).
const MAX_ENTRIES: usize = 4096;
/// The header in which Stainless-generated SDKs (OpenAI's Python and Node clients) count retries.
pub const RETRY_COUNT_HEADER: &str = "x-stainless-retry-count";

/// A turn's answer as a `/v1` response reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub reply: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// A turn's answer, or the error its response reports.
pub type Outcome = Result<Answer, OpenAiError>;

/// The answer of a started turn: `None` while it runs.
pub type Pending = watch::Receiver<Option<Outcome>>;

struct Entry {
    fingerprint: [u8; 32],
    started: Instant,
    answer: Pending,
}

/// The latest `/v1` turn of each session (see the module docs).
#[derive(Default)]
pub struct Recent {
    turns: Mutex<HashMap<SessionKey, Entry>>,
}

impl Recent {
    /// The answer of the session's latest turn when it had this `fingerprint`, is recent and
    /// did not fail.
    pub fn find(&self, session: &SessionKey, fingerprint: &[u8; 32]) -> Option<Pending> {
        let turns = self.turns.lock().unwrap_or_else(|e| e.into_inner());
        let entry = turns.get(session)?;
        let failed = matches!(&*entry.answer.borrow(), Some(Err(_)));
        (entry.fingerprint == *fingerprint && entry.started.elapsed() < KEEP && !failed)
            .then(|| entry.answer.clone())
    }

    /// Whether the session's latest `/v1` turn is still running.
    pub fn running(&self, session: &SessionKey) -> bool {
        let turns = self.turns.lock().unwrap_or_else(|e| e.into_inner());
        turns
            .get(session)
            .is_some_and(|entry| entry.answer.borrow().is_none())
    }

    /// Records `turn` as the session's latest and finishes it on its own task (it runs to its
    /// end whether or not a client still waits); returns the watch on its answer. `answered`
    /// sees a successful answer before anyone waiting does.
    pub fn track(
        &self,
        session: SessionKey,
        fingerprint: [u8; 32],
        turn: Turn,
        fail: impl FnOnce(&TurnError) -> OpenAiError + Send + 'static,
        answered: impl FnOnce(&Answer) + Send + 'static,
    ) -> Pending {
        let (tx, rx) = watch::channel(None);
        {
            let mut turns = self.turns.lock().unwrap_or_else(|e| e.into_inner());
            if turns.len() >= MAX_ENTRIES && !turns.contains_key(&session) {
                turns.retain(|_, e| e.started.elapsed() < KEEP);
                if turns.len() >= MAX_ENTRIES
                    && let Some(oldest) = turns
                        .iter()
                        .min_by_key(|(_, e)| e.started)
                        .map(|(k, _)| k.clone())
                {
                    turns.remove(&oldest);
                }
            }
            turns.insert(
                session,
                Entry {
                    fingerprint,
                    started: Instant::now(),
                    answer: rx.clone(),
                },
            );
        }
        tokio::spawn(async move {
            let outcome = match turn.finish().await {
                Ok(o) => Ok(Answer {
                    reply: o.reply,
                    input_tokens: o.usage.input_tokens,
                    output_tokens: o.usage.output_tokens,
                }),
                Err(e) => Err(fail(&e)),
            };
            if let Ok(answer) = &outcome {
                answered(answer);
            }
            let _ = tx.send(Some(outcome));
        });
        rx
    }
}

/// The answer once the turn ends (an error when its task went away without one).
pub async fn wait(mut pending: Pending) -> Outcome {
    if let Some(answer) = pending.borrow_and_update().clone() {
        return answer;
    }
    match pending.wait_for(Option::is_some).await {
        Ok(answer) => answer.clone().unwrap_or_else(|| Err(gone())),
        Err(_) => Err(gone()),
    }
}

fn gone() -> OpenAiError {
    OpenAiError::new(
        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
        "internal_error",
        "the turn's task ended without an answer",
    )
}

/// The SDK's retry count is 1 or more.
pub fn marked_retry(headers: &HeaderMap) -> bool {
    headers
        .get(RETRY_COUNT_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u32>().ok())
        .is_some_and(|n| n > 0)
}

/// What makes two requests the same turn: route, agent, earlier messages and input.
pub fn fingerprint(
    route: &str,
    alias: &AgentAlias,
    earlier: &[(usize, Visible)],
    input: &str,
) -> [u8; 32] {
    let mut hash = Sha256::new();
    for part in [route, alias.as_str()] {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    for (_, m) in earlier {
        hash.update([m.role as u8]);
        hash.update((m.text.len() as u64).to_le_bytes());
        hash.update(m.text.as_bytes());
    }
    hash.update([0xff]);
    hash.update(input.as_bytes());
    hash.finalize().into()
}
