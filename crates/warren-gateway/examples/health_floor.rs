//! The floor for `bench/health-wrk`: a minimal axum server answering `GET /health` with the
//! same body as the gateway, on the runtime shape the daemon uses. Prints `listening <port>`
//! and serves until killed.
//!
//! Run: `cargo run --release -p warren-gateway --example health_floor`.

use axum::Router;
use axum::http::header;
use axum::routing::get;

fn main() -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let app = Router::new().route(
            "/health",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "application/json")],
                    r#"{"status":"ok"}"#,
                )
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        println!("listening {}", listener.local_addr()?.port());
        axum::serve(listener, app).await
    })
}
