//! `[cron.jobs.<name>]` declarations and the one schedule parser (STATE-9): 5/6-field cron
//! expressions with an IANA time zone (`croner` over `jiff`, which reads the system tz
//! database), `every = "30s"` intervals and one-shot `at = RFC 3339` times. The runtime's
//! scheduler, the CLI (`warren cron add`) and the API parse schedules through [`Schedule`] so
//! validation and firing cannot disagree.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use warren_core::AgentAlias;

use crate::error::Problem;
use crate::keypath::quote;

/// `[cron.jobs.<name>]`: a declared job, reconciled into `data/cron/jobs.db` on daemon start
/// and reload. Exactly one of `cron`, `every`, `at`; exactly one of `message`, `command`.
/// `agent` is required (an alias, checked when the config is read); the rest default to unset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CronJobDecl {
    pub agent: AgentAlias,
    /// A 5- or 6-field cron expression (`0 3 * * *`, `*/10 * * * * *`).
    pub cron: Option<String>,
    /// IANA time zone of `cron` (default UTC).
    pub tz: Option<String>,
    /// An interval: `30s`, `15m`, `2h`, `1d`, `1h30m`.
    pub every: Option<String>,
    /// A one-shot time (RFC 3339).
    pub at: Option<String>,
    /// An agent turn with this message.
    pub message: Option<String>,
    /// A shell command run as the agent's shell tool (same policy, sandbox, approvals).
    pub command: Option<String>,
    /// A session the agent owns; unset = an isolated session per run.
    pub session: Option<String>,
    pub enabled: Option<bool>,
    /// Per-run budget (USD).
    pub budget_usd: Option<f64>,
    /// Per-day budget (USD, UTC day).
    pub daily_budget_usd: Option<f64>,
    /// Missed fire times after downtime: `skip` (default) or `once`.
    pub catch_up: Option<String>,
    pub delivery: Option<DeliveryDecl>,
}

/// `delivery = { webhook = "https://..." }`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeliveryDecl {
    pub webhook: Option<String>,
}

/// Why a schedule (`cron` + `tz`, `every`, `at`) or an interval does not parse. The message
/// names the text at fault; the config key is added by the caller ([`validate`] names
/// `cron.jobs.<name>.cron` / `.tz` / `.every` / `.at`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleSpecError {
    #[error("bad cron expression '{expr}': {cause}")]
    Expression { expr: String, cause: String },
    #[error("unknown time zone '{tz}' (use an IANA name such as Europe/Berlin or UTC)")]
    TimeZone { tz: String },
    #[error("bad duration '{text}': use a number with s, m, h or d (e.g. 30s, 1h30m)")]
    Duration { text: String },
    #[error("interval '{text}' is shorter than 1s")]
    TooShort { text: String },
    #[error("'{text}' is not an RFC 3339 time (e.g. 2026-12-24T18:00:00+01:00)")]
    At { text: String },
    #[error("unknown schedule kind '{kind}'")]
    Kind { kind: String },
    #[error("set exactly one of cron, every, at")]
    NotExactlyOne,
}

/// A cron job name that is not 1–64 of `[A-Za-z0-9_-]`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("job name '{name}' must be 1 to 64 letters, digits, '-' or '_'")]
pub struct JobNameError {
    pub name: String,
}

/// Why a `delivery.webhook` URL is refused; each names the URL (except the credentials case,
/// which must not repeat them).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookUrlError {
    #[error("webhook '{url}' is not a URL (https://host/path)")]
    NotUrl { url: String },
    #[error("webhook '{url}' has no host")]
    NoHost { url: String },
    #[error("a webhook URL must not carry credentials (user@host)")]
    Credentials,
    #[error("webhook '{url}' contains whitespace")]
    Whitespace { url: String },
    #[error("webhook '{url}' must use https (plain http only to localhost)")]
    PlainHttp { url: String },
    #[error("webhook '{url}' must be an https URL")]
    Scheme { url: String },
}

/// When a job fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schedule {
    Cron {
        expr: String,
        tz: String,
    },
    Every(Duration),
    /// Unix milliseconds.
    At(i64),
}

impl Schedule {
    /// A cron expression (5 or 6 fields) in `tz` (default UTC).
    pub fn cron(expr: &str, tz: Option<&str>) -> Result<Self, ScheduleSpecError> {
        let tz = tz.unwrap_or("UTC").to_string();
        parse_cron(expr)?;
        if jiff::tz::TimeZone::get(&tz).is_err() {
            return Err(ScheduleSpecError::TimeZone { tz });
        }
        Ok(Schedule::Cron {
            expr: expr.to_string(),
            tz,
        })
    }

    pub fn every(text: &str) -> Result<Self, ScheduleSpecError> {
        let d = parse_duration(text)?;
        if d < Duration::from_secs(1) {
            return Err(ScheduleSpecError::TooShort { text: text.into() });
        }
        Ok(Schedule::Every(d))
    }

    pub fn at(text: &str) -> Result<Self, ScheduleSpecError> {
        let ts: jiff::Timestamp = text
            .parse()
            .map_err(|_| ScheduleSpecError::At { text: text.into() })?;
        Ok(Schedule::At(ts.as_millisecond()))
    }

    /// From the stored `(kind, spec, tz)` triple of [`Schedule::parts`].
    pub fn from_parts(kind: &str, spec: &str, tz: Option<&str>) -> Result<Self, ScheduleSpecError> {
        match kind {
            "cron" => Self::cron(spec, tz),
            "every" => Self::every(spec),
            "at" => Self::at(spec),
            other => Err(ScheduleSpecError::Kind { kind: other.into() }),
        }
    }

    /// `(kind, spec, tz)` as stored and shown.
    pub fn parts(&self) -> (&'static str, String, Option<String>) {
        match self {
            Schedule::Cron { expr, tz } => ("cron", expr.clone(), Some(tz.clone())),
            Schedule::Every(d) => ("every", format_duration(*d), None),
            Schedule::At(ms) => (
                "at",
                jiff::Timestamp::from_millisecond(*ms)
                    .map(|t| t.to_string())
                    .unwrap_or_default(),
                None,
            ),
        }
    }

    /// The first fire time strictly after `after_ms` (unix ms); `None` when there is none (a
    /// one-shot time already passed).
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        match self {
            Schedule::Every(d) => Some(after_ms + i64::try_from(d.as_millis()).ok()?),
            Schedule::At(ms) => (*ms > after_ms).then_some(*ms),
            Schedule::Cron { expr, tz } => {
                let cron = parse_cron(expr).ok()?;
                let tz = jiff::tz::TimeZone::get(tz).ok()?;
                let start = jiff::Timestamp::from_millisecond(after_ms)
                    .ok()?
                    .to_zoned(tz);
                let next = cron.find_next_occurrence(&start, false).ok()?;
                Some(next.timestamp().as_millisecond())
            }
        }
    }
}

fn parse_cron(expr: &str) -> Result<croner::Cron, ScheduleSpecError> {
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Optional)
        .build()
        .parse(expr)
        .map_err(|e| ScheduleSpecError::Expression {
            expr: expr.into(),
            cause: e.to_string(),
        })
}

/// `30s`, `15m`, `2h`, `1d`, `1h30m`, `500ms`.
pub fn parse_duration(text: &str) -> Result<Duration, ScheduleSpecError> {
    let bad = || ScheduleSpecError::Duration { text: text.into() };
    let mut total = Duration::ZERO;
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit = rest.chars().take_while(char::is_ascii_alphabetic).count();
        let step = match &rest[..unit] {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            "d" => Duration::from_secs(n.saturating_mul(86_400)),
            _ => return Err(bad()),
        };
        total = total.saturating_add(step);
        rest = &rest[unit..];
    }
    Ok(total)
}

/// The shortest text [`parse_duration`] reads back as `d`.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    let s = d.as_secs();
    for (unit, n) in [("d", 86_400), ("h", 3600), ("m", 60)] {
        if s >= n && s.is_multiple_of(n) {
            return format!("{}{unit}", s / n);
        }
    }
    format!("{s}s")
}

impl CronJobDecl {
    /// The job's schedule, or why it has none (the message names no key; see [`validate`]).
    pub fn schedule(&self) -> Result<Schedule, ScheduleSpecError> {
        match (&self.cron, &self.every, &self.at) {
            (Some(expr), None, None) => Schedule::cron(expr, self.tz.as_deref()),
            (None, Some(every), None) => Schedule::every(every),
            (None, None, Some(at)) => Schedule::at(at),
            _ => Err(ScheduleSpecError::NotExactlyOne),
        }
    }
}

/// Problems of `[cron.jobs]`: unknown agent, bad expression, bad time zone, message xor
/// command, bad webhook, bad catch_up; each names its key.
pub(crate) fn validate(
    jobs: &std::collections::BTreeMap<String, CronJobDecl>,
    agents: &[&str],
) -> Vec<Problem> {
    let mut out = Vec::new();
    for (name, job) in jobs {
        let at = |rest: &str| format!("cron.jobs.{}{rest}", quote(name));
        if let Err(e) = validate_name(name) {
            out.push(Problem::at(at(""), e.to_string()));
        }
        if !agents.contains(&job.agent.as_str()) {
            out.push(
                Problem::at(at(".agent"), format!("unknown agent '{}'", job.agent)).with_hint(
                    crate::error::did_you_mean(&job.agent, agents.iter().copied()),
                ),
            );
        }
        let key = match (&job.cron, &job.every, &job.at) {
            (Some(_), None, None) => ".cron",
            (None, Some(_), None) => ".every",
            (None, None, Some(_)) => ".at",
            _ => "",
        };
        if job.tz.is_some() && job.cron.is_none() {
            out.push(Problem::at(
                at(".tz"),
                "tz applies only to a cron expression",
            ));
        }
        if let Err(e) = job.schedule() {
            let key = if matches!(e, ScheduleSpecError::TimeZone { .. }) {
                ".tz"
            } else {
                key
            };
            out.push(Problem::at(at(key), e.to_string()));
        }
        match (&job.message, &job.command) {
            (Some(_), None) | (None, Some(_)) => {}
            _ => out.push(Problem::at(
                at(""),
                "set exactly one of message (an agent turn) or command (a shell command)",
            )),
        }
        if let Some(c) = &job.catch_up
            && c != "skip"
            && c != "once"
        {
            out.push(Problem::at(
                at(".catch_up"),
                format!("unknown catch_up '{c}'; use skip or once"),
            ));
        }
        for (k, v) in [
            (".budget_usd", job.budget_usd),
            (".daily_budget_usd", job.daily_budget_usd),
        ] {
            if let Some(v) = v
                && !(v.is_finite() && v > 0.0)
            {
                out.push(Problem::at(at(k), "a budget is a positive number of USD"));
            }
        }
        if let Some(url) = job.delivery.as_ref().and_then(|d| d.webhook.as_deref())
            && let Err(e) = validate_webhook(url)
        {
            out.push(Problem::at(at(".delivery.webhook"), e.to_string()));
        }
    }
    out
}

/// Job names: 1–64 of `[A-Za-z0-9_-]` (they appear in session keys and URLs).
pub fn validate_name(name: &str) -> Result<(), JobNameError> {
    if name.is_empty()
        || name.len() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(JobNameError { name: name.into() });
    }
    Ok(())
}

/// A webhook target: `https://host[...]`, or `http://` to a loopback host (local receivers
/// and tests); no credentials in the URL.
pub fn validate_webhook(url: &str) -> Result<(), WebhookUrlError> {
    let owned = || url.to_string();
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| WebhookUrlError::NotUrl { url: owned() })?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.is_empty() {
        return Err(WebhookUrlError::NoHost { url: owned() });
    }
    if authority.contains('@') {
        return Err(WebhookUrlError::Credentials);
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(WebhookUrlError::Whitespace { url: owned() });
    }
    let host = authority
        .rsplit_once(':')
        .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
        .map_or(authority, |(h, _)| h);
    let loopback = matches!(host, "localhost" | "127.0.0.1" | "[::1]");
    match scheme {
        "https" => Ok(()),
        "http" if loopback => Ok(()),
        "http" => Err(WebhookUrlError::PlainHttp { url: owned() }),
        _ => Err(WebhookUrlError::Scheme { url: owned() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_parse_and_fire() {
        let every = Schedule::every("1h30m");
        assert_eq!(every, Ok(Schedule::Every(Duration::from_secs(5400))));
        assert_eq!(format_duration(Duration::from_secs(5400)), "90m");
        assert!(Schedule::every("soon").is_err());
        // 2026-01-01T00:00:00Z; "0 3 * * *" in Europe/Berlin (UTC+1 in January) = 02:00Z.
        let start = 1_767_225_600_000;
        let cron = Schedule::cron("0 3 * * *", Some("Europe/Berlin"));
        assert_eq!(
            cron.as_ref().ok().and_then(|c| c.next_after(start)),
            Some(start + 2 * 3600 * 1000)
        );
        assert!(Schedule::cron("0 3 * * *", Some("Mars/Olympus")).is_err());
        assert!(Schedule::cron("61 * * * *", None).is_err());
        let six = Schedule::cron("*/10 * * * * *", None);
        assert_eq!(
            six.ok().and_then(|c| c.next_after(start)),
            Some(start + 10_000)
        );
        let at = Schedule::at("2026-01-01T00:00:05Z");
        assert_eq!(at, Ok(Schedule::At(start + 5000)));
        assert_eq!(Schedule::At(start).next_after(start), None);
    }

    #[test]
    fn webhooks_are_validated() {
        assert!(validate_webhook("https://hooks.example.com/x").is_ok());
        assert!(validate_webhook("http://127.0.0.1:9000/x").is_ok());
        assert!(validate_webhook("http://example.com/x").is_err());
        assert!(validate_webhook("https://user:pw@example.com/").is_err());
        assert!(validate_webhook("ftp://example.com").is_err());
        assert!(validate_webhook("example.com").is_err());
    }
}

/// `[agents.<alias>.heartbeat]`: a periodic check that calls the model only when it fires
/// (an idle heartbeat costs no tokens). Checks: `files_changed` (the agent's workspace changed
/// since the last tick), `command` (exit status 0, run as the agent's shell tool), `session`
/// (new messages in that session). At least one is required.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HeartbeatDecl {
    /// How often the check runs (`30m`).
    pub every: String,
    /// The message of the turn when the check fires.
    pub message: Option<String>,
    pub files_changed: bool,
    pub command: Option<String>,
    pub session: Option<String>,
    /// The heartbeat's own daily budget (USD, UTC day).
    pub daily_budget_usd: Option<f64>,
    pub enabled: Option<bool>,
}

/// The message of a heartbeat turn when none is configured.
pub const HEARTBEAT_MESSAGE: &str =
    "Heartbeat: your check fired (see below). Look at what changed and act if needed.";

/// The cron job name of `agent`'s heartbeat.
pub fn heartbeat_job(agent: &str) -> String {
    format!("heartbeat-{agent}")
}

/// The session `agent`'s heartbeat turns run in (its spend is shown apart in `warren costs`).
pub fn heartbeat_session(agent: &str) -> String {
    format!("heartbeat-{agent}")
}

/// Problems of every `[agents.<alias>.heartbeat]`, each naming its key.
pub(crate) fn validate_heartbeats(config: &super::Config) -> Vec<Problem> {
    let mut out = Vec::new();
    for (name, agent) in &config.agents {
        let Some(hb) = &agent.heartbeat else { continue };
        let at = |rest: &str| format!("agents.{}.heartbeat{rest}", quote(name));
        if let Err(e) = Schedule::every(&hb.every) {
            out.push(Problem::at(at(".every"), e.to_string()));
        }
        if !hb.files_changed && hb.command.is_none() && hb.session.is_none() {
            out.push(Problem::at(
                at(""),
                "a heartbeat needs a check: files_changed = true, command or session",
            ));
        }
        if let Some(v) = hb.daily_budget_usd
            && !(v.is_finite() && v > 0.0)
        {
            out.push(Problem::at(
                at(".daily_budget_usd"),
                "a budget is a positive number of USD",
            ));
        }
        if config.cron.jobs.contains_key(&heartbeat_job(name)) {
            out.push(Problem::at(
                format!("cron.jobs.{}", quote(&heartbeat_job(name))),
                "this job name is reserved for the agent's heartbeat",
            ));
        }
    }
    out
}
