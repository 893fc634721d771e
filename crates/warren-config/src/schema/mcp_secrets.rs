//! Secrets handed to programs an agent controls (issue 35 §4, CFG-6, PERM-2): a stdio MCP
//! server whose `command` or an argument resolves into a root an agent can write (its own
//! workspace, a sibling's workspace granted `Write` or `ReadWrite`, any other agent's own
//! workspace, anything under its `unrestricted_filesystem`) must not get a secret in `env` or
//! `headers`. The agent could
//! rewrite that program and have it write the value where a tool reads it back.
//!
//! Paths are resolved as the server is started: relative ones against the agent's workspace
//! (the child's working directory); a bare command name is looked up in the sandbox's system
//! `PATH`, outside every agent's roots. A path counts as inside a root when any prefix of it
//! is (so `..` after a component the agent may replace by a symlink does not get out), and,
//! when it exists, when its canonical form is. An argument counts as a path when it is
//! absolute, starts with `./` or `../`, contains `/` (a package name `@scope/pkg` does not),
//! or ends in a script extension; `--opt=value` is read as its value.
//!
//! What this cannot see (docs/security.md says so too): a server started with `HOME` and the
//! working directory in the workspace may still load code or settings from there (Python's user
//! site-packages, `python -m name` modules, package-runner caches under `HOME`).

use std::path::{Component, Path, PathBuf};

use warren_core::AgentAlias;

use super::{AccessLevel, Config, McpEnvValue};
use crate::error::Problem;
use crate::keypath::quote;
use crate::paths::InstallRoot;

/// Extensions that make a relative argument a script path (`server.py`).
const SCRIPT_EXTENSIONS: [&str; 14] = [
    "py", "pyc", "js", "mjs", "cjs", "ts", "sh", "bash", "rb", "pl", "php", "lua", "jar", "wasm",
];

/// Roots an agent may write, as the policies build them (PERM-2): `alias`'s own workspace
/// and the siblings it may write, and every other agent's workspace too (each agent writes its
/// own, and a program there is one that agent can rewrite for `alias`'s secret). `None` =
/// every path (`alias` has `unrestricted_filesystem`).
fn writable_roots(config: &Config, root: &InstallRoot, alias: &AgentAlias) -> Option<Vec<PathBuf>> {
    let agent = config.agents.get(alias)?;
    if agent.workspace.unrestricted_filesystem {
        return None;
    }
    let mut roots = vec![root.agent_workspace(alias)];
    for (sibling, level) in &agent.workspace.access {
        if matches!(level, AccessLevel::Write | AccessLevel::ReadWrite) {
            roots.push(root.agent_workspace(sibling));
        }
    }
    for other in config.agents.keys() {
        let workspace = root.agent_workspace(other);
        if !roots.contains(&workspace) {
            roots.push(workspace);
        }
    }
    Some(roots)
}

/// Whether `path` (absolute, or relative to `cwd`) reaches into one of `roots`; the root.
fn inside(path: &Path, cwd: &Path, roots: &[PathBuf]) -> Option<PathBuf> {
    let full = if path.is_absolute() {
        path.to_path_buf()
    } else {
        cwd.join(path)
    };
    let under = |p: &Path| roots.iter().find(|r| p.starts_with(r)).cloned();
    // Every prefix, `..` applied lexically: a component inside a root may be a symlink.
    let mut at = PathBuf::new();
    for c in full.components() {
        match c {
            Component::ParentDir => {
                at.pop();
            }
            Component::CurDir => {}
            other => at.push(other),
        }
        if let Some(r) = under(&at) {
            return Some(r);
        }
    }
    let canonical = |p: &Path| std::fs::canonicalize(p).ok();
    let roots: Vec<PathBuf> = roots
        .iter()
        .map(|r| canonical(r).unwrap_or_else(|| r.clone()))
        .collect();
    canonical(&full).and_then(|c| roots.iter().find(|r| c.starts_with(r)).cloned())
}

/// Whether a relative argument names a file (rather than a package, flag or word).
fn path_like(arg: &str) -> bool {
    arg.starts_with("./")
        || arg.starts_with("../")
        || (arg.contains('/') && !arg.starts_with('@'))
        || Path::new(arg)
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| SCRIPT_EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()))
}

/// The first of `command`, `args` that resolves into a root of `roots` (`None` = every path is
/// writable): `(what, as written, resolved, root)`.
fn program_in_roots(
    command: &str,
    args: &[String],
    cwd: &Path,
    roots: Option<&[PathBuf]>,
) -> Option<(String, String, PathBuf, Option<PathBuf>)> {
    let Some(roots) = roots else {
        return Some((
            "command".into(),
            command.into(),
            PathBuf::from(command),
            None,
        ));
    };
    if command.contains('/')
        && let Some(root) = inside(Path::new(command), cwd, roots)
    {
        return Some((
            "command".into(),
            command.into(),
            cwd.join(command),
            Some(root),
        ));
    }
    for (i, arg) in args.iter().enumerate() {
        let value = match arg.strip_prefix('-') {
            Some(opt) => match opt.split_once('=') {
                Some((_, v)) => v,
                None => continue,
            },
            None => arg.as_str(),
        };
        if value.is_empty() || !(value.starts_with('/') || path_like(value)) {
            continue;
        }
        if let Some(root) = inside(Path::new(value), cwd, roots) {
            return Some((
                format!("args[{i}]"),
                arg.clone(),
                cwd.join(value),
                Some(root),
            ));
        }
    }
    None
}

/// The problems of every agent's secret-bearing stdio MCP servers whose program the agent can
/// write: named by the `env`/`headers` key, with the server, the argument and the path.
pub(crate) fn problems(config: &Config, root: &InstallRoot) -> Vec<Problem> {
    let mut out = Vec::new();
    for (alias, agent) in &config.agents {
        for (name, server) in &agent.mcp.servers {
            let Some(command) = &server.command else {
                continue; // a `url` server runs no program
            };
            let secrets: Vec<(String, &str)> = server
                .env
                .iter()
                .map(|(k, v)| (format!("env.{}", quote(k)), v))
                .chain(
                    server
                        .headers
                        .iter()
                        .map(|(k, v)| (format!("headers.{}", quote(k)), v)),
                )
                .filter_map(|(key, v)| match v {
                    McpEnvValue::Secret { secret } => Some((key, secret.as_str())),
                    McpEnvValue::Text(_) => None,
                })
                .collect();
            if secrets.is_empty() {
                continue;
            }
            let roots = writable_roots(config, root, alias);
            let workspace = root.agent_workspace(alias);
            let Some((what, written, path, inside)) =
                program_in_roots(command, &server.args, &workspace, roots.as_deref())
            else {
                continue;
            };
            let whose = match &inside {
                None => format!(
                    "agent '{alias}' has unrestricted_filesystem = true, so it can write every path"
                ),
                Some(r) => format!(
                    "{what} '{written}' resolves to {}, inside {}, which agent '{alias}' can write",
                    path.display(),
                    r.display()
                ),
            };
            for (key, secret) in secrets {
                out.push(
                    Problem::at(
                        format!(
                            "agents.{}.mcp.servers.{}.{key}",
                            quote(alias.as_str()),
                            quote(name)
                        ),
                        format!(
                            "MCP server '{name}' would get secret '{secret}', but {whose}: the agent could rewrite the program and read the secret back"
                        ),
                    )
                    .with_hint(Some(
                        "install the server where no agent can write and the sandbox can read (under /usr/local: the sandbox sees /usr read-only) and name it by absolute path, or give it no secret".into(),
                    )),
                );
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems_of(text: &str) -> Vec<String> {
        let config: Config = toml::from_str(text).unwrap_or_else(|e| panic!("{e}"));
        problems(&config, &InstallRoot::at("/inst"))
            .into_iter()
            .map(|p| format!("{}: {}", p.key.unwrap_or_default(), p.message))
            .collect()
    }

    const SECRET: &str = "[secrets.gh]\nvalue = \"x\"\n";

    #[test]
    fn a_secret_for_a_script_in_the_workspace_is_refused_naming_server_key_and_path_issue35() {
        for (args, shown) in [
            (
                r#"["gh_server.py"]"#,
                "args[0] 'gh_server.py' resolves to /inst/agents/a/workspace/gh_server.py",
            ),
            (r#"["-u", "./srv/main"]"#, "args[1] './srv/main'"),
            (
                r#"["--script=/inst/agents/a/workspace/s.js"]"#,
                "args[0] '--script=/inst/agents/a/workspace/s.js'",
            ),
            // `..` after a component the agent may swap for a symlink does not get out.
            (
                r#"["/inst/agents/a/workspace/link/../../../../opt/s.py"]"#,
                "args[0]",
            ),
            // A sibling granted Write is writable too.
            (
                r#"["/inst/agents/b/workspace/s.py"]"#,
                "inside /inst/agents/b/workspace",
            ),
            // Another agent's own workspace: that agent can rewrite it.
            (
                r#"["/inst/agents/c/workspace/s.py"]"#,
                "inside /inst/agents/c/workspace",
            ),
        ] {
            let text = format!(
                "{SECRET}[agents.b]\n[agents.c]\n[agents.a.workspace.access]\nb = \"Write\"\n[agents.a.mcp.servers.gh]\ncommand = \"/usr/bin/python3\"\nargs = {args}\nenv = {{ TOKEN = {{ secret = \"gh\" }}, MODE = \"ro\" }}\n"
            );
            let p = problems_of(&text);
            assert_eq!(p.len(), 1, "{args}: {p:?}");
            assert!(
                p[0].starts_with(
                    "agents.a.mcp.servers.gh.env.TOKEN: MCP server 'gh' would get secret 'gh'"
                ),
                "{}",
                p[0]
            );
            assert!(p[0].contains(shown), "{args}: {}", p[0]);
        }
        // The command itself, relative to the workspace.
        let p = problems_of(&format!(
            "{SECRET}[agents.a.mcp.servers.gh]\ncommand = \"bin/server\"\nenv = {{ T = {{ secret = \"gh\" }} }}\n"
        ));
        assert!(
            p.len() == 1 && p[0].contains("command 'bin/server'"),
            "{p:?}"
        );
        // unrestricted_filesystem: every program is writable.
        let p = problems_of(&format!(
            "{SECRET}[agents.a.workspace]\nunrestricted_filesystem = true\n[agents.a.mcp.servers.gh]\ncommand = \"gh-mcp\"\nenv = {{ T = {{ secret = \"gh\" }} }}\n"
        ));
        assert!(
            p.len() == 1 && p[0].contains("unrestricted_filesystem"),
            "{p:?}"
        );
    }

    #[test]
    fn programs_outside_the_writable_roots_or_without_secrets_pass_issue35() {
        for server in [
            // A program installed outside the roots, by path or on PATH.
            "command = \"/usr/bin/python3\"\nargs = [\"/usr/local/lib/mcp/gh_server.py\"]\nenv = { T = { secret = \"gh\" } }",
            "command = \"npx\"\nargs = [\"-y\", \"@modelcontextprotocol/server-github\"]\nenv = { T = { secret = \"gh\" } }",
            "command = \"uvx\"\nargs = [\"mcp-server-git==0.6.2\", \"--repository\"]\nenv = { T = { secret = \"gh\" } }",
            // A directory of the install root that no agent writes.
            "command = \"/usr/bin/python3\"\nargs = [\"/inst/shared/mcp/s.py\"]\nenv = { T = { secret = \"gh\" } }",
            // No secret: nothing to protect.
            "command = \"/usr/bin/python3\"\nargs = [\"gh_server.py\"]\nenv = { MODE = \"ro\" }",
        ] {
            let text = format!(
                "{SECRET}[agents.b]\n[agents.a.workspace.access]\nb = \"Read\"\n[agents.a.mcp.servers.gh]\n{server}\n"
            );
            assert_eq!(problems_of(&text), Vec::<String>::new(), "{server}");
        }
    }
}
