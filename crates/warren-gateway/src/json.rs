//! Strict request bodies and JSON errors (issue 15 §9).
//!
//! - [`StrictJson`] is the gateway's one JSON body extractor: the whole body must be exactly
//!   one JSON value (trailing bytes after it are a 400 naming line and column), unknown or
//!   missing fields are a 400 naming the field, and a body over the route's limit is a 413 —
//!   every refusal in the documented error shape of [`ApiError`]. [`parse`] is the same check
//!   for a body already read.
//! - [`json_errors`] (a layer over the whole router) turns any error response that is not
//!   JSON yet — axum's own rejections (path, query, body, 405) — into that shape too. The
//!   OpenAI-compatible `/v1` routes answer in OpenAI's shape and are left to their module.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, Request};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// Request bodies larger than this are refused with 413 (the router applies it to every
/// route of the table; the `/v1` routes carry their own).
pub const BODY_LIMIT: usize = 64 * 1024;

/// A JSON request body, parsed strictly (see the module docs). Use it instead of axum's
/// `Json` for every route that takes a body.
#[derive(Debug, Clone, Copy, Default)]
pub struct StrictJson<T>(pub T);

/// `METHOD /path`: how error messages name the route.
fn route_of(req: &Request) -> String {
    format!("{} {}", req.method(), req.uri().path())
}

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for StrictJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let route = route_of(&req);
        let body = Bytes::from_request(req, state)
            .await
            .map_err(|e| body_refused(&route, &e))?;
        parse(&route, &body).map(StrictJson)
    }
}

/// A body that could not be read: too large (413) or cut off (400).
fn body_refused(route: &str, e: &BytesRejection) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return too_large(route);
    }
    ApiError::new(
        e.status(),
        code_of(e.status()),
        format!("{route}: cannot read the request body: {}", e.body_text()),
    )
}

fn too_large(route: &str) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        format!(
            "{route}: the request body is larger than this route accepts ({} KiB on /pair, /api and /admin routes)",
            BODY_LIMIT / 1024
        ),
    )
}

/// Parses `body` as exactly one JSON value of type `T`; a failure is a 400 naming the field
/// at fault, or the line and column of malformed or trailing input. The offending value is
/// never echoed (it may be a code or a secret).
pub fn parse<T: DeserializeOwned>(route: &str, body: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut *de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.inner();
        let message = if inner.is_syntax() || inner.is_eof() {
            format!(
                "malformed JSON at line {} column {}",
                inner.line(),
                inner.column()
            )
        } else {
            let text = inner.to_string();
            if text.starts_with("missing field") || text.starts_with("unknown field") {
                text.split(" at line").next().unwrap_or(&text).to_string()
            } else {
                "wrong type or value".to_string()
            }
        };
        let field = if path == "." {
            // A missing field is reported at the parent; name it from the message.
            inner
                .to_string()
                .split('`')
                .nth(1)
                .map_or_else(|| "(body)".to_string(), str::to_string)
        } else {
            path
        };
        ApiError::bad_field(route, field, message)
    })?;
    // Exactly one value: whitespace may follow it, nothing else.
    de.end().map_err(|e| {
        ApiError::bad_field(
            route,
            "(body)",
            format!(
                "unexpected data after the JSON value at line {} column {}",
                e.line(),
                e.column()
            ),
        )
    })?;
    Ok(value)
}

/// The `error` code of a status that carries no code of its own.
fn code_of(status: StatusCode) -> &'static str {
    match status {
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::REQUEST_TIMEOUT => "request_timeout",
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::TOO_MANY_REQUESTS => "too_many_requests",
        StatusCode::SERVICE_UNAVAILABLE => "unavailable",
        s if s.is_server_error() => "internal_error",
        _ => "invalid_request",
    }
}

/// How much of a plain-text error body is kept as the message.
const MAX_TEXT: usize = 4096;

/// Middleware: an error response that is not JSON (an extractor's rejection, axum's 405, a
/// body over the limit) is rewritten into the documented error shape, keeping its status and
/// headers (`Allow`, `Retry-After`).
pub async fn json_errors(req: Request, next: Next) -> Response {
    let route = route_of(&req);
    if req.uri().path().starts_with("/v1/") {
        return next.run(req).await;
    }
    let response = next.run(req).await;
    let status = response.status();
    let is_json_or_stream = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("text/event-stream"));
    if !(status.is_client_error() || status.is_server_error()) || is_json_or_stream {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = match axum::body::to_bytes(body, MAX_TEXT).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().to_string(),
        Err(_) => String::new(),
    };
    let error = if status == StatusCode::PAYLOAD_TOO_LARGE {
        too_large(&route)
    } else if text.is_empty() {
        let reason = status.canonical_reason().unwrap_or("error").to_lowercase();
        ApiError::new(status, code_of(status), format!("{route}: {reason}"))
    } else {
        ApiError::new(status, code_of(status), format!("{route}: {text}"))
    };
    let (new_parts, new_body) = error.into_response().into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    for (name, value) in &new_parts.headers {
        parts.headers.insert(name.clone(), value.clone());
    }
    // The 5xx log layer reads what the error put in the extensions.
    parts.extensions.extend(new_parts.extensions);
    Response::from_parts(parts, new_body)
}
