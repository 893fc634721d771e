//! Shell completion that knows the install (issue 37 §5): besides subcommands and flags, agent
//! aliases, session keys and config keys complete from the install root the command line names
//! (`--config-dir DIR`, else `WARREN_HOME`, else the default).
//!
//! clap_complete's environment-driven engine: the shell script that `warren completions SHELL`
//! prints calls `COMPLETE=SHELL warren -- WORDS...` on every Tab, and [`complete_if_asked`]
//! answers it before anything else runs. Every lookup is a read; none creates a file, and a
//! missing or broken install just completes nothing.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::CommandFactory;
use clap_complete::engine::{ArgValueCandidates, CompletionCandidate};
use clap_complete::env::{Bash, CompleteEnv, Elvish, EnvCompleter, Fish, Powershell, Zsh};
use warren_config::{ConfigStore, InstallRoot};

use crate::cli::Cli;

/// The variable the completion scripts set (clap_complete's default).
const VAR: &str = "COMPLETE";

/// Answers a completion request (`COMPLETE=bash warren -- ...`) and exits; returns at once on an
/// ordinary run.
pub fn complete_if_asked() {
    CompleteEnv::with_factory(command).var(VAR).complete();
}

/// The script `warren completions SHELL` prints: it registers `warren` with the shell so that
/// every Tab asks `warren` itself (see the module doc).
pub fn registration(shell: clap_complete::Shell) -> std::io::Result<Vec<u8>> {
    let completer: &dyn EnvCompleter = match shell {
        clap_complete::Shell::Bash => &Bash,
        clap_complete::Shell::Elvish => &Elvish,
        clap_complete::Shell::Fish => &Fish,
        clap_complete::Shell::PowerShell => &Powershell,
        _ => &Zsh,
    };
    // The program as it was called (a bare `warren` is found on PATH at Tab time).
    let bin = std::env::args_os()
        .next()
        .unwrap_or_else(|| OsString::from("warren"));
    let bin = bin.to_string_lossy();
    let mut script = Vec::new();
    completer.write_registration(VAR, "warren", &bin, &bin, &mut script)?;
    Ok(script)
}

/// What a value of an argument completes to.
#[derive(Clone, Copy)]
enum Values {
    Agents,
    Sessions,
    ConfigKeys,
}

/// Which arguments complete to what, by subcommand path and argument id (`*` is any path).
const VALUES: &[(&str, &str, Values)] = &[
    ("*", "agent", Values::Agents),
    ("*", "alias", Values::Agents),
    ("agents rename", "old", Values::Agents),
    ("agent", "session", Values::Sessions),
    ("sessions show", "key", Values::Sessions),
    ("sessions delete", "key", Values::Sessions),
    ("sessions append", "key", Values::Sessions),
    ("config get", "key", Values::ConfigKeys),
    ("config set", "key", Values::ConfigKeys),
];

/// The CLI's command tree with value completers attached to the arguments of [`VALUES`].
fn command() -> clap::Command {
    attach(Cli::command(), "")
}

fn attach(mut cmd: clap::Command, path: &str) -> clap::Command {
    // `mut_arg` moves an argument to the end of its command, so every positional first gets
    // its place as an explicit index, in order (`config set KEY VALUE` stays KEY VALUE).
    let positionals: Vec<String> = cmd
        .get_positionals()
        .map(|a| a.get_id().to_string())
        .collect();
    for (place, id) in positionals.into_iter().enumerate() {
        cmd = cmd.mut_arg(id, |arg| match arg.get_index() {
            Some(_) => arg,
            None => arg.index(place + 1),
        });
    }
    let ids: Vec<String> = cmd
        .get_arguments()
        .map(|a| a.get_id().to_string())
        .collect();
    for id in ids {
        // `agents add ALIAS` names a new agent: nothing to complete.
        if path == "agents add" {
            break;
        }
        let rule = VALUES
            .iter()
            .find(|(p, a, _)| (*p == path || *p == "*") && *a == id);
        if let Some(&(_, _, values)) = rule {
            cmd = cmd.mut_arg(id, |arg| {
                arg.add(ArgValueCandidates::new(move || candidates(values)))
            });
        }
    }
    let subs: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    for name in subs {
        let sub_path = if path.is_empty() {
            name.clone()
        } else {
            format!("{path} {name}")
        };
        cmd = cmd.mut_subcommand(name, |sub| attach(sub, &sub_path));
    }
    cmd
}

fn candidates(values: Values) -> Vec<CompletionCandidate> {
    let Some(root) = root_of_command_line() else {
        return Vec::new();
    };
    let names = match values {
        Values::Agents => agent_aliases(&root),
        Values::Sessions => session_keys(&root),
        Values::ConfigKeys => config_keys(&root),
    };
    names.into_iter().map(CompletionCandidate::new).collect()
}

/// The install root of the line being completed: its `--config-dir DIR` (or
/// `--config-dir=DIR`), else the environment's.
fn root_of_command_line() -> Option<InstallRoot> {
    let words: Vec<OsString> = std::env::args_os().collect();
    let mut dir = None;
    for (i, word) in words.iter().enumerate() {
        let word = word.to_string_lossy();
        if word == "--config-dir" {
            dir = words.get(i + 1).map(PathBuf::from);
        } else if let Some(value) = word.strip_prefix("--config-dir=") {
            dir = Some(PathBuf::from(value));
        }
    }
    InstallRoot::from_env(dir.as_deref()).ok()
}

fn agent_aliases(root: &InstallRoot) -> Vec<String> {
    ConfigStore::load(root.clone())
        .map(|store| {
            store
                .snapshot()
                .config()
                .agents()
                .map(|(alias, _)| alias.to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn session_keys(root: &InstallRoot) -> Vec<String> {
    let Ok(store) = ConfigStore::load(root.clone()) else {
        return Vec::new();
    };
    let channels = store.snapshot().config().channels.clone();
    warren_store::sessions::open_chat_sessions_for_reading(root, &channels)
        .ok()
        .and_then(|(sessions, _, _)| sessions.backend().list().ok())
        .map(|list| list.into_iter().map(|s| s.key.to_string()).collect())
        .unwrap_or_default()
}

/// Every key path of the effective config (defaults included), as `config get` takes them.
fn config_keys(root: &InstallRoot) -> Vec<String> {
    let Ok(store) = ConfigStore::load(root.clone()) else {
        return Vec::new();
    };
    let Ok(value) = serde_json::to_value(store.snapshot().config()) else {
        return Vec::new();
    };
    let mut keys = Vec::new();
    flatten(&value, "", &mut keys);
    keys
}

fn flatten(value: &serde_json::Value, prefix: &str, keys: &mut Vec<String>) {
    let serde_json::Value::Object(map) = value else {
        return;
    };
    for (k, v) in map {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        keys.push(key.clone());
        flatten(v, &key, keys);
    }
}

#[cfg(test)]
mod tests {
    use super::{VALUES, command};

    /// Every rule names an argument that exists, so a renamed flag cannot silently lose its
    /// completion.
    /// The tree with completers attached passes clap's own checks (positionals keep their
    /// order: `config set KEY VALUE`).
    #[test]
    fn the_completing_tree_is_a_valid_command() {
        command().debug_assert();
    }

    #[test]
    fn every_completion_rule_names_a_real_argument() {
        let cmd = command();
        for (path, id, _) in VALUES {
            if *path == "*" {
                continue;
            }
            let mut sub = &cmd;
            for name in path.split(' ') {
                sub = sub
                    .find_subcommand(name)
                    .unwrap_or_else(|| panic!("no subcommand `{path}`"));
            }
            assert!(
                sub.get_arguments().any(|a| a.get_id() == *id),
                "`warren {path}` has no argument `{id}`"
            );
        }
    }
}
