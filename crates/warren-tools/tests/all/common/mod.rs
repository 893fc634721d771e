//! The escape-suite fixture: one install root with an agent `main` and siblings on every grant
//! tier, each sibling holding `secret.txt`. Every case first shows the attack works WITHOUT
//! Warren's guard (plain `std::fs`, or an unsandboxed `sh -c` as the same user), then that it fails
//! with the guard, so a denial is proven to come from Warren, not from file modes (the tests run
//! as root, where file modes deny nothing).

// Test helpers outside #[test] fns: a failed setup step should panic with its name.
#![allow(clippy::expect_used)]
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use serde_json::{Value, json};
use warren_config::{Config, InstallRoot};
use warren_core::AgentAlias;
use warren_security::SecurityPolicy;
use warren_security::sandbox::Sandbox;
use warren_tools::{Tool, ToolError, ToolOutput};

pub const CONFIG: &str = r#"
[agents.main.workspace.access]
reader = "Read"
writer = "Write"
both = "ReadWrite"
ghost = "Read"

[agents.reader]
[agents.writer]
[agents.both]
[agents.stranger]
[agents.ghost]

# An agent whose command policy lets anything through, so only the kernel sandbox stands
# between it and its siblings.
[agents.wild]
risk_profile = "anything"
[agents.wild.workspace.access]
reader = "Read"
writer = "Write"
both = "ReadWrite"

[risk_profiles.anything]
autonomy = "full"
allowed_commands = ["*"]

[agents.readonly]
risk_profile = "viewer"
[risk_profiles.viewer]
autonomy = "read_only"

[agents.roamer.workspace]
unrestricted_filesystem = true
"#;

pub struct Fixture {
    _dir: tempfile::TempDir,
    pub root: InstallRoot,
    pub config: Config,
}

impl Fixture {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = InstallRoot::at(dir.path().join("warren"));
        root.ensure_layout().expect("layout");
        fs::write(root.config_file(), CONFIG).expect("config");
        let store = warren_config::ConfigStore::load(root.clone()).expect("config loads");
        let config = store.snapshot().config().clone();
        for agent in ["main", "wild", "readonly", "roamer"] {
            fs::create_dir_all(root.agent_workspace(&alias(agent))).expect("workspace");
        }
        for sibling in ["reader", "writer", "both", "stranger"] {
            let ws = root.agent_workspace(&alias(sibling));
            fs::create_dir_all(&ws).expect("sibling workspace");
            fs::write(ws.join("secret.txt"), format!("SECRET-{sibling}\n")).expect("secret");
        }
        Self {
            _dir: dir,
            root,
            config,
        }
    }

    pub fn ws(&self, agent: &str) -> PathBuf {
        self.root.agent_workspace(&alias(agent))
    }

    pub fn secret(&self, sibling: &str) -> PathBuf {
        self.ws(sibling).join("secret.txt")
    }

    pub fn policy(&self, agent: &str) -> SecurityPolicy {
        let p = SecurityPolicy::for_agent(&self.config, &self.root, &alias(agent)).expect("policy");
        p.ensure_workspace().expect("workspace");
        p
    }

    pub fn tools(&self, agent: &str) -> Vec<Arc<dyn Tool>> {
        let policy = self.policy(agent);
        let sandbox = Sandbox::for_policy(&policy).expect("sandbox available on this host");
        warren_tools::agent_tools(&policy, &sandbox)
    }

    pub fn call(&self, agent: &str, tool: &str, args: Value) -> Result<ToolOutput, ToolError> {
        self.call_with(agent, tool, args, false)
    }

    pub fn call_with(
        &self,
        agent: &str,
        tool: &str,
        args: Value,
        approved: bool,
    ) -> Result<ToolOutput, ToolError> {
        let tools = self.tools(agent);
        let t = tools
            .iter()
            .find(|t| t.name() == tool)
            .expect("tool exists");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            if approved {
                t.execute_approved(args).await
            } else {
                t.execute(args).await
            }
        })
    }

    pub fn read(&self, agent: &str, path: impl AsRef<Path>) -> Result<ToolOutput, ToolError> {
        self.call(agent, "file_read", json!({ "path": path.as_ref() }))
    }

    pub fn write(
        &self,
        agent: &str,
        path: impl AsRef<Path>,
        content: &str,
    ) -> Result<ToolOutput, ToolError> {
        self.call(
            agent,
            "file_write",
            json!({ "path": path.as_ref(), "content": content }),
        )
    }

    pub fn edit(
        &self,
        agent: &str,
        path: impl AsRef<Path>,
        old: &str,
        new: &str,
    ) -> Result<ToolOutput, ToolError> {
        self.call(
            agent,
            "file_edit",
            json!({ "path": path.as_ref(), "old_string": old, "new_string": new }),
        )
    }

    /// Runs `command` through the agent's shell tool, with the operator's approval (so only the
    /// policy and the sandbox decide).
    pub fn shell(&self, agent: &str, command: &str) -> Result<ShellResult, ToolError> {
        let out = self.call_with(agent, "shell", json!({ "command": command }), true)?;
        Ok(ShellResult {
            exit_code: out.content["exit_code"].as_i64(),
            stdout: out.content["stdout"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            stderr: out.content["stderr"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        })
    }

    /// The same command with no guard at all: `sh -c` in the agent's workspace.
    pub fn unguarded_shell(&self, agent: &str, command: &str) -> ShellResult {
        let out = Command::new("/bin/sh")
            .arg("-c")
            .arg(command)
            .current_dir(self.ws(agent))
            .output()
            .expect("sh");
        ShellResult {
            exit_code: out.status.code().map(i64::from),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

#[derive(Debug)]
pub struct ShellResult {
    pub exit_code: Option<i64>,
    pub stdout: String,
    pub stderr: String,
}

impl ShellResult {
    pub fn ok(&self) -> bool {
        self.exit_code == Some(0)
    }
}

pub fn alias(s: &str) -> AgentAlias {
    AgentAlias::new(s).expect("alias")
}

/// The guarded call must fail with a permission denial.
#[track_caller]
pub fn assert_denied(result: Result<ToolOutput, ToolError>) -> String {
    match result {
        Err(ToolError::Denied(msg)) => msg,
        other => panic!("expected a permission denial, got {other:?}"),
    }
}

/// The sandboxed command must fail without leaking `secret_marker`, and the unguarded one must
/// succeed and show it (proving the denial is Warren's).
#[track_caller]
pub fn assert_kernel_blocks(guarded: &ShellResult, unguarded: &ShellResult, secret_marker: &str) {
    assert!(
        unguarded.ok() && unguarded.stdout.contains(secret_marker),
        "baseline attack must work unguarded: {unguarded:?}"
    );
    assert!(!guarded.ok(), "sandboxed attack must fail: {guarded:?}");
    assert!(
        !guarded.stdout.contains(secret_marker),
        "sandbox leaked the secret: {guarded:?}"
    );
}
