//! `SessionActorQueue` (SESS-2): one turn at a time per session, bounded waiting, timeouts,
//! and idle eviction that never drops a slot with a waiter.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use warren_core::SessionKey;
use warren_store::sessions::{QueueError, SessionActorQueue};

fn key(s: &str) -> SessionKey {
    SessionKey::new(s).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_of_one_session_never_overlap_and_sessions_run_in_parallel_sess2() {
    let q = Arc::new(SessionActorQueue::new(16, Duration::from_secs(5)));
    let running = Arc::new(AtomicUsize::new(0));
    let max_seen = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (q, running, max_seen) = (q.clone(), running.clone(), max_seen.clone());
            tokio::spawn(async move {
                let _turn = q.acquire(&key("a")).await.unwrap();
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                max_seen.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
                running.fetch_sub(1, Ordering::SeqCst);
            })
        })
        .collect();
    // Another session is not blocked by "a".
    let other = tokio::time::timeout(Duration::from_millis(500), q.acquire(&key("b"))).await;
    assert!(other.is_ok_and(|r| r.is_ok()));
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(max_seen.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn full_and_timed_out_are_distinct_errors_sess2() {
    let q = SessionActorQueue::new(1, Duration::from_millis(50));
    let held = q.acquire(&key("a")).await.unwrap();
    // One waiter fits (the running turn does not count against the limit) ...
    let a = key("a");
    let waiter = q.acquire(&a);
    tokio::pin!(waiter);
    assert!(
        tokio::time::timeout(Duration::from_millis(5), &mut waiter)
            .await
            .is_err()
    );
    assert_eq!(q.depth(&key("a")), 2);
    // ... a second one is refused at once.
    assert!(matches!(
        q.acquire(&key("a")).await,
        Err(QueueError::Full {
            waiting: 1,
            max: 1,
            ..
        })
    ));
    // The first waiter times out while the turn is held.
    assert!(matches!(waiter.await, Err(QueueError::TimedOut { .. })));
    assert_eq!(q.depth(&key("a")), 1, "a timed-out waiter leaves the queue");
    drop(held);
    assert!(q.acquire(&key("a")).await.is_ok());
}

#[tokio::test]
async fn idle_eviction_keeps_slots_with_waiters_and_cancelled_waiters_leave() {
    let q = Arc::new(SessionActorQueue::new(4, Duration::from_secs(5)));
    let held = q.acquire(&key("busy")).await.unwrap();
    let q2 = q.clone();
    let waiter = tokio::spawn(async move { q2.acquire(&key("busy")).await.map(|_| ()) });
    drop(q.acquire(&key("idle")).await.unwrap());
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(q.evict_idle(Duration::ZERO), 1, "only the idle slot goes");
    assert_eq!(q.slots(), 1);
    assert_eq!(q.depth(&key("busy")), 2);
    waiter.abort();
    let _ = waiter.await;
    assert_eq!(q.depth(&key("busy")), 1, "a cancelled waiter deregisters");
    drop(held);
    assert_eq!(q.evict_idle(Duration::ZERO), 1);
    assert_eq!(q.slots(), 0);
}
