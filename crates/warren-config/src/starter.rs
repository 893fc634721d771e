//! `warren init`: the install layout and a commented starter config with one agent, `main`,
//! wired to a provider: the offline `script` provider with the bundled demo script (files,
//! memory, a session) unless the caller found an OpenAI key, an Anthropic key or an Ollama
//! URL, in which case that provider (issue 7 deliverable 12).

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
risk_profile = "starter"       # below; or "default" (built in: supervised, every write asks)
# runtime_profile = "careful"  # a name from [runtime_profiles.*]

# [agents.main.workspace]
# unrestricted_filesystem = false
# [agents.main.workspace.access]
# research = "Read"            # sibling alias = "Read" | "Write" | "ReadWrite"

# [agents.main.memory]
# backend = "sqlite"           # sqlite | postgres | markdown | none | qdrant | lucid (default: [memory] backend)
# read_memory_from = ["research", { agent = "ops", categories = ["runbooks"] }]

# [providers.openai]
# kind = "openai"              # openai | anthropic | script
# base_url = "https://api.openai.com/v1"
# api_key_env = "OPENAI_API_KEY"   # or store it encrypted:
#                                  # warren config set providers.openai.api_key --secret

# The starter risk profile: file writes inside the agent's OWN workspace and its own memory
# run without asking; the shell, git writes and sibling workspaces still ask (a one-shot
# `warren agent -m` without a terminal fails those calls with "needs approval").
[risk_profiles.starter]
autonomy = "supervised"        # read_only | supervised | full
approve_own_writes = true
# always_ask = []              # tools that ask at every level ("*" = all)
# approval_timeout_secs = 120
# max_cost_per_day_usd = 5.0   # each call's worst case is reserved first: one that could cross it is refused
# max_tokens_per_day = 2000000 # unset: only models without a rate count, up to 2,000,000 tokens a day

# [runtime_profiles.careful]
# single_tool_rounds = false
# parallel_tools = false
# max_tool_iterations = 10

[gateway]
# bind = "127.0.0.1"
# port = 42617

# [gateway.openai]
# enabled = false              # OpenAI-compatible /v1/models and /v1/chat/completions

[cost]
# enabled = true               # false: nothing is written to data/state/costs.jsonl; limits still hold
# daily_limit_usd = 10.0       # no default: each agent has its risk profile's max_cost_per_day_usd
# monthly_limit_usd = 100.0    # no default
# warn_at_percent = 80
# Built-in prices (USD per million tokens; list prices as of 2025-11-24, shown by `warren costs`)
# cover common OpenAI and Anthropic models. Override one, or price another model:
# [cost.rates."gpt-4o-mini"]
# input_per_mtok = 0.15
# output_per_mtok = 0.60
# max_output_tokens = 16384    # the most one response can have: reserved before each call

[log]
# persistence = "rolling"      # rolling | full | none
"#;

/// The bundled demo conversation for the `script` provider.
pub const DEMO_SCRIPT: &str = include_str!("demo-script.json");

/// Which provider the starter config uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StarterProvider {
    /// The offline demo (`script` provider, bundled script).
    Demo,
    /// OpenAI, key from `OPENAI_API_KEY`.
    OpenAi,
    /// Anthropic, key from `ANTHROPIC_API_KEY`.
    Anthropic,
    /// A local Ollama server's OpenAI-compatible API.
    Ollama { base_url: String },
}

/// The starter config text for `provider`.
pub fn starter_config(provider: &StarterProvider) -> String {
    let (agent, block) = match provider {
        StarterProvider::Demo => (
            "provider = \"demo\"              # a name from [providers.*]\nmodel = \"demo\"",
            "[providers.demo]\nkind = \"script\"                # offline: replays the bundled demo conversation\nscript = \"demo/demo-script.json\"  # relative to the install root\n".to_string(),
        ),
        StarterProvider::OpenAi => (
            "provider = \"openai\"            # a name from [providers.*]\nmodel = \"gpt-4o-mini\"",
            "[providers.openai]\nkind = \"openai\"\napi_key_env = \"OPENAI_API_KEY\"\n".to_string(),
        ),
        StarterProvider::Anthropic => (
            "provider = \"anthropic\"         # a name from [providers.*]\nmodel = \"claude-sonnet-4-5\"",
            "[providers.anthropic]\nkind = \"anthropic\"\napi_key_env = \"ANTHROPIC_API_KEY\"\n".to_string(),
        ),
        StarterProvider::Ollama { base_url } => (
            "provider = \"ollama\"            # a name from [providers.*]\nmodel = \"llama3.2\"",
            format!("[providers.ollama]\nkind = \"openai\"\nbase_url = \"{}/v1\"\nparallel_call_control = false\n", base_url.trim_end_matches('/').trim_end_matches("/v1")),
        ),
    };
    let text = STARTER_CONFIG
        .replace(
            "# provider = \"openai\"          # a name from [providers.*]\n# model = \"gpt-4o-mini\"",
            agent,
        )
        .replace("# [providers.openai]\n", &format!("{block}\n# [providers.openai]\n"));
    if *provider == StarterProvider::Demo {
        // The offline demo costs nothing; priced like gpt-4o-mini so that `warren costs` and
        // the limits show what the same conversation would cost.
        text.replace(
            "\n[log]\n",
            "[cost.rates.demo]              # the offline demo, priced like gpt-4o-mini\ninput_per_mtok = 0.15\noutput_per_mtok = 0.60\n\n[log]\n",
        )
    } else {
        text
    }
}

/// What `init` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitOutcome {
    Created,
    AlreadyExists,
}

/// Creates the layout and, if absent, the starter config (0600). Never replaces a config.
pub fn init(root: &InstallRoot) -> Result<InitOutcome, ConfigError> {
    init_with(root, &StarterProvider::Demo)
}

/// [`init`] with the starter wired to `provider`; the demo script is written (if absent) with
/// the demo starter.
pub fn init_with(
    root: &InstallRoot,
    provider: &StarterProvider,
) -> Result<InitOutcome, ConfigError> {
    root.ensure_layout()?;
    let path = root.config_file();
    match std::fs::symlink_metadata(&path) {
        Ok(_) => return Ok(InitOutcome::AlreadyExists),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(cause) => return Err(ConfigError::Read { path, cause }),
    }
    if *provider == StarterProvider::Demo {
        let script = root.demo_script();
        if !script.exists() {
            if let Some(dir) = script.parent() {
                std::fs::create_dir_all(dir).map_err(|cause| ConfigError::Write {
                    path: dir.to_path_buf(),
                    cause,
                })?;
            }
            // A bundled, re-creatable file: a plain write (the config's crash points stay the
            // config's own).
            std::fs::write(&script, DEMO_SCRIPT).map_err(|cause| ConfigError::Write {
                path: script.clone(),
                cause,
            })?;
        }
    }
    let text = starter_config(provider);
    atomic::write_durable(&path, text.as_bytes(), 0o600, CrashPoints::CONFIG)?;
    Ok(InitOutcome::Created)
}

#[cfg(test)]
mod starter_tests {
    use super::*;
    use crate::schema::{Config, ProviderKind};

    /// Every starter parses against the schema and wires `main` to its provider.
    #[test]
    fn every_starter_is_a_valid_config_wired_to_its_provider() {
        for (p, name, kind) in [
            (StarterProvider::Demo, "demo", ProviderKind::Script),
            (StarterProvider::OpenAi, "openai", ProviderKind::Openai),
            (
                StarterProvider::Anthropic,
                "anthropic",
                ProviderKind::Anthropic,
            ),
            (
                StarterProvider::Ollama {
                    base_url: "http://127.0.0.1:11434".into(),
                },
                "ollama",
                ProviderKind::Openai,
            ),
        ] {
            let text = starter_config(&p);
            let config: Config = toml::from_str(&text).unwrap_or_else(|e| panic!("{p:?}: {e}"));
            assert_eq!(config.agents["main"].provider.as_deref(), Some(name));
            assert_eq!(config.providers[name].kind, kind);
            // Issue 16 §1: own-workspace writes and own memory run unasked; the rest asks.
            assert_eq!(config.agents["main"].risk_profile, "starter");
            let starter = config.risk_profile_of(&config.agents["main"]);
            assert!(starter.approve_own_writes, "{p:?}");
            assert_eq!(starter.autonomy, crate::schema::Autonomy::Supervised);
            // Issue 16 §4: the cost limits have a price to work with (a local Ollama model is
            // unpriced: its tokens count against the daily token allowance instead).
            let model = config.agents["main"].model.clone().unwrap_or_default();
            let rate = config.cost.rate_for(&model);
            if matches!(p, StarterProvider::Ollama { .. }) {
                assert_eq!(rate, None, "{model}");
            } else {
                assert!(
                    rate.is_some_and(|r| r.input_per_mtok > 0.0 && r.output_per_mtok > 0.0),
                    "{p:?}: {model} has no nonzero rate"
                );
            }
            assert!(config.cost.enabled && starter.max_cost_per_day_usd > 0.0);
            assert!(crate::schema::rates::validate(&config).is_empty(), "{p:?}");
        }
        // The built-in price table's date is the one the starter's comment shows.
        assert!(
            STARTER_CONFIG.contains(&format!("as of {}", crate::schema::rates::RATES_AS_OF)),
            "the starter names the rates' date"
        );
        let demo: serde_json::Value = serde_json::from_str(DEMO_SCRIPT).unwrap_or_default();
        assert!(demo["turns"].is_array(), "the bundled script is JSON");
    }
}
