//! `warren pair [--device NAME]` and `warren tokens list|revoke` (STATE-15, STATE-16, STATE-21).
//! Pairing and revoking are verbs of the control seam ([`super::control`]): pairing needs the
//! running daemon (it holds the pending code and issues tokens); a revoke runs in the daemon,
//! which reloads so the token stops working at once, or, with none, here.

use std::process::ExitCode;

use anyhow::{Context, bail};
use warren_config::InstallRoot;
use warren_gateway::control::{AdminOp, SystemOp};
use warren_gateway::devices::Devices;
use warren_gateway::pairing::device_id;
use warren_gateway::tokens;

use super::Ran;
use crate::cli::TokensCommand;

/// A pairing verb: the daemon's answer, or why it refused.
fn pairing(root: &InstallRoot, op: SystemOp, what: &str) -> anyhow::Result<serde_json::Value> {
    let answer = super::control(root, &AdminOp::System(op))?;
    answer.body.or_else(|body| {
        bail!(
            "the gateway refused to {what}: {}",
            body["message"].as_str().unwrap_or("no reason given")
        )
    })
}

/// Asks the running daemon for a code and prints it here (the only place it is ever shown).
pub fn pair(root: &InstallRoot, json: bool) -> anyhow::Result<ExitCode> {
    let body = pairing(root, SystemOp::PairCode {}, "issue a pairing code")?;
    let code = body["code"].as_str().context("the gateway sent no code")?;
    let secs = body["expires_in_secs"].as_u64().unwrap_or(0);
    let addr = warren_gateway::read_endpoint(root).map(|e| e.addr.to_string());
    if json {
        super::print_json(
            &serde_json::json!({"code": code, "expires_in_secs": secs, "gateway": addr}),
        )?;
    } else {
        println!(
            "pairing code: {code} (one use, expires in {} min)",
            secs / 60
        );
        if let Some(addr) = addr {
            println!(
                "on the device: POST http://{addr}/pair with {{\"code\": \"{code}\", \"device\": \"<name>\"}}"
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Pairs `device` through the daemon's `POST /admin/pair` with the admin key (issue 35 §9: a
/// local process flooding `POST /pair` cannot lock the operator out) and prints its token here
/// (the only place it is ever shown).
pub fn pair_device(root: &InstallRoot, device: &str, json: bool) -> anyhow::Result<ExitCode> {
    let op = SystemOp::Pair {
        device: device.to_string(),
    };
    let answer = pairing(root, op, &format!("pair '{device}'"))?;
    let token = answer["token"]
        .as_str()
        .context("the gateway sent no token")?;
    let id = answer["device"]["id"].as_str().unwrap_or_default();
    if json {
        super::print_json(&answer)?;
    } else {
        println!("paired device '{device}' (id {id})");
        println!("token: {token}");
        println!("send it as `Authorization: Bearer <token>`; it is not shown again");
    }
    Ok(ExitCode::SUCCESS)
}

pub fn tokens(root: &InstallRoot, cmd: TokensCommand, json: bool) -> anyhow::Result<ExitCode> {
    let store = super::load_checked(root)?;
    // A read never creates the registry: without one, every token is listed unnamed.
    let devices = if root.devices_db().exists() && matches!(cmd, TokensCommand::List) {
        Some(Devices::open(&root.devices_db())?)
    } else {
        None
    };
    match cmd {
        TokensCommand::List => {
            let listed = match &devices {
                Some(devices) => tokens::list_blocking(&store.snapshot(), devices)?,
                None => tokens::token_hashes(&store.snapshot())
                    .iter()
                    .map(|h| warren_gateway::devices::Device {
                        id: device_id(h).to_string(),
                        name: warren_gateway::devices::UNNAMED.to_string(),
                        created_unix: 0,
                        last_seen_unix: None,
                    })
                    .collect(),
            };
            if json {
                super::print_json(&serde_json::to_value(&listed)?)?;
            } else if listed.is_empty() {
                println!("no paired devices (pair one with `warren pair`)");
            } else {
                let mut table = crate::output::Table::new(&["ID", "NAME", "CREATED", "LAST SEEN"]);
                for d in listed {
                    table.row(vec![
                        d.id,
                        d.name,
                        crate::output::unix_time(d.created_unix),
                        d.last_seen_unix
                            .map_or_else(|| "never".to_string(), crate::output::unix_time),
                    ]);
                }
                table.print();
            }
        }
        TokensCommand::Revoke { id } => {
            let (ran, body) = super::run_op(root, &AdminOp::System(SystemOp::TokenRevoke { id }))?;
            let note = match ran {
                Ran::Daemon(_) if body["reloaded_generation"].is_u64() => {
                    "the running daemon reloaded: the token no longer works"
                }
                Ran::Daemon(_) => {
                    "the running daemon did not reload: the token works until it reloads (SIGHUP)"
                }
                Ran::Here => "no daemon runs",
            };
            let revoked = body["revoked"].as_str().unwrap_or_default();
            if json {
                super::print_json(&serde_json::json!({"revoked": revoked, "note": note}))?;
            } else {
                println!("revoked {revoked} ({note})");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
