//! `warren pair [--device NAME]` and `warren tokens list|revoke` (STATE-15, STATE-16, STATE-21).

use std::process::ExitCode;

use anyhow::{Context, bail};
use warren_config::InstallRoot;
use warren_gateway::client::admin_call;
use warren_gateway::devices::Devices;
use warren_gateway::pairing::device_id;
use warren_gateway::tokens;

use crate::cli::TokensCommand;

/// Asks the running daemon for a code and prints it here (the only place it is ever shown).
pub fn pair(root: &InstallRoot, json: bool) -> anyhow::Result<ExitCode> {
    let (status, body) = admin_call(root, "POST", "/admin/paircode")?;
    if status != 200 {
        bail!(
            "the gateway refused to issue a pairing code ({status}): {}",
            body["message"].as_str().unwrap_or("no reason given")
        );
    }
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
    let body = serde_json::json!({ "device": device });
    let (status, answer) =
        warren_gateway::client::admin_call_json(root, "POST", "/admin/pair", Some(&body))?;
    if status != 200 {
        bail!(
            "the gateway refused to pair '{device}' ({status}): {}",
            answer["message"].as_str().unwrap_or("no reason given")
        );
    }
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
    let devices = if root.devices_db().exists() || matches!(cmd, TokensCommand::Revoke { .. }) {
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
            let hash = tokens::revoke_blocking(&store, devices.as_ref(), &id)?;
            let reloaded = match warren_runtime::probe(root)? {
                warren_runtime::DaemonStatus::Running { .. } => {
                    match admin_call(root, "POST", "/admin/reload") {
                        Ok((200, _)) => "the running daemon reloaded: the token no longer works",
                        _ => {
                            "could not reach the running daemon: the token works until it reloads (SIGHUP)"
                        }
                    }
                }
                warren_runtime::DaemonStatus::NotRunning => "no daemon runs",
            };
            if json {
                super::print_json(
                    &serde_json::json!({"revoked": device_id(&hash), "note": reloaded}),
                )?;
            } else {
                println!("revoked {} ({reloaded})", device_id(&hash));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
