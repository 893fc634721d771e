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
