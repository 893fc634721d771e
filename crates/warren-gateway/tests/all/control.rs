//! `POST /admin/control`, the daemon's side of the typed control seam (issue 34 §3), through
//! the router without a socket: the verb picks its area's executor, an unknown verb is a 400,
//! and pairing a device through it needs the local admin key itself (issue 35 §9), as on
//! `POST /admin/pair`.

// Setup helpers outside #[test] fns panic on a broken fixture, like the tests themselves.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::connect_info::MockConnectInfo;
use axum::http::StatusCode;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use warren_config::{ConfigStore, InstallRoot};
use warren_daemon::Generation;
use warren_gateway::auth::ADMIN_KEY_HEADER;
use warren_gateway::{AppState, ProcessState, router, tokens};

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
    fn app(&self) -> Router {
        router(self.state.clone()).layer(MockConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40000))))
    }

    /// `POST /admin/control` with `op`, as a bearer-token holder or with the admin key.
    async fn control(&self, op: &Value, token: Option<&str>) -> (StatusCode, Value) {
        let body = op.to_string();
        let mut request = common::request("POST", "/admin/control", token, Some(&body));
        if token.is_none() {
            request
                .headers_mut()
                .insert(ADMIN_KEY_HEADER, self.process.admin_key.parse().unwrap());
        }
        common::send(self.app(), request).await
    }

    async fn pair(&self, device: &str) -> String {
        let (code, _) = self.process.pairing.issue_code().unwrap();
        let body = json!({"code": code, "device": device}).to_string();
        let (status, answer) = common::call(self.app(), "POST", "/pair", None, Some(&body)).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        answer["token"].as_str().unwrap().to_string()
    }

    fn paired(&self) -> usize {
        tokens::token_hashes(&self.store.snapshot()).len()
    }
}

#[tokio::test]
async fn pairing_through_the_control_route_needs_the_admin_key_not_a_bearer_token_issue34() {
    let f = fixture();
    let token = f.pair("laptop").await;
    assert_eq!(f.paired(), 1);
    let evil = json!({"op": "pair", "device": "evil"});
    // A bearer token opens the admin routes, but it never pairs another device.
    let (status, body) = f.control(&evil, Some(&token)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["error"], "admin_key_required", "{body}");
    assert_eq!(f.paired(), 1, "no token was issued");
    // The same verb with the admin key pairs: the refusal above is the guard, not the route.
    let (status, body) = f.control(&evil, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body["token"].is_string(), "{body}");
    assert_eq!(f.paired(), 2);
}

#[tokio::test]
async fn each_verb_reaches_its_areas_executor_and_an_unknown_one_is_refused_issue34() {
    let f = fixture();
    // Lifecycle: the delete plan of the starter agent.
    let (status, body) = f
        .control(&json!({"op": "delete_plan", "alias": "main"}), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["alias"], "main", "{body}");
    // Cron: a verb on a job that is not there is a 404 naming it, and creates no store.
    let (status, body) = f
        .control(&json!({"op": "cron_pause", "name": "ghost"}), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("no cron job 'ghost'"),
        "{body}"
    );
    assert!(
        !f.root.cron_db().exists(),
        "a refused verb created the store"
    );
    // System: a pairing code (a reload is the CLI suites': this generation has no daemon loop).
    let (status, body) = f.control(&json!({"op": "pair_code"}), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body["code"].is_string(), "{body}");
    // Token revoke by an id that matches no device.
    let (status, body) = f
        .control(&json!({"op": "token_revoke", "id": "ffffffffffff"}), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    // An unknown verb, or a known one with a field it does not take, is a 400.
    for bad in [
        json!({"op": "launch"}),
        json!({"op": "reload", "now": true}),
    ] {
        let (status, body) = f.control(&bad, None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
}
