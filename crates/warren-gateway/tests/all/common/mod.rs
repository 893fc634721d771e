//! Requests through the router without a socket (`tower::ServiceExt::oneshot`), shared by the
//! gateway's test files.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::Value;
use tower::ServiceExt;
use warren_config::{ConfigStore, InstallRoot};
use warren_daemon::{Generation, ReloadTrigger};
use warren_gateway::{AppState, ProcessState};
use warren_runtime::{AgentHost, ProcessServices};

/// An install root whose `main` agent runs a script provider, with a paired token.
pub struct Scripted {
    pub dir: tempfile::TempDir,
    pub root: InstallRoot,
    pub store: ConfigStore,
    pub token: String,
    pub services: Arc<ProcessServices>,
    pub process: Arc<ProcessState>,
}

/// A root whose `main` agent runs `script` under `[risk_profiles.<profile>]` (`profile_body`
/// is its keys); `extra` is appended to config.toml.
pub fn scripted(script: &str, profile: &str, profile_body: &str, extra: &str) -> Scripted {
    let dir = tempfile::tempdir().unwrap();
    let root = InstallRoot::at(dir.path().join("warren"));
    root.ensure_layout().unwrap();
    let script_file = dir.path().join("script.json");
    std::fs::write(&script_file, script).unwrap();
    std::fs::write(
        root.config_file(),
        format!(
            "[providers.demo]\nkind = \"script\"\nscript = \"{}\"\n\n[agents.main]\nprovider = \"demo\"\nrisk_profile = \"{profile}\"\n\n[risk_profiles.{profile}]\n{profile_body}\n\n{extra}",
            script_file.display()
        ),
    )
    .unwrap();
    let store = ConfigStore::load(root.clone()).unwrap();
    let token = warren_gateway::pairing::new_token().unwrap();
    tokio::task::block_in_place(|| {
        warren_gateway::tokens::add_hash_blocking(
            &store,
            &warren_gateway::pairing::hash_token(&token),
        )
    })
    .unwrap();
    let services = Arc::new(ProcessServices::new(&root, store.snapshot().config()).unwrap());
    let process = Arc::new(ProcessState::new(&root).unwrap());
    Scripted {
        dir,
        root,
        store,
        token,
        services,
        process,
    }
}

/// The gateway state of a generation built from `store`'s current snapshot.
pub fn state_for(
    root: &InstallRoot,
    store: &ConfigStore,
    process: &Arc<ProcessState>,
    services: &Arc<ProcessServices>,
) -> AppState {
    let snapshot = store.snapshot();
    let host = AgentHost::new(root, Arc::clone(&snapshot), Arc::clone(services));
    let generation = Generation {
        root: root.clone(),
        store: store.clone(),
        snapshot,
        reload: ReloadTrigger::default(),
        started_at: std::time::SystemTime::now(),
        host: Arc::new(host),
        jobs: Arc::default(),
    };
    AppState::new(&generation, Arc::clone(process), None, Vec::new())
}

/// A request with a bearer `token` when given and `body` as JSON when given.
pub fn request(method: &str, path: &str, token: Option<&str>, body: Option<&str>) -> Request<Body> {
    let mut req = Request::builder().method(method).uri(path);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    if body.is_some() {
        req = req.header("content-type", "application/json");
    }
    req.body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .unwrap()
}

/// Sends the request to `app`; returns the status and the JSON body (`Null` if not JSON).
pub async fn call(
    app: Router,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (StatusCode, Value) {
    send(app, request(method, path, token, body)).await
}

/// Sends `request` (built by [`request`], perhaps with more headers) to `app`; returns the
/// status and the JSON body (`Null` if not JSON).
pub async fn send(app: Router, request: Request<Body>) -> (StatusCode, Value) {
    let response = app.oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// The `(role, content)` of each message of `list`, a JSON array of messages with text content
/// (a session page's, a provider request's).
pub fn messages(list: &Value) -> Vec<(String, String)> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_string(),
                m["content"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// `(role, content)` pairs as [`messages`] reads them.
pub fn pairs(messages: &[(&str, &str)]) -> Vec<(String, String)> {
    messages
        .iter()
        .map(|(r, c)| ((*r).to_string(), (*c).to_string()))
        .collect()
}

/// The `(role, content)` messages of session `key` of `agent`, as stored.
pub async fn session_messages(
    app: &Router,
    token: &str,
    agent: &str,
    key: &str,
) -> Vec<(String, String)> {
    let (status, page) = call(
        app.clone(),
        "GET",
        &format!("/api/agents/{agent}/sessions/{key}?limit=1000"),
        Some(token),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    messages(&page["messages"])
}
