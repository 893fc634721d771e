//! `GET /api/agents/restore`: the delete archives under `data/agents/_deleted/` that a restore
//! can name (BEYOND-1), for the dashboard's restore list. Added with the dashboard: no other
//! route lists them. Reads only each archive's `manifest.json` and `restored.json` (written by
//! the daemon's lifecycle, not by an agent); an unreadable manifest is listed with its error.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use crate::error::{ApiError, blocking};
use crate::state::AppState;

/// The archives, newest first: name (what `POST /api/agents/restore` takes), alias, time of
/// the delete, whether it completed and whether it was restored already.
pub(crate) async fn list(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    const ROUTE: &str = "GET /api/agents/restore";
    let dir = state.root().deleted_agents_dir();
    let archives = blocking(ROUTE, move || {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(ApiError::internal(
                    ROUTE,
                    format!("reading {}: {e}", dir.display()),
                ));
            }
        };
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let manifest = path.join("manifest.json");
            let bytes = match std::fs::read(&manifest) {
                Ok(bytes) => Ok(bytes),
                // A directory without a manifest is a delete still under way: not restorable.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => Err(e.to_string()),
            };
            let parsed =
                bytes.and_then(|b| serde_json::from_slice::<Value>(&b).map_err(|e| e.to_string()));
            let mut row = match parsed {
                Ok(m) => json!({
                    "name": name,
                    "alias": m["alias"],
                    "deleted_at": m["deleted_at"],
                    "complete": m["complete"],
                    "counts": m["counts"],
                }),
                Err(e) => json!({
                    "name": name,
                    "error": format!("{}: {e}", manifest.display()),
                }),
            };
            row["restored"] = path.join("restored.json").exists().into();
            out.push(row);
        }
        out.sort_by(|a, b| b["deleted_at"].as_str().cmp(&a["deleted_at"].as_str()));
        Ok(out)
    })
    .await?;
    Ok(Json(json!({"count": archives.len(), "archives": archives})))
}
