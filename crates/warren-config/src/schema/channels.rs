//! `[channels.telegram.<name>]`: a messaging channel that serves one agent (issue 38, BEYOND-14,
//! BEYOND-15). The bot token is a secret (`warren config set --secret
//! channels.telegram.<name>.token`), encrypted at rest and never printed; `allow` and `owners`
//! list the platform's sender ids; unknown senders get no reply and the owners are asked.

use serde::{Deserialize, Serialize};
use warren_core::AgentAlias;

use crate::error::Problem;
use crate::keypath::quote;
use crate::secrets::Secret;

/// Telegram's public Bot API.
pub const TELEGRAM_API: &str = "https://api.telegram.org";

/// One Telegram bot serving one agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelegramChannel {
    /// The agent this bot serves.
    pub agent: AgentAlias,
    /// The bot token (a secret; the channel does not start without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<Secret>,
    /// The Bot API server (a self-hosted one, or a local fake in tests).
    #[serde(default = "default_api_base")]
    pub api_base: String,
    /// Whether the channel runs (default true).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Sender ids that may talk to the agent (besides the owners).
    #[serde(default)]
    pub allow: Vec<String>,
    /// Sender ids who own the bot: they may talk, they are asked about new senders, and their
    /// messages do not taint a turn.
    #[serde(default)]
    pub owners: Vec<String>,
    /// Which messages share a session.
    #[serde(default)]
    pub session: SessionScope,
    /// Group chats.
    #[serde(default)]
    pub groups: GroupsConfig,
    /// How long one `getUpdates` long poll waits for news.
    #[serde(default = "default_poll_timeout")]
    pub poll_timeout_secs: u64,
    /// A channel with no successful round-trip with the platform for this long is `down` and
    /// restarts (on its own; the daemon stays up).
    #[serde(default = "default_health_window")]
    pub health_window_secs: u64,
    /// Issue 38 §5: the largest photo, document or voice note saved into the agent's workspace
    /// (`inbox/<date>/`); a larger one is refused with a message to the sender.
    #[serde(default = "default_media_max_bytes")]
    pub media_max_bytes: u64,
}

/// 20 MiB: the most the public Bot API's getFile serves.
pub const DEFAULT_MEDIA_MAX_BYTES: u64 = 20 * 1024 * 1024;

fn default_media_max_bytes() -> u64 {
    DEFAULT_MEDIA_MAX_BYTES
}

/// `session = "per_sender" | "per_chat" | "shared"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionScope {
    /// One session per sender and chat (and topic): `tg_<bot>_<chat>_<sender>[_<topic>]`.
    #[default]
    PerSender,
    /// One session per chat (and topic): everyone in a group shares it.
    PerChat,
    /// One session for the whole channel.
    Shared,
}

/// `[channels.telegram.<name>.groups]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GroupsConfig {
    /// In a group, answer only messages that mention the bot or reply to it.
    pub require_mention: bool,
}

impl Default for GroupsConfig {
    fn default() -> Self {
        Self {
            require_mention: true,
        }
    }
}

fn default_api_base() -> String {
    TELEGRAM_API.to_string()
}

fn yes() -> bool {
    true
}

fn default_poll_timeout() -> u64 {
    25
}

fn default_health_window() -> u64 {
    120
}

/// Whether `name` may name a channel: 1 to 32 lower-case letters, digits or `-` (it becomes
/// part of session keys, which use `_` as their separator).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// The problems of `[channels.telegram.*]` against `agents` (the configured aliases).
pub fn validate<'a>(
    telegram: impl Iterator<Item = (&'a String, &'a TelegramChannel)>,
    agents: &[&str],
) -> Vec<Problem> {
    let mut out = Vec::new();
    for (name, channel) in telegram {
        let at = |rest: &str| format!("channels.telegram.{}{rest}", quote(name));
        if !valid_name(name) {
            out.push(Problem::at(
                at(""),
                format!("channel name '{name}' must be 1 to 32 lower-case letters, digits or '-'"),
            ));
        }
        if !agents.contains(&channel.agent.as_str()) {
            out.push(
                Problem::at(at(".agent"), format!("no agent \"{}\"", channel.agent)).with_hint(
                    crate::error::did_you_mean(channel.agent.as_str(), agents.iter().copied())
                        .or(Some(format!("define [agents.{}]", channel.agent))),
                ),
            );
        }
        let base = channel.api_base.trim_end_matches('/');
        let loopback = ["http://127.0.0.1", "http://localhost", "http://[::1]"]
            .iter()
            .any(|p| base.starts_with(p));
        if !(base.starts_with("https://") || loopback) || base.contains('@') {
            out.push(Problem::at(
                at(".api_base"),
                format!(
                    "api_base '{base}' must be an https URL without credentials (plain http only to localhost)"
                ),
            ));
        }
        for (key, ids) in [(".allow", &channel.allow), (".owners", &channel.owners)] {
            if let Some(bad) = ids.iter().find(|id| !valid_id(id)) {
                out.push(Problem::at(
                    at(key),
                    format!("'{bad}' is not a Telegram user id (digits, e.g. \"123456789\")"),
                ));
            }
        }
        if channel.poll_timeout_secs == 0 || channel.poll_timeout_secs > 50 {
            out.push(Problem::at(
                at(".poll_timeout_secs"),
                "must be 1 to 50 seconds",
            ));
        }
        if channel.health_window_secs <= channel.poll_timeout_secs {
            out.push(Problem::at(
                at(".health_window_secs"),
                format!(
                    "must be longer than poll_timeout_secs ({}): a healthy long poll takes that long",
                    channel.poll_timeout_secs
                ),
            ));
        }
    }
    out
}

/// A platform user id: an optional `-` and 1 to 20 digits.
fn valid_id(id: &str) -> bool {
    let digits = id.strip_prefix('-').unwrap_or(id);
    !digits.is_empty() && digits.len() <= 20 && digits.chars().all(|c| c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn channel(toml: &str) -> TelegramChannel {
        toml::from_str(toml).unwrap()
    }

    #[test]
    fn defaults_and_problems_name_the_key_issue38() {
        let c = channel("agent = \"main\"\n");
        assert_eq!(c.api_base, TELEGRAM_API);
        assert_eq!(c.session, SessionScope::PerSender);
        assert!(c.groups.require_mention && c.enabled);
        let name = "home".to_string();
        assert!(validate([(&name, &c)].into_iter(), &["main"]).is_empty());
        let bad = channel(
            "agent = \"x\"\napi_base = \"http://example.org\"\nallow = [\"bob\"]\npoll_timeout_secs = 30\nhealth_window_secs = 30\n",
        );
        let problems: Vec<String> = validate([(&name, &bad)].into_iter(), &["main"])
            .iter()
            .map(|p| format!("{}: {}", p.key.clone().unwrap_or_default(), p.message))
            .collect();
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert_eq!(problems[0], "channels.telegram.home.agent: no agent \"x\"");
        assert!(problems[1].starts_with("channels.telegram.home.api_base:"));
        assert!(problems[2].starts_with("channels.telegram.home.allow: 'bob'"));
        assert!(problems[3].starts_with("channels.telegram.home.health_window_secs:"));
        assert!(!valid_name("Home") && !valid_name("a_b") && valid_name("home-2"));
    }
}
