//! The outbox's delivery (issue 38 §1): one state machine per message — `sending` (one more
//! attempt), each chunk recorded with the platform's message id as it is accepted, `sent`
//! when the last one is; a transient failure (transport, 429, 5xx) waits for the platform's
//! `retry_after` or a backoff and tries again, a permanent one is `failed` with the platform's
//! error. A delivery resumed after a crash continues after the last recorded chunk, so at most
//! the one chunk in flight at the kill is sent twice. Text is chunked to the platform's limit
//! (code fences closed and reopened by [`crate::chunk`]); rejected markup is resent plain.
//! Telegram's `sendMessage` is the platform call.

use std::time::Duration;

use warren_store::channels::{ChannelStore, ChannelStoreError, OutboxRow};

use super::api::{Api, ApiError};
use crate::chunk::{Limit, chunk};
use crate::health::Health;

/// Attempts before a transiently failing message is given up as `failed`.
pub const MAX_ATTEMPTS: u32 = 12;

/// How long before attempt `attempts + 1` (1 s doubling, at most 5 min).
pub fn backoff(attempts: u32) -> Duration {
    Duration::from_secs(1u64 << attempts.min(8)).min(Duration::from_secs(300))
}

/// How a delivery attempt ended.
#[derive(Debug, PartialEq)]
pub enum Delivery {
    Sent,
    Retry(Duration),
    Failed,
}

/// Delivers `row` now (blocking: run it on a blocking thread).
pub fn deliver(
    store: &ChannelStore,
    api: &Api,
    health: &Health,
    row: &OutboxRow,
) -> Result<Delivery, ChannelStoreError> {
    store.sending(row.id)?;
    let attempts = row.attempts + 1;
    let chunks = chunk(&row.text, Limit::Utf16(4096));
    let last = chunks.len().saturating_sub(1);
    let mut plain = row.plain;
    let start = usize::try_from(row.chunks_sent).unwrap_or(usize::MAX);
    for (i, text) in chunks.iter().enumerate().skip(start) {
        let markup = if i == last {
            row.markup.as_deref()
        } else {
            None
        };
        let result = loop {
            match api.send_message(&row.chat_id, row.thread_id.as_deref(), text, !plain, markup) {
                Err(e) if e.bad_markup() && !plain => {
                    store.set_plain(row.id)?;
                    plain = true;
                }
                other => break other,
            }
        };
        match result {
            Ok(message_id) => {
                store.chunk_sent(row.id, &message_id)?;
                health.send_ok(None);
            }
            Err(e) => return settle(store, health, row, attempts, &e),
        }
    }
    store.sent(row.id)?;
    // The lag: from the reply's queueing (its turn's end, or the notice) to its last chunk.
    let lag = warren_store::timefmt::parse(&row.created_at)
        .map(|queued| warren_store::timefmt::now() - queued)
        .and_then(|d| Duration::try_from(d).ok());
    health.send_ok(lag);
    Ok(Delivery::Sent)
}

fn settle(
    store: &ChannelStore,
    health: &Health,
    row: &OutboxRow,
    attempts: u32,
    e: &ApiError,
) -> Result<Delivery, ChannelStoreError> {
    health.failure(&e.to_string());
    if e.transient() && attempts < MAX_ATTEMPTS {
        let wait = e
            .retry_after()
            .map_or_else(|| backoff(attempts), Duration::from_secs);
        let at = ChannelStore::now_ms() + i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
        store.retry_at(row.id, &e.to_string(), at)?;
        Ok(Delivery::Retry(wait))
    } else {
        store.failed(row.id, &e.to_string())?;
        Ok(Delivery::Failed)
    }
}
