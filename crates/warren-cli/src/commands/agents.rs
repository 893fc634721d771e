//! `warren agents list|add|rename|delete|restore|resume`.

use std::process::ExitCode;

use anyhow::bail;
use warren_admin::lifecycle::parse_alias;
use warren_config::{ConfigStore, InstallRoot};
use warren_core::AgentAlias;
use warren_gateway::control::{AdminOp, LifecycleOp};

use crate::cli::AgentsCommand;

pub fn run(root: &InstallRoot, cmd: AgentsCommand, json: bool) -> anyhow::Result<ExitCode> {
    match cmd {
        AgentsCommand::List => list(root, json),
        AgentsCommand::Rename { old, new } => lifecycle(
            root,
            json,
            LifecycleOp::Rename {
                alias: parse_alias(&old)?,
                to: parse_alias(&new)?,
            },
        ),
        AgentsCommand::Delete {
            alias,
            dry_run,
            yes,
        } => {
            let typed = parse_alias(&alias)?;
            if dry_run || !yes {
                let code = lifecycle(root, json, LifecycleOp::DeletePlan { alias: typed })?;
                if !dry_run && !json {
                    println!("No changes made. Re-run with --yes to delete '{alias}'.");
                }
                return Ok(code);
            }
            lifecycle(root, json, LifecycleOp::Delete { alias: typed })
        }
        AgentsCommand::Restore { archive, as_alias } => lifecycle(
            root,
            json,
            LifecycleOp::Restore {
                archive,
                as_alias: as_alias.as_deref().map(parse_alias).transpose()?,
            },
        ),
        AgentsCommand::Resume => lifecycle(root, json, LifecycleOp::Resume {}),
        // A running daemon adds it through its config owner and serves it at once (issue 15 §3).
        AgentsCommand::Add {
            alias,
            provider,
            model,
            risk_profile,
        } => lifecycle(
            root,
            json,
            LifecycleOp::Add {
                alias: AgentAlias::new(alias)?,
                provider,
                model,
                risk_profile,
            },
        ),
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

/// Runs a lifecycle verb through the control seam: the running daemon when there is one (it
/// owns the root), else here, holding the install-root lock so no daemon starts meanwhile
/// (LIFE-1, LAYOUT-4). Either way the verb is the one typed [`LifecycleOp`] and its one
/// executor runs it.
fn lifecycle(root: &InstallRoot, json: bool, request: LifecycleOp) -> anyhow::Result<ExitCode> {
    let op = request.name();
    let answer = super::control(root, &AdminOp::Lifecycle(request))?;
    let (ok, body) = match answer.body {
        Ok(body) => (true, body),
        Err(body) => (false, body),
    };
    if !ok {
        let message = body["message"].as_str().unwrap_or("request failed");
        if json {
            super::print_json(&body)?;
        }
        bail!("{message}");
    }
    if json {
        super::print_json(&body)?;
    } else {
        print_human(op, &body);
    }
    if op == "add"
        && let Some(generation) = body["reloaded_generation"].as_u64()
    {
        eprintln!("the running daemon reloaded (generation {generation})");
    }
    let converged = match &body {
        serde_json::Value::Array(reports) => reports.iter().all(|r| r["converged"] != false),
        v => v["converged"] != false,
    };
    Ok(if converged {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The human line of a delete report: what was archived where, or — when a step failed — that
/// the agent is out of the config but its data is not archived yet, and how to finish.
fn delete_line(r: &serde_json::Value, counts: &[String]) -> String {
    let alias = r["alias"].as_str().unwrap_or_default();
    let refs = r["references"].as_array().map_or(0, Vec::len);
    let archive = r["archive"].as_str().unwrap_or_default();
    if r["converged"] == false {
        let done = if counts.is_empty() {
            "nothing archived yet".to_string()
        } else {
            format!("archived so far: {}", counts.join(" · "))
        };
        format!(
            "deleted agent '{alias}' from the config ({refs} reference(s) scrubbed), but archiving \
             its data did not finish ({done}; see the warnings); `warren agents resume` retries \
             it into {archive}"
        )
    } else if counts.is_empty() {
        format!(
            "deleted agent '{alias}' ({refs} reference(s) scrubbed); it had no data to archive \
             (archive: {archive})"
        )
    } else {
        format!(
            "deleted agent '{alias}' ({refs} reference(s) scrubbed); archived: {} -> {archive}",
            counts.join(" · ")
        )
    }
}

fn print_human(op: &str, body: &serde_json::Value) {
    let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    let print_report = |r: &serde_json::Value| {
        let counts: Vec<String> = r["counts"]
            .as_object()
            .map(|m| m.iter().map(|(k, v)| format!("{k} {v}")).collect())
            .unwrap_or_default();
        match s(&r["op"]).as_str() {
            "rename" => println!(
                "renamed agent '{}' to '{}' ({} config reference(s) rewritten; moved: {})",
                s(&r["alias"]),
                s(&r["to"]),
                r["references"].as_array().map_or(0, Vec::len),
                counts.join(" · ")
            ),
            "delete" => println!("{}", delete_line(r, &counts)),
            "add" => println!(
                "added agent '{}' (workspace {} is created when it first starts)",
                s(&r["alias"]),
                s(&r["workspace"])
            ),
            other => println!(
                "{other} of agent '{}': {}",
                s(&r["alias"]),
                counts.join(" · ")
            ),
        }
        for w in r["warnings"].as_array().into_iter().flatten() {
            eprintln!("warning: {}", s(w));
        }
    };
    match op {
        "delete_plan" => {
            println!(
                "delete plan for '{}': {}",
                s(&body["alias"]),
                if body["allowed"] == true {
                    "allowed"
                } else {
                    "REFUSED"
                }
            );
            for r in body["reasons"].as_array().into_iter().flatten() {
                println!("  ✗ {}", s(r));
            }
            for r in body["scrubs"].as_array().into_iter().flatten() {
                println!("  • {} (removed)", s(&r["path"]));
            }
            println!(
                "  workspace {}: {}",
                s(&body["workspace"]),
                s(&body["workspace_action"]["action"])
            );
            if let Some(stores) = body["stores"].as_object() {
                for (k, v) in stores {
                    println!("  {k}: {v} record(s) to archive");
                }
            }
        }
        "resume" => {
            let reports = body.as_array().cloned().unwrap_or_default();
            if reports.is_empty() {
                println!("nothing to resume");
            }
            reports.iter().for_each(print_report);
        }
        _ => print_report(body),
    }
}
