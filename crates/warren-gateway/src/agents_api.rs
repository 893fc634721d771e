//! Agents, chat, sessions, memory recall and costs over HTTP (issue 8 §2, STATE-18). A chat is
//! submitted at the runtime's door ([`warren_runtime::AgentHost::submit`]), which takes the
//! session's slot in the `SessionActorQueue` ("queue full" is 429, "timed out" 408, SESS-2)
//! and refuses another agent's session (409 `session_owned_by_other_agent`, SESS-1). With
//! `Accept: text/event-stream` the turn streams as SSE events (`delta`, `notice`, `tool_call`,
//! `approval`, `tool_result`, then `done` or `error`).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use warren_core::{AgentAlias, SessionKey};
use warren_memory::{Memory, MemoryError, RecallQuery};
use warren_runtime::cost::read_ledger;
use warren_runtime::{CancelToken, Channel, TurnEvent, TurnEvents, TurnRequest};
use warren_store::sessions::Page;

use crate::alias_path::AliasPath;
use crate::error::ApiError;
use crate::json::parse as parse_json;
use crate::query::{number, query_map};
use crate::state::AppState;
use crate::turns::{TurnStatus, sessions_unavailable, turn_error};

/// The alias of a path (validated by [`AliasPath`]), configured in this generation (404
/// otherwise).
pub(crate) fn configured_alias(
    state: &AppState,
    route: &str,
    alias: AgentAlias,
) -> Result<AgentAlias, ApiError> {
    let parsed = alias;
    if state.host().snapshot().agent(&parsed).is_none() {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_agent",
            format!(
                "{route}: agent '{parsed}' is not configured in the running generation (GET /api/agents)"
            ),
        ));
    }
    Ok(parsed)
}

pub(crate) async fn list_agents(State(state): State<AppState>) -> Json<Value> {
    let host = state.host();
    let config = host.snapshot();
    let default = config.default_agent();
    let agents: Vec<Value> = config
        .agents()
        .map(|(alias, agent)| {
            let report = state
                .agents()
                .and_then(|a| a.iter().find(|r| r.alias == alias.as_str()));
            json!({
                "alias": alias,
                "provider": agent.provider,
                "model": agent.model,
                "risk_profile": agent.risk_profile,
                "runtime_profile": agent.runtime_profile,
                "default": default.as_ref() == Some(&alias),
                "ok": report.map(|r| r.ok),
            })
        })
        .collect();
    Json(json!({"count": agents.len(), "agents": agents}))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewAgent {
    alias: String,
    #[serde(default)]
    provider: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    risk_profile: Option<String>,
}

pub(crate) async fn add_agent(
    State(state): State<AppState>,
    body: Bytes,
) -> Result<Response, ApiError> {
    const ROUTE: &str = "POST /api/agents";
    let request: NewAgent = parse_json(ROUTE, &body)?;
    let alias = AgentAlias::new(request.alias.as_str())
        .map_err(|e| ApiError::bad_field(ROUTE, "alias", e.to_string()))?;
    let conflict = || ApiError {
        status: StatusCode::CONFLICT,
        ..ApiError::bad_field(ROUTE, "alias", "an agent with this alias already exists")
    };
    if state.store().snapshot().agent(&alias).is_some() {
        return Err(conflict());
    }
    let store = state.store().clone();
    let added = alias.clone();
    let outcome = crate::config_write::write_fresh(&state, ROUTE, move || {
        let mut fields = Vec::new();
        for (key, value) in [
            ("provider", &request.provider),
            ("model", &request.model),
            ("risk_profile", &request.risk_profile),
        ] {
            if let Some(v) = value {
                fields.push((key, v.as_str()));
            }
        }
        let mut txn = store.write_blocking()?;
        txn.add_agent(&added, &fields)?;
        txn.commit()
    })
    .await?
    .map_err(|e| match &e {
        // Added by another writer between the check above and the lock.
        warren_config::ConfigError::Edit { message, .. } if message.ends_with("already exists") => {
            conflict()
        }
        _ => ApiError::from_config(ROUTE, &e),
    })?;
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "alias": alias,
            "config_generation": outcome.generation,
            "warnings": outcome.warnings,
            "note": "saved; the agent starts serving after POST /admin/reload",
        })),
    )
        .into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChatRequest {
    message: String,
    #[serde(default)]
    session: Option<String>,
}

/// The longest chat message accepted, in bytes (the body limit bounds it too).
const MAX_MESSAGE: usize = 32 * 1024;

fn wants_sse(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"))
}

fn event_json(event: &TurnEvent) -> (&'static str, Value) {
    match event {
        TurnEvent::TextDelta(t) => ("delta", json!({"text": t})),
        TurnEvent::Notice(n) => ("notice", json!({"notice": n})),
        TurnEvent::ToolCall(c) => (
            "tool_call",
            json!({"id": c.id, "name": c.name, "arguments": c.arguments}),
        ),
        TurnEvent::ToolResult {
            call,
            ok,
            content,
            receipt,
        } => (
            "tool_result",
            json!({"id": call.id, "name": call.name, "ok": ok, "content": content, "receipt": receipt}),
        ),
        TurnEvent::ApprovalPending {
            call,
            approval,
            reason,
            timeout_secs,
        } => (
            "approval",
            json!({"id": call.id, "name": call.name, "arguments": call.arguments,
                   "approval": approval, "reason": reason, "timeout_secs": timeout_secs,
                   "decide": format!("POST /api/approvals/{approval}")}),
        ),
    }
}

pub(crate) async fn chat(
    State(state): State<AppState>,
    AliasPath(alias): AliasPath,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    const ROUTE: &str = "POST /api/agents/{alias}/chat";
    let request: ChatRequest = parse_json(ROUTE, &body)?;
    let alias = configured_alias(&state, ROUTE, alias)?;
    if request.message.trim().is_empty() || request.message.len() > MAX_MESSAGE {
        return Err(ApiError::bad_field(
            ROUTE,
            "message",
            format!("a non-empty message of at most {MAX_MESSAGE} bytes"),
        ));
    }
    let session = request
        .session
        .map(SessionKey::new)
        .transpose()
        .map_err(|e| ApiError::bad_field(ROUTE, "session", e.to_string()))?;
    let host = Arc::clone(state.host());
    let submit = |events: TurnEvents| TurnRequest {
        max_output_tokens: None,
        agent: alias.clone(),
        session: session.clone(),
        channel: Channel::Gateway,
        input: request.message.clone(),
        approver: host.approvals().clone(),
        cancel: CancelToken::new(),
        events,
    };
    if !wants_sse(&headers) {
        return json_chat(&state, &host, &alias, submit).await;
    }

    let (tx, rx) = mpsc::unbounded_channel::<Event>();
    let sink = tx.clone();
    let events: TurnEvents = Arc::new(move |event| {
        let (name, data) = event_json(&event);
        let _ = sink.send(Event::default().event(name).data(data.to_string()));
    });
    // Refusals before the turn starts (409, 429, 408, ...) are the response's status.
    let turn = host
        .submit(submit(events))
        .await
        .map_err(|e| turn_error(ROUTE, &e))?;
    // The turn runs to its end even if the client goes away (the door runs it on its own
    // task; the session keeps it).
    tokio::spawn(async move {
        let key = turn.session().clone();
        let last = match turn.finish().await {
            Ok(outcome) => Event::default()
                .event("done")
                .data(outcome.to_json(&key).to_string()),
            Err(e) => {
                let err = turn_error(ROUTE, &e);
                Event::default()
                    .event("error")
                    .data(json!({"error": err.code, "message": err.message}).to_string())
            }
        };
        let _ = tx.send(last);
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx))
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// A JSON chat (issue 16 §2): 200 with the outcome when the turn ends without waiting on an
/// operator; 202 `{"turn", "approval"}` as soon as a call waits for approval, the outcome then
/// coming from `GET /api/turns/{id}` (see [`crate::turns_api`]).
async fn json_chat(
    state: &AppState,
    host: &Arc<warren_runtime::AgentHost>,
    alias: &AgentAlias,
    submit: impl FnOnce(TurnEvents) -> TurnRequest,
) -> Result<Response, ApiError> {
    const ROUTE: &str = "POST /api/agents/{alias}/chat";
    let turns = &state.process().turns;
    let tracker = Arc::new(turns.start(alias)?);
    let observer = Arc::clone(&tracker);
    let events: TurnEvents = Arc::new(move |event| observer.observe(&event));
    let turn = match host.submit(submit(events)).await {
        Ok(turn) => turn,
        Err(e) => {
            turns.forget(&tracker.id);
            return Err(turn_error(ROUTE, &e));
        }
    };
    let key = turn.session().clone();
    turns.set_session(&tracker.id, key.as_str());
    let mut status = tracker.subscribe();
    let end = Arc::clone(&tracker);
    // The turn runs to its end even if the client goes away; its record keeps the outcome.
    tokio::spawn(async move {
        end.finish(match turn.finish().await {
            Ok(outcome) => TurnStatus::Done(outcome.to_json(&key)),
            Err(e) => TurnStatus::Failed(turn_error(ROUTE, &e)),
        });
    });
    let now = status
        .wait_for(|s| *s != TurnStatus::Running)
        .await
        .map(|s| s.clone())
        .map_err(|_| ApiError::internal(ROUTE, "the turn ended without an outcome"))?;
    match now {
        TurnStatus::WaitingApproval(approval) => Ok((
            StatusCode::ACCEPTED,
            Json(json!({
                "turn": tracker.id,
                "status": "waiting_approval",
                "approval": approval,
                "poll": format!("GET /api/turns/{}", tracker.id),
            })),
        )
            .into_response()),
        TurnStatus::Done(body) => {
            turns.forget(&tracker.id);
            Ok(Json(body).into_response())
        }
        TurnStatus::Failed(e) => {
            turns.forget(&tracker.id);
            Err(e)
        }
        TurnStatus::Running => Err(ApiError::internal(ROUTE, "the turn is still running")),
    }
}

pub(crate) async fn list_sessions(
    State(state): State<AppState>,
    AliasPath(alias): AliasPath,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "GET /api/agents/{alias}/sessions";
    let alias = configured_alias(&state, ROUTE, alias)?;
    let sessions = state
        .host()
        .chat_sessions()
        .await
        .map_err(sessions_unavailable(ROUTE))?;
    let all = sessions
        .run(|b| b.list())
        .await
        .map_err(|e| ApiError::internal(ROUTE, e))?;
    let mine: Vec<_> = all
        .into_iter()
        .filter(|s| s.agent.as_ref() == Some(&alias))
        .collect();
    Ok(Json(json!({"count": mine.len(), "sessions": mine})))
}

pub(crate) async fn session_history(
    State(state): State<AppState>,
    AliasPath(alias): AliasPath,
    Path((_, key)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "GET /api/agents/{alias}/sessions/{key}";
    let query = query_map(ROUTE, raw)?;
    let after = number(ROUTE, &query, "after", 0, 0, u64::MAX >> 1)?;
    let limit = number(ROUTE, &query, "limit", 100, 1, 1000)?;
    let alias = configured_alias(&state, ROUTE, alias)?;
    let not_found = || {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_session",
            format!("{ROUTE}: agent '{alias}' has no such session"),
        )
    };
    let key = SessionKey::new(key.as_str()).map_err(|_| not_found())?;
    let sessions = state
        .host()
        .chat_sessions()
        .await
        .map_err(sessions_unavailable(ROUTE))?;
    let k = key.clone();
    let meta = sessions
        .run(move |b| b.meta(&k))
        .await
        .map_err(|e| ApiError::internal(ROUTE, e))?
        .filter(|m| m.agent.as_ref() == Some(&alias))
        .ok_or_else(not_found)?;
    let history = sessions
        .load(
            key,
            Page::After {
                after,
                limit: usize::try_from(limit).unwrap_or(100),
            },
        )
        .await
        .map_err(|e| ApiError::internal(ROUTE, e))?;
    let next_after = history.messages.last().map(|m| m.seq);
    Ok(Json(json!({
        "session": meta,
        "messages": history.messages,
        "next_after": next_after,
    })))
}

pub(crate) async fn memory_recall(
    State(state): State<AppState>,
    AliasPath(alias): AliasPath,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "GET /api/agents/{alias}/memory";
    let query = query_map(ROUTE, raw)?;
    let limit = number(ROUTE, &query, "limit", 10, 1, 100)?;
    let (alias, memory) = agent_memory(&state, ROUTE, alias).await?;
    let text = query.get("q").cloned().unwrap_or_default();
    let hits = memory
        .recall(RecallQuery::new(text, usize::try_from(limit).unwrap_or(10)))
        .await
        .map_err(|e| ApiError::bad_field(ROUTE, "q", e.to_string()))?;
    Ok(Json(
        json!({"agent": alias, "count": hits.len(), "hits": hits}),
    ))
}

/// The memory of a configured agent, opened as its tools see it (503 when the store is not
/// available).
async fn agent_memory(
    state: &AppState,
    route: &str,
    alias: AgentAlias,
) -> Result<(AgentAlias, Arc<dyn Memory>), ApiError> {
    let alias = configured_alias(state, route, alias)?;
    let host = state.host();
    let memory = warren_memory::create_memory_for_agent(
        host.memory_stores(),
        host.snapshot().config(),
        &alias,
    )
    .await
    .map_err(|e| memory_error(route, &e))?;
    Ok((alias, memory))
}

/// A memory failure as an API error: bad input 400 naming the key, a missing version 404, a
/// compare-and-set or backend limit 409, anything in the store itself 503.
fn memory_error(route: &str, e: &MemoryError) -> ApiError {
    match e {
        MemoryError::InvalidInput { .. } | MemoryError::InvalidQuery { .. } => {
            ApiError::bad_field(route, "key", e.to_string())
        }
        MemoryError::NoVersion { .. } => ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_memory_version",
            format!("{route}: {e}"),
        ),
        MemoryError::Conflict { .. } | MemoryError::Unsupported { .. } => ApiError::new(
            StatusCode::CONFLICT,
            "memory_conflict",
            format!("{route}: {e}"),
        ),
        _ => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "memory_unavailable",
            format!("{route}: {e}"),
        ),
    }
}

fn unknown_memory(route: &str, alias: &AgentAlias, key: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "unknown_memory",
        format!("{route}: agent '{alias}' has no memory with key '{key}'"),
    )
}

/// One entry with its version and provenance (issue 21).
pub(crate) async fn memory_show(
    State(state): State<AppState>,
    AliasPath(alias): AliasPath,
    Path((_, key)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "GET /api/agents/{alias}/memory/{key}";
    let (alias, memory) = agent_memory(&state, ROUTE, alias).await?;
    let entry = memory
        .get(key.clone())
        .await
        .map_err(|e| memory_error(ROUTE, &e))?
        .ok_or_else(|| unknown_memory(ROUTE, &alias, &key))?;
    Ok(Json(json!({"agent": alias, "entry": entry})))
}

/// Forgets a key; its last version stays in the history (so undo brings it back).
pub(crate) async fn memory_forget(
    State(state): State<AppState>,
    AliasPath(alias): AliasPath,
    Path((_, key)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "DELETE /api/agents/{alias}/memory/{key}";
    let (alias, memory) = agent_memory(&state, ROUTE, alias).await?;
    if !memory
        .forget(key.clone())
        .await
        .map_err(|e| memory_error(ROUTE, &e))?
    {
        return Err(unknown_memory(ROUTE, &alias, &key));
    }
    Ok(Json(json!({"agent": alias, "key": key, "forgotten": true})))
}

/// Every kept version of a key, newest first, with its state.
pub(crate) async fn memory_history(
    State(state): State<AppState>,
    AliasPath(alias): AliasPath,
    Path((_, key)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "GET /api/agents/{alias}/memory/{key}/history";
    let (alias, memory) = agent_memory(&state, ROUTE, alias).await?;
    let versions = memory
        .history(key.clone())
        .await
        .map_err(|e| memory_error(ROUTE, &e))?;
    if versions.is_empty() {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_memory",
            format!(
                "{ROUTE}: agent '{alias}' has no memory with key '{key}' and no kept version of it"
            ),
        ));
    }
    Ok(Json(
        json!({"agent": alias, "key": key, "count": versions.len(), "versions": versions}),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UndoRequest {
    #[serde(default)]
    to: Option<u64>,
}

/// Restores a key's previous version (or version `to`) as a new version.
pub(crate) async fn memory_undo(
    State(state): State<AppState>,
    AliasPath(alias): AliasPath,
    Path((_, key)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "POST /api/agents/{alias}/memory/{key}/undo";
    let to = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        parse_json::<UndoRequest>(ROUTE, &body)?.to
    };
    let (alias, memory) = agent_memory(&state, ROUTE, alias).await?;
    let entry = memory
        .undo(key, to)
        .await
        .map_err(|e| memory_error(ROUTE, &e))?;
    Ok(Json(json!({"agent": alias, "entry": entry})))
}

pub(crate) async fn costs(
    State(state): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "GET /api/costs";
    let query = query_map(ROUTE, raw)?;
    let limit = number(ROUTE, &query, "limit", 100, 1, 1000)?;
    let agent = query.get("agent").cloned();
    let path = state.root().costs_ledger();
    let records = tokio::task::spawn_blocking(move || read_ledger(&path))
        .await
        .map_err(|e| ApiError::internal(ROUTE, e))?;
    let mine: Vec<_> = records
        .into_iter()
        .filter(|r| agent.as_deref().is_none_or(|a| r.agent == a))
        .collect();
    let mut totals: BTreeMap<String, Value> = BTreeMap::new();
    let mut total = 0.0;
    for r in &mine {
        total += r.cost_usd;
        let t = totals.entry(r.agent.to_string()).or_insert_with(
            || json!({"requests": 0, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0}),
        );
        t["requests"] = (t["requests"].as_u64().unwrap_or(0) + 1).into();
        t["input_tokens"] = (t["input_tokens"].as_u64().unwrap_or(0) + r.input_tokens).into();
        t["output_tokens"] = (t["output_tokens"].as_u64().unwrap_or(0) + r.output_tokens).into();
        t["cost_usd"] = (t["cost_usd"].as_f64().unwrap_or(0.0) + r.cost_usd).into();
    }
    let skip = mine
        .len()
        .saturating_sub(usize::try_from(limit).unwrap_or(100));
    Ok(Json(json!({
        "total_usd": total,
        "requests": mine.len(),
        "per_agent": totals,
        "records": &mine[skip..],
    })))
}
