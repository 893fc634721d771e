//! `GET /api/agents/restore`: the delete archives under `data/agents/_deleted/` that a restore
//! can name (BEYOND-1), for the dashboard's restore list. Added with the dashboard: no other
//! route lists them. The lifecycle reads them ([`warren_admin::lifecycle::list_archives`]);
//! an unreadable manifest is listed with its error.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};
use warren_admin::lifecycle::list_archives;

use crate::error::{ApiError, blocking};
use crate::state::AppState;

/// The archives, newest first: name (what `POST /api/agents/restore` takes), alias, time of
/// the delete, whether it completed and whether it was restored already.
pub(crate) async fn list(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "GET /api/agents/restore";
    let root = state.root().clone();
    let archives = blocking(ROUTE, move || {
        list_archives(&root).map_err(|e| ApiError::internal(ROUTE, e))
    })
    .await?;
    let rows: Vec<Value> = archives
        .into_iter()
        .map(|a| {
            let mut row = match a.manifest {
                Ok(m) => json!({
                    "name": a.name,
                    "alias": m.alias,
                    "deleted_at": m.deleted_at,
                    "complete": m.complete,
                    "counts": m.counts,
                }),
                Err(e) => json!({"name": a.name, "error": e.to_string()}),
            };
            row["restored"] = a.restored.into();
            row
        })
        .collect();
    Ok(Json(json!({"count": rows.len(), "archives": rows})))
}
