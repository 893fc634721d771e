//! SOPs over HTTP (STATE-10): `GET /api/sops`, `GET /api/sops/{name}`,
//! `POST /api/sops/{name}/run`, `POST /api/sops/{name}/webhook` (the webhook trigger),
//! `GET /api/sops/{name}/runs`, `GET /api/sops/runs/{id}`,
//! `POST /api/sops/runs/{id}/approve|deny|cancel`, and the SOP verbs of the control seam
//! ([`serve`]: `POST /admin/control`, and the older `POST /admin/sops/{name}/run` and
//! `POST /admin/sops/runs/{id}/action`).
//!
//! Runs start through the generation's engine ([`warren_jobs::sop::Engine::start_run`]), the
//! one start path of every trigger. Reads never create `data/sop/runs.db`.

use crate::error::blocking;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use warren_config::schema::sop::TriggerKind;
use warren_jobs::sop::control::{Await, SopOp};
use warren_jobs::sop::{Engine, SopError, defs};
use warren_store::sop::{SopStore, SopStoreError};

use crate::error::ApiError;
use crate::state::AppState;

fn store_error(route: &str, e: SopStoreError) -> ApiError {
    match e {
        SopStoreError::NotFound(_) => ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_run",
            format!("{route}: {e}"),
        ),
        SopStoreError::SopBusy { .. } | SopStoreError::GlobalBusy { .. } => ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "at_capacity",
            format!("{route}: {e}"),
        ),
        SopStoreError::Conflict { .. }
        | SopStoreError::NotWaiting { .. }
        | SopStoreError::Finished { .. } => {
            ApiError::new(StatusCode::CONFLICT, "run_state", format!("{route}: {e}"))
        }
        SopStoreError::Db { .. } => ApiError::internal(route, e),
    }
}

fn sop_error(route: &str, e: SopError) -> ApiError {
    match e {
        SopError::Definition(m) => ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_sop",
            format!("{route}: {m}"),
        ),
        SopError::Store(e) => store_error(route, e),
        SopError::Task(m) => ApiError::internal(route, m),
        e @ SopError::Encode { .. } => ApiError::internal(route, e),
    }
}

fn engine(state: &AppState, route: &str) -> Result<Arc<Engine>, ApiError> {
    state.jobs().sop().ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            "engine_off",
            format!("{route}: the SOP engine is not running in this daemon (see the log)"),
        )
    })
}

/// The store to read: the engine's (it may be the in-memory fallback), else the file.
fn read_store(state: &AppState, route: &'static str) -> Result<Option<SopStore>, ApiError> {
    if let Some(engine) = state.jobs().sop() {
        return Ok(Some((**engine.store()).clone()));
    }
    state
        .stores()
        .sop_runs()
        .map(|store| store.map(|s| (*s).clone()))
        .map_err(|e| store_error(route, e))
}

pub(crate) async fn list(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let loaded = defs::load(state.root(), state.host().snapshot().config());
    let sops: Vec<Value> = loaded
        .defs
        .values()
        .map(|d| {
            json!({"name": d.name, "description": d.def.description, "agent": d.def.agent,
                   "trigger": d.def.trigger, "steps": d.def.steps.len()})
        })
        .collect();
    Ok(Json(json!({"sops": sops, "problems": loaded.problems})))
}

pub(crate) async fn show(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "GET /api/sops/{name}";
    let d = defs::find(state.root(), state.host().snapshot().config(), &name).map_err(|m| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_sop",
            format!("{ROUTE}: {m}"),
        )
    })?;
    let store = read_store(&state, ROUTE)?;
    let n = name.clone();
    let runs = blocking(ROUTE, move || match store {
        Some(s) => s.list(Some(&n), 5).map_err(|e| store_error(ROUTE, e)),
        None => Ok(Vec::new()),
    })
    .await?;
    Ok(Json(
        json!({"name": d.name, "definition": d.def, "runs": runs}),
    ))
}

pub(crate) async fn sop_runs(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "GET /api/sops/{name}/runs";
    let store = read_store(&state, ROUTE)?;
    let runs = blocking(ROUTE, move || match store {
        Some(s) => s.list(Some(&name), 100).map_err(|e| store_error(ROUTE, e)),
        None => Ok(Vec::new()),
    })
    .await?;
    Ok(Json(json!({"runs": runs})))
}

pub(crate) async fn run_detail(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "GET /api/sops/runs/{id}";
    let store = read_store(&state, ROUTE)?
        .ok_or_else(|| store_error(ROUTE, SopStoreError::NotFound(id.clone())))?;
    blocking(ROUTE, move || {
        let run = store
            .get(&id)
            .map_err(|e| store_error(ROUTE, e))?
            .ok_or_else(|| store_error(ROUTE, SopStoreError::NotFound(id.clone())))?;
        let steps = store.steps(&id).map_err(|e| store_error(ROUTE, e))?;
        let events = store.events(&id).map_err(|e| store_error(ROUTE, e))?;
        Ok(Json(json!({"run": run, "steps": steps, "events": events})))
    })
    .await
}

/// The JSON object body (`{"input": {...}}` for run, the whole body for the webhook).
fn body_object(route: &str, body: &Bytes) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Ok(json!({}));
    }
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_field(route, "body", format!("not JSON: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::bad_field(route, "body", "must be a JSON object"));
    }
    Ok(v)
}

async fn start(
    state: &AppState,
    route: &'static str,
    name: &str,
    trigger: &str,
    input: Value,
) -> Result<Response, ApiError> {
    let engine = engine(state, route)?;
    let (run, _) = engine
        .start_run(name, trigger, input)
        .await
        .map_err(|e| sop_error(route, e))?;
    let mut body = json!({"run": run});
    if let Some(w) = engine.fallback() {
        body["warning"] = w.into();
    }
    Ok((StatusCode::ACCEPTED, Json(body)).into_response())
}

pub(crate) async fn run(
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    const ROUTE: &str = "POST /api/sops/{name}/run";
    let body = body_object(ROUTE, &body)?;
    let input = body.get("input").cloned().unwrap_or_else(|| json!({}));
    if !input.is_object() {
        return Err(ApiError::bad_field(ROUTE, "input", "must be a JSON object"));
    }
    start(&state, ROUTE, &name, "manual", input).await
}

pub(crate) async fn admin_run(
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    const ROUTE: &str = "POST /admin/sops/{name}/run";
    let body = body_object(ROUTE, &body)?;
    let input = body.get("input").cloned().unwrap_or_else(|| json!({}));
    serve(&state, ROUTE, &SopOp::SopRun { name, input }).await
}

/// The SOP verbs of the control seam (`POST /admin/control` and the older `/admin/sops/...`
/// routes): executed by the one executor ([`Engine::run_op`]) on this daemon's engine, which
/// owns a started run (202; the answer does not wait for it).
pub(crate) async fn serve(
    state: &AppState,
    route: &'static str,
    op: &SopOp,
) -> Result<Response, ApiError> {
    if let SopOp::SopRun { input, .. } = op
        && !input.is_object()
    {
        return Err(ApiError::bad_field(route, "input", "must be a JSON object"));
    }
    let engine = engine(state, route)?;
    let body = engine
        .run_op(op, Await::Detach)
        .await
        .map_err(|e| sop_error(route, e))?;
    let status = match op {
        SopOp::SopRun { .. } => StatusCode::ACCEPTED,
        _ => StatusCode::OK,
    };
    Ok((status, Json(body)).into_response())
}

/// The webhook trigger: only an SOP whose trigger is `webhook` starts this way; the JSON body
/// is the run's input.
pub(crate) async fn webhook(
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    const ROUTE: &str = "POST /api/sops/{name}/webhook";
    let d = defs::find(state.root(), state.host().snapshot().config(), &name).map_err(|m| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_sop",
            format!("{ROUTE}: {m}"),
        )
    })?;
    if d.def.trigger.kind != TriggerKind::Webhook {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_a_webhook_sop",
            format!(
                "{ROUTE}: SOP '{name}' has trigger '{}', not 'webhook' ({})",
                d.def.trigger.kind(),
                d.path.display()
            ),
        ));
    }
    let input = body_object(ROUTE, &body)?;
    start(&state, ROUTE, &name, "webhook", input).await
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Decision {
    step: String,
    #[serde(default)]
    reason: Option<String>,
}

async fn decide(
    state: AppState,
    route: &'static str,
    id: String,
    body: Bytes,
    approved: bool,
) -> Result<Json<Value>, ApiError> {
    let d: Decision = crate::json::parse(route, &body)?;
    let engine = engine(&state, route)?;
    engine
        .decide(&id, &d.step, approved, "api", d.reason)
        .await
        .map_err(|e| sop_error(route, e))?;
    Ok(Json(json!({"run": id, "step": d.step,
                   "decision": if approved { "approved" } else { "denied" }})))
}

pub(crate) async fn approve(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    decide(state, "POST /api/sops/runs/{id}/approve", id, body, true).await
}

pub(crate) async fn deny(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    decide(state, "POST /api/sops/runs/{id}/deny", id, body, false).await
}

pub(crate) async fn cancel(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    const ROUTE: &str = "POST /api/sops/runs/{id}/cancel";
    let engine = engine(&state, ROUTE)?;
    let run = engine
        .cancel(&id, "api")
        .await
        .map_err(|e| sop_error(ROUTE, e))?;
    Ok((StatusCode::ACCEPTED, Json(json!({"run": run}))).into_response())
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AdminAction {
    #[serde(default)]
    step: Option<String>,
    #[serde(default)]
    approved: Option<bool>,
    #[serde(default)]
    reason: Option<String>,
    who: String,
}

/// The CLI's `warren sop approve|deny|cancel` while a daemon runs: the engine's store (which
/// may be the in-memory one) takes the decision, recorded as the CLI's operator.
pub(crate) async fn admin_action(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    const ROUTE: &str = "POST /admin/sops/runs/{id}/action";
    let a: AdminAction = crate::json::parse(ROUTE, &body)?;
    let op = match (a.step, a.approved) {
        (Some(step), Some(approved)) => SopOp::SopDecide {
            run: id,
            step,
            approved,
            reason: a.reason,
            who: a.who,
        },
        (None, None) => SopOp::SopCancel {
            run: id,
            who: a.who,
        },
        _ => {
            return Err(ApiError::bad_field(
                ROUTE,
                "approved",
                "a decision names both step and approved; a cancel names neither",
            ));
        }
    };
    serve(&state, ROUTE, &op).await
}

/// Request bodies in the OpenAPI document.
pub(crate) fn openapi_paths(paths: &mut serde_json::Map<String, Value>) {
    let object = json!({"type": "object"});
    let decision = json!({"type": "object", "required": ["step"], "additionalProperties": false,
                          "properties": {"step": {"type": "string"},
                                         "reason": {"type": ["string", "null"]}}});
    let mut set = |path: &str, schema: &Value| {
        if let Some(op) = paths.get_mut(path).and_then(|p| p.get_mut("post")) {
            op["requestBody"]["content"]["application/json"]["schema"] = schema.clone();
        }
    };
    set(
        "/api/sops/{name}/run",
        &json!({"type": "object", "properties": {"input": object}}),
    );
    set("/api/sops/{name}/webhook", &object);
    set("/api/sops/runs/{id}/approve", &decision);
    set("/api/sops/runs/{id}/deny", &decision);
}
