//! The install-wide sections: `[runtime]`, `[providers.<name>]`, `[memory]`, `[channels]`,
//! `[gateway]`, `[cron]`, `[sop]`, `[cost]`, `[log]`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::agents::MemoryBackendKind;
use crate::secrets::Secret;

/// `[runtime]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeConfig {
    /// Where tools run: on the host (`native`) or in a container (`docker`, GIT-9).
    pub kind: RuntimeKind,
    /// The agent commands address when given no alias; receives the legacy workspace (LAYOUT-2).
    pub default_agent: Option<warren_core::AgentAlias>,
    /// How long a reload or shutdown lets in-flight turns finish before cancelling them.
    pub shutdown_grace_secs: u64,
    /// Free space (MiB) kept for the daemon's own stores (sessions, config saves) on the
    /// filesystem of every root an agent writes (issue 35 §8; `0` = none): agent file writes
    /// and shell children are refused or stopped before they would eat into it.
    pub disk_reserve_mb: u64,
}

/// The default `[runtime] disk_reserve_mb`.
pub const DEFAULT_DISK_RESERVE_MB: u64 = 256;

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            kind: RuntimeKind::Native,
            default_agent: None,
            shutdown_grace_secs: 10,
            disk_reserve_mb: DEFAULT_DISK_RESERVE_MB,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuntimeKind {
    Native,
    Docker,
}

/// `[providers.<name>]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProviderConfig {
    pub kind: ProviderKind,
    pub base_url: Option<String>,
    /// Stored encrypted (`warren config set providers.<name>.api_key --secret`).
    pub api_key: Option<Secret>,
    /// Read the key from this environment variable instead.
    pub api_key_env: Option<String>,
    /// Provider names tried in order when this one fails.
    pub fallbacks: Vec<String>,
    /// For `kind = "script"`: the scripted conversation file.
    pub script: Option<PathBuf>,
    pub timeout_secs: u64,
    pub max_retries: u32,
    /// First retry delay; doubles per attempt (429, 5xx and timeouts are retried).
    pub retry_backoff_ms: u64,
    /// Whether the endpoint honours a request for at most one tool call per response
    /// (`parallel_tool_calls: false`; LOOP-4). Unset = yes for OpenAI and Anthropic.
    pub parallel_call_control: Option<bool>,
    /// Whether requests ask for a streamed answer (`kind = "openai"` only; issue 16 §3):
    /// `"auto"` (default) streams and, once a streamed tool round comes back empty (as
    /// llama.cpp's server does with tool-capable chat formats), sends this provider's later
    /// tool rounds unstreamed; `true` always streams; `false` never does. An empty streamed
    /// answer is asked again once without streaming either way.
    #[serde(skip_serializing_if = "StreamMode::is_auto")]
    pub stream: StreamMode,
    /// The most output tokens any request asks for (issue 37 §3): bounds a runaway answer well
    /// before `timeout_secs`; a client's smaller `max_tokens` wins.
    pub max_output_tokens: u32,
}

/// `providers.<name>.max_output_tokens` by default.
pub const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 4096;

impl Default for ProviderConfig {
    fn default() -> Self {
        Self {
            kind: ProviderKind::Openai,
            base_url: None,
            api_key: None,
            api_key_env: None,
            fallbacks: Vec::new(),
            script: None,
            timeout_secs: 120,
            max_retries: 3,
            retry_backoff_ms: 500,
            parallel_call_control: None,
            stream: StreamMode::Auto,
            max_output_tokens: DEFAULT_MAX_OUTPUT_TOKENS,
        }
    }
}

/// `providers.<name>.stream`: `"auto"`, `true` or `false`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StreamMode {
    /// Stream; fall back to unstreamed tool rounds when the server mishandles them.
    #[default]
    Auto,
    /// `true`: always ask for a stream.
    On,
    /// `false`: never ask for a stream.
    Off,
}

impl StreamMode {
    pub fn is_auto(&self) -> bool {
        *self == StreamMode::Auto
    }
}

impl Serialize for StreamMode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            StreamMode::Auto => s.serialize_str("auto"),
            StreamMode::On => s.serialize_bool(true),
            StreamMode::Off => s.serialize_bool(false),
        }
    }
}

impl<'de> Deserialize<'de> for StreamMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = StreamMode;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("\"auto\", true or false")
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<StreamMode, E> {
                Ok(if v { StreamMode::On } else { StreamMode::Off })
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<StreamMode, E> {
                match v {
                    "auto" => Ok(StreamMode::Auto),
                    "true" => Ok(StreamMode::On),
                    "false" => Ok(StreamMode::Off),
                    other => Err(E::invalid_value(serde::de::Unexpected::Str(other), &self)),
                }
            }
        }
        d.deserialize_any(Visitor)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    Openai,
    Anthropic,
    Script,
}

/// `[memory]`: the install-wide memory defaults (MEM).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryConfig {
    /// Backend of agents that do not choose one.
    pub backend: MemoryBackendKind,
    pub embedder: EmbedderConfig,
    pub postgres: PostgresConfig,
    pub qdrant: super::memory_backends::QdrantConfig,
    pub lucid: super::memory_backends::LucidConfig,
    /// Earlier versions kept per memory key (overwrites and forgets; `warren memory undo`).
    pub history_versions: u32,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self {
            backend: MemoryBackendKind::Sqlite,
            embedder: EmbedderConfig::default(),
            postgres: PostgresConfig::default(),
            qdrant: Default::default(),
            lucid: Default::default(),
            history_versions: 20,
        }
    }
}

/// `[memory.embedder]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmbedderConfig {
    pub kind: EmbedderKind,
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub api_key: Option<Secret>,
    pub dimensions: Option<u32>,
    /// Weight of the vector score against the keyword score in hybrid recall (0..=1).
    pub vector_weight: Option<f64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EmbedderKind {
    #[default]
    None,
    Openai,
}

/// `[memory.postgres]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PostgresConfig {
    /// Connection URL; a secret because it may carry a password.
    pub url: Option<Secret>,
    pub schema: String,
}

impl Default for PostgresConfig {
    fn default() -> Self {
        Self {
            url: None,
            schema: "warren".to_string(),
        }
    }
}

/// `[channels]` (SESS-1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChannelsConfig {
    pub session_backend: SessionBackendKind,
    pub session_durability: SessionDurability,
    /// What every entry point does when the session store cannot be built (MIG-7).
    pub session_store_on_error: SessionStoreOnError,
    /// Turns that may wait behind the running turn of one session (SESS-2); one more is refused
    /// (the gateway answers 429).
    pub session_queue_depth: usize,
    /// How long a turn waits for its session before it is refused (the gateway answers 408).
    pub session_queue_timeout_secs: u64,
    /// `[channels.telegram.<name>]`: Telegram bots, each serving one agent (issue 38).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub telegram: BTreeMap<String, super::channels::TelegramChannel>,
}

impl Default for ChannelsConfig {
    fn default() -> Self {
        Self {
            session_backend: SessionBackendKind::default(),
            session_durability: SessionDurability::default(),
            session_store_on_error: SessionStoreOnError::default(),
            session_queue_depth: 8,
            session_queue_timeout_secs: 120,
            telegram: BTreeMap::new(),
        }
    }
}

/// `[channels] session_store_on_error` (MIG-7 [decision]): one policy for the daemon, `warren
/// agent` and `warren sessions`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionStoreOnError {
    /// Fail closed: the entry point reports the error and stops its session subsystem.
    #[default]
    Stop,
    /// Run with in-memory sessions (nothing persisted) and a loud warning.
    Ephemeral,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionBackendKind {
    #[default]
    Sqlite,
    Jsonl,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionDurability {
    /// fsync per acknowledged turn.
    #[default]
    Turn,
    Batched,
}

/// `[gateway]` (STATE-15, STATE-21).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewayConfig {
    pub bind: String,
    pub port: u16,
    /// SHA-256 hashes of paired bearer tokens (never the tokens themselves), stored encrypted.
    pub paired_tokens: Vec<Secret>,
    pub allow_remote_admin: bool,
    /// Seconds a client may take to send a request's whole header block, counted from its
    /// first byte (or from connecting); a slower connection is closed (1..=3600).
    pub header_read_timeout_secs: u64,
    /// Seconds a keep-alive connection may stay idle between requests before it is closed
    /// (1..=86400).
    pub idle_timeout_secs: u64,
    /// Client connections open at once at most; further ones wait in the listen backlog until
    /// one closes, and reaching the cap is logged (1..=65536).
    pub max_connections: u32,
    /// `[gateway.openai]`: the OpenAI-compatible `/v1` routes (issue 27).
    pub openai: GatewayOpenAiConfig,
}

/// `[gateway.openai]`: OpenAI-compatible `GET /v1/models` and `POST /v1/chat/completions`,
/// behind the same paired bearer tokens as `/api/*`; every request is an agent turn.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewayOpenAiConfig {
    /// Serve the `/v1` routes (off by default: they answer 404 naming this key).
    pub enabled: bool,
}

/// Default gateway port: unassigned by IANA and unused by common services.
pub const DEFAULT_GATEWAY_PORT: u16 = 42617;

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            bind: "127.0.0.1".to_string(),
            port: DEFAULT_GATEWAY_PORT,
            paired_tokens: Vec::new(),
            allow_remote_admin: false,
            header_read_timeout_secs: 10,
            idle_timeout_secs: 60,
            max_connections: 1024,
            openai: GatewayOpenAiConfig::default(),
        }
    }
}

/// `[cron]` (STATE-9).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CronConfig {
    pub enabled: bool,
    /// Consecutive failed runs after which a job is paused (with the reason).
    pub max_failures: u32,
    /// First retry delay after a failed run; doubles per consecutive failure.
    pub backoff_secs: u64,
    /// The longest retry delay.
    pub backoff_max_secs: u64,
    /// Runs kept per job in `data/cron/jobs.db`.
    pub max_run_history: u32,
    /// Declared jobs, reconciled on daemon start and reload.
    pub jobs: BTreeMap<String, super::cron::CronJobDecl>,
}

impl Default for CronConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_failures: 5,
            backoff_secs: 30,
            backoff_max_secs: 3600,
            max_run_history: 200,
            jobs: BTreeMap::new(),
        }
    }
}

/// `[cost]` (STATE-14). `enabled = false` stops writing the ledger only: every limit still
/// holds, counted in memory by the running process (docs/operations.md, "Costs").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CostConfig {
    pub enabled: bool,
    pub daily_limit_usd: Option<f64>,
    pub monthly_limit_usd: Option<f64>,
    pub warn_at_percent: u8,
    /// Model name → price (quote names with dots: `[cost.rates."gpt-4.1"]`); overrides or adds
    /// to the built-in table of [`super::rates`].
    pub rates: BTreeMap<String, ModelRate>,
}

impl CostConfig {
    /// The price of `model`: `[cost.rates]`, else the built-in table; `None` = unpriced.
    pub fn rate_for(&self, model: &str) -> Option<ModelRate> {
        super::rates::lookup(&self.rates, model)
    }
}

impl Default for CostConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            daily_limit_usd: None,
            monthly_limit_usd: None,
            warn_at_percent: 80,
            rates: BTreeMap::new(),
        }
    }
}

/// `[cost.rates.<model>]`, in US dollars per million tokens.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelRate {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
    /// The most tokens one response can have: the worst case reserved before each call
    /// (unset: the request's `max_tokens`, else 4096).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
}

/// `[log]` (STATE-13).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    pub persistence: LogPersistence,
    /// Size at which a rolling trace file is trimmed.
    pub max_bytes: u64,
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            persistence: LogPersistence::Rolling,
            max_bytes: 10 * 1024 * 1024,
            level: "info".to_string(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogPersistence {
    Rolling,
    Full,
    None,
}
