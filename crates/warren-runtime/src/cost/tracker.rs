//! [`CostTracker`]: prices each provider request, appends it to the ledger, keeps each agent's
//! totals (read back from the ledger, whoever wrote it) and its reservations of calls in
//! flight, and refuses a call that could cross a limit (STATE-14, issue 16 §4).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

use time::{Date, OffsetDateTime};
use warren_config::schema::rates::{UNKNOWN_MAX_OUTPUT_TOKENS, UNPRICED_TOKENS_PER_DAY};
use warren_config::schema::{CostConfig, ModelRate};
use warren_core::{AgentAlias, Usage};

use super::estimate::{Estimate, price};
use super::ledger::{LEDGER_REWRITE_POINTS, LedgerLock, format_time, open_lock};
use super::limit::{AgentCaps, Amount, LimitContext, Spent, add, daily};
use super::{CostError, CostRecord};
use crate::appendfile::AppendFile;

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
