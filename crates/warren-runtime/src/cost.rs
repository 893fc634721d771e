//! The cost ledger (STATE-14): [`CostTracker`] prices each provider request with the per-model
//! rates of `[cost.rates.<model>]`, appends a record to `data/state/costs.jsonl` (time, agent,
//! session, provider, model, tokens in/out, cost and the rate used) and ENFORCES per-agent
//! limits before a provider call: the daily limit is the smaller of `[cost] daily_limit_usd`
//! and the agent's risk profile `max_cost_per_day_usd`; the monthly one is
//! `[cost] monthly_limit_usd`. A rejected request (LOOP-6) is recorded like any other.
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
use warren_config::schema::{CostConfig, ModelRate};
use warren_core::Usage;

use crate::appendfile::AppendFile;

/// One ledger line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostRecord {
    #[serde(with = "time::serde::rfc3339")]
    pub time: OffsetDateTime,
    pub agent: String,
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
    #[error(
        "agent '{agent}' reached its {period} cost limit (${spent:.4} of ${limit:.4}); the provider was not called (raise [cost] {key} or wait)"
    )]
    LimitReached {
        agent: String,
        period: &'static str,
        spent: f64,
        limit: f64,
        key: &'static str,
    },
    #[error("cost ledger {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

#[derive(Debug, Default, Clone, Copy)]
struct Spent {
    day: Option<Date>,
    today: f64,
    month: Option<(i32, u8)>,
    this_month: f64,
}

/// Prices, records and limits provider usage.
#[derive(Debug)]
pub struct CostTracker {
    path: PathBuf,
    /// The ledger, kept open for appends, and its lock file once opened.
    ledger: Mutex<(AppendFile, Option<std::fs::File>)>,
    enabled: std::sync::atomic::AtomicBool,
    rates: Mutex<BTreeMap<String, ModelRate>>,
    /// `[cost] daily_limit_usd`, `monthly_limit_usd`; swapped with the rates on reload.
    limits: Mutex<(Option<f64>, Option<f64>)>,
    /// `[cost] warn_at_percent`; swapped with the rates on reload.
    warn_at_percent: std::sync::atomic::AtomicU8,
    /// The day each agent was last warned (one warning per agent and day).
    warned: Mutex<BTreeMap<String, Date>>,
    totals: Mutex<Totals>,
}

/// Per-agent spending, and how far into the ledger it has been read.
#[derive(Debug, Default)]
struct Totals {
    spent: BTreeMap<String, Spent>,
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
            limits: Mutex::new((config.daily_limit_usd, config.monthly_limit_usd)),
            warn_at_percent: std::sync::atomic::AtomicU8::new(config.warn_at_percent),
            warned: Mutex::new(BTreeMap::new()),
            totals: Mutex::new(Totals::default()),
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
                add(
                    totals.spent.entry(r.agent).or_default(),
                    r.time,
                    r.cost_usd,
                    now,
                );
            }
        }
        totals.offset += complete as u64;
    }

    /// Applies a reloaded `[cost]` section: rates, limits and `enabled` (STATE-14). Records
    /// already written keep the rate they were priced at; the totals are the ledger's.
    pub fn apply(&self, config: &CostConfig) {
        *self.rates.lock().unwrap_or_else(|p| p.into_inner()) = config.rates.clone();
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
        agent: &str,
        agent_daily_limit: Option<f64>,
        just_spent: f64,
    ) -> Option<String> {
        let percent = self
            .warn_at_percent
            .load(std::sync::atomic::Ordering::Relaxed);
        if !self.enabled() || percent == 0 || just_spent <= 0.0 {
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
        warned.insert(agent.to_string(), now.date());
        Some(format!(
            "agent '{agent}' has spent ${:.4} today, {:.0}% of its daily limit ${limit:.2} (cost.warn_at_percent = {percent}); turns stop at the limit",
            spent.today,
            spent.today / limit * 100.0
        ))
    }

    /// What `agent` has spent, rolled over to now (today and this month), and now.
    fn spent_now(&self, agent: &str) -> (Spent, OffsetDateTime) {
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
        add(&mut spent, now, 0.0, now);
        (spent, now)
    }

    /// The rate of `model`, if configured.
    pub fn rate(&self, model: &str) -> Option<ModelRate> {
        self.rates
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(model)
            .cloned()
    }

    /// Refuses when `agent` has reached a limit (checked BEFORE each provider call).
    /// `agent_daily_limit` is the agent's risk profile `max_cost_per_day_usd`.
    pub fn check(&self, agent: &str, agent_daily_limit: Option<f64>) -> Result<(), CostError> {
        if !self.enabled() {
            return Ok(());
        }
        let (daily_limit, monthly_limit) = *self.limits.lock().unwrap_or_else(|p| p.into_inner());
        let (s, _) = self.spent_now(agent);
        if let Some(limit) = daily(daily_limit, agent_daily_limit)
            && s.today >= limit
        {
            return Err(CostError::LimitReached {
                agent: agent.to_string(),
                period: "daily",
                spent: s.today,
                limit,
                key: "daily_limit_usd (or the risk profile's max_cost_per_day_usd)",
            });
        }
        if let Some(limit) = monthly_limit
            && s.this_month >= limit
        {
            return Err(CostError::LimitReached {
                agent: agent.to_string(),
                period: "monthly",
                spent: s.this_month,
                limit,
                key: "monthly_limit_usd",
            });
        }
        Ok(())
    }

    /// Prices and appends one request's usage.
    pub fn record(
        &self,
        agent: &str,
        session: Option<&str>,
        provider: &str,
        model: &str,
        usage: Usage,
        rejected: bool,
    ) -> Result<CostRecord, CostError> {
        let rate = self.rate(model);
        let cost_usd = rate.as_ref().map_or(0.0, |r| {
            (usage.input_tokens as f64 * r.input_per_mtok
                + usage.output_tokens as f64 * r.output_per_mtok)
                / 1_000_000.0
        });
        let now = OffsetDateTime::now_utc();
        let record = CostRecord {
            time: now,
            agent: agent.to_string(),
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
                record.cost_usd,
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
                    r.agent = to.to_string();
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
pub const LEDGER_REWRITE_POINTS: warren_config::atomic::CrashPoints =
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

fn add(s: &mut Spent, time: OffsetDateTime, cost: f64, now: OffsetDateTime) {
    let (day, month) = (now.date(), (now.year(), u8::from(now.month())));
    if s.day != Some(day) {
        s.day = Some(day);
        s.today = 0.0;
    }
    if s.month != Some(month) {
        s.month = Some(month);
        s.this_month = 0.0;
    }
    if time.date() == day {
        s.today += cost;
    }
    if (time.year(), u8::from(time.month())) == month {
        s.this_month += cost;
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
            },
        );
        let t = CostTracker::open(dir.path().join("costs.jsonl"), &c);
        let spend = |tokens: u64| {
            let r = t
                .record(
                    "a",
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
            t.warning("a", None, r.cost_usd)
        };
        assert_eq!(spend(50), None, "50%");
        let warned = spend(35).expect("85% crosses the 80% mark");
        assert!(
            warned.contains("warn_at_percent = 80") && warned.contains("agent 'a'"),
            "{warned}"
        );
        assert_eq!(spend(5), None, "once a day");
        // The agent's own lower limit counts: $0.90 spent of $0.50 is past the mark already.
        assert_eq!(t.warning("a", Some(0.5), 0.01), None);
    }

    #[test]
    fn a_reload_applies_new_limits_and_enabled_to_the_running_tracker_state14() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let t = CostTracker::open(dir.path().join("costs.jsonl"), &config(Some(2.0)));
        let u = Usage {
            input_tokens: 1,
            output_tokens: 0,
        };
        t.record("a", None, "p", "m", u, true)
            .unwrap_or_else(|e| panic!("{e}"));
        t.record("a", None, "p", "m", u, true)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(t.check("a", None).is_err(), "over the old limit");
        t.apply(&config(Some(100.0)));
        assert!(
            t.check("a", None).is_ok(),
            "the raised limit applies at once"
        );
        t.apply(&config(Some(0.5)));
        assert!(
            t.check("a", None).is_err(),
            "the lowered limit applies at once"
        );
        let mut off = config(Some(0.5));
        off.enabled = false;
        t.apply(&off);
        assert!(
            !t.enabled() && t.check("a", None).is_ok(),
            "disabled: no limit"
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
        assert!(t.check("a", None).is_ok());
        t.record("a", None, "p", "m", u, false)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(t.check("a", None).is_ok());
        t.record("a", None, "p", "m", u, true)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            t.check("a", None),
            Err(CostError::LimitReached {
                period: "daily",
                ..
            })
        ));
        assert!(t.check("b", None).is_ok(), "limits are per agent");
        let reopened = CostTracker::open(path.clone(), &config(Some(2.0)));
        assert!(reopened.check("a", None).is_err());
        assert!(
            reopened.check("a", Some(100.0)).is_err(),
            "the smaller limit wins"
        );
    }

    #[test]
    fn a_limit_holds_across_processes_sharing_the_ledger_state14() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("costs.jsonl");
        let daemon = CostTracker::open(path.clone(), &config(Some(1.0)));
        let cli = CostTracker::open(path.clone(), &config(Some(1.0)));
        assert!(daemon.check("a", None).is_ok());
        let u = Usage {
            input_tokens: 1,
            output_tokens: 0,
        };
        cli.record("a", None, "p", "m", u, false)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            daemon.check("a", None).is_err(),
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
            },
        );
        let daemon = CostTracker::open(path.clone(), &rates);
        let cli = CostTracker::open(path.clone(), &rates);
        let u = Usage {
            input_tokens: 1,
            output_tokens: 0,
        };
        let record = |t: &CostTracker| {
            t.record("a", None, "p", "m", u, false)
                .unwrap_or_else(|e| panic!("{e}"));
        };
        record(&daemon);
        record(&cli);
        assert!(daemon.check("a", None).is_ok(), "$0.80 of $1.00");
        assert!(cli.check("a", None).is_ok(), "$0.80 of $1.00");
        record(&daemon);
        for t in [&daemon, &cli] {
            assert!(matches!(
                t.check("a", None),
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
        assert!(daemon.check("a", None).is_ok(), "$0.80 after the rewrite");
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
        t.record("a", None, "p", "m", u, false)
            .unwrap_or_else(|e| panic!("{e}"));
        // The rewrite (what `warren agents rename a b` does) reads the ledger under the lock...
        let held = LedgerLock::acquire(&path).unwrap_or_else(|e| panic!("{e}"));
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let appender = {
            let t = std::sync::Arc::clone(&t);
            std::thread::spawn(move || t.record("other", None, "p", "m", u, false).is_ok())
        };
        std::thread::sleep(std::time::Duration::from_millis(200));
        // ...and replaces it while the other agent's record waits.
        std::fs::write(dir.path().join("new"), text.replace("\"a\"", "\"b\""))
            .unwrap_or_else(|e| panic!("{e}"));
        std::fs::rename(dir.path().join("new"), &path).unwrap_or_else(|e| panic!("{e}"));
        drop(held);
        assert!(appender.join().unwrap_or(false));
        let agents: Vec<String> = read_ledger(&path).into_iter().map(|r| r.agent).collect();
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
        t.record("a", None, "p", "m", u, false)
            .unwrap_or_else(|e| panic!("{e}"));
        let mut reloaded = config(None);
        reloaded.rates.insert(
            "m".to_string(),
            ModelRate {
                input_per_mtok: 500_000.0,
                output_per_mtok: 0.0,
            },
        );
        t.apply(&reloaded);
        t.record("a", None, "p", "m", u, false)
            .unwrap_or_else(|e| panic!("{e}"));
        let costs: Vec<f64> = read_ledger(&path).iter().map(|r| r.cost_usd).collect();
        assert_eq!(costs, vec![2.0, 1.0]);
    }
}
