//! The subagent validator (PERM-7): a child policy can only be a narrowing of its parent's, on
//! every axis: roots and their tiers, autonomy, commands, forbidden paths, environment
//! passthrough, tools, budgets, iteration limit, sandbox strength and network. The approval
//! rules (`always_ask`, the approval timeout) are inherited unchanged.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use warren_config::schema::{Autonomy, SandboxFallback, SandboxKind};

use crate::policy::{Grant, Inner, SecurityPolicy};

/// What a subagent asks for. `None` keeps the parent's value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NarrowRequest {
    pub autonomy: Option<Autonomy>,
    pub read_write: Option<Vec<PathBuf>>,
    pub read_only: Option<Vec<PathBuf>>,
    pub write_only: Option<Vec<PathBuf>>,
    pub workspace_only: Option<bool>,
    pub allowed_commands: Option<Vec<String>>,
    /// Forbidden paths the child adds (it can never drop the parent's).
    pub extra_forbidden_paths: Vec<PathBuf>,
    pub env_passthrough: Option<Vec<String>>,
    pub allowed_tools: Option<Vec<String>>,
    pub max_actions_per_hour: Option<u32>,
    pub max_cost_per_day_usd: Option<f64>,
    pub max_tool_iterations: Option<u32>,
    pub shell_timeout: Option<Duration>,
    pub sandbox: Option<SandboxKind>,
    pub fallback: Option<SandboxFallback>,
    pub allow_network: Option<bool>,
}

/// The first axis on which the child would exceed its parent.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NarrowViolation {
    #[error("autonomy {child:?} exceeds the parent's {parent:?}")]
    Autonomy { child: Autonomy, parent: Autonomy },
    #[error("{tier} root {path} is not within a parent root that allows {tier}")]
    Root { tier: &'static str, path: PathBuf },
    #[error("workspace_only cannot be turned off when the parent has it on")]
    WorkspaceOnly,
    #[error("command '{0}' is not allowed to the parent")]
    Command(String),
    #[error("environment variable '{0}' is not passed through to the parent")]
    Env(String),
    #[error("tool '{0}' is not allowed to the parent")]
    Tool(String),
    #[error("{axis} {child} exceeds the parent's {parent}")]
    Budget {
        axis: &'static str,
        child: String,
        parent: String,
    },
    #[error("sandbox {child:?} is weaker than the parent's {parent:?}")]
    Sandbox {
        child: SandboxKind,
        parent: SandboxKind,
    },
    #[error("a noop fallback is not allowed when the parent has none")]
    Fallback,
    #[error("network access is denied to the parent")]
    Network,
}

fn strength(kind: SandboxKind) -> u8 {
    match kind {
        SandboxKind::Noop => 0,
        SandboxKind::Docker => 1,
        SandboxKind::Landlock => 2,
        SandboxKind::Bubblewrap | SandboxKind::Auto => 3,
    }
}

impl SecurityPolicy {
    /// The policy of a subagent spawned by this agent with `req`, or the first axis on which it
    /// would exceed this policy.
    pub fn narrow(&self, req: NarrowRequest) -> Result<SecurityPolicy, NarrowViolation> {
        let p = &self.inner;
        let autonomy = req.autonomy.unwrap_or(p.autonomy);
        if autonomy > p.autonomy {
            return Err(NarrowViolation::Autonomy {
                child: autonomy,
                parent: p.autonomy,
            });
        }
        let own = Grant {
            alias: p.alias.clone(),
            root: p.workspace.clone(),
        };
        let rw_sources: Vec<&Grant> = std::iter::once(&own).chain(&p.read_write).collect();
        let ro_sources: Vec<&Grant> = rw_sources.iter().copied().chain(&p.read_only).collect();
        let wo_sources: Vec<&Grant> = rw_sources.iter().copied().chain(&p.write_only).collect();
        let narrow_roots = |asked: Option<Vec<PathBuf>>,
                            parent: &[Grant],
                            sources: &[&Grant],
                            tier: &'static str| {
            match asked {
                None => Ok(parent.to_vec()),
                Some(paths) => paths
                    .into_iter()
                    .map(|path| {
                        sources
                            .iter()
                            .find(|g| within(&path, &g.root))
                            .map(|g| Grant {
                                alias: g.alias.clone(),
                                root: path.clone(),
                            })
                            .ok_or(NarrowViolation::Root { tier, path })
                    })
                    .collect::<Result<Vec<_>, _>>(),
            }
        };
        let read_write = narrow_roots(req.read_write, &p.read_write, &rw_sources, "read-write")?;
        let read_only = narrow_roots(req.read_only, &p.read_only, &ro_sources, "read-only")?;
        let write_only = narrow_roots(req.write_only, &p.write_only, &wo_sources, "write-only")?;
        let workspace_only = req.workspace_only.unwrap_or(p.workspace_only);
        if p.workspace_only && !workspace_only {
            return Err(NarrowViolation::WorkspaceOnly);
        }
        let allowed_commands = req
            .allowed_commands
            .unwrap_or_else(|| p.allowed_commands.clone());
        let parent_any = p.allowed_commands.iter().any(|c| c == "*");
        if let Some(c) = allowed_commands
            .iter()
            .find(|c| !parent_any && !p.allowed_commands.contains(c))
        {
            return Err(NarrowViolation::Command(c.clone()));
        }
        let env_passthrough = req
            .env_passthrough
            .unwrap_or_else(|| p.env_passthrough.clone());
        if let Some(e) = env_passthrough
            .iter()
            .find(|e| !p.env_passthrough.contains(e))
        {
            return Err(NarrowViolation::Env(e.clone()));
        }
        let allowed_tools = match (req.allowed_tools, &p.allowed_tools) {
            (None, parent) => parent.clone(),
            (Some(child), None) => Some(child),
            (Some(child), Some(parent)) => {
                if let Some(t) = child.iter().find(|t| !parent.contains(t)) {
                    return Err(NarrowViolation::Tool(t.clone()));
                }
                Some(child)
            }
        };
        let budget = |axis, child: Option<u64>, parent: u64| match child {
            Some(c) if c > parent => Err(NarrowViolation::Budget {
                axis,
                child: c.to_string(),
                parent: parent.to_string(),
            }),
            Some(c) => Ok(c),
            None => Ok(parent),
        };
        let max_actions_per_hour = budget(
            "max_actions_per_hour",
            req.max_actions_per_hour.map(u64::from),
            u64::from(p.max_actions_per_hour),
        )?;
        let max_tool_iterations = budget(
            "max_tool_iterations",
            req.max_tool_iterations.map(u64::from),
            u64::from(p.max_tool_iterations),
        )?;
        let shell_timeout = budget(
            "shell_timeout_secs",
            req.shell_timeout.map(|d| d.as_secs()),
            p.shell_timeout.as_secs(),
        )?;
        let max_cost_per_day_usd = match req.max_cost_per_day_usd {
            Some(c) if c.is_nan() || c > p.max_cost_per_day_usd => {
                return Err(NarrowViolation::Budget {
                    axis: "max_cost_per_day_usd",
                    child: c.to_string(),
                    parent: p.max_cost_per_day_usd.to_string(),
                });
            }
            Some(c) => c,
            None => p.max_cost_per_day_usd,
        };
        let sandbox = req.sandbox.unwrap_or(p.sandbox);
        if strength(sandbox) < strength(p.sandbox) {
            return Err(NarrowViolation::Sandbox {
                child: sandbox,
                parent: p.sandbox,
            });
        }
        let fallback = req.fallback.unwrap_or(p.fallback);
        if fallback == SandboxFallback::Noop && p.fallback != SandboxFallback::Noop {
            return Err(NarrowViolation::Fallback);
        }
        let allow_network = req.allow_network.unwrap_or(p.allow_network);
        if allow_network && !p.allow_network {
            return Err(NarrowViolation::Network);
        }
        let mut forbidden_paths = p.forbidden_paths.clone();
        forbidden_paths.extend(req.extra_forbidden_paths);
        Ok(SecurityPolicy {
            inner: Arc::new(Inner {
                alias: p.alias.clone(),
                autonomy,
                allowed_commands,
                forbidden_paths,
                max_actions_per_hour: u32::try_from(max_actions_per_hour)
                    .unwrap_or(p.max_actions_per_hour),
                max_cost_per_day_usd,
                // Inherited unchanged: the child's tokens count in the parent's day.
                max_tokens_per_day: p.max_tokens_per_day,
                max_tool_iterations: u32::try_from(max_tool_iterations)
                    .unwrap_or(p.max_tool_iterations),
                // A child asks whenever its parent would, and waits as long.
                always_ask: p.always_ask.clone(),
                approval_timeout: p.approval_timeout,
                approve_own_writes: p.approve_own_writes,
                workspace: p.workspace.clone(),
                read_write,
                read_only,
                write_only,
                workspace_only,
                sandbox,
                fallback,
                allow_network,
                limits: p.limits,
                env_passthrough,
                shell_timeout: Duration::from_secs(shell_timeout),
                allowed_tools,
                runtime_kind: p.runtime_kind,
                // A child is tainted by the same rule and reaches no more hosts.
                taint: p.taint,
                egress: p.egress.clone(),
                // The same limits, and the same measured usage (one workspace, one count).
                disk: Arc::clone(&p.disk),
                root_cache: Default::default(),
            }),
        })
    }
}

/// Lexical containment after normalising `.` and `..` (a child root must not climb out).
fn within(path: &Path, root: &Path) -> bool {
    let mut norm = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                if !norm.pop() {
                    return false;
                }
            }
            std::path::Component::CurDir => {}
            other => norm.push(other),
        }
    }
    path.is_absolute() && norm.starts_with(root)
}
