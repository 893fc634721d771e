//! The dashboard's routes through the router without a socket (issue 21): the page and every
//! asset with its content type, cache rule and Content-Security-Policy; an asset of another
//! build is not served; and `GET /api/agents/restore`, the archive list behind the restore
//! control (the browser test in warren-cli drives the pages themselves).

#![allow(clippy::unwrap_used)]

use crate::common;

use std::net::SocketAddr;

use axum::Router;
use axum::extract::connect_info::MockConnectInfo;
use axum::http::StatusCode;
use serde_json::json;
use tower::ServiceExt;
use warren_admin::lifecycle::{Manifest, SCHEMA_VERSION};
use warren_config::schema::MemoryBackendKind;
use warren_gateway::dashboard::{CSP, build_id};
use warren_gateway::router;

fn app(f: &common::Scripted) -> Router {
    let state = common::state_for(&f.root, &f.store, &f.process, &f.services);
    router(state).layer(MockConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40000))))
}

/// (status, header map as (name, value) strings, body) of a GET without a token.
async fn get(app: Router, path: &str) -> (StatusCode, Vec<(String, String)>, Vec<u8>) {
    let response = app
        .oneshot(common::request("GET", path, None, None))
        .await
        .unwrap();
    let status = response.status();
    let headers = response
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap()
        .to_vec();
    (status, headers, body)
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_and_its_assets_carry_their_type_cache_rule_and_csp() {
    let f = common::scripted(r#"{"turns": []}"#, "test", "autonomy = \"full\"", "");
    let (status, headers, body) = get(app(&f), "/").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        header(&headers, "content-type"),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(header(&headers, "cache-control"), Some("no-cache"));
    assert_eq!(header(&headers, "content-security-policy"), Some(CSP));
    assert!(CSP.starts_with("default-src 'self'; script-src 'self'; style-src 'self';"));
    assert!(!CSP.contains("unsafe"), "{CSP}");
    assert_eq!(header(&headers, "x-frame-options"), Some("DENY"));
    assert_eq!(header(&headers, "set-cookie"), None, "no cookies");
    let html = String::from_utf8(body).unwrap();
    assert!(
        html.contains(&format!("/assets/{}/app.js", build_id())),
        "{html}"
    );

    let assets = [
        ("app.js", "text/javascript; charset=utf-8"),
        ("pages.js", "text/javascript; charset=utf-8"),
        ("api.js", "text/javascript; charset=utf-8"),
        ("style.css", "text/css; charset=utf-8"),
        ("icon.svg", "image/svg+xml"),
    ];
    let mut total = html.len();
    for (file, mime) in assets {
        let (status, headers, body) = get(app(&f), &format!("/assets/{}/{file}", build_id())).await;
        assert_eq!(status, StatusCode::OK, "{file}");
        assert_eq!(header(&headers, "content-type"), Some(mime), "{file}");
        assert_eq!(
            header(&headers, "cache-control"),
            Some("public, max-age=31536000, immutable"),
            "{file}"
        );
        assert_eq!(header(&headers, "x-content-type-options"), Some("nosniff"));
        total += body.len();
    }
    assert!(total < 150 * 1024, "the first load is {total} bytes");

    // Another build's asset (a cached page of an older binary) is not served as this one.
    let (status, _, body) = get(app(&f), "/assets/000000000000/app.js").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let error: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(error["error"], "not_found");
    let (status, _, _) = get(app(&f), &format!("/assets/{}/secret.toml", build_id())).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, _) = get(app(&f), &format!("/assets/{}/..%2Fconfig.toml", build_id())).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_archive_list_names_each_restorable_archive_newest_first() {
    let f = common::scripted(r#"{"turns": []}"#, "test", "autonomy = \"full\"", "");
    let (status, body) =
        common::call(app(&f), "GET", "/api/agents/restore", Some(&f.token), None).await;
    assert_eq!(
        (status, body),
        (StatusCode::OK, json!({"count": 0, "archives": []})),
        "no archive directory yet"
    );

    let dir = f.root.deleted_agents_dir();
    let archive = |name: &str, manifest: Option<&str>| {
        std::fs::create_dir_all(dir.join(name)).unwrap();
        if let Some(m) = manifest {
            std::fs::write(dir.join(name).join("manifest.json"), m).unwrap();
        }
    };
    // A manifest as the lifecycle's delete writes it.
    let manifest = |alias: &str, deleted_at: &str, counts: &[(&str, u64)]| {
        serde_json::to_string(&Manifest {
            schema_version: SCHEMA_VERSION,
            alias: alias.parse().unwrap(),
            deleted_at: deleted_at.into(),
            config_entry: String::new(),
            memory_backend: MemoryBackendKind::Sqlite,
            workspace_path: f.root.agent_workspace(&alias.parse().unwrap()),
            workspace_archived: true,
            scrubbed_references: Vec::new(),
            counts: counts.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            warnings: Vec::new(),
            notes: Vec::new(),
            complete: true,
            files: Default::default(),
        })
        .unwrap()
    };
    archive(
        "ops-20260101T000000.000000Z",
        Some(&manifest("ops", "2026-01-01T00:00:00Z", &[("sessions", 2)])),
    );
    archive(
        "bee-20260201T000000.000000Z",
        Some(&manifest("bee", "2026-02-01T00:00:00Z", &[])),
    );
    std::fs::write(
        dir.join("bee-20260201T000000.000000Z/restored.json"),
        r#"{"restored_as": "bee"}"#,
    )
    .unwrap();
    archive("half-20260301T000000.000000Z", None); // a delete still under way
    archive("bad-20260401T000000.000000Z", Some("{not json"));

    let (status, body) =
        common::call(app(&f), "GET", "/api/agents/restore", Some(&f.token), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let names: Vec<&str> = body["archives"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "bee-20260201T000000.000000Z",
            "ops-20260101T000000.000000Z",
            "bad-20260401T000000.000000Z"
        ]
    );
    assert_eq!(
        body["archives"][1],
        json!({"name": "ops-20260101T000000.000000Z", "alias": "ops",
               "deleted_at": "2026-01-01T00:00:00Z", "complete": true,
               "counts": {"sessions": 2}, "restored": false})
    );
    assert_eq!(body["archives"][0]["restored"], true);
    let error = body["archives"][2]["error"].as_str().unwrap();
    assert!(
        error.contains("bad-20260401T000000.000000Z/manifest.json"),
        "the error names the file: {error}"
    );
}
