//! Session metadata of the JSONL backend (SESS-1): `data/sessions/<key>.meta.json`, a sidecar
//! holding what the append-only message lines cannot (display name, turn state, channel,
//! agent attribution).
//!
//! Writes happen under the sessions-directory lock (SESS-2) and replace the sidecar
//! atomically: a hidden temp file is written and fsynced, renamed over the sidecar, and the
//! directory is fsynced, so a crash leaves the old or the new sidecar, never a torn one. A
//! sidecar that does not parse is an error naming the file (never silently dropped). The
//! JSONL→SQLite migration carries the sidecar into the session row (MIG-1).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use warren_config::atomic::sync_dir;
use warren_core::AgentAlias;

use super::{SessionError, SessionState};

/// Suffix of a session's sidecar, next to `<key>.jsonl`.
pub const META_SUFFIX: &str = ".meta.json";

/// The stored metadata; absent fields mean "not set".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Sidecar {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
}

impl Sidecar {
    pub(crate) fn is_empty(&self) -> bool {
        *self == Sidecar::default()
    }

    /// The state, checked (an unknown word is an error naming the file).
    pub(crate) fn state(&self, path: &Path) -> Result<SessionState, SessionError> {
        match &self.state {
            None => Ok(SessionState::Idle),
            Some(s) => SessionState::parse(s).ok_or_else(|| SessionError::Corrupt {
                path: path.to_path_buf(),
                detail: format!("unknown session state '{s}'"),
            }),
        }
    }

    /// The agent, checked.
    pub(crate) fn agent(&self, path: &Path) -> Result<Option<AgentAlias>, SessionError> {
        self.agent
            .as_deref()
            .map(|a| {
                AgentAlias::new(a).map_err(|e| SessionError::Corrupt {
                    path: path.to_path_buf(),
                    detail: e.to_string(),
                })
            })
            .transpose()
    }
}

/// The sidecar of the session stored in `live` (`<key>.jsonl`).
pub(crate) fn sidecar_path(live: &Path) -> PathBuf {
    let name = live
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name
        .strip_suffix(super::jsonl::LIVE_SUFFIX)
        .unwrap_or(&name);
    live.with_file_name(format!("{stem}{META_SUFFIX}"))
}

/// Reads a sidecar; a missing one is `None`.
pub(crate) fn read(path: &Path) -> Result<Option<Sidecar>, SessionError> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(SessionError::io(path, "read session metadata")(e)),
    };
    let sidecar: Sidecar = serde_json::from_slice(&bytes).map_err(|e| SessionError::Corrupt {
        path: path.to_path_buf(),
        detail: format!("session metadata is not valid: {e}"),
    })?;
    sidecar.state(path)?;
    sidecar.agent(path)?;
    Ok(Some(sidecar))
}

/// Replaces the sidecar atomically (call under the sessions-directory lock); an empty sidecar
/// is removed instead.
pub(crate) fn write(path: &Path, sidecar: &Sidecar) -> Result<(), SessionError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    if sidecar.is_empty() {
        return match fs::remove_file(path) {
            Ok(()) => sync_dir(dir).map_err(SessionError::io(dir, "sync the sessions directory")),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(SessionError::io(path, "remove session metadata")(e)),
        };
    }
    let mut bytes = serde_json::to_vec_pretty(sidecar).map_err(|e| SessionError::Corrupt {
        path: path.to_path_buf(),
        detail: e.to_string(),
    })?;
    bytes.push(b'\n');
    super::jsonl::replace_file(dir, path, &bytes, "write session metadata")
}
