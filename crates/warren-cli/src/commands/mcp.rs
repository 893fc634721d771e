//! `warren mcp list ALIAS` and `warren mcp test ALIAS SERVER` (issue 23 §6): start an agent's
//! MCP servers inside its sandbox, exactly as its first turn would, and show their state and
//! tools (and, on failure, what the server wrote to stderr).

use std::process::ExitCode;

use anyhow::Context;
use warren_config::InstallRoot;
use warren_core::AgentAlias;
use warren_runtime::mcp::ServerState;

/// `warren mcp ...`
#[derive(Debug, clap::Subcommand)]
pub enum McpCommand {
    /// The agent's MCP servers: each started in the agent's sandbox, with its state and tools
    List {
        #[arg(value_name = "ALIAS")]
        alias: String,
    },
    /// Start one MCP server of the agent in its sandbox and list its tools
    Test {
        #[arg(value_name = "ALIAS")]
        alias: String,
        #[arg(value_name = "SERVER")]
        server: String,
    },
}

pub fn run(root: &InstallRoot, cmd: McpCommand, json: bool) -> anyhow::Result<ExitCode> {
    let (alias, only) = match &cmd {
        McpCommand::List { alias } => (alias, None),
        McpCommand::Test { alias, server } => (alias, Some(server.as_str())),
    };
    let alias = AgentAlias::new(alias)?;
    let store = super::load_checked(root)?;
    let config = store.snapshot().config().clone();
    let agent = config
        .agent(&alias)
        .with_context(|| format!("agent '{alias}' is not configured (see `warren agents list`)"))?;
    if let Some(server) = only
        && !agent.mcp.servers.contains_key(server)
    {
        let known: Vec<&str> = agent.mcp.servers.keys().map(String::as_str).collect();
        anyhow::bail!(
            "agent '{alias}' has no MCP server '{server}' (configured: {}; add [agents.{alias}.mcp.servers.{server}])",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let probe = runtime.block_on(warren_runtime::mcp::probe(&config, root, &alias, only))?;
    let ok = probe
        .servers
        .iter()
        .all(|s| s.state == ServerState::Running);
    if json {
        super::print_json(&serde_json::to_value(&probe)?)?;
    } else {
        if probe.servers.is_empty() {
            println!("agent '{alias}' has no MCP servers");
        }
        for s in &probe.servers {
            let state = match s.state {
                ServerState::Running => "running".to_string(),
                _ => format!(
                    "{} ({})",
                    serde_json::to_value(s.state)?.as_str().unwrap_or("?"),
                    s.last_error.as_deref().unwrap_or("no detail")
                ),
            };
            println!("{}  [{}]  {state}", s.name, s.transport);
            for t in &s.tools {
                println!("  {t}");
            }
            if s.state != ServerState::Running {
                for (server, line) in probe.stderr.iter().filter(|(n, _)| *n == s.name) {
                    println!("  stderr[{server}]: {line}");
                }
            }
        }
    }
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
