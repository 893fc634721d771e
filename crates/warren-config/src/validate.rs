//! Rules serde cannot express (alias syntax is checked when the config is read, as every
//! alias key and value is an [`AgentAlias`]): references between sections, and the memory-grant
//! rules of MEM-4/MEM-7 (CFG-2, CFG-7; the grant rules themselves are [`crate::grants`], shared
//! with the memory factory). Returns every problem, not just the first.

use std::net::IpAddr;

use warren_core::AgentAlias;

use crate::error::{Problem, did_you_mean};
use crate::keypath::quote;
use crate::schema::{
    Config, DEFAULT_PROFILE, EmbedderKind, MemoryBackendKind, ProviderKind, RuntimeKind,
};

pub(crate) fn validate(config: &Config) -> Vec<Problem> {
    let mut out = Vec::new();
    let agent_names: Vec<&str> = config.agents.keys().map(AgentAlias::as_str).collect();
    let unknown = |kind: &str, name: &str, known: &[&str], define: String| {
        did_you_mean(name, known.iter().copied())
            .or(Some(define))
            .map(|h| (format!("unknown {kind} '{name}'"), h))
    };

    if config.agents.is_empty() {
        out.push(
            Problem::at(
                "agents",
                "no agent is configured; a config needs at least one [agents.<alias>] table",
            )
            .with_hint(Some(
                "add `[agents.main]` (or restore config.toml.bak); delete an agent only while \
                 another one stays"
                    .into(),
            )),
        );
    }
    for (name, agent) in &config.agents {
        let at = |rest: &str| format!("agents.{}{rest}", quote(name));
        if let Some(provider) = &agent.provider
            && !config.providers.contains_key(provider)
        {
            let known: Vec<&str> = config.providers.keys().map(String::as_str).collect();
            if let Some((msg, hint)) = unknown(
                "provider",
                provider,
                &known,
                format!("define [providers.{}]", quote(provider)),
            ) {
                out.push(Problem::at(at(".provider"), msg).with_hint(Some(hint)));
            }
        }
        if agent.risk_profile != DEFAULT_PROFILE
            && !config.risk_profiles.contains_key(&agent.risk_profile)
        {
            let known: Vec<&str> = config.risk_profiles.keys().map(String::as_str).collect();
            if let Some((msg, hint)) = unknown(
                "risk profile",
                &agent.risk_profile,
                &known,
                format!(
                    "define [risk_profiles.{}] or use \"default\"",
                    quote(&agent.risk_profile)
                ),
            ) {
                out.push(Problem::at(at(".risk_profile"), msg).with_hint(Some(hint)));
            }
        }
        if let Some(profile) = &agent.runtime_profile
            && profile != DEFAULT_PROFILE
            && !config.runtime_profiles.contains_key(profile)
        {
            let known: Vec<&str> = config.runtime_profiles.keys().map(String::as_str).collect();
            if let Some((msg, hint)) = unknown(
                "runtime profile",
                profile,
                &known,
                format!("define [runtime_profiles.{}]", quote(profile)),
            ) {
                out.push(Problem::at(at(".runtime_profile"), msg).with_hint(Some(hint)));
            }
        }
        for sibling in agent.workspace.access.keys() {
            let key = at(&format!(".workspace.access.{}", quote(sibling)));
            if sibling == name {
                out.push(Problem::at(
                    key,
                    "an agent cannot grant itself access to its own workspace (it always has it)",
                ));
            } else if !config.agents.contains_key(sibling) {
                let hint = did_you_mean(sibling, agent_names.iter().copied());
                out.push(
                    Problem::at(
                        key,
                        format!("grant names agent '{sibling}', which does not exist"),
                    )
                    .with_hint(hint),
                );
            }
        }
        for (i, raw) in agent.network.allow.iter().enumerate() {
            out.extend(host_entry_problem(at(&format!(".network.allow[{i}]")), raw));
        }
        out.extend(crate::schema::mcp::problems(config, agent, &at));
        let (_, refused) = crate::grants::memory_grants(config, name);
        for p in refused {
            out.push(
                Problem::at(
                    at(&format!(".memory.read_memory_from[{}]", p.index)),
                    p.rule(name),
                )
                .with_hint(p.hint()),
            );
        }
    }

    for (name, profile) in &config.runtime_profiles {
        if profile.max_tool_iterations == 0 {
            out.push(Problem::at(
                format!("runtime_profiles.{}.max_tool_iterations", quote(name)),
                "must be at least 1",
            ));
        }
    }

    let provider_names: Vec<&str> = config.providers.keys().map(String::as_str).collect();
    for (name, provider) in &config.providers {
        let at = |rest: &str| format!("providers.{}{rest}", quote(name));
        if provider.api_key.is_some() && provider.api_key_env.is_some() {
            out.push(Problem::at(
                at(".api_key_env"),
                "set either api_key or api_key_env, not both",
            ));
        }
        if provider.kind != ProviderKind::Openai && !provider.stream.is_auto() {
            out.push(Problem::at(
                at(".stream"),
                "stream = true/false applies to kind = \"openai\" (OpenAI-compatible servers); \
                 remove it for this provider",
            ));
        }
        if provider.kind == ProviderKind::Script && provider.script.is_none() {
            out.push(Problem::at(
                at(".script"),
                "a provider of kind \"script\" needs script = \"<path to the script file>\"",
            ));
        }
        for (i, fallback) in provider.fallbacks.iter().enumerate() {
            if fallback == name {
                out.push(Problem::at(
                    at(&format!(".fallbacks[{i}]")),
                    "a provider cannot be its own fallback",
                ));
            } else if !config.providers.contains_key(fallback) {
                let hint = did_you_mean(fallback, provider_names.iter().copied());
                out.push(
                    Problem::at(
                        at(&format!(".fallbacks[{i}]")),
                        format!("unknown provider '{fallback}'"),
                    )
                    .with_hint(hint),
                );
            }
        }
    }

    for (name, secret) in &config.secrets {
        for (i, raw) in secret.hosts.iter().enumerate() {
            // `http://host` opts the secret into plain HTTP (issue 35 §3).
            let (host, _) = crate::schema::secret_host_scheme(raw);
            out.extend(host_entry_problem(
                format!("secrets.{}.hosts[{i}]", quote(name)),
                host,
            ));
        }
    }

    // Accepted-but-inert settings are refused until they work (issue 16 §6).
    if config.runtime.kind == RuntimeKind::Docker {
        out.push(
            Problem::at(
                "runtime.kind",
                "\"docker\" is not available yet: Warren has no runtime container; tools run \
                 on the host under the kernel sandbox",
            )
            .with_hint(Some(
                "remove runtime.kind or set it to \"native\" (sandboxing is per risk profile: \
                 sandbox = \"auto\")"
                    .into(),
            )),
        );
    }
    if let Some(default) = &config.runtime.default_agent
        && !config.agents.contains_key(default)
    {
        let hint = did_you_mean(default, agent_names.iter().copied());
        out.push(
            Problem::at(
                "runtime.default_agent",
                format!("agent '{default}' does not exist"),
            )
            .with_hint(hint),
        );
    }
    if config.gateway.bind.parse::<IpAddr>().is_err() {
        out.push(
            Problem::at(
                "gateway.bind",
                format!("'{}' is not an IP address", config.gateway.bind),
            )
            .with_hint(Some("use 127.0.0.1 for local access only".into())),
        );
    }
    if config.gateway.port == 0 {
        out.push(Problem::at(
            "gateway.port",
            "port 0 is not allowed; pick a fixed port",
        ));
    }
    for (key, value, max) in [
        (
            "gateway.header_read_timeout_secs",
            config.gateway.header_read_timeout_secs,
            3600,
        ),
        (
            "gateway.idle_timeout_secs",
            config.gateway.idle_timeout_secs,
            86_400,
        ),
        (
            "gateway.max_connections",
            u64::from(config.gateway.max_connections),
            65_536,
        ),
    ] {
        if !(1..=max).contains(&value) {
            out.push(Problem::at(key, format!("must be between 1 and {max}")));
        }
    }
    if config.channels.session_queue_depth > 1000 {
        out.push(Problem::at(
            "channels.session_queue_depth",
            "must be between 0 (a busy session refuses at once) and 1000",
        ));
    }
    if !(1..=86_400).contains(&config.channels.session_queue_timeout_secs) {
        out.push(Problem::at(
            "channels.session_queue_timeout_secs",
            "must be between 1 and 86400 (a day)",
        ));
    }
    if config.cost.warn_at_percent > 100 {
        out.push(Problem::at(
            "cost.warn_at_percent",
            "must be between 0 and 100",
        ));
    }
    for (key, limit) in [
        ("cost.daily_limit_usd", config.cost.daily_limit_usd),
        ("cost.monthly_limit_usd", config.cost.monthly_limit_usd),
    ] {
        if limit.is_some_and(|l| !l.is_finite() || l < 0.0) {
            out.push(Problem::at(key, "must be a non-negative number"));
        }
    }
    if !["error", "warn", "info", "debug", "trace"].contains(&config.log.level.as_str()) {
        out.push(Problem::at(
            "log.level",
            format!(
                "unknown level '{}'; use error, warn, info, debug or trace",
                config.log.level
            ),
        ));
    }
    if config.memory.embedder.kind == EmbedderKind::Openai && config.memory.embedder.model.is_none()
    {
        out.push(Problem::at(
            "memory.embedder.model",
            "the openai embedder needs a model name",
        ));
    }
    let uses_postgres = config
        .agents
        .values()
        .any(|a| config.memory_backend_of(a) == MemoryBackendKind::Postgres);
    if uses_postgres && config.memory.postgres.url.is_none() {
        out.push(
            Problem::at(
                "memory.postgres.url",
                "an agent uses the postgres memory backend but no URL is set",
            )
            .with_hint(Some(
                "warren config set memory.postgres.url --secret".into(),
            )),
        );
    }
    out.extend(crate::schema::memory_backends::validate(config));
    out.extend(crate::schema::cron::validate(
        &config.cron.jobs,
        &agent_names,
    ));
    out.extend(crate::schema::cron::validate_heartbeats(config));
    out.extend(crate::schema::channels::validate(
        config.channels.telegram.iter(),
        &agent_names,
    ));
    {
        let channels: Vec<&str> = config
            .channels
            .telegram
            .keys()
            .map(String::as_str)
            .collect();
        out.extend(crate::schema::approvals::validate(
            &config.approvals,
            &channels,
        ));
    }
    out.extend(crate::schema::telemetry::validate(config));
    out.extend(crate::schema::rates::validate(config));
    out
}

/// An allowlist or secret `hosts` entry that is not a host pattern (issue 24): named by its
/// key, with why, before any agent is built.
fn host_entry_problem(key: String, raw: &str) -> Option<Problem> {
    crate::schema::parse_host_entry(raw).err().map(|why| {
        Problem::at(key, format!("'{raw}' is not a host pattern: {why}"))
            .with_hint(Some(crate::schema::HOST_ENTRY_FORMS.into()))
    })
}
