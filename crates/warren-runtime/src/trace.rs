//! The runtime trace (STATE-13): structured events (turn, provider call, tool call, approval,
//! receipt, error) emitted through `tracing`, sent on a broadcast channel (the gateway's live
//! stream; it gets events even when persistence is off) and persisted to
//! `data/state/runtime-trace.jsonl` by `[log] persistence`:
//! `rolling` (the file is rotated to `runtime-trace.jsonl.1` when it passes `[log] max_bytes`),
//! `full` (never rotated) or `none`.
//!
//! Secrets are redacted before an event leaves this module, by the one
//! [`warren_config::Redactor`] built from the config: every string of the event (keys and
//! values) loses each run of 8+ characters of a configured secret (a provider key, an
//! `api_key_env` key, a database password), so a provider's error body that echoes the key
//! without its `sk-` prefix or only its tail is caught too. Logs are evidence, never a source
//! of config or session state.

use std::path::PathBuf;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use tokio::sync::broadcast;
use warren_config::schema::{LogConfig, LogPersistence};
use warren_config::{Config, InstallRoot, Redactor};
use warren_core::AgentAlias;

use crate::appendfile::AppendFile;

/// One trace event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceEvent {
    pub time: String,
    /// `turn_start`, `turn_end`, `provider_call`, `tool_call`, `approval`, `notice`, `error`.
    pub kind: String,
    /// The agent the event is about (every event names one; a line naming no valid alias is
    /// skipped when read back, like any bad line).
    pub agent: AgentAlias,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    pub data: serde_json::Value,
}

/// The trace sink of a process.
pub struct Trace {
    /// The trace file, kept open (a rotation, by this or another process, makes the next
    /// write reopen the path).
    file: Option<Mutex<AppendFile>>,
    persistence: LogPersistence,
    max_bytes: u64,
    redactor: Redactor,
    live: broadcast::Sender<TraceEvent>,
}

impl std::fmt::Debug for Trace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trace")
            .field("persistence", &self.persistence)
            .finish_non_exhaustive()
    }
}

impl Trace {
    /// The trace of `root` as `[log]` configures it; secrets of `config` are redacted.
    pub fn new(root: &InstallRoot, config: &Config) -> Self {
        Self::with(
            root.runtime_trace(),
            &config.log,
            Redactor::from_config(config),
        )
    }

    /// A trace writing to `path` (tests).
    pub fn with(path: PathBuf, log: &LogConfig, redactor: Redactor) -> Self {
        let (live, _) = broadcast::channel(1024);
        Self {
            file: (log.persistence != LogPersistence::None)
                .then(|| Mutex::new(AppendFile::new(path))),
            persistence: log.persistence,
            max_bytes: log.max_bytes,
            redactor,
            live,
        }
    }

    /// A trace that only broadcasts.
    pub fn disabled() -> Self {
        let (live, _) = broadcast::channel(16);
        Self {
            file: None,
            persistence: LogPersistence::None,
            max_bytes: 0,
            redactor: Redactor::default(),
            live,
        }
    }

    /// Live events (the gateway's stream).
    pub fn subscribe(&self) -> broadcast::Receiver<TraceEvent> {
        self.live.subscribe()
    }

    /// Whether an emitted event would reach anyone (the file, a live subscriber or a
    /// `tracing` subscriber); when not, callers skip building the event.
    pub fn active(&self) -> bool {
        // The subscriber count takes the channel's lock: asked last.
        self.file.is_some()
            || tracing::enabled!(target: "warren::trace", tracing::Level::DEBUG)
            || self.live.receiver_count() > 0
    }

    /// Emits one event whose data is built only when someone would see it.
    pub fn emit_with(
        &self,
        kind: &str,
        agent: &AgentAlias,
        session: Option<&str>,
        data: impl FnOnce() -> serde_json::Value,
    ) {
        if !self.active() {
            return; // nobody would see it
        }
        let logged = tracing::enabled!(target: "warren::trace", tracing::Level::DEBUG);
        let mut data = data();
        redact_value(&self.redactor, &mut data);
        if logged {
            tracing::debug!(target: "warren::trace", kind, agent = agent.as_str(), session, data = %data, "trace");
        }
        let event = TraceEvent {
            time: OffsetDateTime::now_utc()
                .format(&Rfc3339)
                .unwrap_or_default(),
            kind: kind.to_string(),
            agent: agent.clone(),
            session: session.map(str::to_string),
            data,
        };
        if let Some(file) = &self.file
            && let Err(e) = self.persist(file, &event)
        {
            tracing::warn!("runtime trace not written: {e}");
        }
        let _ = self.live.send(event);
    }

    /// Emits one event.
    pub fn emit(
        &self,
        kind: &str,
        agent: &AgentAlias,
        session: Option<&str>,
        data: serde_json::Value,
    ) {
        self.emit_with(kind, agent, session, || data);
    }

    /// Appends `event` through the kept handle; `rolling` rotates at `[log] max_bytes`.
    fn persist(&self, file: &Mutex<AppendFile>, event: &TraceEvent) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(event).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let rotate_at = (self.persistence == LogPersistence::Rolling).then_some(self.max_bytes);
        file.lock()
            .unwrap_or_else(|p| p.into_inner())
            .append(&line, rotate_at)
            .map(|_| ())
    }
}

/// Redacts every string of `value` in place: object keys and values, at any depth. Working on
/// the strings (not on the JSON text) keeps escapes and structure intact.
pub fn redact_value(redactor: &Redactor, value: &mut serde_json::Value) {
    if redactor.is_empty() {
        return;
    }
    match value {
        serde_json::Value::String(s) => {
            redactor.redact_in_place(s);
        }
        serde_json::Value::Array(items) => {
            for item in items {
                redact_value(redactor, item);
            }
        }
        serde_json::Value::Object(map) => {
            if map.keys().any(|k| redactor.leaks(k)) {
                let old = std::mem::take(map);
                for (k, v) in old {
                    map.insert(redactor.redact(&k).into_owned(), v);
                }
            }
            for v in map.values_mut() {
                redact_value(redactor, v);
            }
        }
        _ => {}
    }
}

/// Redacts an event read back from disk (`warren logs`, `GET /api/logs`): a trace written
/// before a key was configured, or by an older version, is shown without it.
pub fn redact_event(redactor: &Redactor, event: &mut TraceEvent) {
    redact_value(redactor, &mut event.data);
    if let Some(session) = event.session.as_mut() {
        redactor.redact_in_place(session);
    }
}

/// Reads the events of a trace file (and its rotated predecessor first); bad lines skipped.
pub fn read_trace(path: &std::path::Path) -> Vec<TraceEvent> {
    let mut rotated = path.to_path_buf().into_os_string();
    rotated.push(".1");
    [PathBuf::from(rotated), path.to_path_buf()]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .flat_map(|text| {
            text.lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alias(s: &str) -> AgentAlias {
        AgentAlias::new(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn secrets_are_redacted_and_rolling_rotates_state13() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("runtime-trace.jsonl");
        let log = LogConfig {
            persistence: LogPersistence::Rolling,
            max_bytes: 300,
            level: "info".into(),
        };
        let trace = Trace::with(path.clone(), &log, Redactor::new(["sk-very-secret"]));
        let mut live = trace.subscribe();
        for i in 0..10 {
            trace.emit(
                "error",
                &alias("a"),
                None,
                serde_json::json!({"n": i, "msg": "key sk-very-secret"}),
            );
        }
        let all = read_trace(&path);
        assert!(
            !all.is_empty() && all.len() < 10,
            "old events rotated away: {}",
            all.len()
        );
        assert_eq!(
            all.last().map(|e| e.data["n"].clone()),
            Some(serde_json::json!(9))
        );
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(!text.contains("sk-very-secret") && text.contains("[redacted]"));
        assert!(live.try_recv().is_ok(), "live subscribers get events");
    }

    /// A provider's 401 body that echoes derived forms of the key (without its `sk-` prefix,
    /// its last 12 characters, the key minus one character) reaches neither the trace file nor
    /// the live stream (CFG-6, STATE-13).
    #[test]
    fn derived_key_forms_in_a_provider_401_body_are_redacted_state13() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("runtime-trace.jsonl");
        let log = LogConfig {
            persistence: LogPersistence::Full,
            ..LogConfig::default()
        };
        let key = "sk-live-7Hq2Lp9XcV4mNb8RtZ1w";
        let mut config = Config::default();
        config.providers.insert(
            "openai".into(),
            warren_config::schema::ProviderConfig {
                api_key: Some(warren_config::Secret::new(key)),
                ..Default::default()
            },
        );
        let trace = Trace::with(path.clone(), &log, Redactor::from_config(&config));
        let mut live = trace.subscribe();
        let forms = [
            key.trim_start_matches("sk-"),
            &key[key.len() - 12..],
            &key[..key.len() - 1],
        ];
        let body = format!(
            "HTTP 401: {{\"error\":{{\"message\":\"Incorrect API key provided: {}; tail {}; {}\"}}}}",
            forms[0], forms[1], forms[2]
        );
        trace.emit(
            "error",
            &alias("main"),
            None,
            serde_json::json!({"provider": "openai", "message": body, forms[1]: "as a key"}),
        );
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let streamed = live
            .try_recv()
            .map(|e| e.data.to_string())
            .unwrap_or_default();
        for form in forms {
            assert!(!text.contains(form), "{form} in the trace file: {text}");
            assert!(!streamed.contains(form), "{form} streamed: {streamed}");
        }
        assert!(
            text.contains("Incorrect API key provided: [redacted]"),
            "{text}"
        );
        let events = read_trace(&path);
        assert_eq!(events.len(), 1, "still valid JSON lines");
    }

    #[test]
    fn events_read_back_are_redacted_again() {
        let mut event = TraceEvent {
            time: String::new(),
            kind: "error".into(),
            agent: alias("a"),
            session: None,
            data: serde_json::json!({"m": ["x", {"n": "key 7Hq2Lp9XcV4m"}]}),
        };
        redact_event(&Redactor::new(["sk-live-7Hq2Lp9XcV4mNb8RtZ1w"]), &mut event);
        assert_eq!(
            event.data,
            serde_json::json!({"m": ["x", {"n": "key [redacted]"}]})
        );
    }

    #[test]
    fn persistence_none_writes_nothing_but_still_broadcasts() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("t.jsonl");
        let log = LogConfig {
            persistence: LogPersistence::None,
            ..LogConfig::default()
        };
        let trace = Trace::with(path.clone(), &log, Redactor::default());
        let mut live = trace.subscribe();
        trace.emit("turn_start", &alias("a"), None, serde_json::json!({}));
        assert!(!path.exists());
        assert!(live.try_recv().is_ok());
    }
}
