//! `warren status`: install root, config, and whether a daemon owns the root.

use std::process::ExitCode;

use warren_config::{ConfigStore, InstallRoot};
use warren_runtime::DaemonStatus;

pub fn run(root: &InstallRoot, json: bool) -> anyhow::Result<ExitCode> {
    let daemon = warren_runtime::probe(root)?;
    let config = ConfigStore::load(root.clone());
    let (config_state, agents) = match &config {
        Ok(store) => ("valid".to_string(), store.snapshot().agents.len()),
        Err(e) => (format!("{e}"), 0),
    };
    // Qdrant (or Lucid) as the daemon's health reports it: the URL and why, while down.
    let memory = config
        .as_ref()
        .ok()
        .and_then(|store| super::memory::backends_health(root, store.snapshot().config()));
    let generation = match &daemon {
        DaemonStatus::Running { state: Some(s), .. } => Some(s.config_generation),
        _ => None,
    };
    // The address the running gateway published (never its admin key).
    let gateway = match &daemon {
        DaemonStatus::Running { .. } => {
            warren_gateway::read_endpoint(root).map(|e| e.addr.to_string())
        }
        DaemonStatus::NotRunning => None,
    };
    if json {
        super::print_json(&serde_json::json!({
            "gateway": gateway,
            "install_root": root.root(),
            "config_file": root.config_file(),
            "config": if config.is_ok() { serde_json::Value::from("valid") } else { serde_json::Value::from(config_state.clone()) },
            "agents": agents,
            "daemon": daemon,
            "config_generation": generation,
            "memory_backends": memory,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    println!("install root:      {}", root.root().display());
    println!(
        "config:            {} ({})",
        root.config_file().display(),
        first_line(&config_state)
    );
    println!("agents:            {agents}");
    for (_, line) in memory.iter().flat_map(super::memory::backend_lines) {
        println!("memory:            {line}");
    }
    match daemon {
        DaemonStatus::NotRunning => {
            println!("daemon:            not running");
            println!("config generation: - (no daemon)");
        }
        DaemonStatus::Running { pid, .. } => {
            let pid = pid.map_or_else(|| "unknown".to_string(), |p| p.to_string());
            println!("daemon:            running (pid {pid})");
            match generation {
                Some(g) => println!("config generation: {g}"),
                None => println!("config generation: unknown (daemon is starting)"),
            }
            match &gateway {
                Some(addr) => println!("gateway:           http://{addr}"),
                None => println!("gateway:           not listening"),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}
