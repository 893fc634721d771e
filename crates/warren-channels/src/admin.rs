//! The operator's view of the channels (issue 38 §8), one implementation for the API
//! (`/api/channels...`) and the CLI (`warren channels ...`): the configured channels with their
//! health and row counts, one channel's refused senders and outbox, the senders with where
//! their standing comes from, and the operator's Allow / Block. Never shows a token.

use serde_json::{Value, json};
use warren_config::Config;
use warren_config::schema::channels::TelegramChannel;
use warren_store::channels::{ChannelStore, ChannelStoreError};

use crate::health::Status;

/// Why an operator's request about a channel failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error(
        "no channel '{name}' (configured: {known}); channels are [channels.telegram.<name>] tables"
    )]
    Unknown { name: String, known: String },
    #[error("'{id}' is not a sender id (digits, e.g. 123456789)")]
    BadSender { id: String },
    #[error(transparent)]
    Store(#[from] ChannelStoreError),
}

/// The channel `name` names: `telegram.<name>` or just `<name>`; (full name, config).
pub fn resolve<'c>(
    config: &'c Config,
    name: &str,
) -> Result<(String, &'c TelegramChannel), AdminError> {
    let short = name.strip_prefix("telegram.").unwrap_or(name);
    match config.channels.telegram.get(short) {
        Some(c) => Ok((format!("telegram.{short}"), c)),
        None => Err(AdminError::Unknown {
            name: name.to_string(),
            known: {
                let names: Vec<String> = config
                    .channels
                    .telegram
                    .keys()
                    .map(|k| format!("telegram.{k}"))
                    .collect();
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            },
        }),
    }
}

fn summary(name: &str, c: &TelegramChannel, status: Option<&Status>) -> Value {
    json!({
        "name": name,
        "kind": "telegram",
        "agent": c.agent,
        "enabled": c.enabled,
        "token_set": c.token.as_ref().is_some_and(|t| !t.is_empty()),
        "api_base": c.api_base,
        "session": c.session,
        "owners": c.owners,
        "allow": c.allow,
        "require_mention": c.groups.require_mention,
        "health": status.map_or_else(
            || json!({"status": "not running (no daemon, or it has not started this channel)"}),
            |s| json!(s),
        ),
    })
}

/// Every configured channel with its health (`statuses`: the running daemon's) and row counts.
pub fn list(
    config: &Config,
    store: Option<&ChannelStore>,
    statuses: &[Status],
) -> Result<Value, AdminError> {
    let mut out = Vec::new();
    for (short, c) in &config.channels.telegram {
        let name = format!("telegram.{short}");
        let mut v = summary(&name, c, statuses.iter().find(|s| s.name == name));
        if let Some(store) = store {
            v["counts"] = json!(store.counts(&name)?);
        }
        out.push(v);
    }
    Ok(json!({"channels": out}))
}

/// One channel: its summary, recent refused messages and recent outbox rows.
pub fn show(
    config: &Config,
    store: Option<&ChannelStore>,
    statuses: &[Status],
    name: &str,
) -> Result<Value, AdminError> {
    let (name, c) = resolve(config, name)?;
    let mut v = summary(&name, c, statuses.iter().find(|s| s.name == name));
    if let Some(store) = store {
        v["counts"] = json!(store.counts(&name)?);
        v["refused"] = json!(store.inbox(&name, Some("refused"), 20)?);
        let outbox: Vec<Value> = store
            .outbox(&name, 20)?
            .into_iter()
            .map(|r| {
                json!({"id": r.id, "purpose": r.purpose, "chat_id": r.chat_id, "state": r.state,
                       "chunks_sent": r.chunks_sent, "message_ids": r.message_ids,
                       "attempts": r.attempts, "error": r.error, "created_at": r.created_at,
                       "chars": r.text.chars().count()})
            })
            .collect();
        v["outbox"] = json!(outbox);
    }
    Ok(v)
}

/// A channel's senders: the owners and `allow` of config, and every sender the store knows
/// (pending, allowed or blocked by an owner or the operator).
pub fn senders(
    config: &Config,
    store: Option<&ChannelStore>,
    name: &str,
) -> Result<Value, AdminError> {
    let (name, c) = resolve(config, name)?;
    let mut out: Vec<Value> = Vec::new();
    for id in &c.owners {
        out.push(json!({"sender_id": id, "status": "owner", "source": "config"}));
    }
    for id in c.allow.iter().filter(|a| !c.owners.contains(a)) {
        out.push(json!({"sender_id": id, "status": "allowed", "source": "config"}));
    }
    if let Some(store) = store {
        for s in store.senders(&name)? {
            if c.owners.contains(&s.sender_id) {
                continue;
            }
            out.retain(|v| v["sender_id"] != s.sender_id.as_str());
            out.push(
                json!({"sender_id": s.sender_id, "name": s.name, "status": s.status,
                            "source": "store", "first_seen": s.first_seen,
                            "updated_at": s.updated_at}),
            );
        }
    }
    Ok(json!({"channel": name, "senders": out}))
}

/// The operator allows (`allow`) or blocks a sender of a channel; the next message of the
/// sender is decided by it. Returns the channel's full name.
pub fn decide(
    config: &Config,
    store: &ChannelStore,
    name: &str,
    sender: &str,
    allow: bool,
) -> Result<String, AdminError> {
    let (name, _) = resolve(config, name)?;
    let digits = sender.strip_prefix('-').unwrap_or(sender);
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        return Err(AdminError::BadSender {
            id: sender.to_string(),
        });
    }
    store.set_sender(&name, sender, if allow { "allowed" } else { "blocked" })?;
    Ok(name)
}
