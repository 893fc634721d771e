//! Command dispatch: resolve the install root, call the library, print.

mod agents;
mod config;
mod gateway;
mod memory;
mod security;
mod sessions;
mod status;

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::CommandFactory;
use warren_config::{ConfigError, ConfigStore, InitOutcome, InstallRoot};

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
            warren_runtime::run_blocking_with(root, vec![gateway])?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Pair => gateway::pair(&root, cli.json),
        Command::Tokens(cmd) => gateway::tokens(&root, cmd, cli.json),
        Command::Config(cmd) => config::run(&root, cmd, cli.json),
        Command::Agents(cmd) => agents::run(&root, cmd, cli.json),
        Command::Sessions(cmd) => sessions::run(&root, cmd, cli.json),
        Command::Memory(cmd) => memory::run(&root, cmd, cli.json),
        Command::Status => status::run(&root, cli.json),
        Command::Security(cmd) => security::posture(&root, cmd, cli.json),
        Command::Tools(cmd) => security::tools(&root, cmd),
        Command::Completions { .. } => Ok(ExitCode::SUCCESS),
    }
}

fn init(root: &InstallRoot, json: bool) -> anyhow::Result<ExitCode> {
    let outcome = warren_config::init(root)?;
    let path = root.config_file();
    if json {
        print_json(&serde_json::json!({
            "install_root": root.root(),
            "config": path,
            "created": outcome == InitOutcome::Created,
        }))?;
    } else if outcome == InitOutcome::Created {
        println!("initialised Warren at {}", root.root().display());
        println!("config: {} (one agent: main)", path.display());
    } else {
        println!(
            "config already exists at {}; left unchanged",
            path.display()
        );
    }
    Ok(ExitCode::SUCCESS)
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
