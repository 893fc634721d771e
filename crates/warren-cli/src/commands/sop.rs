//! `warren sop list|show|validate|run|runs|approve|deny|cancel` (STATE-10).
//!
//! Definitions are files (`<install>/shared/sops/<name>.toml`); runs live in
//! `data/sop/runs.db`. Run, approve, deny and cancel are verbs of the control seam
//! ([`super::control`]): `warren sop run` asks the running daemon to start the run (its engine
//! owns it: restores it after a crash, serves its approval gate); with no daemon the run goes
//! in this process, on its own stores, to its end (an approval gate waits for `warren sop
//! approve` from another shell). A decision or cancel reaches the store, where the run's owner
//! picks it up. Read commands never create the store.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::Subcommand;
use serde_json::{Value, json};
use warren_config::{ConfigStore, InstallRoot};
use warren_gateway::control::{AdminOp, SopOp};
use warren_jobs::sop::defs;
use warren_store::sop::{SopRun, SopStore};

use super::Ran;

/// `warren sop`.
#[derive(Debug, Subcommand)]
pub enum SopCommand {
    /// The SOP definitions in shared/sops/ (and the files that do not load, with why)
    List,
    /// One SOP: its definition and its last runs
    Show { name: String },
    /// Check every definition file (or NAME's): errors name the file and the key
    Validate { name: Option<String> },
    /// Start a run (through the running daemon when there is one)
    Run {
        name: String,
        /// The run's input: a JSON object ({{input.<field>}} in templates)
        #[arg(long, value_name = "JSON")]
        input: Option<String>,
    },
    /// Runs, newest first (of NAME if given)
    Runs {
        name: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// Show one run: its steps with their outputs and its events
    Status {
        #[arg(value_name = "RUN")]
        id: String,
    },
    /// Approve the approval gate STEP of the waiting run RUN
    Approve {
        run: String,
        step: String,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Deny the approval gate STEP of the waiting run RUN (the run ends `denied`)
    Deny {
        run: String,
        step: String,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Ask an active run to stop
    Cancel { run: String },
}

pub fn run(root: &InstallRoot, cmd: SopCommand, json: bool) -> anyhow::Result<ExitCode> {
    match cmd {
        SopCommand::List => list(root, json),
        SopCommand::Show { name } => show(root, &name, json),
        SopCommand::Validate { name } => validate(root, name.as_deref(), json),
        SopCommand::Run { name, input } => start(root, &name, input.as_deref(), json),
        SopCommand::Runs { name, limit } => runs(root, name.as_deref(), limit, json),
        SopCommand::Status { id } => show_run(root, &id, json),
        SopCommand::Approve { run, step, reason } => decide(root, &run, &step, true, reason, json),
        SopCommand::Deny { run, step, reason } => decide(root, &run, &step, false, reason, json),
        SopCommand::Cancel { run } => {
            let op = SopOp::SopCancel { run, who: who() };
            let (_, body) = super::run_op(root, &AdminOp::Sop(op))?;
            report(json, &body, || {
                println!(
                    "asked run {} of '{}' to stop; its owner (pid {}) acts on it within a second",
                    body["run"].as_str().unwrap_or("?"),
                    body["sop"].as_str().unwrap_or("?"),
                    body["owner_pid"]
                )
            })
        }
    }
}

fn who() -> String {
    format!(
        "cli:{}",
        std::env::var("USER").unwrap_or_else(|_| "operator".into())
    )
}

fn report(json: bool, value: &Value, text: impl FnOnce()) -> anyhow::Result<ExitCode> {
    if json {
        super::print_json(value)?;
    } else {
        text();
    }
    Ok(ExitCode::SUCCESS)
}

fn list(root: &InstallRoot, json: bool) -> anyhow::Result<ExitCode> {
    let config = ConfigStore::load(root.clone())?;
    let loaded = defs::load(root, config.snapshot().config());
    if json {
        let sops: Vec<Value> = loaded
            .defs
            .values()
            .map(|d| {
                json!({"name": d.name, "agent": d.def.agent, "trigger": d.def.trigger,
                            "steps": d.def.steps.len(), "file": d.path})
            })
            .collect();
        super::print_json(&json!({"sops": sops, "problems": loaded.problems}))?;
    } else {
        if loaded.defs.is_empty() && loaded.problems.is_empty() {
            println!(
                "no SOPs ({} has no *.toml definitions)",
                defs::dir(root).display()
            );
        }
        for d in loaded.defs.values() {
            println!(
                "{:<24} agent {:<12} trigger {:<8} {} step(s)",
                d.name,
                d.def.agent,
                d.def.trigger.kind(),
                d.def.steps.len()
            );
        }
        for p in &loaded.problems {
            eprintln!("error: {p}");
        }
    }
    Ok(if loaded.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn validate(root: &InstallRoot, name: Option<&str>, json: bool) -> anyhow::Result<ExitCode> {
    let config = ConfigStore::load(root.clone())?;
    let mut loaded = defs::load(root, config.snapshot().config());
    if let Some(name) = name {
        let file = defs::dir(root).join(format!("{name}.toml"));
        let shown = file.display().to_string();
        loaded.problems.retain(|p| p.file == shown);
        loaded.defs.retain(|n, _| n == name);
        if loaded.defs.is_empty() && loaded.problems.is_empty() {
            bail!("no SOP '{name}' ({shown} does not exist)");
        }
    }
    if json {
        super::print_json(&json!({"valid": loaded.defs.keys().collect::<Vec<_>>(),
                                  "problems": loaded.problems}))?;
    } else {
        for n in loaded.defs.keys() {
            println!("ok: {n}");
        }
        for p in &loaded.problems {
            eprintln!("error: {p}");
        }
    }
    Ok(if loaded.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn open_existing(root: &InstallRoot) -> anyhow::Result<Option<Arc<SopStore>>> {
    Ok(super::stores(root).sop_runs()?)
}

fn show(root: &InstallRoot, name: &str, json: bool) -> anyhow::Result<ExitCode> {
    let config = ConfigStore::load(root.clone())?;
    let d = defs::find(root, config.snapshot().config(), name).map_err(anyhow::Error::msg)?;
    let runs = match open_existing(root)? {
        Some(s) => s.list(Some(name), 5)?,
        None => Vec::new(),
    };
    if json {
        super::print_json(&json!({"name": d.name, "file": d.path, "definition": d.def,
                                  "runs": runs}))?;
    } else {
        println!("{} ({})", d.name, d.path.display());
        if let Some(desc) = &d.def.description {
            println!("  {desc}");
        }
        println!("  agent:   {}", d.def.agent);
        println!("  trigger: {}", serde_json::to_string(&d.def.trigger)?);
        for (i, s) in d.def.steps.iter().enumerate() {
            println!("  {}. {} ({})", i + 1, s.id, s.kind.name());
        }
        for r in &runs {
            println!("  run {} {} ({})", r.id, r.status, r.created_at);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn step_id_at(run: &SopRun) -> String {
    run.definition
        .get("steps")
        .and_then(|s| s.get(run.step_index as usize))
        .and_then(|s| s.get("id"))
        .and_then(|s| s.as_str())
        .unwrap_or("-")
        .to_string()
}

fn runs(
    root: &InstallRoot,
    name: Option<&str>,
    limit: u32,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let runs = match open_existing(root)? {
        Some(s) => s.list(name, limit)?,
        None => Vec::new(),
    };
    if json {
        super::print_json(&serde_json::to_value(&runs)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    if runs.is_empty() {
        println!("no SOP runs");
    }
    for r in &runs {
        let at = if r.is_active() {
            format!(" at step {}", step_id_at(r))
        } else {
            String::new()
        };
        println!(
            "{}  {:<16} {:<9}{at}  {}{}",
            r.id,
            r.sop,
            r.status,
            r.created_at,
            r.error
                .as_deref()
                .map(|e| format!("  ({e})"))
                .unwrap_or_default()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn show_run(root: &InstallRoot, id: &str, json: bool) -> anyhow::Result<ExitCode> {
    let store = open_existing(root)?
        .ok_or_else(|| anyhow::anyhow!("no SOP run '{id}' (no run was ever stored)"))?;
    let run = store
        .get(id)?
        .ok_or_else(|| anyhow::anyhow!("no SOP run '{id}' (see `warren sop runs`)"))?;
    let steps = store.steps(id)?;
    let events = store.events(id)?;
    if json {
        super::print_json(&json!({"run": run, "steps": steps, "events": events}))?;
    } else {
        println!("run {} of '{}': {}", run.id, run.sop, run.status);
        if let Some(e) = &run.error {
            println!("  error: {e}");
        }
        for s in &steps {
            println!("  step {} ({}): {}", s.step_id, s.status, s.output);
        }
        for e in &events {
            println!(
                "  {} {} {}{}",
                e.at,
                e.who,
                e.what,
                e.why
                    .as_deref()
                    .map(|w| format!(": {w}"))
                    .unwrap_or_default()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn decide(
    root: &InstallRoot,
    run: &str,
    step: &str,
    approved: bool,
    reason: Option<String>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let word = if approved { "approved" } else { "denied" };
    let op = SopOp::SopDecide {
        run: run.to_string(),
        step: step.to_string(),
        approved,
        reason,
        who: who(),
    };
    let (_, body) = super::run_op(root, &AdminOp::Sop(op))?;
    report(json, &body, || {
        println!("{word} step '{step}' of run {run}")
    })
}

fn parse_input(input: Option<&str>) -> anyhow::Result<Value> {
    match input {
        None => Ok(json!({})),
        Some(text) => {
            let v: Value = serde_json::from_str(text).context("--input is not JSON")?;
            if !v.is_object() {
                bail!("--input must be a JSON object (its fields are {{{{input.<field>}}}})");
            }
            Ok(v)
        }
    }
}

fn start(
    root: &InstallRoot,
    name: &str,
    input: Option<&str>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let op = SopOp::SopRun {
        name: name.to_string(),
        input: parse_input(input)?,
    };
    let (ran, body) = super::run_op(root, &AdminOp::Sop(op))?;
    if json {
        super::print_json(&body)?;
    }
    let run = &body["run"];
    match ran {
        Ran::Daemon(_) => {
            if !json {
                if let Some(w) = body["warning"].as_str() {
                    eprintln!("warning: {w}");
                }
                println!(
                    "started run {} of '{name}' in the running daemon (follow it with `warren sop runs {name}`)",
                    run["id"].as_str().unwrap_or("?")
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        // The run went to its end in this process.
        Ran::Here => {
            if !json {
                println!(
                    "run {} of '{name}': {}{}",
                    run["id"].as_str().unwrap_or("?"),
                    run["status"].as_str().unwrap_or("?"),
                    run["error"]
                        .as_str()
                        .map(|e| format!(" ({e})"))
                        .unwrap_or_default()
                );
            }
            Ok(if run["status"] == "ok" {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}
