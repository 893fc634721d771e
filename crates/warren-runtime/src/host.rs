//! The agents of one generation (STATE-18, STATE-19) and the runtime's ONE turn door
//! (LOOP-1, SESS-1, SESS-2). [`AgentHost`] holds what turns need — the generation's config, its
//! session stores (opened lazily, after the gateway listens), the `SessionActorQueue`, the
//! runtime trace and each agent's runner (resolved once, on first use) — plus the process-wide
//! [`ProcessServices`]: the HTTP approvals, the receipt key and the cost tracker, whose rates
//! and limits are swapped on every reload while the ledger keeps each old record's own rate.
//!
//! Every entry point (`warren agent`, the gateway's chat; later cron, ACP, channels) runs a turn
//! through [`AgentHost::submit`]: it resolves the agent, derives the default session key per
//! channel and agent (namespaced by agent, issue 35 §7: [`crate::session_keys`]), takes the
//! session's queue slot, refuses a session another agent owns or another agent's default key
//! not created yet (before anything of it is loaded), and runs the turn, reporting its events. The daemon's
//! generations and a one-process CLI run build their host the same way ([`AgentHost::new`],
//! [`AgentHost::for_process`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::OnceCell;
use warren_config::{InstallRoot, Snapshot};
use warren_core::{AgentAlias, SessionKey};
use warren_memory::MemoryStores;
use warren_store::sessions::{SessionActorQueue, SessionHandle};

use crate::actions::ActionWindow;
use crate::approval::Approver;
use crate::cancel::CancelToken;
use crate::cost::CostTracker;
use crate::pending::PendingApprovals;
use crate::receipts::ReceiptKey;
use crate::sessions::SessionStores;
use crate::stores::Stores;
use crate::trace::Trace;
use crate::turn::{AgentRunner, Channel, Services, TurnError, TurnEvents, TurnIo, TurnOutcome};

/// Services that live for the whole process (not rebuilt on reload).
#[derive(Debug)]
pub struct ProcessServices {
    pub approvals: Arc<PendingApprovals>,
    pub receipts: Arc<ReceiptKey>,
    /// The process's store handles (control plane, cron, SOP runs, the `max_actions_per_hour`
    /// window, the cost ledger), each opened once and borrowed.
    pub stores: Arc<Stores>,
}

impl ProcessServices {
    /// A fresh receipt key (STATE-20), the stores of `root` and no pending approvals.
    pub fn new(
        root: &InstallRoot,
        config: &warren_config::Config,
    ) -> Result<Self, getrandom::Error> {
        Ok(Self {
            approvals: Arc::new(PendingApprovals::new()),
            receipts: Arc::new(ReceiptKey::generate()?),
            stores: Arc::new(Stores::new(root, config)),
        })
    }

    /// A fresh receipt key and no pending approvals, on the process's `stores` (a CLI process
    /// opens its stores once and hands them to every run it starts).
    pub fn with_stores(stores: Arc<Stores>) -> Result<Self, getrandom::Error> {
        Ok(Self {
            approvals: Arc::new(PendingApprovals::new()),
            receipts: Arc::new(ReceiptKey::generate()?),
            stores,
        })
    }
}

/// The door builds each generation's [`Services`] from the process's.
impl Services {
    /// `process`'s receipt key and cost tracker with the trace `config` sets up for `root`.
    pub fn for_generation(
        process: &ProcessServices,
        root: &InstallRoot,
        config: &warren_config::Config,
    ) -> Self {
        Self {
            receipts: Arc::clone(&process.receipts),
            costs: Arc::clone(process.stores.costs()),
            trace: Arc::new(Trace::new(root, config)),
            actions: Arc::clone(process.stores.actions()),
            stores: Arc::clone(&process.stores),
        }
    }
}

/// The session queue `[channels] session_queue_depth` and `session_queue_timeout_secs` set
/// (SESS-2).
pub fn session_queue(channels: &warren_config::schema::ChannelsConfig) -> SessionActorQueue {
    SessionActorQueue::new(
        channels.session_queue_depth,
        Duration::from_secs(channels.session_queue_timeout_secs),
    )
}

/// Where the chat sessions of a generation stand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionsHealth {
    /// Not opened yet (they open right after the gateway listens).
    Starting,
    Ok {
        backend: &'static str,
        durable: bool,
        /// Legacy JSONL files left out of the import, each with what to do (issue 15 §7).
        skipped: Vec<String>,
    },
    Error(String),
}

type RunnerCell = Arc<OnceCell<Arc<AgentRunner>>>;

/// The agents of one generation.
pub struct AgentHost {
    root: InstallRoot,
    snapshot: Arc<Snapshot>,
    process: Arc<ProcessServices>,
    services: Arc<Services>,
    memory: MemoryStores,
    sessions: OnceCell<SessionStores>,
    queue: SessionActorQueue,
    runners: Mutex<HashMap<AgentAlias, RunnerCell>>,
    /// Cancels every turn of this generation (after the reload grace).
    cancel: CancelToken,
    /// Whether the ACP session store opens with the chat sessions (the daemon's hosts).
    with_acp: bool,
}

/// One turn submitted at the door.
pub struct TurnRequest {
    pub agent: AgentAlias,
    /// `None` = the channel's default session of `agent` ([`AgentHost::default_session`]).
    pub session: Option<SessionKey>,
    pub channel: Channel,
    /// The user's message.
    pub input: String,
    /// The most output tokens each provider request of the turn may ask for (an OpenAI
    /// client's `max_tokens`); `None` = the provider's own limit.
    pub max_output_tokens: Option<u32>,
    /// Who decides the turn's approvals (the terminal, the HTTP approvals, `DenyAll`).
    pub approver: Arc<dyn Approver>,
    /// Cancels this turn; the generation's own cancel (after a reload's grace) stops it too.
    pub cancel: CancelToken,
    /// Where the turn's events go as they happen, in order (see [`event_channel`] for a
    /// stream).
    pub events: TurnEvents,
}

impl std::fmt::Debug for TurnRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnRequest")
            .field("agent", &self.agent)
            .field("session", &self.session)
            .field("channel", &self.channel)
            .finish_non_exhaustive()
    }
}

/// A turn admitted at the door and running (on its own task: it finishes, and the session
/// keeps it, even if the caller goes away).
#[derive(Debug)]
pub struct Turn {
    agent: AgentAlias,
    session: SessionKey,
    done: tokio::task::JoinHandle<Result<TurnOutcome, TurnError>>,
}

impl Turn {
    pub fn agent(&self) -> &AgentAlias {
        &self.agent
    }

    /// The session the turn runs in (the derived default when none was asked for).
    pub fn session(&self) -> &SessionKey {
        &self.session
    }

    /// Waits for the turn's end.
    pub async fn finish(self) -> Result<TurnOutcome, TurnError> {
        self.done
            .await
            .map_err(|e| TurnError::Task(e.to_string()))?
    }
}

/// Turn events as a stream: the sink for [`TurnRequest::events`] and its receiving end, which
/// ends once the turn is over and every copy of the sink is gone.
pub fn event_channel() -> (
    TurnEvents,
    tokio::sync::mpsc::UnboundedReceiver<crate::TurnEvent>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    (
        Arc::new(move |event| {
            let _ = tx.send(event);
        }),
        rx,
    )
}

impl std::fmt::Debug for AgentHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentHost")
            .field("generation", &self.snapshot.generation())
            .finish_non_exhaustive()
    }
}

impl AgentHost {
    /// The host of the daemon's generation `snapshot`; swaps the cost rates to this
    /// generation's.
    pub fn new(root: &InstallRoot, snapshot: Arc<Snapshot>, process: Arc<ProcessServices>) -> Self {
        Self::build(root, snapshot, process, true)
    }

    /// The host of a one-process run (`warren agent`): fresh process services (STATE-20: a new
    /// receipt key per process) and no ACP store.
    pub fn for_process(
        root: &InstallRoot,
        snapshot: Arc<Snapshot>,
    ) -> Result<Self, getrandom::Error> {
        let process = Arc::new(ProcessServices::new(root, snapshot.config())?);
        Ok(Self::build(root, snapshot, process, false))
    }

    /// [`Self::for_process`] on the process's one `stores` (`warren cron run`, `warren sop
    /// run` without a daemon): no second handle on the control plane, cron or SOP stores.
    pub fn for_process_with(
        root: &InstallRoot,
        snapshot: Arc<Snapshot>,
        stores: Arc<Stores>,
    ) -> Result<Self, getrandom::Error> {
        let process = Arc::new(ProcessServices::with_stores(stores)?);
        Ok(Self::build(root, snapshot, process, false))
    }

    fn build(
        root: &InstallRoot,
        snapshot: Arc<Snapshot>,
        process: Arc<ProcessServices>,
        with_acp: bool,
    ) -> Self {
        // STATE-14: new requests are priced at the new rates and checked against the new
        // limits; old records keep their rates.
        process.stores.costs().apply(&snapshot.cost);
        let queue = session_queue(&snapshot.channels);
        let services = Arc::new(Services::for_generation(&process, root, snapshot.config()));
        Self {
            root: root.clone(),
            snapshot,
            process,
            services,
            memory: MemoryStores::new(root.clone()),
            sessions: OnceCell::new(),
            queue,
            runners: Mutex::new(HashMap::new()),
            cancel: CancelToken::new(),
            with_acp,
        }
    }

    pub fn snapshot(&self) -> &Arc<Snapshot> {
        &self.snapshot
    }

    /// The install root (agent workspaces, data directories).
    pub fn root(&self) -> &InstallRoot {
        &self.root
    }

    pub fn approvals(&self) -> &Arc<PendingApprovals> {
        &self.process.approvals
    }

    pub fn trace(&self) -> &Arc<Trace> {
        &self.services.trace
    }

    /// The process's store handles (borrowed by cron, SOP, lifecycle, the gateway).
    pub fn stores(&self) -> &Arc<Stores> {
        &self.process.stores
    }

    /// The process's cost tracker (rates of this generation).
    pub fn costs(&self) -> &Arc<CostTracker> {
        self.process.stores.costs()
    }

    /// The process's `max_actions_per_hour` window (its turns, cron and SOP tool calls count
    /// in it; a lifecycle operation moves the agent's rows through it).
    pub fn actions(&self) -> &Arc<ActionWindow> {
        self.process.stores.actions()
    }

    pub fn memory_stores(&self) -> &MemoryStores {
        &self.memory
    }

    pub fn queue(&self) -> &SessionActorQueue {
        &self.queue
    }

    /// The generation's cancel token (every turn of the generation listens to it).
    pub fn cancel_token(&self) -> &CancelToken {
        &self.cancel
    }

    /// Cancels the turns still running (the reload grace has passed).
    pub fn cancel_turns(&self) {
        self.cancel.cancel();
    }

    /// Opens the session stores if not yet open (the daemon calls it right after the gateway
    /// listens; a chat waits for it).
    pub async fn open_sessions(&self) -> &SessionStores {
        self.sessions
            .get_or_init(|| {
                crate::sessions::open(&self.root, &self.snapshot.channels, self.with_acp)
            })
            .await
    }

    /// The chat sessions, or why they are unavailable this generation.
    pub async fn chat_sessions(&self) -> Result<SessionHandle, crate::sessions::ChatUnavailable> {
        match &self.open_sessions().await.chat {
            Ok(chat) => Ok(SessionHandle::new(Arc::clone(chat.backend()))),
            Err(e) => Err(e.clone()),
        }
    }

    pub fn sessions_health(&self) -> SessionsHealth {
        match self.sessions.get() {
            None => SessionsHealth::Starting,
            Some(SessionStores {
                chat: Ok(c),
                skipped,
                ..
            }) => SessionsHealth::Ok {
                backend: c.backend().kind(),
                durable: c.is_durable(),
                skipped: skipped.clone(),
            },
            Some(SessionStores { chat: Err(e), .. }) => SessionsHealth::Error(e.to_string()),
        }
    }

    /// Tries the stores a damaged file would otherwise hide until their first use (the
    /// process's stores whose file exists, and the SQLite memory store when an agent uses it),
    /// so [`Self::store_faults`] reports them from the start (issue 36 §1). Creates nothing.
    pub async fn probe_stores(&self) {
        let stores = Arc::clone(&self.process.stores);
        let _ = tokio::task::spawn_blocking(move || stores.probe()).await;
        let config = self.snapshot.config();
        let uses_sqlite = config.agents().any(|(_, agent)| {
            matches!(
                config.memory_backend_of(agent),
                warren_config::schema::MemoryBackendKind::Sqlite
                    | warren_config::schema::MemoryBackendKind::Lucid
            )
        });
        if uses_sqlite
            && warren_memory::sqlite_store_exists(&self.root)
            && let Err(e) = self.memory.sqlite(config).await
        {
            tracing::error!(
                "memory is unavailable this generation (the other subsystems run on): {e}"
            );
        }
    }

    /// Every store of this generation and of the process that would not open, by name, file
    /// and error (issue 36 §1): the process's ([`Stores::faults`]), the chat and ACP session
    /// stores, and the SQLite memory store. What `/api/health` reports as degraded.
    pub fn store_faults(&self) -> Vec<crate::stores::StoreFault> {
        use crate::stores::StoreFault;
        let mut faults = self.process.stores.faults();
        if let Some(opened) = self.sessions.get() {
            if let Err(e) = &opened.chat {
                let file = match self.snapshot.channels.session_backend {
                    warren_config::schema::SessionBackendKind::Jsonl => self.root.sessions_dir(),
                    warren_config::schema::SessionBackendKind::Sqlite => self.root.sessions_db(),
                };
                faults.push(StoreFault::new("sessions", &file, e));
            }
            if let Some(e) = &opened.acp_error {
                faults.push(StoreFault::new(
                    "acp_sessions",
                    &self.root.acp_sessions_db(),
                    e,
                ));
            }
        }
        if let Some(e) = self.memory.sqlite_error() {
            faults.push(StoreFault::new("memory", &self.root.memory_db(), e));
        }
        faults
    }

    /// Whether the chat sessions of this host survive the process (`None` until opened).
    pub fn sessions_durable(&self) -> Option<bool> {
        match self.sessions.get()?.chat.as_ref() {
            Ok(chat) => Some(chat.is_durable()),
            Err(_) => None,
        }
    }

    /// THE turn door (LOOP-1, SESS-1, SESS-2): resolves `request.agent` (once per generation),
    /// derives the default session key of its channel, takes the session's queue slot, claims
    /// the session for the agent (refusing one another agent owns, before anything of it is
    /// loaded) and starts the turn. Errors before the turn starts are returned here (unknown
    /// agent, sessions unavailable, queue full or timed out, session owned by another agent);
    /// the turn's own end comes from [`Turn::finish`].
    pub async fn submit(self: &Arc<Self>, request: TurnRequest) -> Result<Turn, TurnError> {
        let TurnRequest {
            agent,
            session,
            channel,
            input,
            max_output_tokens,
            approver,
            cancel,
            events,
        } = request;
        let runner = self.runner(&agent).await?;
        let sessions = self
            .chat_sessions()
            .await
            .map_err(TurnError::SessionsUnavailable)?;
        let key = match session {
            Some(key) => key,
            None => crate::session_keys::resolve_default(&sessions, channel, &agent).await?,
        };
        // Issue 35 §7: another agent's default key is never created by this one.
        let reserved =
            crate::session_keys::reserved_for(&key, |a| self.snapshot.agent(a).is_some());
        // SESS-2: the session's slot first, then the claim (decided under the slot).
        let queued = crate::metrics::queued(runner.alias().as_str());
        let slot = self.queue.acquire(&key).await?;
        let claimed = crate::sessions::claim_reserved(
            &sessions,
            &key,
            runner.alias(),
            channel.label(),
            reserved,
        )
        .await?;
        let host = Arc::clone(self);
        // The submitter's tool context (an editor's files, a session mode's autonomy cap) is
        // the turn's (`warren_tools::ToolContext`).
        let mut context = warren_tools::ToolContext::current();
        context.channel = Some(channel.label()); // memory provenance (issue 20 §3)
        // So is the submitter's taint marker (issue 38): a channel that submits a stranger's
        // message marks it untrusted first (`Taint::scope` + `Taint::mark`), and the turn's
        // calls with side effects then need approval (the taint rule, issue 24 §4).
        // And the submitter's attachments (issue 38 §5: a photo sent to a channel).
        let done = tokio::spawn(crate::attachments::Attachments::carry(
            crate::turn::taint::Taint::carry(context.scope(async move {
                // The generation's cancel (a reload's grace passed) stops the turn too.
                let generation = host.cancel.clone();
                let turn_cancel = cancel.clone();
                let watch = tokio::spawn(async move {
                    generation.cancelled().await;
                    turn_cancel.cancel();
                });
                let io = TurnIo {
                    max_output_tokens,
                    approver,
                    cancel,
                    events,
                };
                // A repeated input a failed turn left unanswered is not stored twice.
                let sessions = crate::sessions::for_turn(&sessions, claimed.key(), &input);
                let chat = runner.chat(&sessions, &claimed, &input, &io);
                let (alias, label) = (runner.alias().as_str(), channel.label());
                let result =
                    crate::telemetry::turn(alias, runner.model(), label, &input, chat).await;
                watch.abort();
                drop((slot, queued));
                drop(host); // the generation's stores live until the turn ends
                result
            })),
        ));
        Ok(Turn {
            agent,
            session: key,
            done,
        })
    }

    /// The session a turn of `agent` on `channel` runs in when it names none: its legacy
    /// default (`cli-<alias>`) when that row exists and `agent` owns it, else its namespaced
    /// default (`Agent-<alias>-cli`; issue 35 §7, [`crate::session_keys`]).
    pub async fn default_session(
        &self,
        channel: Channel,
        agent: &AgentAlias,
    ) -> Result<SessionKey, TurnError> {
        let sessions = self
            .chat_sessions()
            .await
            .map_err(TurnError::SessionsUnavailable)?;
        Ok(crate::session_keys::resolve_default(&sessions, channel, agent).await?)
    }

    /// Resolves (in the background) every agent of this generation that has an `eager` MCP
    /// server, which starts those servers (issue 23).
    pub fn start_eager_mcp(self: &Arc<Self>) {
        let eager: Vec<AgentAlias> = self
            .snapshot
            .config()
            .agents()
            .filter(|(_, a)| a.mcp.servers.values().any(|s| s.eager))
            .map(|(alias, _)| alias)
            .collect();
        if eager.is_empty() {
            return;
        }
        let host = Arc::clone(self);
        tokio::spawn(async move {
            for alias in eager {
                if let Err(e) = host.runner(&alias).await {
                    tracing::warn!(agent = %alias, "eager MCP servers not started: {e}");
                }
            }
        });
    }

    /// The runner of `alias`, resolved on first use (a failed build is retried next time).
    pub async fn runner(&self, alias: &AgentAlias) -> Result<Arc<AgentRunner>, TurnError> {
        if self.snapshot.agent(alias).is_none() {
            return Err(TurnError::UnknownAgent {
                alias: alias.to_string(),
            });
        }
        let cell = {
            let mut runners = self.runners.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(runners.entry(alias.clone()).or_default())
        };
        cell.get_or_try_init(|| async {
            AgentRunner::build(
                self.snapshot.config(),
                &self.root,
                alias,
                &self.memory,
                Arc::clone(&self.services),
            )
            .await
            .map(Arc::new)
        })
        .await
        .cloned()
    }
}
