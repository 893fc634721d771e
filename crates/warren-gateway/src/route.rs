//! What a route is: who may call it ([`Access`]), its row in a route table ([`Route`]) and how
//! long its request may take ([`TimeLimits`]). The table ([`crate::routes::ROUTES`]), the
//! router ([`crate::router`]) and the OpenAPI document ([`crate::openapi`]) share these types.

use axum::routing::MethodRouter;

use crate::state::AppState;

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Public,
    Token,
    Admin,
}

/// One route: method, path, access rule, handler and its documentation.
pub struct Route {
    pub method: &'static str,
    pub path: &'static str,
    pub access: Access,
    pub summary: &'static str,
    /// A JSON example body (documents the request; `None` = no body).
    pub request: Option<&'static str>,
    pub handler: fn() -> MethodRouter<AppState>,
}

/// Request time limits: how long a response head may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeLimits {
    pub request: std::time::Duration,
    /// A JSON chat answers when its turn ends.
    pub chat: std::time::Duration,
}

impl Default for TimeLimits {
    fn default() -> Self {
        Self {
            request: REQUEST_TIMEOUT,
            chat: CHAT_TIMEOUT,
        }
    }
}

/// How long a request may take to produce its response head (a chat turn: [`CHAT_TIMEOUT`]).
pub const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
/// A JSON chat answers when its turn ends; a streamed one starts at once.
pub const CHAT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);
