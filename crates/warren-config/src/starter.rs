//! `warren init`: the install layout and a commented starter config with one agent, `main`.

use std::io;

use crate::atomic::{self, CrashPoints};
use crate::error::ConfigError;
use crate::paths::InstallRoot;

/// The starter config. Every commented key shows its default.
pub const STARTER_CONFIG: &str = r#"# Warren configuration. Every key is optional unless marked; commented values are the defaults.
# Edit with `warren config set KEY VALUE` (keeps your comments) or by hand, then
# `warren config validate`. Agents are renamed/deleted with `warren agents ...`, not by editing.

[agents.main]
# provider = "openai"          # a name from [providers.*]
# model = "gpt-4o-mini"
risk_profile = "default"       # built in: autonomy "supervised"; or a name from [risk_profiles.*]
# runtime_profile = "careful"  # a name from [runtime_profiles.*]

# [agents.main.workspace]
# unrestricted_filesystem = false
# [agents.main.workspace.access]
# research = "Read"            # sibling alias = "Read" | "Write" | "ReadWrite"

# [agents.main.memory]
# backend = "sqlite"           # sqlite | postgres | markdown | none (default: [memory] backend)
# read_memory_from = ["research", { agent = "ops", categories = ["runbooks"] }]

# [providers.openai]
# kind = "openai"              # openai | anthropic | script
# base_url = "https://api.openai.com/v1"
# api_key_env = "OPENAI_API_KEY"   # or store it encrypted:
#                                  # warren config set providers.openai.api_key --secret

# [runtime_profiles.careful]
# single_tool_rounds = false
# parallel_tools = false
# max_tool_iterations = 10

[gateway]
# bind = "127.0.0.1"
# port = 42617

[log]
# persistence = "rolling"      # rolling | full | none
"#;

/// What `init` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitOutcome {
    Created,
    AlreadyExists,
}

/// Creates the layout and, if absent, the starter config (0600). Never replaces a config.
pub fn init(root: &InstallRoot) -> Result<InitOutcome, ConfigError> {
    root.ensure_layout()?;
    let path = root.config_file();
    match std::fs::symlink_metadata(&path) {
        Ok(_) => return Ok(InitOutcome::AlreadyExists),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => return Err(ConfigError::Read { path, source }),
    }
    atomic::write_durable(&path, STARTER_CONFIG.as_bytes(), 0o600, CrashPoints::CONFIG)?;
    Ok(InitOutcome::Created)
}
