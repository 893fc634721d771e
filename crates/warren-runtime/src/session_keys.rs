//! Default session keys, namespaced by agent (SESS-1, issue 35 §7).
//!
//! Session keys are global: a key names one session whichever agent asks for it, and the first
//! agent to use a key owns it. Default keys used to be `<channel>-<alias>` (`cli-b`,
//! `http-b`), which any agent could create first and so lock agent `b` out of its own default
//! session. Now:
//!
//! - The default key of agent `b` on a channel is `Agent-b-<channel>` (`Agent-b-cli`,
//!   `Agent-b-http`, `Agent-b-cron`, `Agent-b-acp`): the upper-case `Agent-` prefix cannot start
//!   an alias (aliases are lower case), so the key names its agent unambiguously.
//! - Only `b` may create (or take, when it has no owner) a key of `b`'s namespace; the door
//!   refuses any other agent with [`DefaultKeyReserved`], naming `b`. The legacy form
//!   `<channel>-<alias>` of a *configured* agent is refused to the other agents the same way.
//! - Migration: an existing legacy row `cli-b` owned by `b` stays `b`'s default (so its history
//!   stays where it was); a legacy row owned by anyone else (or by no one) is ignored and `b`
//!   gets `Agent-b-cli`. Nothing is renamed.
//!
//! What is not covered: a row an agent rename left under the old alias's namespace stays with
//! the renamed agent (a new agent taking the old alias then finds its default owned; the
//! refusal names the owner). Explicit keys outside these two forms are first come, first
//! served, as before.

use warren_core::{AgentAlias, SessionKey, SessionKeyError};
use warren_store::sessions::SessionHandle;

/// The channel of sessions started by `warren agent`.
pub const CLI_CHANNEL: &str = "cli";
/// The channel of sessions started through the gateway's chat route.
pub const GATEWAY_CHANNEL: &str = "gateway";
/// The channel of sessions started by scheduled jobs.
pub const CRON_CHANNEL: &str = "cron";
/// The channel of sessions started by an editor over ACP (`warren acp`).
pub const ACP_CHANNEL: &str = "acp";
/// The channel of sessions started by a Telegram bot (issue 38).
pub const TELEGRAM_CHANNEL: &str = "telegram";

/// Where a turn comes from: it labels the sessions the turn starts and derives the default
/// session key, one per channel and agent, so defaults never collide (SESS-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// `warren agent` (one-shot and REPL): sessions labelled `cli`, default key
    /// `Agent-<alias>-cli`.
    Cli,
    /// The gateway's chat route: sessions labelled `gateway`, default key `Agent-<alias>-http`.
    Gateway,
    /// A scheduled job (`warren cron`, STATE-9): sessions labelled `cron`, default key
    /// `Agent-<alias>-cron`; a job without a named session runs in `cron-<job>-<run>`.
    Cron,
    /// `warren acp` (editors over the Agent Client Protocol): sessions labelled `acp`, default
    /// key `Agent-<alias>-acp` (ACP prompts name their session, so the default is rarely used).
    Acp,
    /// A Telegram bot (`[channels.telegram.<name>]`, issue 38): sessions labelled `telegram`;
    /// the channel names its sessions (`tg_<bot>_<chat>_<sender>`), default key
    /// `Agent-<alias>-telegram`.
    Telegram,
}

impl Channel {
    /// The label new sessions of this channel carry.
    pub fn label(self) -> &'static str {
        match self {
            Channel::Cli => CLI_CHANNEL,
            Channel::Gateway => GATEWAY_CHANNEL,
            Channel::Cron => CRON_CHANNEL,
            Channel::Acp => ACP_CHANNEL,
            Channel::Telegram => TELEGRAM_CHANNEL,
        }
    }

    /// `agent`'s namespaced default session on this channel (`Agent-<alias>-cli`,
    /// `Agent-<alias>-http`, ...; issue 35 §7). The door uses the legacy `cli-<alias>` instead
    /// when that row exists and `agent` owns it ([`resolve_default`]).
    pub fn default_session(self, agent: &AgentAlias) -> Result<SessionKey, SessionKeyError> {
        default_key(self, agent)
    }
}

/// Why the default key of a turn could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum DefaultKeyError {
    #[error(transparent)]
    Key(#[from] SessionKeyError),
    #[error(transparent)]
    Session(#[from] warren_store::sessions::SessionError),
}

/// The prefix of every namespaced default key.
pub const DEFAULT_KEY_PREFIX: &str = "Agent-";

const CHANNELS: [Channel; 5] = [
    Channel::Cli,
    Channel::Gateway,
    Channel::Cron,
    Channel::Acp,
    Channel::Telegram,
];

/// A turn asked for a default key of another agent that does not exist yet (or has no owner).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "session '{session}' is a default session key of agent '{owner}'; agent '{agent}' cannot create it (leave the session out for {agent}'s own default, or choose another key)"
)]
pub struct DefaultKeyReserved {
    pub session: SessionKey,
    pub owner: AgentAlias,
    pub agent: AgentAlias,
}

/// The word a channel's default keys carry (`cli`, `http`, `cron`, `acp`).
pub fn channel_word(channel: Channel) -> &'static str {
    match channel {
        Channel::Cli => "cli",
        Channel::Gateway => "http",
        Channel::Cron => "cron",
        Channel::Acp => "acp",
        Channel::Telegram => "telegram",
    }
}

fn is_channel_word(word: &str) -> bool {
    CHANNELS.iter().any(|c| channel_word(*c) == word)
}

/// `agent`'s namespaced default key on `channel`: `Agent-<alias>-<channel word>`.
pub fn default_key(channel: Channel, agent: &AgentAlias) -> Result<SessionKey, SessionKeyError> {
    SessionKey::new(format!(
        "{DEFAULT_KEY_PREFIX}{agent}-{}",
        channel_word(channel)
    ))
}

/// The default key before issue 35 (`<channel word>-<alias>`), still used when its row
/// exists and `agent` owns it.
pub fn legacy_default_key(
    channel: Channel,
    agent: &AgentAlias,
) -> Result<SessionKey, SessionKeyError> {
    SessionKey::new(format!("{}-{agent}", channel_word(channel)))
}

/// The agent whose default key `key` is, if any: any valid alias for the namespaced form
/// (`Agent-<alias>-<channel word>`), a configured alias (`configured` says which) for the
/// legacy form (`<channel word>-<alias>`).
pub fn reserved_for(
    key: &SessionKey,
    configured: impl Fn(&AgentAlias) -> bool,
) -> Option<AgentAlias> {
    let key = key.as_str();
    if let Some(rest) = key.strip_prefix(DEFAULT_KEY_PREFIX) {
        let (alias, word) = rest.rsplit_once('-')?;
        return is_channel_word(word)
            .then_some(alias)
            .and_then(|a| AgentAlias::new(a).ok());
    }
    let (word, alias) = key.split_once('-')?;
    if !is_channel_word(word) {
        return None;
    }
    AgentAlias::new(alias).ok().filter(|a| configured(a))
}

/// The key a turn of `agent` on `channel` runs in when it names none: the legacy key when its
/// row exists and `agent` owns it (migration), else the namespaced key.
pub async fn resolve_default(
    sessions: &SessionHandle,
    channel: Channel,
    agent: &AgentAlias,
) -> Result<SessionKey, DefaultKeyError> {
    let legacy = legacy_default_key(channel, agent)?;
    let k = legacy.clone();
    let meta = sessions.run(move |b| b.meta(&k)).await?;
    if meta.is_some_and(|m| m.agent.as_ref() == Some(agent)) {
        return Ok(legacy);
    }
    Ok(default_key(channel, agent)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alias(s: &str) -> AgentAlias {
        AgentAlias::new(s).unwrap_or_else(|e| panic!("{e}"))
    }

    fn key(s: &str) -> SessionKey {
        SessionKey::new(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn default_keys_name_their_agent_unambiguously_issue35() {
        for a in ["b", "a-b", "cli", "x_y-http"] {
            for c in CHANNELS {
                let k = default_key(c, &alias(a)).unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(reserved_for(&k, |_| false), Some(alias(a)), "{k}");
            }
        }
        assert_eq!(
            default_key(Channel::Gateway, &alias("b")).ok(),
            Some(key("Agent-b-http"))
        );
    }

    #[test]
    fn legacy_keys_are_reserved_only_for_configured_agents_issue35() {
        let only_b = |a: &AgentAlias| a.as_str() == "b";
        assert_eq!(reserved_for(&key("cli-b"), only_b), Some(alias("b")));
        assert_eq!(reserved_for(&key("http-b"), only_b), Some(alias("b")));
        assert_eq!(reserved_for(&key("cli-c"), only_b), None);
        for free in [
            "b",
            "chat-b",
            "Agent-b",
            "Agent-b-web",
            "Agent-B-cli",
            "cli-B",
        ] {
            assert_eq!(reserved_for(&key(free), only_b), None, "{free}");
        }
    }
}
