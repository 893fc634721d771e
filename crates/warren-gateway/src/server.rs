//! The gateway as a daemon subsystem: [`GatewayHook`] serves `[gateway] bind`/`port`
//! (loopback by default) for every config generation, so a reload rebinds a changed address
//! in the same process (STATE-19). It also reconciles the device registry with the token set
//! (STATE-16) and publishes `data/gateway.json` (address + local admin key, 0600) for `warren
//! pair` and `warren tokens`.
//!
//! While `bind`/`port` stay the same, the listener and its connections are kept across
//! generations ([`crate::listener`]): a reload swaps the routes under them, so it neither
//! refuses nor drops a connection — a request that arrives between the old generation's stop
//! and the new one's start waits for the new routes, and the old generation's stop waits for
//! its in-flight requests (issue 15 §5). Slow and idle clients are cut off and the number of
//! connections is capped (`[gateway] header_read_timeout_secs`, `idle_timeout_secs`,
//! `max_connections`; issue 15 §4).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use warren_config::InstallRoot;
use warren_config::Snapshot;
use warren_config::atomic::{self, CrashPoints};
use warren_daemon::PrepareFuture;
use warren_daemon::{Generation, GenerationHook, HookError, StartFuture};
use warren_runtime::RunningSubsystem;

use crate::listener::{ConnLimits, Listening, Serving};
use crate::router::router;
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
/// on the first start and kept across reloads, and so is the listener while its address stays.
#[derive(Default)]
pub struct GatewayHook {
    process: OnceLock<Arc<ProcessState>>,
    listening: Mutex<Option<Arc<Listening>>>,
    /// The endpoint file this process published (removed when the hook goes).
    published: Mutex<Option<(InstallRoot, AdminEndpoint)>>,
    /// Numbers the generations installed into the listener.
    installed: AtomicU64,
    /// The started generation's routes, installed once every subsystem of it started
    /// ([`GenerationHook::ready`]; issue 36 §4).
    pending: Mutex<Option<(Arc<Listening>, Serving)>>,
}

impl GatewayHook {
    pub fn new() -> Self {
        Self::default()
    }

    fn process(&self, root: &InstallRoot) -> Result<Arc<ProcessState>, HookError> {
        if let Some(p) = self.process.get() {
            return Ok(Arc::clone(p));
        }
        let created = Arc::new(ProcessState::new(root).map_err(HookError::subsystem)?);
        Ok(Arc::clone(self.process.get_or_init(|| created)))
    }
}

impl Drop for GatewayHook {
    fn drop(&mut self) {
        let published = self
            .published
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some((root, endpoint)) = published {
            remove_endpoint(&root, &endpoint);
        }
    }
}

impl GenerationHook for GatewayHook {
    fn name(&self) -> &'static str {
        "gateway"
    }

    fn start<'a>(&'a self, generation: &'a Generation) -> StartFuture<'a> {
        Box::pin(async move { self.start_generation(generation).await })
    }

    /// Ready means ready (issue 36 §4): the generation's routes are installed only now, after
    /// the admin key was published and every subsystem (sessions, cron, SOP) started; until
    /// then the listener answers `/health` (`starting`) and `/ready` (503) itself and other
    /// requests wait.
    fn ready(&self, _generation: &Generation) {
        let pending = self
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some((listening, serving)) = pending {
            listening.install(serving);
        }
    }

    /// Binds the listener before the rest of the daemon's start-up (issue 26): `/health`
    /// answers from here on, other requests wait for the first generation's routes. A failure
    /// is reported by the start, which binds again.
    fn prepare<'a>(&'a self, snapshot: &'a Arc<Snapshot>) -> PrepareFuture<'a> {
        Box::pin(async move {
            let (bind, port) = (&snapshot.gateway.bind, snapshot.gateway.port);
            let limits = ConnLimits::of(&snapshot.gateway);
            if let Err(e) = self.listener(bind, port, limits).await {
                tracing::debug!("early bind of {bind}:{port} failed (the start retries): {e}");
            }
        })
    }
}

impl GatewayHook {
    /// The running listener when the address is unchanged; otherwise the old one stops (a
    /// changed port stops answering, its open connections finish their request and close)
    /// and a new one is bound.
    async fn listener(
        &self,
        bind: &str,
        port: u16,
        limits: ConnLimits,
    ) -> std::io::Result<Arc<Listening>> {
        {
            let mut current = self.listening.lock().unwrap_or_else(|p| p.into_inner());
            match current.as_ref() {
                Some(l) if l.bind == bind && l.port == port => return Ok(Arc::clone(l)),
                _ => *current = None,
            }
        }
        let socket = TcpListener::bind((bind, port)).await?;
        let listening = Arc::new(Listening::start(socket, bind, port, limits)?);
        *self.listening.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::clone(&listening));
        Ok(listening)
    }

    async fn start_generation(
        &self,
        generation: &Generation,
    ) -> Result<RunningSubsystem, HookError> {
        let snapshot = Arc::clone(&generation.snapshot);
        let (bind, port) = (snapshot.gateway.bind.clone(), snapshot.gateway.port);
        let limits = ConnLimits::of(&snapshot.gateway);
        let listening =
            self.listener(&bind, port, limits)
                .await
                .map_err(|cause| HookError::Listen {
                    addr: format!("{bind}:{port}"),
                    setting: "[gateway] bind/port",
                    cause,
                })?;
        let addr = listening.addr;
        if !addr.ip().is_loopback() {
            tracing::warn!(%addr, "the gateway listens beyond loopback; every /api route still needs a paired token");
        }
        crate::metrics_api::listen(&snapshot.metrics).await; // issue 25: the token-less scrape port
        // After the bind: the first start opens the device registry here.
        let process = self.process(&generation.root)?;

        // The routes are installed once the daemon is ready (`ready`); `/health` answers
        // meanwhile, and the endpoint file with the new admin key is written first.
        let state = AppState::starting(generation, Arc::clone(&process), Some(addr));
        let shutdown = state.shutdown().clone();
        let (drain, mut drained) = mpsc::channel::<()>(1);
        let id = self.installed.fetch_add(1, Ordering::Relaxed);
        let serving = Serving {
            id,
            router: router(state.clone()),
            limits,
            drain,
        };
        let vacate = listening.vacater(id);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = stopped.await;
            // New requests wait for the next generation; live streams end; this one's
            // in-flight requests drain (each holds a drain sender until its response ends).
            vacate.vacate();
            shutdown.cancel();
            let _ = drained.recv().await;
        });
        let endpoint = AdminEndpoint {
            pid: std::process::id(),
            addr,
            admin_key: process.admin_key.clone(),
        };

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
        .map_err(HookError::subsystem);
        let finished = reports.and_then(|agents| {
            state.set_agents(agents);
            publish_endpoint(&generation.root, &endpoint)
        });
        if let Err(e) = finished {
            // No half-started listener stays behind.
            listening.vacater(id).vacate();
            *self.listening.lock().unwrap_or_else(|p| p.into_inner()) = None;
            let _ = stop.send(());
            return Err(e);
        }
        *self.pending.lock().unwrap_or_else(|p| p.into_inner()) = Some((listening, serving));
        *self.published.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((generation.root.clone(), endpoint));
        tracing::info!(%addr, generation = snapshot.generation(), "gateway listening");
        Ok(RunningSubsystem::new("gateway", stop, task))
    }
}

fn publish_endpoint(root: &InstallRoot, endpoint: &AdminEndpoint) -> Result<(), HookError> {
    let bytes = serde_json::to_vec_pretty(endpoint).map_err(HookError::subsystem)?;
    // The write error names the file (`cannot save <path>: <step>: <cause>`).
    atomic::write_durable(&root.gateway_admin(), &bytes, 0o600, ADMIN_POINTS)
        .map(drop)
        .map_err(HookError::subsystem)
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
