//! The router built from the route tables: each route of [`ROUTES`] behind its access check
//! ([`crate::auth`]) and time limit, the OpenAI-compatible routes and the dashboard, then the
//! body limit, JSON errors and the 5xx log over all of them.

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};

use crate::auth::{require_admin, require_token};
use crate::error::ApiError;
use crate::json::BODY_LIMIT;
use crate::route::{Access, TimeLimits};
use crate::routes::ROUTES;
use crate::state::AppState;

/// The router over [`ROUTES`] (and the OpenAI-compatible routes and the dashboard).
pub fn router(state: AppState) -> Router {
    router_with_limits(state, TimeLimits::default())
}

/// [`router`] with its own time limits (tests).
pub fn router_with_limits(state: AppState, limits: TimeLimits) -> Router {
    let mut router = Router::new();
    for route in ROUTES {
        let handler = (route.handler)();
        let handler =
            match route.access {
                Access::Public => handler,
                Access::Token => handler
                    .route_layer(middleware::from_fn_with_state(state.clone(), require_token)),
                Access::Admin => handler
                    .route_layer(middleware::from_fn_with_state(state.clone(), require_admin)),
            };
        // The limit is the route's, chosen here once (outermost: it covers the access check).
        let limit = if route.path.ends_with("/chat") {
            limits.chat
        } else {
            limits.request
        };
        let handler = handler.route_layer(middleware::from_fn_with_state(limit, time_limit));
        router = router.route(route.path, handler);
    }
    let router = crate::openai_api::register(router, &state, limits);
    let router = crate::dashboard::register(router);
    router
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn(crate::json::json_errors))
        .layer(middleware::from_fn(crate::error::log_server_errors))
        .with_state(state)
}

/// Request timeouts: 408 when the response head is not ready within the route's `limit`.
async fn time_limit(
    State(limit): State<std::time::Duration>,
    req: Request,
    next: Next,
) -> Response {
    let (method, uri) = (req.method().clone(), req.uri().clone());
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(response) => response,
        Err(_) => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            format!("{method} {}: no response within {limit:?}", uri.path()),
        )
        .into_response(),
    }
}

async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such route (see GET /api/openapi.json)",
    )
}
