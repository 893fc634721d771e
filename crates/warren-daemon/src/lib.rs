//! The daemon (warren-daemon, layer 6): one per install root (LAYOUT-4, BEYOND-4), an outer loop
//! that re-reads config and rebuilds every subsystem in the same process on reload (STATE-19),
//! clean exit on SIGTERM/SIGINT.
//!
//! A [`Generation`] owns one generation: its host (the engine's door), the process's
//! [`Stores`](warren_runtime::stores::Stores) it borrows, and the jobs it started. Every
//! subsystem is a [`GenerationHook`] started in order: the hooks of the crates above (gateway,
//! ACP, logging) first, then the engine's own ([`hooks`]: telemetry, MCP, sessions, cron, SOP).
//! The engine holds no pointer back to any of them: the gateway reaches the running scheduler
//! and SOP engine through [`Generation::jobs`].
//!
//! The install-root lock itself is [`warren_runtime::lock`].

mod errors;
pub mod hooks;

pub use errors::{HookError, ReloadError};

use std::fs;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{Notify, oneshot};
use warren_config::atomic::{self, CrashPoints};
use warren_config::{
    ConfigError, ConfigStore, InitOutcome, InstallRoot, LegacyMigration, PathError, Snapshot,
};
pub use warren_runtime::lock::{DaemonLock, DaemonState, DaemonStatus, LockError, probe};
pub use warren_runtime::subsystem::RunningSubsystem;
use warren_runtime::{AgentHost, ProcessServices};

/// Why the daemon could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("cannot install signal handlers: {0}")]
    Signals(io::Error),
    #[error("cannot start the async runtime: {0}")]
    Runtime(io::Error),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Path(#[from] PathError),
    #[error("cannot create the receipt key: {0}")]
    Random(getrandom::Error),
}

/// Asks a running daemon loop to reload (the in-process side of `POST /admin/reload`).
/// [`ReloadTrigger::request`] also waits for the outcome: the new generation, or the validation
/// error that kept the running one.
#[derive(Debug, Clone, Default)]
pub struct ReloadTrigger(Arc<ReloadShared>);

#[derive(Debug, Default)]
struct ReloadShared {
    notify: Notify,
    waiters: std::sync::Mutex<Vec<oneshot::Sender<Result<u64, ReloadError>>>>,
    /// A daemon loop answers this trigger (false for a detached generation).
    attached: std::sync::atomic::AtomicBool,
    /// Why the last reload was refused (config.toml on disk does not validate); cleared by
    /// the next reload that succeeds.
    refused: std::sync::Mutex<Option<String>>,
}

impl ReloadTrigger {
    /// Fire and forget.
    pub fn reload(&self) {
        self.0.notify.notify_one();
    }

    /// Asks for a reload and waits for its outcome: `Ok(generation)` once the new config is
    /// published (subsystems are rebuilt right after), or `Err(message)` when the config on
    /// disk is invalid and the running generation stays.
    pub async fn request(&self) -> Result<u64, ReloadError> {
        let (tx, rx) = oneshot::channel();
        match self.0.waiters.lock() {
            Ok(mut w) => w.push(tx),
            Err(p) => p.into_inner().push(tx),
        }
        self.0.notify.notify_one();
        rx.await.unwrap_or(Err(ReloadError::Stopped))
    }

    /// Whether a daemon loop answers [`Self::request`] (not so for a detached generation).
    pub fn is_attached(&self) -> bool {
        self.0.attached.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Why the last reload was refused, while config.toml on disk stays invalid (the running
    /// generation keeps serving); `None` after a reload succeeded.
    pub fn refused(&self) -> Option<String> {
        match self.0.refused.lock() {
            Ok(r) => r.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    fn answer(&self, outcome: &Result<u64, ReloadError>) {
        let refused = outcome.as_ref().err().map(ToString::to_string);
        match self.0.refused.lock() {
            Ok(mut r) => *r = refused,
            Err(p) => *p.into_inner() = refused,
        }
        let waiters = match self.0.waiters.lock() {
            Ok(mut w) => std::mem::take(&mut *w),
            Err(p) => std::mem::take(&mut *p.into_inner()),
        };
        for w in waiters {
            let _ = w.send(outcome.clone());
        }
    }
}

/// What a generation's subsystems are built from (STATE-19: rebuilt on every reload).
#[derive(Debug, Clone)]
pub struct Generation {
    pub root: InstallRoot,
    /// The one config owner (CFG-1..3); writers go through `store.write()`.
    pub store: ConfigStore,
    /// The config of this generation.
    pub snapshot: Arc<Snapshot>,
    /// Asks the daemon loop to reload (`POST /admin/reload`).
    pub reload: ReloadTrigger,
    /// Process start (survives reloads).
    pub started_at: SystemTime,
    /// The agents, sessions, queue, trace and cost tracker of this generation (the engine's
    /// door; it borrows the process's stores).
    pub host: Arc<AgentHost>,
    /// The cron scheduler and SOP engine of this generation, once their hooks started them.
    pub jobs: Arc<hooks::Jobs>,
}

impl Generation {
    /// A generation outside the daemon loop (tests, benchmarks): the store's current snapshot
    /// with fresh process services.
    pub fn detached(root: InstallRoot, store: ConfigStore) -> Result<Self, DaemonError> {
        let snapshot = store.snapshot();
        let process =
            Arc::new(ProcessServices::new(&root, snapshot.config()).map_err(DaemonError::Random)?);
        let host = Arc::new(AgentHost::new(&root, Arc::clone(&snapshot), process));
        Ok(Self {
            root,
            store,
            snapshot,
            reload: ReloadTrigger::default(),
            started_at: SystemTime::now(),
            host,
            jobs: Arc::default(),
        })
    }
}

/// The future a [`GenerationHook`] returns.
pub type StartFuture<'a> =
    Pin<Box<dyn Future<Output = Result<RunningSubsystem, HookError>> + Send + 'a>>;

/// The future [`GenerationHook::prepare`] returns.
pub type PrepareFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// A subsystem that crates above the runtime (the gateway) plug into the daemon loop: started
/// for every generation, stopped before the next. A start failure is logged and the daemon
/// keeps running without that subsystem until the next reload.
pub trait GenerationHook: Send + Sync {
    fn name(&self) -> &'static str;
    fn start<'a>(&'a self, generation: &'a Generation) -> StartFuture<'a>;

    /// Once per process, as soon as the first config is loaded and checked, before the
    /// start-up work a liveness probe need not wait for (lifecycle journals, reaping lost runs,
    /// opening stores): the gateway binds its listener here and answers `/health` while the
    /// first generation starts (issue 26). Failures are the hook's to log; `start` runs anyway.
    fn prepare<'a>(&'a self, _snapshot: &'a Arc<Snapshot>) -> PrepareFuture<'a> {
        Box::pin(async {})
    }

    /// After every subsystem of `generation` started (the daemon is ready).
    fn ready(&self, _generation: &Generation) {}
}

enum Exit {
    Reload,
    Shutdown(&'static str),
}

/// Builds a tokio runtime and runs the daemon until SIGTERM/SIGINT.
pub fn run_blocking(root: InstallRoot) -> Result<(), DaemonError> {
    run_blocking_with(root, Vec::new())
}

/// [`run_blocking`] with subsystems from the crates above (the binary passes the gateway).
pub fn run_blocking_with(
    root: InstallRoot,
    hooks: Vec<Arc<dyn GenerationHook>>,
) -> Result<(), DaemonError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("warren-daemon")
        .build()
        .map_err(DaemonError::Runtime)?;
    runtime.block_on(run(root, ReloadTrigger::default(), hooks))
}

/// The daemon: lock, prepare the root, load config, then the outer reload loop.
pub async fn run(
    root: InstallRoot,
    reload: ReloadTrigger,
    hooks: Vec<Arc<dyn GenerationHook>>,
) -> Result<(), DaemonError> {
    let lock = DaemonLock::acquire(&root)?;
    // Handlers first: once the lock is held, `warren status` says "running" and a SIGHUP may
    // come; before its handler exists the default action would end the daemon (a start-up
    // that converges a lifecycle journal or reaps runs takes a while).
    let mut hup = signal(SignalKind::hangup()).map_err(DaemonError::Signals)?;
    let mut term = signal(SignalKind::terminate()).map_err(DaemonError::Signals)?;
    let mut int = signal(SignalKind::interrupt()).map_err(DaemonError::Signals)?;
    reload
        .0
        .attached
        .store(true, std::sync::atomic::Ordering::Release);
    root.ensure_layout()?;
    if warren_config::init(&root)? == InitOutcome::Created {
        tracing::info!(path = %root.config_file().display(), "no config found: wrote the starter config");
    }
    // MEM-9: an agent's memory backend is locked once it has written; every generation the
    // daemon publishes (start and reload) is checked against the stores themselves.
    let store = ConfigStore::load(root.clone())?
        .with_check(std::sync::Arc::new(warren_memory::BackendLock));
    store.check_current()?;
    // Liveness first (issue 26): the listener binds and answers `/health` now; the rest of the
    // start-up below runs while it does, and other requests wait for the first generation.
    let first = store.snapshot();
    for hook in &hooks {
        hook.prepare(&first).await;
    }
    drop(first);
    // Tests stall the start-up here (`FAILPOINTS=daemon-start-after-bind=sleep(MS)`) to see
    // what the listener answers meanwhile.
    warren_config::failpoint::injected_error("daemon-start-after-bind");
    match root.migrate_legacy_workspace(store.snapshot().default_agent().as_ref())? {
        LegacyMigration::Moved { from, to } => {
            tracing::info!(from = %from.display(), to = %to.display(), "migrated the legacy workspace into the default agent's workspace");
        }
        LegacyMigration::Skipped { reason } => {
            tracing::warn!("legacy workspace not migrated: {reason}")
        }
        LegacyMigration::NothingToDo => {}
    }
    // BEYOND-3: an agent rename/delete/restore interrupted by a crash converges from its
    // journal before any subsystem starts.
    // Approvals, receipt key and the process's stores live for the process; the rest per
    // generation. The lifecycle journal converges on those very stores.
    let process = Arc::new(
        ProcessServices::new(&root, store.snapshot().config()).map_err(DaemonError::Random)?,
    );
    for report in
        warren_admin::lifecycle::Lifecycle::with_stores(store.clone(), Arc::clone(&process.stores))
            .converge_pending()
            .await
    {
        tracing::info!(op = %report.op, agent = %report.alias, converged = report.converged, warnings = report.warnings.len(), "lifecycle journal converged at start");
    }
    // STATE-11: runs of a previous daemon that died mid-run are `lost`, their locks cleared.
    warren_runtime::heartbeat::reap(&root);
    // From now on this process's running rows and job locks carry a heartbeat, which bounds
    // how long a process that cannot judge us (another PID namespace) counts us alive; each
    // tick also reaps what the start-up reaper could not yet call gone.
    warren_runtime::heartbeat::keep_beating(
        root.control_plane_db(),
        Some(root.cron_db()),
        true,
        warren_store::control_plane::HEARTBEAT,
    );
    let started_at = SystemTime::now();
    let started = unix_now();

    let engine_hooks = hooks::engine();
    // Subsystems of the running generation; rebuilt only when a reload published a new one.
    let mut running: Vec<RunningSubsystem> = Vec::new();
    let mut host: Option<Arc<AgentHost>> = None;
    let mut rebuild = true;
    loop {
        let snapshot = store.snapshot();
        let grace = Duration::from_secs(snapshot.runtime.shutdown_grace_secs);
        if rebuild {
            for subsystem in running.drain(..) {
                subsystem.stop(grace).await;
            }
            // In-flight turns had the grace to finish; the rest are cancelled cleanly.
            if let Some(old) = host.take() {
                old.cancel_turns();
            }
            let generation_host = Arc::new(AgentHost::new(
                &root,
                Arc::clone(&snapshot),
                Arc::clone(&process),
            ));
            host = Some(Arc::clone(&generation_host));
            let generation = Generation {
                root: root.clone(),
                store: store.clone(),
                snapshot: Arc::clone(&snapshot),
                reload: reload.clone(),
                started_at,
                host: Arc::clone(&generation_host),
                jobs: Arc::default(),
            };
            // The listeners first (start-up latency): stores open after the gateway listens.
            start_hooks(&hooks, &generation, &mut running).await;
            publish_state(
                &root,
                &DaemonState {
                    pid: std::process::id(),
                    config_generation: snapshot.generation(),
                    started_at_unix: started,
                    generation_since_unix: unix_now(),
                },
            );
            // The engine's own subsystems, in order (telemetry, MCP, sessions, cron, SOP):
            // after the listeners, so the stores open off the start path.
            start_hooks(&engine_hooks, &generation, &mut running).await;
            for hook in &hooks {
                hook.ready(&generation);
            }
            // Idle session slots of the queue are dropped while the generation lives.
            let weak = Arc::downgrade(&generation_host);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(60));
                tick.tick().await;
                loop {
                    tick.tick().await;
                    let Some(host) = weak.upgrade() else { break };
                    host.queue().evict_idle(Duration::from_secs(600));
                }
            });
        }
        tracing::info!(
            pid = std::process::id(),
            root = %root.root().display(),
            generation = snapshot.generation(),
            agents = snapshot.agents.len(),
            lock = %lock.path().display(),
            "warren daemon ready"
        );
        let exit = tokio::select! {
            _ = hup.recv() => Exit::Reload,
            () = reload.0.notify.notified() => Exit::Reload,
            _ = term.recv() => Exit::Shutdown("SIGTERM"),
            _ = int.recv() => Exit::Shutdown("SIGINT"),
        };
        match exit {
            Exit::Reload => {
                let outcome = store.reload().await.map_err(ReloadError::from);
                match &outcome {
                    Ok(generation) => tracing::info!(generation, "config reloaded"),
                    Err(e) => tracing::error!(
                        generation = snapshot.generation(),
                        "reload refused, keeping the running generation: {e}"
                    ),
                }
                rebuild = outcome.is_ok();
                if rebuild {
                    // The old listeners stop accepting BEFORE the caller hears of the reload,
                    // so a request sent after the answer reaches the new generation (it waits
                    // in the kept socket's backlog); in-flight requests, the caller's
                    // included, still finish.
                    for subsystem in &mut running {
                        subsystem.signal_stop();
                    }
                }
                reload.answer(&outcome);
            }
            Exit::Shutdown(why) => {
                tracing::info!("{why} received: shutting down");
                let grace = Duration::from_secs(store.snapshot().runtime.shutdown_grace_secs);
                for subsystem in running.drain(..) {
                    subsystem.stop(grace).await;
                }
                if let Some(old) = host.take() {
                    old.cancel_turns();
                }
                break;
            }
        }
    }
    let _ = fs::remove_file(root.daemon_state());
    drop(lock);
    tracing::info!("warren daemon stopped");
    Ok(())
}

/// Starts `hooks` for `generation` in order; a hook that cannot start is logged and the daemon
/// runs on without it until the next reload.
async fn start_hooks(
    hooks: &[Arc<dyn GenerationHook>],
    generation: &Generation,
    running: &mut Vec<RunningSubsystem>,
) {
    for hook in hooks {
        match hook.start(generation).await {
            Ok(subsystem) => running.push(subsystem),
            Err(e) => tracing::error!(
                subsystem = hook.name(),
                generation = generation.snapshot.generation(),
                "cannot start: {e}"
            ),
        }
    }
}

const STATE_POINTS: CrashPoints = CrashPoints {
    after_temp_write: "daemon-state-after-temp-write",
    after_temp_fsync: "daemon-state-after-temp-fsync",
    after_rename: "daemon-state-after-rename",
    after_dir_sync: "daemon-state-after-dir-sync",
    dir_sync_error: "daemon-state-dir-sync-error",
};

fn publish_state(root: &InstallRoot, state: &DaemonState) {
    let result = serde_json::to_vec_pretty(state)
        .map_err(io::Error::other)
        .and_then(|bytes| {
            atomic::write_durable(&root.daemon_state(), &bytes, 0o600, STATE_POINTS)
                .map_err(io::Error::other)
        });
    if let Err(e) = result {
        tracing::warn!(
            "cannot publish daemon state to {}: {e}",
            root.daemon_state().display()
        );
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_reload_request_gets_the_outcome_state19() {
        let trigger = ReloadTrigger::default();
        let (a, b) = (trigger.clone(), trigger.clone());
        let first = tokio::spawn(async move { a.request().await });
        let second = tokio::spawn(async move { b.request().await });
        // The daemon loop side: wait for the signal, then answer everyone waiting.
        trigger.0.notify.notified().await;
        tokio::task::yield_now().await;
        while trigger.0.waiters.lock().map(|w| w.len()).unwrap_or(0) < 2 {
            tokio::task::yield_now().await;
        }
        trigger.answer(&Err(ReloadError::from(ConfigError::Edit {
            key: "gateway.port".to_string(),
            message: "invalid".to_string(),
        })));
        let told =
            |r: Result<Result<u64, ReloadError>, _>| r.ok().map(|r| r.map_err(|e| e.to_string()));
        assert_eq!(
            told(first.await),
            Some(Err("gateway.port: invalid".to_string()))
        );
        assert_eq!(
            told(second.await),
            Some(Err("gateway.port: invalid".to_string()))
        );
        assert_eq!(trigger.refused().as_deref(), Some("gateway.port: invalid"));
    }

    #[tokio::test]
    async fn a_subsystem_that_ignores_stop_is_aborted_after_the_grace_state19() {
        let (stop, _ignored) = oneshot::channel::<()>();
        let task = tokio::spawn(std::future::pending::<()>());
        let abort = task.abort_handle();
        let started = std::time::Instant::now();
        RunningSubsystem::new("stuck", stop, task)
            .stop(Duration::from_millis(50))
            .await;
        assert!(started.elapsed() < Duration::from_secs(5));
        for _ in 0..1000 {
            if abort.is_finished() {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert!(abort.is_finished());
    }
}
