//! `GET /api/config` (secrets as `[redacted]`) and `PATCH /api/config` (CFG-1..3): a patch is a
//! JSON object of dotted key paths; `null` removes a key. It runs as ONE `ConfigStore` write
//! transaction (the same lock as the CLI, across processes), is validated as a whole and writes
//! only the dirty paths. The token set is not patchable here (pairing and revoke own it).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Map, Value, json};
use toml_edit::{Array, InlineTable};
use warren_config::{ConfigError, KeyPath};

use crate::error::ApiError;
use crate::json::StrictJson;
use crate::state::AppState;
use crate::tokens::TOKENS_KEY;

/// Runs the config write `op` off the async workers. When config.toml changed on disk since
/// the daemon loaded it (a CLI write, a hand edit), the daemon reloads it — if it validates —
/// and runs `op` once more, instead of refusing (issue 15 §3). An invalid file keeps the
/// running generation serving: 409 naming the problem, nothing written. `op`'s own errors
/// come back to the caller to map.
pub(crate) async fn write_fresh<T: Send + 'static>(
    state: &AppState,
    route: &str,
    op: impl Fn() -> Result<T, ConfigError> + Send + Sync + 'static,
) -> Result<Result<T, ConfigError>, ApiError> {
    let op = std::sync::Arc::new(op);
    let first = run_blocking(route, std::sync::Arc::clone(&op)).await?;
    if !matches!(first, Err(ConfigError::Stale { .. })) {
        return Ok(first);
    }
    reload_changed(state, route).await?;
    run_blocking(route, op).await
}

async fn run_blocking<T: Send + 'static>(
    route: &str,
    op: std::sync::Arc<impl Fn() -> Result<T, ConfigError> + Send + Sync + 'static>,
) -> Result<Result<T, ConfigError>, ApiError> {
    tokio::task::spawn_blocking(move || op())
        .await
        .map_err(|e| ApiError::internal(route, e))
}

/// Loads the config.toml that changed on disk into the running daemon (see [`write_fresh`]).
pub(crate) async fn reload_changed(state: &AppState, route: &str) -> Result<(), ApiError> {
    let refused = |message: String| {
        ApiError::new(
            StatusCode::CONFLICT,
            "config_changed_externally",
            format!(
                "{route}: config.toml was changed outside the daemon and does not load, so the \
                 running generation keeps serving and nothing was written: {message}"
            ),
        )
    };
    match &state.0.reload {
        Some(reload) if reload.is_attached() => reload
            .request()
            .await
            .map(drop)
            .map_err(|e| refused(e.to_string())),
        // No daemon loop (a detached generation): the store alone picks the file up.
        _ => state
            .store()
            .reload()
            .await
            .map(drop)
            .map_err(|e| refused(e.to_string())),
    }
}

pub(crate) async fn get_config(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let snapshot = state.store().snapshot();
    let config = serde_json::to_value(snapshot.config())
        .map_err(|e| ApiError::internal("GET /api/config", e))?;
    Ok(Json(
        json!({"generation": snapshot.generation(), "config": config}),
    ))
}

/// A JSON value as a TOML value; `None` for null (removal) at top level.
fn to_toml(key: &str, value: &Value) -> Result<toml_edit::Value, ApiError> {
    let bad = |msg: &str| ApiError::bad_field("PATCH /api/config", key, msg);
    Ok(match value {
        Value::Null => {
            return Err(bad(
                "null is only allowed as a whole value (it removes the key)",
            ));
        }
        Value::Bool(b) => (*b).into(),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => i.into(),
            (None, Some(f)) => f.into(),
            _ => return Err(bad("number out of range")),
        },
        Value::String(s) => s.as_str().into(),
        Value::Array(items) => {
            let mut array = Array::new();
            for item in items {
                array.push(to_toml(key, item)?);
            }
            toml_edit::Value::Array(array)
        }
        Value::Object(map) => {
            let mut table = InlineTable::new();
            for (k, v) in map {
                table.insert(k, to_toml(key, v)?);
            }
            toml_edit::Value::InlineTable(table)
        }
    })
}

pub(crate) async fn patch_config(
    State(state): State<AppState>,
    StrictJson(patch): StrictJson<Map<String, Value>>,
) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "PATCH /api/config";
    if patch.is_empty() {
        return Err(ApiError::bad_field(
            ROUTE,
            "(body)",
            "an object of at least one dotted key",
        ));
    }
    let tokens_key: KeyPath = TOKENS_KEY
        .parse()
        .map_err(|e| ApiError::internal(ROUTE, e))?;
    let mut edits = Vec::with_capacity(patch.len());
    for (key, value) in &patch {
        let path: KeyPath = key
            .parse()
            .map_err(|e| ApiError::bad_field(ROUTE, key.as_str(), format!("{e}")))?;
        if path.is_empty() || path.starts_with(&tokens_key) || tokens_key.starts_with(&path) {
            return Err(ApiError {
                status: StatusCode::FORBIDDEN,
                ..ApiError::bad_field(
                    ROUTE,
                    key.as_str(),
                    "the paired-token set changes only through pairing and `warren tokens revoke`",
                )
            });
        }
        let value = match value {
            Value::Null => None,
            v => Some(to_toml(key, v)?),
        };
        edits.push((path, value));
    }
    let store = state.store().clone();
    let outcome = write_fresh(&state, ROUTE, move || {
        let mut txn = store.write_blocking()?;
        for (path, value) in &edits {
            match value {
                Some(v) => txn.set(path, v.clone())?,
                None => {
                    txn.remove(path)?;
                }
            }
        }
        txn.commit()
    })
    .await?
    .map_err(|e: ConfigError| ApiError::from_config(ROUTE, &e))?;
    Ok(Json(json!({
        "generation": outcome.generation,
        "changed": outcome.changed,
        "warnings": outcome.warnings,
        "note": "saved; subsystems pick it up on POST /admin/reload",
    })))
}
