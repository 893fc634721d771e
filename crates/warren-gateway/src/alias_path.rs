//! The `{alias}` segment of a route, parsed once at the edge (issue 14 §3): a handler taking
//! [`AliasPath`] receives a valid [`AgentAlias`], and a segment that is not one answers 400
//! `{"error": "invalid_request", "field": "alias", "message": ...}` before the handler runs
//! (before the body or the query is read, before any store is opened).

use axum::extract::{FromRequestParts, RawPathParams};
use axum::http::request::Parts;
use warren_core::AgentAlias;

use crate::error::ApiError;

/// The validated `{alias}` path parameter.
#[derive(Debug, Clone)]
pub(crate) struct AliasPath(pub AgentAlias);

impl<S: Send + Sync> FromRequestParts<S> for AliasPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let route = format!("{} {}", parts.method, parts.uri.path());
        let params = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|e| {
                // A segment that is not UTF-8 (`%FF`) is the client's error; a route without
                // parameters is ours.
                if e.status().is_client_error() {
                    ApiError::bad_field(&route, "path", e.body_text())
                } else {
                    ApiError::internal(&route, e.body_text())
                }
            })?;
        let raw = params
            .iter()
            .find_map(|(name, value)| (name == "alias").then_some(value))
            .ok_or_else(|| ApiError::internal(&route, "the route has no {alias} segment"))?;
        AgentAlias::new(raw)
            .map(Self)
            .map_err(|e| ApiError::bad_field(&route, "alias", e.to_string()))
    }
}
