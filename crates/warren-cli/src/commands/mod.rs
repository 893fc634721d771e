//! Command dispatch: resolve the install root, call the library, print.

mod agent;
mod agents;
mod backup;
pub(crate) mod channels;
mod config;
mod costs;
mod cron;
mod gateway;
mod logs;
pub(crate) mod mcp;
mod memory;
mod runs;
mod security;
mod sessions;
pub(crate) mod skills;
pub(crate) mod sop;
mod status;

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::CommandFactory;
use warren_config::{ConfigError, ConfigStore, InitOutcome, InstallRoot, StarterProvider};

use crate::cli::{Cli, Command};

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    if let Command::Completions { shell } = cli.command {
        let mut cmd = Cli::command();
        clap_complete::generate(shell, &mut cmd, "warren", &mut std::io::stdout());
        return Ok(ExitCode::SUCCESS);
    }
    let root = InstallRoot::from_env(cli.config_dir.as_deref())?;
    match cli.command {
        Command::Init => init(&root, cli.json),
        Command::Daemon => {
            let gateway = std::sync::Arc::new(warren_gateway::GatewayHook::new());
            // `warren acp` next to the daemon relays to its ACP socket (data/daemon.sock).
            let acp: std::sync::Arc<dyn warren_daemon::GenerationHook> =
                std::sync::Arc::new(warren_acp::AcpHook::new());
            // The log level first: the other subsystems start under the generation's `log.level`.
            let log_level = std::sync::Arc::new(crate::logging::LogLevelHook);
            let mut hooks: Vec<std::sync::Arc<dyn warren_daemon::GenerationHook>> =
                vec![log_level, gateway, acp];
            // Issue 26: the code start-up ran is unmapped once the daemon is ready.
            if !crate::resident::kept() {
                hooks.push(std::sync::Arc::new(crate::resident::ResidentCodeHook));
            }
            warren_daemon::run_blocking_with(root, hooks)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Pair { device } => match device {
            Some(device) => gateway::pair_device(&root, &device, cli.json),
            None => gateway::pair(&root, cli.json),
        },
        Command::Tokens(cmd) => gateway::tokens(&root, cmd, cli.json),
        Command::Config(cmd) => config::run(&root, cmd, cli.json),
        Command::Agents(cmd) => agents::run(&root, cmd, cli.json),
        Command::Sessions(cmd) => sessions::run(&root, cmd, cli.json),
        Command::Memory(cmd) => memory::run(&root, cmd, cli.json),
        Command::Status => status::run(&root, cli.json),
        Command::Security(cmd) => security::run(&root, cmd, cli.json),
        Command::Tools(cmd) => security::tools(&root, cmd),
        Command::Agent {
            alias,
            message,
            session,
        } => agent::run(
            &root,
            agent::AgentArgs {
                alias,
                message,
                session,
            },
            cli.json,
        ),
        Command::Acp {
            alias,
            end_sessions: true,
        } => warren_acp::end_sessions(&root, alias),
        Command::Acp { alias, .. } => warren_acp::run(&root, alias),
        Command::Cron(cmd) => cron::run(&root, cmd, cli.json),
        Command::Channels(cmd) => channels::run(&root, cmd, cli.json),
        Command::Runs(cmd) => runs::run(&root, cmd, cli.json),
        Command::Sop(cmd) => sop::run(&root, cmd, cli.json),
        Command::Mcp(cmd) => mcp::run(&root, cmd, cli.json),
        Command::Skills(cmd) => skills::run(&root, cmd, cli.json),
        Command::Costs { agent, since } => costs::run(&root, agent, since, cli.json),
        Command::Logs { follow, agent } => logs::run(&root, follow, agent, cli.json),
        Command::Backup(args) => backup::backup(&root, args, cli.json),
        Command::Restore { src, to, force } => backup::restore(&root, &src, to, force, cli.json),
        Command::Doctor => backup::doctor(&root, cli.json),
        Command::Completions { .. } => Ok(ExitCode::SUCCESS),
    }
}

/// The starter provider from the environment: an OpenAI key, an Anthropic key or an Ollama
/// URL (`OLLAMA_HOST`), else the offline demo.
fn starter_provider() -> StarterProvider {
    let set = |var: &str| std::env::var(var).ok().filter(|v| !v.trim().is_empty());
    if set("OPENAI_API_KEY").is_some() {
        StarterProvider::OpenAi
    } else if set("ANTHROPIC_API_KEY").is_some() {
        StarterProvider::Anthropic
    } else if let Some(host) = set("OLLAMA_HOST") {
        let base_url = if host.starts_with("http://") || host.starts_with("https://") {
            host
        } else {
            format!("http://{host}")
        };
        StarterProvider::Ollama { base_url }
    } else {
        StarterProvider::Demo
    }
}

fn init(root: &InstallRoot, json: bool) -> anyhow::Result<ExitCode> {
    let provider = starter_provider();
    let outcome = warren_config::init_with(root, &provider)?;
    let path = root.config_file();
    if json {
        print_json(&serde_json::json!({
            "install_root": root.root(),
            "config": path,
            "created": outcome == InitOutcome::Created,
            "provider": provider_label(&provider),
        }))?;
    } else if outcome == InitOutcome::Created {
        println!("initialised Warren at {}", root.root().display());
        println!(
            "config: {} (one agent: main, provider: {})",
            path.display(),
            provider_label(&provider)
        );
        if provider == StarterProvider::Demo {
            println!(
                "no provider key found: main runs the offline demo script; try `warren agent -m hello`"
            );
        }
    } else {
        println!(
            "config already exists at {}; left unchanged",
            path.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn provider_label(p: &StarterProvider) -> &'static str {
    match p {
        StarterProvider::Demo => "demo (script)",
        StarterProvider::OpenAi => "openai (OPENAI_API_KEY)",
        StarterProvider::Anthropic => "anthropic (ANTHROPIC_API_KEY)",
        StarterProvider::Ollama { .. } => "ollama (OLLAMA_HOST)",
    }
}

/// The config store with the rules over durable state registered (MEM-9 backend lock), for
/// commands that change or check config.
pub(crate) fn load_checked(root: &InstallRoot) -> Result<ConfigStore, ConfigError> {
    Ok(
        ConfigStore::load(root.clone())?
            .with_check(std::sync::Arc::new(warren_memory::BackendLock)),
    )
}

pub(crate) fn print_json(value: &serde_json::Value) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value).context("writing JSON to stdout")?;
    writeln!(out)?;
    Ok(())
}

/// The store handles of this CLI process (control plane, cron, SOP runs): opened at their first
/// use, once per process, like the daemon's (`warren_runtime::stores::Stores`).
pub(crate) fn stores(root: &InstallRoot) -> &'static warren_runtime::stores::Stores {
    static STORES: std::sync::OnceLock<warren_runtime::stores::Stores> = std::sync::OnceLock::new();
    STORES.get_or_init(|| {
        warren_runtime::stores::Stores::new(root, &warren_config::Config::default())
    })
}
