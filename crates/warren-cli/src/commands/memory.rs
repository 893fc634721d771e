//! `warren memory list|recall|show|store|forget|history|undo --agent ALIAS`: the agent's scoped
//! memory handle, exactly as its tools see it (MEM-1/2): list/show/store/forget/history/undo
//! touch only its own rows, recall also shows what its grants allow. `show` and `history` print
//! each version's provenance (issue 20 §3); writes from here are the operator's.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use time::format_description::well_known::Rfc3339;
use warren_config::{ConfigStore, InstallRoot};
use warren_core::AgentAlias;
use warren_memory::{
    ListQuery, Memory, MemoryEntry, MemoryStores, NewEntry, Provenance, RecallQuery,
};

use crate::cli::{AgentArg, MemoryCommand};

pub fn run(root: &InstallRoot, cmd: MemoryCommand, json: bool) -> anyhow::Result<ExitCode> {
    let store = ConfigStore::load(root.clone())?;
    let snapshot = store.snapshot();
    let config = snapshot.config();
    let agent_arg = match &cmd {
        MemoryCommand::List { agent, .. }
        | MemoryCommand::Recall { agent, .. }
        | MemoryCommand::Show { agent, .. }
        | MemoryCommand::Store { agent, .. }
        | MemoryCommand::Forget { agent, .. }
        | MemoryCommand::History { agent, .. }
        | MemoryCommand::Undo { agent, .. } => agent,
    };
    let alias = resolve_agent(agent_arg, config)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let stores = MemoryStores::new(root.clone());
        let memory = warren_memory::create_memory_for_agent(&stores, config, &alias).await?;
        execute(memory, cmd, json).await
    })
}

fn resolve_agent(arg: &AgentArg, config: &warren_config::Config) -> anyhow::Result<AgentAlias> {
    let alias = match &arg.agent {
        Some(a) => AgentAlias::new(a.as_str())?,
        None => match config.default_agent() {
            Some(a) => a,
            None => bail!("no default agent; pass --agent ALIAS"),
        },
    };
    if config.agent(&alias).is_none() {
        bail!("agent '{alias}' is not configured (see `warren agents list`)");
    }
    Ok(alias)
}

async fn execute(
    memory: Arc<dyn Memory>,
    cmd: MemoryCommand,
    json: bool,
) -> anyhow::Result<ExitCode> {
    match cmd {
        MemoryCommand::List {
            category,
            limit,
            offset,
            ..
        } => {
            let rows = memory
                .list(ListQuery {
                    category,
                    offset,
                    limit,
                })
                .await?;
            print_entries(&rows, None, json)
        }
        MemoryCommand::Recall { query, limit, .. } => {
            let hits = memory.recall(RecallQuery::new(query, limit)).await?;
            let scores: Vec<f64> = hits.iter().map(|h| h.score).collect();
            let rows: Vec<MemoryEntry> = hits.into_iter().map(|h| h.entry).collect();
            print_entries(&rows, Some(&scores), json)
        }
        MemoryCommand::Show { key, .. } => {
            let Some(entry) = memory.get(key.clone()).await? else {
                bail!("agent '{}' has no memory with key '{key}'", memory.agent());
            };
            if json {
                super::print_json(&serde_json::to_value(&entry)?)?;
            } else {
                println!("key:      {}", entry.key);
                println!("agent:    {}", entry.agent);
                println!("category: {}", entry.category);
                println!("session:  {}", entry.session.as_deref().unwrap_or("-"));
                println!("created:  {}", entry.created_at.format(&Rfc3339)?);
                println!("updated:  {}", entry.updated_at.format(&Rfc3339)?);
                println!("version:  {}", entry.version);
                print_provenance(&entry.provenance);
                println!("\n{}", entry.content);
            }
            Ok(ExitCode::SUCCESS)
        }
        MemoryCommand::Store {
            key,
            content,
            category,
            expected_version,
            ..
        } => {
            let entry = NewEntry::new(
                memory.agent().as_str(),
                &key,
                &content,
                category.as_deref(),
                None,
            )?
            .with_provenance(Provenance::operator("cli"))
            .expecting(expected_version);
            let stored = memory.store(entry).await?;
            if json {
                super::print_json(&serde_json::to_value(&stored)?)?;
            } else {
                println!(
                    "stored '{}' of agent '{}' as version {}",
                    stored.key,
                    memory.agent(),
                    stored.version
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        MemoryCommand::History { key, .. } => {
            let versions = memory.history(key.clone()).await?;
            if versions.is_empty() {
                bail!(
                    "agent '{}' has no memory with key '{key}' and no kept version of it",
                    memory.agent()
                );
            }
            if json {
                super::print_json(&serde_json::to_value(&versions)?)?;
                return Ok(ExitCode::SUCCESS);
            }
            println!(
                "{:<8} {:<10} {:<10} {:<20} {:<24} CONTENT",
                "VERSION", "STATE", "TRUST", "WRITTEN", "BY"
            );
            for v in &versions {
                let e = &v.entry;
                let content: String = e.content.replace('\n', " ").chars().take(50).collect();
                let written = e.updated_at.format(&Rfc3339).unwrap_or_default();
                let by = match (&e.provenance.agent, &e.provenance.channel) {
                    (Some(a), Some(c)) => format!("{a} via {c}"),
                    (Some(a), None) => a.clone(),
                    (None, Some(c)) => format!("operator via {c}"),
                    (None, None) => "-".into(),
                };
                println!(
                    "{:<8} {:<10} {:<10} {:<20} {:<24} {content}",
                    e.version,
                    v.state.as_str(),
                    e.provenance.trust.as_str(),
                    written.get(..19).unwrap_or(&written),
                    by
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        MemoryCommand::Undo { key, to, .. } => {
            let restored = memory.undo(key.clone(), to).await?;
            if json {
                super::print_json(&serde_json::to_value(&restored)?)?;
            } else {
                println!(
                    "restored '{key}' of agent '{}' as version {} ({} trust)",
                    memory.agent(),
                    restored.version,
                    restored.provenance.trust
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        MemoryCommand::Forget { key, .. } => {
            if !memory.forget(key.clone()).await? {
                bail!("agent '{}' has no memory with key '{key}'", memory.agent());
            }
            if json {
                super::print_json(&serde_json::json!({ "key": key, "forgotten": true }))?;
            } else {
                println!("forgot '{key}' of agent '{}'", memory.agent());
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn print_provenance(p: &Provenance) {
    println!("trust:    {}", p.trust);
    for (name, v) in [
        ("by", &p.agent),
        ("channel", &p.channel),
        ("turn in", &p.session),
        ("call", &p.tool_call),
        ("receipt", &p.receipt),
    ] {
        if let Some(v) = v {
            println!("{:<10}{v}", format!("{name}:"));
        }
    }
}

fn print_entries(
    rows: &[MemoryEntry],
    scores: Option<&[f64]>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    if json {
        let values: Vec<serde_json::Value> = rows
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let mut v = serde_json::to_value(e).unwrap_or_default();
                if let Some(s) = scores.and_then(|s| s.get(i)) {
                    v["score"] = serde_json::json!(s);
                }
                v
            })
            .collect();
        super::print_json(&serde_json::Value::Array(values))?;
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        println!("no memories");
        return Ok(ExitCode::SUCCESS);
    }
    // The version and trust level (issue 20 §3): who wrote a row decides how far to believe it.
    let mut table = crate::output::Table::new(&[
        "AGENT", "KEY", "CATEGORY", "VER", "TRUST", "UPDATED", "CONTENT",
    ]);
    for e in rows {
        let content: String = e.content.replace('\n', " ").chars().take(60).collect();
        let updated = e.updated_at.format(&Rfc3339).unwrap_or_default();
        table.row(vec![
            e.agent.to_string(),
            e.key.to_string(),
            e.category.to_string(),
            e.version.to_string(),
            e.provenance.trust.as_str().to_string(),
            updated.get(..19).unwrap_or(&updated).to_string(),
            content,
        ]);
    }
    table.print();
    Ok(ExitCode::SUCCESS)
}

/// The external memory backends the agents of `config` use, as `/api/health` reports them
/// (`memory_backends`: Qdrant's URL and error while it does not answer); `None` when none is
/// used. For `warren status` and `warren doctor`.
pub(crate) fn backends_health(
    root: &InstallRoot,
    config: &warren_config::Config,
) -> Option<serde_json::Value> {
    use warren_config::schema::MemoryBackendKind;
    let external = config.agents().any(|(_, a)| {
        matches!(
            config.memory_backend_of(a),
            MemoryBackendKind::Qdrant | MemoryBackendKind::Lucid
        )
    });
    if !external {
        return None;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    Some(runtime.block_on(MemoryStores::new(root.clone()).health(config)))
}

/// One line per backend of [`backends_health`] with its status: `qdrant error <location>:
/// <error>`.
pub(crate) fn backend_lines(health: &serde_json::Value) -> Vec<(String, String)> {
    health
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(name, _)| name.as_str() != "status")
        .map(|(name, v)| {
            let status = v["status"].as_str().unwrap_or("unknown");
            let location = v["location"].as_str().unwrap_or_default();
            let line = match v["error"].as_str() {
                Some(e) => format!("{name} {status} {location}: {e}"),
                None => format!("{name} {status} {location}"),
            };
            (status.to_string(), line)
        })
        .collect()
}
