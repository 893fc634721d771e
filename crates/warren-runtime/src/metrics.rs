//! Prometheus metrics of the process (issue 25; STATE-13, STATE-14, STATE-17): one registry the
//! runtime counts into with one-line calls at the points that matter (turn end, provider call,
//! tool call, approval, policy denial, cron run, session queue), served by the gateway's
//! `GET /metrics` (and the optional `[metrics] port` listener) as OpenMetrics text.
//!
//! Label values are bounded: agent aliases, model and provider names come from config, tool
//! names from the agent's own tool list (a name the model invented counts as `unknown`),
//! channels, outcomes, decisions and layers are fixed words, cron jobs are operator-named.
//! Session keys and free text are never labels.
//!
//! The registry lives for the process (reloads keep the counts). `[metrics] enabled = false`
//! makes every call return at once.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{LazyLock, PoisonError, RwLock};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

type Labels<const N: usize> = [(&'static str, String); N];

/// Upper bounds of the turn-duration buckets, in seconds.
const TURN_BUCKETS: [f64; 12] = [
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// A family looked up by borrowed label values. `Family::get_or_create` takes an owned label
/// set, a `String` per label allocated and freed on every call (several per tool round); this
/// keeps each label set's metric handle (sharing the family's storage) under a hash of the
/// values, so a label set seen before costs a hash, a read lock and string compares.
struct Keyed<const N: usize, M> {
    names: [&'static str; N],
    family: Family<Labels<N>, M>,
    state: BuildHasherDefault<Fnv>,
    seen: RwLock<Seen<N, M>>,
}

/// FNV-1a over the label values: they are short and bounded (config names, the agent's own
/// tool names, fixed words; never a session key or a client's text), so a keyed hash (SipHash,
/// twice the time here) guards against nothing; equal hashes are told apart by comparing.
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

/// Label values and their metric, by the hash of the values.
type Seen<const N: usize, M> = HashMap<u64, Vec<([Box<str>; N], M)>>;

impl<const N: usize, M: Clone + Default> Keyed<N, M> {
    fn new(names: [&'static str; N]) -> Self {
        Self {
            names,
            family: Family::default(),
            state: BuildHasherDefault::default(),
            seen: RwLock::new(HashMap::new()),
        }
    }

    /// Runs `f` on the metric of `values` (created at zero on first use).
    fn with(&self, values: [&str; N], f: impl FnOnce(&M)) {
        let key = self.state.hash_one(values);
        let same = |k: &[Box<str>; N]| k.iter().zip(values).all(|(a, b)| **a == *b);
        {
            let seen = self.seen.read().unwrap_or_else(PoisonError::into_inner);
            if let Some((_, metric)) = seen
                .get(&key)
                .and_then(|bucket| bucket.iter().find(|(k, _)| same(k)))
            {
                f(metric);
                return;
            }
        }
        let labels: Labels<N> = std::array::from_fn(|i| (self.names[i], values[i].to_string()));
        let metric = self.family.get_or_create(&labels).clone();
        f(&metric);
        let mut seen = self.seen.write().unwrap_or_else(PoisonError::into_inner);
        let bucket = seen.entry(key).or_default();
        if !bucket.iter().any(|(k, _)| same(k)) {
            bucket.push((values.map(Box::from), metric));
        }
    }
}

struct Metrics {
    registry: Registry,
    turns: Keyed<3, Counter>,
    turn_duration: Family<Labels<1>, Histogram>,
    provider_requests: Keyed<3, Counter>,
    tokens: Keyed<3, Counter>,
    cost: Keyed<2, Counter<f64, AtomicU64>>,
    tool_calls: Keyed<3, Counter>,
    approvals: Family<Labels<2>, Counter>,
    denials: Family<Labels<2>, Counter>,
    queue_depth: Family<Labels<1>, Gauge>,
    cron_runs: Family<Labels<2>, Counter>,
    channel_up: Family<Labels<1>, Gauge>,
    channel_failures: Family<Labels<1>, Gauge>,
    rss: Gauge,
}

static ENABLED: AtomicBool = AtomicBool::new(true);

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let mut registry = Registry::default();
    let turns = Keyed::new(["agent", "channel", "outcome"]);
    // Counters get `_total` from the encoder: `warren_turns` is scraped as `warren_turns_total`.
    registry.register(
        "warren_turns",
        "Agent turns by agent, channel and outcome",
        turns.family.clone(),
    );
    let turn_duration =
        Family::<Labels<1>, Histogram>::new_with_constructor(|| Histogram::new(TURN_BUCKETS));
    registry.register(
        "warren_turn_duration_seconds",
        "Wall time of agent turns",
        turn_duration.clone(),
    );
    let provider_requests = Keyed::new(["provider", "model", "status"]);
    registry.register(
        "warren_provider_requests",
        "Provider requests by provider, model and status (ok, error)",
        provider_requests.family.clone(),
    );
    let tokens = Keyed::new(["agent", "model", "direction"]);
    registry.register(
        "warren_provider_tokens",
        "Tokens by agent, model and direction (input, output)",
        tokens.family.clone(),
    );
    let cost = Keyed::new(["agent", "model"]);
    registry.register(
        "warren_cost_usd",
        "Cost in USD at the configured rates, by agent and model",
        cost.family.clone(),
    );
    let tool_calls = Keyed::new(["agent", "tool", "outcome"]);
    registry.register(
        "warren_tool_calls",
        "Tool calls by agent, tool and outcome (ok, error)",
        tool_calls.family.clone(),
    );
    let approvals = Family::default();
    registry.register(
        "warren_approvals",
        "Operator approval decisions by agent",
        approvals.clone(),
    );
    let denials = Family::default();
    registry.register(
        "warren_sandbox_denials",
        "Refusals by a layer of the agent's confinement the daemon enforces (policy, autonomy, network)",
        denials.clone(),
    );
    let queue_depth = Family::default();
    registry.register(
        "warren_session_queue_depth",
        "Turns of the agent waiting for or holding a session slot",
        queue_depth.clone(),
    );
    let cron_runs = Family::default();
    registry.register(
        "warren_cron_runs",
        "Cron runs by job and final status",
        cron_runs.clone(),
    );
    let channel_up = Family::default();
    registry.register(
        "warren_channel_up",
        "1 while the channel completed a round-trip with its platform within its health window",
        channel_up.clone(),
    );
    let channel_failures = Family::default();
    registry.register(
        "warren_channel_consecutive_failures",
        "Failed round-trips of the channel since its last success",
        channel_failures.clone(),
    );
    let rss = Gauge::default();
    registry.register(
        "warren_process_resident_memory_bytes",
        "Resident memory of the process",
        rss.clone(),
    );
    let build = Family::<Labels<1>, Gauge>::default();
    build
        .get_or_create(&[("version", env!("CARGO_PKG_VERSION").to_string())])
        .set(1);
    registry.register("warren_build_info", "The running version", build);
    Metrics {
        registry,
        turns,
        turn_duration,
        provider_requests,
        tokens,
        cost,
        tool_calls,
        approvals,
        denials,
        queue_depth,
        cron_runs,
        channel_up,
        channel_failures,
        rss,
    }
});

/// `[metrics] enabled` (the daemon sets it for each config generation).
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

fn m() -> Option<&'static Metrics> {
    enabled().then(|| &*METRICS)
}

/// A turn ended: `outcome` is `ok`, `error` or `cancelled`.
pub fn turn(agent: &str, channel: &str, outcome: &str, secs: f64) {
    if let Some(m) = m() {
        m.turns.with([agent, channel, outcome], |c| {
            c.inc();
        });
        m.turn_duration
            .get_or_create(&[("agent", agent.into())])
            .observe(secs);
    }
}

/// A provider request returned (`status` `ok`) or failed (`error`).
pub fn provider_request(provider: &str, model: &str, status: &str) {
    if let Some(m) = m() {
        m.provider_requests.with([provider, model, status], |c| {
            c.inc();
        });
    }
}

/// A provider request's usage and its price.
pub fn usage(agent: &str, model: &str, input_tokens: u64, output_tokens: u64, cost_usd: f64) {
    if let Some(m) = m() {
        for (direction, n) in [("input", input_tokens), ("output", output_tokens)] {
            m.tokens.with([agent, model, direction], |c| {
                c.inc_by(n);
            });
        }
        if cost_usd > 0.0 {
            m.cost.with([agent, model], |c| {
                c.inc_by(cost_usd);
            });
        }
    }
}

/// A tool call finished; `tool` must be one of the agent's tools (else pass `unknown`).
pub fn tool_call(agent: &str, tool: &str, ok: bool) {
    if let Some(m) = m() {
        let outcome = if ok { "ok" } else { "error" };
        m.tool_calls.with([agent, tool, outcome], |c| {
            c.inc();
        });
    }
}

/// The operator's (or the timeout's) decision on a call.
pub fn approval(agent: &str, decision: &str) {
    if let Some(m) = m() {
        m.approvals
            .get_or_create(&[("agent", agent.into()), ("decision", decision.into())])
            .inc();
    }
}

/// [`approval`] with the decision's name (`approved`, `denied`, `timed_out`, `no_operator`).
pub fn approval_decision(agent: &str, decision: crate::approval::ApprovalDecision) {
    use crate::approval::ApprovalDecision as D;
    let name = match decision {
        D::Approved => "approved",
        D::Denied => "denied",
        D::TimedOut => "timed_out",
        D::NoOperator => "no_operator",
    };
    approval(agent, name);
}

/// A refusal by a confinement layer the daemon enforces: `policy` (paths, commands, grants),
/// `autonomy` (the profile refuses the call) or `network` (a destination off the allowlist).
/// Kernel refusals inside a sandboxed child (Landlock, seccomp) reach only the audit log.
pub fn denial(agent: &str, layer: &str) {
    if let Some(m) = m() {
        m.denials
            .get_or_create(&[("agent", agent.into()), ("layer", layer.into())])
            .inc();
    }
}

/// A cron run ended with `status`.
pub fn cron_run(job: &str, status: &str) {
    if let Some(m) = m() {
        m.cron_runs
            .get_or_create(&[("job", job.into()), ("status", status.into())])
            .inc();
    }
}

/// A channel's health as measured end to end (issue 38): `up` = a round-trip within its window.
pub fn channel_health(channel: &str, up: bool, failures: u64) {
    if let Some(m) = m() {
        m.channel_up
            .get_or_create(&[("channel", channel.into())])
            .set(i64::from(up));
        m.channel_failures
            .get_or_create(&[("channel", channel.into())])
            .set(i64::try_from(failures).unwrap_or(i64::MAX));
    }
}

/// One turn in the agent's session queue (waiting or running) until dropped.
pub struct QueueSlot(Option<Gauge>);

/// Counts a turn into `agent`'s queue depth until the returned slot is dropped.
pub fn queued(agent: &str) -> QueueSlot {
    QueueSlot(m().map(|m| {
        let gauge = m
            .queue_depth
            .get_or_create(&[("agent", agent.into())])
            .clone();
        gauge.inc();
        gauge
    }))
}

impl Drop for QueueSlot {
    fn drop(&mut self) {
        if let Some(g) = &self.0 {
            g.dec();
        }
    }
}

/// The process's resident memory in bytes (Linux `/proc/self/status`), if readable.
pub fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line
        .trim_start_matches("VmRSS:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// The metrics as OpenMetrics text (the resident memory read fresh); `None` when disabled.
pub fn render() -> Option<String> {
    let m = m()?;
    if let Some(rss) = resident_bytes() {
        m.rss.set(i64::try_from(rss).unwrap_or(i64::MAX));
    }
    let mut out = String::with_capacity(4096);
    encode(&mut out, &m.registry).ok()?;
    Some(out)
}

/// The content type of [`render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_labels_are_the_documented_ones() {
        turn("unit-a", "gateway", "ok", 0.3);
        usage("unit-a", "gpt-x", 12, 5, 0.25);
        tool_call("unit-a", "file_read", true);
        let _slot = queued("unit-a");
        let text = render().unwrap_or_default();
        for needle in [
            r#"warren_turns_total{agent="unit-a",channel="gateway",outcome="ok"} 1"#,
            r#"warren_provider_tokens_total{agent="unit-a",model="gpt-x",direction="input"} 12"#,
            r#"warren_cost_usd_total{agent="unit-a",model="gpt-x"} 0.25"#,
            r#"warren_tool_calls_total{agent="unit-a",tool="file_read",outcome="ok"} 1"#,
            r#"warren_session_queue_depth{agent="unit-a"} 1"#,
            r#"warren_turn_duration_seconds_bucket{le="0.5",agent="unit-a"} 1"#,
            "warren_process_resident_memory_bytes ",
            r#"warren_build_info{version=""#,
        ] {
            assert!(text.contains(needle), "{needle} missing in:\n{text}");
        }
    }
}
