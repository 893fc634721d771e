//! Agent lifecycle over HTTP (LIFE-1..5, BEYOND-1): rename, delete (with its preview) and
//! restore. The handlers only parse and map: the work is `warren_runtime::lifecycle`, the same
//! module the CLI runs, on this daemon's one config owner. Warnings come back in the body.
//!
//! `POST /admin/agents/lifecycle` is the CLI's door when a daemon runs (`warren agents
//! rename|delete|restore` ask the daemon instead of writing beside it).

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::Value;
use warren_runtime::lifecycle::{Lifecycle, LifecycleError};

use crate::error::{ApiError, parse_json};
use crate::state::AppState;

fn lifecycle(state: &AppState) -> Lifecycle {
    Lifecycle::new(state.store().clone())
}

fn map_err(route: &str, e: LifecycleError) -> ApiError {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    match e {
        LifecycleError::Config(c) => {
            let mut err = ApiError::from_config(route, &c);
            err.status = status;
            err
        }
        other => ApiError::new(status, other.code(), format!("{route}: {other}")),
    }
}

fn to_json(route: &str, v: &impl serde::Serialize) -> Result<Json<Value>, ApiError> {
    serde_json::to_value(v)
        .map(Json)
        .map_err(|e| ApiError::internal(route, e))
}

/// After a mutation the running daemon reloads, so its agents, sessions and memory follow the
/// new config at once (the old alias stops serving, the new one serves). A failed reload is a
/// warning in the body: the operation itself is done and persisted.
async fn reloaded(
    state: &AppState,
    route: &str,
    v: &impl serde::Serialize,
) -> Result<Json<Value>, ApiError> {
    let Json(mut body) = to_json(route, v)?;
    if let Some(reload) = &state.0.reload {
        match reload.request().await {
            Ok(generation) => body["reloaded_generation"] = Value::from(generation),
            Err(message) => {
                let warning = Value::from(format!("the daemon did not reload: {message}"));
                match body.get_mut("warnings").and_then(Value::as_array_mut) {
                    Some(list) => list.push(warning),
                    None => body["warnings"] = Value::Array(vec![warning]),
                }
            }
        }
    }
    Ok(Json(body))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RenameBody {
    to: String,
}

pub(crate) async fn rename(
    State(state): State<AppState>,
    Path(alias): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "POST /api/agents/{alias}/rename";
    let req: RenameBody = parse_json(ROUTE, &body)?;
    let report = lifecycle(&state)
        .rename(&alias, &req.to)
        .await
        .map_err(|e| map_err(ROUTE, e))?;
    reloaded(&state, ROUTE, &report).await
}

pub(crate) async fn delete(
    State(state): State<AppState>,
    Path(alias): Path<String>,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "DELETE /api/agents/{alias}";
    let report = lifecycle(&state)
        .delete(&alias)
        .await
        .map_err(|e| map_err(ROUTE, e))?;
    reloaded(&state, ROUTE, &report).await
}

pub(crate) async fn delete_plan(
    State(state): State<AppState>,
    Path(alias): Path<String>,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "GET /api/agents/{alias}/delete-plan";
    let plan = lifecycle(&state)
        .delete_plan(&alias)
        .await
        .map_err(|e| map_err(ROUTE, e))?;
    to_json(ROUTE, &plan)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RestoreBody {
    archive: String,
    #[serde(default, rename = "as")]
    as_alias: Option<String>,
}

pub(crate) async fn restore(
    State(state): State<AppState>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "POST /api/agents/restore";
    let req: RestoreBody = parse_json(ROUTE, &body)?;
    let report = lifecycle(&state)
        .restore(&req.archive, req.as_alias.as_deref())
        .await
        .map_err(|e| map_err(ROUTE, e))?;
    reloaded(&state, ROUTE, &report).await
}

/// The CLI's request when a daemon runs.
#[derive(Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
enum AdminOp {
    Rename {
        alias: String,
        to: String,
    },
    Delete {
        alias: String,
    },
    DeletePlan {
        alias: String,
    },
    Restore {
        archive: String,
        #[serde(default, rename = "as")]
        as_alias: Option<String>,
    },
    Resume,
}

pub(crate) async fn admin(
    State(state): State<AppState>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "POST /admin/agents/lifecycle";
    let op: AdminOp = parse_json(ROUTE, &body)?;
    let lc = lifecycle(&state);
    let err = |e| map_err(ROUTE, e);
    match op {
        AdminOp::Rename { alias, to } => {
            reloaded(&state, ROUTE, &lc.rename(&alias, &to).await.map_err(err)?).await
        }
        AdminOp::Delete { alias } => {
            reloaded(&state, ROUTE, &lc.delete(&alias).await.map_err(err)?).await
        }
        AdminOp::DeletePlan { alias } => {
            to_json(ROUTE, &lc.delete_plan(&alias).await.map_err(err)?)
        }
        AdminOp::Restore { archive, as_alias } => {
            let report = lc
                .restore(&archive, as_alias.as_deref())
                .await
                .map_err(err)?;
            reloaded(&state, ROUTE, &report).await
        }
        AdminOp::Resume => to_json(ROUTE, &lc.converge_pending().await),
    }
}
