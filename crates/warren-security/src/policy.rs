//! `SecurityPolicy::for_agent` (PERM-1, PERM-2): the only constructor of an agent's policy.
//!
//! Order: the agent's risk profile (autonomy, commands, forbidden paths, limits) → its own
//! workspace as the boundary → each `[agents.<alias>.workspace.access]` grant onto the read-only,
//! write-only or read-write tier → `unrestricted_filesystem` turns `workspace_only` off. The
//! result is immutable (`Arc` inside, so clones are cheap and share nothing mutable).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use warren_config::schema::{AccessLevel, Autonomy, RuntimeKind, SandboxFallback, SandboxKind};
use warren_config::{Config, InstallRoot};
use warren_core::AgentAlias;

/// Why a policy cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error(
        "no agent '{alias}' in config (add [agents.{alias}] or run `warren agents add {alias}`)"
    )]
    UnknownAgent { alias: String },
    #[error(
        "agents.{alias}.workspace.access grants '{sibling}', which is not an agent (add [agents.{sibling}] or remove the grant)"
    )]
    UnknownSibling { alias: String, sibling: String },
    #[error("cannot create the workspace {path}: {source}")]
    Workspace {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A sibling root granted to the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Grant {
    /// The sibling that owns the root.
    pub alias: AgentAlias,
    pub root: PathBuf,
}

#[derive(Debug, PartialEq)]
pub(crate) struct Inner {
    pub alias: AgentAlias,
    pub autonomy: Autonomy,
    pub allowed_commands: Vec<String>,
    pub forbidden_paths: Vec<PathBuf>,
    pub max_actions_per_hour: u32,
    pub max_cost_per_day_usd: f64,
    /// The risk profile's `max_tokens_per_day` (`None`: only unpriced models count, against
    /// the default allowance).
    pub max_tokens_per_day: Option<u64>,
    pub max_tool_iterations: u32,
    /// Tools that always need the operator's approval (`*` = every tool).
    pub always_ask: Vec<String>,
    /// How long an approval request waits before it counts as denied (at least 1 s).
    pub approval_timeout: Duration,
    /// The risk profile's `approve_own_writes`: own-workspace file writes and own-memory
    /// writes run without asking under `supervised`.
    pub approve_own_writes: bool,
    pub workspace: PathBuf,
    pub read_write: Vec<Grant>,
    pub read_only: Vec<Grant>,
    pub write_only: Vec<Grant>,
    pub workspace_only: bool,
    pub sandbox: SandboxKind,
    pub fallback: SandboxFallback,
    pub allow_network: bool,
    pub limits: ChildLimits,
    pub env_passthrough: Vec<String>,
    pub shell_timeout: Duration,
    pub allowed_tools: Option<Vec<String>>,
    pub runtime_kind: RuntimeKind,
    /// The risk profile's `taint` (issue 24 §4): untrusted content makes side effects ask.
    pub taint: bool,
    /// `[agents.<alias>.network]` and the response cap (issue 24).
    pub egress: EgressPolicy,
    /// Workspace limits and the disk reserve (issue 35 §8), with their usage cache.
    pub disk: Arc<crate::quota::DiskLimits>,
    pub root_cache: RootCache,
}

/// Where the agent's network egress may go (`[agents.<alias>.network] allow`, as written; the
/// runtime's egress module parses and matches it) and how much of a response it keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressPolicy {
    pub allow: Vec<String>,
    pub max_response_bytes: u64,
}

/// What the profile allows a child process: `unrestricted` (needed for a noop sandbox) and its
/// rlimits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChildLimits {
    pub unrestricted: bool,
    pub max_processes: u64,
    pub max_file_size_bytes: u64,
    pub max_cpu_secs: u64,
}

/// Canonical forms of existing roots and directory handles on them, memoised per policy (not
/// part of its identity; a reload builds a new policy).
#[derive(Debug, Default)]
pub(crate) struct RootCache(std::sync::Mutex<RootCacheInner>);

#[derive(Debug, Default)]
pub(crate) struct RootCacheInner {
    canonical: Vec<(PathBuf, PathBuf)>,
    handles: Vec<(PathBuf, Arc<std::os::fd::OwnedFd>)>,
}

const ROOT_CACHE_LIMIT: usize = 64;

impl RootCache {
    pub(crate) fn get(&self, root: &Path) -> Option<PathBuf> {
        let cache = self.0.lock().ok()?;
        cache
            .canonical
            .iter()
            .find(|(raw, _)| raw == root)
            .map(|(_, c)| c.clone())
    }
    pub(crate) fn put(&self, root: &Path, canonical: &Path) {
        if let Ok(mut cache) = self.0.lock()
            && cache.canonical.len() < ROOT_CACHE_LIMIT
            && !cache.canonical.iter().any(|(raw, _)| raw == root)
        {
            cache
                .canonical
                .push((root.to_path_buf(), canonical.to_path_buf()));
        }
    }
    /// A directory handle on the canonical `root`, opened without following any symlink.
    pub(crate) fn handle(&self, root: &Path) -> Option<Arc<std::os::fd::OwnedFd>> {
        let mut cache = self.0.lock().ok()?;
        if let Some((_, fd)) = cache.handles.iter().find(|(r, _)| r == root) {
            return Some(Arc::clone(fd));
        }
        let fd = rustix::fs::openat2(
            rustix::fs::CWD,
            root,
            rustix::fs::OFlags::RDONLY
                | rustix::fs::OFlags::DIRECTORY
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
            rustix::fs::ResolveFlags::NO_SYMLINKS | rustix::fs::ResolveFlags::NO_MAGICLINKS,
        )
        .ok()?;
        let fd = Arc::new(fd);
        if cache.handles.len() < ROOT_CACHE_LIMIT {
            cache.handles.push((root.to_path_buf(), Arc::clone(&fd)));
        }
        Some(fd)
    }
}

impl PartialEq for RootCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// An agent's effective permissions. Obtainable only from [`SecurityPolicy::for_agent`] (or by
/// narrowing one, PERM-7): the field is private, so no other code can invent a policy.
#[derive(Debug, Clone, PartialEq)]
pub struct SecurityPolicy {
    pub(crate) inner: Arc<Inner>,
}

impl SecurityPolicy {
    /// Builds `alias`'s policy from `config` in the order of PERM-2. The workspace is not
    /// created here (PERM-1: lazily, by [`Self::ensure_workspace`] when the agent starts).
    pub fn for_agent(
        config: &Config,
        root: &InstallRoot,
        alias: &AgentAlias,
    ) -> Result<Self, PolicyError> {
        let agent = config
            .agent(alias)
            .ok_or_else(|| PolicyError::UnknownAgent {
                alias: alias.to_string(),
            })?;
        // 1. risk profile
        let risk = config.risk_profile_of(agent);
        let runtime = config.runtime_profile_of(agent);
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let forbidden_paths = risk
            .forbidden_paths
            .iter()
            .map(|p| expand_home(p, home.as_deref()))
            .collect();
        // 2. boundary, and the byte limit of every workspace the agent can write (issue 35 §8)
        let workspace = root.agent_workspace(alias);
        let mut disk = crate::quota::DiskLimits::new(config.runtime.disk_reserve_mb);
        disk.add(
            alias,
            &agent.risk_profile,
            workspace.clone(),
            risk.max_workspace_mb,
        );
        // 3. grants
        let (mut read_write, mut read_only, mut write_only) = (Vec::new(), Vec::new(), Vec::new());
        for (sibling, level) in &agent.workspace.access {
            if config.agent(sibling).is_none() {
                return Err(PolicyError::UnknownSibling {
                    alias: alias.to_string(),
                    sibling: sibling.to_string(),
                });
            }
            let sibling_alias = sibling.clone();
            if let (AccessLevel::Write | AccessLevel::ReadWrite, Some(owner)) =
                (level, config.agent(sibling))
            {
                disk.add(
                    sibling,
                    &owner.risk_profile,
                    root.agent_workspace(sibling),
                    config.risk_profile_of(owner).max_workspace_mb,
                );
            }
            let grant = Grant {
                root: root.agent_workspace(&sibling_alias),
                alias: sibling_alias,
            };
            match level {
                AccessLevel::Read => read_only.push(grant),
                AccessLevel::Write => write_only.push(grant),
                AccessLevel::ReadWrite => read_write.push(grant),
            }
        }
        // 4. unrestricted filesystem
        let workspace_only = !agent.workspace.unrestricted_filesystem;
        Ok(Self {
            inner: Arc::new(Inner {
                alias: alias.clone(),
                autonomy: risk.autonomy,
                allowed_commands: risk.allowed_commands.clone(),
                forbidden_paths,
                max_actions_per_hour: risk.max_actions_per_hour,
                max_cost_per_day_usd: risk.max_cost_per_day_usd,
                max_tokens_per_day: risk.max_tokens_per_day,
                max_tool_iterations: runtime.max_tool_iterations,
                always_ask: risk.always_ask.clone(),
                approval_timeout: Duration::from_secs(risk.approval_timeout_secs.max(1)),
                approve_own_writes: risk.approve_own_writes,
                workspace,
                read_write,
                read_only,
                write_only,
                workspace_only,
                sandbox: risk.sandbox,
                fallback: risk.fallback,
                allow_network: risk.allow_network,
                limits: ChildLimits {
                    unrestricted: risk.unrestricted,
                    max_processes: risk.max_processes.max(1),
                    max_file_size_bytes: risk.max_file_size_mb.max(1).saturating_mul(1 << 20),
                    max_cpu_secs: risk.max_cpu_secs.max(1),
                },
                env_passthrough: risk.env_passthrough.clone(),
                shell_timeout: Duration::from_secs(risk.shell_timeout_secs.max(1)),
                allowed_tools: risk.allowed_tools.clone(),
                runtime_kind: config.runtime.kind,
                taint: risk.taint == warren_config::schema::TaintMode::On,
                egress: EgressPolicy {
                    allow: agent.network.allow.clone(),
                    max_response_bytes: risk.max_response_kb.max(1).saturating_mul(1024),
                },
                disk: Arc::new(disk),
                root_cache: RootCache::default(),
            }),
        })
    }

    /// Creates the agent's workspace (and its private temp dir) if missing (PERM-1).
    pub fn ensure_workspace(&self) -> Result<(), PolicyError> {
        for dir in [self.workspace().to_path_buf(), self.temp_dir()] {
            std::fs::create_dir_all(&dir).map_err(|source| PolicyError::Workspace {
                path: dir.clone(),
                source,
            })?;
        }
        Ok(())
    }

    pub fn alias(&self) -> &AgentAlias {
        &self.inner.alias
    }
    pub fn autonomy(&self) -> Autonomy {
        self.inner.autonomy
    }
    pub fn workspace(&self) -> &Path {
        &self.inner.workspace
    }
    /// The agent's private temp directory (`TMPDIR` of its children), inside its workspace, so
    /// agents never share `/tmp` as a side channel.
    pub fn temp_dir(&self) -> PathBuf {
        self.inner.workspace.join(".tmp")
    }
    pub fn read_write_roots(&self) -> &[Grant] {
        &self.inner.read_write
    }
    pub fn read_only_roots(&self) -> &[Grant] {
        &self.inner.read_only
    }
    pub fn write_only_roots(&self) -> &[Grant] {
        &self.inner.write_only
    }
    pub fn workspace_only(&self) -> bool {
        self.inner.workspace_only
    }
    pub fn forbidden_paths(&self) -> &[PathBuf] {
        &self.inner.forbidden_paths
    }
    pub fn allowed_commands(&self) -> &[String] {
        &self.inner.allowed_commands
    }
    pub fn sandbox_kind(&self) -> SandboxKind {
        self.inner.sandbox
    }
    pub fn fallback(&self) -> SandboxFallback {
        self.inner.fallback
    }
    pub fn allow_network(&self) -> bool {
        self.inner.allow_network
    }
    /// Whether the profile allows running commands unconfined (`sandbox`/`fallback = "noop"`).
    pub fn unrestricted(&self) -> bool {
        self.inner.limits.unrestricted
    }
    pub fn max_processes(&self) -> u64 {
        self.inner.limits.max_processes
    }
    pub fn max_file_size_bytes(&self) -> u64 {
        self.inner.limits.max_file_size_bytes
    }
    pub fn max_cpu_secs(&self) -> u64 {
        self.inner.limits.max_cpu_secs
    }
    pub fn env_passthrough(&self) -> &[String] {
        &self.inner.env_passthrough
    }
    pub fn shell_timeout(&self) -> Duration {
        self.inner.shell_timeout
    }
    pub fn max_actions_per_hour(&self) -> u32 {
        self.inner.max_actions_per_hour
    }
    pub fn max_cost_per_day_usd(&self) -> f64 {
        self.inner.max_cost_per_day_usd
    }
    /// The daily token allowance (`None`: the default allowance of models without a rate).
    pub fn max_tokens_per_day(&self) -> Option<u64> {
        self.inner.max_tokens_per_day
    }
    pub fn max_tool_iterations(&self) -> u32 {
        self.inner.max_tool_iterations
    }
    /// Tools the risk profile's `always_ask` lists (`*` = every tool): each call asks first.
    pub fn always_ask(&self) -> &[String] {
        &self.inner.always_ask
    }
    /// Whether a call of `tool` must be approved because `always_ask` lists it.
    pub fn always_asks(&self, tool: &str) -> bool {
        self.inner.always_ask.iter().any(|t| t == "*" || t == tool)
    }
    /// Whether file writes in the agent's own workspace and writes to its own memory run
    /// without asking under `supervised` (the risk profile's `approve_own_writes`).
    pub fn approve_own_writes(&self) -> bool {
        self.inner.approve_own_writes
    }
    /// Whether the taint rule is on (the risk profile's `taint`, default `on`): after untrusted
    /// content, every call with side effects asks the operator (issue 24 §4).
    pub fn taint(&self) -> bool {
        self.inner.taint
    }
    /// Where the agent's `http_request` and shell proxy may connect, and the response cap.
    pub fn egress(&self) -> &EgressPolicy {
        &self.inner.egress
    }
    /// How long an approval request waits for the operator before it counts as denied.
    pub fn approval_timeout(&self) -> Duration {
        self.inner.approval_timeout
    }
    pub fn runtime_kind(&self) -> RuntimeKind {
        self.inner.runtime_kind
    }
    /// Whether the tool `name` is allowed by the risk profile.
    pub fn tool_allowed(&self, name: &str) -> bool {
        self.inner
            .allowed_tools
            .as_ref()
            .is_none_or(|tools| tools.iter().any(|t| t == name))
    }
    pub fn allowed_tools(&self) -> Option<&[String]> {
        self.inner.allowed_tools.as_deref()
    }
    /// Whether the agent may change anything (autonomy is not `read_only`).
    pub fn can_act(&self) -> bool {
        self.inner.autonomy != Autonomy::ReadOnly
    }

    /// The effective policy as JSON, for `warren security posture`.
    pub fn describe(&self) -> serde_json::Value {
        let i = &self.inner;
        serde_json::json!({
            "alias": i.alias,
            "autonomy": i.autonomy,
            "workspace": i.workspace,
            "workspace_only": i.workspace_only,
            "read_write": i.read_write,
            "read_only": i.read_only,
            "write_only": i.write_only,
            "forbidden_paths": i.forbidden_paths,
            "allowed_commands": i.allowed_commands,
            "exec_capable": self.exec_capable_allowed(),
            "allowed_tools": i.allowed_tools,
            "allow_network": i.allow_network,
            "env_passthrough": i.env_passthrough,
            "shell_timeout_secs": i.shell_timeout.as_secs(),
            "max_actions_per_hour": i.max_actions_per_hour,
            "max_cost_per_day_usd": i.max_cost_per_day_usd,
            "max_tokens_per_day": i.max_tokens_per_day,
            "max_tool_iterations": i.max_tool_iterations,
            "always_ask": i.always_ask,
            "approval_timeout_secs": i.approval_timeout.as_secs(),
            "approve_own_writes": i.approve_own_writes,
            "taint": i.taint,
            "network_allow": i.egress.allow,
            "sandbox": i.sandbox,
            "fallback": i.fallback,
            "max_workspace_mb": self.max_workspace_bytes().map(|b| b >> 20),
            "disk_reserve_mb": i.disk.reserve >> 20,
            "runtime": i.runtime_kind,
        })
    }
}

fn expand_home(path: &str, home: Option<&Path>) -> PathBuf {
    match (path.strip_prefix("~/"), home) {
        (Some(rest), Some(home)) => home.join(rest),
        _ if path == "~" => home
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from(path)),
        _ => PathBuf::from(path),
    }
}
