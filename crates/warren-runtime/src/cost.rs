//! The cost ledger (STATE-14): [`CostTracker`] prices each provider request with the per-model
//! rates of `[cost.rates.<model>]` over the built-in table (`warren_config::schema::rates`,
//! dated), appends a record to `data/state/costs.jsonl` (time, agent, session, provider, model,
//! tokens in/out, cost and the rate used) and ENFORCES per-agent limits before a provider
//! call: the daily limit is the smaller of `[cost] daily_limit_usd` and the agent's risk
//! profile `max_cost_per_day_usd`; the monthly one is `[cost] monthly_limit_usd`; the daily
//! token limit is the profile's `max_tokens_per_day` (every request) or, unset, the default
//! allowance of requests to models without a rate. A rejected request (LOOP-6) is recorded
//! like any other.
//!
//! Reservation (issue 16 §4): before each call [`CostTracker::reserve`] estimates its worst
//! case (the prompt's tokens, estimated from its text, plus the most output tokens the model
//! can return, at the model's rates) and refuses the call when that could cross a limit; the
//! reservation is held in the tracker until the call's actual usage is recorded, so two
//! concurrent turns of one agent in this process cannot both pass on the same headroom.
//!
//! `[cost] enabled = false` stops writing the ledger only: the limits still hold, with the
//! process's own spend counted in memory (plus whatever the ledger already holds).
//!
//! Reload swaps rates with [`CostTracker::set_rates`]; old records keep the price they were
//! written with (the rate is stored in each record).
//!
//! Totals come from the ledger file itself: before each check the tracker reads the records
//! appended since its last look (by any process: the daemon and `warren agent` runs share the
//! file), so a limit holds across processes. Its own appends are counted as it makes them
//! when no other process wrote in between, so a check usually costs one `stat`.
//!
//! Durability: a record is written (visible to other processes, kept if this process dies)
//! when its request returns, through a handle kept open; [`CostTracker::sync`] makes the
//! turn's records durable against a power loss with ONE `fdatasync` when the turn ends,
//! instead of one per provider request.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use time::format_description::well_known::Rfc3339;
use time::{Date, OffsetDateTime};
use warren_config::schema::rates::{UNKNOWN_MAX_OUTPUT_TOKENS, UNPRICED_TOKENS_PER_DAY};
use warren_config::schema::{CostConfig, ModelRate};
use warren_core::{AgentAlias, Usage};
use warren_providers::ChatRequest;

use crate::appendfile::AppendFile;

/// One ledger line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostRecord {
    #[serde(with = "time::serde::rfc3339")]
    pub time: OffsetDateTime,
    /// Validated when the ledger line is read (a line naming no valid alias is skipped).
    pub agent: warren_core::AgentAlias,
    pub session: Option<String>,
    pub provider: String,
    pub model: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
    /// The rate used (`None` = no rate configured for the model: cost 0).
    pub rate: Option<ModelRate>,
    /// The request was rejected by the loop (LOOP-6) but still billed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rejected: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum CostError {
    /// A call refused before the provider was called: a limit is reached, or the call's
    /// worst case could cross it.
    #[error("{}", limit_message(.agent, .period, .tokens, .spent, .held, .estimate, .limit, .context))]
    LimitReached {
        agent: AgentAlias,
        /// `daily` or `monthly`.
        period: &'static str,
        /// A token limit (amounts in tokens) rather than a cost limit (amounts in USD).
        tokens: bool,
        /// Used this day/month, by the ledger (and this process's unrecorded spend).
        spent: f64,
        /// Reserved by this agent's calls in flight.
        held: f64,
        /// This call's worst case (0 when the limit is simply reached).
        estimate: f64,
        limit: f64,
        context: Box<LimitContext>,
    },
    #[error("cost ledger {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The words of a refusal besides its figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitContext {
    /// How the estimate was made.
    pub detail: String,
    /// When the period ends (RFC 3339, UTC).
    pub resets_at: String,
    /// The setting that raises the limit.
    pub key: String,
}

#[allow(clippy::too_many_arguments)]
fn limit_message(
    agent: &AgentAlias,
    period: &str,
    tokens: &bool,
    spent: &f64,
    held: &f64,
    estimate: &f64,
    limit: &f64,
    context: &LimitContext,
) -> String {
    let LimitContext {
        detail,
        resets_at,
        key,
    } = context;
    let (tokens, spent, held, estimate, limit) = (*tokens, *spent, *held, *estimate, *limit);
    let amount = |v: f64| {
        if tokens {
            format!("{v:.0} tokens")
        } else {
            format!("${v:.4}")
        }
    };
    let what = if tokens { "token" } else { "cost" };
    let when = if period == "daily" {
        "today"
    } else {
        "this month"
    };
    let in_flight = if held > 0.0 {
        format!(", {} held by calls in flight", amount(held))
    } else {
        String::new()
    };
    let used = format!("{} used {when}{in_flight}", amount(spent));
    let head = if estimate <= 0.0 || spent + held >= limit {
        format!(
            "agent '{agent}' reached its {period} {what} limit of {} ({used})",
            amount(limit)
        )
    } else {
        format!(
            "agent '{agent}': this call could {} ({detail}), which would cross its {period} {what} limit of {} ({used})",
            if tokens {
                format!("use up to {}", amount(estimate))
            } else {
                format!("cost up to {}", amount(estimate))
            },
            amount(limit)
        )
    };
    format!(
        "{head}; the provider was not called. The limit resets at {resets_at}; to allow more, raise {key}"
    )
}

#[derive(Debug, Default, Clone, Copy)]
struct Spent {
    day: Option<Date>,
    today: f64,
    month: Option<(i32, u8)>,
    this_month: f64,
    /// Tokens (in + out) of every request today, and of requests to models without a rate.
    tokens_today: u64,
    unpriced_today: u64,
}

/// One request's (or reservation's) amounts.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Amount {
    usd: f64,
    tokens: u64,
    /// Tokens of a request to a model without a rate.
    unpriced: u64,
}

impl Amount {
    fn of(record: &CostRecord) -> Self {
        let tokens = record.input_tokens + record.output_tokens;
        Self {
            usd: record.cost_usd,
            tokens,
            unpriced: if record.rate.is_none() { tokens } else { 0 },
        }
    }

    fn plus(self, o: Self) -> Self {
        Self {
            usd: self.usd + o.usd,
            tokens: self.tokens.saturating_add(o.tokens),
            unpriced: self.unpriced.saturating_add(o.unpriced),
        }
    }

    fn minus(self, o: Self) -> Self {
        Self {
            usd: (self.usd - o.usd).max(0.0),
            tokens: self.tokens.saturating_sub(o.tokens),
            unpriced: self.unpriced.saturating_sub(o.unpriced),
        }
    }
}

/// The limits of one agent read from its `SecurityPolicy` (the `[cost]` section's own limits
/// are the tracker's).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct AgentCaps {
    /// The risk profile's `max_cost_per_day_usd`.
    pub max_cost_per_day_usd: Option<f64>,
    /// The risk profile's `max_tokens_per_day` (`None`: only unpriced models count, against
    /// the default allowance).
    pub max_tokens_per_day: Option<u64>,
}

/// The size of one request before it is sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Estimate {
    /// Estimated from the text of the messages and tool definitions.
    pub prompt_tokens: u64,
    /// The request's `max_tokens`, if it sets one.
    pub max_tokens: Option<u32>,
}

/// What `input` and `output` tokens cost at `rate`, in USD.
fn price(rate: &ModelRate, input: u64, output: u64) -> f64 {
    (input as f64 * rate.input_per_mtok + output as f64 * rate.output_per_mtok) / 1_000_000.0
}

/// A conservative token estimate of `request`'s prompt: a token per 3 bytes of text (English
/// averages about 4; code and JSON are denser) plus a few per message and tool. No tokenizer
/// is used: the provider's count replaces this after the call.
pub fn estimate(request: &ChatRequest) -> Estimate {
    let mut bytes = 0usize;
    for m in &request.messages {
        bytes += 16 + m.content.len();
        for c in &m.tool_calls {
            bytes += c.id.len() + c.name.len() + json_len(&c.arguments);
        }
    }
    bytes += tool_bytes(&request.tools);
    Estimate {
        prompt_tokens: (bytes as u64).div_ceil(3),
        max_tokens: request.max_tokens,
    }
}

/// The estimated size of a tool list. A runner sends the same list (one `Arc`) on every call of
/// a turn, so the walk over its JSON schemas is done once per list and thread, not per call.
fn tool_bytes(tools: &std::sync::Arc<Vec<warren_core::ToolDefinition>>) -> usize {
    use std::cell::RefCell;
    use std::sync::Arc;
    type Measured = Option<(Arc<Vec<warren_core::ToolDefinition>>, usize)>;
    thread_local! {
        static LAST: RefCell<Measured> = const { RefCell::new(None) };
    }
    LAST.with(|last| {
        if let Some((list, bytes)) = &*last.borrow()
            && Arc::ptr_eq(list, tools)
        {
            return *bytes;
        }
        let bytes = tools
            .iter()
            .map(|t| 32 + t.name.len() + t.description.len() + json_len(&t.parameters))
            .sum();
        *last.borrow_mut() = Some((Arc::clone(tools), bytes));
        bytes
    })
}

/// About the length of `v` as JSON text, without writing it.
fn json_len(v: &serde_json::Value) -> usize {
    use serde_json::Value;
    match v {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 8,
        Value::String(s) => s.len() + 2,
        Value::Array(a) => 2 + a.iter().map(|x| json_len(x) + 1).sum::<usize>(),
        Value::Object(o) => {
            2 + o
                .iter()
                .map(|(k, x)| k.len() + 4 + json_len(x))
                .sum::<usize>()
        }
    }
}

/// A call's worst case, held in the tracker from [`CostTracker::reserve`] until dropped (after
/// the call's usage is recorded, or when the call failed or was cancelled).
pub struct Reservation<'t> {
    tracker: &'t CostTracker,
    agent: AgentAlias,
    amount: Amount,
}

impl std::fmt::Debug for Reservation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation")
            .field("agent", &self.agent)
            .field("amount", &self.amount)
            .finish_non_exhaustive()
    }
}

impl Reservation<'_> {
    /// The USD held (0 for an unpriced model).
    pub fn usd(&self) -> f64 {
        self.amount.usd
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut held = self.tracker.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = held.get_mut(&self.agent) {
            *h = h.minus(self.amount);
            if h.tokens == 0 {
                *h = Amount::default(); // nothing in flight: no rounding residue either
            }
        }
    }
}

/// Prices, records and limits provider usage.
#[derive(Debug)]
pub struct CostTracker {
    path: PathBuf,
    /// The ledger, kept open for appends, and its lock file once opened.
    ledger: Mutex<(AppendFile, Option<std::fs::File>)>,
    enabled: std::sync::atomic::AtomicBool,
    rates: Mutex<BTreeMap<String, ModelRate>>,
    /// The last model's rate looked up (a runner asks for the same model on every call);
    /// cleared when the rates are swapped.
    last_rate: Mutex<Option<(String, Option<ModelRate>)>>,
    /// `[cost] daily_limit_usd`, `monthly_limit_usd`; swapped with the rates on reload.
    limits: Mutex<(Option<f64>, Option<f64>)>,
    /// `[cost] warn_at_percent`; swapped with the rates on reload.
    warn_at_percent: std::sync::atomic::AtomicU8,
    /// The day each agent was last warned (one warning per agent and day).
    warned: Mutex<BTreeMap<AgentAlias, Date>>,
    totals: Mutex<Totals>,
    /// Each agent's reservations of calls in flight ([`Reservation`]).
    held: Mutex<BTreeMap<AgentAlias, Amount>>,
    /// Spend this process priced but did not write (`enabled = false`): still limited.
    unrecorded: Mutex<BTreeMap<AgentAlias, Spent>>,
}

/// Per-agent spending, and how far into the ledger it has been read.
#[derive(Debug, Default)]
struct Totals {
    spent: BTreeMap<AgentAlias, Spent>,
    offset: u64,
    /// Inode of the ledger read so far: a rewritten ledger (agent rename) is re-read whole.
    ino: u64,
}

impl CostTracker {
    /// The tracker of the ledger at `path`. Nothing is read here (daemon start-up does not
    /// wait on a growing ledger): the first check reads today's and this month's totals.
    pub fn open(path: PathBuf, config: &CostConfig) -> Self {
        Self {
            ledger: Mutex::new((AppendFile::new(path.clone()), None)),
            path,
            enabled: std::sync::atomic::AtomicBool::new(config.enabled),
            rates: Mutex::new(config.rates.clone()),
            last_rate: Mutex::new(None),
            limits: Mutex::new((config.daily_limit_usd, config.monthly_limit_usd)),
            warn_at_percent: std::sync::atomic::AtomicU8::new(config.warn_at_percent),
            warned: Mutex::new(BTreeMap::new()),
            totals: Mutex::new(Totals::default()),
            held: Mutex::new(BTreeMap::new()),
            unrecorded: Mutex::new(BTreeMap::new()),
        }
    }

    /// Whether the ledger records anything (`[cost] enabled`).
    pub fn enabled(&self) -> bool {
        self.enabled.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Adds the records appended to the ledger since the last look (complete lines only).
    fn catch_up(&self) {
        use std::io::{Read, Seek, SeekFrom};
        let mut totals = self.totals.lock().unwrap_or_else(|p| p.into_inner());
        use std::os::unix::fs::MetadataExt;
        let (len, ino) = std::fs::metadata(&self.path).map_or((0, 0), |m| (m.len(), m.ino()));
        if len < totals.offset || (totals.ino != 0 && ino != totals.ino) {
            *totals = Totals::default(); // the ledger was replaced
        }
        totals.ino = ino;
        if len == totals.offset {
            return;
        }
        let Ok(mut f) = std::fs::File::open(&self.path) else {
            return;
        };
        let mut tail = Vec::new();
        if f.seek(SeekFrom::Start(totals.offset)).is_err() || f.read_to_end(&mut tail).is_err() {
            return;
        }
        let complete = tail.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        let now = OffsetDateTime::now_utc();
        for line in tail[..complete].split(|b| *b == b'\n') {
            if let Ok(r) = serde_json::from_slice::<CostRecord>(line) {
                let amount = Amount::of(&r);
                add(
                    totals.spent.entry(r.agent).or_default(),
                    r.time,
                    amount,
                    now,
                );
            }
        }
        totals.offset += complete as u64;
    }

    /// Applies a reloaded `[cost]` section: rates, limits and `enabled` (STATE-14). Records
    /// already written keep the rate they were priced at; the totals are the ledger's.
    pub fn apply(&self, config: &CostConfig) {
        {
            // Under the cache's lock: a lookup cannot cache an old rate after the swap.
            let mut last = self.last_rate.lock().unwrap_or_else(|p| p.into_inner());
            *self.rates.lock().unwrap_or_else(|p| p.into_inner()) = config.rates.clone();
            *last = None;
        }
        *self.limits.lock().unwrap_or_else(|p| p.into_inner()) =
            (config.daily_limit_usd, config.monthly_limit_usd);
        self.enabled
            .store(config.enabled, std::sync::atomic::Ordering::Relaxed);
        self.warn_at_percent
            .store(config.warn_at_percent, std::sync::atomic::Ordering::Relaxed);
    }

    /// `[cost] warn_at_percent`: once the request that cost `just_spent` took `agent`'s spending
    /// today across `warn_at_percent` of its daily limit (the lower of `[cost]
    /// daily_limit_usd` and `agent_daily_limit`), the warning to show — once per agent and
    /// day (a process that starts above the mark does not warn again).
    pub fn warning(
        &self,
        agent: &AgentAlias,
        agent_daily_limit: Option<f64>,
        just_spent: f64,
    ) -> Option<String> {
        let percent = self
            .warn_at_percent
            .load(std::sync::atomic::Ordering::Relaxed);
        if percent == 0 || just_spent <= 0.0 {
            return None;
        }
        let (daily_limit, _) = *self.limits.lock().unwrap_or_else(|p| p.into_inner());
        let limit = daily(daily_limit, agent_daily_limit)?;
        let (spent, now) = self.spent_now(agent);
        let mark = limit * f64::from(percent) / 100.0;
        if spent.today < mark || spent.today - just_spent >= mark {
            return None;
        }
        let mut warned = self.warned.lock().unwrap_or_else(|p| p.into_inner());
        if warned.get(agent) == Some(&now.date()) {
            return None;
        }
        warned.insert(agent.clone(), now.date());
        Some(format!(
            "agent '{agent}' has spent ${:.4} today, {:.0}% of its daily limit ${limit:.2} (cost.warn_at_percent = {percent}); turns stop at the limit",
            spent.today,
            spent.today / limit * 100.0
        ))
    }

    /// What `agent` has spent, rolled over to now (today and this month), and now: the
    /// ledger's records plus this process's unrecorded spend.
    fn spent_now(&self, agent: &AgentAlias) -> (Spent, OffsetDateTime) {
        self.catch_up();
        let now = OffsetDateTime::now_utc();
        let mut spent = self
            .totals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .spent
            .get(agent)
            .copied()
            .unwrap_or_default();
        add(&mut spent, now, Amount::default(), now);
        if let Some(mut u) = self
            .unrecorded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(agent)
            .copied()
        {
            add(&mut u, now, Amount::default(), now);
            spent.today += u.today;
            spent.this_month += u.this_month;
            spent.tokens_today += u.tokens_today;
            spent.unpriced_today += u.unpriced_today;
        }
        (spent, now)
    }

    /// The rate of `model`: `[cost.rates]`, else the built-in table (`None` = unpriced).
    pub fn rate(&self, model: &str) -> Option<ModelRate> {
        let mut last = self.last_rate.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((m, rate)) = &*last
            && m == model
        {
            return rate.clone();
        }
        let rate = warren_config::schema::rates::lookup(
            &self.rates.lock().unwrap_or_else(|p| p.into_inner()),
            model,
        );
        *last = Some((model.to_string(), rate.clone()));
        rate
    }

    /// Refuses when `agent` has reached a cost limit. `agent_daily_limit` is the agent's risk
    /// profile `max_cost_per_day_usd`. Provider calls go through [`CostTracker::reserve`].
    pub fn check(
        &self,
        agent: &AgentAlias,
        agent_daily_limit: Option<f64>,
    ) -> Result<(), CostError> {
        let caps = AgentCaps {
            max_cost_per_day_usd: agent_daily_limit,
            max_tokens_per_day: None,
        };
        let (s, now) = self.spent_now(agent);
        let held = self
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(agent)
            .copied()
            .unwrap_or_default();
        self.admit(
            agent,
            caps,
            &s,
            held,
            Amount::default(),
            true,
            now,
            &String::new,
        )
    }

    /// Reserves the worst case of a call of `agent` to `model`, or refuses it (BEFORE the
    /// provider is called) when that could cross a limit. `caps` are the agent's limits from
    /// its policy. Drop the reservation after recording the call's usage.
    pub fn reserve(
        &self,
        agent: &AgentAlias,
        caps: AgentCaps,
        model: &str,
        estimate: Estimate,
    ) -> Result<Reservation<'_>, CostError> {
        let rate = self.rate(model);
        let output = estimate
            .max_tokens
            .or(rate.as_ref().and_then(|r| r.max_output_tokens))
            .unwrap_or(UNKNOWN_MAX_OUTPUT_TOKENS);
        let tokens = estimate.prompt_tokens + u64::from(output);
        let want = Amount {
            usd: rate
                .as_ref()
                .map_or(0.0, |r| price(r, estimate.prompt_tokens, u64::from(output))),
            tokens,
            unpriced: if rate.is_none() { tokens } else { 0 },
        };
        let priced = rate.is_some();
        let detail = || {
            format!(
                "~{} prompt + {output} output tokens{}",
                estimate.prompt_tokens,
                if priced {
                    format!(" at {model}'s rate")
                } else {
                    format!(" of '{model}', which has no rate")
                }
            )
        };
        // Held across the check and the hold: a concurrent turn of the agent sees this one.
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let (s, now) = self.spent_now(agent);
        let already = held.get(agent).copied().unwrap_or_default();
        self.admit(agent, caps, &s, already, want, priced, now, &detail)?;
        // An agent's entry stays once made (zero when nothing is in flight): no allocation per
        // call.
        match held.get_mut(agent) {
            Some(h) => *h = h.plus(want),
            None => {
                held.insert(agent.clone(), want);
            }
        }
        Ok(Reservation {
            tracker: self,
            agent: agent.clone(),
            amount: want,
        })
    }

    /// Refuses `want` when `spent` + `held` + `want` would cross a limit of `agent`.
    #[allow(clippy::too_many_arguments)]
    fn admit(
        &self,
        agent: &AgentAlias,
        caps: AgentCaps,
        s: &Spent,
        held: Amount,
        want: Amount,
        priced: bool,
        now: OffsetDateTime,
        detail: &dyn Fn() -> String,
    ) -> Result<(), CostError> {
        let (daily_limit, monthly_limit) = *self.limits.lock().unwrap_or_else(|p| p.into_inner());
        let tomorrow = now.date().next_day().map(|d| d.midnight().assume_utc());
        let next_month = {
            let (y, m) = match now.month() {
                time::Month::December => (now.year() + 1, time::Month::January),
                m => (now.year(), m.next()),
            };
            Date::from_calendar_date(y, m, 1)
                .ok()
                .map(|d| d.midnight().assume_utc())
        };
        let at = |t: Option<OffsetDateTime>| t.map(format_time).unwrap_or_default();
        // The key naming the limit is built only when refusing (this runs on every call).
        let refuse = |period,
                      tokens,
                      spent: f64,
                      held: f64,
                      estimate: f64,
                      limit,
                      key: &dyn Fn() -> String| {
            if spent + held >= limit || spent + held + estimate > limit {
                Err(CostError::LimitReached {
                    agent: agent.clone(),
                    period,
                    tokens,
                    spent,
                    held,
                    estimate,
                    limit,
                    context: Box::new(LimitContext {
                        detail: detail(),
                        resets_at: at(if period == "daily" {
                            tomorrow
                        } else {
                            next_month
                        }),
                        key: key(),
                    }),
                })
            } else {
                Ok(())
            }
        };
        if let Some(limit) = daily(daily_limit, caps.max_cost_per_day_usd) {
            let key =
                if daily_limit.is_some_and(|g| caps.max_cost_per_day_usd.is_none_or(|a| g <= a)) {
                    "[cost] daily_limit_usd"
                } else {
                    "the risk profile's max_cost_per_day_usd"
                };
            refuse("daily", false, s.today, held.usd, want.usd, limit, &|| {
                key.to_string()
            })?;
        }
        if let Some(limit) = monthly_limit {
            refuse(
                "monthly",
                false,
                s.this_month,
                held.usd,
                want.usd,
                limit,
                &|| "[cost] monthly_limit_usd".to_string(),
            )?;
        }
        if let Some(limit) = caps.max_tokens_per_day {
            refuse(
                "daily",
                true,
                s.tokens_today as f64,
                held.tokens as f64,
                want.tokens as f64,
                limit as f64,
                &|| "the risk profile's max_tokens_per_day".to_string(),
            )?;
        } else if !priced {
            refuse(
                "daily",
                true,
                s.unpriced_today as f64,
                held.unpriced as f64,
                want.unpriced as f64,
                UNPRICED_TOKENS_PER_DAY as f64,
                &|| {
                    format!(
                        "the risk profile's max_tokens_per_day (unset: {UNPRICED_TOKENS_PER_DAY} tokens a day of models without a rate), or give the model a rate in [cost.rates]"
                    )
                },
            )?;
        }
        Ok(())
    }

    /// Prices and appends one request's usage.
    pub fn record(
        &self,
        agent: &warren_core::AgentAlias,
        session: Option<&str>,
        provider: &str,
        model: &str,
        usage: Usage,
        rejected: bool,
    ) -> Result<CostRecord, CostError> {
        let rate = self.rate(model);
        let cost_usd = rate
            .as_ref()
            .map_or(0.0, |r| price(r, usage.input_tokens, usage.output_tokens));
        let now = OffsetDateTime::now_utc();
        let record = CostRecord {
            time: now,
            agent: agent.clone(),
            session: session.map(str::to_string),
            provider: provider.to_string(),
            model: model.to_string(),
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cost_usd,
            rate,
            rejected,
        };
        if self.enabled() {
            self.append(&record)?;
        } else {
            let mut unrecorded = self.unrecorded.lock().unwrap_or_else(|p| p.into_inner());
            if !unrecorded.contains_key(agent) {
                unrecorded.insert(agent.clone(), Spent::default());
            }
            if let Some(spent) = unrecorded.get_mut(agent) {
                add(spent, now, Amount::of(&record), now);
            }
        }
        Ok(record)
    }

    fn io_error(&self, source: std::io::Error) -> CostError {
        CostError::Io {
            path: self.path.clone(),
            source,
        }
    }

    fn append(&self, record: &CostRecord) -> Result<(), CostError> {
        let mut line =
            serde_json::to_vec(record).map_err(|e| self.io_error(std::io::Error::other(e)))?;
        line.push(b'\n');
        let mut guard = self.ledger.lock().unwrap_or_else(|p| p.into_inner());
        let (ledger, lock) = &mut *guard;
        let lock = match lock {
            Some(f) => f,
            None => lock.insert(open_lock(&self.path).map_err(|e| self.io_error(e))?),
        };
        // Held across the `stat` and the write: a rewrite of the ledger (agent rename) cannot
        // replace the file between them, which would leave this line in the old file.
        lock.lock().map_err(|e| self.io_error(e))?;
        let appended = ledger
            .append(&line, None)
            .and_then(|at| Ok((at, ledger.len_now()?)));
        let _ = lock.unlock();
        let (at, after) = appended.map_err(|e| self.io_error(e))?;
        // Counted now when the ledger held exactly what the totals have read and nobody
        // appended between the `stat` and the write; otherwise the next check reads it back
        // from the file with whatever else was appended.
        let mut totals = self.totals.lock().unwrap_or_else(|p| p.into_inner());
        if at.before == totals.offset
            && at.ino == totals.ino
            && after == at.before + line.len() as u64
        {
            let now = OffsetDateTime::now_utc();
            add(
                totals.spent.entry(record.agent.clone()).or_default(),
                record.time,
                Amount::of(record),
                now,
            );
            totals.offset = after;
        }
        Ok(())
    }

    /// Moves `from`'s ledger records to `to` (agent rename, LIFE-3): the ledger is rewritten
    /// durably under the [`LedgerLock`] (appends of running turns, of any process, wait and then
    /// go to the new file), so the new alias inherits today's and this month's spend. A temp
    /// file a killed rewrite left is swept first. Returns how many records moved.
    pub fn rename_agent(
        &self,
        from: &warren_core::AgentAlias,
        to: &warren_core::AgentAlias,
    ) -> Result<u64, CostError> {
        let _held = LedgerLock::acquire(&self.path).map_err(|e| self.io_error(e))?;
        warren_config::atomic::sweep_stale_temps(&self.path);
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(self.io_error(e)),
        };
        let mut n = 0;
        let mut out = String::with_capacity(text.len());
        for line in text.split_inclusive('\n') {
            match serde_json::from_str::<CostRecord>(line.trim_end()) {
                Ok(mut r) if r.agent == from.as_str() && line.ends_with('\n') => {
                    r.agent = to.clone();
                    let json = serde_json::to_string(&r)
                        .map_err(|e| self.io_error(std::io::Error::other(e)))?;
                    out.push_str(&json);
                    out.push('\n');
                    n += 1;
                }
                _ => out.push_str(line),
            }
        }
        if n > 0 {
            warren_config::atomic::write_durable_no_backup(
                &self.path,
                out.as_bytes(),
                0o600,
                LEDGER_REWRITE_POINTS,
            )
            .map_err(|e| self.io_error(std::io::Error::other(e.to_string())))?;
            // The totals re-read the new file whole (its inode changed).
            *self.totals.lock().unwrap_or_else(|p| p.into_inner()) = Totals::default();
        }
        Ok(n)
    }

    /// Whether the ledger can take this turn's records (`[cost] enabled`): the door asks
    /// before the user's message is stored, so an unusable ledger (a directory, no
    /// permission) refuses the turn naming the file instead of failing it half-way
    /// (issue 36 §7).
    pub fn usable(&self) -> Result<(), CostError> {
        if !self.enabled() {
            return Ok(());
        }
        self.ledger
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .writable()
            .map_err(|e| self.io_error(e))
    }

    /// Makes the records appended so far durable (one `fdatasync`; nothing when none were
    /// appended). The loop calls it when a turn ends.
    pub fn sync(&self) -> Result<(), CostError> {
        self.ledger
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .sync()
            .map_err(|e| self.io_error(e))
    }
}

/// Crash points of the ledger rewrite of [`CostTracker::rename_agent`].
const LEDGER_REWRITE_POINTS: warren_config::atomic::CrashPoints =
    warren_config::atomic::CrashPoints {
        after_temp_write: "lifecycle-ledger-after-temp-write",
        after_temp_fsync: "lifecycle-ledger-after-temp-fsync",
        after_rename: "lifecycle-ledger-after-rename",
        after_dir_sync: "lifecycle-ledger-after-dir-sync",
        dir_sync_error: "lifecycle-ledger-dir-sync-error",
    };

/// The daily limit that applies to an agent: the lower of `[cost] daily_limit_usd` and its risk
/// profile's `max_cost_per_day_usd`, whichever are set.
fn daily(global: Option<f64>, agent: Option<f64>) -> Option<f64> {
    match (global, agent) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn add(s: &mut Spent, time: OffsetDateTime, amount: Amount, now: OffsetDateTime) {
    let (day, month) = (now.date(), (now.year(), u8::from(now.month())));
    if s.day != Some(day) {
        s.day = Some(day);
        s.today = 0.0;
        s.tokens_today = 0;
        s.unpriced_today = 0;
    }
    if s.month != Some(month) {
        s.month = Some(month);
        s.this_month = 0.0;
    }
    if time.date() == day {
        s.today += amount.usd;
        s.tokens_today = s.tokens_today.saturating_add(amount.tokens);
        s.unpriced_today = s.unpriced_today.saturating_add(amount.unpriced);
    }
    if (time.year(), u8::from(time.month())) == month {
        s.this_month += amount.usd;
    }
}

/// `<ledger>.lock`, the advisory lock file of the ledger at `path`.
fn open_lock(path: &Path) -> std::io::Result<std::fs::File> {
    let mut lock = path.to_path_buf().into_os_string();
    lock.push(".lock");
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    warren_config::atomic::open_lock_file(Path::new(&lock))
}

/// Exclusive hold of the ledger at `path` against every appending [`CostTracker`], of any
/// process (`flock` of `<ledger>.lock`), for a rewrite that replaces the file: appends wait
/// until it is dropped and then go to the new file, so none is lost in the old one.
#[derive(Debug)]
pub struct LedgerLock(std::fs::File);

impl LedgerLock {
    pub fn acquire(path: &Path) -> std::io::Result<Self> {
        let file = open_lock(path)?;
        file.lock()?;
        Ok(Self(file))
    }
}

impl Drop for LedgerLock {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

/// Every readable record of the ledger at `path`, oldest first (bad lines skipped).
pub fn read_ledger(path: &Path) -> Vec<CostRecord> {
    std::fs::read_to_string(path)
        .map(|text| {
            text.lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// RFC 3339 text of a record's time (for display).
pub fn format_time(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(daily: Option<f64>) -> CostConfig {
        let mut c = CostConfig {
            daily_limit_usd: daily,
            ..CostConfig::default()
        };
        c.rates.insert(
            "m".into(),
            ModelRate {
                input_per_mtok: 1_000_000.0,
                output_per_mtok: 0.0,
                max_output_tokens: None,
            },
        );
        c
    }

    #[test]
    fn crossing_warn_at_percent_warns_once_per_agent_and_day() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        // 80% of $1.00 a day; each input token costs $0.01 here.
        let mut c = config(Some(1.0));
        c.rates.insert(
            "cent".into(),
            ModelRate {
                input_per_mtok: 10_000.0,
                output_per_mtok: 0.0,
                max_output_tokens: None,
            },
        );
        let t = CostTracker::open(dir.path().join("costs.jsonl"), &c);
        let spend = |tokens: u64| {
            let r = t
                .record(
                    &al("a"),
                    None,
                    "p",
                    "cent",
                    Usage {
                        input_tokens: tokens,
                        output_tokens: 0,
                    },
                    false,
                )
                .unwrap_or_else(|e| panic!("{e}"));
            t.warning(&al("a"), None, r.cost_usd)
        };
        assert_eq!(spend(50), None, "50%");
        let warned = spend(35).expect("85% crosses the 80% mark");
        assert!(
            warned.contains("warn_at_percent = 80") && warned.contains("agent 'a'"),
            "{warned}"
        );
        assert_eq!(spend(5), None, "once a day");
        // The agent's own lower limit counts: $0.90 spent of $0.50 is past the mark already.
        assert_eq!(t.warning(&al("a"), Some(0.5), 0.01), None);
    }

    #[test]
    fn a_reload_applies_new_limits_and_enabled_to_the_running_tracker_state14() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let t = CostTracker::open(dir.path().join("costs.jsonl"), &config(Some(2.0)));
        let u = Usage {
            input_tokens: 1,
            output_tokens: 0,
        };
        t.record(&al("a"), None, "p", "m", u, true)
            .unwrap_or_else(|e| panic!("{e}"));
        t.record(&al("a"), None, "p", "m", u, true)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(t.check(&al("a"), None).is_err(), "over the old limit");
        t.apply(&config(Some(100.0)));
        assert!(
            t.check(&al("a"), None).is_ok(),
            "the raised limit applies at once"
        );
        t.apply(&config(Some(0.5)));
        assert!(
            t.check(&al("a"), None).is_err(),
            "the lowered limit applies at once"
        );
        let mut off = config(Some(0.5));
        off.enabled = false;
        t.apply(&off);
        assert!(
            !t.enabled() && t.check(&al("a"), None).is_err(),
            "disabled: the ledger is not written, the limit still holds"
        );
    }

    #[test]
    fn limits_are_enforced_before_the_call_and_survive_a_reopen_state14() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("costs.jsonl");
        let t = CostTracker::open(path.clone(), &config(Some(2.0)));
        let u = Usage {
            input_tokens: 1,
            output_tokens: 0,
        };
        assert!(t.check(&al("a"), None).is_ok());
        t.record(&al("a"), None, "p", "m", u, false)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(t.check(&al("a"), None).is_ok());
        t.record(&al("a"), None, "p", "m", u, true)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            t.check(&al("a"), None),
            Err(CostError::LimitReached {
                period: "daily",
                ..
            })
        ));
        assert!(t.check(&al("b"), None).is_ok(), "limits are per agent");
        let reopened = CostTracker::open(path.clone(), &config(Some(2.0)));
        assert!(reopened.check(&al("a"), None).is_err());
        assert!(
            reopened.check(&al("a"), Some(100.0)).is_err(),
            "the smaller limit wins"
        );
    }

    #[test]
    fn a_limit_holds_across_processes_sharing_the_ledger_state14() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("costs.jsonl");
        let daemon = CostTracker::open(path.clone(), &config(Some(1.0)));
        let cli = CostTracker::open(path.clone(), &config(Some(1.0)));
        assert!(daemon.check(&al("a"), None).is_ok());
        let u = Usage {
            input_tokens: 1,
            output_tokens: 0,
        };
        cli.record(&al("a"), None, "p", "m", u, false)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            daemon.check(&al("a"), None).is_err(),
            "the other process's spending counts"
        );
    }

    /// Own appends are counted as they are made, the other process's are read back from the
    /// file, and nothing is counted twice whichever order the two write in; a ledger replaced
    /// under the kept handle (an agent rename rewrites it) is written through its new file.
    #[test]
    fn interleaved_appends_of_two_processes_count_once_each_state14() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("costs.jsonl");
        let mut rates = config(Some(1.0));
        rates.rates.insert(
            "m".into(),
            ModelRate {
                input_per_mtok: 400_000.0, // one token: $0.40
                output_per_mtok: 0.0,
                max_output_tokens: None,
            },
        );
        let daemon = CostTracker::open(path.clone(), &rates);
        let cli = CostTracker::open(path.clone(), &rates);
        let u = Usage {
            input_tokens: 1,
            output_tokens: 0,
        };
        let record = |t: &CostTracker| {
            t.record(&al("a"), None, "p", "m", u, false)
                .unwrap_or_else(|e| panic!("{e}"));
        };
        record(&daemon);
        record(&cli);
        assert!(daemon.check(&al("a"), None).is_ok(), "$0.80 of $1.00");
        assert!(cli.check(&al("a"), None).is_ok(), "$0.80 of $1.00");
        record(&daemon);
        for t in [&daemon, &cli] {
            assert!(matches!(
                t.check(&al("a"), None),
                Err(CostError::LimitReached { spent, .. }) if (spent - 1.2).abs() < 1e-9
            ));
        }
        daemon.sync().unwrap_or_else(|e| panic!("{e}"));

        // The ledger is rewritten and replaced by rename; the next record goes to the new file.
        let kept = std::fs::read_to_string(&path).unwrap_or_default();
        let first_line = kept.lines().next().unwrap_or_default().to_string() + "\n";
        std::fs::write(dir.path().join("rewritten"), first_line).unwrap_or_else(|e| panic!("{e}"));
        std::fs::rename(dir.path().join("rewritten"), &path).unwrap_or_else(|e| panic!("{e}"));
        record(&daemon);
        assert_eq!(read_ledger(&path).len(), 2);
        assert!(
            daemon.check(&al("a"), None).is_ok(),
            "$0.80 after the rewrite"
        );
    }

    /// A record made while a rewrite holds the ledger waits for it and lands in the new file;
    /// without the lock it would go to the replaced file and be lost.
    #[test]
    fn an_append_during_a_rewrite_lands_in_the_new_ledger_state14() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("costs.jsonl");
        let t = std::sync::Arc::new(CostTracker::open(path.clone(), &config(None)));
        let u = Usage {
            input_tokens: 1,
            output_tokens: 0,
        };
        t.record(&al("a"), None, "p", "m", u, false)
            .unwrap_or_else(|e| panic!("{e}"));
        // The rewrite (what `warren agents rename a b` does) reads the ledger under the lock...
        let held = LedgerLock::acquire(&path).unwrap_or_else(|e| panic!("{e}"));
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let appender = {
            let t = std::sync::Arc::clone(&t);
            std::thread::spawn(move || t.record(&al("other"), None, "p", "m", u, false).is_ok())
        };
        std::thread::sleep(std::time::Duration::from_millis(200));
        // ...and replaces it while the other agent's record waits.
        std::fs::write(dir.path().join("new"), text.replace("\"a\"", "\"b\""))
            .unwrap_or_else(|e| panic!("{e}"));
        std::fs::rename(dir.path().join("new"), &path).unwrap_or_else(|e| panic!("{e}"));
        drop(held);
        assert!(appender.join().unwrap_or(false));
        let agents: Vec<String> = read_ledger(&path)
            .into_iter()
            .map(|r| r.agent.into())
            .collect();
        assert_eq!(agents, ["b", "other"]);
    }

    #[test]
    fn reload_swaps_rates_without_touching_old_records_state14() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("costs.jsonl");
        let t = CostTracker::open(path.clone(), &config(None));
        let u = Usage {
            input_tokens: 2,
            output_tokens: 0,
        };
        t.record(&al("a"), None, "p", "m", u, false)
            .unwrap_or_else(|e| panic!("{e}"));
        let mut reloaded = config(None);
        reloaded.rates.insert(
            "m".to_string(),
            ModelRate {
                input_per_mtok: 500_000.0,
                output_per_mtok: 0.0,
                max_output_tokens: None,
            },
        );
        t.apply(&reloaded);
        t.record(&al("a"), None, "p", "m", u, false)
            .unwrap_or_else(|e| panic!("{e}"));
        let costs: Vec<f64> = read_ledger(&path).iter().map(|r| r.cost_usd).collect();
        assert_eq!(costs, vec![2.0, 1.0]);
    }

    fn al(alias: &str) -> warren_core::AgentAlias {
        warren_core::AgentAlias::new(alias).unwrap_or_else(|e| panic!("{e}"))
    }

    fn usage(input: u64, output: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
        }
    }

    /// `m` at $1 per million tokens in and out, at most 1,000 output tokens a response.
    fn dollar_config(daily: Option<f64>) -> CostConfig {
        let mut c = config(daily);
        c.rates.insert(
            "m".into(),
            ModelRate {
                input_per_mtok: 1.0,
                output_per_mtok: 1.0,
                max_output_tokens: Some(1_000),
            },
        );
        c
    }

    fn prompt(tokens: u64) -> Estimate {
        Estimate {
            prompt_tokens: tokens,
            max_tokens: None,
        }
    }

    fn caps(cost: f64) -> AgentCaps {
        AgentCaps {
            max_cost_per_day_usd: Some(cost),
            max_tokens_per_day: None,
        }
    }

    /// Issue 16 §4: a call whose worst case (prompt + the model's most output, at its rate)
    /// could cross the daily cap is refused before it is made, naming the cap, the key and
    /// when it resets; the actual usage then replaces the reservation.
    #[test]
    fn a_call_that_could_cross_the_daily_cap_is_refused_before_it_is_made_issue16() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let t = CostTracker::open(dir.path().join("costs.jsonl"), &dollar_config(None));
        // $0.01 a day: 9,000 prompt + 1,000 output tokens = $0.01 fits exactly...
        let r = t
            .reserve(&al("a"), caps(0.01), "m", prompt(9_000))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!((r.usd() - 0.01).abs() < 1e-12);
        // ...and holds the whole headroom while the call is in flight: a concurrent turn of
        // the same agent cannot pass on it.
        let second = t.reserve(&al("a"), caps(0.01), "m", prompt(1));
        assert!(
            matches!(&second, Err(CostError::LimitReached { held, .. }) if (held - 0.01).abs() < 1e-12),
            "{second:?}"
        );
        assert!(
            t.reserve(&al("b"), caps(0.01), "m", prompt(1)).is_ok(),
            "per agent"
        );
        // The call used far less than its worst case: the record replaces the reservation.
        t.record(&al("a"), None, "p", "m", usage(1_000, 10), false)
            .unwrap_or_else(|e| panic!("{e}"));
        drop(r);
        t.reserve(&al("a"), caps(0.01), "m", prompt(5_000))
            .unwrap_or_else(|e| panic!("after the record: {e}"));
        // $0.00101 spent; 8,000 + 1,000 tokens more would make $0.01001 > $0.01.
        let err = t
            .reserve(&al("a"), caps(0.01), "m", prompt(8_000))
            .expect_err("the worst case crosses the cap");
        let msg = err.to_string();
        for part in [
            "agent 'a'",
            "could cost up to $0.0090",
            "daily cost limit of $0.0100",
            "~8000 prompt + 1000 output tokens at m's rate",
            "the provider was not called",
            "resets at ",
            "T00:00:00Z",
            "max_cost_per_day_usd",
        ] {
            assert!(msg.contains(part), "{part:?} in {msg}");
        }
        // The global cap, when lower, is the one named.
        let mut global = dollar_config(Some(0.005));
        global.warn_at_percent = 0;
        t.apply(&global);
        let msg = t
            .reserve(&al("a"), caps(0.01), "m", prompt(8_000))
            .expect_err("over the global cap")
            .to_string();
        assert!(msg.contains("[cost] daily_limit_usd"), "{msg}");
    }

    #[test]
    fn the_monthly_cap_resets_on_the_first_of_next_month_issue16() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut c = dollar_config(None);
        c.monthly_limit_usd = Some(0.0001);
        let t = CostTracker::open(dir.path().join("costs.jsonl"), &c);
        let msg = t
            .reserve(&al("a"), caps(5.0), "m", prompt(10))
            .expect_err("over the monthly cap")
            .to_string();
        let now = OffsetDateTime::now_utc();
        let (y, m) = if now.month() == time::Month::December {
            (now.year() + 1, 1)
        } else {
            (now.year(), u8::from(now.month()) + 1)
        };
        assert!(msg.contains("monthly cost limit"), "{msg}");
        assert!(
            msg.contains(&format!("resets at {y}-{m:02}-01T00:00:00Z")),
            "{msg}"
        );
        assert!(msg.contains("[cost] monthly_limit_usd"), "{msg}");
    }

    /// `[cost] enabled = false` writes no ledger, but the spend is counted in memory and the
    /// limits still refuse.
    #[test]
    fn disabled_recording_still_enforces_the_daily_cap_issue16() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("costs.jsonl");
        let mut c = dollar_config(None);
        c.enabled = false;
        let t = CostTracker::open(path.clone(), &c);
        t.record(&al("a"), None, "p", "m", usage(9_500, 0), false)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!path.exists(), "nothing written to the ledger");
        let err = t
            .reserve(&al("a"), caps(0.01), "m", prompt(10))
            .expect_err("$0.0095 spent + up to $0.00101 crosses $0.01");
        assert!(err.to_string().contains("daily cost limit"), "{err}");
        assert!(t.check(&al("a"), Some(0.009)).is_err(), "reached");
    }

    /// Issue 16 §4: tokens of a model without a rate count against the default allowance;
    /// a set `max_tokens_per_day` counts every request's tokens.
    #[test]
    fn max_tokens_per_day_blocks_priced_and_unpriced_models_issue16() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let t = CostTracker::open(dir.path().join("costs.jsonl"), &dollar_config(None));
        let local = "llama-local";
        assert_eq!(t.rate(local), None);
        // Unset: the default allowance of unpriced tokens.
        let near = UNPRICED_TOKENS_PER_DAY - u64::from(UNKNOWN_MAX_OUTPUT_TOKENS);
        t.record(&al("a"), None, "p", local, usage(near, 0), false)
            .unwrap_or_else(|e| panic!("{e}"));
        let msg = t
            .reserve(&al("a"), caps(5.0), local, prompt(1))
            .expect_err("over the unpriced allowance")
            .to_string();
        assert!(msg.contains("daily token limit of 2000000 tokens"), "{msg}");
        assert!(msg.contains("'llama-local', which has no rate"), "{msg}");
        assert!(msg.contains("max_tokens_per_day"), "{msg}");
        // A priced model is not limited by the unpriced allowance...
        t.reserve(&al("a"), caps(5.0), "m", prompt(1))
            .unwrap_or_else(|e| panic!("{e}"));
        // ...but a set max_tokens_per_day counts every request.
        let set = AgentCaps {
            max_cost_per_day_usd: Some(5.0),
            max_tokens_per_day: Some(UNPRICED_TOKENS_PER_DAY + 5_000),
        };
        t.reserve(&al("a"), set, local, prompt(1))
            .unwrap_or_else(|e| panic!("raised: {e}"));
        t.record(&al("a"), None, "p", "m", usage(10_000, 0), false)
            .unwrap_or_else(|e| panic!("{e}"));
        let msg = t
            .reserve(&al("a"), set, "m", prompt(1))
            .expect_err("the priced request's tokens count too")
            .to_string();
        assert!(
            msg.contains("the risk profile's max_tokens_per_day"),
            "{msg}"
        );
    }

    #[test]
    fn the_prompt_estimate_grows_with_the_conversation_and_the_tools() {
        let mut request = ChatRequest {
            messages: vec![warren_core::ChatMessage::user("x".repeat(3_000))],
            ..ChatRequest::default()
        };
        let small = estimate(&request).prompt_tokens;
        assert!((1_000..1_100).contains(&small), "{small}");
        request.tools = std::sync::Arc::new(vec![warren_core::ToolDefinition {
            name: "file_write".into(),
            description: "y".repeat(300),
            parameters: serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }]);
        assert!(estimate(&request).prompt_tokens > small + 100);
    }
}
