//! The tools of one agent, built from its policy and sandbox only.

use std::sync::Arc;

use warren_security::SecurityPolicy;
use warren_security::sandbox::Sandbox;

use crate::files::{FileEdit, FileRead, FileWrite};
use crate::git::GitOperations;
use crate::shell::Shell;
use crate::tool::Tool;

/// Every tool the agent's risk profile allows, bound to its policy and sandbox.
pub fn agent_tools(policy: &SecurityPolicy, sandbox: &Sandbox) -> Vec<Arc<dyn Tool>> {
    let all: Vec<Arc<dyn Tool>> = vec![
        Arc::new(FileRead::new(policy.clone())),
        Arc::new(FileWrite::new(policy.clone())),
        Arc::new(FileEdit::new(policy.clone())),
        Arc::new(Shell::new(sandbox.clone())),
        Arc::new(GitOperations::new(sandbox.clone())),
    ];
    all.into_iter()
        .filter(|t| policy.tool_allowed(t.name()))
        .collect()
}

/// `http_request` bound to the agent's egress (built by the runtime, which owns the secrets),
/// when the agent's network allowlist is not empty and its risk profile allows the tool.
pub fn http_tool(
    policy: &SecurityPolicy,
    egress: Arc<dyn crate::http_request::HttpEgress>,
) -> Option<Arc<dyn Tool>> {
    let tool = crate::http_request::HttpRequest::new(egress);
    (!policy.egress().allow.is_empty() && policy.tool_allowed(tool.name()))
        .then(|| Arc::new(tool) as Arc<dyn Tool>)
}
