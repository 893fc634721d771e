//! `warren status`: install root, config, and whether a daemon owns the root; with a running
//! daemon, its health (`ok`, `starting`, `degraded`) and each store that does not open, by
//! name, file and error, and why its scheduler is off (issue 36 §1, §2).

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
    let health = match &daemon {
        DaemonStatus::Running { .. } => daemon_health(root),
        DaemonStatus::NotRunning => None,
    };
    if json {
        super::print_json(&serde_json::json!({
            "health": health.as_ref().map(|h| &h["status"]),
            "degraded_stores": health.as_ref().map(|h| &h["components"]["stores"]["degraded"]),
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
            if let Some(health) = &health {
                for line in health_lines(health) {
                    println!("{line}");
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

/// The running daemon's `/admin/health` report (`None` when it does not answer).
pub(crate) fn daemon_health(root: &InstallRoot) -> Option<serde_json::Value> {
    match warren_gateway::client::admin_call(root, "GET", "/admin/health") {
        Ok((200, report)) => Some(report),
        _ => None,
    }
}

/// The stores a health report lists as degraded (each `store NAME (FILE) cannot be used:
/// ERROR`), and why the scheduler is off when that is an error.
pub(crate) fn degraded_lines(health: &serde_json::Value) -> Vec<String> {
    let components = &health["components"];
    let mut lines: Vec<String> = components["stores"]["degraded"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| {
            serde_json::from_value::<warren_runtime::stores::StoreFault>(f.clone()).ok()
        })
        .map(|f| f.to_string())
        .collect();
    if components["cron"]["status"] == "error" {
        lines.push(format!(
            "cron scheduler off: {}",
            components["cron"]["error"].as_str().unwrap_or("unknown")
        ));
    }
    lines
}

/// `warren status`'s lines for a health report.
fn health_lines(health: &serde_json::Value) -> Vec<String> {
    let status = health["status"].as_str().unwrap_or("unknown");
    let mut lines = vec![format!("health:            {status}")];
    lines.extend(
        degraded_lines(health)
            .into_iter()
            .map(|l| format!("degraded:          {l}")),
    );
    lines
}
