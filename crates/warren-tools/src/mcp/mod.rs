//! The MCP client of one agent (issue 23, PERM-2, SBX-1): the agent's own servers from
//! `[agents.<alias>.mcp.servers.<name>]`, each one process per agent, started through the
//! agent's sandbox ([`Sandbox::spawn_with_env`], the one spawn path every child takes) with a
//! cleared environment plus exactly the variables the config names (secrets resolved from
//! `[secrets.<name>]` here and nowhere else). The protocol is the official Rust SDK's (`rmcp`)
//! client over the child's stdin/stdout. A `url` server is reached over streamable HTTP
//! (`http`) through the agent's [`HttpEgress`] (the daemon's `http_request` client and its
//! allowlist), with `headers` resolved like `env`.
//!
//! Lifecycle: a server starts on the agent's first turn ([`AgentMcp::tools`]) or at once with
//! `eager = true` ([`AgentMcp::start_eager`]); a supervisor task per server restarts it with
//! backoff when it dies (a call meanwhile fails with the reason and the time of the next try);
//! [`AgentMcp::stop`] (reload with a changed config, agent delete, drop) kills its process
//! group. Its stderr lines go to the events sink (the runtime trace), secrets redacted. The
//! tool list is cached per server and listed again after `notifications/tools/list_changed`.
//!
//! Tools are named `mcp__<server>__<tool>` ([`McpTool`]); they run through the runtime's
//! approvals, receipts, cost and trace like every tool, with the server's risk tier: `low`
//! acts as a read, `medium` as a write, `high` asks the operator at every autonomy. Results
//! are untrusted data: the text says so, secrets are redacted, and the runtime's taint rule
//! marks the turn.

mod http;
mod server;
mod tool;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use warren_config::Config;
use warren_config::redact::Redactor;
use warren_config::schema::{McpEnvValue, McpRisk};
use warren_core::AgentAlias;
use warren_security::sandbox::Sandbox;

pub use server::{ServerState, ServerStatus};
pub use tool::McpTool;

use crate::HttpEgress;
use crate::tool::Tool;

/// The prefix of every MCP tool name.
pub const MCP_PREFIX: &str = "mcp__";

/// What a server did, for the runtime trace (`server` is the server's name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpEvent {
    Started {
        pid: u32,
        tools: usize,
        millis: u64,
    },
    /// The process ended (or could not start); the supervisor tries again in `retry_in`.
    Died {
        reason: String,
        retry_in: Duration,
    },
    /// One line the server wrote to stderr (secrets redacted, capped).
    Stderr(String),
    /// The server announced `notifications/tools/list_changed`.
    ToolsChanged,
    Stopped,
}

/// Where servers report what they do: `(agent, server, event)`.
pub type McpEvents = Arc<dyn Fn(&str, &str, McpEvent) + Send + Sync>;

/// One configured server of one agent, resolved from config.
#[derive(Clone, PartialEq, Eq)]
pub struct McpServerSpec {
    pub name: String,
    pub command: Option<String>,
    pub args: Vec<String>,
    /// Variables the server gets beyond the sandbox's fixed ones (values resolved).
    pub env: Vec<(String, String)>,
    pub url: Option<String>,
    /// Headers sent to a `url` server (values resolved).
    pub headers: Vec<(String, String)>,
    pub tools: Option<Vec<String>>,
    pub risk: McpRisk,
    pub eager: bool,
    pub startup_timeout: Duration,
    pub call_timeout: Duration,
    /// Secret values of `env` and `headers`, redacted from stderr lines and results.
    secrets: Vec<String>,
}

impl std::fmt::Debug for McpServerSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServerSpec")
            .field("name", &self.name)
            .field("command", &self.command)
            .field("args", &self.args)
            .field(
                "env",
                &self.env.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
            )
            .field("url", &self.url)
            .field(
                "headers",
                &self
                    .headers
                    .iter()
                    .map(|(k, _)| k.as_str())
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// Why an agent's servers cannot be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpConfigError {
    #[error(
        "agents.{alias}.mcp.servers.{server}.{var} names secret '{secret}', which is not set (warren config set secrets.{secret}.value --secret)"
    )]
    MissingSecret {
        alias: String,
        server: String,
        /// `env.<VAR>` or `headers.<name>`.
        var: String,
        secret: String,
    },
}

/// The servers `config` gives `alias`, in name order, with secrets resolved.
pub fn specs_for(
    config: &Config,
    alias: &AgentAlias,
) -> Result<Vec<McpServerSpec>, McpConfigError> {
    let Some(agent) = config.agent(alias) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (name, s) in &agent.mcp.servers {
        let mut secrets = Vec::new();
        let mut resolve = |field: &str, map: &std::collections::BTreeMap<String, McpEnvValue>| {
            let mut out = Vec::new();
            for (var, value) in map {
                match value {
                    McpEnvValue::Text(t) => out.push((var.clone(), t.clone())),
                    McpEnvValue::Secret { secret } => {
                        let Some(found) = config.secrets.get(secret) else {
                            return Err(McpConfigError::MissingSecret {
                                alias: alias.to_string(),
                                server: name.clone(),
                                var: format!("{field}.{var}"),
                                secret: secret.clone(),
                            });
                        };
                        let value = found.value.expose().to_string();
                        secrets.push(value.clone());
                        out.push((var.clone(), value));
                    }
                }
            }
            Ok(out)
        };
        let env = resolve("env", &s.env)?;
        let headers = resolve("headers", &s.headers)?;
        out.push(McpServerSpec {
            name: name.clone(),
            command: s.command.clone(),
            args: s.args.clone(),
            env,
            url: s.url.clone(),
            headers,
            tools: s.tools.clone(),
            risk: s.risk,
            eager: s.eager,
            startup_timeout: Duration::from_secs(s.startup_timeout_secs.max(1)),
            call_timeout: Duration::from_secs(s.call_timeout_secs.max(1)),
            secrets,
        });
    }
    Ok(out)
}

/// One agent's MCP servers. Cloning shares them.
#[derive(Clone)]
pub struct AgentMcp {
    inner: Arc<Inner>,
}

struct Inner {
    alias: String,
    servers: Vec<Arc<server::Server>>,
    events: Arc<Mutex<McpEvents>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for s in &self.servers {
            s.stop();
        }
    }
}

impl std::fmt::Debug for AgentMcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentMcp")
            .field("agent", &self.inner.alias)
            .field("servers", &self.inner.servers.len())
            .finish()
    }
}

impl AgentMcp {
    /// `specs` of the agent whose sandbox is `sandbox`; nothing starts yet. `url` servers are
    /// reached through `http` (the agent's egress); without it they cannot start.
    pub fn new(
        sandbox: &Sandbox,
        specs: Vec<McpServerSpec>,
        events: McpEvents,
        http: Option<Arc<dyn HttpEgress>>,
    ) -> Self {
        let alias = sandbox.policy().alias().to_string();
        let events = Arc::new(Mutex::new(events));
        let servers = specs
            .into_iter()
            .map(|spec| {
                let redactor = Redactor::new(spec.secrets.iter().map(String::as_str));
                server::Server::new(
                    alias.clone(),
                    spec,
                    sandbox.clone(),
                    redactor,
                    Arc::clone(&events),
                    http.clone(),
                )
            })
            .collect();
        Self {
            inner: Arc::new(Inner {
                alias,
                servers,
                events,
            }),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.inner.servers.is_empty()
    }

    /// Sends later events to `events` (the next generation's trace).
    pub fn set_events(&self, events: McpEvents) {
        *self.inner.events.lock().unwrap_or_else(|p| p.into_inner()) = events;
    }

    /// Whether `specs` are exactly the servers this was built with.
    pub fn same_specs(&self, specs: &[McpServerSpec]) -> bool {
        self.inner.servers.len() == specs.len()
            && self
                .inner
                .servers
                .iter()
                .zip(specs)
                .all(|(s, spec)| s.spec() == spec)
    }

    /// Starts the servers marked `eager` (without waiting for them).
    pub fn start_eager(&self) {
        for s in &self.inner.servers {
            if s.spec().eager {
                s.ensure_supervised();
            }
        }
    }

    /// The tools of every server, starting servers that have not started (each waited for up
    /// to its `startup_timeout`) and listing a server's tools again after it announced a
    /// change. A server that is down contributes no tools (its status says why).
    pub async fn tools(&self) -> Vec<Arc<dyn Tool>> {
        let lists = futures::future::join_all(self.inner.servers.iter().map(|s| s.tools())).await;
        lists.into_iter().flatten().collect()
    }

    /// The tool-list generation when every server has settled (started or down, no change
    /// announced since its list was read): then [`AgentMcp::tools`] would only return the
    /// lists already known, and a caller holding that generation's tools may skip it.
    pub fn settled_generation(&self) -> Option<u64> {
        self.inner
            .servers
            .iter()
            .all(|s| s.settled())
            .then(|| self.generation())
    }

    /// A counter that changes whenever any server's tool list may have changed.
    pub fn generation(&self) -> u64 {
        self.inner
            .servers
            .iter()
            .map(|s| s.generation())
            .fold(0u64, u64::wrapping_add)
    }

    /// Each server's state and tools, without starting anything.
    pub fn status(&self) -> Vec<ServerStatus> {
        self.inner.servers.iter().map(|s| s.status()).collect()
    }

    /// Starts `server` (if it is not running) and waits up to its startup timeout.
    pub async fn start_one(&self, server: &str) -> Option<ServerStatus> {
        let s = self
            .inner
            .servers
            .iter()
            .find(|s| s.spec().name == server)?;
        let _ = s.tools().await;
        Some(s.status())
    }

    /// Stops every server (kills its process group) and their supervisors.
    pub fn stop(&self) {
        for s in &self.inner.servers {
            s.stop();
        }
    }
}
