//! [`Stores`]: the one owner of the process-wide store handles (issue 34 §2, LAYOUT-3) — the
//! control plane (STATE-11), the cron store (STATE-9), the SOP run store (STATE-10), the
//! `max_actions_per_hour` window, the cost ledger (STATE-14) and the channels' inbox, outbox
//! and senders (issue 38). Each SQLite store is opened
//! once per process, at its first use, and borrowed by everything that needs it: the door's
//! turns, the cron scheduler and SOP engine of every generation, a lifecycle operation, the
//! gateway's handlers and the CLI. Nothing else opens these files (the architecture test
//! `store_handles_are_opened_only_by_their_owner` keeps it so).
//!
//! A store whose file does not exist yet is not created by a reader: [`Stores::cron_existing`]
//! and friends answer `None` until a writer ([`Stores::cron`]) creates it. A failed open is not
//! kept: the next call tries again (a store repaired by the operator is picked up).
//!
//! A store that does not open is recorded as a [`StoreFault`] (its name, file and error) until
//! an open succeeds: [`Stores::faults`] is what `/api/health`, `warren status` and
//! `warren doctor` report as degraded (issue 36 §1). The generation's own stores (sessions,
//! memory) add theirs in [`crate::host::AgentHost::store_faults`]. Nothing here writes to a
//! store that failed to open.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use warren_config::InstallRoot;
use warren_config::schema::{CostConfig, SopConfig};
use warren_store::channels::{ChannelStore, ChannelStoreError};
use warren_store::control_plane::{ControlPlane, ControlPlaneError};
use warren_store::cron::{CronError, CronStore};
use warren_store::sop::{SopStore, SopStoreError};

use crate::actions::ActionWindow;
use crate::cost::CostTracker;

/// A store handle opened at most once.
type Slot<T> = Mutex<Option<Arc<T>>>;

/// A store that would not open (issue 36 §1): which store (its row of the state map), its
/// file, and the error. Reported as `degraded` by `/api/health`, `warren status` and
/// `warren doctor`; the file is left as it is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StoreFault {
    pub store: String,
    pub file: PathBuf,
    pub error: String,
}

impl StoreFault {
    pub fn new(store: &str, file: &Path, error: impl std::fmt::Display) -> Self {
        Self {
            store: store.to_string(),
            file: file.to_path_buf(),
            error: error.to_string(),
        }
    }
}

impl std::fmt::Display for StoreFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "store {} ({}) cannot be used: {}",
            self.store,
            self.file.display(),
            self.error
        )
    }
}

/// The faults of the process's stores, by store name.
#[derive(Debug, Default)]
struct Faults(Mutex<BTreeMap<&'static str, StoreFault>>);

impl Faults {
    /// Records `result` of opening `store` at `path`: its error, or (it opened) no fault.
    fn note<T, E: std::fmt::Display>(
        &self,
        store: &'static str,
        path: &Path,
        result: &Result<T, E>,
    ) {
        let mut faults = lock(&self.0);
        match result {
            Ok(_) => {
                faults.remove(store);
            }
            Err(e) => {
                faults.insert(store, StoreFault::new(store, path, e));
            }
        }
    }
}

/// The process's store handles (see the module doc).
pub struct Stores {
    root: InstallRoot,
    control: Slot<ControlPlane>,
    cron: Slot<CronStore>,
    sop: Slot<SopStore>,
    /// The in-memory SOP run store of the running engine when its runs are not durable
    /// (`[sop] durable_runs = false`, or the durable store would not open).
    sop_memory: Slot<SopStore>,
    channels: Slot<ChannelStore>,
    actions: Arc<ActionWindow>,
    /// Opened at the first use with these rates (a `cron list` never reads the ledger).
    costs: OnceLock<Arc<CostTracker>>,
    cost_config: CostConfig,
    faults: Faults,
}

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores")
            .field("root", &self.root.root())
            .finish_non_exhaustive()
    }
}

impl Stores {
    /// The stores of `root`; nothing is opened until it is used (the cost ledger then reads
    /// its totals with `config`'s rates).
    pub fn new(root: &InstallRoot, config: &warren_config::Config) -> Self {
        Self {
            root: root.clone(),
            control: Mutex::new(None),
            cron: Mutex::new(None),
            sop: Mutex::new(None),
            sop_memory: Mutex::new(None),
            channels: Mutex::new(None),
            actions: Arc::new(ActionWindow::open(root)),
            costs: OnceLock::new(),
            cost_config: config.cost.clone(),
            faults: Faults::default(),
        }
    }

    pub fn root(&self) -> &InstallRoot {
        &self.root
    }

    /// Each agent's `max_actions_per_hour` window (`data/state/actions.db`).
    pub fn actions(&self) -> &Arc<ActionWindow> {
        &self.actions
    }

    /// The cost ledger (`data/state/costs.jsonl`) and its running totals.
    pub fn costs(&self) -> &Arc<CostTracker> {
        self.costs.get_or_init(|| {
            Arc::new(CostTracker::open(
                self.root.costs_ledger(),
                &self.cost_config,
            ))
        })
    }

    /// The stores of this process that would not open at their last try (see [`StoreFault`]).
    pub fn faults(&self) -> Vec<StoreFault> {
        lock(&self.faults.0).values().cloned().collect()
    }

    /// Tries every process store whose file exists (the daemon's start-up: a damaged one is
    /// reported at once, not at its first use); opens nothing that is missing.
    pub fn probe(&self) {
        let _ = self.control_plane_existing();
        let _ = self.cron_existing();
        let _ = self.sop_runs();
    }

    /// The control plane, created if missing.
    pub fn control_plane(&self) -> Result<Arc<ControlPlane>, ControlPlaneError> {
        let path = self.root.control_plane_db();
        let opened = open_created(&self.control, &path, ControlPlane::open);
        self.faults.note(CONTROL_PLANE, &path, &opened);
        opened
    }

    /// The control plane if its file exists (a reader never creates it).
    pub fn control_plane_existing(&self) -> Result<Option<Arc<ControlPlane>>, ControlPlaneError> {
        let path = self.root.control_plane_db();
        let opened = open_slot(&self.control, &path, ControlPlane::open);
        self.faults.note(CONTROL_PLANE, &path, &opened);
        opened
    }

    /// The cron store, created if missing.
    pub fn cron(&self) -> Result<Arc<CronStore>, CronError> {
        let path = self.root.cron_db();
        let opened = open_created(&self.cron, &path, CronStore::open);
        self.faults.note(CRON, &path, &opened);
        opened
    }

    /// The cron store if its file exists.
    pub fn cron_existing(&self) -> Result<Option<Arc<CronStore>>, CronError> {
        let path = self.root.cron_db();
        let opened = open_slot(&self.cron, &path, CronStore::open);
        self.faults.note(CRON, &path, &opened);
        opened
    }

    /// The channels' store (`data/channels/channels.db`), created if missing.
    pub fn channels(&self) -> Result<Arc<ChannelStore>, ChannelStoreError> {
        open_created(&self.channels, &self.root.channels_db(), ChannelStore::open)
    }

    /// The channels' store if its file exists (a reader never creates it).
    pub fn channels_existing(&self) -> Result<Option<Arc<ChannelStore>>, ChannelStoreError> {
        open_slot(&self.channels, &self.root.channels_db(), ChannelStore::open)
    }

    /// The durable SOP run store, created if missing.
    pub fn sop_runs_durable(&self) -> Result<Arc<SopStore>, SopStoreError> {
        let path = self.root.sop_runs_db();
        let opened = open_created(&self.sop, &path, SopStore::open);
        self.faults.note(SOP_RUNS, &path, &opened);
        opened
    }

    /// The SOP runs a lifecycle operation or a reader works on: the running engine's in-memory
    /// store when it keeps its runs in memory, else the durable store if its file exists.
    pub fn sop_runs(&self) -> Result<Option<Arc<SopStore>>, SopStoreError> {
        if let Some(memory) = lock(&self.sop_memory).clone() {
            return Ok(Some(memory));
        }
        let path = self.root.sop_runs_db();
        let opened = open_slot(&self.sop, &path, SopStore::open);
        self.faults.note(SOP_RUNS, &path, &opened);
        opened
    }

    /// The run store of a new SOP engine with `settings`: the durable store, or (runs not
    /// durable, or the durable store would not open) a fresh in-memory one, with the reason.
    /// The in-memory store becomes what [`Self::sop_runs`] answers until an engine with
    /// durable runs opens.
    pub fn sop_runs_for(
        &self,
        settings: &SopConfig,
    ) -> Result<(Arc<SopStore>, Option<String>), SopStoreError> {
        let reason = if settings.durable_runs {
            match self.sop_runs_durable() {
                Ok(store) => {
                    *lock(&self.sop_memory) = None;
                    return Ok((store, None));
                }
                Err(e) => format!("{e}"),
            }
        } else {
            "[sop] durable_runs = false".to_string()
        };
        let why = format!(
            "SOP runs are kept IN MEMORY ONLY and end with this process ({reason}); fix the store or set [sop] durable_runs = true"
        );
        tracing::warn!("{why}");
        let memory = Arc::new(SopStore::in_memory()?);
        *lock(&self.sop_memory) = Some(Arc::clone(&memory));
        Ok((memory, Some(why)))
    }
}

/// The store names of [`StoreFault::store`] for the process's stores.
pub const CONTROL_PLANE: &str = "control_plane";
pub const CRON: &str = "cron";
pub const SOP_RUNS: &str = "sop_runs";

fn lock<T>(slot: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    slot.lock().unwrap_or_else(|p| p.into_inner())
}

/// The slot's handle, opened now if the file exists; `None` otherwise (never created here).
fn open_slot<T, E>(
    slot: &Slot<T>,
    path: &Path,
    open: impl FnOnce(&Path) -> Result<T, E>,
) -> Result<Option<Arc<T>>, E> {
    let mut slot = lock(slot);
    if slot.is_none() && path.exists() {
        *slot = Some(Arc::new(open(path)?));
    }
    Ok(slot.clone())
}

/// The slot's handle, opened (and the file created) now if it is not open yet.
fn open_created<T, E>(
    slot: &Slot<T>,
    path: &Path,
    open: impl FnOnce(&Path) -> Result<T, E>,
) -> Result<Arc<T>, E> {
    let mut slot = lock(slot);
    if let Some(handle) = slot.as_ref() {
        return Ok(Arc::clone(handle));
    }
    let handle = Arc::new(open(path)?);
    *slot = Some(Arc::clone(&handle));
    Ok(handle)
}
