//! `warren acp [-a ALIAS]`: one agent served to an editor (Zed, Neovim, Emacs) over the Agent
//! Client Protocol on stdio, with Zed's official `agent-client-protocol` crate (SESS-3, SESS-4,
//! STATE-7, STATE-8, STATE-20, LIFE-4).
//!
//! - Every `session/prompt` is a turn through the runtime's one door, [`AgentHost::submit`]
//!   (channel `Channel::Acp`); the session's chat key is the ACP session id.
//! - A call that needs approval becomes `session/request_permission` to the client
//!   ([`approver::ClientApprover`]); the runtime gives up after the risk profile's
//!   `approval_timeout_secs` (= denied), and the model never approves itself.
//! - `session/cancel` cancels the turn's `CancelToken` (the turn stops, its tool processes
//!   with it).
//! - Sessions live in `data/sessions/acp-sessions.db` ([`AcpSessionStore`]), owned by one
//!   agent; `session/load` replays the stored transcript as `session/update` notifications.
//!   Process-local state (cancel tokens, pending permissions) dies with the process (STATE-20).
//! - Files through the editor: when the client offers `fs/read_text_file` /
//!   `fs/write_text_file`, the file tools read and write allowed files through it, after the
//!   policy decided ([`files::ClientFiles`]); `session/set_mode` maps `read_only` /
//!   `supervised` / `full` onto autonomy, never above the configured one.
//! - While the server runs, it holds a live marker ([`AcpLive`]) that makes agent delete refuse.
//!
//! Without a daemon the server runs in-process. With a daemon running, the daemon serves ACP on
//! its local socket ([`AcpHook`], `data/daemon.sock`) and `warren acp` relays stdio to it, so
//! no second session writer opens beside the daemon.

mod approver;
mod attach;
mod files;
mod server;

use std::process::ExitCode;
use std::sync::Arc;

use agent_client_protocol::Stdio;
use anyhow::Context;
use warren_config::{ConfigStore, InstallRoot};
use warren_core::AgentAlias;
use warren_daemon::{DaemonStatus, probe};
use warren_runtime::AgentHost;
use warren_store::acp::{AcpLive, AcpSessionStore};

pub use attach::{AcpHook, socket_path};
pub use server::cwd_rule;

/// The agent `-a` names, or the config's default agent.
fn agent_of(
    snapshot: &warren_config::Snapshot,
    alias: Option<String>,
) -> anyhow::Result<AgentAlias> {
    Ok(match alias {
        Some(a) => AgentAlias::new(a.as_str())?,
        None => snapshot
            .config()
            .default_agent()
            .context("no default agent; pass -a ALIAS")?,
    })
}

/// `warren acp --end-sessions`: ends the stored ACP sessions of `alias` (or the default agent)
/// while no `warren acp` of that agent runs, so a stored session that no editor will load again
/// stops blocking `agents delete` (LIFE-4).
pub fn end_sessions(root: &InstallRoot, alias: Option<String>) -> anyhow::Result<ExitCode> {
    let store = ConfigStore::load(root.clone())?;
    let alias = agent_of(&store.snapshot(), alias)?;
    let servers = AcpLive::servers(root, &alias)?;
    if !servers.is_empty() {
        let pids: Vec<String> = servers.iter().map(u32::to_string).collect();
        anyhow::bail!(
            "agent '{alias}' is being served by `warren acp` (PID {}); close the editor's session first",
            pids.join(", ")
        );
    }
    let acp = AcpSessionStore::open(root)?;
    let sessions = acp.list(Some(&alias))?;
    for session in &sessions {
        acp.end(&session.id, warren_store::acp::AcpState::Closed)?;
    }
    println!("ended {} ACP session(s) of agent '{alias}'", sessions.len());
    Ok(ExitCode::SUCCESS)
}

/// Serves `alias` (or the default agent) over ACP on stdin/stdout until the client closes.
pub fn run(root: &InstallRoot, alias: Option<String>) -> anyhow::Result<ExitCode> {
    let store = ConfigStore::load(root.clone())?;
    let snapshot = store.snapshot();
    let alias = agent_of(&snapshot, alias)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    if let DaemonStatus::Running { pid, .. } = probe(root)? {
        // The daemon owns the session writers: serve through it, never beside it.
        let pid = pid.map_or_else(|| "unknown".to_string(), |p| p.to_string());
        runtime.block_on(attach::relay(root, &alias, &pid))?;
        return Ok(ExitCode::SUCCESS);
    }
    runtime.block_on(async {
        let host = Arc::new(
            AgentHost::for_process(root, Arc::clone(&snapshot))
                .map_err(|e| anyhow::anyhow!("creating the receipt key: {e}"))?,
        );
        // A broken agent or session store fails the command before the editor sees a server.
        let runner = host.runner(&alias).await?;
        host.chat_sessions().await.map_err(anyhow::Error::msg)?;
        let acp = AcpSessionStore::open(root)?;
        let live = AcpLive::hold(root, &alias)?;
        let server = server::Server::new(
            server::Hosts::Fixed(host),
            alias,
            runner.kit().policy().clone(),
            acp,
        );
        let served = server::serve(server, Stdio::new()).await;
        drop(live);
        served
    })?;
    Ok(ExitCode::SUCCESS)
}
