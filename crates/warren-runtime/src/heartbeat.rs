//! Background runs' liveness (STATE-11): the start-up reaper ([`reap`]) and the heartbeat task
//! ([`keep_beating`]) of the control plane's running rows and the cron store's job locks. Used
//! by the daemon, by a `warren agent` process running a background delegate, and by `warren
//! cron run`/`sop run` without a daemon. The heartbeat task keeps its own handles on purpose: a
//! handle opened read-only (a migration lock held elsewhere) is dropped and reopened at the next
//! tick, which a shared handle of [`crate::stores::Stores`] cannot do for its other borrowers.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use warren_config::InstallRoot;
use warren_store::control_plane::{ControlPlane, Owner};
use warren_store::cron::CronStore;

/// The reaper of daemon start (STATE-11): runs whose owner is provably gone become `lost`,
/// their locks are cleared. Called before this process claims or registers any run, so a row
/// of this very PID and boot is an earlier process's (a container's PID 1 restarted) and is
/// gone too. Returns the lost run ids.
pub fn reap(root: &InstallRoot) -> Vec<String> {
    let mut lost = Vec::new();
    match CronStore::open_existing(&root.cron_db()) {
        Ok(Some(_)) => match CronStore::open(&root.cron_db()).and_then(|s| s.reap_at_start()) {
            Ok(ids) => lost.extend(ids),
            Err(e) => tracing::error!("cron reaper: {e}"),
        },
        Ok(None) => {}
        Err(e) => tracing::error!("cron reaper: {e}"),
    }
    match ControlPlane::open_existing(&root.control_plane_db()) {
        Ok(Some(_)) => {
            if let Err(e) =
                ControlPlane::open(&root.control_plane_db()).and_then(|c| c.reap_at_start())
            {
                tracing::error!("control plane reaper: {e}");
            }
        }
        Ok(None) => {}
        Err(e) => tracing::error!("control plane reaper: {e}"),
    }
    for id in &lost {
        tracing::warn!(run = %id, "cron run lost: its process exited before the result was stored");
    }
    lost
}

/// The heartbeat task of each control plane this process renews rows in (one per file and
/// process: the daemon's and a background delegate's start ask for the same one).
static BEATING: Mutex<Option<HashMap<PathBuf, tokio::task::JoinHandle<()>>>> = Mutex::new(None);

/// Starts, unless this process runs one for `plane` already, the task that renews every
/// `every` ([`warren_store::control_plane::HEARTBEAT`]) the heartbeat of this process's running
/// control-plane rows in `plane` and of the job locks it holds in `cron`: one UPDATE per store
/// and tick, on the blocking pool. An owner that another process cannot judge (another PID
/// namespace, a process it may not inspect) counts as alive only while this heartbeat is fresh.
/// With `reap` (the daemon) each tick also reaps both stores, so a row whose owner is gone or
/// stopped beating does not wait for the next daemon start. Stores are opened once they exist;
/// the task ends with the runtime.
pub fn keep_beating(plane: PathBuf, cron: Option<PathBuf>, reap: bool, every: Duration) {
    let mut beating = BEATING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let beating = beating.get_or_insert_with(HashMap::new);
    // A finished task is one of an ended runtime (a test's): start another.
    if beating.get(&plane).is_some_and(|task| !task.is_finished()) {
        return;
    }
    let key = plane.clone();
    let task = tokio::spawn(async move {
        let owner = Owner::current();
        let stores: Arc<Mutex<(Option<ControlPlane>, Option<CronStore>)>> = Arc::default();
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let (stores, owner, plane, cron) = (
                Arc::clone(&stores),
                owner.clone(),
                plane.clone(),
                cron.clone(),
            );
            let beat = tokio::task::spawn_blocking(move || {
                let mut stores = stores
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                // A handle opened read-only (its migration failed, e.g. another process held
                // the migration lock) would refuse every beat for the life of the process:
                // drop it so this tick opens the file again.
                if stores.0.as_ref().is_some_and(|cp| cp.read_only().is_some()) {
                    stores.0 = None;
                }
                if stores.1.as_ref().is_some_and(|s| s.read_only().is_some()) {
                    stores.1 = None;
                }
                if stores.0.is_none() && matches!(ControlPlane::open_existing(&plane), Ok(Some(_)))
                {
                    stores.0 = ControlPlane::open(&plane)
                        .inspect_err(|e| tracing::error!("heartbeat: {e}"))
                        .ok();
                }
                if let Some(cp) = &stores.0 {
                    if let Err(e) = cp.heartbeat(&owner) {
                        tracing::error!("heartbeat: {e}");
                    }
                    if reap {
                        match cp.reap() {
                            Ok(lost) if !lost.is_empty() => {
                                tracing::warn!(runs = ?lost, "background runs lost: their owner exited or stopped renewing its heartbeat")
                            }
                            Ok(_) => {}
                            Err(e) => tracing::error!("control plane reaper: {e}"),
                        }
                    }
                }
                let Some(cron) = cron else { return };
                if stores.1.is_none() && matches!(CronStore::open_existing(&cron), Ok(Some(_))) {
                    stores.1 = CronStore::open(&cron)
                        .inspect_err(|e| tracing::error!("heartbeat: {e}"))
                        .ok();
                }
                if let Some(store) = &stores.1 {
                    if let Err(e) = store.heartbeat(&owner) {
                        tracing::error!("heartbeat: {e}");
                    }
                    if reap {
                        match store.reap() {
                            Ok(lost) if !lost.is_empty() => {
                                tracing::warn!(runs = ?lost, "cron runs lost: their owner exited or stopped renewing its heartbeat")
                            }
                            Ok(_) => {}
                            Err(e) => tracing::error!("cron reaper: {e}"),
                        }
                    }
                }
            });
            if let Err(e) = beat.await {
                tracing::error!("heartbeat: {e}");
            }
        }
    });
    beating.insert(key, task);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// The heartbeat of run `id` (`beat_ms`).
    fn beat(plane: &ControlPlane, id: &str) -> Option<i64> {
        plane.get(id).unwrap().and_then(|r| r.beat_ms)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_heartbeat_task_renews_this_process_running_rows_and_is_started_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data").join("control_plane.db");
        let plane = ControlPlane::open(&path).unwrap();
        plane
            .register("dlg-1", "delegate", "main", "delegate:x", &Owner::current())
            .unwrap();
        plane
            .register("ended", "delegate", "main", "delegate:y", &Owner::current())
            .unwrap();
        plane.finish("ended", "ok", None).unwrap();
        // Set when registered: a process killed before its first tick leaves a row that ages.
        let ended = beat(&plane, "ended");
        assert!(ended.is_some());
        let every = Duration::from_millis(40);
        keep_beating(path.clone(), None, false, every);
        // A second start (a background delegate in the daemon) reuses the running task.
        keep_beating(path.clone(), None, false, every);
        let first = wait_for(|| beat(&plane, "dlg-1")).await;
        let later = wait_for(|| beat(&plane, "dlg-1").filter(|b| *b > first)).await;
        assert!(later > first);
        assert_eq!(beat(&plane, "ended"), ended, "an ended row is not renewed");
        let tasks = BEATING.lock().unwrap();
        assert_eq!(
            tasks
                .as_ref()
                .map(|t| t.keys().filter(|k| **k == path).count()),
            Some(1)
        );
    }

    async fn wait_for(mut f: impl FnMut() -> Option<i64>) -> i64 {
        for _ in 0..250 {
            if let Some(v) = f() {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the heartbeat was not renewed within 5 s");
    }
}
