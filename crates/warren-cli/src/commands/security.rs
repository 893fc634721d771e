//! `warren security posture ALIAS`, `warren tools list|run`.

use std::process::ExitCode;

use anyhow::Context;
use warren_config::{ConfigStore, InstallRoot};
use warren_core::AgentAlias;
use warren_runtime::AgentKit;

use crate::cli::{SecurityCommand, ToolsCommand};

fn kit(root: &InstallRoot, alias: &str) -> anyhow::Result<AgentKit> {
    let alias = AgentAlias::new(alias)?;
    let store = ConfigStore::load(root.clone())?;
    Ok(AgentKit::build(store.snapshot().config(), root, &alias)?)
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// The agent's full kit (memory tools included) on `runtime`, which must outlive its use.
fn kit_with_memory(
    runtime: &tokio::runtime::Runtime,
    root: &InstallRoot,
    alias: &str,
) -> anyhow::Result<AgentKit> {
    let alias = AgentAlias::new(alias)?;
    let store = super::load_checked(root)?;
    let stores = warren_memory::MemoryStores::new(root.clone());
    Ok(runtime.block_on(AgentKit::build_with_memory(
        store.snapshot().config(),
        root,
        &alias,
        &stores,
    ))?)
}

pub fn run(root: &InstallRoot, cmd: SecurityCommand, json: bool) -> anyhow::Result<ExitCode> {
    match cmd {
        SecurityCommand::Posture { alias } => posture(root, &alias, json),
        SecurityCommand::Selftest { alias } => selftest(root, alias.as_deref(), json),
        SecurityCommand::Egress { alias } => egress(root, &alias, json),
    }
}

/// `warren security egress ALIAS` (issue 24 §5).
fn egress(root: &InstallRoot, alias: &str, json: bool) -> anyhow::Result<ExitCode> {
    let alias = AgentAlias::new(alias)?;
    let store = super::load_checked(root)?;
    let value = warren_runtime::egress::audit(store.snapshot().config(), root, &alias, 20)
        .map_err(anyhow::Error::msg)?;
    if json {
        super::print_json(&value)?;
        return Ok(ExitCode::SUCCESS);
    }
    let list = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|x| x.as_str().map(str::to_string))
            .collect()
    };
    let allow = list(&value["allow"]);
    println!("agent:     {alias}");
    if allow.is_empty() {
        println!(
            "allow:     (none: no http_request tool, no proxy; set [agents.{alias}.network] allow)"
        );
    } else {
        println!("allow:     {}", allow.join(", "));
    }
    println!(
        "taint:     {}",
        if value["taint"] == true { "on" } else { "off" }
    );
    for s in value["secrets"].as_array().into_iter().flatten() {
        println!(
            "secret:    {{{{secret:{}}}}} usable at {}",
            s["secret"].as_str().unwrap_or("?"),
            s["host"].as_str().unwrap_or("?")
        );
    }
    let recent = value["recent"].as_array().cloned().unwrap_or_default();
    if recent.is_empty() {
        println!("recent:    (no connections in the trace)");
    }
    for c in recent {
        let outcome = match (c["status"].as_u64(), c["refused"].as_str()) {
            (Some(s), _) => format!("status {s}"),
            (None, Some(r)) => format!("REFUSED: {r}"),
            _ => "failed".into(),
        };
        println!(
            "{}  {:<12} {} {}:{}  {outcome}",
            c["time"].as_str().unwrap_or("?"),
            c["via"].as_str().unwrap_or("?"),
            c["method"].as_str().unwrap_or("?"),
            c["host"].as_str().unwrap_or("?"),
            c["port"]
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `warren security selftest [ALIAS]`: the escape matrix against each agent's real sandbox.
fn selftest(root: &InstallRoot, alias: Option<&str>, json: bool) -> anyhow::Result<ExitCode> {
    use warren_security::sandbox::selftest::{self, Outcome, Targets};
    let store = ConfigStore::load(root.clone())?;
    let config = store.snapshot().config().clone();
    let aliases: Vec<String> = match alias {
        Some(a) => vec![a.to_string()],
        None => config.agents().map(|(a, _)| a.to_string()).collect(),
    };
    let targets = Targets {
        secret_file: root.secret_key(),
        hidden_file: root.config_file(),
        daemon_socket: warren_acp::socket_path(root),
        daemon_key: root.daemon_socket_key(),
        gateway_admin: root.gateway_admin(),
    };
    let mut escapes = 0usize;
    let mut report = Vec::new();
    for alias in aliases {
        let kit = kit(root, &alias)?;
        let sandbox = kit.sandbox();
        if !json {
            let p = sandbox.posture();
            println!(
                "agent {alias}: sandbox {} ({} probes)",
                p["level"].as_str().unwrap_or("?"),
                selftest::Probe::ALL.len()
            );
        }
        let mut rows = Vec::new();
        for probe in selftest::Probe::ALL {
            let row = selftest::run_probe(sandbox, probe, &targets);
            if row.outcome == Outcome::Escape {
                escapes += 1;
            }
            if !json {
                let (word, why) = match row.outcome {
                    Outcome::Held => ("held", format!("stopped by {}", layers_text(&row.layers))),
                    Outcome::Escape => ("ESCAPE", row.detail.clone()),
                    Outcome::Skipped => ("skipped", row.detail.clone()),
                };
                println!("  {word:<8} {:<44} {why}", row.name);
            }
            rows.push(row);
        }
        report
            .push(serde_json::json!({"agent": alias, "posture": sandbox.posture(), "rows": rows}));
    }
    if json {
        super::print_json(&serde_json::json!({"escapes": escapes, "agents": report}))?;
    } else if escapes == 0 {
        println!("0 escapes");
    } else {
        println!("{escapes} ESCAPE(S): see the rows above");
    }
    Ok(if escapes == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn layers_text(layers: &[&str]) -> String {
    layers.join(", ")
}

fn posture(root: &InstallRoot, alias: &str, json: bool) -> anyhow::Result<ExitCode> {
    let alias = alias.to_string();
    let kit = kit(root, &alias)?;
    let value = serde_json::json!({ "policy": kit.policy().describe(), "sandbox": kit.sandbox().posture() });
    if json {
        super::print_json(&value)?;
    } else {
        let p = kit.policy();
        println!("agent:            {}", p.alias());
        println!("autonomy:         {:?}", p.autonomy());
        println!("workspace:        {}", p.workspace().display());
        println!("workspace_only:   {}", p.workspace_only());
        for (tier, grants) in [
            ("read-write", p.read_write_roots()),
            ("read-only", p.read_only_roots()),
            ("write-only", p.write_only_roots()),
        ] {
            for g in grants {
                println!("{tier:<17} {} ({})", g.root.display(), g.alias);
            }
        }
        println!("commands:         {}", p.allowed_commands().join(" "));
        let exec_capable = p.exec_capable_allowed();
        if !exec_capable.is_empty() {
            println!(
                "exec-capable:     {} (can run other programs or code; approval under supervised)",
                exec_capable.join(" ")
            );
        }
        println!(
            "network:          {}",
            if p.allow_network() {
                "allowed"
            } else {
                "denied"
            }
        );
        let s = kit.sandbox().posture();
        println!(
            "sandbox:          {} (requested {})",
            s["level"].as_str().unwrap_or("?"),
            s["requested"].as_str().unwrap_or("?")
        );
        if let Some(abi) = s["landlock_abi"].as_i64() {
            println!("landlock abi:     {abi}");
        }
        println!("network (kernel): {}", s["network"].as_str().unwrap_or("?"));
        for gap in s["not_contained"].as_array().into_iter().flatten() {
            println!("not contained:    {}", gap.as_str().unwrap_or("?"));
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn tools(root: &InstallRoot, cmd: ToolsCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        ToolsCommand::List { alias } => {
            let runtime = runtime()?;
            let kit = kit_with_memory(&runtime, root, &alias)?;
            let specs: Vec<_> = kit.tools().iter().map(|t| t.spec()).collect();
            super::print_json(&serde_json::to_value(specs)?)?;
            Ok(ExitCode::SUCCESS)
        }
        ToolsCommand::Run {
            alias,
            tool,
            args,
            approve,
        } => {
            let args: serde_json::Value = serde_json::from_str(&args)
                .with_context(|| format!("the arguments of {tool} are not valid JSON"))?;
            let runtime = runtime()?;
            let kit = kit_with_memory(&runtime, root, &alias)?;
            match runtime.block_on(kit.run_tool(&tool, args, approve))? {
                Ok(output) => {
                    super::print_json(
                        &serde_json::json!({ "ok": true, "result": output.content }),
                    )?;
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    super::print_json(
                        &serde_json::json!({ "ok": false, "error": e, "message": e.to_string() }),
                    )?;
                    Ok(ExitCode::FAILURE)
                }
            }
        }
    }
}
