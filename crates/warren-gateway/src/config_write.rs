//! Config writes from the handlers while the daemon holds the config (issue 15 §3): a write
//! that finds config.toml changed on disk reloads it first — if it validates — and runs once
//! more; an invalid file keeps the running generation serving and nothing is written.

use axum::http::StatusCode;
use warren_config::ConfigError;

use crate::error::ApiError;
use crate::state::AppState;

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
