//! `warren config path|get|set|validate|encrypt-secrets`.

use std::io::{BufRead, IsTerminal};
use std::process::ExitCode;

use anyhow::{Context, bail};
use warren_config::{ConfigError, ConfigStore, InstallRoot, KeyPath, Segment};

use crate::cli::ConfigCommand;

pub fn run(root: &InstallRoot, cmd: ConfigCommand, json: bool) -> anyhow::Result<ExitCode> {
    match cmd {
        ConfigCommand::Path => {
            if json {
                super::print_json(&serde_json::json!({ "path": root.config_file() }))?;
            } else {
                println!("{}", root.config_file().display());
            }
            Ok(ExitCode::SUCCESS)
        }
        ConfigCommand::Get { key } => get(root, &key, json),
        ConfigCommand::Set { key, value, secret } => set(root, &key, value, secret),
        ConfigCommand::Validate => validate(root, json),
        ConfigCommand::EncryptSecrets => encrypt_secrets(root, json),
    }
}

/// One line per secret field written in plaintext (its key path, never its value), for
/// `warren config validate` and `warren doctor` (issue 35 §9).
pub(super) fn plaintext_warnings(store: &ConfigStore) -> Vec<String> {
    store
        .snapshot()
        .plaintext_secrets()
        .iter()
        .map(|path| {
            format!(
                "{path} holds a plaintext secret in config.toml; run `warren config encrypt-secrets` to store it encrypted"
            )
        })
        .collect()
}

/// `warren config encrypt-secrets`: every plaintext secret field encrypted in place, in one
/// save (issue 35 §9). Prints the key paths, never a value.
fn encrypt_secrets(root: &InstallRoot, json: bool) -> anyhow::Result<ExitCode> {
    let store = super::load_checked(root)?;
    let mut txn = store.write_latest_blocking()?;
    let paths: Vec<String> = txn
        .encrypt_plaintext_secrets()?
        .iter()
        .map(ToString::to_string)
        .collect();
    let outcome = txn.commit()?;
    for warning in &outcome.warnings {
        eprintln!("warning: {warning}");
    }
    if !paths.is_empty()
        && let Some(note) = reload_running_daemon(root)
    {
        eprintln!("{note}");
    }
    if json {
        super::print_json(
            &serde_json::json!({ "encrypted": paths, "generation": outcome.generation }),
        )?;
    } else if paths.is_empty() {
        println!("no plaintext secrets in {}", root.config_file().display());
    } else {
        for path in &paths {
            println!("encrypted {path}");
        }
        println!(
            "{} secret{} encrypted in place (config generation {}); config.toml.bak keeps none in plaintext",
            paths.len(),
            if paths.len() == 1 { "" } else { "s" },
            outcome.generation
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn get(root: &InstallRoot, key: &str, json: bool) -> anyhow::Result<ExitCode> {
    let path: KeyPath = key.parse()?;
    let store = ConfigStore::load(root.clone())?;
    // Serialised through serde: secrets come out as "[redacted]", unset options as null.
    let mut value =
        serde_json::to_value(store.snapshot().config()).context("serialising config")?;
    let mut walked = KeyPath::default();
    for seg in path.segments() {
        let next = match (seg, &mut value) {
            (Segment::Key(k), serde_json::Value::Object(map)) => match map.remove(k) {
                Some(v) => v,
                None => {
                    let known: Vec<&str> = map.keys().map(String::as_str).collect();
                    let hint = warren_config::did_you_mean(k, known.iter().copied())
                        .map(|h| format!(" ({h})"))
                        .unwrap_or_default();
                    let under = if walked.is_empty() {
                        String::new()
                    } else {
                        format!(" under `{walked}`")
                    };
                    bail!("unknown key `{k}`{under}{hint}");
                }
            },
            (Segment::Index(i), serde_json::Value::Array(items)) if *i < items.len() => {
                items.swap_remove(*i)
            }
            _ => bail!("`{walked}` has no `{}`", KeyPath(vec![seg.clone()])),
        };
        walked.0.push(seg.clone());
        value = next;
    }
    if json {
        super::print_json(&value)?;
    } else {
        match value {
            serde_json::Value::Null => println!("(not set)"),
            serde_json::Value::String(s) => println!("{s}"),
            serde_json::Value::Object(_) | serde_json::Value::Array(_) => {
                let text = toml::to_string_pretty(&value).or_else(|_| {
                    serde_json::to_string_pretty(&value).map_err(anyhow::Error::from)
                })?;
                print!("{text}");
            }
            other => println!("{other}"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn set(
    root: &InstallRoot,
    key: &str,
    value: Option<String>,
    secret: bool,
) -> anyhow::Result<ExitCode> {
    let path: KeyPath = key.parse()?;
    let value = match (value, secret) {
        (Some(v), _) => v,
        (None, true) => read_secret_from_stdin(key)?,
        (None, false) => bail!("missing VALUE: warren config set {key} VALUE"),
    };
    // A secret field is stored encrypted and never echoed, `--secret` or not (CFG-6).
    let secret_field = warren_config::is_secret_key(&path);
    if secret_field && !secret {
        eprintln!(
            "warning: {path} is a secret; a value on the command line can stay in your shell \
             history (`warren config set {path} --secret` reads it from stdin)"
        );
    }
    let store = super::load_checked(root)?;
    // Onto the file as it is under the lock: a writer that got there first is kept, not a
    // reason to refuse (issue 15 §1, §3).
    let mut txn = store.write_latest_blocking()?;
    if secret || secret_field {
        txn.set_secret(&path, &value)?;
    } else {
        txn.set_from_str(&path, &value)?;
    }
    let outcome = txn.commit()?;
    for warning in &outcome.warnings {
        eprintln!("warning: {warning}");
    }
    let generation = outcome.generation;
    if let Some(note) = reload_running_daemon(root) {
        eprintln!("{note}");
    }
    if secret || secret_field {
        println!("set {path} (secret, stored encrypted; config generation {generation})");
        return Ok(ExitCode::SUCCESS);
    }
    // A table above a secret field (`providers.x = {{ api_key = ... }}`) echoes with the new
    // config's secrets redacted; those secrets were encrypted by the commit.
    let shown = if warren_config::may_hold_secret(&path) {
        let redactor = warren_config::Redactor::from_config(store.snapshot().config());
        redactor.redact(&value).into_owned()
    } else {
        value
    };
    println!("set {path} = {shown} (config generation {generation})");
    Ok(ExitCode::SUCCESS)
}

/// A daemon running on `root` loads the file just written at once (issue 15 §3): asked
/// through the control seam (`reload`), it reloads (and rebuilds its subsystems) in place.
/// What happened, for stderr; `None` when no daemon runs.
pub(super) fn reload_running_daemon(root: &InstallRoot) -> Option<String> {
    use warren_gateway::client::{DaemonControl, DaemonControlError};
    use warren_gateway::control::{AdminOp, Control, SystemOp};
    if !matches!(
        warren_runtime::probe(root),
        Ok(warren_runtime::DaemonStatus::Running { .. })
    ) {
        return None;
    }
    Some(
        match DaemonControl::new(root).run(&AdminOp::System(SystemOp::Reload {})) {
            Ok(body) => format!(
                "the running daemon reloaded (generation {})",
                body["generation"]
            ),
            Err(DaemonControlError::Refused { body, .. }) => format!(
                "the running daemon did not reload: {}",
                body["message"].as_str().unwrap_or("no reason given")
            ),
            Err(e) => format!(
                "could not ask the running daemon to reload ({e}); it loads the change on its \
                 next config write or reload (SIGHUP)"
            ),
        },
    )
}

fn read_secret_from_stdin(key: &str) -> anyhow::Result<String> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprint!("value for {key} (input is read from stdin): ");
    }
    let mut line = String::new();
    stdin
        .lock()
        .read_line(&mut line)
        .context("reading the secret from stdin")?;
    let value = line.trim_end_matches(['\r', '\n']).to_string();
    if value.is_empty() {
        bail!("no value on stdin for {key}");
    }
    Ok(value)
}

fn validate(root: &InstallRoot, json: bool) -> anyhow::Result<ExitCode> {
    let checked = super::load_checked(root).and_then(|s| s.check_current().map(|()| s));
    match checked {
        Ok(store) => {
            let n = store.snapshot().agents.len();
            let plaintext = plaintext_warnings(&store);
            if json {
                let paths: Vec<String> = store
                    .snapshot()
                    .plaintext_secrets()
                    .iter()
                    .map(ToString::to_string)
                    .collect();
                super::print_json(
                    &serde_json::json!({ "valid": true, "path": root.config_file(), "agents": n, "problems": [], "plaintext_secrets": paths }),
                )?;
            } else {
                for warning in &plaintext {
                    eprintln!("warning: {warning}");
                }
                println!(
                    "{} is valid ({n} agent{})",
                    root.config_file().display(),
                    if n == 1 { "" } else { "s" }
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(ConfigError::Invalid { file, problems }) if json => {
            let problems: Vec<_> = problems
                .iter()
                .map(|p| {
                    serde_json::json!({
                        "key": p.key, "line": p.position.map(|x| x.0), "column": p.position.map(|x| x.1),
                        "message": warren_config::cut_long_values(&p.message),
                        "hint": p.hint.as_deref().map(warren_config::cut_long_values),
                    })
                })
                .collect();
            super::print_json(
                &serde_json::json!({ "valid": false, "path": file, "problems": problems }),
            )?;
            Ok(ExitCode::FAILURE)
        }
        Err(e) => Err(e.into()),
    }
}
