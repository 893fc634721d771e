//! `warren costs [--agent A] [--since DATE] [--json]`: the cost ledger (STATE-14), per record
//! and totalled per agent and model, with the date of the built-in price table.

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::Context;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use warren_config::InstallRoot;
use warren_config::schema::cron::heartbeat_session;
use warren_config::schema::rates::RATES_AS_OF;
use warren_runtime::cost::{format_time, read_ledger};

pub fn run(
    root: &InstallRoot,
    agent: Option<String>,
    since: Option<String>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let since = since.map(|s| parse_since(&s)).transpose()?;
    let records: Vec<_> = read_ledger(&root.costs_ledger())
        .into_iter()
        .filter(|r| agent.as_deref().is_none_or(|a| r.agent == a))
        .filter(|r| since.is_none_or(|t| r.time >= t))
        .collect();
    if json {
        super::print_json(&serde_json::to_value(&records)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let prices = format!(
        "prices: built-in list prices as of {RATES_AS_OF} (USD per million tokens), overridden by [cost.rates]; a record keeps the rate it was priced at"
    );
    if records.is_empty() {
        println!("no costs recorded");
        println!("{prices}");
        return Ok(ExitCode::SUCCESS);
    }
    let mut totals: BTreeMap<(String, String), (u64, u64, f64, usize)> = BTreeMap::new();
    for r in &records {
        let t = totals
            .entry((r.agent.to_string(), r.model.clone()))
            .or_default();
        t.0 += r.input_tokens;
        t.1 += r.output_tokens;
        t.2 += r.cost_usd;
        t.3 += 1;
    }
    println!(
        "{:<16} {:<24} {:>8} {:>12} {:>12} {:>12}",
        "AGENT", "MODEL", "CALLS", "TOKENS IN", "TOKENS OUT", "COST USD"
    );
    let mut sum = 0.0;
    for ((agent, model), (i, o, c, n)) in &totals {
        sum += c;
        println!("{agent:<16} {model:<24} {n:>8} {i:>12} {o:>12} {c:>12.6}");
    }
    // Heartbeat spend per agent (issue 17 §4): the turns of its session `heartbeat-<alias>`.
    let mut heartbeat: BTreeMap<&str, (usize, f64)> = BTreeMap::new();
    for r in &records {
        if r.session.as_deref() == Some(heartbeat_session(&r.agent).as_str()) {
            let h = heartbeat.entry(r.agent.as_str()).or_default();
            h.0 += 1;
            h.1 += r.cost_usd;
        }
    }
    for (agent, (n, c)) in &heartbeat {
        println!("heartbeat of {agent}: {n} request(s), ${c:.6} (included above)");
    }
    let unpriced: BTreeMap<&str, u64> =
        records
            .iter()
            .filter(|r| r.rate.is_none())
            .fold(BTreeMap::new(), |mut m, r| {
                *m.entry(r.model.as_str()).or_default() += r.input_tokens + r.output_tokens;
                m
            });
    for (model, tokens) in &unpriced {
        println!(
            "model {model} has no rate: its {tokens} token(s) cost $0 here and count against max_tokens_per_day"
        );
    }
    println!("{prices}");
    println!(
        "total ${sum:.6} over {} request(s) since {}",
        records.len(),
        records
            .first()
            .map(|r| format_time(r.time))
            .unwrap_or_default()
    );
    Ok(ExitCode::SUCCESS)
}

/// `YYYY-MM-DD` (UTC midnight) or an RFC 3339 time.
fn parse_since(s: &str) -> anyhow::Result<OffsetDateTime> {
    if let Ok(t) = OffsetDateTime::parse(s, &Rfc3339) {
        return Ok(t);
    }
    let date = time::Date::parse(s, time::macros::format_description!("[year]-[month]-[day]"))
        .with_context(|| format!("--since '{s}' is not a date (YYYY-MM-DD) or an RFC 3339 time"))?;
    Ok(date.midnight().assume_utc())
}
