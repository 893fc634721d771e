//! The gateway's error responses: `{"error": code, "message": ..., "field"?: ...}`. Messages
//! name the route, field or config key at fault, never a token, code or secret value.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use warren_config::ConfigError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub field: Option<String>,
    pub retry_after_secs: Option<u64>,
    pub problems: Vec<serde_json::Value>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            field: None,
            retry_after_secs: None,
            problems: Vec::new(),
        }
    }

    pub fn bad_field(route: &str, field: impl Into<String>, message: impl Into<String>) -> Self {
        let field = field.into();
        let message = format!("{route}: field '{field}': {}", message.into());
        Self {
            field: Some(field),
            ..Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
        }
    }

    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid bearer token is required (Authorization: Bearer wrn_...); pair a device with `warren pair`",
        )
    }

    pub fn internal(route: &str, message: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            format!("{route}: {message}"),
        )
    }

    /// Maps a config write error: validation and edits are the caller's (400, naming the key),
    /// a stale base is a conflict (409), the rest is ours (500).
    pub fn from_config(route: &str, e: &ConfigError) -> Self {
        match e {
            ConfigError::Invalid { problems, .. } => {
                let mut err = Self::new(
                    StatusCode::BAD_REQUEST,
                    "validation_failed",
                    format!("{route}: {e}"),
                );
                err.field = problems.iter().find_map(|p| p.key.clone());
                err.problems = problems
                    .iter()
                    .map(
                        |p| serde_json::json!({"key": p.key, "message": warren_config::cut_long_values(&p.message), "hint": p.hint.as_deref().map(warren_config::cut_long_values)}),
                    )
                    .collect();
                err
            }
            ConfigError::Edit { key, .. } => Self {
                field: Some(key.clone()),
                ..Self::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_key",
                    format!("{route}: {e}"),
                )
            },
            ConfigError::KeyPath(_) => Self::new(
                StatusCode::BAD_REQUEST,
                "invalid_key",
                format!("{route}: {e}"),
            ),
            ConfigError::Stale { .. } => Self::new(
                StatusCode::CONFLICT,
                "config_changed_externally",
                format!("{route}: {e} (POST /admin/reload picks up the file)"),
            ),
            other => Self::internal(route, other),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = serde_json::json!({"error": self.code, "message": self.message});
        if let Some(field) = &self.field {
            body["field"] = field.clone().into();
        }
        if let Some(secs) = self.retry_after_secs {
            body["retry_after_secs"] = secs.into();
        }
        if !self.problems.is_empty() {
            body["problems"] = self.problems.clone().into();
        }
        let mut response = (self.status, Json(body)).into_response();
        if self.status.is_server_error() {
            response.extensions_mut().insert(Logged {
                code: self.code,
                message: self.message.clone(),
            });
        }
        if let Some(secs) = self.retry_after_secs
            && let Ok(v) = HeaderValue::from_str(&secs.to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// What a 5xx answer carries for [`log_server_errors`] (not sent to the client).
#[derive(Debug, Clone)]
struct Logged {
    code: &'static str,
    message: String,
}

/// Middleware: every 5xx the gateway returns is logged once — method, path, status, error code
/// and message (issue 15 §8). Messages never hold a token or secret (see the module docs).
pub async fn log_server_errors(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let response = next.run(request).await;
    let status = response.status();
    if status.is_server_error() {
        let (code, message) = response
            .extensions()
            .get::<Logged>()
            .map_or(("-", ""), |l| (l.code, l.message.as_str()));
        tracing::error!(
            status = status.as_u16(),
            code,
            "{method} {path} answered {}: {code}: {message}",
            status.as_u16()
        );
    }
    response
}

/// Runs a store call on the blocking pool.
pub(crate) async fn blocking<T: Send + 'static>(
    route: &'static str,
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(route, e))?
}
