//! `[agents.<alias>]`, `[risk_profiles.<p>]` and `[runtime_profiles.<p>]` (PERM-1, PERM-2,
//! LOOP-3, MEM-1, MEM-3).

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use warren_core::AgentAlias;

use super::default_profile_name;

/// One agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// A name from `[providers.*]`.
    pub provider: Option<String>,
    pub model: Option<String>,
    /// A name from `[risk_profiles.*]`, or the built-in `default`.
    pub risk_profile: String,
    /// A name from `[runtime_profiles.*]`; unset = built-in defaults.
    pub runtime_profile: Option<String>,
    pub workspace: AgentWorkspaceConfig,
    pub memory: AgentMemoryConfig,
    /// `[agents.<alias>.heartbeat]` (STATE-9): a check first, the model only when it fires.
    pub heartbeat: Option<super::cron::HeartbeatDecl>,
    /// `[agents.<alias>.network]`: hosts `http_request` and the shell's proxy may reach.
    pub network: super::network::AgentNetworkConfig,
    /// `[agents.<alias>.mcp]` (issue 23): the agent's own MCP servers.
    pub mcp: super::mcp::AgentMcpConfig,
    /// Shared skill bundles (`<install>/shared/skills/<bundle>/`) this agent uses (STATE-4).
    pub skills: Vec<String>,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            provider: None,
            model: None,
            risk_profile: default_profile_name(),
            runtime_profile: None,
            workspace: AgentWorkspaceConfig::default(),
            memory: AgentMemoryConfig::default(),
            heartbeat: None,
            network: Default::default(),
            mcp: Default::default(),
            skills: Vec::new(),
        }
    }
}

/// `[agents.<alias>.workspace]` (PERM-2 steps 3 and 4).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentWorkspaceConfig {
    /// Sibling alias → access level on that sibling's workspace.
    pub access: BTreeMap<AgentAlias, AccessLevel>,
    /// Turns `workspace_only` off.
    pub unrestricted_filesystem: bool,
}

/// A grant on a sibling's workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AccessLevel {
    Read,
    Write,
    ReadWrite,
}

/// `[agents.<alias>.memory]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentMemoryConfig {
    /// Unset = `[memory] backend`.
    pub backend: Option<MemoryBackendKind>,
    /// Siblings whose memory this agent may recall: `"alias"` (every category) or
    /// `{ agent = "alias", categories = ["notes"] }` (exact category names, MEM-3/MEM-8).
    pub read_memory_from: Vec<MemoryGrant>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryBackendKind {
    Sqlite,
    Postgres,
    Markdown,
    None,
    /// A Qdrant server: one shared collection, agent in the payload (MEM-5).
    Qdrant,
    /// The SQLite store enriched by the external `lucid` CLI (MEM-2).
    Lucid,
}

/// One entry of `read_memory_from`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum MemoryGrant {
    All(AgentAlias),
    Categories {
        agent: AgentAlias,
        categories: Vec<String>,
    },
}

impl MemoryGrant {
    pub fn agent(&self) -> &AgentAlias {
        match self {
            Self::All(agent) | Self::Categories { agent, .. } => agent,
        }
    }
}

impl<'de> Deserialize<'de> for MemoryGrant {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct GrantVisitor;
        impl<'de> Visitor<'de> for GrantVisitor {
            type Value = MemoryGrant;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(r#"an agent alias or { agent = "alias", categories = ["..."] }"#)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<MemoryGrant, E> {
                AgentAlias::new(v).map(MemoryGrant::All).map_err(E::custom)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<MemoryGrant, A::Error> {
                #[derive(Deserialize)]
                #[serde(deny_unknown_fields)]
                struct Scoped {
                    agent: AgentAlias,
                    categories: Vec<String>,
                }
                let s = Scoped::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(MemoryGrant::Categories {
                    agent: s.agent,
                    categories: s.categories,
                })
            }
        }
        d.deserialize_any(GrantVisitor)
    }
}

/// The default `max_workspace_mb`: room for a clone and its build output, far below a disk.
pub const DEFAULT_MAX_WORKSPACE_MB: u64 = 2048;

/// `[risk_profiles.<p>]` (PERM-2 step 1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RiskProfile {
    pub autonomy: Autonomy,
    /// Commands the shell tool may start (first word of each segment; `"*"` = any).
    pub allowed_commands: Vec<String>,
    /// Paths no tool may touch outside the agent's own workspace and granted roots (`~` = $HOME).
    pub forbidden_paths: Vec<String>,
    pub max_actions_per_hour: u32,
    pub max_cost_per_day_usd: f64,
    /// Tokens (in + out) the agent may use a day. Set: every request counts, priced or not.
    /// Unset: only requests to models without a rate count, against
    /// [`super::rates::UNPRICED_TOKENS_PER_DAY`].
    pub max_tokens_per_day: Option<u64>,
    /// Sandbox backend for child processes (SBX-1).
    pub sandbox: SandboxKind,
    /// What to do when `sandbox` is unavailable on this host (SBX-3): refuse to start the agent
    /// (`"none"`, the default) or run children unconfined (`"noop"`).
    pub fallback: SandboxFallback,
    /// Whether children may open network connections (otherwise: an empty network namespace and
    /// a seccomp filter that allows only `AF_UNIX` sockets).
    pub allow_network: bool,
    /// Must be `true` for `sandbox = "noop"` or `fallback = "noop"`: commands then run unconfined.
    pub unrestricted: bool,
    /// Resource limits of every child process (rlimits): processes of the sandbox user, the
    /// largest file a child may write, CPU seconds per process.
    pub max_processes: u64,
    pub max_file_size_mb: u64,
    pub max_cpu_secs: u64,
    /// Bytes the agent's workspace may hold, in MiB (issue 35 §8; `0` = no limit): file tools
    /// refuse a write that would pass it, and shell children may not grow a file past what
    /// remains (`RLIMIT_FSIZE`) and are killed when the workspace passes it while they run.
    /// Counted as allocated blocks, `.tmp` included. Writes into a granted sibling count
    /// against the sibling's own limit.
    pub max_workspace_mb: u64,
    /// Environment variables passed to child processes besides PATH, HOME, LANG, TERM, TMPDIR.
    pub env_passthrough: Vec<String>,
    pub shell_timeout_secs: u64,
    /// Tools this profile may use; unset = every tool.
    pub allowed_tools: Option<Vec<String>>,
    /// Tools the operator is asked about before every call, whatever the autonomy (`"*"` = all).
    pub always_ask: Vec<String>,
    /// How long an approval prompt waits; no answer in time = denied.
    pub approval_timeout_secs: u64,
    /// Under `supervised`: `file_write`/`file_edit` on a path in the agent's OWN workspace and
    /// `memory_store`/`memory_forget` on its own memory run without asking (like a
    /// "workspace-write" mode). The shell, git writes and sibling workspaces still ask, and
    /// `always_ask` still wins. The starter config's `starter` profile sets it.
    pub approve_own_writes: bool,
    /// Whether untrusted content in a turn makes every later call with side effects ask the
    /// operator (issue 24 §4; default `on`).
    pub taint: super::network::TaintMode,
    /// The largest `http_request` response body kept, in KiB (the rest is cut).
    pub max_response_kb: u64,
}

impl Default for RiskProfile {
    fn default() -> Self {
        Self {
            autonomy: Autonomy::Supervised,
            allowed_commands: [
                "ls", "cat", "grep", "find", "head", "tail", "wc", "pwd", "echo", "sort", "uniq",
                "diff", "date", "mkdir", "touch", "cp", "mv", "sed", "awk", "true", "test",
            ]
            .map(String::from)
            .to_vec(),
            forbidden_paths: ["/etc/shadow", "/root", "~/.ssh", "~/.gnupg", "~/.aws"]
                .map(String::from)
                .to_vec(),
            max_actions_per_hour: 120,
            max_cost_per_day_usd: 5.0,
            max_tokens_per_day: None,
            sandbox: SandboxKind::Auto,
            fallback: SandboxFallback::None,
            allow_network: false,
            unrestricted: false,
            max_processes: 512,
            max_file_size_mb: 1024,
            max_cpu_secs: 600,
            max_workspace_mb: DEFAULT_MAX_WORKSPACE_MB,
            env_passthrough: Vec::new(),
            shell_timeout_secs: 60,
            allowed_tools: None,
            always_ask: Vec::new(),
            approval_timeout_secs: 120,
            approve_own_writes: false,
            taint: Default::default(),
            max_response_kb: 256,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxFallback {
    #[default]
    None,
    Noop,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Autonomy {
    ReadOnly,
    Supervised,
    Full,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxKind {
    /// The full sandbox (namespaces via bwrap + Landlock + seccomp); refuse when unavailable
    /// (unless `fallback = "noop"` with `unrestricted = true`).
    Auto,
    /// Landlock + seccomp without namespaces: a weaker level, reported as such.
    Landlock,
    /// The full sandbox, asked for by name.
    Bubblewrap,
    Docker,
    Noop,
}

/// `[runtime_profiles.<p>]` (LOOP-2, LOOP-3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeProfile {
    pub single_tool_rounds: bool,
    pub parallel_tools: bool,
    pub max_tool_iterations: u32,
    /// How many levels of subagents the `delegate` tool may spawn (0 = no `delegate` tool;
    /// a child gets one level less, PERM-7).
    pub delegation_depth: u32,
}

impl Default for RuntimeProfile {
    fn default() -> Self {
        Self {
            single_tool_rounds: false,
            parallel_tools: false,
            max_tool_iterations: 10,
            delegation_depth: 0,
        }
    }
}
