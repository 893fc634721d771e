//! The dashboard (issue 21; LIFE-1, STATE-13, STATE-17): a web UI served by `warren daemon` at
//! `/`, from assets compiled into the binary (`assets/`, no build step, works offline). It is a
//! small hand-written ES module over the public JSON API — the same routes any client uses — so
//! it needs no server-side session: the bearer token lives in the tab's `sessionStorage` and
//! goes in the `Authorization` header, never in a URL or a cookie (CSRF has nothing to ride on).
//!
//! Every response here carries a strict Content-Security-Policy (`default-src 'self'`, no
//! inline script or style). Assets are served under `/assets/<build>/` where `<build>` is a
//! hash of their bytes, so they can be cached forever; the HTML itself is `no-cache`.

mod archives;

use std::sync::LazyLock;

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};

use crate::error::ApiError;
use crate::state::AppState;

pub(crate) use archives::list as archives;

/// The policy of every dashboard response: scripts, styles, images and API calls only from
/// this origin; no inline code, no plugins, no framing, no form posts, no `<base>`.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; \
     connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

struct Asset {
    name: &'static str,
    mime: &'static str,
    body: &'static [u8],
}

/// The files under `/assets/<build>/`.
const ASSETS: &[Asset] = &[
    Asset {
        name: "app.js",
        mime: "text/javascript; charset=utf-8",
        body: include_bytes!("../../assets/app.js"),
    },
    Asset {
        name: "pages.js",
        mime: "text/javascript; charset=utf-8",
        body: include_bytes!("../../assets/pages.js"),
    },
    Asset {
        name: "api.js",
        mime: "text/javascript; charset=utf-8",
        body: include_bytes!("../../assets/api.js"),
    },
    Asset {
        name: "style.css",
        mime: "text/css; charset=utf-8",
        body: include_bytes!("../../assets/style.css"),
    },
    Asset {
        name: "icon.svg",
        mime: "image/svg+xml",
        body: include_bytes!("../../assets/icon.svg"),
    },
];

/// The build id: the first 12 hex digits of the SHA-256 over every asset.
static BUILD: LazyLock<String> = LazyLock::new(|| {
    let mut hash = Sha256::new();
    for asset in ASSETS {
        hash.update(asset.name.as_bytes());
        hash.update([0]);
        hash.update(asset.body);
    }
    let hex = warren_core::hex::encode(&hash.finalize());
    hex.chars().take(12).collect()
});

static INDEX: LazyLock<String> =
    LazyLock::new(|| include_str!("../../assets/index.html").replace("{{build}}", &BUILD));

/// The dashboard's routes: `/` (the page), `/assets/<build>/<file>` and `/favicon.ico`; all
/// public (the page holds no data; every API call it makes needs the token).
pub(crate) fn register(router: Router<AppState>) -> Router<AppState> {
    router
        .route("/", get(index))
        .route("/assets/{build}/{file}", get(asset))
        .route("/favicon.ico", get(favicon))
}

/// The build id the page references (tests and the bench use it).
pub fn build_id() -> &'static str {
    &BUILD
}

fn with_headers(mut response: Response, mime: &'static str, cache: &'static str) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, mime),
        (header::CACHE_CONTROL, cache),
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

async fn index() -> Response {
    with_headers(
        INDEX.as_str().into_response(),
        "text/html; charset=utf-8",
        "no-cache",
    )
}

async fn asset(Path((build, file)): Path<(String, String)>) -> Response {
    let found = ASSETS.iter().find(|a| a.name == file);
    match found {
        Some(a) if build == *BUILD => with_headers(
            a.body.into_response(),
            a.mime,
            "public, max-age=31536000, immutable",
        ),
        _ => ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!(
                "GET /assets/{build}/{file}: no such dashboard asset in build {}",
                *BUILD
            ),
        )
        .into_response(),
    }
}

async fn favicon() -> Response {
    let body = ASSETS
        .iter()
        .find(|a| a.name == "icon.svg")
        .map_or(&b""[..], |a| a.body);
    with_headers(
        body.into_response(),
        "image/svg+xml",
        "public, max-age=86400",
    )
}
