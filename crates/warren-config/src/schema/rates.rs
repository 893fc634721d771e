//! Built-in model prices (STATE-14, issue 16 §4): list prices of common OpenAI and Anthropic
//! models, in US dollars per million tokens, as published on [`RATES_AS_OF`]. `[cost.rates]`
//! overrides or adds a model; a model found in neither is "unpriced" and its tokens count
//! against the risk profile's `max_tokens_per_day` (or [`UNPRICED_TOKENS_PER_DAY`] when unset).
//!
//! A model name is matched as written, then without a provider prefix (`openai/gpt-4o`), a
//! `-latest` suffix or a release date (`gpt-4o-2024-08-06`, `claude-sonnet-4-20250514`).

use std::collections::BTreeMap;

use super::{Config, ModelRate};
use crate::error::Problem;

/// The date the built-in prices were taken from the providers' price lists. Shown by
/// `warren costs`; prices change, so check them and override in `[cost.rates]`.
pub const RATES_AS_OF: &str = "2025-11-24";

/// The daily token allowance of an agent's requests to models without a rate, when its risk
/// profile sets no `max_tokens_per_day`.
pub const UNPRICED_TOKENS_PER_DAY: u64 = 2_000_000;

/// The output tokens reserved for one response of a model whose maximum output is unknown
/// (no `max_output_tokens` in its rate): what the Anthropic provider asks for by default.
pub const UNKNOWN_MAX_OUTPUT_TOKENS: u32 = 4096;

/// (model, input $/Mtok, output $/Mtok, most output tokens one response can have).
const BUILT_IN: &[(&str, f64, f64, u32)] = &[
    // OpenAI
    ("gpt-4o", 2.50, 10.00, 16_384),
    ("gpt-4o-mini", 0.15, 0.60, 16_384),
    ("gpt-4.1", 2.00, 8.00, 32_768),
    ("gpt-4.1-mini", 0.40, 1.60, 32_768),
    ("gpt-4.1-nano", 0.10, 0.40, 32_768),
    ("gpt-5", 1.25, 10.00, 128_000),
    ("gpt-5-mini", 0.25, 2.00, 128_000),
    ("gpt-5-nano", 0.05, 0.40, 128_000),
    ("gpt-5.1", 1.25, 10.00, 128_000),
    ("o1", 15.00, 60.00, 100_000),
    ("o1-mini", 1.10, 4.40, 65_536),
    ("o3", 2.00, 8.00, 100_000),
    ("o3-mini", 1.10, 4.40, 100_000),
    ("o3-pro", 20.00, 80.00, 100_000),
    ("o4-mini", 1.10, 4.40, 100_000),
    // Anthropic
    ("claude-opus-4-5", 5.00, 25.00, 64_000),
    ("claude-opus-4-1", 15.00, 75.00, 32_000),
    ("claude-opus-4-0", 15.00, 75.00, 32_000),
    ("claude-opus-4", 15.00, 75.00, 32_000),
    ("claude-sonnet-4-5", 3.00, 15.00, 64_000),
    ("claude-sonnet-4-0", 3.00, 15.00, 64_000),
    ("claude-sonnet-4", 3.00, 15.00, 64_000),
    ("claude-3-7-sonnet", 3.00, 15.00, 64_000),
    ("claude-3-5-sonnet", 3.00, 15.00, 8_192),
    ("claude-haiku-4-5", 1.00, 5.00, 64_000),
    ("claude-3-5-haiku", 0.80, 4.00, 8_192),
    ("claude-3-haiku", 0.25, 1.25, 4_096),
    ("claude-3-opus", 15.00, 75.00, 4_096),
];

fn rate(input: f64, output: f64, max: u32) -> ModelRate {
    ModelRate {
        input_per_mtok: input,
        output_per_mtok: output,
        max_output_tokens: Some(max),
    }
}

/// The rate of `model`: `overrides` (`[cost.rates]`) first, then the built-in table; each by
/// the name as written, then by its [`base_name`].
pub fn lookup(overrides: &BTreeMap<String, ModelRate>, model: &str) -> Option<ModelRate> {
    let built_in = |m: &str| {
        BUILT_IN
            .iter()
            .find(|(name, ..)| *name == m)
            .map(|&(_, i, o, max)| rate(i, o, max))
    };
    if let Some(r) = overrides.get(model) {
        return Some(r.clone());
    }
    if let Some(r) = built_in(model) {
        return Some(r);
    }
    let base = base_name(model);
    overrides.get(base).cloned().or_else(|| built_in(base))
}

/// `model` without a provider prefix (`openai/`), a `-latest` suffix or a release date
/// (`-2024-08-06`, `-20250514`).
pub fn base_name(model: &str) -> &str {
    let name = model.rsplit('/').next().unwrap_or(model);
    if let Some(s) = name.strip_suffix("-latest") {
        return s;
    }
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    // -YYYYMMDD
    if let Some((head, tail)) = name.rsplit_once('-')
        && tail.len() == 8
        && digits(tail)
    {
        return head;
    }
    // -YYYY-MM-DD
    if name.len() > 11 {
        let (head, tail) = name.split_at(name.len() - 11);
        let b = tail.as_bytes();
        if b[0] == b'-'
            && b[5] == b'-'
            && b[8] == b'-'
            && digits(&tail[1..5])
            && digits(&tail[6..8])
            && digits(&tail[9..])
        {
            return head;
        }
    }
    name
}

/// Problems of `[cost.rates]` and the risk profiles' `max_tokens_per_day`.
pub fn validate(config: &Config) -> Vec<Problem> {
    let mut out = Vec::new();
    for (model, r) in &config.cost.rates {
        for (key, v) in [
            ("input_per_mtok", r.input_per_mtok),
            ("output_per_mtok", r.output_per_mtok),
        ] {
            if !v.is_finite() || v < 0.0 {
                out.push(Problem::at(
                    format!("cost.rates.\"{model}\".{key}"),
                    "must be a non-negative number (US dollars per million tokens)",
                ));
            }
        }
        if r.max_output_tokens == Some(0) {
            out.push(Problem::at(
                format!("cost.rates.\"{model}\".max_output_tokens"),
                "must be at least 1 (the most tokens one response can have)",
            ));
        }
    }
    for (name, p) in &config.risk_profiles {
        if p.max_tokens_per_day == Some(0) {
            out.push(Problem::at(
                format!("risk_profiles.{name}.max_tokens_per_day"),
                "must be at least 1 (remove the key for the default allowance of models without a rate)",
            ));
        }
        if !p.max_cost_per_day_usd.is_finite() || p.max_cost_per_day_usd < 0.0 {
            out.push(Problem::at(
                format!("risk_profiles.{name}.max_cost_per_day_usd"),
                "must be a non-negative number",
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dated_and_prefixed_names_find_their_base_rate() {
        let none = BTreeMap::new();
        for (model, base) in [
            ("gpt-4o-2024-08-06", "gpt-4o"),
            ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
            ("claude-sonnet-4-20250514", "claude-sonnet-4"),
            ("claude-opus-4-1-20250805", "claude-opus-4-1"),
            ("claude-3-5-haiku-latest", "claude-3-5-haiku"),
            ("openai/gpt-4.1-mini", "gpt-4.1-mini"),
            ("o3", "o3"),
        ] {
            assert_eq!(base_name(model), base, "{model}");
            assert_eq!(lookup(&none, model), lookup(&none, base), "{model}");
            assert!(
                lookup(&none, model).is_some_and(|r| r.output_per_mtok > 0.0),
                "{model}"
            );
        }
        assert_eq!(lookup(&none, "llama3.2"), None);
        assert_eq!(
            lookup(&none, "gpt-4o-audio-preview"),
            None,
            "no prefix guessing"
        );
    }

    #[test]
    fn configured_rates_override_the_built_in_ones() {
        let mut over = BTreeMap::new();
        over.insert(
            "gpt-4o".to_string(),
            ModelRate {
                input_per_mtok: 1.0,
                output_per_mtok: 2.0,
                max_output_tokens: None,
            },
        );
        let r = lookup(&over, "gpt-4o-2024-08-06").unwrap_or_default();
        assert_eq!((r.input_per_mtok, r.output_per_mtok), (1.0, 2.0));
        assert_eq!(
            lookup(&over, "gpt-4o-mini").map(|r| r.input_per_mtok),
            Some(0.15)
        );
    }
}
