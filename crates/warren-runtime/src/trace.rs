//! The runtime trace (STATE-13): structured events (turn, provider call, tool call, approval,
//! receipt, error) emitted through `tracing`, sent on a broadcast channel (the gateway's live
//! stream; it gets events even when persistence is off) and persisted to
//! `data/state/runtime-trace.jsonl` by `[log] persistence`:
//! `rolling` (the file is rotated to `runtime-trace.jsonl.1` when it passes `[log] max_bytes`),
//! `full` (never rotated) or `none`.
//!
//! Secrets are redacted before an event leaves this module: every configured secret value
//! (provider API keys, ...) is replaced by `[redacted]`. Logs are evidence, never a source of
//! config or session state.

use std::path::PathBuf;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use tokio::sync::broadcast;
use warren_config::schema::{LogConfig, LogPersistence};
use warren_config::{Config, InstallRoot};

use crate::appendfile::AppendFile;

/// One trace event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceEvent {
    pub time: String,
    /// `turn_start`, `turn_end`, `provider_call`, `tool_call`, `approval`, `notice`, `error`.
    pub kind: String,
    pub agent: String,
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
    secrets: Vec<String>,
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
        let mut config = config.clone();
        let secrets = config
            .secrets_mut()
            .into_iter()
            .map(|(_, s)| s.expose().to_string())
            .filter(|s| s.len() >= 4)
            .collect();
        Self::with(root.runtime_trace(), &config.log, secrets)
    }

    /// A trace writing to `path` (tests).
    pub fn with(path: PathBuf, log: &LogConfig, secrets: Vec<String>) -> Self {
        let (live, _) = broadcast::channel(1024);
        Self {
            file: (log.persistence != LogPersistence::None)
                .then(|| Mutex::new(AppendFile::new(path))),
            persistence: log.persistence,
            max_bytes: log.max_bytes,
            secrets,
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
            secrets: Vec::new(),
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
        agent: &str,
        session: Option<&str>,
        data: impl FnOnce() -> serde_json::Value,
    ) {
        if !self.active() {
            return; // nobody would see it
        }
        let logged = tracing::enabled!(target: "warren::trace", tracing::Level::DEBUG);
        let mut data = data();
        if !self.secrets.is_empty() || logged {
            let mut text = data.to_string();
            let mut redacted = false;
            for s in &self.secrets {
                if text.contains(s.as_str()) {
                    text = text.replace(s.as_str(), "[redacted]");
                    redacted = true;
                }
            }
            if redacted {
                data = serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
            }
            if logged {
                tracing::debug!(target: "warren::trace", kind, agent, session, data = %text, "trace");
            }
        }
        let event = TraceEvent {
            time: OffsetDateTime::now_utc()
                .format(&Rfc3339)
                .unwrap_or_default(),
            kind: kind.to_string(),
            agent: agent.to_string(),
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
    pub fn emit(&self, kind: &str, agent: &str, session: Option<&str>, data: serde_json::Value) {
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

    #[test]
    fn secrets_are_redacted_and_rolling_rotates_state13() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("runtime-trace.jsonl");
        let log = LogConfig {
            persistence: LogPersistence::Rolling,
            max_bytes: 300,
            level: "info".into(),
        };
        let trace = Trace::with(path.clone(), &log, vec!["sk-very-secret".into()]);
        let mut live = trace.subscribe();
        for i in 0..10 {
            trace.emit(
                "error",
                "a",
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

    #[test]
    fn persistence_none_writes_nothing_but_still_broadcasts() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("t.jsonl");
        let log = LogConfig {
            persistence: LogPersistence::None,
            ..LogConfig::default()
        };
        let trace = Trace::with(path.clone(), &log, Vec::new());
        let mut live = trace.subscribe();
        trace.emit("turn_start", "a", None, serde_json::json!({}));
        assert!(!path.exists());
        assert!(live.try_recv().is_ok());
    }
}
