//! Agent lifecycle: rename, delete, restore (SPEC LIFE-1..6, BEYOND-1, BEYOND-3, LAYOUT-3).
//! ONE module used by the CLI (`warren agents rename|delete|restore`) and the gateway
//! (`/api/agents/...`).
//!
//! Order of every operation (LIFE-2..4):
//! 1. take the config write lock (in-process mutex + `data/config.lock`);
//! 2. check hard references ([`refs`]) and live ACP sessions (fail closed if the ACP store
//!    cannot be read);
//! 3. edit config (entry + soft references), re-walk the edited config: any reference left
//!    aborts before anything is persisted;
//! 4. write a durable journal record (`data/state/lifecycle/<id>.json`, [`journal`]);
//! 5. persist config, release the lock;
//! 6. run the side effects (workspace move, every [`stores::AgentStateStore`] of
//!    [`registered`]; the shares of `warren-store`'s stores live beside them) — each one
//!    idempotent — and clear the journal only when every follower converged.
//!
//! The stores are the running generation's, borrowed from its `AgentHost` when a daemon runs
//! ([`Lifecycle::for_host`]), or opened once by this process ([`Lifecycle::new`]): never a
//! second writer beside the daemon's (issue 14 §6).
//!
//! An interrupted operation converges from its journal on the next daemon start or the next
//! lifecycle call ([`Lifecycle::converge_pending`]); temp files of killed runs are swept first
//! (only those whose writer is dead). Warnings go to the caller, into the archive manifest and
//! into the runtime trace. Concepts: [`journal`] (records, durable files, crash points,
//! convergence), [`rename`], [`delete`], [`restore`]; errors in [`error`].

pub mod delete;
pub mod error;
pub mod fsops;
pub mod journal;
pub mod refs;
pub mod rename;
pub mod restore;
pub mod store_error;
pub mod stores;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use warren_config::schema::MemoryBackendKind;
use warren_config::{ConfigStore, InstallRoot};
use warren_core::AgentAlias;

pub use self::delete::{DeletePlan, Manifest};
pub use self::error::{ErrorKind, LifecycleError, Unreadable, parse_alias};
pub use self::fsops::WORKSPACE_COPY_CRASH_POINTS;
pub use self::journal::{
    DELETE_CRASH_POINTS, Journal, Op, RENAME_CRASH_POINTS, RESTORE_CRASH_POINTS, SCHEMA_VERSION,
    UnreadableRecord, WorkspaceAction,
};
pub use self::restore::{ArchiveListing, list_archives};
use self::stores::{InStore, OwnStores, StoreContext, StoreSource};
use warren_runtime::host::AgentHost;
use warren_runtime::stores::Stores;
use warren_store::agent_state::acp::AcpShare;
use warren_store::agent_state::cron::CronShare;
use warren_store::agent_state::sessions::SessionsShare;
use warren_store::agent_state::sop::SopShare;

static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// What an operation did; returned to the CLI and the HTTP caller.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub op: String,
    pub alias: AgentAlias,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<AgentAlias>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub archive: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_generation: Option<u64>,
    /// Config references rewritten (rename) or scrubbed (delete).
    pub references: Vec<String>,
    /// Per store: records moved, archived or restored.
    pub counts: BTreeMap<String, u64>,
    pub warnings: Vec<String>,
    /// Every follower finished; the journal record is gone.
    pub converged: bool,
    /// How long the config write lock was held, and the config save inside it (microseconds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_held_us: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub persist_us: Option<u64>,
}

impl Report {
    fn new(op: &str, alias: &AgentAlias) -> Self {
        Self {
            op: op.into(),
            alias: alias.clone(),
            to: None,
            archive: None,
            config_generation: None,
            references: Vec::new(),
            counts: BTreeMap::new(),
            warnings: Vec::new(),
            converged: true,
            lock_held_us: None,
            persist_us: None,
        }
    }

    /// Records a failed follower: the journal stays for a retry.
    fn fail(&mut self, warning: String) {
        self.warnings.push(warning);
        self.converged = false;
    }
}

fn micros(d: std::time::Duration) -> Option<u64> {
    Some(u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

fn now_text() -> String {
    OffsetDateTime::now_utc()
        .format(&Rfc3339)
        .unwrap_or_default()
}

fn stamp() -> String {
    let t = OffsetDateTime::now_utc();
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}.{:06}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.microsecond()
    )
}

/// The registry: every per-agent store, in cascade order. The shares of the stores in
/// `warren-store` live in that crate (`warren_store::agent_state::<store>`) and work on
/// the handles `ctx` lends them; memory, costs and the action window are shares of this crate
/// ([`stores`]).
pub fn registered(ctx: &StoreContext) -> Vec<Box<dyn stores::AgentStateStore>> {
    let handles = Arc::new(ctx.clone());
    vec![
        Box::new(stores::MemoryState::new(ctx.clone())),
        Box::new(InStore(SessionsShare::new(Arc::clone(&handles)))),
        Box::new(InStore(AcpShare::new(Arc::clone(&handles)))),
        Box::new(stores::CostState::new(ctx.clone())),
        Box::new(InStore(CronShare::new(Arc::clone(&handles)))),
        Box::new(InStore(SopShare::new(Arc::clone(&handles)))),
        Box::new(stores::ActionsState::new(ctx.clone())),
    ]
}

/// The lifecycle of the agents of one install.
#[derive(Clone)]
pub struct Lifecycle {
    store: ConfigStore,
    source: StoreSource,
}

impl Lifecycle {
    /// Without a running daemon: the stores are opened once, by this process, on first use.
    pub fn new(store: ConfigStore) -> Self {
        let stores = Arc::new(Stores::new(store.root(), store.snapshot().config()));
        Self::with_stores(store, stores)
    }

    /// Without a running generation, on the process's `stores` (the daemon at start-up, before
    /// its first generation: the handles its generations then use).
    pub fn with_stores(store: ConfigStore, stores: Arc<Stores>) -> Self {
        let own = Arc::new(OwnStores::new(store.root(), stores));
        Self {
            store,
            source: StoreSource::Own(own),
        }
    }

    /// Inside a running daemon: the stores of its running generation (`host`), never a
    /// second writer on the same files.
    pub fn for_host(store: ConfigStore, host: Arc<AgentHost>) -> Self {
        Self {
            store,
            source: StoreSource::Host(host),
        }
    }

    pub fn root(&self) -> &InstallRoot {
        self.store.root()
    }

    /// The config owner the verbs write through.
    pub(crate) fn config(&self) -> &ConfigStore {
        &self.store
    }

    /// Runs a blocking lifecycle step off the async workers, after sweeping the temp files
    /// killed runs left.
    pub(crate) async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Lifecycle, tokio::runtime::Handle) -> T + Send + 'static,
    ) -> Result<T, LifecycleError> {
        let me = self.clone();
        let handle = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            // One lifecycle operation at a time in this process (two requests must not converge
            // the same journal record at once); other processes are kept out by the
            // install-root lock, which the daemon or the CLI holds.
            let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
            journal::sweep_killed_temps(me.root());
            f(&me, handle)
        })
        .await
        .map_err(|e| LifecycleError::Worker(e.to_string()))
    }

    /// `warren agents rename OLD NEW` / `POST /api/agents/{alias}/rename`.
    pub async fn rename(
        &self,
        from: &AgentAlias,
        to: &AgentAlias,
    ) -> Result<Report, LifecycleError> {
        let (from, to) = (from.clone(), to.clone());
        self.blocking(move |me, h| me.rename_blocking(&h, &from, &to))
            .await?
    }

    /// `warren agents delete ALIAS --yes` / `DELETE /api/agents/{alias}`.
    pub async fn delete(&self, alias: &AgentAlias) -> Result<Report, LifecycleError> {
        let alias = alias.clone();
        self.blocking(move |me, h| me.delete_blocking(&h, &alias))
            .await?
    }

    /// `warren agents delete ALIAS --dry-run` / `GET /api/agents/{alias}/delete-plan`.
    pub async fn delete_plan(&self, alias: &AgentAlias) -> Result<DeletePlan, LifecycleError> {
        let alias = alias.clone();
        self.blocking(move |me, h| me.plan_blocking(&h, &alias))
            .await?
    }

    /// `warren agents restore ARCHIVE [--as NEW]` / `POST /api/agents/restore`.
    pub async fn restore(
        &self,
        archive: &str,
        as_alias: Option<&AgentAlias>,
    ) -> Result<Report, LifecycleError> {
        let (archive, as_alias) = (archive.to_string(), as_alias.cloned());
        self.blocking(move |me, h| me.restore_blocking(&h, &archive, as_alias.as_ref()))
            .await?
    }

    /// Converges every journaled operation (daemon start, `warren agents resume`, before each
    /// lifecycle call).
    pub async fn converge_pending(&self) -> Vec<Report> {
        self.blocking(|me, h| me.converge_pending_blocking(&h))
            .await
            .unwrap_or_default()
    }

    /// The stores of an operation on an agent whose memory lives in `backend`.
    fn context(&self, h: &tokio::runtime::Handle, backend: MemoryBackendKind) -> StoreContext {
        StoreContext {
            root: self.root().clone(),
            config: Arc::new(self.store.snapshot().config().clone()),
            memory_backend: backend,
            handle: h.clone(),
            source: self.source.clone(),
        }
    }
}
