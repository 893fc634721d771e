//! `warren channels list|status|senders|allow|block|test` (issue 38 §8): the channels of
//! config.toml with their health (from the running daemon), their senders, the operator's
//! Allow / Block (written to `data/channels/channels.db`, which the daemon reads at each
//! message), and a `getMe` check of a bot's token. A token is never printed.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use clap::Subcommand;
use serde_json::Value;
use warren_channels::admin;
use warren_channels::health::Status;
use warren_config::{ConfigStore, InstallRoot};
use warren_runtime::DaemonStatus;

/// `warren channels`.
#[derive(Debug, Subcommand)]
pub enum ChannelsCommand {
    /// The configured channels with their agent, health and message counts
    List,
    /// Each channel's health from the running daemon (or NAME's, with refused senders and the
    /// outbox): last poll, last send, failures, last error
    Status { name: Option<String> },
    /// A channel's senders: owners, allowed, pending (asked about) and blocked
    Senders { name: String },
    /// Let SENDER talk to NAME's agent (their turns stay untrusted unless they are an owner)
    Allow { name: String, sender: String },
    /// Block SENDER on NAME: their messages are kept as refused, never answered
    Block { name: String, sender: String },
    /// Check NAME's bot token with Telegram's getMe (prints the bot's name, never the token)
    Test { name: String },
}

pub fn run(root: &InstallRoot, cmd: ChannelsCommand, json: bool) -> anyhow::Result<ExitCode> {
    let config = ConfigStore::load(root.clone())?;
    let snapshot = config.snapshot();
    let config = snapshot.config();
    let store = || -> anyhow::Result<_> {
        Ok(if root.channels_db().exists() {
            Some(super::stores(root).channels()?)
        } else {
            None
        })
    };
    match cmd {
        ChannelsCommand::List => {
            let view = admin::list(config, store()?.as_deref(), &daemon_statuses(root))?;
            print_list(&view, json)
        }
        ChannelsCommand::Status { name: None } => {
            let statuses = daemon_statuses(root);
            let view = admin::list(config, store()?.as_deref(), &statuses)?;
            print_list(&view, json)?;
            let down = statuses.iter().any(|s| s.status == "down");
            Ok(if down {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
        ChannelsCommand::Status { name: Some(name) } => {
            let view = admin::show(config, store()?.as_deref(), &daemon_statuses(root), &name)?;
            if json {
                super::print_json(&view)?;
            } else {
                print_one(&view);
            }
            Ok(ExitCode::SUCCESS)
        }
        ChannelsCommand::Senders { name } => {
            let view = admin::senders(config, store()?.as_deref(), &name)?;
            if json {
                super::print_json(&view)?;
            } else {
                for s in view["senders"].as_array().into_iter().flatten() {
                    println!(
                        "{:<16} {:<8} {}",
                        s["sender_id"].as_str().unwrap_or("?"),
                        s["status"].as_str().unwrap_or("?"),
                        s["name"].as_str().unwrap_or("")
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        ChannelsCommand::Allow { name, sender } => decide(root, config, &name, &sender, true, json),
        ChannelsCommand::Block { name, sender } => {
            decide(root, config, &name, &sender, false, json)
        }
        ChannelsCommand::Test { name } => test(config, &name, json),
    }
}

fn decide(
    root: &InstallRoot,
    config: &warren_config::Config,
    name: &str,
    sender: &str,
    allow: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    admin::resolve(config, name)?;
    let store = super::stores(root).channels()?;
    let channel = admin::decide(config, &store, name, sender, allow)?;
    let status = if allow { "allowed" } else { "blocked" };
    if json {
        super::print_json(
            &serde_json::json!({"channel": channel, "sender_id": sender, "status": status}),
        )?;
    } else {
        println!("{channel}: sender {sender} {status} (applies to their next message)");
    }
    Ok(ExitCode::SUCCESS)
}

fn test(config: &warren_config::Config, name: &str, json: bool) -> anyhow::Result<ExitCode> {
    let (full, channel) = admin::resolve(config, name)?;
    let Some(token) = channel.token.as_ref().filter(|t| !t.is_empty()) else {
        bail!("{full}: no token; set it with `warren config set --secret channels.{full}.token`");
    };
    let api = warren_channels::telegram::api::Api::new(
        &full,
        &channel.api_base,
        token.expose(),
        Duration::from_secs(15),
    );
    let (id, username) = api
        .get_me()
        .map_err(|e| anyhow::anyhow!("{full}: getMe failed: {e}"))?;
    if json {
        super::print_json(
            &serde_json::json!({"channel": full, "ok": true, "bot_id": id, "bot": username}),
        )?;
    } else {
        println!(
            "{full}: the token works: bot @{username} (id {id}) serving agent {}",
            channel.agent
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The running daemon's channel health; empty when no daemon runs or it does not answer.
fn daemon_statuses(root: &InstallRoot) -> Vec<Status> {
    if !matches!(
        warren_runtime::probe(root),
        Ok(DaemonStatus::Running { .. })
    ) {
        return Vec::new();
    }
    let Ok((200, body)) = warren_gateway::client::admin_call(root, "GET", "/admin/channels") else {
        return Vec::new();
    };
    body["channels"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| serde_json::from_value::<StatusWire>(c["health"].clone()).ok())
        .map(StatusWire::into_status)
        .collect()
}

/// [`Status`] as the daemon serialised it.
#[derive(serde::Deserialize)]
struct StatusWire {
    name: String,
    status: String,
    bot: Option<String>,
    last_poll_ok: Option<String>,
    last_poll_age_secs: Option<u64>,
    last_send_ok: Option<String>,
    consecutive_failures: u64,
    last_error: Option<String>,
    restarts: u64,
    lag_ms: Option<u64>,
    health_window_secs: u64,
}

impl StatusWire {
    fn into_status(self) -> Status {
        Status {
            name: self.name,
            status: self.status,
            bot: self.bot,
            last_poll_ok: self.last_poll_ok,
            last_poll_age_secs: self.last_poll_age_secs,
            last_send_ok: self.last_send_ok,
            consecutive_failures: self.consecutive_failures,
            last_error: self.last_error,
            restarts: self.restarts,
            lag_ms: self.lag_ms,
            health_window_secs: self.health_window_secs,
        }
    }
}

fn print_list(view: &Value, json: bool) -> anyhow::Result<ExitCode> {
    if json {
        super::print_json(view)?;
        return Ok(ExitCode::SUCCESS);
    }
    let channels = view["channels"].as_array().cloned().unwrap_or_default();
    if channels.is_empty() {
        println!("no channels configured (add a [channels.telegram.<name>] table)");
    }
    for c in &channels {
        print_one(c);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_one(c: &Value) {
    let h = &c["health"];
    let s = |v: &Value| v.as_str().map_or_else(|| "-".to_string(), str::to_string);
    println!(
        "{}  agent {}  {}{}",
        s(&c["name"]),
        s(&c["agent"]),
        s(&h["status"]),
        h["bot"]
            .as_str()
            .map(|b| format!("  bot @{b}"))
            .unwrap_or_default()
    );
    if h.get("consecutive_failures").is_some() {
        println!(
            "  last poll {}  last send {}  failures {}  restarts {}",
            s(&h["last_poll_ok"]),
            s(&h["last_send_ok"]),
            h["consecutive_failures"],
            h["restarts"]
        );
    }
    if let Some(e) = h["last_error"].as_str() {
        println!("  last error: {e}");
    }
    if let Some(counts) = c.get("counts") {
        println!("  inbox {}  outbox {}", counts["inbox"], counts["outbox"]);
    }
    for r in c["refused"].as_array().into_iter().flatten() {
        println!(
            "  refused: {} ({}) {}: {}",
            s(&r["sender_id"]),
            s(&r["sender_name"]),
            s(&r["received_at"]),
            s(&r["note"])
        );
    }
}
