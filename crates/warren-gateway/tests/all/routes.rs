//! Every route through the router without a socket (`tower::ServiceExt::oneshot`): auth per
//! route (STATE-21), pairing (STATE-15), devices (STATE-16), config read/patch (CFG-2/3),
//! health/status (STATE-17) and the OpenAPI inventory.

// Setup helpers outside #[test] fns panic on a broken fixture, like the tests themselves.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::connect_info::MockConnectInfo;
use axum::http::{Request, StatusCode};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tower::ServiceExt;
use warren_config::{ConfigStore, InstallRoot};
use warren_daemon::Generation;
use warren_gateway::openai_api::OPENAI_ROUTES;
use warren_gateway::pairing::hash_token;
use warren_gateway::{Access, AppState, ProcessState, ROUTES, router, tokens};

use common::call;

struct Fixture {
    _dir: tempfile::TempDir,
    root: InstallRoot,
    store: ConfigStore,
    process: Arc<ProcessState>,
    state: AppState,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = InstallRoot::at(dir.path().join("warren"));
    root.ensure_layout().unwrap();
    warren_config::init(&root).unwrap();
    let store = ConfigStore::load(root.clone()).unwrap();
    let process = Arc::new(ProcessState::new(&root).unwrap());
    let generation = Generation::detached(root.clone(), store.clone()).unwrap();
    let state = AppState::new(&generation, Arc::clone(&process), None, Vec::new());
    Fixture {
        _dir: dir,
        root,
        store,
        process,
        state,
    }
}

impl Fixture {
    fn app_from(&self, peer: [u8; 4]) -> Router {
        router(self.state.clone()).layer(MockConnectInfo(SocketAddr::from((peer, 40000))))
    }

    fn app(&self) -> Router {
        self.app_from([127, 0, 0, 1])
    }

    async fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> (StatusCode, Value) {
        call(self.app(), method, path, token, body).await
    }

    /// Pairs a device through the real route and returns its token.
    async fn pair(&self, device: &str) -> String {
        let (code, _) = self.process.pairing.issue_code().unwrap();
        let body = json!({"code": code, "device": device}).to_string();
        let (status, answer) = self.call("POST", "/pair", None, Some(&body)).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        answer["token"].as_str().unwrap().to_string()
    }
}

/// A concrete path for a route template.
fn concrete(path: &str) -> String {
    path.replace("{id}", "000000000000")
        .replace("{alias}", "main")
        .replace("{key}", "http-main")
}

#[tokio::test]
async fn every_protected_route_refuses_missing_wrong_revoked_and_deleted_device_tokens_state21() {
    let f = fixture();
    let good = f.pair("laptop").await;
    let revoked = f.pair("old-phone").await;
    let deleted = f.pair("tablet").await;
    // Revoked the way the CLI does it; deleted through the device route.
    let revoked_id = hash_token(&revoked)[..12].to_string();
    let store = f.store.clone();
    tokio::task::spawn_blocking(move || tokens::revoke_blocking(&store, None, &revoked_id))
        .await
        .unwrap()
        .unwrap();
    // The CLI wrote config.toml behind the running store: reload as the daemon would.
    f.store.reload().await.unwrap();
    let deleted_id = hash_token(&deleted)[..12].to_string();
    // A short prefix never revokes whichever device happens to match (STATE-21).
    let (status, body) = f
        .call(
            "DELETE",
            &format!("/api/devices/{}", &deleted_id[..1]),
            Some(&good),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.to_string().contains("too short"), "{body}");
    let (status, body) = f
        .call(
            "DELETE",
            &format!("/api/devices/{deleted_id}"),
            Some(&good),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let wrong = format!("wrn_{}", "0".repeat(64));
    let bad_credentials: [(&str, Option<&str>); 5] = [
        ("no token", None),
        ("wrong token", Some(wrong.as_str())),
        ("empty token", Some("")),
        ("revoked token", Some(revoked.as_str())),
        ("token of a deleted device", Some(deleted.as_str())),
    ];
    let mut checked = 0;
    for route in ROUTES.iter().filter(|r| r.access != Access::Public) {
        let path = concrete(route.path);
        for (what, token) in bad_credentials {
            let (status, body) = f.call(route.method, &path, token, Some("{}")).await;
            assert_eq!(
                status,
                StatusCode::UNAUTHORIZED,
                "{} {path} with {what}: {body}",
                route.method
            );
            assert_eq!(body["error"], "unauthorized");
            checked += 1;
        }
        // Admin routes from another host: refused before anything else.
        if route.access == Access::Admin {
            let (status, _) = call(
                f.app_from([192, 0, 2, 7]),
                route.method,
                &path,
                Some(&good),
                None,
            )
            .await;
            assert_eq!(
                status,
                StatusCode::FORBIDDEN,
                "{} {path} from remote",
                route.method
            );
        }
    }
    assert_eq!(
        checked,
        5 * ROUTES.iter().filter(|r| r.access != Access::Public).count()
    );

    // The good token passes every token route (the handlers answer, not the guard).
    for route in ROUTES.iter().filter(|r| r.access == Access::Token) {
        let path = concrete(route.path);
        if path == "/api/events" {
            // A live stream: the head says OK; the body never ends by itself.
            let req = Request::builder()
                .uri(&path)
                .header("authorization", format!("Bearer {good}"))
                .body(Body::empty())
                .unwrap();
            let response = f.app().oneshot(req).await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            continue;
        }
        let body = (route.method == "PATCH").then_some(r#"{"log.level": "debug"}"#);
        let (status, answer) = f.call(route.method, &path, Some(&good), body).await;
        assert_ne!(
            status,
            StatusCode::UNAUTHORIZED,
            "{} {path}: {answer}",
            route.method
        );
        assert!(
            !status.is_server_error(),
            "{} {path}: {answer}",
            route.method
        );
    }
    let (status, _) = f.call("POST", "/admin/paircode", Some(&good), None).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn public_routes_need_no_token_and_health_says_only_ok_state17() {
    let f = fixture();
    let (status, body) = f.call("GET", "/health", None, None).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"status": "ok"})));
    let (status, body) = f.call("GET", "/nope", None, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}

#[tokio::test]
async fn pairing_persists_only_the_hash_before_the_token_is_returned_state15() {
    let f = fixture();
    let token = f.pair("laptop").await;
    assert!(token.starts_with("wrn_") && token.len() == 68, "{token}");
    let hash = hash_token(&token);
    let file = std::fs::read_to_string(f.root.config_file()).unwrap();
    assert!(!file.contains(&token), "the token is never stored");
    assert!(!file.contains(&hash), "the hash is stored encrypted");
    // A fresh load (another process, a restart) sees the hash: the token is durable.
    let reloaded = ConfigStore::load(f.root.clone()).unwrap();
    assert_eq!(
        tokens::token_hashes(&reloaded.snapshot()),
        vec![hash.clone()]
    );

    // Neither the token nor its hash shows in /api/config, /api/status or /api/devices.
    for path in ["/api/config", "/api/status", "/api/devices", "/api/health"] {
        let (status, body) = f.call("GET", path, Some(&token), None).await;
        assert_eq!(status, StatusCode::OK);
        let text = body.to_string();
        assert!(
            !text.contains(&token) && !text.contains(&hash),
            "{path}: {text}"
        );
    }
    let (_, config) = f.call("GET", "/api/config", Some(&token), None).await;
    assert_eq!(
        config["config"]["gateway"]["paired_tokens"],
        json!(["[redacted]"])
    );
    let (_, devices) = f.call("GET", "/api/devices", Some(&token), None).await;
    assert_eq!(devices["devices"][0]["name"], "laptop");
    assert_eq!(devices["devices"][0]["id"], hash[..12]);

    // The code was one-time.
    let (code, _) = f.process.pairing.issue_code().unwrap();
    let body = json!({"code": code, "device": "x"}).to_string();
    assert_eq!(
        f.call("POST", "/pair", None, Some(&body)).await.0,
        StatusCode::OK
    );
    assert_eq!(
        f.call("POST", "/pair", None, Some(&body)).await.0,
        StatusCode::FORBIDDEN
    );
}

#[tokio::test]
async fn pairing_brute_force_locks_the_client_out_state21() {
    let f = fixture();
    let (code, _) = f.process.pairing.issue_code().unwrap();
    let wrong = if code == "000000" { "111111" } else { "000000" };
    let attempt = |c: &str| json!({"code": c, "device": "attacker"}).to_string();
    for _ in 0..4 {
        let (status, body) = f.call("POST", "/pair", None, Some(&attempt(wrong))).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert_eq!(body["field"], "code");
    }
    let (status, body) = f.call("POST", "/pair", None, Some(&attempt(wrong))).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(body["retry_after_secs"].as_u64().unwrap() > 0);
    // Locked out: the right code is refused too, and it was not consumed for everyone else.
    let (status, _) = f.call("POST", "/pair", None, Some(&attempt(&code))).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let (status, _) = call(
        f.app_from([127, 0, 0, 2]),
        "POST",
        "/pair",
        None,
        Some(&attempt(&code)),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    // No answer ever echoes the code.
    let (_, body) = f
        .call("POST", "/pair", None, Some(&attempt("999999")))
        .await;
    assert!(!body.to_string().contains("999999"), "{body}");
}

#[tokio::test]
async fn malformed_bodies_get_400_naming_the_field_and_large_bodies_413() {
    let f = fixture();
    let cases = [
        (r#"{"device": "x"}"#, "code"),
        (r#"{"code": 123456, "device": "x"}"#, "code"),
        (r#"{"code": "1", "device": ""}"#, "device"),
        (r#"{"code": "1", "device": "x", "extra": 1}"#, "extra"),
    ];
    for (body, field) in cases {
        let (status, answer) = f.call("POST", "/pair", None, Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        assert_eq!(answer["field"], field, "{body}: {answer}");
        assert!(
            answer["message"].as_str().unwrap().contains("POST /pair"),
            "{answer}"
        );
    }
    let (status, answer) = f.call("POST", "/pair", None, Some("{not json")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    let big = format!(r#"{{"code": "{}", "device": "x"}}"#, "1".repeat(70 * 1024));
    let (status, _) = f.call("POST", "/pair", None, Some(&big)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn patch_config_is_validated_dirty_path_and_loads_outside_edits_cfg2_cfg3() {
    let f = fixture();
    let token = f.pair("laptop").await;
    let before = std::fs::read_to_string(f.root.config_file()).unwrap();

    let (status, body) = f
        .call(
            "PATCH",
            "/api/config",
            Some(&token),
            Some(r#"{"log.level": "debug"}"#),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["changed"], json!(["log.level"]));
    let after = std::fs::read_to_string(f.root.config_file()).unwrap();
    // Only the dirty path changed: every line of the old file is still there.
    for line in before.lines() {
        assert!(after.contains(line), "lost line {line:?}");
    }
    assert!(after.contains("level = \"debug\""), "{after}");
    let (_, config) = f.call("GET", "/api/config", Some(&token), None).await;
    assert_eq!(config["config"]["log"]["level"], "debug");

    // Invalid values and unknown keys: 400 naming the key; nothing written.
    for (patch, key) in [
        (r#"{"gateway.port": "nope"}"#, "gateway.port"),
        (r#"{"log.levle": "x"}"#, "log.levle"),
    ] {
        let (status, body) = f
            .call("PATCH", "/api/config", Some(&token), Some(patch))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{patch}: {body}");
        assert!(body["message"].as_str().unwrap().contains(key), "{body}");
    }
    assert_eq!(
        std::fs::read_to_string(f.root.config_file()).unwrap(),
        after
    );

    // The token set is not patchable.
    for patch in [r#"{"gateway.paired_tokens": []}"#, r#"{"gateway": {}}"#] {
        let (status, body) = f
            .call("PATCH", "/api/config", Some(&token), Some(patch))
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{patch}: {body}");
    }

    // The file changed outside the gateway (a CLI write, a hand edit): it is loaded first,
    // then the patch applies on top, so both changes land (issue 15 §3).
    std::fs::write(f.root.config_file(), format!("{after}\n# edited by hand\n")).unwrap();
    let (status, body) = f
        .call(
            "PATCH",
            "/api/config",
            Some(&token),
            Some(r#"{"log.level": "warn"}"#),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let edited = std::fs::read_to_string(f.root.config_file()).unwrap();
    assert!(
        edited.contains("# edited by hand") && edited.contains("\"warn\""),
        "{edited}"
    );
    // A change that does not load is refused (409 naming the file), and nothing is written.
    let broken = format!("{edited}\n[[[broken\n");
    std::fs::write(f.root.config_file(), &broken).unwrap();
    let (status, body) = f
        .call(
            "PATCH",
            "/api/config",
            Some(&token),
            Some(r#"{"log.level": "info"}"#),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"], "config_changed_externally", "{body}");
    assert_eq!(
        std::fs::read_to_string(f.root.config_file()).unwrap(),
        broken
    );
}

#[tokio::test]
async fn status_reports_generation_and_agents_state17() {
    let f = fixture();
    let token = f.pair("laptop").await;
    let (status, body) = f.call("GET", "/api/status", Some(&token), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["daemon_generation"], 1);
    assert_eq!(
        body["config_generation"], 2,
        "pairing committed one generation"
    );
    assert_eq!(body["gateway"]["paired_devices"], 1);
    assert_eq!(body["pid"], std::process::id());
    let (status, health) = f.call("GET", "/api/health", Some(&token), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(health["components"]["devices"]["status"], "ok");
}

#[tokio::test]
async fn openapi_lists_every_route_with_its_access_rule() {
    let f = fixture();
    let token = f.pair("laptop").await;
    let (status, doc) = f.call("GET", "/api/openapi.json", Some(&token), None).await;
    assert_eq!(status, StatusCode::OK);
    let mut operations = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        operations += item.as_object().unwrap().len();
        assert!(
            ROUTES.iter().any(|r| r.path == path) || OPENAI_ROUTES.iter().any(|r| r.path == path),
            "{path} is not a route"
        );
    }
    assert_eq!(operations, ROUTES.len() + OPENAI_ROUTES.len());
    // The OpenAI-compatible routes (their own table: OpenAI's error shape) need a token too.
    for route in OPENAI_ROUTES {
        let op = &doc["paths"][route.path][route.method.to_ascii_lowercase()];
        assert_eq!(op["security"], json!([{"bearer": []}]), "{}", route.path);
    }
    for route in ROUTES {
        let op = &doc["paths"][route.path][route.method.to_ascii_lowercase()];
        assert!(op.is_object(), "{} {} missing", route.method, route.path);
        let public = op["security"] == json!([]);
        assert_eq!(
            public,
            route.access == Access::Public,
            "{} {}",
            route.method,
            route.path
        );
    }
}

#[tokio::test]
async fn a_patched_secret_is_stored_encrypted_and_never_shown_cfg6() {
    let f = fixture();
    let token = f.pair("laptop").await;
    let secret = "sk-test-0123456789abcdef";
    let patch = json!({"memory.embedder.api_key": secret}).to_string();
    let (status, body) = f
        .call("PATCH", "/api/config", Some(&token), Some(&patch))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(!body.to_string().contains(secret));
    let file = std::fs::read_to_string(f.root.config_file()).unwrap();
    assert!(!file.contains(secret), "stored encrypted: {file}");
    assert!(file.contains("api_key = \"enc2:"), "{file}");
    let (_, config) = f.call("GET", "/api/config", Some(&token), None).await;
    assert_eq!(
        config["config"]["memory"]["embedder"]["api_key"],
        "[redacted]"
    );
    assert!(!config.to_string().contains(secret));
}
