//! Requests through the router without a socket (`tower::ServiceExt::oneshot`), shared by the
//! gateway's test files.

#![allow(clippy::unwrap_used)]

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::Value;
use tower::ServiceExt;

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
    let response = app
        .oneshot(request(method, path, token, body))
        .await
        .unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}
