//! What the gateway reports about itself (STATE-17): liveness (`GET /health`, which the listener
//! also answers while no generation's routes are installed) and each component's health
//! (`GET /api/health`: gateway, config, devices, sessions, agents, cron, SOP, memory backends,
//! resident memory, stores, channels).

use std::sync::Arc;
use std::time::SystemTime;

use axum::http::header;
use axum::response::IntoResponse;
use serde_json::{Value, json};
use warren_jobs::sop::defs;

use crate::state::AppState;

/// `GET /health`'s answer: liveness only. The listener gives it too while no generation's
/// routes are installed (the daemon's start-up, a reload's gap).
pub(crate) fn health_response() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        r#"{"status":"ok"}"#,
    )
}

/// Whether a request is the liveness probe (`GET` or `HEAD /health`).
pub(crate) fn is_health(method: &axum::http::Method, path: &str) -> bool {
    path == "/health" && (method == axum::http::Method::GET || method == axum::http::Method::HEAD)
}

/// Seconds since `since` (0 if the clock went back).
pub(crate) fn uptime_secs(since: SystemTime) -> u64 {
    SystemTime::now()
        .duration_since(since)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// `GET /api/health`'s answer: each component's status, and the whole one (`ok`, `starting`
/// while the agents or sessions come up, else `degraded`).
pub(crate) async fn report(state: &AppState) -> Value {
    let inner = &state.0;
    let devices = match &inner.process.devices {
        Ok(_) => json!({"status": "ok"}),
        Err(e) => json!({"status": "error", "error": e}),
    };
    let reports = state.agents();
    let agents: serde_json::Map<String, Value> = match reports {
        Some(reports) => reports
            .iter()
            .map(|a| {
                let v = if a.ok {
                    json!({"status": "ok"})
                } else {
                    json!({"status": "error", "error": a.sandbox.get("error")})
                };
                (a.alias.to_string(), v)
            })
            .collect(),
        // The listener serves while the agents' sandboxes are still being probed.
        None => inner
            .host
            .snapshot()
            .agents()
            .map(|(alias, _)| (alias.to_string(), json!({"status": "starting"})))
            .collect(),
    };
    let sessions = match inner.host.sessions_health() {
        warren_runtime::host::SessionsHealth::Starting => json!({"status": "starting"}),
        warren_runtime::host::SessionsHealth::Ok {
            backend,
            durable,
            skipped,
        } if skipped.is_empty() => {
            json!({"status": "ok", "backend": backend, "durable": durable})
        }
        // A legacy file left out of the import: the store serves, the file waits for the
        // operator (issue 15 §7).
        warren_runtime::host::SessionsHealth::Ok {
            backend,
            durable,
            skipped,
        } => json!({
            "status": "warning",
            "backend": backend,
            "durable": durable,
            "legacy_files_not_imported": skipped,
        }),
        warren_runtime::host::SessionsHealth::Error(e) => json!({"status": "error", "error": e}),
    };
    let starting = reports.is_none() || sessions["status"] == "starting";
    let config = config_health(state);
    let all_ok = config["status"] == "ok"
        && inner.process.devices.is_ok()
        && reports.is_some_and(|r| r.iter().all(|a| a.ok))
        && (sessions["status"] == "ok" || sessions["status"] == "warning");
    // Qdrant down is an error; a missing or failing lucid only a warning (SQLite still answers).
    let memory_backends = inner
        .host
        .memory_stores()
        .health(inner.host.snapshot().config())
        .await;
    let all_ok = all_ok && memory_backends["status"] != "error";
    let memory = warren_runtime::telemetry::memory_health();
    let all_ok = all_ok && memory["status"] == "ok";
    // Stores left read-only at their old schema by a failed migration (issue 22 §4).
    let read_only: Vec<Value> = warren_config::sqlite::read_only_stores()
        .into_iter()
        .map(|(path, reason)| json!({"path": path, "reason": reason}))
        .collect();
    let all_ok = all_ok && read_only.is_empty();
    let channels = channels(state);
    let all_ok = all_ok && channels["status"] != "down";
    let stores = if read_only.is_empty() {
        json!({"status": "ok"})
    } else {
        json!({"status": "read_only", "read_only": read_only})
    };
    json!({
        "status": if all_ok { "ok" } else if starting { "starting" } else { "degraded" },
        "pid": std::process::id(),
        "uptime_secs": uptime_secs(inner.started_at),
        "components": {
            "gateway": {"status": "ok", "listening": inner.local_addr.map(|a| a.to_string())},
            "config": config,
            "devices": devices,
            "sessions": sessions,
            "agents": agents,
            "cron": cron(state).await,
            "sop": sop(state).await,
            "memory_backends": memory_backends,
            "resident_memory": memory,
            "stores": stores,
            "channels": channels,
        },
    })
}
/// The config component: an error while config.toml on disk does not load (the running
/// generation keeps serving; issue 15 §3).
fn config_health(state: &AppState) -> Value {
    let inner = &state.0;
    let mut config = json!({
        "status": "ok",
        "generation": inner.store.generation(),
        "daemon_generation": inner.generation,
    });
    if let Some(refused) = inner.reload.as_ref().and_then(|r| r.refused()) {
        config["status"] = "error".into();
        config["error"] =
            format!("config.toml does not load, the running generation keeps serving: {refused}")
                .into();
    }
    config
}

/// `/api/health`'s `channels` component (issue 38): each channel's end-to-end health; `down`
/// when any channel completed no round-trip with its platform within its window.
fn channels(state: &AppState) -> Value {
    let Some(channels) = state.jobs().channels() else {
        return json!({"status": "off", "channels": {}});
    };
    let statuses = channels.statuses();
    let status = if statuses.is_empty() {
        "off"
    } else if statuses.iter().any(|s| s.status == "down") {
        "down"
    } else {
        "ok"
    };
    let each: serde_json::Map<String, Value> = statuses
        .into_iter()
        .map(|s| (s.name.clone(), json!(s)))
        .collect();
    json!({"status": status, "channels": each})
}

/// `/api/health`'s `cron` component: whether the scheduler runs and the paused jobs with
/// their reasons.
async fn cron(state: &AppState) -> Value {
    let stores = Arc::clone(state.stores());
    let running = state.jobs().cron().is_some();
    let jobs = tokio::task::spawn_blocking(move || {
        stores
            .cron_existing()
            .and_then(|s| s.map(|s| s.list()).transpose())
    })
    .await;
    match jobs {
        Ok(Ok(jobs)) => {
            let jobs = jobs.unwrap_or_default();
            let paused: Vec<Value> = jobs
                .iter()
                .filter(|j| !j.enabled)
                .map(|j| json!({"name": j.name, "agent": j.agent, "reason": j.paused_reason}))
                .collect();
            json!({"status": "ok", "scheduler": if running { "running" } else { "off" },
                   "jobs": jobs.len(), "paused": paused})
        }
        Ok(Err(e)) => json!({"status": "error", "error": e.to_string()}),
        Err(e) => json!({"status": "error", "error": e.to_string()}),
    }
}

/// `/api/health`'s `sop` component: the engine, whether runs are durable (a loud warning when
/// they are kept in memory only), and the definitions that do not load.
async fn sop(state: &AppState) -> Value {
    let loaded = defs::load(state.root(), state.host().snapshot().config());
    let problems: Vec<String> = loaded.problems.iter().map(ToString::to_string).collect();
    match state.jobs().sop() {
        None => json!({"status": "off", "sops": loaded.defs.len(), "problems": problems}),
        Some(engine) => {
            let mut v = json!({
                "status": if engine.fallback().is_some() || !problems.is_empty() { "degraded" } else { "ok" },
                "durable": engine.fallback().is_none(),
                "sops": loaded.defs.len(),
                "active_runs": engine.running(),
                "problems": problems,
            });
            if let Some(w) = engine.fallback() {
                v["warning"] = w.into();
            }
            v
        }
    }
}
