//! `GET /api/turns/{id}` (issue 16 §2): the status of a turn a JSON chat caller follows
//! (`?wait=SECS` long-polls until the turn's status changes). The records live in
//! [`crate::turns`].

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use serde_json::Value;

use crate::error::ApiError;
use crate::query::{number, query_map};
use crate::state::AppState;
use crate::turns::{KEEP_FINISHED, status_json};

/// The longest `?wait=` (below the gateway's request time limit).
pub const MAX_WAIT_SECS: u64 = 25;

/// `GET /api/turns/{id}?wait=SECS`: the turn's status; with `wait`, answers as soon as the
/// status differs from the one at the call (or the turn ended), at the latest after `wait`
/// seconds.
pub(crate) async fn get_turn(
    State(state): State<AppState>,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "GET /api/turns/{id}";
    let query = query_map(ROUTE, raw)?;
    let wait = number(ROUTE, &query, "wait", 0, 0, MAX_WAIT_SECS)?;
    let (agent, session, mut rx) = state.process().turns.get(&id).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_turn",
            format!(
                "{ROUTE}: no turn '{id}' in this daemon process (turn records are kept in memory, \
                 up to {} s after the turn ends, and not across a restart)",
                KEEP_FINISHED.as_secs()
            ),
        )
    })?;
    let initial = rx.borrow_and_update().clone();
    if wait > 0 && !initial.finished() {
        let changed = rx.wait_for(|s| s.finished() || *s != initial);
        let _ = tokio::time::timeout(Duration::from_secs(wait), changed).await;
    }
    let now = rx.borrow().clone();
    Ok(Json(status_json(&id, &agent, &session, &now)))
}
