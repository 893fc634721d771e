//! The turn's taint marker (issue 24 §4): once a turn has taken in untrusted content (an
//! `http_request` response, an MCP tool result, a file another agent wrote, a message from a
//! non-operator), every later call with side effects needs the operator, and memory written
//! after it is stored with trust `untrusted`.
//!
//! The state is task-local like [`crate::ToolContext`]: the runtime gives each turn a fresh
//! marker ([`Taint::scope`]) and carries it into the tasks the turn spawns ([`Taint::carry`]).
//! Anything running inside a turn — a tool, the runtime after a result — calls
//! [`Taint::mark`] with a short description of the input; the first one is kept and named in
//! every approval prompt that follows ([`Taint::first`]). Outside a turn both are no-ops.

use std::future::Future;
use std::sync::{Arc, OnceLock};

/// One turn's taint marker: the first untrusted input, set once.
#[derive(Debug, Clone, Default)]
pub struct Taint {
    first: Arc<OnceLock<String>>,
}

tokio::task_local! {
    static TAINT: Taint;
}

impl Taint {
    /// Marks the running turn as having taken in untrusted content described by `source`
    /// (`"http_request response from https://example.org/x"`). The first mark of a turn is the
    /// one kept. Returns whether this mark was the first.
    pub fn mark(source: impl Into<String>) -> bool {
        TAINT
            .try_with(|t| t.first.set(source.into()).is_ok())
            .unwrap_or(false)
    }

    /// The running turn's first untrusted input, if it has taken one in.
    pub fn first() -> Option<String> {
        TAINT.try_with(|t| t.first.get().cloned()).ok().flatten()
    }

    /// Runs `future` (a turn) with a fresh, untainted marker.
    pub async fn scope<F: Future>(future: F) -> F::Output {
        TAINT.scope(Taint::default(), future).await
    }

    /// `future` with the running turn's marker (for a task the turn spawns); a fresh one
    /// outside a turn.
    pub fn carry<F: Future>(future: F) -> impl Future<Output = F::Output> {
        let taint = TAINT.try_with(Clone::clone).unwrap_or_default();
        TAINT.scope(taint, future)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_first_mark_of_a_turn_is_kept_and_turns_do_not_share_it() {
        assert!(!Taint::mark("outside"), "no turn: nothing to mark");
        Taint::scope(async {
            assert_eq!(Taint::first(), None);
            assert!(Taint::mark("http_request response from http://a/"));
            assert!(!Taint::mark("mcp result"));
            let seen = tokio::spawn(Taint::carry(async { Taint::first() }));
            assert_eq!(
                seen.await.ok().flatten().as_deref(),
                Some("http_request response from http://a/")
            );
        })
        .await;
        Taint::scope(async { assert_eq!(Taint::first(), None) }).await;
    }
}
