//! Warren's HTTP gateway (axum): `/health`, component health and status (STATE-17), pairing and
//! bearer tokens (STATE-15, STATE-21), the device registry (STATE-16), config read/patch through
//! the one config owner (CFG-1..3), reload (STATE-19) and an OpenAPI document.
//!
//! The gateway runs as a daemon subsystem ([`GatewayHook`]), started per config generation by
//! `warren_daemon::run`; the binary passes the hook in (this crate sits above the
//! runtime). Chat, approvals and sessions over HTTP come with the agent loop.

mod agents_api;
mod alias_path;
pub mod auth;
mod channels_api;
pub mod client;
mod config_api;
mod config_write;
mod cron_api;
pub mod dashboard;
pub mod devices;
pub mod error;
mod health;
pub mod json;
pub mod lifecycle_api;
mod listener;
mod metrics_api;
pub mod openai_api;
pub mod openapi;
mod ops_api;
mod pair_api;
pub mod pairing;
mod query;
pub mod route;
pub mod router;
pub mod routes;
pub mod server;
mod sop_api;
pub mod state;
mod system_api;
pub mod tokens;
pub mod turns;
pub mod turns_api;

pub use json::BODY_LIMIT;
pub use listener::ConnLimits;
pub use route::{Access, Route, TimeLimits};
pub use router::{router, router_with_limits};
pub use routes::ROUTES;
pub use server::{AdminEndpoint, GatewayHook, read_endpoint};
pub use state::{AppState, ProcessState};
