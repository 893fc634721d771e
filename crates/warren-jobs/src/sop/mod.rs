//! The SOP engine (STATE-10): declarative multi-step procedures in
//! `<install>/shared/sops/<name>.toml` ([`defs`]), run durably in `data/sop/runs.db`
//! ([`warren_store::sop`]).
//!
//! Every start — `warren sop run`, `POST /api/sops/{name}/run`, the webhook route, a cron
//! expression, an MQTT message ([`triggers`]) — goes through [`Engine::start_run`]: the store
//! inserts the run claimed by this process if the per-SOP and global caps allow, the run is
//! registered in the control plane (`warren runs list`), and [`Engine::execute`] walks its
//! steps. A turn step goes through THE turn door ([`AgentHost::submit`], channel `cron`,
//! session `sop-<name>-<run>`); a tool step calls the agent's tool under its policy; an
//! approval gate waits for the operator's decision in the store (CLI, API), a timeout denies.
//!
//! Each step's output and receipt are recorded BEFORE the run moves past the step
//! ([`FAILPOINT_STEP_RECORDED`] lies between), so at the next start [`Engine::restore`] claims
//! the runs whose owner is gone, continues each at its first incomplete step and never repeats
//! a step whose receipt exists.
//!
//! When `data/sop/runs.db` cannot be opened (or `[sop] durable_runs = false`) the engine runs
//! on the same schema in memory: it logs a warning at start, `/api/health` shows it, and every
//! run it starts says so (its `started` event, the log, the CLI and API answers).

pub use warren_store::sop_defs as defs;
pub mod control;
mod exec;
pub mod triggers;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, oneshot};
use warren_config::InstallRoot;
use warren_config::schema::SopConfig;
use warren_store::control_plane::{ControlPlane, Owner};
use warren_store::sop::{NewRun, SopRun, SopStore, SopStoreError};

use warren_runtime::RunningSubsystem;
use warren_runtime::cancel::CancelToken;
use warren_runtime::host::AgentHost;

/// Crash point: a step's side effect is done and its receipt recorded; the run has not moved
/// past it yet.
pub const FAILPOINT_STEP_RECORDED: &str = "sop-step-recorded";

/// Why a run could not start (or an operator action failed).
#[derive(Debug, thiserror::Error)]
pub enum SopError {
    #[error(transparent)]
    Definition(#[from] warren_store::sop_defs::SopDefError),
    #[error("SOP '{name}': the definition does not encode as JSON: {cause}")]
    Encode {
        name: String,
        cause: serde_json::Error,
    },
    #[error(transparent)]
    Store(#[from] SopStoreError),
    #[error("the SOP store task failed: {0}")]
    Task(String),
}

/// The engine of one daemon generation (or of one CLI process running `warren sop run`).
pub struct Engine {
    root: InstallRoot,
    host: Arc<AgentHost>,
    store: Arc<SopStore>,
    control: Option<Arc<ControlPlane>>,
    owner: Owner,
    settings: SopConfig,
    /// Why runs are kept in memory only (`None`: durable).
    fallback: Option<String>,
    running: Mutex<HashMap<String, CancelToken>>,
    /// Set when the generation stops: runs park at their next step boundary (they stay active
    /// and the next generation's engine continues them).
    parking: AtomicBool,
    changed: Notify,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("store", &self.store.path())
            .field("fallback", &self.fallback)
            .finish_non_exhaustive()
    }
}

/// Runs `f` on the blocking pool (SQLite never blocks an async worker).
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, SopError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| SopError::Task(e.to_string()))
}

impl Engine {
    /// The engine of `host`'s generation on the store of `root`.
    pub fn open(root: &InstallRoot, host: Arc<AgentHost>) -> Result<Arc<Self>, SopError> {
        let settings = host.snapshot().config().sop_settings();
        let (store, fallback) = host.stores().sop_runs_for(&settings)?;
        let control = match host.stores().control_plane() {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::error!("SOP runs are not registered in the control plane: {e}");
                None
            }
        };
        let engine = Arc::new(Self {
            root: root.clone(),
            host,
            store,
            control,
            owner: Owner::current(),
            settings,
            fallback,
            running: Mutex::new(HashMap::new()),
            parking: AtomicBool::new(false),
            changed: Notify::new(),
        });
        // The leases of this engine's runs (the daemon's and a CLI process's alike): a live
        // owner's runs are never taken over, however long an approval gate waits.
        let weak = Arc::downgrade(&engine);
        let every = Duration::from_millis(u64::try_from(engine.lease_ms() / 3).unwrap_or(10_000));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(engine) = weak.upgrade() else { break };
                if engine.running() > 0 {
                    let store = Arc::clone(&engine.store);
                    let (o, l) = (engine.owner.clone(), engine.lease_ms());
                    drop(engine);
                    let _ = blocking(move || store.renew(&o, l)).await;
                }
            }
        });
        Ok(engine)
    }

    pub fn store(&self) -> &Arc<SopStore> {
        &self.store
    }

    pub fn root(&self) -> &InstallRoot {
        &self.root
    }

    /// The control plane its runs are registered in (`None` when it could not be opened).
    pub fn control(&self) -> Option<&Arc<ControlPlane>> {
        self.control.as_ref()
    }

    pub fn host(&self) -> &Arc<AgentHost> {
        &self.host
    }

    /// Why runs are kept in memory only (`None` when they are durable).
    pub fn fallback(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    pub fn settings(&self) -> &SopConfig {
        &self.settings
    }

    fn lease_ms(&self) -> i64 {
        i64::try_from(self.settings.lease_secs.max(1).saturating_mul(1000)).unwrap_or(30_000)
    }

    /// Active runs of this engine.
    pub fn running(&self) -> usize {
        self.running.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Starts a run of the SOP `name` with `input` (`trigger` = manual, webhook, cron, mqtt).
    /// Returns the run as stored and a handle that ends when the run ends or parks.
    pub async fn start_run(
        self: &Arc<Self>,
        name: &str,
        trigger: &str,
        input: serde_json::Value,
    ) -> Result<(SopRun, tokio::task::JoinHandle<Option<SopRun>>), SopError> {
        let definition = defs::find(&self.root, self.host.snapshot().config(), name)
            .map_err(SopError::Definition)?;
        let def_json = serde_json::to_value(&definition.def).map_err(|cause| SopError::Encode {
            name: name.into(),
            cause,
        })?;
        let id = warren_runtime::new_run_id("sop-");
        let store = Arc::clone(&self.store);
        let (i, n, a, t, o) = (
            id.clone(),
            name.to_string(),
            definition.def.agent.clone(),
            trigger.to_string(),
            self.owner.clone(),
        );
        let (max_for_sop, max_global, lease_ms) = (
            definition.def.max_concurrent,
            self.settings.max_concurrent_runs,
            self.lease_ms(),
        );
        let run = blocking(move || {
            store.start(
                &NewRun {
                    id: &i,
                    sop: &n,
                    agent: &a,
                    trigger: &t,
                    input: &input,
                    definition: &def_json,
                    max_for_sop,
                    max_global,
                    lease_ms,
                },
                &o,
            )
        })
        .await??;
        match &self.fallback {
            Some(why) => tracing::warn!(sop = %name, run = %id, "SOP run started: {why}"),
            None => tracing::info!(sop = %name, run = %id, trigger, "SOP run started"),
        }
        if let Some(control) = &self.control {
            let control = Arc::clone(control);
            let (r, a, l, o) = (
                id.clone(),
                run.agent.clone(),
                format!("sop:{name}"),
                self.owner.clone(),
            );
            if let Ok(Err(e)) = blocking(move || control.register(&r, "sop", &a, &l, &o)).await {
                tracing::error!(run = %id, "control plane: {e}");
            }
        }
        let handle = self.spawn(run.clone());
        Ok((run, handle))
    }

    fn spawn(self: &Arc<Self>, run: SopRun) -> tokio::task::JoinHandle<Option<SopRun>> {
        let cancel = CancelToken::new();
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(run.id.clone(), cancel.clone());
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let id = run.id.clone();
            this.execute(run, cancel).await;
            this.running
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
            this.changed.notify_waiters();
            let store = Arc::clone(&this.store);
            blocking(move || store.get(&id)).await.ok()?.ok()?
        })
    }

    /// Claims the active runs whose owner is gone (or is this process, after a reload) and
    /// continues each at its first incomplete step. Returns the ids continued.
    pub async fn restore(self: &Arc<Self>) -> Vec<String> {
        let store = Arc::clone(&self.store);
        let active = match blocking(move || store.active()).await {
            Ok(Ok(a)) => a,
            Ok(Err(e)) => {
                tracing::error!("SOP runs not restored: {e}");
                return Vec::new();
            }
            Err(e) => {
                tracing::error!("SOP runs not restored: {e}");
                return Vec::new();
            }
        };
        let mut restored = Vec::new();
        for run in active {
            if self
                .running
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains_key(&run.id)
            {
                continue;
            }
            let store = Arc::clone(&self.store);
            let (id, owner, lease) = (run.id.clone(), self.owner.clone(), self.lease_ms());
            match blocking(move || store.claim(&id, &owner, lease)).await {
                Ok(Ok(Some(claimed))) => {
                    tracing::info!(sop = %claimed.sop, run = %claimed.id, step = claimed.step_index, "SOP run restored: continuing at its first incomplete step");
                    restored.push(claimed.id.clone());
                    if let Some(control) = &self.control {
                        let control = Arc::clone(control);
                        let (r, a, l, o) = (
                            claimed.id.clone(),
                            claimed.agent.clone(),
                            format!("sop:{}", claimed.sop),
                            self.owner.clone(),
                        );
                        if let Ok(Err(e)) =
                            blocking(move || control.resume(&r, "sop", &a, &l, &o)).await
                        {
                            tracing::error!(run = %claimed.id, "control plane: {e}");
                        }
                    }
                    self.spawn(claimed);
                }
                Ok(Ok(None)) => {}
                Ok(Err(e)) => tracing::error!(run = %run.id, "SOP run not restored: {e}"),
                Err(e) => tracing::error!(run = %run.id, "SOP run not restored: {e}"),
            }
        }
        restored
    }

    /// Cancels the run `id`: at once when it runs here, else through the store (its owner
    /// acts on the request).
    pub async fn cancel(&self, id: &str, who: &str) -> Result<SopRun, SopError> {
        let store = Arc::clone(&self.store);
        let (i, w) = (id.to_string(), who.to_string());
        let run = blocking(move || store.request_cancel(&i, &w)).await??;
        if let Some(token) = self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
        {
            token.cancel();
        }
        Ok(run)
    }

    /// Records the operator's decision on the gate `step` of the waiting run `id`.
    pub async fn decide(
        &self,
        id: &str,
        step: &str,
        approved: bool,
        who: &str,
        reason: Option<String>,
    ) -> Result<(), SopError> {
        let store = Arc::clone(&self.store);
        let (i, s, w) = (id.to_string(), step.to_string(), who.to_string());
        blocking(move || store.decide(&i, &s, approved, &w, reason.as_deref())).await??;
        self.changed.notify_waiters();
        Ok(())
    }

    /// The background work of a daemon generation: cancel requests from other processes, and
    /// the triggers (cron expressions, MQTT topics). Stopping it parks the runs
    /// at their next step boundary (the next generation continues them).
    pub fn start(self: &Arc<Self>) -> RunningSubsystem {
        let (stop, mut stopped) = oneshot::channel::<()>();
        let this = Arc::clone(self);
        let triggers = triggers::start(self);
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(500));
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = &mut stopped => break,
                }
                this.serve_cancel_requests().await;
            }
            for t in triggers {
                t.abort();
            }
            this.parking.store(true, Ordering::Release);
            this.changed.notify_waiters();
            while this.running() > 0 {
                let _ =
                    tokio::time::timeout(Duration::from_millis(200), this.changed.notified()).await;
            }
        });
        RunningSubsystem::new("sop", stop, task)
    }

    /// Cancel requests another process wrote for runs of this engine.
    async fn serve_cancel_requests(&self) {
        let ids: Vec<String> = self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect();
        for id in ids {
            let store = Arc::clone(&self.store);
            let i = id.clone();
            if let Ok(Ok(Some(run))) = blocking(move || store.get(&i)).await
                && run.cancel_requested
                && let Some(token) = self
                    .running
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(&id)
            {
                token.cancel();
            }
        }
        self.changed.notify_waiters();
    }

    /// Whether the generation stopped (runs park at their next step boundary).
    pub fn is_parking(&self) -> bool {
        self.parking.load(Ordering::Acquire)
    }
}
