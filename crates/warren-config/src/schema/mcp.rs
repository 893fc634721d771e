//! `[agents.<alias>.mcp.servers.<name>]` (issue 23, PERM-2): the MCP servers one agent uses.
//! A server is either a stdio program (`command`, `args`, `env`), started inside the agent's
//! sandbox, or a streamable HTTP endpoint (`url`, `headers`). `env` names every variable the
//! server gets beyond the sandbox's fixed ones; a value is text or `{ secret = "<name>" }`, a
//! `[secrets.<name>]` entry resolved when the server starts and never shown to the model.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `[agents.<alias>.mcp]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentMcpConfig {
    /// Server name → server. Names become part of tool names (`mcp__<server>__<tool>`).
    pub servers: BTreeMap<String, McpServerConfig>,
}

impl AgentMcpConfig {
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }
}

/// One MCP server of one agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpServerConfig {
    /// The program of a stdio server (a path, or a name looked up in the sandbox's PATH).
    pub command: Option<String>,
    pub args: Vec<String>,
    /// Variables the server's environment gets (it is cleared otherwise).
    pub env: BTreeMap<String, McpEnvValue>,
    /// A streamable HTTP server's endpoint (instead of `command`).
    pub url: Option<String>,
    /// Headers sent to a `url` server; values as in `env`.
    pub headers: BTreeMap<String, McpEnvValue>,
    /// The tools exposed to the agent (the server's names); unset = every tool.
    pub tools: Option<Vec<String>>,
    /// Start with the agent's first turn (`false`) or when the daemon starts (`true`).
    pub eager: bool,
    /// How the runtime asks before a call: `low` (like a read), `medium` (like a write: asked
    /// under `supervised`), `high` (asked at every autonomy).
    pub risk: McpRisk,
    pub startup_timeout_secs: u64,
    pub call_timeout_secs: u64,
}

impl Default for McpServerConfig {
    fn default() -> Self {
        Self {
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            url: None,
            headers: BTreeMap::new(),
            tools: None,
            eager: false,
            risk: McpRisk::Medium,
            startup_timeout_secs: 30,
            call_timeout_secs: 60,
        }
    }
}

/// A value of `env` or `headers`: literal text, or the name of a `[secrets.<name>]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum McpEnvValue {
    Text(String),
    Secret { secret: String },
}

/// The risk tier of a server's tools.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum McpRisk {
    Low,
    #[default]
    Medium,
    High,
}

/// Whether `name` may name a server (it becomes part of tool names: `[A-Za-z0-9_-]`, no `__`).
pub fn valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && !name.contains("__")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The problems of one agent's `[agents.<alias>.mcp]` and `skills` (`at` makes the key path
/// of a suffix such as `.mcp.servers.x.command`).
pub(crate) fn problems(
    config: &super::Config,
    agent: &super::AgentConfig,
    at: &dyn Fn(&str) -> String,
) -> Vec<crate::error::Problem> {
    use crate::error::{Problem, did_you_mean};
    use crate::keypath::quote;
    let mut out = Vec::new();
    for (name, server) in &agent.mcp.servers {
        let key = |rest: &str| at(&format!(".mcp.servers.{}{rest}", quote(name)));
        if !valid_server_name(name) {
            out.push(Problem::at(
                key(""),
                format!(
                    "MCP server name '{name}' must be 1-32 letters, digits, '-' or '_' without '__' (it becomes part of tool names mcp__<server>__<tool>)"
                ),
            ));
        }
        match (&server.command, &server.url) {
            (None, None) => out.push(Problem::at(
                key(""),
                "set `command` (a stdio server started in the agent's sandbox) or `url` (a streamable HTTP server)",
            )),
            (Some(_), Some(_)) => out.push(Problem::at(
                key(".url"),
                "set either `command` or `url`, not both",
            )),
            _ => {}
        }
        if server.startup_timeout_secs == 0 || server.call_timeout_secs == 0 {
            out.push(Problem::at(key(""), "timeouts must be at least 1 second"));
        }
        let values = server
            .env
            .iter()
            .map(|(k, v)| (format!(".env.{}", quote(k)), v))
            .chain(
                server
                    .headers
                    .iter()
                    .map(|(k, v)| (format!(".headers.{}", quote(k)), v)),
            );
        for (field, value) in values {
            if let McpEnvValue::Secret { secret } = value
                && !config.secrets.contains_key(secret)
            {
                let hint = did_you_mean(secret, config.secrets.keys().map(String::as_str));
                out.push(
                    Problem::at(
                        key(&field),
                        format!(
                            "names secret '{secret}', which is not set (warren config set secrets.{}.value --secret)",
                            quote(secret)
                        ),
                    )
                    .with_hint(hint),
                );
            }
        }
    }
    for (i, bundle) in agent.skills.iter().enumerate() {
        if !valid_bundle_name(bundle) {
            out.push(Problem::at(
                at(&format!(".skills[{i}]")),
                format!(
                    "skill bundle name '{bundle}' must be a directory name under shared/skills/ (letters, digits, '-', '_', '.'; not starting with '.')"
                ),
            ));
        }
    }
    out
}

/// Whether `name` may name a skill bundle directory (one plain path component).
pub fn valid_bundle_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems_of(text: &str) -> Vec<String> {
        let config: crate::schema::Config = toml::from_str(text).unwrap_or_else(|e| panic!("{e}"));
        crate::validate::validate(&config)
            .into_iter()
            .map(|p| format!("{}: {}", p.key.unwrap_or_default(), p.message))
            .collect()
    }

    #[test]
    fn servers_parse_with_defaults_and_secret_references() {
        let config: crate::schema::Config = toml::from_str(
            r#"
[secrets.gh]
value = "x"
[agents.a]
skills = ["pdf"]
[agents.a.mcp.servers.gh]
command = "gh-mcp"
env = { TOKEN = { secret = "gh" }, MODE = "ro" }
"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let alias: warren_core::AgentAlias = "a".parse().unwrap_or_else(|e| panic!("{e:?}"));
        let a = &config.agents[&alias];
        let gh = &a.mcp.servers["gh"];
        assert_eq!(gh.risk, McpRisk::Medium);
        assert_eq!(
            (gh.startup_timeout_secs, gh.call_timeout_secs, gh.eager),
            (30, 60, false)
        );
        assert_eq!(
            gh.env["TOKEN"],
            McpEnvValue::Secret {
                secret: "gh".into()
            }
        );
        assert_eq!(gh.env["MODE"], McpEnvValue::Text("ro".into()));
        assert_eq!(a.skills, vec!["pdf".to_string()]);
    }

    #[test]
    fn bad_servers_and_bundles_are_named_with_their_key() {
        let problems = problems_of(
            r#"
[agents.a]
skills = ["../etc"]
[agents.a.mcp.servers.x__y]
command = "a"
url = "http://h"
[agents.a.mcp.servers.none]
[agents.a.mcp.servers.s]
command = "a"
env = { T = { secret = "missing" } }
"#,
        );
        let text = problems.join("\n");
        assert!(
            text.contains("agents.a.mcp.servers.x__y: MCP server name 'x__y'"),
            "{text}"
        );
        assert!(
            text.contains("agents.a.mcp.servers.x__y.url: set either"),
            "{text}"
        );
        assert!(
            text.contains("agents.a.mcp.servers.none: set `command`"),
            "{text}"
        );
        assert!(
            text.contains("agents.a.mcp.servers.s.env.T: names secret 'missing'"),
            "{text}"
        );
        assert!(
            text.contains("agents.a.skills[0]: skill bundle name '../etc'"),
            "{text}"
        );
    }
}
