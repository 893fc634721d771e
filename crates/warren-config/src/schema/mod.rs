//! The config schema: every section docs/requirements.md names, with defaults that run with
//! nothing but one `[agents.<alias>]` table (STATE-1, CFG-1).
//!
//! Every struct denies unknown keys, so a typo is an error with a "did you mean" hint rather
//! than a silently ignored setting (CFG-7). Secret fields use [`Secret`]; [`Config::secrets_mut`]
//! is the one list of them (encryption on save, decryption on load, redaction).

mod agents;
pub mod approvals;
pub mod channels;
pub mod cron;
pub mod mcp;
pub(crate) mod mcp_secrets;
pub mod memory_backends;
mod network;
pub mod rates;
mod sections;
pub mod sop;
pub mod telemetry;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use warren_core::AgentAlias;

pub use agents::{
    AccessLevel, AgentConfig, AgentMemoryConfig, AgentWorkspaceConfig, Autonomy,
    DEFAULT_MAX_WORKSPACE_MB, MemoryBackendKind, MemoryGrant, RiskProfile, RuntimeProfile,
    SandboxFallback, SandboxKind,
};
pub use mcp::{AgentMcpConfig, McpEnvValue, McpRisk, McpServerConfig};
pub use network::{
    AgentNetworkConfig, HOST_ENTRY_FORMS, HostEntry, HostEntryError, HostPattern, NamedSecret,
    TaintMode, normalize_host, parse_host_entry, secret_host_scheme,
};
pub use sections::{
    ChannelsConfig, CostConfig, CronConfig, DEFAULT_DISK_RESERVE_MB, DEFAULT_MAX_OUTPUT_TOKENS,
    EmbedderConfig, EmbedderKind, GatewayConfig, GatewayOpenAiConfig, LogConfig, LogPersistence,
    MemoryConfig, ModelRate, PostgresConfig, ProviderConfig, ProviderKind, RuntimeConfig,
    RuntimeKind, SessionBackendKind, SessionDurability, SessionStoreOnError, StreamMode,
};
pub use sop::SopConfig;
pub use telemetry::{MetricsConfig, TelemetryConfig};

use crate::secrets::Secret;

/// Name of the built-in risk and runtime profile every agent gets unless it names another.
pub const DEFAULT_PROFILE: &str = "default";

/// The whole of `config.toml`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub runtime: RuntimeConfig,
    pub agents: BTreeMap<AgentAlias, AgentConfig>,
    pub risk_profiles: BTreeMap<String, RiskProfile>,
    pub runtime_profiles: BTreeMap<String, RuntimeProfile>,
    pub providers: BTreeMap<String, ProviderConfig>,
    pub memory: MemoryConfig,
    pub channels: ChannelsConfig,
    /// `[approvals]`: channels whose owners approve calls (issue 38 §4).
    #[serde(skip_serializing_if = "approvals::ApprovalsConfig::is_empty")]
    pub approvals: approvals::ApprovalsConfig,
    pub gateway: GatewayConfig,
    pub cron: CronConfig,
    /// `[sop]` as written, if present (the SOP engine's settings; [`Config::sop_settings`]
    /// gives the defaults when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sop: Option<SopConfig>,
    pub cost: CostConfig,
    pub log: LogConfig,
    /// `[metrics]`: Prometheus metrics (issue 25).
    pub metrics: MetricsConfig,
    /// `[telemetry]`: OpenTelemetry traces and the memory self-watch (issue 25).
    pub telemetry: TelemetryConfig,
    /// `[secrets.<name>]`: values the credential broker substitutes for `{{secret:<name>}}`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub secrets: BTreeMap<String, NamedSecret>,
}

impl Config {
    /// Agents with their aliases (validated when the config was read), in alias order.
    pub fn agents(&self) -> impl Iterator<Item = (AgentAlias, &AgentConfig)> {
        self.agents.iter().map(|(k, v)| (k.clone(), v))
    }

    pub fn agent(&self, alias: &AgentAlias) -> Option<&AgentConfig> {
        self.agents.get(alias.as_str())
    }

    /// The risk profile an agent uses: its named profile, or the built-in default.
    pub fn risk_profile_of(&self, agent: &AgentConfig) -> RiskProfile {
        self.risk_profiles
            .get(&agent.risk_profile)
            .cloned()
            .unwrap_or_default()
    }

    /// The runtime profile an agent uses: its named profile, or the built-in default.
    pub fn runtime_profile_of(&self, agent: &AgentConfig) -> RuntimeProfile {
        agent
            .runtime_profile
            .as_deref()
            .and_then(|p| self.runtime_profiles.get(p))
            .cloned()
            .unwrap_or_default()
    }

    /// The memory backend an agent uses: its own choice, else `[memory] backend` (MEM-1).
    pub fn memory_backend_of(&self, agent: &AgentConfig) -> MemoryBackendKind {
        agent.memory.backend.unwrap_or(self.memory.backend)
    }

    /// The default agent: `[runtime] default_agent`, else `main` if it exists, else the only
    /// agent. Receives the legacy workspace (LAYOUT-2) and commands given no alias.
    pub fn default_agent(&self) -> Option<AgentAlias> {
        if let Some(name) = &self.runtime.default_agent {
            return Some(name.clone());
        }
        if let Some((main, _)) = self.agents.get_key_value("main") {
            return Some(main.clone());
        }
        let mut agents = self.agents();
        match (agents.next(), agents.next()) {
            (Some((alias, _)), None) => Some(alias),
            _ => None,
        }
    }

    /// Every secret field with its key path. The one list: load decrypts these, saves encrypt
    /// the dirty ones, and `Serialize` redacts them.
    pub fn secrets_mut(&mut self) -> Vec<(String, &mut Secret)> {
        let mut out = Vec::new();
        for (name, provider) in &mut self.providers {
            if let Some(key) = provider.api_key.as_mut() {
                out.push((
                    format!("providers.{}.api_key", crate::keypath::quote(name)),
                    key,
                ));
            }
        }
        if let Some(key) = self.memory.embedder.api_key.as_mut() {
            out.push(("memory.embedder.api_key".to_string(), key));
        }
        if let Some(url) = self.memory.postgres.url.as_mut() {
            out.push(("memory.postgres.url".to_string(), url));
        }
        if let Some(key) = self.memory.qdrant.api_key.as_mut() {
            out.push(("memory.qdrant.api_key".to_string(), key));
        }
        for (i, token) in self.gateway.paired_tokens.iter_mut().enumerate() {
            out.push((format!("gateway.paired_tokens[{i}]"), token));
        }
        for (name, channel) in &mut self.channels.telegram {
            if let Some(token) = channel.token.as_mut() {
                out.push((
                    format!("channels.telegram.{}.token", crate::keypath::quote(name)),
                    token,
                ));
            }
        }
        for (name, secret) in &mut self.secrets {
            out.push((
                format!("secrets.{}.value", crate::keypath::quote(name)),
                &mut secret.value,
            ));
        }
        out
    }
}

pub(crate) fn default_profile_name() -> String {
    DEFAULT_PROFILE.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field that serialises as `[redacted]` is listed by `secrets_mut`, and vice versa:
    /// a new secret field cannot be forgotten by the encrypt/decrypt passes.
    #[test]
    fn secrets_mut_lists_every_secret_field() {
        let mut config = Config::default();
        config.providers.insert(
            "openai".into(),
            ProviderConfig {
                api_key: Some(Secret::new("x")),
                ..ProviderConfig::default()
            },
        );
        config.memory.embedder.api_key = Some(Secret::new("x"));
        config.memory.postgres.url = Some(Secret::new("x"));
        config.memory.qdrant.api_key = Some(Secret::new("x"));
        config.gateway.paired_tokens = vec![Secret::new("a"), Secret::new("b")];
        config.secrets.insert(
            "github".into(),
            NamedSecret {
                value: Secret::new("x"),
                hosts: vec!["api.github.com".into()],
            },
        );
        config.channels.telegram.insert(
            "home".into(),
            channels::TelegramChannel {
                token: Some(Secret::new("x")),
                ..toml::from_str("agent = \"main\"").unwrap()
            },
        );
        let listed = config.secrets_mut().len();

        let value = toml::Value::try_from(&config).unwrap_or(toml::Value::Boolean(false));
        fn count(v: &toml::Value) -> usize {
            match v {
                toml::Value::String(s) => usize::from(s == "[redacted]"),
                toml::Value::Array(a) => a.iter().map(count).sum(),
                toml::Value::Table(t) => t.values().map(count).sum(),
                _ => 0,
            }
        }
        assert_eq!(count(&value), listed);
        assert_eq!(listed, 8);
    }

    #[test]
    fn default_agent_rules() {
        let mut config = Config::default();
        assert_eq!(config.default_agent(), None);
        config
            .agents
            .insert(AgentAlias::new("solo").unwrap(), AgentConfig::default());
        assert_eq!(
            config.default_agent().map(|a| a.to_string()),
            Some("solo".into())
        );
        config
            .agents
            .insert(AgentAlias::new("zeta").unwrap(), AgentConfig::default());
        assert_eq!(
            config.default_agent(),
            None,
            "two agents, no main: ambiguous"
        );
        config
            .agents
            .insert(AgentAlias::new("main").unwrap(), AgentConfig::default());
        assert_eq!(
            config.default_agent().map(|a| a.to_string()),
            Some("main".into())
        );
        config.runtime.default_agent = Some(AgentAlias::new("zeta").unwrap());
        assert_eq!(
            config.default_agent().map(|a| a.to_string()),
            Some("zeta".into())
        );
    }
}
