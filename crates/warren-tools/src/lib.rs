//! Tools an agent acts through. Every tool implements [`Tool`]; each is constructed with the
//! agent's own capabilities (its `SecurityPolicy`, its scoped memory handle), so a tool can never
//! reach more than the agent it was built for (STYLE "one seam per decision").

mod memory;
mod tool;

pub use memory::{
    DEFAULT_RECALL_LIMIT, MemoryForgetTool, MemoryRecallTool, MemoryStoreTool, memory_tools,
};
pub use tool::{BoxFuture, RiskClass, Tool, ToolError, ToolOutput, ToolSpec};
