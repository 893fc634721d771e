//! Tools an agent acts through. Every tool implements [`Tool`]; each is constructed with the
//! agent's own capabilities (its `SecurityPolicy`, its sandbox, its scoped memory handle), so a
//! tool can never reach more than the agent it was built for (docs/architecture.md, "one seam
//! per decision").

mod context;
mod files;
mod git;
mod http_request;
pub mod mcp;
mod memory;
mod registry;
mod shell;
mod taint;
mod tool;

pub use context::{CallOrigin, FileTransport, ReceiptHookError, ToolContext, TransportError};
pub use files::{FileEdit, FileRead, FileWrite, MAX_READ_BYTES};
pub use git::{GitOperations, NO_HOOKS, READ_CONFIG, refname};
pub use http_request::{EgressRefused, HttpCall, HttpEgress, HttpReply, HttpRequest};
pub use memory::{
    DEFAULT_RECALL_LIMIT, MemoryForgetTool, MemoryRecallTool, MemoryStoreTool, memory_tools,
};
pub use registry::{agent_tools, http_tool};
pub use shell::{DEFAULT_OUTPUT_CAP, Shell};
pub use taint::Taint;
pub use tool::{BoxFuture, RiskClass, Tool, ToolError, ToolOutput, ToolSpec};
