//! The `Tool` trait: name, JSON schema of its arguments, risk class, and `execute`.
//!
//! Arguments come from a model: `execute` validates them and answers a [`ToolError`] naming the
//! problem (never a panic). Results are JSON so the runtime, the CLI (`--json`) and providers see
//! the same structure.

use std::future::Future;
use std::pin::Pin;

use serde::{Deserialize, Serialize};

/// Parses model-supplied arguments into `T`, naming the problem on failure.
pub(crate) fn parse_args<T: serde::de::DeserializeOwned>(
    args: serde_json::Value,
) -> Result<T, ToolError> {
    serde_json::from_value(args).map_err(|e| ToolError::InvalidArguments(e.to_string()))
}

/// A boxed future, so `Tool` stays object safe (`Arc<dyn Tool>`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How much a call can change or reveal; approvals key off it (LOOP-1, PERM-7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RiskClass {
    /// Reads within the agent's grants.
    Read,
    /// Changes files or state within the agent's grants.
    Write,
    /// Starts processes.
    Execute,
}

/// What a provider is told about a tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: serde_json::Value,
    pub risk: RiskClass,
}

/// A successful call's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolOutput {
    pub content: serde_json::Value,
}

impl ToolOutput {
    pub fn json(content: serde_json::Value) -> Self {
        Self { content }
    }
}

/// A failed call. The message is shown to the model and the operator: it names the argument,
/// path or rule at fault and never contains secrets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "kind", content = "message", rename_all = "snake_case")]
pub enum ToolError {
    /// The arguments do not match the schema or are out of range.
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    /// The agent's policy refuses the call (names the path and the missing grant).
    #[error("permission denied: {0}")]
    Denied(String),
    /// The call needs an approval the runtime has not given.
    #[error("approval required: {0}")]
    ApprovalRequired(String),
    /// The call ran and failed.
    #[error("{0}")]
    Failed(String),
    #[error("cancelled")]
    Cancelled,
}

/// A tool bound to one agent's capabilities.
pub trait Tool: Send + Sync {
    /// Built-in tools answer a fixed name; an MCP server's tools answer `mcp__<server>__<tool>`.
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    /// JSON Schema of the arguments object.
    fn parameters(&self) -> serde_json::Value;
    fn risk(&self) -> RiskClass;
    /// Runs the call with model-supplied `args`.
    fn execute(&self, args: serde_json::Value) -> BoxFuture<'_, Result<ToolOutput, ToolError>>;

    /// Runs the call after the runtime obtained an approval from the operator (never from the
    /// model: no argument can set it). Tools without approvals run as `execute`.
    fn execute_approved(
        &self,
        args: serde_json::Value,
    ) -> BoxFuture<'_, Result<ToolOutput, ToolError>> {
        self.execute(args)
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().to_string(),
            description: self.description().to_string(),
            parameters: self.parameters(),
            risk: self.risk(),
        }
    }
}
