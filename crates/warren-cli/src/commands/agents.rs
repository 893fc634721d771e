//! `warren agents list|add`.

use std::process::ExitCode;

use anyhow::bail;
use warren_config::{ConfigStore, InstallRoot};
use warren_core::AgentAlias;

use crate::cli::AgentsCommand;

pub fn run(root: &InstallRoot, cmd: AgentsCommand, json: bool) -> anyhow::Result<ExitCode> {
    match cmd {
        AgentsCommand::List => list(root, json),
        AgentsCommand::Add {
            alias,
            provider,
            model,
            risk_profile,
        } => {
            let alias = AgentAlias::new(alias)?;
            let store = ConfigStore::load(root.clone())?;
            let mut fields = Vec::new();
            for (key, value) in [
                ("provider", &provider),
                ("model", &model),
                ("risk_profile", &risk_profile),
            ] {
                if let Some(v) = value {
                    fields.push((key, v.as_str()));
                }
            }
            let mut txn = store.write_blocking()?;
            txn.add_agent(&alias, &fields)?;
            let outcome = txn.commit()?;
            for warning in &outcome.warnings {
                eprintln!("warning: {warning}");
            }
            if json {
                super::print_json(&serde_json::json!({
                    "alias": alias, "workspace": root.agent_workspace(&alias), "config_generation": outcome.generation,
                }))?;
            } else {
                println!(
                    "added agent '{alias}' (workspace {} is created when it first starts)",
                    root.agent_workspace(&alias).display()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn list(root: &InstallRoot, json: bool) -> anyhow::Result<ExitCode> {
    let store = ConfigStore::load(root.clone())?;
    let snapshot = store.snapshot();
    let config = snapshot.config();
    let rows: Vec<serde_json::Value> = config
        .agents()
        .map(|(alias, agent)| {
            serde_json::json!({
                "alias": alias,
                "provider": agent.provider,
                "model": agent.model,
                "risk_profile": agent.risk_profile,
                "runtime_profile": agent.runtime_profile,
                "memory_backend": config.memory_backend_of(agent),
                "workspace": root.agent_workspace(&alias),
                "access": agent.workspace.access,
                "unrestricted_filesystem": agent.workspace.unrestricted_filesystem,
                "read_memory_from": agent.memory.read_memory_from,
                "default": config.default_agent().as_ref() == Some(&alias),
            })
        })
        .collect();
    if json {
        super::print_json(&serde_json::Value::Array(rows))?;
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        bail!("no agents configured; add one with `warren agents add ALIAS`");
    }
    println!(
        "{:<20} {:<12} {:<20} {:<12} GRANTS",
        "ALIAS", "PROVIDER", "MODEL", "RISK"
    );
    for (alias, agent) in config.agents() {
        let grants: Vec<String> = agent
            .workspace
            .access
            .iter()
            .map(|(k, v)| format!("{k}:{v:?}"))
            .collect();
        let mark = if config.default_agent().as_ref() == Some(&alias) {
            "*"
        } else {
            ""
        };
        println!(
            "{:<20} {:<12} {:<20} {:<12} {}",
            format!("{alias}{mark}"),
            agent.provider.as_deref().unwrap_or("-"),
            agent.model.as_deref().unwrap_or("-"),
            agent.risk_profile,
            if grants.is_empty() {
                "-".to_string()
            } else {
                grants.join(",")
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}
