//! `SessionActorQueue` (SESS-2, STATE-18): serialises the active turns of one session.
//!
//! Each session key has a slot: a one-permit semaphore and a count of registered turns (the
//! running one plus waiters). A turn registers under the map lock *before* it waits, so idle
//! eviction never drops a slot that has a waiter. `max_waiting` bounds the waiters, not
//! counting the turn that runs (the reference counted the holder, so a depth of 1 refused the
//! first waiter). A waiter gives up after `timeout`. [`QueueError::Full`] and
//! [`QueueError::TimedOut`] are distinct so the gateway can answer 429 vs 408. Process-local.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use warren_core::SessionKey;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    #[error("session '{key}' already has {waiting} turn(s) waiting (limit {max}); try again later")]
    Full {
        key: SessionKey,
        waiting: usize,
        max: usize,
    },
    #[error("session '{key}' stayed busy for {waited:?}; the turn was not started")]
    TimedOut { key: SessionKey, waited: Duration },
}

#[derive(Debug)]
struct Slot {
    permit: Arc<Semaphore>,
    /// Running turn + waiters.
    registered: usize,
    last_active: Instant,
}

#[derive(Debug)]
pub struct SessionActorQueue {
    slots: Arc<Mutex<HashMap<SessionKey, Slot>>>,
    max_waiting: usize,
    timeout: Duration,
}

/// The right to run a turn of one session; released on drop.
#[derive(Debug)]
pub struct TurnGuard {
    _permit: OwnedSemaphorePermit,
    _registration: Registration,
}

/// Counts a turn in its slot until dropped (also when a waiter is cancelled).
#[derive(Debug)]
struct Registration {
    slots: Arc<Mutex<HashMap<SessionKey, Slot>>>,
    key: SessionKey,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = slots.get_mut(&self.key) {
            slot.registered = slot.registered.saturating_sub(1);
            slot.last_active = Instant::now();
        }
    }
}

impl SessionActorQueue {
    pub fn new(max_waiting: usize, timeout: Duration) -> Self {
        Self {
            slots: Arc::new(Mutex::new(HashMap::new())),
            max_waiting,
            timeout,
        }
    }

    /// Waits for the session's turn.
    pub async fn acquire(&self, key: &SessionKey) -> Result<TurnGuard, QueueError> {
        let (permit, registration) = {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            let slot = slots.entry(key.clone()).or_insert_with(|| Slot {
                permit: Arc::new(Semaphore::new(1)),
                registered: 0,
                last_active: Instant::now(),
            });
            let waiting = slot.registered.saturating_sub(1);
            if slot.registered > 0 && waiting >= self.max_waiting {
                return Err(QueueError::Full {
                    key: key.clone(),
                    waiting,
                    max: self.max_waiting,
                });
            }
            slot.registered += 1;
            slot.last_active = Instant::now();
            (
                Arc::clone(&slot.permit),
                Registration {
                    slots: Arc::clone(&self.slots),
                    key: key.clone(),
                },
            )
        };
        match tokio::time::timeout(self.timeout, permit.acquire_owned()).await {
            Ok(Ok(permit)) => Ok(TurnGuard {
                _permit: permit,
                _registration: registration,
            }),
            // The semaphore is never closed; treat it like a timeout anyway.
            Ok(Err(_)) | Err(_) => Err(QueueError::TimedOut {
                key: key.clone(),
                waited: self.timeout,
            }),
        }
    }

    /// Running + waiting turns of `key`.
    pub fn depth(&self, key: &SessionKey) -> usize {
        self.slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .map_or(0, |s| s.registered)
    }

    /// Drops slots idle for longer than `ttl` with no registered turn; returns how many.
    pub fn evict_idle(&self, ttl: Duration) -> usize {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let before = slots.len();
        slots.retain(|_, s| s.registered > 0 || s.last_active.elapsed() < ttl);
        before - slots.len()
    }

    /// Number of slots held (for tests and status).
    pub fn slots(&self) -> usize {
        self.slots.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}
