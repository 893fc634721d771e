//! The agents of one daemon generation (STATE-18, STATE-19): [`AgentHost`] holds what the turn
//! loop needs to serve chats over the gateway — the generation's config, its session stores
//! (opened lazily, after the gateway listens), the `SessionActorQueue`, the runtime trace and
//! each agent's runner (built on first use) — plus the process-wide [`ProcessServices`]: the
//! HTTP approvals, the receipt key and the cost tracker, whose rates and limits are swapped on every
//! reload while the ledger keeps each old record's own rate.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::OnceCell;
use warren_config::{InstallRoot, Snapshot};
use warren_core::AgentAlias;
use warren_memory::MemoryStores;
use warren_store::sessions::{SessionActorQueue, SessionHandle};

use crate::approval::Approver;
use crate::cancel::CancelToken;
use crate::cost::CostTracker;
use crate::pending::PendingApprovals;
use crate::receipts::ReceiptKey;
use crate::sessions::SessionStores;
use crate::trace::Trace;
use crate::turn::{AgentRunner, Services, TurnError};

/// Services that live for the whole process (not rebuilt on reload).
#[derive(Debug)]
pub struct ProcessServices {
    pub approvals: Arc<PendingApprovals>,
    pub receipts: Arc<ReceiptKey>,
    pub costs: Arc<CostTracker>,
}

impl ProcessServices {
    /// A fresh receipt key (STATE-20), the cost ledger of `root` and no pending approvals.
    pub fn new(
        root: &InstallRoot,
        config: &warren_config::Config,
    ) -> Result<Self, getrandom::Error> {
        Ok(Self {
            approvals: Arc::new(PendingApprovals::new()),
            receipts: Arc::new(ReceiptKey::generate()?),
            costs: Arc::new(CostTracker::open(root.costs_ledger(), &config.cost)),
        })
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
}

impl std::fmt::Debug for AgentHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentHost")
            .field("generation", &self.snapshot.generation())
            .finish_non_exhaustive()
    }
}

impl AgentHost {
    /// The host of the generation `snapshot`; swaps the cost rates to this generation's.
    pub fn new(root: &InstallRoot, snapshot: Arc<Snapshot>, process: Arc<ProcessServices>) -> Self {
        // STATE-14: new requests are priced at the new rates and checked against the new
        // limits; old records keep their rates.
        process.costs.apply(&snapshot.cost);
        let queue = session_queue(&snapshot.channels);
        let approver: Arc<dyn Approver> = process.approvals.clone();
        let services = Arc::new(Services {
            approver,
            receipts: Arc::clone(&process.receipts),
            costs: Arc::clone(&process.costs),
            trace: Arc::new(Trace::new(root, snapshot.config())),
        });
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
        }
    }

    pub fn snapshot(&self) -> &Arc<Snapshot> {
        &self.snapshot
    }

    pub fn approvals(&self) -> &Arc<PendingApprovals> {
        &self.process.approvals
    }

    pub fn trace(&self) -> &Arc<Trace> {
        &self.services.trace
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
            .get_or_init(|| crate::sessions::open(&self.root, &self.snapshot.channels))
            .await
    }

    /// The chat sessions, or why they are unavailable this generation.
    pub async fn chat_sessions(&self) -> Result<SessionHandle, String> {
        match &self.open_sessions().await.chat {
            Some(chat) => Ok(SessionHandle::new(Arc::clone(chat.backend()))),
            None => Err(
                "chat sessions could not be opened this generation (see the daemon log; fix and reload)"
                    .to_string(),
            ),
        }
    }

    pub fn sessions_health(&self) -> SessionsHealth {
        match self.sessions.get() {
            None => SessionsHealth::Starting,
            Some(SessionStores { chat: Some(c), .. }) => SessionsHealth::Ok {
                backend: c.backend().kind(),
                durable: c.is_durable(),
            },
            Some(_) => SessionsHealth::Error(
                "chat sessions could not be opened (see the daemon log)".to_string(),
            ),
        }
    }

    /// The runner of `alias`, built on first use (a failed build is retried next time).
    pub async fn runner(&self, alias: &AgentAlias) -> Result<Arc<AgentRunner>, TurnError> {
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
