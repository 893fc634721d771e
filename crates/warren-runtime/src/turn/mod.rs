//! The turn loop (LOOP-1..7): build the prompt, call the provider route, run the tool calls it
//! returns (native, or recovered from `<tool_call>` text), append the results in call order,
//! and call again, until a final answer, cancellation or `max_tool_iterations` (then one last
//! call without tools asking for a summary).
//!
//! Single-tool rounds (LOOP-2..7): when the agent's runtime profile sets
//! `single_tool_rounds` and the route's primary AND every fallback support the control, each
//! request asks for at most one call; a response with more than one call (native or
//! recovered) fails the turn before any call runs or enters history, and its usage is still
//! billed. When some route member lacks support, the loop keeps batch behaviour and emits ONE
//! limitation notice per turn.
//!
//! `parallel_tools` runs an admitted batch concurrently only when no call may need approval;
//! results keep call order either way.

mod calls;
mod provider;
mod run;
mod subagent;
pub mod taint;

use std::sync::Arc;

use warren_config::schema::RuntimeProfile;
use warren_config::{Config, InstallRoot};
use warren_core::{AgentAlias, SessionKey, SessionKeyError, ToolCall, ToolDefinition, Usage};
use warren_memory::MemoryStores;
use warren_providers::{ProviderError, Route};
use warren_store::sessions::SessionError;

use crate::agent::{AgentError, AgentKit};
use crate::approval::Approver;
use crate::cancel::CancelToken;
use crate::cost::{CostError, CostTracker};
use crate::delegate::{self, DELEGATE_TOOL};
use crate::prompt::Identity;
use crate::receipts::ReceiptKey;
use crate::trace::Trace;

/// Longest tool result put in history, in characters.
pub const MAX_RESULT_CHARS: usize = 50_000;
/// Newest session messages loaded as history.
pub const HISTORY_LIMIT: usize = 200;
pub use crate::session_keys::{ACP_CHANNEL, CLI_CHANNEL, CRON_CHANNEL, Channel, GATEWAY_CHANNEL};

/// What one turn talks through: who approves its calls, what cancels it, where its events go.
#[derive(Clone)]
pub struct TurnIo {
    /// The most output tokens each provider request of the turn may ask for (the client's
    /// `max_tokens`); `None` = the provider's own limit.
    pub max_output_tokens: Option<u32>,
    pub approver: Arc<dyn Approver>,
    pub cancel: CancelToken,
    pub events: TurnEvents,
}

impl std::fmt::Debug for TurnIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnIo")
            .field("cancelled", &self.cancel.is_cancelled())
            .finish_non_exhaustive()
    }
}
/// The default of `max_tool_iterations` when the profile says 0.
pub const DEFAULT_MAX_ITERATIONS: u32 = 10;

/// What a turn shows while it runs (the CLI prints these; the gateway will stream them).
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEvent {
    TextDelta(String),
    /// A limitation or policy notice for the operator (e.g. LOOP-4).
    Notice(String),
    /// A call about to run (shared with the loop, which keeps it for history).
    ToolCall(Arc<ToolCall>),
    ToolResult {
        call: Arc<ToolCall>,
        ok: bool,
        content: String,
        receipt: Option<String>,
    },
    /// A call waits for the operator, who decides it by `approval` (e.g. `POST
    /// /api/approvals/{approval}`) within `timeout_secs`; no answer = denied. Sent only by
    /// approval channels that decide by id (not by the terminal prompt, which asks in place).
    ApprovalPending {
        call: Arc<ToolCall>,
        approval: String,
        reason: String,
        timeout_secs: u64,
    },
}

pub type TurnEvents = Arc<dyn Fn(TurnEvent) + Send + Sync>;

/// A turn that could not finish.
#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    #[error(transparent)]
    Provider(#[from] ProviderError),
    #[error(
        "single-tool rounds are on for agent '{agent}' but provider '{provider}' returned {count} tool calls in one response; none of them was run (LOOP-5)"
    )]
    SingleToolViolation {
        agent: String,
        provider: String,
        count: usize,
    },
    #[error("the turn was cancelled")]
    Cancelled,
    #[error(transparent)]
    Cost(#[from] CostError),
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error(transparent)]
    SessionOwned(#[from] crate::sessions::SessionOwned),
    #[error(transparent)]
    DefaultKeyReserved(#[from] crate::session_keys::DefaultKeyReserved),
    #[error(transparent)]
    SessionKey(#[from] SessionKeyError),
    #[error(transparent)]
    SessionsUnavailable(crate::sessions::ChatUnavailable),
    #[error(transparent)]
    Queue(#[from] warren_store::sessions::QueueError),
    #[error("the turn stopped unexpectedly: {0}")]
    Task(String),
    #[error(transparent)]
    Agent(#[from] AgentError),
    #[error("agent '{alias}' has no {what}: set agents.{alias}.{what} in config.toml")]
    Unconfigured { alias: String, what: &'static str },
    #[error("agent '{alias}' is not configured (see `warren agents list`)")]
    UnknownAgent { alias: String },
}

impl crate::telemetry::TurnReport for TurnOutcome {
    fn tokens(&self) -> (u64, u64) {
        (self.usage.input_tokens, self.usage.output_tokens)
    }

    fn calls(&self) -> (u32, u32) {
        (self.provider_calls, self.tool_calls)
    }

    fn reply(&self) -> &str {
        &self.reply
    }
}

impl crate::telemetry::TurnFailure for TurnError {
    fn kind(&self) -> &'static str {
        match self {
            TurnError::Provider(_) => "provider",
            TurnError::SingleToolViolation { .. } => "single_tool_violation",
            TurnError::Cancelled => "cancelled",
            TurnError::Cost(_) => "cost_limit",
            TurnError::Session(_) | TurnError::SessionsUnavailable(_) => "session_store",
            TurnError::SessionOwned(_)
            | TurnError::DefaultKeyReserved(_)
            | TurnError::SessionKey(_) => "session",
            TurnError::Queue(_) => "queue",
            TurnError::Task(_) => "task",
            TurnError::Agent(_)
            | TurnError::Unconfigured { .. }
            | TurnError::UnknownAgent { .. } => "agent",
        }
    }

    fn cancelled(&self) -> bool {
        matches!(self, TurnError::Cancelled)
    }
}

impl From<crate::sessions::ClaimError> for TurnError {
    fn from(e: crate::sessions::ClaimError) -> Self {
        match e {
            crate::sessions::ClaimError::Session(e) => TurnError::Session(e),
            crate::sessions::ClaimError::Owned(e) => TurnError::SessionOwned(e),
            crate::sessions::ClaimError::Reserved(e) => TurnError::DefaultKeyReserved(e),
        }
    }
}

impl From<crate::session_keys::DefaultKeyError> for TurnError {
    fn from(e: crate::session_keys::DefaultKeyError) -> Self {
        match e {
            crate::session_keys::DefaultKeyError::Key(e) => TurnError::SessionKey(e),
            crate::session_keys::DefaultKeyError::Session(e) => TurnError::Session(e),
        }
    }
}

/// How a turn ended.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnOutcome {
    pub reply: String,
    /// Tokens of every provider request of the turn (rejected ones included, LOOP-6).
    pub usage: Usage,
    pub provider_calls: u32,
    pub tool_calls: u32,
    /// `max_tool_iterations` was reached and the reply is the tools-free summary.
    pub hit_iteration_cap: bool,
    pub notices: Vec<String>,
    /// Receipts of the executed calls, `(tool, receipt)`.
    pub receipts: Vec<(String, String)>,
}

impl TurnOutcome {
    /// The outcome as the CLI (`warren agent --json`) and the gateway's chat route report it.
    pub fn to_json(&self, session: &SessionKey) -> serde_json::Value {
        serde_json::json!({
            "session": session,
            "reply": self.reply,
            "provider_calls": self.provider_calls,
            "tool_calls": self.tool_calls,
            "input_tokens": self.usage.input_tokens,
            "output_tokens": self.usage.output_tokens,
            "hit_iteration_cap": self.hit_iteration_cap,
            "notices": self.notices,
            "receipts": self
                .receipts
                .iter()
                .map(|(t, r)| serde_json::json!({"tool": t, "receipt": r}))
                .collect::<Vec<_>>(),
        })
    }
}

/// The services every turn of a generation shares: the process's receipt key and cost
/// tracker, and the generation's runtime trace. Assembled in one place,
/// [`Services::for_generation`] (the host calls it; benchmarks too).
pub struct Services {
    pub receipts: Arc<ReceiptKey>,
    pub costs: Arc<CostTracker>,
    pub trace: Arc<Trace>,
    /// Each agent's `max_actions_per_hour` window (the process's, across reloads).
    pub actions: Arc<crate::actions::ActionWindow>,
    /// The process's store handles (the control plane a background delegate registers in).
    pub stores: Arc<crate::stores::Stores>,
}

/// How the loop behaves for an agent, from its runtime profile: what is not a limit. Every
/// LIMIT and approval rule (autonomy, `always_ask`, the approval timeout, the cost cap, the
/// iteration cap, `max_actions_per_hour`) is read from the agent's `SecurityPolicy`, so a
/// subagent runs under exactly what `narrow` left it.
#[derive(Debug, Clone)]
struct Behaviour {
    delegation_depth: u32,
    single_tool_rounds: bool,
    parallel_tools: bool,
}

impl Behaviour {
    fn of(runtime: &RuntimeProfile) -> Self {
        Self {
            delegation_depth: runtime.delegation_depth,
            single_tool_rounds: runtime.single_tool_rounds,
            parallel_tools: runtime.parallel_tools,
        }
    }
}

/// An agent resolved once for a generation and ready to run turns (the door's resolved
/// agent): alias, capabilities (policy, sandbox, memory, tools), provider route, services.
pub struct AgentRunner {
    alias: AgentAlias,
    kit: AgentKit,
    route: Arc<Route>,
    model: String,
    behaviour: Behaviour,
    services: Arc<Services>,
    /// The tool definitions sent with every request (built once: tools do not change).
    definitions: Arc<Vec<ToolDefinition>>,
    /// Their names (for recovering `<tool_call>` text).
    known: Vec<String>,
    /// The head of the system prompt, kept while the identity files are unchanged.
    identity: Identity,
    /// `data/control_plane.db` of the install (set by [`AgentRunner::build`]); background
    /// delegates register there (issue 18 §3). `None`: no background delegation.
    control_plane: Option<std::path::PathBuf>,
    /// The agent's MCP tools as of its last turn, with the definitions of every tool (issue 23).
    mcp_tools: std::sync::Mutex<Option<McpSnapshot>>,
    /// The install and the selected skill bundles, listed in each turn's prompt (STATE-4).
    skills: Option<(InstallRoot, Vec<String>)>,
    /// Every tool result passes through it before the model, the session, the events and the
    /// trace see it (issue 35 §4; set by [`AgentRunner::build`], empty for assembled parts).
    scrubber: Arc<crate::egress::scrub::Scrubber>,
}

/// The tools of an agent's MCP servers at one generation of their lists.
#[derive(Clone)]
struct McpSnapshot {
    generation: u64,
    /// How many tools the servers offered (before the policy's `allowed_tools`).
    offered: usize,
    tools: Arc<Vec<Arc<dyn warren_tools::Tool>>>,
    definitions: Arc<Vec<ToolDefinition>>,
    known: Arc<Vec<String>>,
}

impl AgentRunner {
    /// Builds `alias` from config: its kit (policy, sandbox, memory, tools) and its route.
    pub async fn build(
        config: &Config,
        root: &InstallRoot,
        alias: &AgentAlias,
        stores: &MemoryStores,
        services: Arc<Services>,
    ) -> Result<Self, TurnError> {
        let agent = config.agent(alias).ok_or_else(|| TurnError::UnknownAgent {
            alias: alias.to_string(),
        })?;
        let provider = agent
            .provider
            .clone()
            .ok_or_else(|| TurnError::Unconfigured {
                alias: alias.to_string(),
                what: "provider",
            })?;
        let scripted = config
            .providers
            .get(&provider)
            .is_some_and(|p| p.kind == warren_config::schema::ProviderKind::Script);
        let model = match (&agent.model, scripted) {
            (Some(m), _) => m.clone(),
            (None, true) => "script".to_string(),
            (None, false) => {
                return Err(TurnError::Unconfigured {
                    alias: alias.to_string(),
                    what: "model",
                });
            }
        };
        let route = warren_providers::build_route(config, root, &provider)?;
        let mut kit = AgentKit::build_with_memory(config, root, alias, stores).await?;
        kit.attach_egress(config, &services.trace)?;
        kit.attach_mcp(config, root, alias, &services.trace)?;
        let skills = agent.skills.clone();
        let mut runner = Self::from_parts(
            alias.clone(),
            kit,
            route,
            model,
            config.runtime_profile_of(agent),
            services,
        );
        runner.control_plane = Some(root.control_plane_db());
        runner.scrubber = Arc::new(crate::egress::scrub::Scrubber::from_config(config));
        if !skills.is_empty() {
            runner.skills = Some((root.clone(), skills));
        }
        if let Some(mcp) = runner.kit.mcp() {
            mcp.start_eager();
        }
        Ok(runner)
    }

    /// Assembles a runner from built parts (tests and benchmarks choose the route).
    pub fn from_parts(
        alias: AgentAlias,
        kit: AgentKit,
        route: Route,
        model: String,
        runtime: RuntimeProfile,
        services: Arc<Services>,
    ) -> Self {
        let behaviour = Behaviour::of(&runtime);
        Self::assemble(alias, kit, Arc::new(route), model, behaviour, services)
    }

    fn assemble(
        alias: AgentAlias,
        kit: AgentKit,
        route: Arc<Route>,
        model: String,
        behaviour: Behaviour,
        services: Arc<Services>,
    ) -> Self {
        let identity = Identity::new(alias.as_str(), kit.policy().workspace());
        let mut runner = Self {
            identity,
            alias,
            kit,
            route,
            model,
            behaviour,
            services,
            definitions: Arc::new(Vec::new()),
            known: Vec::new(),
            control_plane: None,
            mcp_tools: std::sync::Mutex::new(None),
            skills: None,
            scrubber: Arc::default(),
        };
        runner.definitions = Arc::new(runner.build_definitions());
        runner.known = runner.definitions.iter().map(|t| t.name.clone()).collect();
        runner
    }

    pub fn alias(&self) -> &AgentAlias {
        &self.alias
    }

    pub fn kit(&self) -> &AgentKit {
        &self.kit
    }

    /// The scrubber every tool result of this agent passes (issue 35 §4).
    pub fn scrubber(&self) -> &crate::egress::scrub::Scrubber {
        &self.scrubber
    }

    /// The model every request of this agent names.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The tool definitions every request of this agent carries.
    pub fn tool_definitions(&self) -> &Arc<Vec<ToolDefinition>> {
        &self.definitions
    }

    fn build_definitions(&self) -> Vec<ToolDefinition> {
        let mut defs: Vec<ToolDefinition> = self
            .kit
            .tools()
            .iter()
            .map(|t| ToolDefinition {
                name: t.name().to_string(),
                description: t.description().to_string(),
                parameters: t.parameters(),
            })
            .collect();
        if self.can_delegate() {
            defs.extend(delegate::definitions());
        }
        defs
    }

    /// This turn's tool definitions and known names: the built-in ones, plus the tools of the
    /// agent's MCP servers (started here on the first turn; listed again after a change).
    async fn turn_tools(&self) -> (Arc<Vec<ToolDefinition>>, Arc<Vec<String>>) {
        let Some(mcp) = self.kit.mcp() else {
            return (Arc::clone(&self.definitions), Arc::new(self.known.clone()));
        };
        // The common case: every server up, nothing announced: the last turn's lists hold.
        if let Some(generation) = mcp.settled_generation()
            && let Some(snap) = self
                .mcp_tools
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .filter(|snap| snap.generation == generation)
        {
            return (Arc::clone(&snap.definitions), Arc::clone(&snap.known));
        }
        let tools = mcp.tools().await;
        let generation = mcp.generation();
        let mut cached = self.mcp_tools.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(snap) = cached.as_ref()
            && snap.generation == generation
            && snap.offered == tools.len()
        {
            return (Arc::clone(&snap.definitions), Arc::clone(&snap.known));
        }
        let policy = self.kit.policy();
        let offered = tools.len();
        let tools: Vec<_> = tools
            .into_iter()
            .filter(|t| policy.tool_allowed(t.name()))
            .collect();
        let mut definitions = (*self.definitions).clone();
        definitions.extend(tools.iter().map(|t| ToolDefinition {
            name: t.name().to_string(),
            description: t.description().to_string(),
            parameters: t.parameters(),
        }));
        let snap = McpSnapshot {
            generation,
            offered,
            known: Arc::new(definitions.iter().map(|d| d.name.clone()).collect()),
            definitions: Arc::new(definitions),
            tools: Arc::new(tools),
        };
        *cached = Some(snap.clone());
        (snap.definitions, snap.known)
    }

    /// The tool named `name`: a built-in one, or one of the agent's MCP tools as of this turn.
    pub(crate) fn tool(&self, name: &str) -> Result<Arc<dyn warren_tools::Tool>, AgentError> {
        match self.kit.tool(name) {
            Ok(t) => Ok(Arc::clone(t)),
            Err(e) => self
                .mcp_tools
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .and_then(|snap| snap.tools.iter().find(|t| t.name() == name).cloned())
                .ok_or(e),
        }
    }

    /// [`Self::tool`] for a call outside a turn (a cron job, an SOP tool step): an MCP name
    /// not known yet starts the agent's servers and lists their tools first, as a turn would.
    pub async fn find_tool(&self, name: &str) -> Result<Arc<dyn warren_tools::Tool>, AgentError> {
        match self.tool(name) {
            Err(_) if name.starts_with(taint::MCP_PREFIX) => {
                self.turn_tools().await;
                self.tool(name)
            }
            found => found,
        }
    }

    /// PERM-7: the `delegate` tool exists only with delegation depth left and when the risk
    /// profile allows the tool.
    fn can_delegate(&self) -> bool {
        self.behaviour.delegation_depth > 0 && self.kit.policy().tool_allowed(DELEGATE_TOOL)
    }

    fn max_iterations(&self) -> u32 {
        match self.kit.policy().max_tool_iterations() {
            0 => DEFAULT_MAX_ITERATIONS,
            n => n,
        }
    }
}
