//! The `delegate` tool (PERM-7): runs a child turn for a sub-task. The child's policy comes
//! from `SecurityPolicy::narrow`, so it never holds more than its parent on any axis
//! (autonomy, tools, commands, iteration limit, ...); a request that would escalate is refused
//! with the axis named. The child uses the parent's provider route, approval channel and cost
//! ledger entry (its usage is billed to the parent agent, so it draws on the parent's budget),
//! gets at most the iterations it asks for (default: half the parent's), and can spawn
//! further subagents only when the parent's `delegation_depth` is 2 or more.

use serde::Deserialize;
use warren_config::schema::Autonomy;
use warren_core::ToolDefinition;

/// The tool's name.
pub const DELEGATE_TOOL: &str = "delegate";

/// What the model passes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelegateArgs {
    /// The sub-task, as the child's user message.
    pub task: String,
    #[serde(default)]
    pub autonomy: Option<Autonomy>,
    /// Tools the child may use (default: the parent's).
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// Shell commands the child may start (default: the parent's).
    #[serde(default)]
    pub allowed_commands: Option<Vec<String>>,
    /// Tool rounds the child may use (default: half the parent's, at least 1).
    #[serde(default)]
    pub max_iterations: Option<u32>,
}

/// The definition sent to providers.
pub fn definition() -> ToolDefinition {
    ToolDefinition {
        name: DELEGATE_TOOL.into(),
        description: "Run a sub-task in a subagent with the same or narrower permissions (never wider). Returns the subagent's final answer.".into(),
        parameters: serde_json::json!({
            "type": "object", "additionalProperties": false, "required": ["task"],
            "properties": {
                "task": {"type": "string"},
                "autonomy": {"type": "string", "enum": ["read_only", "supervised", "full"]},
                "tools": {"type": "array", "items": {"type": "string"}},
                "allowed_commands": {"type": "array", "items": {"type": "string"}},
                "max_iterations": {"type": "integer", "minimum": 1}
            }
        }),
    }
}
