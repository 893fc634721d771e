//! OpenTelemetry traces and the memory self-watch (issue 25; STATE-13, STATE-17).
//!
//! **Traces** (`[telemetry] otlp_endpoint`, off by default): one span per turn
//! (`invoke_agent <alias>`) with a child span per provider request (`chat <model>`) and per
//! tool call (`execute_tool <tool>`), with the OpenTelemetry GenAI semantic-convention
//! attributes (`gen_ai.operation.name`, `gen_ai.agent.name`, `gen_ai.request.model`,
//! `gen_ai.provider.name` and the older `gen_ai.system`, `gen_ai.usage.input_tokens`,
//! `gen_ai.usage.output_tokens`, `gen_ai.tool.name`, `gen_ai.tool.call.id`). Prompt,
//! completion and tool argument/result text (`gen_ai.input.messages`,
//! `gen_ai.output.messages`, `gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`) are
//! exported only with `capture_content = true`, and every exported string passes through the
//! config's [`Redactor`] first, so configured secrets never leave. Finished spans wait in a
//! bounded queue and are POSTed as OTLP/HTTP protobuf ([`otlp`]) every `export_interval_ms`.
//!
//! The turn door wraps each turn in [`turn`], which also counts it in [`crate::metrics`];
//! the loop reports provider requests ([`provider_call`], [`provider_failed`]) and tool calls
//! ([`tool_call`]) with one call each. A turn's span context is task-local, so the loop's
//! spans find their parent without it being passed around.
//!
//! **Self-watch**: the daemon's [`start`] subsystem reads the resident memory every
//! `rss_interval_secs` (first at start) and records it in the trace (a `self_watch` span with
//! `process.memory.usage`, when export is on; the `warren_process_resident_memory_bytes` gauge
//! is read fresh at each scrape); past `rss_ceiling_mb` it warns once in the log, and
//! `/api/health` reports it ([`memory_health`]).

pub mod otlp;

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;
use tokio::sync::oneshot;
use warren_config::Redactor;
use warren_config::schema::TelemetryConfig;
use warren_core::Usage;
use warren_providers::{ChatRequest, ChatResponse};

use crate::subsystem::RunningSubsystem;

/// Spans kept waiting for export at most; more are dropped (and counted in the log).
const MAX_QUEUED: usize = 4096;
/// Longest captured text per attribute, in bytes.
const MAX_CONTENT: usize = 16 * 1024;

/// An attribute value.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    Str(String),
    Bool(bool),
    Int(i64),
    Double(f64),
}

/// OTLP `SpanKind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    Internal = 1,
    Client = 3,
}

/// A finished span.
#[derive(Debug, Clone)]
pub struct SpanData {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub parent: Option<[u8; 8]>,
    pub name: String,
    pub kind: SpanKind,
    pub start_ns: u64,
    pub end_ns: u64,
    pub attributes: Vec<(&'static str, AttrValue)>,
    /// The error kind when the operation failed (span status ERROR).
    pub error: Option<String>,
}

/// What the running generation's `[telemetry]` says about export.
struct Settings {
    url: String,
    service: String,
    capture: bool,
    redactor: Redactor,
}

static ON: AtomicBool = AtomicBool::new(false);
static SETTINGS: RwLock<Option<Arc<Settings>>> = RwLock::new(None);
static QUEUE: Mutex<Vec<SpanData>> = Mutex::new(Vec::new());
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// The span a task's work belongs to.
#[derive(Debug, Clone, Copy)]
struct Ctx {
    trace_id: [u8; 16],
    span_id: [u8; 8],
}

tokio::task_local! {
    static CURRENT: Ctx;
}

fn settings() -> Option<Arc<Settings>> {
    if !ON.load(Ordering::Relaxed) {
        return None;
    }
    SETTINGS
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .map(Arc::clone)
}

/// Nanoseconds since the Unix epoch (span times).
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The start of a span the loop may report: [`now_ns`] while spans are exported, else 0 (no
/// clock read per provider request and tool call for spans nobody exports). A span whose
/// start is 0 (export was turned on while it ran) is not exported.
pub fn span_start() -> u64 {
    if ON.load(Ordering::Relaxed) {
        now_ns()
    } else {
        0
    }
}

/// The spans to build for an operation that started at `start_ns` ([`span_start`]).
fn span_settings(start_ns: u64) -> Option<Arc<Settings>> {
    if start_ns == 0 {
        return None;
    }
    settings()
}

fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    if getrandom::fill(&mut b).is_err() || b.iter().all(|x| *x == 0) {
        // An all-zero id is invalid in OTLP; the clock is a fallback that never repeats soon.
        let t = now_ns().to_le_bytes();
        for (i, x) in b.iter_mut().enumerate() {
            *x = t[i % 8] ^ (i as u8 + 1);
        }
    }
    b
}

fn push(span: SpanData) {
    let mut queue = QUEUE.lock().unwrap_or_else(|p| p.into_inner());
    if queue.len() >= MAX_QUEUED {
        DROPPED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    queue.push(span);
}

/// A child of the task's current span (or a new trace's root).
fn child_of_current() -> (Ctx, Option<[u8; 8]>) {
    match CURRENT.try_with(|c| *c) {
        Ok(parent) => (
            Ctx {
                trace_id: parent.trace_id,
                span_id: random(),
            },
            Some(parent.span_id),
        ),
        Err(_) => (
            Ctx {
                trace_id: random(),
                span_id: random(),
            },
            None,
        ),
    }
}

impl Settings {
    /// `text` as an attribute: redacted of secrets, cut at [`MAX_CONTENT`].
    fn content(&self, text: &str) -> AttrValue {
        let mut s = self.redactor.redact(text).into_owned();
        if s.len() > MAX_CONTENT {
            let mut cut = MAX_CONTENT;
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            s.truncate(cut);
            s.push_str("…[truncated]");
        }
        AttrValue::Str(s)
    }

    /// A name-like value (alias, model, tool): redacted too, never cut.
    fn name(&self, text: &str) -> AttrValue {
        AttrValue::Str(self.redactor.redact(text).into_owned())
    }
}

fn messages_json(messages: impl IntoIterator<Item = (String, String)>) -> String {
    let list: Vec<serde_json::Value> = messages
        .into_iter()
        .map(|(role, text)| json!({"role": role, "parts": [{"type": "text", "content": text}]}))
        .collect();
    serde_json::Value::Array(list).to_string()
}

fn tokens(n: u64) -> AttrValue {
    AttrValue::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

/// What the `invoke_agent` span and the turn metrics read of a turn that ended: implemented by
/// the loop's outcome (`crate::turn::TurnOutcome`), so telemetry does not know the loop.
pub trait TurnReport {
    /// Input and output tokens of every provider request of the turn.
    fn tokens(&self) -> (u64, u64);
    /// Provider requests and tool calls of the turn.
    fn calls(&self) -> (u32, u32);
    /// The reply (recorded only with content capture on).
    fn reply(&self) -> &str;
}

/// What the span and the metrics read of a turn that failed: implemented by the loop's error.
pub trait TurnFailure {
    /// The error kind (span status and `error.type`; never free text).
    fn kind(&self) -> &'static str;
    /// Whether the turn was cancelled (counted apart from errors).
    fn cancelled(&self) -> bool;
}

/// Runs one turn (`fut`) of `agent` on `channel` as the `invoke_agent` span, the parent of
/// the turn's provider and tool spans, and counts it (`warren_turns_total`,
/// `warren_turn_duration_seconds`).
pub async fn turn<T, E, F>(
    agent: &str,
    model: &str,
    channel: &str,
    input: &str,
    fut: F,
) -> Result<T, E>
where
    T: TurnReport,
    E: TurnFailure,
    F: Future<Output = Result<T, E>>,
{
    let started = Instant::now();
    let start_ns = now_ns();
    // Span ids only when spans are exported (no random draw per turn otherwise).
    let span = settings().map(|s| (s, child_of_current()));
    let result = match &span {
        Some((_, (ctx, _))) => CURRENT.scope(*ctx, fut).await,
        None => fut.await,
    };
    let outcome = match &result {
        Ok(_) => "ok",
        Err(e) if e.cancelled() => "cancelled",
        Err(_) => "error",
    };
    crate::metrics::turn(agent, channel, outcome, started.elapsed().as_secs_f64());
    if let Some((s, (ctx, parent))) = span {
        let mut attributes = vec![
            (
                "gen_ai.operation.name",
                AttrValue::Str("invoke_agent".into()),
            ),
            ("gen_ai.agent.name", s.name(agent)),
            ("gen_ai.request.model", s.name(model)),
            ("warren.channel", AttrValue::Str(channel.into())),
        ];
        let mut error = None;
        match &result {
            Ok(o) => {
                let ((input_tokens, output_tokens), (provider_calls, tool_calls)) =
                    (o.tokens(), o.calls());
                attributes.extend([
                    ("gen_ai.usage.input_tokens", tokens(input_tokens)),
                    ("gen_ai.usage.output_tokens", tokens(output_tokens)),
                    (
                        "warren.provider_calls",
                        AttrValue::Int(provider_calls.into()),
                    ),
                    ("warren.tool_calls", AttrValue::Int(tool_calls.into())),
                ]);
                if s.capture {
                    attributes.push((
                        "gen_ai.output.messages",
                        s.content(&messages_json([(
                            "assistant".into(),
                            o.reply().to_string(),
                        )])),
                    ));
                }
            }
            Err(e) => {
                let kind = e.kind();
                attributes.push(("error.type", AttrValue::Str(kind.into())));
                error = Some(kind.to_string());
            }
        }
        if s.capture {
            attributes.push((
                "gen_ai.input.messages",
                s.content(&messages_json([("user".into(), input.to_string())])),
            ));
        }
        push(SpanData {
            trace_id: ctx.trace_id,
            span_id: ctx.span_id,
            parent,
            name: format!("invoke_agent {agent}"),
            kind: SpanKind::Internal,
            start_ns,
            end_ns: now_ns(),
            attributes,
            error,
        });
    }
    result
}

/// A provider request that returned: its metrics (request, tokens, cost) and its `chat` span.
#[allow(clippy::too_many_arguments)] // one call site, each argument a fact of the request
pub fn provider_call(
    agent: &str,
    provider: &str,
    model: &str,
    start_ns: u64,
    usage: Usage,
    cost_usd: f64,
    request: &ChatRequest,
    response: &ChatResponse,
) {
    crate::metrics::provider_request(provider, model, "ok");
    crate::metrics::usage(
        agent,
        model,
        usage.input_tokens,
        usage.output_tokens,
        cost_usd,
    );
    let Some(s) = span_settings(start_ns) else {
        return;
    };
    let mut attributes = chat_attributes(&s, provider, model);
    attributes.extend([
        ("gen_ai.usage.input_tokens", tokens(usage.input_tokens)),
        ("gen_ai.usage.output_tokens", tokens(usage.output_tokens)),
        ("warren.cost_usd", AttrValue::Double(cost_usd)),
        (
            "warren.tool_calls",
            AttrValue::Int(i64::try_from(response.tool_calls.len()).unwrap_or(i64::MAX)),
        ),
    ]);
    if s.capture {
        let input = request
            .messages
            .iter()
            .map(|m| (format!("{:?}", m.role).to_lowercase(), m.content.clone()));
        attributes.push(("gen_ai.input.messages", s.content(&messages_json(input))));
        attributes.push((
            "gen_ai.output.messages",
            s.content(&messages_json([(
                "assistant".into(),
                response.text.clone(),
            )])),
        ));
    }
    push_child(
        format!("chat {model}"),
        SpanKind::Client,
        start_ns,
        attributes,
        None,
    );
}

/// A provider request that failed (`error_type`: a fixed word such as `provider`).
pub fn provider_failed(provider: &str, model: &str, start_ns: u64, error_type: &str) {
    crate::metrics::provider_request(provider, model, "error");
    let Some(s) = span_settings(start_ns) else {
        return;
    };
    let mut attributes = chat_attributes(&s, provider, model);
    attributes.push(("error.type", AttrValue::Str(error_type.into())));
    push_child(
        format!("chat {model}"),
        SpanKind::Client,
        start_ns,
        attributes,
        Some(error_type.to_string()),
    );
}

fn chat_attributes(s: &Settings, provider: &str, model: &str) -> Vec<(&'static str, AttrValue)> {
    vec![
        ("gen_ai.operation.name", AttrValue::Str("chat".into())),
        ("gen_ai.provider.name", s.name(provider)),
        ("gen_ai.system", s.name(provider)),
        ("gen_ai.request.model", s.name(model)),
    ]
}

/// A tool call that finished (`tool`: one of the agent's tools or `unknown`; `times`: its
/// start and end): `warren_tool_calls_total` and its `execute_tool` span.
pub fn tool_call(
    agent: &str,
    tool: &str,
    call_id: &str,
    times: (u64, u64),
    ok: bool,
    arguments: &serde_json::Value,
    result: &str,
) {
    crate::metrics::tool_call(agent, tool, ok);
    let Some(s) = span_settings(times.0) else {
        return;
    };
    let mut attributes = vec![
        (
            "gen_ai.operation.name",
            AttrValue::Str("execute_tool".into()),
        ),
        ("gen_ai.tool.name", s.name(tool)),
        ("gen_ai.tool.call.id", s.name(call_id)),
        ("gen_ai.agent.name", s.name(agent)),
    ];
    if s.capture {
        attributes.push((
            "gen_ai.tool.call.arguments",
            s.content(&arguments.to_string()),
        ));
        attributes.push(("gen_ai.tool.call.result", s.content(result)));
    }
    let error = (!ok).then(|| "tool_error".to_string());
    if error.is_some() {
        attributes.push(("error.type", AttrValue::Str("tool_error".into())));
    }
    let (start, end) = times;
    let (ctx, parent) = child_of_current();
    push(SpanData {
        trace_id: ctx.trace_id,
        span_id: ctx.span_id,
        parent,
        name: format!("execute_tool {tool}"),
        kind: SpanKind::Internal,
        start_ns: start,
        end_ns: end.max(start),
        attributes,
        error,
    });
}

fn push_child(
    name: String,
    kind: SpanKind,
    start_ns: u64,
    attributes: Vec<(&'static str, AttrValue)>,
    error: Option<String>,
) {
    let (ctx, parent) = child_of_current();
    push(SpanData {
        trace_id: ctx.trace_id,
        span_id: ctx.span_id,
        parent,
        name,
        kind,
        start_ns,
        end_ns: now_ns(),
        attributes,
        error,
    });
}

/// The memory self-watch's last reading.
#[derive(Debug, Clone, Copy, Default)]
struct Watch {
    rss: u64,
    ceiling: Option<u64>,
}

static WATCH: Mutex<Watch> = Mutex::new(Watch {
    rss: 0,
    ceiling: None,
});
static WARNED: AtomicBool = AtomicBool::new(false);

/// `/api/health`'s `resident_memory`: `ok`, or `warning` past `[telemetry] rss_ceiling_mb`.
pub fn memory_health() -> serde_json::Value {
    let w = *WATCH.lock().unwrap_or_else(|p| p.into_inner());
    let over = w.ceiling.is_some_and(|c| w.rss > c);
    let mut v = json!({
        "status": if over { "warning" } else { "ok" },
        "rss_bytes": w.rss,
        "ceiling_bytes": w.ceiling,
    });
    if over {
        v["warning"] = format!(
            "resident memory {} MiB is past the ceiling of {} MiB ([telemetry] rss_ceiling_mb)",
            w.rss / (1024 * 1024),
            w.ceiling.unwrap_or_default() / (1024 * 1024)
        )
        .into();
    }
    v
}

/// One self-watch reading: the health report, a `self_watch` span, the ceiling check.
fn watch_once(ceiling: Option<u64>) {
    let Some(rss) = crate::metrics::resident_bytes() else {
        return;
    };
    *WATCH.lock().unwrap_or_else(|p| p.into_inner()) = Watch { rss, ceiling };
    tracing::debug!(rss_bytes = rss, "self-watch");
    if settings().is_some() {
        let now = now_ns();
        push(SpanData {
            trace_id: random(),
            span_id: random(),
            parent: None,
            name: "self_watch".into(),
            kind: SpanKind::Internal,
            start_ns: now,
            end_ns: now,
            attributes: vec![(
                "process.memory.usage",
                AttrValue::Int(i64::try_from(rss).unwrap_or(i64::MAX)),
            )],
            error: None,
        });
    }
    if let Some(c) = ceiling
        && rss > c
        && !WARNED.swap(true, Ordering::Relaxed)
    {
        tracing::warn!(
            rss_mib = rss / (1024 * 1024),
            ceiling_mib = c / (1024 * 1024),
            "resident memory is past [telemetry] rss_ceiling_mb (said once per process; /api/health reports it)"
        );
    }
}

/// An OTLP export that failed: the collector (its URL masked) and why.
#[derive(Debug, thiserror::Error)]
enum ExportError {
    #[error("OTLP export to {url}: {cause}")]
    Send { url: String, cause: ureq::Error },
    #[error("OTLP export to {url}: HTTP {status}")]
    Status { url: String, status: u16 },
}

/// Sends the waiting spans (blocking: run off the async workers). Errors are returned with the
/// URL masked.
fn flush(settings: &Settings) -> Result<usize, ExportError> {
    let spans = std::mem::take(&mut *QUEUE.lock().unwrap_or_else(|p| p.into_inner()));
    if spans.is_empty() {
        return Ok(0);
    }
    let body = otlp::encode_request(&settings.service, &spans);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let shown = warren_config::redact::mask_url(&settings.url);
    let response = agent
        .post(&settings.url)
        .header("Content-Type", "application/x-protobuf")
        .send(&body[..])
        .map_err(|cause| ExportError::Send {
            url: shown.clone(),
            cause,
        })?;
    let status = response.status().as_u16();
    if (200..300).contains(&status) {
        Ok(spans.len())
    } else {
        Err(ExportError::Status { url: shown, status })
    }
}

/// Applies a generation's `[metrics] enabled` and `[telemetry]` (export on when
/// `otlp_endpoint` is set); secrets of `redactor` never leave in a span.
pub fn configure(metrics_enabled: bool, telemetry: &TelemetryConfig, redactor: Redactor) {
    crate::metrics::set_enabled(metrics_enabled);
    let settings = telemetry.traces_url().map(|url| {
        Arc::new(Settings {
            url,
            service: telemetry.service_name.clone(),
            capture: telemetry.capture_content,
            redactor,
        })
    });
    ON.store(settings.is_some(), Ordering::Relaxed);
    *SETTINGS.write().unwrap_or_else(|p| p.into_inner()) = settings;
}

/// The daemon's telemetry subsystem for one generation: applies its config, exports spans
/// every `export_interval_ms` and watches the resident memory every `rss_interval_secs`;
/// at stop the waiting spans are sent.
pub fn start(config: &warren_config::Config) -> RunningSubsystem {
    configure(
        config.metrics.enabled,
        &config.telemetry,
        Redactor::from_config(config),
    );
    exporter(&config.telemetry, true)
}

/// Span export for a process that runs turns without the daemon (`warren agent`, one-shot or
/// REPL): with `[telemetry] otlp_endpoint` set, applies `[telemetry]` as a daemon generation
/// does and exports every `export_interval_ms`; stopping it sends the spans still waiting, so
/// a one-shot turn's spans leave before the process exits. No self-watch (the daemon's).
/// `None` when export is off. Call inside a Tokio runtime.
pub fn start_for_process(config: &warren_config::Config) -> Option<RunningSubsystem> {
    config.telemetry.traces_url()?;
    configure(
        crate::metrics::enabled(),
        &config.telemetry,
        Redactor::from_config(config),
    );
    Some(exporter(&config.telemetry, false))
}

/// The export task (and, with `watch`, the memory self-watch) until stopped; at stop the
/// waiting spans are sent.
fn exporter(telemetry: &TelemetryConfig, watch: bool) -> RunningSubsystem {
    let t = telemetry.clone();
    let ceiling = t.rss_ceiling_mb.map(|mb| mb.saturating_mul(1024 * 1024));
    let (stop, mut stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let mut export = tokio::time::interval(Duration::from_millis(t.export_interval_ms));
        let mut rss = tokio::time::interval(Duration::from_secs(t.rss_interval_secs));
        export.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        rss.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            let last = tokio::select! {
                _ = &mut stopped => true,
                _ = export.tick() => false,
                _ = rss.tick(), if watch => {
                    watch_once(ceiling);
                    continue;
                }
            };
            if let Some(s) = settings() {
                let sent = tokio::task::spawn_blocking(move || flush(&s)).await;
                match sent {
                    Ok(Ok(_)) => failing = false,
                    Ok(Err(e)) if !failing => {
                        failing = true;
                        tracing::warn!(
                            "{e} (spans of this batch dropped; said again after the next success)"
                        );
                    }
                    _ => {}
                }
                let dropped = DROPPED.swap(0, Ordering::Relaxed);
                if dropped > 0 {
                    tracing::warn!(dropped, "trace spans dropped: the export queue was full");
                }
            }
            if last {
                break;
            }
        }
    });
    RunningSubsystem::new("telemetry", stop, task)
}
