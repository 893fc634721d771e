//! The cron scheduler (STATE-9, STATE-11, STATE-19): one timer task per generation that sleeps
//! until the earliest due time in `data/cron/jobs.db` (or until woken by a change: an added,
//! paused or resumed job, a finished run, a cancel request) — 1,000 dormant jobs cost no
//! wakeups except at their due times.
//!
//! Every run path — scheduled, `warren cron run`, `POST /api/cron/{name}/run` — goes through
//! [`Scheduler::start_run`]: it claims the job's lock row (owner PID + boot ID; a live holder
//! refuses the claim, naming it), registers the run in the control plane, then runs the job —
//! an agent turn through THE turn door ([`warren_runtime::AgentHost::submit`], channel `cron`) or a shell
//! command through the agent's shell tool (same policy and sandbox; a command that needs
//! approval fails with that reason and never runs). `ok` is written together with the result
//! ([`warren_store::cron::CronStore::finish`]); a run interrupted by a crash stays `running`
//! until the reaper of the next daemon start ([`reap`]) marks it `lost`.
//!
//! Failures back off exponentially (capped, `[cron] backoff_secs`/`backoff_max_secs`); after
//! `[cron] max_failures` consecutive failures the job is paused with the reason. Missed fire
//! times after downtime follow the job's `catch_up` (`skip` by default, or `once`).

pub mod control;
pub mod jobs;
mod probe;
mod run;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, oneshot};
use warren_config::InstallRoot;
use warren_store::control_plane::{ControlPlane, Owner};
use warren_store::cron::{CronError, CronStore, Job, Run, now_ms};

use warren_runtime::{AgentHost, CancelToken, RunningSubsystem};

pub use jobs::{JobSpec, ScheduleError, SpecError, schedule_of};

/// Crash point: a run is claimed and registered, its turn or command not yet started.
pub const FAILPOINT_RUN_STARTED: &str = "cron-run-started";
/// Crash point: the turn or command finished, its result not yet stored.
pub const FAILPOINT_BEFORE_FINISH: &str = "cron-run-before-finish";

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum CronRunError {
    #[error(transparent)]
    Store(#[from] CronError),
    #[error(transparent)]
    ControlPlane(#[from] warren_store::control_plane::ControlPlaneError),
    #[error("the cron store task failed: {0}")]
    Task(String),
}

/// The scheduler of one generation (or of one CLI process running `warren cron run`).
pub struct Scheduler {
    root: InstallRoot,
    host: Arc<AgentHost>,
    store: Arc<CronStore>,
    control: Arc<ControlPlane>,
    owner: Owner,
    wake: Notify,
    wakeups: AtomicU64,
    running: Mutex<HashMap<String, CancelToken>>,
    /// Why a heartbeat's check fired, for its run's message (job name → reason).
    fired: Mutex<HashMap<String, String>>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("store", &self.store.path())
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

/// Runs `f` on the blocking pool (SQLite never blocks an async worker).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, CronRunError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| CronRunError::Task(e.to_string()))
}

impl Scheduler {
    /// Opens the stores of `root` for `host`'s generation.
    /// The scheduler of `host`'s generation, on the process's cron store and control plane
    /// (borrowed from [`warren_runtime::stores::Stores`]).
    pub fn open(root: &InstallRoot, host: Arc<AgentHost>) -> Result<Arc<Self>, CronRunError> {
        let (store, control) = (host.stores().cron()?, host.stores().control_plane()?);
        Ok(Arc::new(Self {
            root: root.clone(),
            host,
            store,
            control,
            owner: Owner::current(),
            wake: Notify::new(),
            wakeups: AtomicU64::new(0),
            running: Mutex::new(HashMap::new()),
            fired: Mutex::new(HashMap::new()),
        }))
    }

    pub fn store(&self) -> &Arc<CronStore> {
        &self.store
    }

    pub fn control(&self) -> &Arc<ControlPlane> {
        &self.control
    }

    pub fn host(&self) -> &Arc<AgentHost> {
        &self.host
    }

    /// How often the timer task woke up (the benchmark's wakeups/min).
    pub fn wakeups(&self) -> u64 {
        self.wakeups.load(Ordering::Relaxed)
    }

    /// Re-reads the store (a job was added, paused, resumed or removed; a cancel request).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Reconciles `[cron.jobs]` of this generation's config into the store and applies each
    /// job's `catch_up` to fire times missed while no daemon ran.
    pub async fn prepare(self: &Arc<Self>) -> Result<(), CronRunError> {
        let config = self.host.snapshot().config().clone();
        let declared = jobs::declared(&config);
        let store = Arc::clone(&self.store);
        let (added, updated, removed, conflicts) = blocking(move || {
            store.reconcile_declared(&declared, &|job: &Job| {
                schedule_of(job).ok().and_then(|s| s.next_after(now_ms()))
            })
        })
        .await??;
        for name in conflicts {
            tracing::warn!(job = %name, "[cron.jobs.{name}] not applied: a runtime job of that name exists (remove it with `warren cron remove {name}`)");
        }
        tracing::info!(added, updated, removed, "declared cron jobs reconciled");
        let store = Arc::clone(&self.store);
        blocking(move || catch_up(&store)).await??;
        Ok(())
    }

    /// Starts the timer task; the returned subsystem stops it (running runs go on and finish).
    pub fn start(self: &Arc<Self>) -> RunningSubsystem {
        let (stop, mut stopped) = oneshot::channel::<()>();
        let this = Arc::clone(self);
        let task = tokio::spawn(async move {
            loop {
                let store = Arc::clone(&this.store);
                let next = match blocking(move || store.next_due()).await {
                    Ok(Ok(next)) => next,
                    Ok(Err(e)) => {
                        tracing::error!("cron scheduler: {e}; retrying in 60 s");
                        Some(now_ms() + 60_000)
                    }
                    Err(e) => {
                        tracing::error!("cron scheduler: {e}; retrying in 60 s");
                        Some(now_ms() + 60_000)
                    }
                };
                let sleep = async {
                    match next {
                        Some(at) => {
                            let wait = u64::try_from(at - now_ms()).unwrap_or(0);
                            tokio::time::sleep(Duration::from_millis(wait)).await;
                        }
                        None => std::future::pending::<()>().await,
                    }
                };
                tokio::select! {
                    () = sleep => {}
                    () = this.wake.notified() => {}
                    _ = &mut stopped => break,
                }
                this.wakeups.fetch_add(1, Ordering::Relaxed);
                this.serve_cancel_requests().await;
                if let Err(e) = this.fire_due().await {
                    tracing::error!("cron scheduler: {e}");
                }
            }
            // Running runs finish: the daemon waits for this task up to its grace, then
            // cancels the generation's turns (STATE-19).
            while !this
                .running
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_empty()
            {
                let _ =
                    tokio::time::timeout(Duration::from_millis(200), this.wake.notified()).await;
            }
        });
        RunningSubsystem::new("cron", stop, task)
    }

    async fn fire_due(self: &Arc<Self>) -> Result<(), CronRunError> {
        let now = now_ms();
        let store = Arc::clone(&self.store);
        let due = blocking(move || store.due(now)).await??;
        for job in due {
            let scheduled = job.next_fire_ms.unwrap_or(now);
            let next = schedule_of(&job)
                .ok()
                .and_then(|s| next_fire_after(&s, scheduled, now));
            if let Some(probe) = job
                .probe
                .as_deref()
                .and_then(|p| serde_json::from_str::<probe::Probe>(p).ok())
            {
                // A heartbeat: the check first; the model only when it fires.
                let (fired, state) = self.check(&job, &probe).await;
                let store = Arc::clone(&self.store);
                let name = job.name.clone();
                let advance = fired.is_none().then_some(next);
                blocking(move || store.set_probe_state(&name, Some(&state), advance)).await??;
                match fired {
                    None => continue,
                    Some(why) => {
                        self.fired
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(job.name.clone(), why);
                    }
                }
            }
            match self.start_run(&job.name, "schedule", Some(next)).await {
                Ok(_) => {}
                Err(CronRunError::Store(CronError::Held { .. })) => {}
                Err(e) => tracing::error!(job = %job.name, "cron run not started: {e}"),
            }
        }
        Ok(())
    }

    async fn serve_cancel_requests(&self) {
        let control = Arc::clone(&self.control);
        let owner = self.owner.clone();
        if let Ok(Ok(ids)) = blocking(move || control.cancel_requests(&owner)).await {
            for id in ids {
                self.cancel_local(&id);
            }
        }
    }

    /// Cancels a run of this process; `false` if it does not run here.
    pub fn cancel_local(&self, run_id: &str) -> bool {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        match running.get(run_id) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// Claims `name` and starts a run (`trigger` = `schedule` or `manual`); `next_fire`
    /// advances the schedule in the claim's transaction. Returns the run id and a handle that
    /// ends when the run's result is stored.
    pub async fn start_run(
        self: &Arc<Self>,
        name: &str,
        trigger: &str,
        next_fire: Option<Option<i64>>,
    ) -> Result<(String, tokio::task::JoinHandle<Option<Run>>), CronRunError> {
        let run_id = warren_runtime::new_run_id("");
        let store = Arc::clone(&self.store);
        let (n, r, t, o) = (
            name.to_string(),
            run_id.clone(),
            trigger.to_string(),
            self.owner.clone(),
        );
        let job = blocking(move || {
            let job = store
                .get(&n)?
                .ok_or_else(|| CronError::NotFound(n.clone()))?;
            let session = run::session_of(&job, &r);
            store.claim(&n, &r, &t, Some(&session), &o, next_fire)
        })
        .await??;
        let control = Arc::clone(&self.control);
        let (r, a, o) = (run_id.clone(), job.agent.clone(), self.owner.clone());
        let label = format!("cron:{}", job.name);
        if let Err(e) = blocking(move || control.register(&r, "cron", &a, &label, &o)).await? {
            tracing::error!(run = %run_id, "control plane: {e}");
        }
        let cancel = CancelToken::new();
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(run_id.clone(), cancel.clone());
        let this = Arc::clone(self);
        let id = run_id.clone();
        let handle = tokio::spawn(async move {
            let run = this.execute(job, &id, cancel).await;
            this.running
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
            this.wake();
            run
        });
        Ok((run_id, handle))
    }

    /// Starts a manual run and waits for its stored result.
    pub async fn run_now(self: &Arc<Self>, name: &str) -> Result<Run, CronRunError> {
        let (id, handle) = self.start_run(name, "manual", None).await?;
        let run = handle.await.ok().flatten();
        match run {
            Some(run) => Ok(run),
            None => {
                let store = Arc::clone(&self.store);
                blocking(move || store.run(&id))
                    .await??
                    .ok_or_else(|| CronRunError::Task("the run's row is gone".into()))
            }
        }
    }
}

/// The next fire time after a fire scheduled at `scheduled`, seen at `now`: never in the past
/// (an interval job that fell behind skips the missed beats).
fn next_fire_after(
    schedule: &warren_config::schema::cron::Schedule,
    scheduled: i64,
    now: i64,
) -> Option<i64> {
    let mut next = schedule.next_after(scheduled)?;
    if next <= now {
        next = schedule.next_after(now)?;
    }
    Some(next)
}

/// Missed fire times (the daemon was down): `skip` moves to the next time after now; `once`
/// keeps one fire now. One-shot `at` jobs whose time passed are disabled with a note (skip).
fn catch_up(store: &CronStore) -> Result<(), CronError> {
    let now = now_ms();
    // A little slack: a job due right now is not "missed".
    for job in store.due(now - 1000)? {
        let Ok(schedule) = schedule_of(&job) else {
            continue;
        };
        if job.catch_up == "once" {
            continue; // fires now, once; its next time is computed at the claim
        }
        match schedule.next_after(now) {
            Some(next) => store.set_next_fire(&job.name, Some(next))?,
            None => {
                store.set_enabled(
                    &job.name,
                    false,
                    Some("its one-shot time passed while no daemon ran (catch_up = skip)"),
                    None,
                )?;
            }
        }
        tracing::info!(job = %job.name, "missed fire time skipped (catch_up = skip)");
    }
    Ok(())
}
