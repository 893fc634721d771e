//! Files through the editor (issue 19 §3) and session modes (§1, `session/set_mode`).
//!
//! When the client's `initialize` advertises `fs.readTextFile` / `fs.writeTextFile`, a turn's
//! file tools read and write allowed files with `fs/read_text_file` / `fs/write_text_file`
//! ([`ClientFiles`], lent to the turn as its `warren_tools::ToolContext`), so the editor shows
//! its unsaved buffers to the agent and records the agent's edits. The agent's policy decides
//! first, in the tool: a path it refuses (outside the workspace and grants, a link leading out,
//! a write without a write grant, a call denied approval) is never sent to the client.
//!
//! Modes map onto autonomy levels: `read_only`, `supervised`, `full`, offered up to the agent's
//! configured autonomy; a mode above it is refused. The mode is stored with the session
//! (`acp-sessions.db`) and caps every turn of that session.

use std::path::Path;

use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    FileSystemCapabilities, ReadTextFileRequest, SessionId, SessionMode, SessionModeState,
    WriteTextFileRequest,
};
use agent_client_protocol::{Client, Error, ErrorCode};
use warren_config::schema::Autonomy;
use warren_tools::{BoxFuture, FileTransport, TransportError};

/// The editor's file system, for one session's turn.
pub struct ClientFiles {
    cx: ConnectionTo<Client>,
    session: SessionId,
    fs: FileSystemCapabilities,
}

impl ClientFiles {
    /// `None` when the client offers neither method.
    pub fn new(
        cx: ConnectionTo<Client>,
        session: SessionId,
        fs: &FileSystemCapabilities,
    ) -> Option<Self> {
        (fs.read_text_file || fs.write_text_file).then(|| Self {
            cx,
            session,
            fs: fs.clone(),
        })
    }
}

impl FileTransport for ClientFiles {
    fn reads(&self) -> bool {
        self.fs.read_text_file
    }

    fn writes(&self) -> bool {
        self.fs.write_text_file
    }

    fn read_text<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, Result<String, TransportError>> {
        let sent = self
            .cx
            .send_request(ReadTextFileRequest::new(self.session.clone(), path));
        Box::pin(async move {
            sent.block_task()
                .await
                .map(|r| r.content)
                .map_err(|e| TransportError(Box::new(e)))
        })
    }

    fn write_text<'a>(
        &'a self,
        path: &'a Path,
        content: &'a str,
    ) -> BoxFuture<'a, Result<(), TransportError>> {
        let sent = self.cx.send_request(WriteTextFileRequest::new(
            self.session.clone(),
            path,
            content,
        ));
        Box::pin(async move {
            sent.block_task()
                .await
                .map(|_| ())
                .map_err(|e| TransportError(Box::new(e)))
        })
    }
}

const MODES: [(Autonomy, &str, &str, &str); 3] = [
    (
        Autonomy::ReadOnly,
        "read_only",
        "Read only",
        "Reads only: every call with side effects is refused.",
    ),
    (
        Autonomy::Supervised,
        "supervised",
        "Supervised",
        "Asks before a call that changes files or state.",
    ),
    (
        Autonomy::Full,
        "full",
        "Full",
        "Runs allowed calls without asking (the risk profile's always_ask still asks).",
    ),
];

/// The mode id of `autonomy`.
pub fn mode_id(autonomy: Autonomy) -> &'static str {
    MODES
        .iter()
        .find(|m| m.0 == autonomy)
        .map_or("supervised", |m| m.1)
}

/// The autonomy a stored mode id stands for (`None`: no mode, or one this version does not
/// know: the configured autonomy applies).
pub fn mode_autonomy(mode: Option<&str>) -> Option<Autonomy> {
    let mode = mode?;
    MODES.iter().find(|m| m.1 == mode).map(|m| m.0)
}

/// The modes offered to a session of an agent configured at `configured`, the current one
/// being `current` (capped to `configured`).
pub fn modes(configured: Autonomy, current: Option<Autonomy>) -> SessionModeState {
    let current = current.map_or(configured, |c| c.min(configured));
    let available = MODES
        .iter()
        .filter(|m| m.0 <= configured)
        .map(|(_, id, name, about)| SessionMode::new(*id, *name).description(*about))
        .collect();
    SessionModeState::new(mode_id(current), available)
}

/// The autonomy `requested` names, if the agent (configured at `configured`) may use it.
pub fn allowed_mode(alias: &str, configured: Autonomy, requested: &str) -> Result<Autonomy, Error> {
    let Some(&(autonomy, ..)) = MODES.iter().find(|m| m.1 == requested) else {
        return Err(Error::new(
            ErrorCode::INVALID_PARAMS,
            format!("unknown mode '{requested}'; the modes are read_only, supervised and full"),
        ));
    };
    if autonomy > configured {
        return Err(Error::new(
            ErrorCode::INVALID_PARAMS,
            format!(
                "mode '{requested}' is above agent '{alias}''s configured autonomy '{}'; a session can only lower it (raise autonomy in its risk profile)",
                mode_id(configured)
            ),
        ));
    }
    Ok(autonomy)
}
