//! `GET /metrics` (issue 25; STATE-17): the runtime's Prometheus metrics
//! ([`warren_runtime::metrics`]) as OpenMetrics text, behind a paired bearer token on the
//! gateway, and — for scrapers that hold no token — on the optional separate listener
//! `[metrics] bind`:`port` (loopback by default) that serves nothing else.

use std::sync::Mutex;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Map, Value, json};
use warren_config::schema::MetricsConfig;

use crate::error::ApiError;

/// The metrics, or 404 naming the key when `[metrics] enabled = false`.
pub(crate) async fn scrape() -> Response {
    match warren_runtime::metrics::render() {
        Some(text) => (
            [(header::CONTENT_TYPE, warren_runtime::metrics::CONTENT_TYPE)],
            text,
        )
            .into_response(),
        None => ApiError::new(
            StatusCode::NOT_FOUND,
            "metrics_off",
            "metrics are off ([metrics] enabled = false)",
        )
        .into_response(),
    }
}

/// The OpenAPI entry of `/metrics` answers text, not JSON.
pub(crate) fn openapi_paths(paths: &mut Map<String, Value>) {
    if let Some(op) = paths.get_mut("/metrics").and_then(|p| p.get_mut("get")) {
        op["responses"]["200"]["content"] = json!({
            "application/openmetrics-text": {"schema": {"type": "string"}}
        });
    }
}

/// The separate listener of this process: its address and its serving task.
static SEPARATE: Mutex<Option<(String, u16, tokio::task::JoinHandle<()>)>> = Mutex::new(None);

/// Serves `/metrics` without a token on `[metrics] bind`:`port` when `port` is set; kept while
/// the address stays across reloads, rebound when it changes, stopped when `port` goes.
/// A bind failure is logged naming the keys; the gateway serves on.
pub(crate) async fn listen(metrics: &MetricsConfig) {
    let wanted = metrics
        .port
        .filter(|_| metrics.enabled)
        .map(|port| (metrics.bind.clone(), port));
    {
        let mut current = SEPARATE.lock().unwrap_or_else(|p| p.into_inner());
        match (current.as_ref(), &wanted) {
            (Some((b, p, _)), Some((wb, wp))) if b == wb && p == wp => return,
            _ => {
                if let Some((_, _, task)) = current.take() {
                    task.abort();
                }
            }
        }
    }
    let Some((bind, port)) = wanted else { return };
    let socket = match tokio::net::TcpListener::bind((bind.as_str(), port)).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(
                "cannot listen for metrics on {bind}:{port} ([metrics] bind/port): {e}"
            );
            return;
        }
    };
    if let Ok(addr) = socket.local_addr() {
        if !addr.ip().is_loopback() {
            tracing::warn!(%addr, "the metrics listener answers beyond loopback without a token");
        }
        tracing::info!(%addr, "metrics listening (GET /metrics, no token)");
    }
    let router = Router::new().route("/metrics", get(scrape));
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(socket, router).await {
            tracing::warn!("metrics listener stopped: {e}");
        }
    });
    *SEPARATE.lock().unwrap_or_else(|p| p.into_inner()) = Some((bind, port, task));
}
