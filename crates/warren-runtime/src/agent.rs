//! The one constructor of an agent's capabilities (docs/architecture.md, "one seam per
//! decision"): its `SecurityPolicy` (PERM-2), its sandbox (SBX-3), its scoped memory handle
//! (MEM-1) and the tools bound to them. `AgentKit` has a
//! private field, so no other code can assemble an agent's tools around a different policy.

use std::sync::Arc;

use warren_config::{Config, InstallRoot};
use warren_core::AgentAlias;
use warren_memory::{Memory, MemoryError, MemoryStores};
use warren_security::SecurityPolicy;
use warren_security::sandbox::{Sandbox, SandboxError};
use warren_tools::{Tool, ToolError, ToolOutput};

/// Why an agent's capabilities cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Policy(#[from] warren_security::PolicyError),
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error("agent '{alias}' has no tool '{tool}' (available: {available})")]
    UnknownTool {
        alias: String,
        tool: String,
        available: String,
    },
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error(transparent)]
    Memory(#[from] MemoryError),
    #[error("subagent refused: {0} (PERM-7)")]
    Narrow(#[from] warren_security::NarrowViolation),
    #[error(transparent)]
    Mcp(#[from] warren_tools::mcp::McpConfigError),
    /// A bad `[agents.<alias>.network] allow` or `[secrets.<name>] hosts` entry (issue 24).
    #[error(transparent)]
    Egress(crate::egress::EgressConfigError),
}

/// An agent's policy, sandbox and tools, built together from config.
pub struct AgentKit {
    policy: SecurityPolicy,
    sandbox: Sandbox,
    tools: Vec<Arc<dyn Tool>>,
    memory: Option<Arc<dyn Memory>>,
    /// The agent's own MCP servers (issue 23); subagents get none (PERM-7).
    mcp: Option<warren_tools::mcp::AgentMcp>,
    /// The agent's network egress, when it has an allowlist (issue 24); a subagent shares it
    /// (same allowlist, broker and trace), so its `http_request` reaches no more hosts.
    egress: Option<crate::egress::AgentEgress>,
    _sealed: (),
}

impl std::fmt::Debug for AgentKit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentKit")
            .field("agent", self.policy.alias())
            .field("sandbox", &self.sandbox.backend())
            .finish()
    }
}

impl AgentKit {
    /// Builds `alias`'s capabilities (the agent "starts": its workspace is created) and fails
    /// when its sandbox is unavailable (SBX-3).
    pub fn build(
        config: &Config,
        root: &InstallRoot,
        alias: &AgentAlias,
    ) -> Result<Self, AgentError> {
        let policy = SecurityPolicy::for_agent(config, root, alias)?;
        policy.ensure_workspace()?; // PERM-1: created when the agent starts
        let sandbox = Sandbox::for_policy(&policy)?;
        let mut tools = warren_tools::agent_tools(&policy, &sandbox);
        if let Some(skills) = crate::skills::SkillRead::for_agent(config, root, alias)
            && policy.tool_allowed(crate::skills::SKILL_READ)
        {
            tools.push(Arc::new(skills));
        }
        Ok(Self {
            policy,
            sandbox,
            tools,
            memory: None,
            mcp: None,
            egress: None,
            _sealed: (),
        })
    }

    /// [`AgentKit::build`] plus the agent's scoped memory handle (from the one memory factory)
    /// and the memory tools bound to it: what the turn loop runs with.
    pub async fn build_with_memory(
        config: &Config,
        root: &InstallRoot,
        alias: &AgentAlias,
        stores: &MemoryStores,
    ) -> Result<Self, AgentError> {
        let mut kit = Self::build(config, root, alias)?;
        let memory = warren_memory::create_memory_for_agent(stores, config, alias).await?;
        let policy = &kit.policy;
        kit.tools.extend(
            warren_tools::memory_tools(Arc::clone(&memory))
                .into_iter()
                .filter(|t| policy.tool_allowed(t.name())),
        );
        kit.memory = Some(memory);
        Ok(kit)
    }

    /// A subagent's kit (PERM-7): the policy narrowed by `req` (refused on the first axis that
    /// would exceed this one), its own sandbox for that policy, and the same tools rebuilt on
    /// it, sharing this agent's memory handle (so no wider memory grant) and its egress (the
    /// same allowlist: `http_request` and the shell's proxy when the narrowed policy allows
    /// them, never a host the parent cannot reach).
    pub fn narrowed(&self, req: warren_security::NarrowRequest) -> Result<Self, AgentError> {
        let policy = self.policy.narrow(req)?;
        let sandbox = Sandbox::for_policy(&policy)?;
        let mut tools = warren_tools::agent_tools(&policy, &sandbox);
        if let Some(memory) = &self.memory {
            tools.extend(
                warren_tools::memory_tools(Arc::clone(memory))
                    .into_iter()
                    .filter(|t| policy.tool_allowed(t.name())),
            );
        }
        let mut child = Self {
            policy,
            sandbox,
            tools,
            memory: self.memory.clone(),
            mcp: None,
            egress: None,
            _sealed: (),
        };
        if let Some(egress) = &self.egress {
            child.add_egress(egress.clone());
        }
        Ok(child)
    }

    /// Attaches the agent's MCP servers (started by its first turn, or now when `eager`),
    /// their events going to `trace`.
    pub(crate) fn attach_mcp(
        &mut self,
        config: &Config,
        root: &InstallRoot,
        alias: &AgentAlias,
        trace: &Arc<crate::trace::Trace>,
    ) -> Result<(), AgentError> {
        self.mcp = crate::mcp::for_agent(config, root, alias, &self.sandbox, trace)?;
        Ok(())
    }

    /// Attaches the agent's network egress (issue 24): with a non-empty allowlist, the
    /// `http_request` tool (the daemon makes the request, the broker fills secrets) and the
    /// shell's egress proxy; connections go to `trace`.
    pub(crate) fn attach_egress(
        &mut self,
        config: &Config,
        trace: &Arc<crate::trace::Trace>,
    ) -> Result<(), AgentError> {
        if self.policy.egress().allow.is_empty() {
            return Ok(());
        }
        let egress = crate::egress::AgentEgress::new(config, &self.policy, Arc::clone(trace))
            .map_err(AgentError::Egress)?;
        self.add_egress(egress);
        Ok(())
    }

    /// The shell's egress proxy on this kit's sandbox and, when the policy allows it, the
    /// `http_request` tool, both through `egress`.
    fn add_egress(&mut self, egress: crate::egress::AgentEgress) {
        self.sandbox
            .set_egress_proxy(crate::egress::proxy::ShellProxy::new(egress.clone()));
        if let Some(tool) = warren_tools::http_tool(&self.policy, Arc::new(egress.clone())) {
            self.tools.push(tool);
        }
        self.egress = Some(egress);
    }

    /// The agent's MCP servers, if it has any.
    pub fn mcp(&self) -> Option<&warren_tools::mcp::AgentMcp> {
        self.mcp.as_ref()
    }

    /// The agent's scoped memory, when built with [`AgentKit::build_with_memory`].
    pub fn memory(&self) -> Option<&Arc<dyn Memory>> {
        self.memory.as_ref()
    }

    pub fn policy(&self) -> &SecurityPolicy {
        &self.policy
    }

    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    pub fn tools(&self) -> &[Arc<dyn Tool>] {
        &self.tools
    }

    pub fn tool(&self, name: &str) -> Result<&Arc<dyn Tool>, AgentError> {
        self.tools
            .iter()
            .find(|t| t.name() == name)
            .ok_or_else(|| AgentError::UnknownTool {
                alias: self.policy.alias().to_string(),
                tool: name.to_string(),
                available: self
                    .tools
                    .iter()
                    .map(|t| t.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// Runs one tool call. `approved` is the operator's approval (the CLI's `--approve`).
    pub async fn run_tool(
        &self,
        name: &str,
        args: serde_json::Value,
        approved: bool,
    ) -> Result<Result<ToolOutput, ToolError>, AgentError> {
        let tool = self.tool(name)?;
        Ok(if approved {
            tool.execute_approved(args).await
        } else {
            tool.execute(args).await
        })
    }
}
