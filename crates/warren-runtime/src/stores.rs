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

use std::path::Path;
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

    /// The control plane, created if missing.
    pub fn control_plane(&self) -> Result<Arc<ControlPlane>, ControlPlaneError> {
        open_created(&self.control, &self.root.control_plane_db(), |p| {
            ControlPlane::open(p)
        })
    }

    /// The control plane if its file exists (a reader never creates it).
    pub fn control_plane_existing(&self) -> Result<Option<Arc<ControlPlane>>, ControlPlaneError> {
        open_slot(&self.control, &self.root.control_plane_db(), |p| {
            ControlPlane::open(p)
        })
    }

    /// The cron store, created if missing.
    pub fn cron(&self) -> Result<Arc<CronStore>, CronError> {
        open_created(&self.cron, &self.root.cron_db(), CronStore::open)
    }

    /// The cron store if its file exists.
    pub fn cron_existing(&self) -> Result<Option<Arc<CronStore>>, CronError> {
        open_slot(&self.cron, &self.root.cron_db(), CronStore::open)
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
        open_created(&self.sop, &self.root.sop_runs_db(), SopStore::open)
    }

    /// The SOP runs a lifecycle operation or a reader works on: the running engine's in-memory
    /// store when it keeps its runs in memory, else the durable store if its file exists.
    pub fn sop_runs(&self) -> Result<Option<Arc<SopStore>>, SopStoreError> {
        if let Some(memory) = lock(&self.sop_memory).clone() {
            return Ok(Some(memory));
        }
        open_slot(&self.sop, &self.root.sop_runs_db(), SopStore::open)
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
