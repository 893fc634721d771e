//! `/health` latency of the real gateway router against a minimal axum server answering the
//! same bytes, in the same run and process (the floor), at one keep-alive connection; plus an
//! authenticated `/api/status` (bearer hash + constant-time compare + status JSON).
//! Targets: `/health` p50 ≤ 1.3× the floor; `/api/status` p99 ≤ 300 µs.
//!
//! Run: `cargo bench -p warren-gateway --bench health`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::header;
use axum::routing::get;
use warren_config::{ConfigStore, InstallRoot};
use warren_daemon::Generation;
use warren_gateway::pairing::{hash_token, new_token};
use warren_gateway::{AppState, ProcessState, router, tokens};

type E = Box<dyn std::error::Error>;

const ROUNDS: usize = 10;
const PER_ROUND: usize = 2_000;

/// Sends `request` `n` times on one keep-alive connection; returns each round trip.
fn measure(conn: &mut BufReader<TcpStream>, request: &[u8], n: usize) -> Result<Vec<Duration>, E> {
    let mut times = Vec::with_capacity(n);
    let mut line = String::new();
    for _ in 0..n {
        let start = Instant::now();
        conn.get_mut().write_all(request)?;
        let mut length = 0usize;
        let mut status_ok = false;
        loop {
            line.clear();
            conn.read_line(&mut line)?;
            if line == "\r\n" {
                break;
            }
            if line.starts_with("HTTP/1.1 200") {
                status_ok = true;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse()?;
            }
        }
        let mut body = vec![0u8; length];
        conn.read_exact(&mut body)?;
        times.push(start.elapsed());
        if !status_ok {
            return Err(format!("non-200 answer: {}", String::from_utf8_lossy(&body)).into());
        }
    }
    Ok(times)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn connect(addr: SocketAddr) -> Result<BufReader<TcpStream>, E> {
    let stream = TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    Ok(BufReader::new(stream))
}

fn main() -> Result<(), E> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let dir = tempfile::tempdir()?;
    let root = InstallRoot::at(dir.path().join("warren"));
    root.ensure_layout()?;
    warren_config::init(&root)?;
    let store = ConfigStore::load(root.clone())?;
    let token = new_token()?;
    tokens::add_hash_blocking(&store, &hash_token(&token))?;
    let process = Arc::new(ProcessState::new(&root)?);
    let generation = Generation::detached(root.clone(), store.clone())?;
    let agents = warren_gateway::state::agent_reports(&store.snapshot(), &root);

    let (gateway, floor) = runtime.block_on(async {
        let gw = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let fl = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addrs = (gw.local_addr()?, fl.local_addr()?);
        let state = AppState::new(&generation, process, Some(addrs.0), agents);
        let app = router(state).into_make_service_with_connect_info::<SocketAddr>();
        tokio::spawn(async move { axum::serve(gw, app).await });
        let minimal = Router::new().route(
            "/health",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "application/json")],
                    r#"{"status":"ok"}"#,
                )
            }),
        );
        tokio::spawn(async move { axum::serve(fl, minimal).await });
        Ok::<_, std::io::Error>(addrs)
    })?;

    let health = b"GET /health HTTP/1.1\r\nHost: b\r\n\r\n";
    let status =
        format!("GET /api/status HTTP/1.1\r\nHost: b\r\nAuthorization: Bearer {token}\r\n\r\n");
    let (mut g, mut f, mut s) = (connect(gateway)?, connect(floor)?, connect(gateway)?);
    // Warm up, then interleave rounds so noise hits both sides alike.
    measure(&mut g, health, 500)?;
    measure(&mut f, health, 500)?;
    measure(&mut s, status.as_bytes(), 500)?;
    let (mut gw, mut fl, mut st) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        gw.extend(measure(&mut g, health, PER_ROUND)?);
        fl.extend(measure(&mut f, health, PER_ROUND)?);
        st.extend(measure(&mut s, status.as_bytes(), PER_ROUND / 4)?);
    }
    for v in [&mut gw, &mut fl, &mut st] {
        v.sort();
    }
    let (g50, g99) = (percentile(&gw, 0.5), percentile(&gw, 0.99));
    let (f50, f99) = (percentile(&fl, 0.5), percentile(&fl, 0.99));
    let (s50, s99) = (percentile(&st, 0.5), percentile(&st, 0.99));
    let ratio50 = g50.as_secs_f64() / f50.as_secs_f64();
    let ratio99 = g99.as_secs_f64() / f99.as_secs_f64();
    println!("/health gateway   p50 {g50:>9.1?}  p99 {g99:>9.1?}");
    println!("/health floor     p50 {f50:>9.1?}  p99 {f99:>9.1?}");
    println!("/health ratio     p50 {ratio50:.2}x  p99 {ratio99:.2}x (target p50 <= 1.3x)");
    println!("/api/status auth  p50 {s50:>9.1?}  p99 {s99:>9.1?} (target p99 <= 300us)");
    if ratio50 > 1.3 || s99 > Duration::from_micros(300) {
        eprintln!("missed a target");
        std::process::exit(1);
    }
    Ok(())
}
