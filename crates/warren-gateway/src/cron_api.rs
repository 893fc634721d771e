//! Cron jobs and background runs over HTTP (STATE-9, STATE-11): `GET/POST /api/cron`,
//! `GET/DELETE /api/cron/{name}`, `POST /api/cron/{name}/run|pause|resume`,
//! `GET /api/cron/{name}/runs`, `GET /api/runs`, `POST /api/runs/{id}/cancel`, and
//! `POST /admin/cron/wake` (the CLI wrote the store; the scheduler re-reads it).
//!
//! The changes (add, remove, pause, resume, run) go through the one executor of the cron verbs,
//! [`CronControl::execute`], which the CLI's `warren cron` runs too (through
//! `POST /admin/control` while a daemon runs, [`serve`]); a manual run goes through the
//! generation's scheduler, which claims the same lock row as scheduled runs (409
//! `run_in_progress` names the holder).
//! Reads never create `data/cron/jobs.db` or `data/control_plane.db`.

use crate::error::blocking;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use warren_jobs::cron::control::{
    CronControl, CronControlError, CronOp, CronReply, SchedulerState,
};
use warren_jobs::cron::{CronRunError, JobSpec, Scheduler};
use warren_store::control_plane::ControlPlaneError;
use warren_store::cron::{CronError, Job};

use crate::error::ApiError;
use crate::json::parse as parse_json;
use crate::query::{number, query_map};
use crate::state::AppState;

fn cron_error(route: &str, e: CronError) -> ApiError {
    match e {
        CronError::NotFound(_) => ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_job",
            format!("{route}: {e}"),
        ),
        CronError::Exists(_) => {
            ApiError::new(StatusCode::CONFLICT, "job_exists", format!("{route}: {e}"))
        }
        CronError::Held { .. } => ApiError::new(
            StatusCode::CONFLICT,
            "run_in_progress",
            format!("{route}: {e}"),
        ),
        CronError::Declared { .. } => ApiError::new(
            StatusCode::CONFLICT,
            "declared_job",
            format!("{route}: {e}"),
        ),
        CronError::Db { .. } => ApiError::internal(route, e),
    }
}

fn run_error(route: &str, e: CronRunError) -> ApiError {
    match e {
        CronRunError::Store(e) => cron_error(route, e),
        other => ApiError::internal(route, other),
    }
}

fn plane_error(route: &str, e: ControlPlaneError) -> ApiError {
    match e {
        ControlPlaneError::NotFound(_) => ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_run",
            format!("{route}: {e}"),
        ),
        ControlPlaneError::NotRunning { .. } => {
            ApiError::new(StatusCode::CONFLICT, "not_running", format!("{route}: {e}"))
        }
        ControlPlaneError::Db { .. } => ApiError::internal(route, e),
    }
}

fn scheduler(state: &AppState) -> Option<Arc<Scheduler>> {
    state.jobs().cron()
}

/// Why the scheduler is off: `[cron] enabled = false`, or the error that kept it from
/// starting (issue 36 §2: a damaged store is named, not blamed on the setting).
pub(crate) fn off_reason(state: &AppState) -> String {
    state
        .jobs()
        .cron_off_reason(state.host().snapshot().config())
        .unwrap_or_else(|| "it has not started yet".to_string())
}

fn job_json(job: &Job) -> Value {
    let state = match (&job.lock_run, job.enabled) {
        (Some(_), _) => "running",
        (None, true) => "enabled",
        (None, false) => "paused",
    };
    json!({"name": job.name, "agent": job.agent, "schedule_kind": job.schedule_kind,
           "schedule": job.schedule, "tz": job.tz, "message": job.message,
           "command": job.command, "session": job.session, "enabled": job.enabled,
           "state": state, "paused_reason": job.paused_reason, "source": job.source,
           "catch_up": job.catch_up, "budget_usd": job.budget_usd,
           "daily_budget_usd": job.daily_budget_usd, "webhook": job.webhook,
           "next_fire": job.next_fire(), "failures": job.failures, "note": job.note,
           "running_run": job.lock_run, "created_at": job.created_at})
}

pub(crate) async fn list(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "GET /api/cron";
    let stores = Arc::clone(state.stores());
    let jobs = blocking(ROUTE, move || {
        let store = stores.cron_existing().map_err(|e| cron_error(ROUTE, e))?;
        match store {
            Some(s) => s.list().map_err(|e| cron_error(ROUTE, e)),
            None => Ok(Vec::new()),
        }
    })
    .await?;
    Ok(Json(json!({
        "scheduler": if scheduler(&state).is_some() { "running" } else { "off" },
        "jobs": jobs.iter().map(job_json).collect::<Vec<_>>(),
    })))
}

pub(crate) async fn show(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "GET /api/cron/{name}";
    let stores = Arc::clone(state.stores());
    let (job, runs) = blocking(ROUTE, move || {
        let store = stores
            .cron_existing()
            .map_err(|e| cron_error(ROUTE, e))?
            .ok_or_else(|| cron_error(ROUTE, CronError::NotFound(name.clone())))?;
        let job = store
            .get(&name)
            .map_err(|e| cron_error(ROUTE, e))?
            .ok_or_else(|| cron_error(ROUTE, CronError::NotFound(name.clone())))?;
        let runs = store.runs(&name, 5).map_err(|e| cron_error(ROUTE, e))?;
        Ok((job, runs))
    })
    .await?;
    Ok(Json(json!({"job": job_json(&job), "runs": runs})))
}

pub(crate) async fn create(
    State(state): State<AppState>,
    body: Bytes,
) -> Result<Response, ApiError> {
    const ROUTE: &str = "POST /api/cron";
    let spec: JobSpec = parse_json(ROUTE, &body)?;
    let reply = execute(
        &state,
        ROUTE,
        &CronOp::CronAdd {
            job: Box::new(spec),
        },
    )
    .await?;
    let off;
    let status = match reply.scheduler {
        SchedulerState::Running => "scheduled",
        _ => {
            off = format!(
                "stored; the scheduler is off ({})",
                reply.reason.clone().unwrap_or_else(|| off_reason(&state))
            );
            off.as_str()
        }
    };
    let job = reply.job.as_ref().map(job_json).unwrap_or(Value::Null);
    Ok((
        StatusCode::CREATED,
        Json(json!({"job": job, "status": status})),
    )
        .into_response())
}

pub(crate) async fn run(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let reply = execute(
        &state,
        "POST /api/cron/{name}/run",
        &CronOp::CronRun { name },
    )
    .await?;
    Ok(Json(json!({"run": reply.run})))
}

pub(crate) async fn pause(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let op = CronOp::CronPause { name };
    let reply = execute(&state, "POST /api/cron/{name}/pause", &op).await?;
    Ok(Json(json!({"job": reply.job.as_ref().map(job_json)})))
}

pub(crate) async fn resume(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let op = CronOp::CronResume { name };
    let reply = execute(&state, "POST /api/cron/{name}/resume", &op).await?;
    Ok(Json(json!({"job": reply.job.as_ref().map(job_json)})))
}

pub(crate) async fn remove(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let op = CronOp::CronRemove { name };
    let reply = execute(&state, "DELETE /api/cron/{name}", &op).await?;
    Ok(Json(json!({"removed": reply.removed})))
}

/// A cron verb on this daemon's generation: the one executor ([`CronControl::execute`]) on
/// the process's stores, this generation's config and its scheduler (woken by a change).
async fn execute(state: &AppState, route: &str, op: &CronOp) -> Result<CronReply, ApiError> {
    execute_with(state, route, op, None).await
}

async fn execute_with(
    state: &AppState,
    route: &str,
    op: &CronOp,
    run_host: Option<Arc<warren_runtime::AgentHost>>,
) -> Result<CronReply, ApiError> {
    let snapshot = state.host().snapshot();
    let scheduler = scheduler(state);
    let control = CronControl {
        stores: state.stores(),
        config: snapshot.config(),
        state: match scheduler {
            Some(_) => SchedulerState::Running,
            None => SchedulerState::Off,
        },
        off_reason: scheduler.is_none().then(|| off_reason(state)),
        scheduler,
        run_host,
    };
    control
        .execute(op)
        .await
        .map_err(|e| control_error(route, e))
}

/// The cron verbs of the control seam (`POST /admin/control`): the store's job and run as
/// they are, and whether this daemon's scheduler fires them. The operator's `warren cron run`
/// runs the job even with the scheduler off (`/api/cron/{name}/run` refuses it then, 409).
pub(crate) async fn serve(
    state: &AppState,
    route: &str,
    op: &CronOp,
) -> Result<Json<Value>, ApiError> {
    let reply = execute_with(state, route, op, Some(Arc::clone(state.host()))).await?;
    serde_json::to_value(reply)
        .map(Json)
        .map_err(|e| ApiError::internal(route, e))
}

fn control_error(route: &str, e: CronControlError) -> ApiError {
    match e {
        CronControlError::Store(e) => cron_error(route, e),
        CronControlError::Run(e) => run_error(route, e),
        CronControlError::Spec { spec, .. } => ApiError::bad_field(route, spec.field, spec.message),
        CronControlError::SchedulerOff(reason) => ApiError::new(
            StatusCode::CONFLICT,
            "scheduler_off",
            format!("{route}: the cron scheduler is not running ({reason})"),
        ),
        other @ (CronControlError::Schedule(_) | CronControlError::Task(_)) => {
            ApiError::internal(route, other)
        }
    }
}

pub(crate) async fn job_runs(
    State(state): State<AppState>,
    Path(name): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "GET /api/cron/{name}/runs";
    let query = query_map(ROUTE, raw)?;
    let limit = u32::try_from(number(ROUTE, &query, "limit", 20, 1, 1000)?).unwrap_or(20);
    let stores = Arc::clone(state.stores());
    let runs = blocking(ROUTE, move || {
        let store = stores
            .cron_existing()
            .map_err(|e| cron_error(ROUTE, e))?
            .ok_or_else(|| cron_error(ROUTE, CronError::NotFound(name.clone())))?;
        store
            .get(&name)
            .map_err(|e| cron_error(ROUTE, e))?
            .ok_or_else(|| cron_error(ROUTE, CronError::NotFound(name.clone())))?;
        store.runs(&name, limit).map_err(|e| cron_error(ROUTE, e))
    })
    .await?;
    Ok(Json(json!({"runs": runs})))
}

pub(crate) async fn runs(
    State(state): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "GET /api/runs";
    let query = query_map(ROUTE, raw)?;
    let limit = u32::try_from(number(ROUTE, &query, "limit", 50, 1, 1000)?).unwrap_or(50);
    let agent = query.get("agent").cloned();
    let stores = Arc::clone(state.stores());
    let runs = blocking(ROUTE, move || {
        match stores
            .control_plane_existing()
            .map_err(|e| plane_error(ROUTE, e))?
        {
            Some(cp) => cp
                .list(agent.as_deref(), limit)
                .map_err(|e| plane_error(ROUTE, e)),
            None => Ok(Vec::new()),
        }
    })
    .await?;
    Ok(Json(json!({"runs": runs})))
}

pub(crate) async fn cancel_run(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    const ROUTE: &str = "POST /api/runs/{id}/cancel";
    let stores = Arc::clone(state.stores());
    let requested = id.clone();
    let run = blocking(ROUTE, move || {
        stores
            .control_plane_existing()
            .map_err(|e| plane_error(ROUTE, e))?
            .ok_or_else(|| plane_error(ROUTE, ControlPlaneError::NotFound(requested.clone())))?;
        stores
            .control_plane()
            .and_then(|cp| cp.request_cancel(&requested))
            .map_err(|e| plane_error(ROUTE, e))
    })
    .await?;
    if let Some(s) = scheduler(&state)
        && !s.cancel_local(&id)
    {
        s.wake();
    }
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"run": run, "status": "cancel requested"})),
    )
        .into_response())
}

pub(crate) async fn wake(State(state): State<AppState>) -> Json<Value> {
    match scheduler(&state) {
        Some(s) => {
            s.wake();
            Json(json!({"scheduler": "running"}))
        }
        None => Json(json!({"scheduler": "off", "reason": off_reason(&state)})),
    }
}

/// The request bodies, query parameters, path parameter schemas and status codes of the cron
/// routes in the OpenAPI document (the route table lists the routes themselves).
pub(crate) fn openapi_paths(paths: &mut serde_json::Map<String, Value>) {
    let string = json!({"type": "string"});
    let name = json!({"name": "name", "in": "path", "required": true,
                      "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
                      "example": "digest"});
    let limit = json!({"name": "limit", "in": "query", "required": false,
                       "schema": {"type": "integer", "minimum": 1, "maximum": 1000}});
    let agent = json!({"name": "agent", "in": "query", "required": false, "schema": string});
    let error = |description: &str| {
        json!({"description": description,
               "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}})
    };
    let object = |required: &[&str], fields: &[(&str, Value)]| {
        let properties: serde_json::Map<String, Value> = fields
            .iter()
            .map(|(k, v)| ((*k).to_string(), v.clone()))
            .collect();
        json!({"type": "object", "required": required, "properties": properties})
    };
    let nullable = |t: &str| json!({"type": [t, "null"]});
    let spec = json!({
        "type": "object",
        "required": ["name", "agent"],
        "additionalProperties": false,
        "properties": {
            "name": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
            "agent": {"type": "string"},
            "cron": nullable("string"), "tz": nullable("string"), "every": nullable("string"),
            "at": nullable("string"), "message": nullable("string"), "command": nullable("string"),
            "session": nullable("string"), "budget_usd": nullable("number"),
            "daily_budget_usd": nullable("number"), "catch_up": nullable("string"),
            "webhook": nullable("string"), "enabled": nullable("boolean"),
        },
    });
    let mut op = |path: &str, method: &str, f: &dyn Fn(&mut Value)| {
        if let Some(op) = paths.get_mut(path).and_then(|p| p.get_mut(method)) {
            f(op);
        }
    };
    let ok = |op: &mut Value, schema: Value| {
        op["responses"]["200"]["content"]["application/json"]["schema"] = schema;
    };
    let with_name = |op: &mut Value| op["parameters"] = json!([name.clone()]);
    op("/api/cron", "get", &|op| {
        ok(
            op,
            object(
                &["scheduler", "jobs"],
                &[
                    ("scheduler", string.clone()),
                    ("jobs", json!({"type": "array"})),
                ],
            ),
        );
    });
    op("/api/cron", "post", &|op| {
        op["requestBody"]["content"]["application/json"]["schema"] = spec.clone();
        let mut created = op["responses"]["200"].clone();
        created["description"] = "Created".into();
        created["content"]["application/json"]["schema"] = object(
            &["job", "status"],
            &[
                ("job", json!({"type": "object"})),
                ("status", string.clone()),
            ],
        );
        op["responses"]["201"] = created;
        if let Some(r) = op["responses"].as_object_mut() {
            r.remove("200");
        }
        op["responses"]["409"] = error("a job of that name exists");
    });
    op("/api/cron/{name}", "get", &|op| {
        with_name(op);
        ok(
            op,
            object(
                &["job", "runs"],
                &[
                    ("job", json!({"type": "object"})),
                    ("runs", json!({"type": "array"})),
                ],
            ),
        );
    });
    op("/api/cron/{name}", "delete", &|op| {
        with_name(op);
        ok(op, object(&["removed"], &[("removed", string.clone())]));
        op["responses"]["409"] = error("the job is declared in config.toml");
    });
    for action in ["pause", "resume"] {
        op(&format!("/api/cron/{{name}}/{action}"), "post", &|op| {
            with_name(op);
            ok(op, object(&["job"], &[("job", json!({"type": "object"}))]));
        });
    }
    op("/api/cron/{name}/run", "post", &|op| {
        with_name(op);
        ok(op, object(&["run"], &[("run", json!({"type": "object"}))]));
        op["responses"]["409"] =
            error("a run of the job holds its lock (names it), or the cron scheduler is off");
    });
    op("/api/cron/{name}/runs", "get", &|op| {
        op["parameters"] = json!([name.clone(), limit.clone()]);
        ok(op, object(&["runs"], &[("runs", json!({"type": "array"}))]));
    });
    op("/api/runs", "get", &|op| {
        op["parameters"] = json!([agent.clone(), limit.clone()]);
        ok(op, object(&["runs"], &[("runs", json!({"type": "array"}))]));
    });
    op("/api/runs/{id}/cancel", "post", &|op| {
        let mut accepted = op["responses"]["200"].clone();
        accepted["description"] = "Accepted".into();
        accepted["content"]["application/json"]["schema"] = object(
            &["run", "status"],
            &[
                ("run", json!({"type": "object"})),
                ("status", string.clone()),
            ],
        );
        op["responses"]["202"] = accepted;
        if let Some(r) = op["responses"].as_object_mut() {
            r.remove("200");
        }
        op["responses"]["409"] = error("the run is no longer running");
    });
    op("/admin/cron/wake", "post", &|op| {
        ok(op, object(&["scheduler"], &[("scheduler", string.clone())]));
    });
}
