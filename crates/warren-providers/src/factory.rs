//! Builds an agent's provider route from config: `[providers.<name>]` and its `fallbacks`,
//! API keys from the encrypted `api_key` or the variable named by `api_key_env`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use warren_config::schema::{ProviderConfig, ProviderKind};
use warren_config::{Config, InstallRoot};

use crate::{AnthropicProvider, OpenAiProvider, Provider, ProviderError, Route, ScriptProvider};

const OPENAI_URL: &str = "https://api.openai.com/v1";
const ANTHROPIC_URL: &str = "https://api.anthropic.com";

/// The provider names of the route starting at `primary`: itself, then its fallbacks (and
/// theirs), each once.
pub fn route_names(config: &Config, primary: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    let mut queue = vec![primary.to_string()];
    while let Some(name) = queue.first().cloned() {
        queue.remove(0);
        if !seen.insert(name.clone()) {
            continue;
        }
        if let Some(p) = config.providers.get(&name) {
            queue.extend(p.fallbacks.iter().cloned());
        }
        out.push(name);
    }
    out
}

/// The route of provider `primary` and its fallbacks.
pub fn build_route(
    config: &Config,
    root: &InstallRoot,
    primary: &str,
) -> Result<Route, ProviderError> {
    let mut route = Route::new();
    for name in route_names(config, primary) {
        let pc = config
            .providers
            .get(&name)
            .ok_or_else(|| ProviderError::Unknown {
                provider: name.clone(),
            })?;
        let provider = build_one(&name, pc, root)?;
        route = route.with(
            provider,
            pc.max_retries,
            Duration::from_millis(pc.retry_backoff_ms),
        );
    }
    Ok(route)
}

fn build_one(
    name: &str,
    pc: &ProviderConfig,
    root: &InstallRoot,
) -> Result<Arc<dyn Provider>, ProviderError> {
    let timeout = Duration::from_secs(pc.timeout_secs.max(1));
    match pc.kind {
        ProviderKind::Script => {
            let path = pc.script.as_ref().ok_or_else(|| ProviderError::Config {
                provider: name.to_string(),
                message: format!("kind = \"script\" needs providers.{name}.script = \"<file>\""),
            })?;
            let path = if path.is_relative() {
                root.root().join(path)
            } else {
                path.clone()
            };
            Ok(Arc::new(ScriptProvider::load(name, &path)?))
        }
        ProviderKind::Openai => {
            let base = pc
                .base_url
                .clone()
                .unwrap_or_else(|| OPENAI_URL.to_string());
            let key = api_key(name, pc)?;
            if key.is_none() && base.starts_with(OPENAI_URL) {
                return Err(ProviderError::MissingKey {
                    provider: name.to_string(),
                    detail: String::new(),
                });
            }
            let provider = OpenAiProvider::new(name, base, key, timeout)
                .with_single_tool_control(pc.parallel_call_control.unwrap_or(true))
                .with_stream(pc.stream)
                .with_max_output_tokens(pc.max_output_tokens);
            Ok(Arc::new(provider))
        }
        ProviderKind::Anthropic => {
            let base = pc
                .base_url
                .clone()
                .unwrap_or_else(|| ANTHROPIC_URL.to_string());
            let key = api_key(name, pc)?;
            if key.is_none() && base.starts_with(ANTHROPIC_URL) {
                return Err(ProviderError::MissingKey {
                    provider: name.to_string(),
                    detail: String::new(),
                });
            }
            Ok(Arc::new(
                AnthropicProvider::new(name, base, key, timeout)
                    .with_max_output_tokens(pc.max_output_tokens),
            ))
        }
    }
}

/// The key from the encrypted secret, else from `api_key_env`; `None` when neither is set.
fn api_key(name: &str, pc: &ProviderConfig) -> Result<Option<String>, ProviderError> {
    if let Some(secret) = &pc.api_key {
        return Ok(Some(secret.expose().to_string()));
    }
    match &pc.api_key_env {
        Some(var) => match std::env::var(var) {
            Ok(v) if !v.is_empty() => Ok(Some(v)),
            _ => Err(ProviderError::MissingKey {
                provider: name.to_string(),
                detail: format!("; the variable {var} named by api_key_env is not set"),
            }),
        },
        None => Ok(None),
    }
}
