//! The daemon: one per install root (LAYOUT-4, BEYOND-4), an outer loop that re-reads config and
//! rebuilds every subsystem in the same process on reload (STATE-19), clean exit on SIGTERM/SIGINT.
//!
//! The lock is an exclusive OS lock (`flock`) on `data/daemon.lock`, which also holds the owner's
//! PID. The kernel drops it when the process dies, so a crashed daemon never blocks the next one.
//! `data/daemon.json` publishes the running generation for `warren status`; only the lock decides
//! whether a daemon runs.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::future::Future;
use std::io::{self, Read, Seek};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{Notify, oneshot};
use warren_config::atomic::{self, CrashPoints};
use warren_config::{
    ConfigError, ConfigStore, InitOutcome, InstallRoot, LegacyMigration, PathError, Snapshot,
};

/// Why the daemon could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("another warren daemon (pid {}) owns {}", pid.map_or_else(|| "unknown".to_string(), |p| p.to_string()), root.display())]
    AlreadyRunning { pid: Option<u32>, root: PathBuf },
    #[error("cannot take the daemon lock {path}: {source}")]
    Lock { path: PathBuf, source: io::Error },
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

/// The held install-root lock. Dropping it (or the process dying) releases the root.
#[derive(Debug)]
pub struct DaemonLock {
    _file: File,
    path: PathBuf,
}

impl DaemonLock {
    /// Takes the exclusive lock on `data/daemon.lock` and records this process's PID in it.
    pub fn acquire(root: &InstallRoot) -> Result<Self, DaemonError> {
        let path = root.daemon_lock();
        let lock_err = |source| DaemonError::Lock {
            path: path.clone(),
            source,
        };
        fs::create_dir_all(root.data_dir()).map_err(lock_err)?;
        let mut file = atomic::open_lock_file(&path).map_err(lock_err)?;
        // A `warren status` probe holds a shared lock for microseconds; retry briefly past it.
        let mut attempts = 0;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) if attempts < 10 => {
                    attempts += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(TryLockError::WouldBlock) => {
                    return Err(DaemonError::AlreadyRunning {
                        pid: read_pid(&mut file),
                        root: root.root().to_path_buf(),
                    });
                }
                Err(TryLockError::Error(e)) => return Err(lock_err(e)),
            }
        }
        // No fsync: the PID only names the holder to other processes (they read the page
        // cache), and after a power loss the lock is gone with the process anyway. Written in
        // place, truncated only when the old text was longer: truncating to zero first costs
        // an ext4 journal transaction on the start path (issue 26).
        let pid = format!("{}\n", std::process::id());
        std::os::unix::fs::FileExt::write_all_at(&file, pid.as_bytes(), 0).map_err(lock_err)?;
        let len = u64::try_from(pid.len()).unwrap_or(u64::MAX);
        if file.metadata().map_err(lock_err)?.len() != len {
            file.set_len(len).map_err(lock_err)?;
        }
        Ok(Self { _file: file, path })
    }

    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

fn read_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.rewind().ok()?;
    file.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

/// What the running daemon publishes in `data/daemon.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonState {
    pub pid: u32,
    pub config_generation: u64,
    pub started_at_unix: u64,
    pub generation_since_unix: u64,
}

/// Whether a daemon owns the root, as seen from another process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum DaemonStatus {
    NotRunning,
    Running {
        pid: Option<u32>,
        state: Option<DaemonState>,
    },
}

/// Asks the lock (not the state file) whether a daemon runs on `root`.
pub fn probe(root: &InstallRoot) -> Result<DaemonStatus, DaemonError> {
    let path = root.daemon_lock();
    let mut file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(DaemonStatus::NotRunning),
        Err(source) => return Err(DaemonError::Lock { path, source }),
    };
    match file.try_lock_shared() {
        Ok(()) => Ok(DaemonStatus::NotRunning),
        Err(TryLockError::WouldBlock) => {
            let state = fs::read(root.daemon_state())
                .ok()
                .and_then(|b| serde_json::from_slice::<DaemonState>(&b).ok());
            Ok(DaemonStatus::Running {
                pid: read_pid(&mut file),
                state,
            })
        }
        Err(TryLockError::Error(source)) => Err(DaemonError::Lock { path, source }),
    }
}

/// Asks a running daemon loop to reload (the in-process side of `POST /admin/reload`).
/// [`ReloadTrigger::request`] also waits for the outcome: the new generation, or the validation
/// error that kept the running one.
#[derive(Debug, Clone, Default)]
pub struct ReloadTrigger(Arc<ReloadShared>);

#[derive(Debug, Default)]
struct ReloadShared {
    notify: Notify,
    waiters: std::sync::Mutex<Vec<oneshot::Sender<Result<u64, String>>>>,
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
    pub async fn request(&self) -> Result<u64, String> {
        let (tx, rx) = oneshot::channel();
        match self.0.waiters.lock() {
            Ok(mut w) => w.push(tx),
            Err(p) => p.into_inner().push(tx),
        }
        self.0.notify.notify_one();
        rx.await
            .unwrap_or_else(|_| Err("the daemon stopped before reloading".to_string()))
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

    fn answer(&self, outcome: &Result<u64, String>) {
        let refused = outcome.as_ref().err().cloned();
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
    /// The agents, sessions, queue, trace and cost tracker of this generation.
    pub host: Arc<crate::host::AgentHost>,
}

impl Generation {
    /// A generation outside the daemon loop (tests, benchmarks): the store's current snapshot
    /// with fresh process services.
    pub fn detached(root: InstallRoot, store: ConfigStore) -> Result<Self, DaemonError> {
        let snapshot = store.snapshot();
        let process = Arc::new(
            crate::host::ProcessServices::new(&root, snapshot.config())
                .map_err(DaemonError::Random)?,
        );
        let host = Arc::new(crate::host::AgentHost::new(
            &root,
            Arc::clone(&snapshot),
            process,
        ));
        Ok(Self {
            root,
            store,
            snapshot,
            reload: ReloadTrigger::default(),
            started_at: SystemTime::now(),
            host,
        })
    }
}

/// A subsystem started for one generation; stopped before the next one starts.
pub struct RunningSubsystem {
    name: &'static str,
    stop: Option<oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<()>,
}

impl RunningSubsystem {
    /// `task` must finish soon after `stop` fires (in-flight work drains, listeners close).
    pub fn new(
        name: &'static str,
        stop: oneshot::Sender<()>,
        task: tokio::task::JoinHandle<()>,
    ) -> Self {
        Self {
            name,
            stop: Some(stop),
            done: task,
        }
    }

    /// Signals the stop without waiting (a listener stops accepting; in-flight work goes on).
    pub fn signal_stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Signals the stop and waits up to `grace` for the task; then aborts it.
    pub async fn stop(mut self, grace: Duration) {
        self.signal_stop();
        let mut done = self.done;
        if tokio::time::timeout(grace, &mut done).await.is_err() {
            tracing::warn!(
                subsystem = self.name,
                "did not stop within {grace:?}; aborted"
            );
            done.abort();
        }
    }
}

/// The future a [`GenerationHook`] returns.
pub type StartFuture<'a> =
    Pin<Box<dyn Future<Output = Result<RunningSubsystem, String>> + Send + 'a>>;

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
    for report in crate::lifecycle::Lifecycle::new(store.clone())
        .converge_pending()
        .await
    {
        tracing::info!(op = %report.op, agent = %report.alias, converged = report.converged, warnings = report.warnings.len(), "lifecycle journal converged at start");
    }
    // STATE-11: runs of a previous daemon that died mid-run are `lost`, their locks cleared.
    crate::cron::reap(&root);
    // From now on this process's running rows and job locks carry a heartbeat, which bounds
    // how long a process that cannot judge us (another PID namespace) counts us alive; each
    // tick also reaps what the start-up reaper could not yet call gone.
    crate::cron::keep_beating(
        root.control_plane_db(),
        Some(root.cron_db()),
        true,
        warren_store::control_plane::HEARTBEAT,
    );
    let started_at = SystemTime::now();
    let started = unix_now();

    // Approvals, receipt key and cost ledger live for the process; the rest per generation.
    let process = Arc::new(
        crate::host::ProcessServices::new(&root, store.snapshot().config())
            .map_err(DaemonError::Random)?,
    );
    // Subsystems of the running generation; rebuilt only when a reload published a new one.
    let mut running: Vec<RunningSubsystem> = Vec::new();
    let mut host: Option<Arc<crate::host::AgentHost>> = None;
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
            let generation_host = Arc::new(crate::host::AgentHost::new(
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
            };
            // The listeners first (start-up latency): stores open after the gateway listens.
            for hook in &hooks {
                match hook.start(&generation).await {
                    Ok(subsystem) => running.push(subsystem),
                    Err(e) => tracing::error!(
                        subsystem = hook.name(),
                        generation = snapshot.generation(),
                        "cannot start: {e}"
                    ),
                }
            }
            publish_state(
                &root,
                &DaemonState {
                    pid: std::process::id(),
                    config_generation: snapshot.generation(),
                    started_at_unix: started,
                    generation_since_unix: unix_now(),
                },
            );
            // Issue 25: this generation's [metrics] and [telemetry] (span export, self-watch).
            running.push(crate::telemetry::start(&snapshot));
            // Issue 23: servers of deleted agents and changed server configs stop; eager ones start.
            crate::mcp::reconcile(&root, snapshot.config());
            crate::mcp::start_eager(&generation_host);
            // The session stores (legacy import included) open now, off the start path.
            generation_host.open_sessions().await;
            // STATE-9/19: the scheduler of this generation (declared jobs reconciled, missed
            // fire times caught up); the previous one stopped above, its runs finish.
            if snapshot.cron.enabled {
                match crate::cron::Scheduler::open(&root, Arc::clone(&generation_host)) {
                    Ok(scheduler) => {
                        if let Err(e) = scheduler.prepare().await {
                            tracing::error!("cron: {e}");
                        }
                        generation_host.set_cron(&scheduler);
                        running.push(scheduler.start());
                    }
                    Err(e) => tracing::error!("cron scheduler not started: {e}"),
                }
            }
            // STATE-10: the SOP engine of this generation: active runs of a dead owner (or of
            // the previous generation, parked) continue at their first incomplete step.
            match crate::sop::Engine::open(&root, Arc::clone(&generation_host)) {
                Ok(engine) => {
                    generation_host.set_sop(&engine);
                    let restored = engine.restore().await;
                    if !restored.is_empty() {
                        tracing::info!(runs = restored.len(), "SOP runs restored");
                    }
                    running.push(engine.start());
                }
                Err(e) => tracing::error!("SOP engine not started: {e}"),
            }
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
                let outcome = store.reload().await.map_err(|e| e.to_string());
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

    #[test]
    fn second_lock_on_the_same_root_names_the_holder() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let root = InstallRoot::at(dir.path());
        let first = DaemonLock::acquire(&root)?;
        match DaemonLock::acquire(&root) {
            Err(DaemonError::AlreadyRunning { pid, .. }) => {
                assert_eq!(pid, Some(std::process::id()))
            }
            other => panic!("expected AlreadyRunning, got {other:?}"),
        }
        assert!(matches!(probe(&root)?, DaemonStatus::Running { .. }));
        drop(first);
        assert_eq!(probe(&root)?, DaemonStatus::NotRunning);
        let _again = DaemonLock::acquire(&root)?;
        Ok(())
    }

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
        trigger.answer(&Err("gateway.port: invalid".to_string()));
        assert_eq!(
            first.await.ok(),
            Some(Err("gateway.port: invalid".to_string()))
        );
        assert_eq!(
            second.await.ok(),
            Some(Err("gateway.port: invalid".to_string()))
        );
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
