//! One MCP server of one agent: its process (started through the agent's sandbox), the
//! `rmcp` client session over the process's stdin/stdout, its cached tool list, and the
//! supervisor task that restarts it with backoff. A `url` server has no process: its session
//! runs over the streamable HTTP transport (`super::http`) through the agent's egress, under
//! the same supervisor.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::service::{NotificationContext, Peer, RoleClient};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{Notify, watch};
use warren_config::redact::Redactor;
use warren_security::sandbox::{ChildIo, Sandbox};

use super::tool::McpTool;
use super::{McpEvent, McpEvents, McpServerSpec};
use crate::HttpEgress;
use crate::shell::GroupKill;
use crate::tool::Tool;

/// Longest stderr line kept for the trace, in characters.
const MAX_STDERR_LINE: usize = 2000;
/// First restart delay; doubled per failed start, capped at [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A server that ran this long before dying restarts from the first delay again.
const HEALTHY_RUN: Duration = Duration::from_secs(30);

/// Where a server stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerState {
    /// Configured, not started yet (it starts with the agent's first turn, or `eager`).
    NotStarted,
    Starting,
    Running,
    /// It died or could not start; the supervisor tries again at `retry_at`.
    Down,
    Stopped,
    /// A `url` server without an egress to reach it through.
    Unsupported,
}

/// A server's state for `warren mcp list` and the API.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerStatus {
    pub name: String,
    pub state: ServerState,
    pub transport: &'static str,
    pub pid: Option<u32>,
    /// The agent-facing tool names (`mcp__<server>__<tool>`).
    pub tools: Vec<String>,
    pub restarts: u64,
    pub last_error: Option<String>,
    /// Seconds until the next start attempt (state `down`).
    pub retry_in_secs: Option<f64>,
}

/// Why an MCP server has no session to call (shown to the model by its tools).
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum NoSession {
    #[error("MCP server '{server}' has not started")]
    NotStarted { server: String },
    #[error("MCP server '{server}' is starting; try again shortly")]
    Starting { server: String },
    #[error("MCP server '{server}' is restarting after it failed ({error}); try again shortly")]
    Restarting { server: String, error: String },
    #[error("MCP server '{server}' is down ({error}); it is restarted in {retry_in_secs:.1}s")]
    Down {
        server: String,
        error: String,
        retry_in_secs: f64,
    },
    #[error("MCP server '{server}' was stopped")]
    Stopped { server: String },
}

/// Why one start of an MCP server failed (its text becomes the server's `last_error`).
#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error("MCP server '{server}' has no command")]
    NoCommand { server: String },
    #[error("cannot start MCP server '{server}': {source}")]
    Sandbox {
        server: String,
        source: warren_security::sandbox::SandboxError,
    },
    #[error("cannot start MCP server '{server}': {source}")]
    Join {
        server: String,
        source: tokio::task::JoinError,
    },
    #[error("MCP server '{server}': its stdio is unavailable")]
    NoStdio { server: String },
    #[error("MCP server '{server}': {source}")]
    Pipe {
        server: String,
        source: std::io::Error,
    },
    /// `reason`: the server's words, redacted.
    #[error("MCP server '{server}' failed to initialize: {reason}")]
    Initialize { server: String, reason: String },
    #[error("MCP server '{server}' did not answer initialize within {secs}s")]
    InitializeTimeout { server: String, secs: u64 },
    #[error("MCP server '{server}': tools/list failed: {reason}")]
    ListTools { server: String, reason: String },
    #[error("MCP server '{server}' did not list its tools within {secs}s")]
    ListToolsTimeout { server: String, secs: u64 },
}

enum State {
    Idle,
    /// `after`: why the previous start ended, when this is a restart.
    Starting {
        after: Option<String>,
    },
    /// `pid` is `None` for a `url` server.
    Running {
        peer: Peer<RoleClient>,
        pid: Option<u32>,
    },
    Down {
        error: String,
        retry_at: Instant,
    },
    Stopped,
}

pub(crate) struct Server {
    alias: String,
    spec: McpServerSpec,
    sandbox: Sandbox,
    http: Option<Arc<dyn HttpEgress>>,
    redactor: Arc<Redactor>,
    events: Arc<Mutex<McpEvents>>,
    state: Mutex<State>,
    /// The last tool list (kept while the server is down, so a call names the outage).
    tools: Mutex<Vec<Arc<dyn Tool>>>,
    changed: Notify,
    stop_tx: watch::Sender<bool>,
    supervised: AtomicBool,
    dirty: Arc<AtomicBool>,
    generation: Arc<AtomicU64>,
    restarts: AtomicU64,
    me: Weak<Server>,
}

/// The running process (none for a `url` server) and session of one start.
struct Run {
    service: rmcp::service::RunningService<RoleClient, Handler>,
    child: Option<std::process::Child>,
    pid: Option<u32>,
}

impl Server {
    pub(crate) fn new(
        alias: String,
        spec: McpServerSpec,
        sandbox: Sandbox,
        redactor: Redactor,
        events: Arc<Mutex<McpEvents>>,
        http: Option<Arc<dyn HttpEgress>>,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            alias,
            spec,
            sandbox,
            http,
            redactor: Arc::new(redactor),
            events,
            state: Mutex::new(State::Idle),
            tools: Mutex::new(Vec::new()),
            changed: Notify::new(),
            stop_tx: watch::channel(false).0,
            supervised: AtomicBool::new(false),
            dirty: Arc::new(AtomicBool::new(false)),
            generation: Arc::new(AtomicU64::new(0)),
            restarts: AtomicU64::new(0),
            me: me.clone(),
        })
    }

    pub(crate) fn spec(&self) -> &McpServerSpec {
        &self.spec
    }

    /// Started (running, or down and waiting to restart) with no announced change unread.
    pub(crate) fn settled(&self) -> bool {
        self.unsupported()
            || (!self.dirty.load(Ordering::Acquire)
                && matches!(
                    *self.state.lock().unwrap_or_else(|p| p.into_inner()),
                    State::Running { .. } | State::Down { .. } | State::Stopped
                ))
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// A `url` server with no egress to reach it through.
    fn unsupported(&self) -> bool {
        self.spec.url.is_some() && self.http.is_none()
    }

    fn emit(&self, event: McpEvent) {
        let sink = Arc::clone(&*self.events.lock().unwrap_or_else(|p| p.into_inner()));
        sink(&self.alias, &self.spec.name, event);
    }

    fn set(&self, state: State) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = state;
        self.changed.notify_waiters();
    }

    fn stopped(&self) -> bool {
        *self.stop_tx.borrow()
    }

    /// Starts the supervisor once (it starts the process and restarts it when it dies).
    pub(crate) fn ensure_supervised(&self) {
        if self.unsupported() || self.stopped() {
            return;
        }
        if self.supervised.swap(true, Ordering::AcqRel) {
            return;
        }
        let Some(me) = self.me.upgrade() else { return };
        self.set(State::Starting { after: None });
        tokio::spawn(me.supervise());
    }

    pub(crate) fn stop(&self) {
        let _ = self.stop_tx.send_replace(true);
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if !matches!(*state, State::Running { .. } | State::Starting { .. }) {
            *state = State::Stopped;
        }
        drop(state);
        self.changed.notify_waiters();
    }

    /// The session of the running server, or why there is none.
    pub(crate) fn peer(&self) -> Result<Peer<RoleClient>, NoSession> {
        let server = self.spec.name.clone();
        match &*self.state.lock().unwrap_or_else(|p| p.into_inner()) {
            State::Running { peer, .. } => Ok(peer.clone()),
            State::Idle => Err(NoSession::NotStarted { server }),
            State::Starting { after: None } => Err(NoSession::Starting { server }),
            State::Starting { after: Some(error) } => Err(NoSession::Restarting {
                server,
                error: error.clone(),
            }),
            State::Down { error, retry_at } => Err(NoSession::Down {
                server,
                error: error.clone(),
                retry_in_secs: retry_at
                    .saturating_duration_since(Instant::now())
                    .as_secs_f64(),
            }),
            State::Stopped => Err(NoSession::Stopped { server }),
        }
    }

    pub(crate) fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// The tools of this server, starting it (waiting up to its startup timeout) when it has
    /// not started, and listing them again after a `tools/list_changed`.
    pub(crate) async fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.ensure_supervised();
        let deadline = tokio::time::Instant::now() + self.spec.startup_timeout;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let starting = matches!(
                *self.state.lock().unwrap_or_else(|p| p.into_inner()),
                State::Starting { .. }
            );
            if !starting || tokio::time::timeout_at(deadline, notified).await.is_err() {
                break;
            }
        }
        if self.dirty.swap(false, Ordering::AcqRel)
            && let Ok(peer) = self.peer()
        {
            match tokio::time::timeout(self.spec.call_timeout, peer.list_all_tools()).await {
                Ok(Ok(list)) => self.install_tools(list),
                Ok(Err(e)) => {
                    self.emit(McpEvent::Stderr(format!("tools/list failed: {e}")));
                }
                Err(_) => self.emit(McpEvent::Stderr("tools/list timed out".into())),
            }
        }
        self.tools.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn install_tools(&self, list: Vec<rmcp::model::Tool>) {
        let tools: Vec<Arc<dyn Tool>> = list
            .into_iter()
            .filter(|t| {
                self.spec
                    .tools
                    .as_ref()
                    .is_none_or(|allow| allow.iter().any(|a| a == t.name.as_ref()))
            })
            .map(|t| Arc::new(McpTool::new(self.me.clone(), &self.spec, t)) as Arc<dyn Tool>)
            .collect();
        *self.tools.lock().unwrap_or_else(|p| p.into_inner()) = tools;
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn status(&self) -> ServerStatus {
        let (state, pid, last_error, retry_in_secs) =
            match &*self.state.lock().unwrap_or_else(|p| p.into_inner()) {
                _ if self.unsupported() => (
                    ServerState::Unsupported,
                    None,
                    Some("no network egress to reach this url server through".into()),
                    None,
                ),
                State::Idle => (ServerState::NotStarted, None, None, None),
                State::Starting { after } => (ServerState::Starting, None, after.clone(), None),
                State::Running { pid, .. } => (ServerState::Running, *pid, None, None),
                State::Down { error, retry_at } => (
                    ServerState::Down,
                    None,
                    Some(error.clone()),
                    Some(
                        retry_at
                            .saturating_duration_since(Instant::now())
                            .as_secs_f64(),
                    ),
                ),
                State::Stopped => (ServerState::Stopped, None, None, None),
            };
        ServerStatus {
            name: self.spec.name.clone(),
            state,
            transport: if self.spec.url.is_some() {
                "streamable_http"
            } else {
                "stdio"
            },
            pid,
            tools: self
                .tools
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .map(|t| t.name().to_string())
                .collect(),
            restarts: self.restarts.load(Ordering::Acquire),
            last_error,
            retry_in_secs,
        }
    }

    /// Starts the server, waits for it to end, restarts it with backoff; until stopped.
    async fn supervise(self: Arc<Self>) {
        let mut stop = self.stop_tx.subscribe();
        let mut failures: u32 = 0;
        let mut after: Option<String> = None;
        loop {
            if self.stopped() {
                break;
            }
            self.set(State::Starting {
                after: after.take(),
            });
            let began = Instant::now();
            let reason = match self.start_once().await {
                Ok(run) => {
                    let Run {
                        service,
                        mut child,
                        pid,
                    } = run;
                    self.set(State::Running {
                        peer: service.peer().clone(),
                        pid,
                    });
                    tokio::select! {
                        _ = service.waiting() => {}
                        _ = stop.wait_for(|s| *s) => {}
                    }
                    if began.elapsed() >= HEALTHY_RUN {
                        failures = 0;
                    }
                    match child.take() {
                        None => "the session ended".to_string(),
                        Some(mut child) => {
                            drop(GroupKill(pid));
                            let status = tokio::task::spawn_blocking(move || child.wait())
                                .await
                                .ok()
                                .and_then(Result::ok);
                            match status {
                                Some(s) => format!("the process ended ({s})"),
                                None => "the process ended".to_string(),
                            }
                        }
                    }
                }
                Err(e) => e.to_string(),
            };
            if self.stopped() {
                break;
            }
            failures += 1;
            self.restarts.fetch_add(1, Ordering::AcqRel);
            let delay = FIRST_BACKOFF
                .saturating_mul(1u32 << (failures - 1).min(10))
                .min(MAX_BACKOFF);
            self.set(State::Down {
                error: reason.clone(),
                retry_at: Instant::now() + delay,
            });
            after = Some(reason.clone());
            self.emit(McpEvent::Died {
                reason,
                retry_in: delay,
            });
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                _ = stop.wait_for(|s| *s) => {}
            }
        }
        self.set(State::Stopped);
        self.emit(McpEvent::Stopped);
    }

    /// One start: the process through the agent's sandbox, then `initialize` and `tools/list`
    /// within the startup timeout. On failure the process is killed and reaped.
    async fn start_once(&self) -> Result<Run, StartError> {
        let name = &self.spec.name;
        let server = || name.clone();
        if let (Some(url), Some(http)) = (&self.spec.url, &self.http) {
            return self.start_http(url.clone(), Arc::clone(http)).await;
        }
        let Some(command) = self.spec.command.clone() else {
            return Err(StartError::NoCommand { server: server() });
        };
        let began = Instant::now();
        let args: Vec<OsString> = self.spec.args.iter().map(OsString::from).collect();
        let env: Vec<(OsString, OsString)> = self
            .spec
            .env
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect();
        let sandbox = self.sandbox.clone();
        let mut child = tokio::task::spawn_blocking(move || {
            sandbox.spawn_with_env(&command, &args, ChildIo::Duplex, &env)
        })
        .await
        .map_err(|source| StartError::Join {
            server: server(),
            source,
        })?
        .map_err(|source| StartError::Sandbox {
            server: server(),
            source,
        })?;
        let pid = child.id();
        match self.connect(&mut child).await {
            Ok(service) => {
                let list = match tokio::time::timeout(
                    self.spec.startup_timeout,
                    service.peer().list_all_tools(),
                )
                .await
                {
                    Ok(Ok(list)) => list,
                    Ok(Err(e)) => {
                        kill_and_reap(child, pid).await;
                        // The server's error text may echo its environment (a key it was
                        // started with): redacted as every other server text is.
                        let reason = self.redactor.redact(&e.to_string()).into_owned();
                        return Err(StartError::ListTools {
                            server: server(),
                            reason,
                        });
                    }
                    Err(_) => {
                        kill_and_reap(child, pid).await;
                        return Err(StartError::ListToolsTimeout {
                            server: server(),
                            secs: self.spec.startup_timeout.as_secs(),
                        });
                    }
                };
                self.install_tools(list);
                self.emit(McpEvent::Started {
                    pid,
                    tools: self.tools.lock().unwrap_or_else(|p| p.into_inner()).len(),
                    millis: u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX),
                });
                Ok(Run {
                    service,
                    child: Some(child),
                    pid: Some(pid),
                })
            }
            Err(e) => {
                kill_and_reap(child, pid).await;
                Err(e)
            }
        }
    }

    /// One start of a `url` server: `initialize` and `tools/list` over streamable HTTP within
    /// the startup timeout.
    async fn start_http(&self, url: String, http: Arc<dyn HttpEgress>) -> Result<Run, StartError> {
        let server = || self.spec.name.clone();
        let began = Instant::now();
        let transport = super::http::transport(url, self.spec.headers.clone(), http);
        let service =
            match tokio::time::timeout(self.spec.startup_timeout, self.handler().serve(transport))
                .await
            {
                Ok(Ok(service)) => service,
                Ok(Err(e)) => {
                    return Err(StartError::Initialize {
                        server: server(),
                        reason: self.redactor.redact(&e.to_string()).into_owned(),
                    });
                }
                Err(_) => {
                    return Err(StartError::InitializeTimeout {
                        server: server(),
                        secs: self.spec.startup_timeout.as_secs(),
                    });
                }
            };
        let list =
            match tokio::time::timeout(self.spec.startup_timeout, service.peer().list_all_tools())
                .await
            {
                Ok(Ok(list)) => list,
                Ok(Err(e)) => {
                    return Err(StartError::ListTools {
                        server: server(),
                        reason: self.redactor.redact(&e.to_string()).into_owned(),
                    });
                }
                Err(_) => {
                    return Err(StartError::ListToolsTimeout {
                        server: server(),
                        secs: self.spec.startup_timeout.as_secs(),
                    });
                }
            };
        self.install_tools(list);
        self.emit(McpEvent::Started {
            pid: 0,
            tools: self.tools.lock().unwrap_or_else(|p| p.into_inner()).len(),
            millis: u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX),
        });
        Ok(Run {
            service,
            child: None,
            pid: None,
        })
    }

    fn handler(&self) -> Handler {
        Handler {
            dirty: Arc::clone(&self.dirty),
            generation: Arc::clone(&self.generation),
            server: self.me.clone(),
        }
    }

    async fn connect(
        &self,
        child: &mut std::process::Child,
    ) -> Result<rmcp::service::RunningService<RoleClient, Handler>, StartError> {
        let server = || self.spec.name.clone();
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(StartError::NoStdio { server: server() });
        };
        let pipe_err = |source: std::io::Error| StartError::Pipe {
            server: server(),
            source,
        };
        let writer = tokio::net::unix::pipe::Sender::from_owned_fd(OwnedFd::from(stdin))
            .map_err(pipe_err)?;
        let reader = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(stdout))
            .map_err(pipe_err)?;
        let errors = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(stderr))
            .map_err(pipe_err)?;
        let me = self.me.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(errors).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let Some(server) = me.upgrade() else { break };
                let line: String = line.chars().take(MAX_STDERR_LINE).collect();
                let line = server.redactor.redact(&line).into_owned();
                server.emit(McpEvent::Stderr(line));
            }
        });
        match tokio::time::timeout(
            self.spec.startup_timeout,
            self.handler().serve((reader, writer)),
        )
        .await
        {
            Ok(Ok(service)) => Ok(service),
            Ok(Err(e)) => Err(StartError::Initialize {
                server: server(),
                reason: self.redactor.redact(&e.to_string()).into_owned(),
            }),
            Err(_) => Err(StartError::InitializeTimeout {
                server: server(),
                secs: self.spec.startup_timeout.as_secs(),
            }),
        }
    }
}

async fn kill_and_reap(mut child: std::process::Child, pid: u32) {
    drop(GroupKill(Some(pid)));
    let _ = tokio::task::spawn_blocking(move || child.wait()).await;
}

/// The client side's handler: notes `notifications/tools/list_changed`.
#[derive(Clone)]
pub(crate) struct Handler {
    dirty: Arc<AtomicBool>,
    generation: Arc<AtomicU64>,
    server: Weak<Server>,
}

impl rmcp::ClientHandler for Handler {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.dirty.store(true, Ordering::Release);
        self.generation.fetch_add(1, Ordering::AcqRel);
        if let Some(server) = self.server.upgrade() {
            server.emit(McpEvent::ToolsChanged);
        }
        std::future::ready(())
    }
}
