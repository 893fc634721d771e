//! `POST /admin/control`: the daemon's side of the typed control seam (issue 34 §3). The body
//! is one [`AdminOp`] — the enum the CLI built — and [`serve`] runs it with each area's one
//! executor on this daemon: the lifecycle on its config owner and running generation
//! ([`crate::lifecycle_api::serve`]), cron verbs on its scheduler ([`crate::cron_api::serve`]),
//! SOP verbs on its engine ([`crate::sop_api::serve`]), and reload, pairing and token revokes
//! here. The older `/admin/*` routes (`/admin/agents/lifecycle`, `/admin/reload`,
//! `/admin/paircode`, `/admin/pair`, `/admin/sops/...`) run the same executors.

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};

use crate::control::{AdminOp, SystemOp};
use crate::error::ApiError;
use crate::json::StrictJson;
use crate::state::AppState;

const ROUTE: &str = "POST /admin/control";

pub(crate) async fn admin(
    State(state): State<AppState>,
    headers: HeaderMap,
    StrictJson(op): StrictJson<AdminOp>,
) -> Result<Response, ApiError> {
    let admin_key = crate::pair_api::has_admin_key(&state, &headers);
    serve(&state, op, admin_key).await
}

/// Runs one admin verb on this daemon. `admin_key`: the caller presented the local admin key
/// itself (pairing a device needs it; a bearer token does not do).
async fn serve(state: &AppState, op: AdminOp, admin_key: bool) -> Result<Response, ApiError> {
    match op {
        AdminOp::Lifecycle(op) => Ok(crate::lifecycle_api::serve(state, ROUTE, &op)
            .await?
            .into_response()),
        AdminOp::Cron(op) => Ok(crate::cron_api::serve(state, ROUTE, &op)
            .await?
            .into_response()),
        AdminOp::Sop(op) => crate::sop_api::serve(state, ROUTE, &op).await,
        AdminOp::System(SystemOp::Reload {}) => {
            Ok(Json(crate::system_api::reload(state, ROUTE).await?).into_response())
        }
        AdminOp::System(SystemOp::PairCode {}) => {
            Ok(crate::pair_api::paircode(state, ROUTE)?.into_response())
        }
        AdminOp::System(SystemOp::Pair { device }) => Ok(crate::pair_api::operator_pair(
            state, ROUTE, &device, admin_key,
        )
        .await?
        .into_response()),
        AdminOp::System(SystemOp::TokenRevoke { id }) => {
            // The running generation drops the token at once: the daemon reloads.
            let revoked = crate::system_api::revoke(state, ROUTE, id).await?;
            Ok(crate::lifecycle_api::reloaded(state, ROUTE, &revoked)
                .await?
                .into_response())
        }
    }
}
