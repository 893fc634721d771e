//! The process's MCP servers (issue 23): one [`AgentMcp`] per agent (keyed by the agent's
//! workspace, so two agents never share a server), kept across reloads while the agent's server
//! config and policy are unchanged, stopped when either changed or the agent was deleted
//! ([`reconcile`], called by the daemon for each new generation). Server events (start, death
//! and restart, stderr lines, tool-list changes) go to the current generation's trace as
//! `mcp` events.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::json;
use warren_config::{Config, InstallRoot};
use warren_core::AgentAlias;
use warren_security::sandbox::Sandbox;
use warren_tools::mcp::{AgentMcp, McpConfigError, McpEvent, McpEvents, specs_for};

pub use warren_tools::mcp::{ServerState, ServerStatus};

use crate::trace::Trace;

struct Entry {
    root: PathBuf,
    alias: AgentAlias,
    /// The policy the servers were started under (`describe()`): a change restarts them.
    policy: String,
    mcp: AgentMcp,
}

fn registry() -> std::sync::MutexGuard<'static, HashMap<PathBuf, Entry>> {
    static REGISTRY: OnceLock<Mutex<HashMap<PathBuf, Entry>>> = OnceLock::new();
    REGISTRY
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// The trace sink of a generation's servers of agent `alias` (the typed alias is kept here:
/// the `&str` the servers pass back is not parsed again).
fn events(trace: &Arc<Trace>, alias: &AgentAlias) -> McpEvents {
    let (trace, alias) = (Arc::clone(trace), alias.clone());
    Arc::new(move |_agent: &str, server: &str, event: McpEvent| {
        let data = match event {
            McpEvent::Started { pid, tools, millis } => {
                json!({"server": server, "event": "started", "pid": pid, "tools": tools, "start_ms": millis})
            }
            McpEvent::Died { reason, retry_in } => {
                json!({"server": server, "event": "died", "reason": reason, "restart_in_ms": retry_in.as_millis() as u64})
            }
            McpEvent::Stderr(line) => json!({"server": server, "event": "stderr", "line": line}),
            McpEvent::ToolsChanged => json!({"server": server, "event": "tools_changed"}),
            McpEvent::Stopped => json!({"server": server, "event": "stopped"}),
        };
        trace.emit("mcp", &alias, None, data);
    })
}

/// The egress `url` servers reach their endpoints through (`None` when there are none): the
/// agent's `http_request` client, allowlist and address rule (`egress::AgentEgress::for_mcp`).
fn http_for(
    config: &Config,
    sandbox: &Sandbox,
    specs: &[warren_tools::mcp::McpServerSpec],
    trace: &Arc<Trace>,
) -> Option<Arc<dyn warren_tools::HttpEgress>> {
    if specs.iter().all(|s| s.url.is_none()) {
        return None;
    }
    match crate::egress::AgentEgress::for_mcp(config, sandbox.policy(), Arc::clone(trace)) {
        Ok(egress) => Some(Arc::new(egress)),
        Err(e) => {
            tracing::warn!(agent = %sandbox.policy().alias(), "MCP url servers cannot start: {e}");
            None
        }
    }
}

/// The MCP servers of the agent whose sandbox is `sandbox` (`None`: it has none): the running
/// ones when config and policy are unchanged, else new ones (the old ones stopped). Nothing
/// starts here.
pub(crate) fn for_agent(
    config: &Config,
    root: &InstallRoot,
    alias: &AgentAlias,
    sandbox: &Sandbox,
    trace: &Arc<Trace>,
) -> Result<Option<AgentMcp>, McpConfigError> {
    let specs = specs_for(config, alias)?;
    let key = sandbox.policy().workspace().to_path_buf();
    let policy = sandbox.policy().describe().to_string();
    let mut map = registry();
    if let Some(entry) = map.get(&key)
        && !specs.is_empty()
        && entry.policy == policy
        && entry.mcp.same_specs(&specs)
    {
        entry.mcp.set_events(events(trace, alias));
        return Ok(Some(entry.mcp.clone()));
    }
    if let Some(old) = map.remove(&key) {
        old.mcp.stop();
    }
    if specs.is_empty() {
        return Ok(None);
    }
    let http = http_for(config, sandbox, &specs, trace);
    let mcp = AgentMcp::new(sandbox, specs, events(trace, alias), http);
    map.insert(
        key,
        Entry {
            root: root.root().to_path_buf(),
            alias: alias.clone(),
            policy,
            mcp: mcp.clone(),
        },
    );
    Ok(Some(mcp))
}

/// A new generation of `root` with `config`: stops the servers of deleted agents and of agents
/// whose servers changed (they start again with the new config).
pub fn reconcile(root: &InstallRoot, config: &Config) {
    registry().retain(|_, entry| {
        if entry.root != root.root() {
            return true;
        }
        let keep = config.agent(&entry.alias).is_some()
            && specs_for(config, &entry.alias).is_ok_and(|specs| entry.mcp.same_specs(&specs));
        if !keep {
            entry.mcp.stop();
        }
        keep
    });
}

/// Stops every server of `root` (daemon shutdown).
pub fn stop_all(root: &InstallRoot) {
    registry().retain(|_, entry| {
        if entry.root == root.root() {
            entry.mcp.stop();
            false
        } else {
            true
        }
    });
}

/// What `warren mcp list|test` saw: each server's status and what it wrote to stderr.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Probe {
    pub agent: AgentAlias,
    pub servers: Vec<warren_tools::mcp::ServerStatus>,
    /// `(server, line)` in order.
    pub stderr: Vec<(String, String)>,
    /// Milliseconds from the start to the last server's tool list.
    pub start_ms: u64,
}

/// Starts `alias`'s servers (only `only` when given) in its sandbox, as its first turn would,
/// lists their tools and stops them (`warren mcp list` and `warren mcp test`).
pub async fn probe(
    config: &Config,
    root: &InstallRoot,
    alias: &AgentAlias,
    only: Option<&str>,
) -> Result<Probe, crate::AgentError> {
    let kit = crate::AgentKit::build(config, root, alias)?;
    let mut specs = specs_for(config, alias)?;
    if let Some(name) = only {
        specs.retain(|s| s.name == name);
    }
    let lines: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let sink = Arc::clone(&lines);
    let events: McpEvents = Arc::new(move |_: &str, server: &str, event: McpEvent| {
        let line = match event {
            McpEvent::Stderr(line) => line,
            McpEvent::Died { reason, .. } => format!("[warren] {reason}"),
            _ => return,
        };
        sink.lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((server.to_string(), line));
    });
    let http = http_for(
        config,
        kit.sandbox(),
        &specs,
        &Arc::new(Trace::new(root, config)),
    );
    let mcp = AgentMcp::new(kit.sandbox(), specs, events, http);
    let began = std::time::Instant::now();
    let _ = mcp.tools().await;
    let start_ms = u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX);
    // Give a failed server's last stderr lines a moment to arrive. Its supervisor may begin a
    // restart meanwhile: a probe reports a server that failed and is restarting as down, with
    // the failure (not "starting" with no detail).
    if mcp.status().iter().any(|s| s.state != ServerState::Running) {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let servers: Vec<ServerStatus> = mcp
        .status()
        .into_iter()
        .map(|mut s| {
            if s.state == ServerState::Starting && s.restarts > 0 {
                s.state = ServerState::Down;
            }
            s
        })
        .collect();
    mcp.stop();
    let stderr = lines.lock().unwrap_or_else(|p| p.into_inner()).clone();
    Ok(Probe {
        agent: alias.clone(),
        servers,
        stderr,
        start_ms,
    })
}
