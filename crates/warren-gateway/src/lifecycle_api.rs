//! Agent lifecycle over HTTP (LIFE-1..5, BEYOND-1): rename, delete (with its preview) and
//! restore. The handlers only parse and map: the work is `warren_admin::lifecycle`, the same
//! module the CLI runs, on this daemon's one config owner. Warnings come back in the body.
//!
//! `POST /admin/agents/lifecycle` is the CLI's door when a daemon runs (`warren agents
//! rename|delete|restore` ask the daemon instead of writing beside it).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::Value;
use warren_admin::lifecycle::{ErrorKind, Lifecycle, LifecycleError, parse_alias};
use warren_config::ConfigError;

use warren_admin::control::LifecycleOp;

use crate::error::ApiError;
use crate::json::StrictJson;
use crate::state::AppState;

/// The lifecycle on this daemon's config owner and its running generation's stores (never a
/// second writer on the live session, memory or ACP files; issue 14 §6).
fn lifecycle(state: &AppState) -> Lifecycle {
    Lifecycle::for_host(state.store().clone(), std::sync::Arc::clone(state.host()))
}

/// The HTTP status and error code of a lifecycle error (the CLI prints the same code when it
/// runs an operation itself).
pub fn status_and_code(e: &LifecycleError) -> (StatusCode, &'static str) {
    match (e.kind(), e) {
        (ErrorKind::NotFound, _) => (StatusCode::NOT_FOUND, "not_found"),
        (ErrorKind::Invalid, LifecycleError::Config(_)) => {
            (StatusCode::BAD_REQUEST, "invalid_config")
        }
        (ErrorKind::Invalid, _) => (StatusCode::BAD_REQUEST, "validation_failed"),
        (ErrorKind::Refused, _) => (StatusCode::CONFLICT, "refused"),
        (ErrorKind::Config, _) => (StatusCode::INTERNAL_SERVER_ERROR, "config_error"),
        (ErrorKind::Io, _) => (StatusCode::INTERNAL_SERVER_ERROR, "io_error"),
    }
}

fn map_err(route: &str, e: LifecycleError) -> ApiError {
    let (status, code) = status_and_code(&e);
    match e {
        LifecycleError::Config(c) => {
            let mut err = ApiError::from_config(route, &c);
            err.status = status;
            err
        }
        other => ApiError::new(status, code, format!("{route}: {other}")),
    }
}

/// Runs a lifecycle operation; when config.toml changed outside the daemon, the daemon
/// reloads it (if it validates) and runs the operation once more (issue 15 §3). The
/// operations take the config write lock before touching anything, so the refused first
/// attempt changed nothing.
async fn fresh<T, F: Future<Output = Result<T, LifecycleError>>>(
    state: &AppState,
    route: &str,
    op: impl Fn() -> F,
) -> Result<T, ApiError> {
    match op().await {
        Err(LifecycleError::Config(ConfigError::Stale { .. })) => {
            crate::config_write::reload_changed(state, route).await?;
            op().await.map_err(|e| map_err(route, e))
        }
        other => other.map_err(|e| map_err(route, e)),
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
pub(crate) async fn reloaded(
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
pub(crate) struct RenameBody {
    to: String,
}

pub(crate) async fn rename(
    State(state): State<AppState>,
    crate::alias_path::AliasPath(alias): crate::alias_path::AliasPath,
    StrictJson(req): StrictJson<RenameBody>,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "POST /api/agents/{alias}/rename";
    let to = parse_alias(&req.to).map_err(|e| map_err(ROUTE, e))?;
    let lc = lifecycle(&state);
    let report = fresh(&state, ROUTE, || lc.rename(&alias, &to)).await?;
    reloaded(&state, ROUTE, &report).await
}

pub(crate) async fn delete(
    State(state): State<AppState>,
    crate::alias_path::AliasPath(alias): crate::alias_path::AliasPath,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "DELETE /api/agents/{alias}";
    let lc = lifecycle(&state);
    let report = fresh(&state, ROUTE, || lc.delete(&alias)).await?;
    reloaded(&state, ROUTE, &report).await
}

pub(crate) async fn delete_plan(
    State(state): State<AppState>,
    crate::alias_path::AliasPath(alias): crate::alias_path::AliasPath,
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
pub(crate) struct RestoreBody {
    archive: String,
    #[serde(default, rename = "as")]
    as_alias: Option<String>,
}

pub(crate) async fn restore(
    State(state): State<AppState>,
    StrictJson(req): StrictJson<RestoreBody>,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "POST /api/agents/restore";
    let as_alias =
        (req.as_alias.as_deref().map(parse_alias).transpose()).map_err(|e| map_err(ROUTE, e))?;
    let lc = lifecycle(&state);
    let report = fresh(&state, ROUTE, || {
        lc.restore(&req.archive, as_alias.as_ref())
    })
    .await?;
    reloaded(&state, ROUTE, &report).await
}

/// The lifecycle verbs of the control seam (`POST /admin/control`, and
/// `POST /admin/agents/lifecycle`, which takes only these): the typed verb
/// ([`LifecycleOp`]), executed by the one executor ([`Lifecycle::execute`]) on this daemon's
/// config owner and running generation; a verb that changed the config reloads the daemon.
pub(crate) async fn admin(
    State(state): State<AppState>,
    StrictJson(op): StrictJson<LifecycleOp>,
) -> Result<Json<Value>, ApiError> {
    serve(&state, "POST /admin/agents/lifecycle", &op).await
}

pub(crate) async fn serve(
    state: &AppState,
    route: &str,
    op: &LifecycleOp,
) -> Result<Json<Value>, ApiError> {
    let lc = lifecycle(state);
    if op.mutates() {
        let report = fresh(state, route, || lc.execute(op)).await?;
        reloaded(state, route, &report).await
    } else {
        Ok(Json(lc.execute(op).await.map_err(|e| map_err(route, e))?))
    }
}
