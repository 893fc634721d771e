//! The gateway as a daemon subsystem: [`GatewayHook`] starts one listener per config
//! generation on `[gateway] bind`/`port` (loopback by default) and stops it before the next, so
//! a reload rebinds a changed address in the same process (STATE-19). It also reconciles the
//! device registry with the token set (STATE-16) and publishes `data/gateway.json` (address +
//! local admin key, 0600) for `warren pair` and `warren tokens`.
//!
//! While `bind`/`port` stay the same, the listening socket itself is kept across generations
//! (a duplicate descriptor is held by the hook), so a reload never refuses a connection: one
//! that arrives between the old generation's stop and the new one's start waits in the
//! kernel's backlog and is served by the new generation.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use warren_config::InstallRoot;
use warren_config::atomic::{self, CrashPoints};
use warren_runtime::{Generation, GenerationHook, RunningSubsystem, StartFuture};

use crate::routes::router;
use crate::state::{AppState, ProcessState, agent_reports};
use crate::tokens::token_hashes;

/// What `data/gateway.json` holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminEndpoint {
    pub pid: u32,
    pub addr: SocketAddr,
    pub admin_key: String,
}

const ADMIN_POINTS: CrashPoints = CrashPoints {
    after_temp_write: "gateway-admin-after-temp-write",
    after_temp_fsync: "gateway-admin-after-temp-fsync",
    after_rename: "gateway-admin-after-rename",
    after_dir_sync: "gateway-admin-after-dir-sync",
    dir_sync_error: "gateway-admin-dir-sync-error",
};

/// The daemon subsystem. Process-wide state (pairing lockouts, registry, admin key) is created
/// on the first start and kept across reloads.
#[derive(Default)]
pub struct GatewayHook {
    process: OnceLock<Arc<ProcessState>>,
    kept: std::sync::Mutex<Option<KeptListener>>,
}

/// The listening socket of the running generation, for the next one on the same address.
#[derive(Debug)]
struct KeptListener {
    bind: String,
    port: u16,
    socket: std::net::TcpListener,
}

impl GatewayHook {
    pub fn new() -> Self {
        Self::default()
    }

    fn process(&self, root: &InstallRoot) -> Result<Arc<ProcessState>, String> {
        if let Some(p) = self.process.get() {
            return Ok(Arc::clone(p));
        }
        let created = Arc::new(ProcessState::new(root).map_err(|e| e.to_string())?);
        Ok(Arc::clone(self.process.get_or_init(|| created)))
    }
}

impl GenerationHook for GatewayHook {
    fn name(&self) -> &'static str {
        "gateway"
    }

    fn start<'a>(&'a self, generation: &'a Generation) -> StartFuture<'a> {
        Box::pin(async move { self.start_generation(generation).await })
    }
}

impl GatewayHook {
    /// The kept socket when the address is unchanged; otherwise the old one is closed (a
    /// changed port stops answering) and a new one is bound and kept.
    async fn listener(&self, bind: &str, port: u16) -> std::io::Result<TcpListener> {
        let reuse = {
            let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
            match kept.as_ref() {
                Some(k) if k.bind == bind && k.port == port => Some(k.socket.try_clone()?),
                _ => {
                    *kept = None;
                    None
                }
            }
        };
        let socket = match reuse {
            Some(socket) => socket,
            None => {
                let socket = TcpListener::bind((bind, port)).await?.into_std()?;
                let keep = socket.try_clone()?;
                *self.kept.lock().unwrap_or_else(|p| p.into_inner()) = Some(KeptListener {
                    bind: bind.to_string(),
                    port,
                    socket: keep,
                });
                socket
            }
        };
        socket.set_nonblocking(true)?;
        TcpListener::from_std(socket)
    }

    async fn start_generation(&self, generation: &Generation) -> Result<RunningSubsystem, String> {
        let snapshot = Arc::clone(&generation.snapshot);
        let (bind, port) = (snapshot.gateway.bind.clone(), snapshot.gateway.port);
        let listener = self
            .listener(&bind, port)
            .await
            .map_err(|e| format!("cannot listen on {bind}:{port} ([gateway] bind/port): {e}"))?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("cannot read the gateway address: {e}"))?;
        if !addr.ip().is_loopback() {
            tracing::warn!(%addr, "the gateway listens beyond loopback; every /api route still needs a paired token");
        }
        // After the bind: the first start opens the device registry here.
        let process = self.process(&generation.root)?;

        // Serve first (start-up latency): /health answers while the registry is reconciled,
        // the agents' sandboxes are probed and the endpoint file is written.
        let state = AppState::starting(generation, Arc::clone(&process), Some(addr));
        let shutdown = state.shutdown().clone();
        let app = router(state.clone()).into_make_service_with_connect_info::<SocketAddr>();
        let (stop, stopped) = oneshot::channel::<()>();
        let endpoint = AdminEndpoint {
            pid: std::process::id(),
            addr,
            admin_key: process.admin_key.clone(),
        };
        let (root, published) = (generation.root.clone(), endpoint.clone());
        let task = tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                    shutdown.cancel(); // live streams end; in-flight requests drain
                })
                .await;
            if let Err(e) = served {
                tracing::error!(%addr, "gateway stopped: {e}");
            }
            remove_endpoint(&root, &published);
        });

        let root = generation.root.clone();
        let (config, devices) = (Arc::clone(&snapshot), process.devices.clone());
        let reports = tokio::task::spawn_blocking(move || {
            if let Ok(devices) = &devices {
                match devices.reconcile(&token_hashes(&config)) {
                    Ok((0, 0)) => {}
                    Ok((added, removed)) => tracing::info!(
                        added,
                        removed,
                        "device registry reconciled with gateway.paired_tokens"
                    ),
                    Err(e) => tracing::warn!("{e}"),
                }
            }
            agent_reports(&config, &root)
        })
        .await
        .map_err(|e| e.to_string());
        let finished = reports.and_then(|agents| {
            state.set_agents(agents);
            publish_endpoint(&generation.root, &endpoint)
        });
        if let Err(e) = finished {
            let _ = stop.send(()); // no half-started listener stays behind
            *self.kept.lock().unwrap_or_else(|p| p.into_inner()) = None;
            return Err(e);
        }
        tracing::info!(%addr, generation = snapshot.generation(), "gateway listening");
        Ok(RunningSubsystem::new("gateway", stop, task))
    }
}

fn publish_endpoint(root: &InstallRoot, endpoint: &AdminEndpoint) -> Result<(), String> {
    let bytes = serde_json::to_vec_pretty(endpoint).map_err(|e| e.to_string())?;
    atomic::write_durable(&root.gateway_admin(), &bytes, 0o600, ADMIN_POINTS)
        .map(drop)
        .map_err(|e| format!("cannot publish {}: {e}", root.gateway_admin().display()))
}

/// Removes `data/gateway.json` if it is still ours.
fn remove_endpoint(root: &InstallRoot, endpoint: &AdminEndpoint) {
    let path = root.gateway_admin();
    let ours = std::fs::read(&path)
        .ok()
        .and_then(|b| serde_json::from_slice::<AdminEndpoint>(&b).ok())
        .is_some_and(|e| &e == endpoint);
    if ours {
        let _ = std::fs::remove_file(path);
    }
}

/// The running gateway's endpoint, if one is published.
pub fn read_endpoint(root: &InstallRoot) -> Option<AdminEndpoint> {
    let bytes = std::fs::read(root.gateway_admin()).ok()?;
    serde_json::from_slice(&bytes).ok()
}
