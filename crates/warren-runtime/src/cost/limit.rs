//! The budget policy of the cost ledger (STATE-14, issue 16 §4): the amounts a request or a
//! reservation counts ([`Amount`]), an agent's spend rolled over by day and month ([`Spent`]),
//! the limits an agent's policy adds ([`AgentCaps`]), which daily limit applies, and the words
//! of a refusal ([`LimitContext`]).

use time::{Date, OffsetDateTime};
use warren_core::AgentAlias;

use super::CostRecord;

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
pub(super) fn limit_message(
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
pub(super) struct Spent {
    day: Option<Date>,
    pub(super) today: f64,
    month: Option<(i32, u8)>,
    pub(super) this_month: f64,
    /// Tokens (in + out) of every request today, and of requests to models without a rate.
    pub(super) tokens_today: u64,
    pub(super) unpriced_today: u64,
}

/// One request's (or reservation's) amounts.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(super) struct Amount {
    pub(super) usd: f64,
    pub(super) tokens: u64,
    /// Tokens of a request to a model without a rate.
    pub(super) unpriced: u64,
}

impl Amount {
    pub(super) fn of(record: &CostRecord) -> Self {
        let tokens = record.input_tokens + record.output_tokens;
        Self {
            usd: record.cost_usd,
            tokens,
            unpriced: if record.rate.is_none() { tokens } else { 0 },
        }
    }

    pub(super) fn plus(self, o: Self) -> Self {
        Self {
            usd: self.usd + o.usd,
            tokens: self.tokens.saturating_add(o.tokens),
            unpriced: self.unpriced.saturating_add(o.unpriced),
        }
    }

    pub(super) fn minus(self, o: Self) -> Self {
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

/// The daily limit that applies to an agent: the lower of `[cost] daily_limit_usd` and its risk
/// profile's `max_cost_per_day_usd`, whichever are set.
pub(super) fn daily(global: Option<f64>, agent: Option<f64>) -> Option<f64> {
    match (global, agent) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Counts `amount` spent at `time` into `s`, first rolling `s` over to `now`'s day and month.
pub(super) fn add(s: &mut Spent, time: OffsetDateTime, amount: Amount, now: OffsetDateTime) {
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
