//! Where a lifecycle operation's stores come from, and the shares of the stores outside
//! `warren-store` (issue 34 §2). Every store that owns per-agent state is an [`AgentStateStore`]
//! listed in [`super::registered`]: count residue, export, purge, rename and restore for one
//! alias. The stores of `warren-store` (chat and ACP sessions, cron with the control plane, SOP
//! runs) keep their adapters in that crate (`warren_store::agent_state::<store>`), working on the
//! handles a [`StoreContext`] lends them ([`StoreHandles`]), and join through [`InStore`]; the
//! memory store (`warren-memory`), the action window and the cost ledger (`warren-runtime`)
//! live in crates `warren-store` cannot depend on, so their shares stay here.
//!
//! Every method is idempotent: rename/purge of an alias with nothing left is a no-op, restore
//! skips what is already there.

use std::sync::{Arc, OnceLock};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use warren_config::schema::MemoryBackendKind;
use warren_config::{Config, InstallRoot};
use warren_core::AgentAlias;
use warren_memory::{MemoryEntry, MemoryError, MemoryStore, MemoryStores, MemoryVersion};
use warren_store::acp::{AcpError, AcpSessionStore};
pub use warren_store::agent_state::WorkspaceMove;
use warren_store::agent_state::{self, AgentState, StateCause, StoreHandles};
use warren_store::control_plane::ControlPlane;
use warren_store::cron::CronStore;
use warren_store::sessions::{ChatSessions, OpenError, SessionBackend, open_chat_sessions};
use warren_store::sop::SopStore;

use warren_runtime::actions::ActionWindow;
use warren_runtime::cost::{CostRecord, CostTracker, read_ledger};
use warren_runtime::host::AgentHost;
use warren_runtime::stores::Stores;

use super::store_error::scoped;
pub use super::store_error::{StoreCause, StoreError};

/// One store's share of an agent's state.
pub trait AgentStateStore: Send + Sync {
    /// Stable name: the archive file is `stores/<name>.json`.
    fn name(&self) -> &'static str;
    /// How many records `alias` still owns here (residue).
    fn count(&self, alias: &AgentAlias) -> Result<u64, StoreError>;
    /// Every record of `alias`, as JSON, with the count.
    fn export(&self, alias: &AgentAlias) -> Result<(u64, Value), StoreError>;
    /// Deletes every record of `alias`; returns how many.
    fn purge(&self, alias: &AgentAlias) -> Result<u64, StoreError>;
    /// Moves `from`'s records to `to`; returns how many.
    fn rename(
        &self,
        from: &AgentAlias,
        to: &AgentAlias,
        ws: &WorkspaceMove,
    ) -> Result<u64, StoreError>;
    /// Puts an export (made for `original`) back under `alias`; returns how many records.
    fn restore(
        &self,
        alias: &AgentAlias,
        original: &AgentAlias,
        data: Value,
        ws: &WorkspaceMove,
    ) -> Result<u64, StoreError>;
}

/// Where a lifecycle operation's stores come from (issue 14 §6): inside a running daemon, the
/// running generation's own handles, borrowed from its [`AgentHost`] (never a second SQLite
/// writer or a second JSONL import on the live files); without a daemon, opened once by this
/// process and shared by every operation of its [`super::Lifecycle`].
#[derive(Clone)]
pub enum StoreSource {
    Host(Arc<AgentHost>),
    Own(Arc<OwnStores>),
}

/// The stores a process without a daemon opens (lazily, once): its own [`Stores`] (control
/// plane, cron, SOP runs, action window, cost ledger) and the per-generation ones (memory, chat
/// and ACP sessions).
pub struct OwnStores {
    memory: MemoryStores,
    chat: OnceLock<Result<ChatSessions, Arc<OpenError>>>,
    acp: OnceLock<Result<Arc<AcpSessionStore>, Arc<AcpError>>>,
    stores: Arc<Stores>,
}

impl OwnStores {
    /// The per-generation stores of `root` over the process's `stores`.
    pub fn new(root: &InstallRoot, stores: Arc<Stores>) -> Self {
        Self {
            memory: MemoryStores::new(root.clone()),
            chat: OnceLock::new(),
            acp: OnceLock::new(),
            stores,
        }
    }
}

/// What the stores are opened from.
#[derive(Clone)]
pub struct StoreContext {
    pub root: InstallRoot,
    pub config: Arc<Config>,
    /// The agent's memory backend (captured before its config entry changed).
    pub memory_backend: MemoryBackendKind,
    pub handle: tokio::runtime::Handle,
    pub source: StoreSource,
}

impl StoreContext {
    /// The memory stores (the generation's, or this process's).
    pub fn memory(&self) -> &MemoryStores {
        match &self.source {
            StoreSource::Host(host) => host.memory_stores(),
            StoreSource::Own(own) => &own.memory,
        }
    }

    /// The process's store handles: the daemon's (the ones its scheduler, SOP engine and turns
    /// use: never a second connection inside the daemon), else this process's.
    pub fn stores(&self) -> &Stores {
        match &self.source {
            StoreSource::Host(host) => host.stores(),
            StoreSource::Own(own) => &own.stores,
        }
    }

    /// The `max_actions_per_hour` window (inside a daemon the one its turns admit through).
    pub fn actions(&self) -> &Arc<ActionWindow> {
        self.stores().actions()
    }

    /// The cost tracker (the daemon's keeps its in-memory totals in step with a rename).
    pub fn costs(&self) -> &CostTracker {
        self.stores().costs()
    }
}

/// The handles the adapters of `warren-store` work on: the generation's inside a daemon, this
/// process's otherwise (never opened by an adapter).
impl StoreHandles for StoreContext {
    fn root(&self) -> &InstallRoot {
        &self.root
    }

    /// The durable chat-session backend.
    fn chat(&self) -> Result<Arc<dyn SessionBackend>, StateCause> {
        let durable = |chat: &ChatSessions| match chat {
            ChatSessions::Durable(backend) => Ok(Arc::clone(backend)),
            ChatSessions::Disabled { reason, .. } => Err(StateCause::ChatNotDurable {
                reason: reason.clone(),
            }),
        };
        match &self.source {
            StoreSource::Host(host) => match &self.handle.block_on(host.open_sessions()).chat {
                Ok(chat) => durable(chat),
                Err(e) => Err(StateCause::DaemonChat(e.to_string())),
            },
            StoreSource::Own(own) => match own.chat.get_or_init(|| {
                open_chat_sessions(&self.root, &self.config.channels).map_err(Arc::new)
            }) {
                Ok(chat) => durable(chat),
                Err(e) => Err(StateCause::ChatOpen(Arc::clone(e))),
            },
        }
    }

    /// Runs `f` on the ACP session store.
    fn with_acp<T>(
        &self,
        f: impl FnOnce(&AcpSessionStore) -> Result<T, AcpError>,
    ) -> Result<T, StateCause> {
        match &self.source {
            StoreSource::Host(host) => match &self.handle.block_on(host.open_sessions()).acp {
                Some(store) => Ok(f(store)?),
                None => Err(StateCause::DaemonAcpClosed),
            },
            StoreSource::Own(own) => {
                let store = own
                    .acp
                    .get_or_init(|| {
                        AcpSessionStore::open(&self.root)
                            .map(Arc::new)
                            .map_err(Arc::new)
                    })
                    .clone()
                    .map_err(StateCause::AcpOpen)?;
                Ok(f(&store)?)
            }
        }
    }

    /// The cron store. `None` when there is no store and `create` is false.
    fn cron(&self, create: bool) -> Result<Option<Arc<CronStore>>, StateCause> {
        let stores = self.stores();
        Ok(if create {
            Some(stores.cron()?)
        } else {
            stores.cron_existing()?
        })
    }

    /// The control plane; `None` when there is none yet.
    fn control_plane(&self) -> Result<Option<Arc<ControlPlane>>, StateCause> {
        Ok(self.stores().control_plane_existing()?)
    }

    /// The SOP run store: the running engine's (durable or its in-memory fallback); `None`
    /// when there is none yet.
    fn sop_runs(&self) -> Result<Option<Arc<SopStore>>, StateCause> {
        Ok(self.stores().sop_runs()?)
    }
}

/// A share of a `warren-store` store ([`AgentState`]) in the cascade: its typed error, carried
/// whole.
pub(super) struct InStore<A>(pub(super) A);

impl<A: AgentState> AgentStateStore for InStore<A> {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn count(&self, alias: &AgentAlias) -> Result<u64, StoreError> {
        Ok(self.0.count(alias)?)
    }
    fn export(&self, alias: &AgentAlias) -> Result<(u64, Value), StoreError> {
        Ok(self.0.export(alias)?)
    }
    fn purge(&self, alias: &AgentAlias) -> Result<u64, StoreError> {
        Ok(self.0.purge(alias)?)
    }
    fn rename(
        &self,
        from: &AgentAlias,
        to: &AgentAlias,
        ws: &WorkspaceMove,
    ) -> Result<u64, StoreError> {
        Ok(self.0.rename(from, to, ws)?)
    }
    fn restore(
        &self,
        alias: &AgentAlias,
        original: &AgentAlias,
        data: Value,
        ws: &WorkspaceMove,
    ) -> Result<u64, StoreError> {
        Ok(self.0.restore(alias, original, data, ws)?)
    }
}

/// An export as archive JSON (the one encoding of `warren_store::agent_state`).
fn json<T: Serialize>(v: &T) -> Result<Value, StoreCause> {
    Ok(agent_state::json(v)?)
}

/// An archive's JSON back (the one decoding of `warren_store::agent_state`).
fn from_json<T: DeserializeOwned>(v: Value) -> Result<T, StoreCause> {
    Ok(agent_state::from_json(v)?)
}

// ---- memory (every backend) ------------------------------------------------------------------

pub(super) struct MemoryState {
    ctx: StoreContext,
    store: OnceLock<Result<Arc<dyn MemoryStore>, Arc<MemoryError>>>,
}

impl MemoryState {
    pub(super) fn new(ctx: StoreContext) -> Self {
        Self {
            ctx,
            store: OnceLock::new(),
        }
    }

    fn store(&self) -> Result<Arc<dyn MemoryStore>, StoreCause> {
        self.store
            .get_or_init(|| {
                self.ctx
                    .handle
                    .block_on(
                        self.ctx
                            .memory()
                            .store(&self.ctx.config, self.ctx.memory_backend),
                    )
                    .map_err(Arc::new)
            })
            .clone()
            .map_err(StoreCause::MemoryOpen)
    }

    fn block<T>(
        &self,
        f: impl std::future::Future<Output = Result<T, MemoryError>>,
    ) -> Result<T, StoreCause> {
        Ok(self.ctx.handle.block_on(f)?)
    }
}

impl AgentStateStore for MemoryState {
    fn name(&self) -> &'static str {
        "memory"
    }
    fn count(&self, alias: &AgentAlias) -> Result<u64, StoreError> {
        scoped(self.name(), alias, || {
            let store = self.store()?;
            match self.block(store.agent_id(alias, false))? {
                Some(id) => self.block(store.count_for_agent(id)),
                None => Ok(0),
            }
        })
    }
    fn export(&self, alias: &AgentAlias) -> Result<(u64, Value), StoreError> {
        scoped(self.name(), alias, || {
            let store = self.store()?;
            let (rows, history) = match self.block(store.agent_id(alias, false))? {
                Some(id) => (
                    self.block(store.export_agent(id.clone()))?,
                    // Earlier versions of each key travel with the rows (issue 20 §4).
                    self.block(store.export_history(id))?,
                ),
                None => (Vec::new(), Vec::new()),
            };
            Ok((
                rows.len() as u64,
                serde_json::json!({"backend": self.ctx.memory_backend, "rows": rows, "history": history}),
            ))
        })
    }
    fn purge(&self, alias: &AgentAlias) -> Result<u64, StoreError> {
        scoped(self.name(), alias, || {
            let store = self.store()?;
            match self.block(store.agent_id(alias, false))? {
                Some(id) => self.block(store.purge_agent(id)),
                None => Ok(0),
            }
        })
    }
    fn rename(
        &self,
        from: &AgentAlias,
        to: &AgentAlias,
        _: &WorkspaceMove,
    ) -> Result<u64, StoreError> {
        scoped(self.name(), from, || {
            let store = self.store()?;
            Ok(u64::from(
                self.block(store.rename_agent(from.clone(), to.clone()))?,
            ))
        })
    }
    fn restore(
        &self,
        alias: &AgentAlias,
        _: &AgentAlias,
        data: Value,
        _: &WorkspaceMove,
    ) -> Result<u64, StoreError> {
        #[derive(Deserialize)]
        struct Archived {
            rows: Vec<MemoryEntry>,
            /// Absent in archives made before versions were kept.
            #[serde(default)]
            history: Vec<MemoryVersion>,
        }
        scoped(self.name(), alias, || {
            let archived: Archived = from_json(data)?;
            let store = self.store()?;
            let n = self.block(store.import_agent(alias.clone(), archived.rows))?;
            self.block(store.import_history(alias.clone(), archived.history))?;
            Ok(n)
        })
    }
}

// ---- max_actions_per_hour window -------------------------------------------------------------

/// The agent's tool executions of the last hour (`data/state/actions.db`): rename moves them to
/// the new alias (it keeps its hour's count), delete archives and removes them, restore puts
/// back those still inside the hour. The window is [`StoreContext::actions`]: inside a daemon
/// the one its turns admit through; other processes share the file through SQLite's locks.
pub(super) struct ActionsState {
    window: Arc<ActionWindow>,
}

impl ActionsState {
    pub(super) fn new(ctx: StoreContext) -> Self {
        Self {
            window: Arc::clone(ctx.actions()),
        }
    }
}

impl AgentStateStore for ActionsState {
    fn name(&self) -> &'static str {
        "actions"
    }
    fn count(&self, alias: &AgentAlias) -> Result<u64, StoreError> {
        scoped(self.name(), alias, || {
            self.window.count(alias).map_err(StoreCause::Actions)
        })
    }
    fn export(&self, alias: &AgentAlias) -> Result<(u64, Value), StoreError> {
        scoped(self.name(), alias, || {
            let rows = self.window.rows(alias).map_err(StoreCause::Actions)?;
            Ok((rows.len() as u64, json(&rows)?))
        })
    }
    fn purge(&self, alias: &AgentAlias) -> Result<u64, StoreError> {
        scoped(self.name(), alias, || {
            self.window.purge(alias).map_err(StoreCause::Actions)
        })
    }
    fn rename(
        &self,
        from: &AgentAlias,
        to: &AgentAlias,
        _: &WorkspaceMove,
    ) -> Result<u64, StoreError> {
        scoped(self.name(), from, || {
            self.window.rename(from, to).map_err(StoreCause::Actions)
        })
    }
    fn restore(
        &self,
        alias: &AgentAlias,
        _: &AgentAlias,
        data: Value,
        _: &WorkspaceMove,
    ) -> Result<u64, StoreError> {
        scoped(self.name(), alias, || {
            let rows: Vec<i64> = from_json(data)?;
            self.window
                .restore(alias, &rows)
                .map_err(StoreCause::Actions)
        })
    }
}

// ---- cost ledger -----------------------------------------------------------------------------

/// The cost ledger is billing history: delete archives the agent's records and keeps the ledger
/// lines (spend limits keep counting them); rename rewrites the ledger so the new alias
/// inherits today's and this month's spend.
pub(super) struct CostState {
    ctx: StoreContext,
}

impl CostState {
    pub(super) fn new(ctx: StoreContext) -> Self {
        Self { ctx }
    }
    fn records(&self, alias: &AgentAlias) -> Vec<CostRecord> {
        read_ledger(&self.ctx.root.costs_ledger())
            .into_iter()
            .filter(|r| &r.agent == alias)
            .collect()
    }
}

impl AgentStateStore for CostState {
    fn name(&self) -> &'static str {
        "costs"
    }
    fn count(&self, alias: &AgentAlias) -> Result<u64, StoreError> {
        Ok(self.records(alias).len() as u64)
    }
    fn export(&self, alias: &AgentAlias) -> Result<(u64, Value), StoreError> {
        let rows = self.records(alias);
        scoped(self.name(), alias, || Ok((rows.len() as u64, json(&rows)?)))
    }
    fn purge(&self, _: &AgentAlias) -> Result<u64, StoreError> {
        Ok(0) // history is kept (see the type's docs)
    }
    fn rename(
        &self,
        from: &AgentAlias,
        to: &AgentAlias,
        _: &WorkspaceMove,
    ) -> Result<u64, StoreError> {
        scoped(self.name(), from, || {
            Ok(self.ctx.costs().rename_agent(from, to)?)
        })
    }
    fn restore(
        &self,
        _: &AgentAlias,
        _: &AgentAlias,
        _: Value,
        _: &WorkspaceMove,
    ) -> Result<u64, StoreError> {
        Ok(0) // delete kept the ledger lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use warren_config::ConfigStore;
    use warren_store::control_plane::Owner;
    use warren_store::sop::NewRun;

    fn alias(s: &str) -> AgentAlias {
        AgentAlias::new(s).unwrap_or_else(|e| panic!("{e}"))
    }

    /// How many descriptors this process holds on `db` (with its `-wal` and `-shm`).
    fn open_handles(db: &std::path::Path) -> usize {
        let prefix = db.display().to_string();
        std::fs::read_dir("/proc/self/fd")
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| std::fs::read_link(e.path()).ok())
                    .filter(|t| t.display().to_string().starts_with(&prefix))
                    .count()
            })
            .unwrap_or(0)
    }

    /// An install root whose config.toml is `config`, and a runtime of two workers to run a
    /// daemon's generation in.
    fn install(config: &str) -> (tempfile::TempDir, InstallRoot, tokio::runtime::Runtime) {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let root = InstallRoot::at(dir.path());
        std::fs::write(root.config_file(), config).unwrap_or_else(|e| panic!("{e}"));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        (dir, root, rt)
    }

    /// A daemon's generation host of `root` (it holds the stores a running daemon holds) and
    /// the config it loaded.
    fn generation(root: &InstallRoot) -> (Config, Arc<AgentHost>) {
        let store = ConfigStore::load(root.clone()).unwrap_or_else(|e| panic!("{e}"));
        let snapshot = store.snapshot();
        let config = snapshot.config().clone();
        let process = Arc::new(
            warren_runtime::ProcessServices::new(root, &config).unwrap_or_else(|e| panic!("{e}")),
        );
        (config, Arc::new(AgentHost::new(root, snapshot, process)))
    }

    /// The stores of a lifecycle operation inside the daemon of `host` (on its runtime).
    fn in_daemon(root: &InstallRoot, config: Config, host: &Arc<AgentHost>) -> StoreContext {
        StoreContext {
            root: root.clone(),
            config: Arc::new(config),
            memory_backend: MemoryBackendKind::None,
            handle: tokio::runtime::Handle::current(),
            source: StoreSource::Host(Arc::clone(host)),
        }
    }

    /// Issue 14 §6: inside a daemon, the `max_actions_per_hour` share of a rename works through
    /// the window the generation's turns admit through: while the cascade's stores are alive
    /// (the rename done), the process holds exactly the descriptors on `actions.db` it held
    /// before (the old way opened a second connection of its own). Without a daemon, every
    /// operation of one `Lifecycle` shares one window.
    #[test]
    fn inside_a_daemon_the_actions_share_borrows_the_hosts_window_issue14() {
        let (_dir, root, rt) = install("[agents.b]\n[agents.b.memory]\nbackend = \"none\"\n");
        rt.block_on(async {
            let (b, bee) = (alias("b"), alias("bee"));
            let (config, host) = generation(&root);
            // A turn's tool call opened the generation's window.
            host.actions()
                .admit(&b, 10)
                .unwrap_or_else(|e| panic!("{e}"));
            let db = warren_runtime::actions::actions_db(&root);
            let before = open_handles(&db);
            assert!(before > 0, "the host's window is open");

            let ctx = in_daemon(&root, config, &host);
            let (b2, bee2) = (b.clone(), bee.clone());
            let during = tokio::task::spawn_blocking(move || {
                let shares = crate::lifecycle::registered(&ctx);
                let ws = WorkspaceMove {
                    from: PathBuf::from("/b"),
                    to: PathBuf::from("/bee"),
                };
                let moved: Vec<u64> = shares
                    .iter()
                    .filter(|s| s.name() == "actions")
                    .map(|s| s.rename(&b2, &bee2, &ws).unwrap_or_else(|e| panic!("{e}")))
                    .collect();
                assert_eq!(moved, vec![1], "the action moved to the new alias");
                let during = open_handles(&db);
                drop(shares);
                during
            })
            .await
            .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                during, before,
                "descriptors on actions.db while the rename's stores were alive"
            );
            assert_eq!(
                (host.actions().count(&b), host.actions().count(&bee)),
                (Ok(0), Ok(1)),
                "the host's window sees the moved action"
            );
        });

        // Without a daemon: one window for every operation of the process's stores.
        let own = StoreSource::Own(Arc::new(OwnStores::new(
            &root,
            Arc::new(Stores::new(&root, &Config::default())),
        )));
        let ctx = |source: StoreSource| StoreContext {
            root: root.clone(),
            config: Arc::new(Config::default()),
            memory_backend: MemoryBackendKind::None,
            handle: rt.handle().clone(),
            source,
        };
        assert!(Arc::ptr_eq(ctx(own.clone()).actions(), ctx(own).actions()));
    }

    /// Issue 14 §6: inside a daemon, the cron, control-plane and SOP shares of a lifecycle
    /// operation work on the running scheduler's and engine's own stores, never a second
    /// connection. With SOP runs kept in memory (`durable_runs = false`) a rename repoints
    /// those runs too: a store opened from disk (the old way) never sees them.
    #[test]
    fn inside_a_daemon_cron_and_sop_shares_borrow_the_running_stores_issue14() {
        let (_dir, root, rt) = install(
            "[agents.b]\n[agents.b.memory]\nbackend = \"none\"\n\n[sop]\ndurable_runs = false\n",
        );
        rt.block_on(async {
            let (b, bee) = (alias("b"), alias("bee"));
            let (config, host) = generation(&root);
            let scheduler = warren_jobs::cron::Scheduler::open(&root, Arc::clone(&host))
                .unwrap_or_else(|e| panic!("{e}"));
            let engine = warren_jobs::sop::Engine::open(&root, Arc::clone(&host))
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(engine.fallback().is_some(), "runs are kept in memory");

            let job = warren_jobs::cron::JobSpec {
                every: Some("1h".into()),
                message: Some("hi".into()),
                ..warren_jobs::cron::JobSpec::new("nightly", b.clone())
            }
            .into_job(&config, "runtime")
            .unwrap_or_else(|e| panic!("{e}"));
            scheduler
                .store()
                .insert(&job)
                .unwrap_or_else(|e| panic!("{e}"));
            scheduler
                .control()
                .register("dlg-1", "delegate", &b, "x", &Owner::current())
                .unwrap_or_else(|e| panic!("{e}"));
            let json = serde_json::json!({});
            engine
                .store()
                .start(
                    &NewRun {
                        id: "sop-1",
                        sop: "triage",
                        agent: &b,
                        trigger: "manual",
                        input: &json,
                        definition: &json,
                        max_for_sop: 1,
                        max_global: 1,
                        lease_ms: 60_000,
                    },
                    &Owner::current(),
                )
                .unwrap_or_else(|e| panic!("{e}"));

            let ctx = in_daemon(&root, config, &host);
            let (s, e) = (Arc::clone(&scheduler), Arc::clone(&engine));
            tokio::task::spawn_blocking(move || {
                let borrowed = |what: &str, same: bool| assert!(same, "{what} is not borrowed");
                fn got<T>(r: Result<Option<Arc<T>>, StateCause>) -> Arc<T> {
                    r.unwrap_or_else(|e| panic!("{e}"))
                        .unwrap_or_else(|| panic!("no store"))
                }
                borrowed("cron", Arc::ptr_eq(&got(ctx.cron(false)), s.store()));
                borrowed(
                    "control plane",
                    Arc::ptr_eq(&got(ctx.control_plane()), s.control()),
                );
                borrowed("sop runs", Arc::ptr_eq(&got(ctx.sop_runs()), e.store()));
                let ws = WorkspaceMove {
                    from: PathBuf::from("/b"),
                    to: PathBuf::from("/bee"),
                };
                let mut moved = std::collections::BTreeMap::new();
                for share in crate::lifecycle::registered(&ctx) {
                    if ["cron", "sop"].contains(&share.name()) {
                        let n = share
                            .rename(&alias("b"), &alias("bee"), &ws)
                            .unwrap_or_else(|e| panic!("{e}"));
                        moved.insert(share.name(), n);
                    }
                }
                assert_eq!(
                    moved,
                    std::collections::BTreeMap::from([("cron", 1), ("sop", 1)])
                );
            })
            .await
            .unwrap_or_else(|e| panic!("{e}"));

            assert_eq!(
                vec![
                    scheduler
                        .store()
                        .get("nightly")
                        .ok()
                        .flatten()
                        .map(|j| j.agent)
                        .unwrap_or_else(|| panic!("job gone")),
                    scheduler
                        .control()
                        .get("dlg-1")
                        .ok()
                        .flatten()
                        .map(|r| r.agent)
                        .unwrap_or_else(|| panic!("run gone")),
                    engine
                        .store()
                        .get("sop-1")
                        .ok()
                        .flatten()
                        .map(|r| r.agent)
                        .unwrap_or_else(|| panic!("sop run gone")),
                ],
                vec![bee.clone(), bee.clone(), bee],
                "the job, the control-plane run and the in-memory SOP run follow the rename"
            );
        });
    }
}
