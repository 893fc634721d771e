//! Approvals over HTTP (the same [`warren_runtime::approval::Approver`] interface as the CLI
//! prompt), the trace query `GET /api/logs` and the live trace stream `GET /api/events` (SSE;
//! fed by the trace's broadcast channel, so it works with `[log] persistence = "none"`).

use std::convert::Infallible;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use warren_runtime::trace::{TraceEvent, read_trace};

use crate::error::ApiError;
use crate::json::parse as parse_json;
use crate::query::{number, query_map};
use crate::state::AppState;

pub(crate) async fn list_approvals(State(state): State<AppState>) -> Json<Value> {
    let pending = state.host().approvals().list();
    Json(json!({"count": pending.len(), "pending": pending}))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Decision {
    approve: bool,
}

pub(crate) async fn decide_approval(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "POST /api/approvals/{id}";
    let decision: Decision = parse_json(ROUTE, &body)?;
    state
        .host()
        .approvals()
        .decide(&id, decision.approve)
        .map_err(|e| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_pending",
                format!("{ROUTE}: {e}"),
            )
        })?;
    tracing::info!(
        id,
        approved = decision.approve,
        "approval decided over HTTP"
    );
    Ok(Json(
        json!({"id": id, "decision": if decision.approve { "approved" } else { "denied" }}),
    ))
}

fn matches(event: &TraceEvent, agent: Option<&String>, kind: Option<&String>) -> bool {
    agent.is_none_or(|a| &event.agent == a) && kind.is_none_or(|k| &event.kind == k)
}

/// `?agent=&kind=&before=&limit=`: the newest `limit` matching events before index `before`
/// (indexes count from the oldest event kept on disk), oldest first, with `next_before` for
/// the previous page.
pub(crate) async fn logs(
    State(state): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "GET /api/logs";
    let query = query_map(ROUTE, raw)?;
    let limit = number(ROUTE, &query, "limit", 100, 1, 1000)?;
    let before = number(ROUTE, &query, "before", u64::MAX >> 1, 0, u64::MAX >> 1)?;
    let (agent, kind) = (query.get("agent").cloned(), query.get("kind").cloned());
    let path = state.root().runtime_trace();
    let events = tokio::task::spawn_blocking(move || read_trace(&path))
        .await
        .map_err(|e| ApiError::internal(ROUTE, e))?;
    let end = usize::try_from(before)
        .unwrap_or(usize::MAX)
        .min(events.len());
    let limit = usize::try_from(limit).unwrap_or(100);
    let mut page: Vec<(usize, &TraceEvent)> = events[..end]
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, e)| matches(e, agent.as_ref(), kind.as_ref()))
        .take(limit)
        .collect();
    page.reverse();
    let next_before = (page.len() == limit)
        .then(|| page.first().map(|(i, _)| *i))
        .flatten();
    let persistence = state.host().snapshot().log.persistence;
    Ok(Json(json!({
        "persistence": persistence,
        "total": events.len(),
        "events": page.iter().map(|(i, e)| {
            let mut v = serde_json::to_value(e).unwrap_or(Value::Null);
            v["index"] = (*i).into();
            v
        }).collect::<Vec<_>>(),
        "next_before": next_before,
    })))
}

/// `?agent=&kind=`: live trace events as SSE (`event: trace`); a slow client that falls
/// behind gets one `lagged` event with the count it missed. Ends when this generation stops.
pub(crate) async fn events(
    State(state): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    const ROUTE: &str = "GET /api/events";
    let query = query_map(ROUTE, raw)?;
    let (agent, kind) = (query.get("agent").cloned(), query.get("kind").cloned());
    let rx = state.host().trace().subscribe();
    let shutdown = state.shutdown().clone();
    let stream = futures_util::stream::unfold(
        (rx, shutdown, agent, kind),
        |(mut rx, shutdown, agent, kind)| async move {
            loop {
                let received = tokio::select! {
                    r = rx.recv() => r,
                    () = shutdown.cancelled() => return None,
                };
                let event = match received {
                    Ok(e) if matches(&e, agent.as_ref(), kind.as_ref()) => Event::default()
                        .event("trace")
                        .data(serde_json::to_string(&e).unwrap_or_default()),
                    Ok(_) => continue,
                    Err(RecvError::Lagged(n)) => Event::default()
                        .event("lagged")
                        .data(json!({"missed": n}).to_string()),
                    Err(RecvError::Closed) => return None,
                };
                return Some((Ok::<_, Infallible>(event), (rx, shutdown, agent, kind)));
            }
        },
    );
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}
