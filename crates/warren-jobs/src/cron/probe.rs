//! Heartbeat checks (STATE-9, issue 17 §4): deterministic probes that decide whether a
//! heartbeat calls the model at all — the agent's workspace changed since the last tick (a
//! fingerprint of names, sizes and mtimes read through confined directory handles, links never
//! followed), a command exited 0 (run as the agent's shell tool: its policy, sandbox and
//! approvals), a session got new messages. An idle heartbeat records its state and moves to
//! its next tick: no run row, no tokens.

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use warren_config::confined::{ConfinedDir, FileKind};
use warren_core::SessionKey;
use warren_store::cron::{Job, RunStatus};
use warren_store::sessions::Page;

use super::Scheduler;
use warren_runtime::cancel::CancelToken;

/// A heartbeat's check, as stored in the job's `probe` column.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probe {
    pub files_changed: bool,
    pub command: Option<String>,
    pub session: Option<String>,
}

/// What the check saw last (the job's `probe_state`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct State {
    files: Option<String>,
    session_seq: Option<u64>,
}

/// Entries of a workspace fingerprint at most (a bound on one tick's work).
const MAX_ENTRIES: usize = 50_000;

impl Scheduler {
    /// Runs `job`'s check: `(Some(why), state)` when it fires, `(None, state)` when idle.
    pub(super) async fn check(&self, job: &Job, probe: &Probe) -> (Option<String>, String) {
        let old: State = job
            .probe_state
            .as_deref()
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default();
        let mut new = old.clone();
        let mut fired = Vec::new();
        if probe.files_changed {
            new.files = self.fingerprint(&job.agent).await;
            if old.files.is_some() && new.files != old.files {
                fired.push("files changed in the workspace".to_string());
            }
        }
        if let Some(session) = &probe.session {
            new.session_seq = self.last_seq(session).await;
            if let (Some(before), Some(now)) = (old.session_seq, new.session_seq)
                && now > before
            {
                fired.push(format!(
                    "{} new message(s) in session {session}",
                    now - before
                ));
            }
        }
        if let Some(command) = &probe.command {
            let result = self.command(job, command, &CancelToken::new()).await;
            if result.status == RunStatus::Ok {
                fired.push(format!("`{command}` exited 0"));
            }
        }
        let state = serde_json::to_string(&new).unwrap_or_default();
        ((!fired.is_empty()).then(|| fired.join("; ")), state)
    }

    /// The current state of `job`'s check without deciding (after a heartbeat run: its own
    /// changes become the baseline).
    pub(super) async fn baseline(&self, job: &Job, probe: &Probe) -> String {
        let mut state = State::default();
        if probe.files_changed {
            state.files = self.fingerprint(&job.agent).await;
        }
        if let Some(session) = &probe.session {
            state.session_seq = self.last_seq(session).await;
        }
        serde_json::to_string(&state).unwrap_or_default()
    }

    async fn fingerprint(&self, agent: &warren_core::AgentAlias) -> Option<String> {
        let dir = self.root.agent_workspace(agent);
        tokio::task::spawn_blocking(move || fingerprint(dir))
            .await
            .ok()
            .flatten()
    }

    async fn last_seq(&self, session: &str) -> Option<u64> {
        let key = SessionKey::new(session).ok()?;
        let sessions = self.host.chat_sessions().await.ok()?;
        match sessions.load(key, Page::Last(1)).await {
            Ok(history) => Some(history.messages.last().map_or(0, |m| m.seq)),
            Err(_) => Some(0),
        }
    }
}

/// A digest of every name below `dir` with its kind, size and mtime (links not followed).
fn fingerprint(dir: PathBuf) -> Option<String> {
    let root = ConfinedDir::open_root(&dir).ok()??;
    let mut hash = Sha256::new();
    let mut stack = vec![(Arc::new(root), PathBuf::new())];
    let mut seen = 0usize;
    while let Some((d, rel)) = stack.pop() {
        let mut entries = d.entries().ok()?;
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, kind) in entries {
            seen += 1;
            if seen > MAX_ENTRIES {
                break;
            }
            let path = rel.join(&name);
            hash.update(path.as_os_str().as_encoded_bytes());
            if let Ok(Some(meta)) = d.stat(&name) {
                hash.update(meta.len.to_le_bytes());
                hash.update(meta.mtime.0.to_le_bytes());
                hash.update(meta.mtime.1.to_le_bytes());
            }
            hash.update([0]);
            if kind == FileKind::Dir
                && let Ok(Some(sub)) = d.open_dir(&name, false)
            {
                stack.push((Arc::new(sub), path));
            }
        }
    }
    Some(warren_core::hex::encode(&hash.finalize()))
}
