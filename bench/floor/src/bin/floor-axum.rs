//! A minimal tokio + axum server: `GET /health` on 127.0.0.1:PORT (first argument), the
//! runtime's defaults. The floor for the daemon's idle RSS, spawn → listening and /health.
use axum::{Router, routing::get};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let port = std::env::args().nth(1).unwrap_or_else(|| "0".into());
    let app = Router::new().route("/health", get(|| async { "{\"status\":\"ok\"}" }));
    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}")).await?;
    axum::serve(listener, app).await
}
