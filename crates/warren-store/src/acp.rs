//! ACP protocol sessions (SPEC SESS-3, STATE-7): `data/sessions/acp-sessions.db` (SQLite, WAL,
//! `synchronous=FULL`), a store separate from chat sessions, opened by the daemon and by RPC
//! contexts. It holds what ACP `session/new`, `session/load` and `session/resume` need: the
//! session id, agent alias, working directory, mode, a reference to the transcript (the chat
//! backend owns the messages, LAYOUT-3), state and UTC timestamps.
//!
//! A closed or killed session is a tombstone: it stays listed by id but can never be loaded,
//! resumed or re-created under the same id, and the first tombstone wins (a later `close`
//! does not turn "killed" into "closed"). The server is `warren acp` (crate `warren-acp`).
//!
//! `acp_transcript` keeps each ACP session's own protocol transcript (prompt and update
//! messages in order), so agent deletion can archive ACP sessions WITH their transcripts and
//! restore them (LIFE-4, BEYOND-1).

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::MutexGuard;

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use warren_config::InstallRoot;
use warren_core::AgentAlias;

use crate::sessions::SessionError;
use crate::sqlite_util::{SharedConn, Sync};
use crate::timefmt;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS acp_sessions (
    session_id TEXT PRIMARY KEY NOT NULL,
    agent      TEXT NOT NULL,
    cwd        TEXT NOT NULL,
    mode       TEXT,
    transcript TEXT,
    state      TEXT NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'closed', 'killed')),
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    closed_at  TEXT
);
CREATE INDEX IF NOT EXISTS acp_sessions_by_agent ON acp_sessions(agent);
CREATE TABLE IF NOT EXISTS acp_transcript (
    session_id TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    role       TEXT NOT NULL,
    content    TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
";

/// The schema version of `acp-sessions.db` (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 2;

const COLUMNS: &str =
    "session_id, agent, cwd, mode, transcript, state, created_at, updated_at, closed_at";

#[derive(Debug, thiserror::Error)]
pub enum AcpError {
    /// As with `SessionError`, the wrapped error's text is in the message and not also
    /// `source()`, so a printed chain names it once.
    #[error("ACP session database {path}: {op}: {cause}")]
    Sqlite {
        path: PathBuf,
        op: &'static str,
        cause: rusqlite::Error,
    },
    #[error(transparent)]
    Open(#[from] SessionError),
    #[error("ACP session '{id}' already exists")]
    Duplicate { id: String },
    #[error("ACP session '{id}' does not exist")]
    NotFound { id: String },
    #[error("ACP session '{id}' was {state}; start a new session")]
    Tombstoned { id: String, state: AcpState },
    #[error("ACP live marker {path}: {op}: {cause}")]
    Live {
        path: PathBuf,
        op: &'static str,
        cause: std::io::Error,
    },
    #[error("{path} holds an unreadable ACP session row: {detail}")]
    Corrupt { path: PathBuf, detail: String },
}

/// Lifecycle of an ACP session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AcpState {
    Active,
    /// Ended by the client (`session/close`).
    Closed,
    /// Ended by an operator or the runtime (kill).
    Killed,
}

impl AcpState {
    pub fn as_str(self) -> &'static str {
        match self {
            AcpState::Active => "active",
            AcpState::Closed => "closed",
            AcpState::Killed => "killed",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        [Self::Active, Self::Closed, Self::Killed]
            .into_iter()
            .find(|v| v.as_str() == s)
    }
}

impl std::fmt::Display for AcpState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One ACP session record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcpSession {
    pub id: String,
    pub agent: AgentAlias,
    pub cwd: String,
    pub mode: Option<String>,
    /// Where the transcript lives (e.g. the chat session key); the messages are not copied.
    pub transcript: Option<String>,
    pub state: AcpState,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    pub closed_at: Option<OffsetDateTime>,
}

/// One message of an ACP session's transcript.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcpMessage {
    pub seq: u64,
    pub role: String,
    pub content: String,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

/// An ACP session with its transcript, as agent deletion archives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcpExport {
    pub session: AcpSession,
    pub transcript: Vec<AcpMessage>,
}

/// What `session/new` records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAcpSession {
    pub id: String,
    pub agent: AgentAlias,
    pub cwd: String,
    pub mode: Option<String>,
    pub transcript: Option<String>,
}

/// The answer to `session/load` and `session/resume`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restore {
    Missing,
    /// Closed or killed: terminal, never restored.
    Tombstoned(AcpSession),
    Restorable(AcpSession),
}

#[derive(Debug)]
pub struct AcpSessionStore {
    path: PathBuf,
    conn: SharedConn,
}

type RawRow = (
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    String,
    String,
    String,
    Option<String>,
);

fn raw(r: &Row<'_>) -> rusqlite::Result<RawRow> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
        r.get(7)?,
        r.get(8)?,
    ))
}

impl AcpSessionStore {
    /// Opens (creating) `data/sessions/acp-sessions.db`.
    pub fn open(root: &InstallRoot) -> Result<Self, AcpError> {
        crate::sessions::ensure_sessions_dir(root)?;
        let path = root.acp_sessions_db();
        // The schema is written once (a write and an fsync); later opens only read the version.
        // A failed migration leaves the store read-only at its old schema (issue 22 §4).
        let conn = warren_config::sqlite::open_migrated(&path, Sync::Full, SCHEMA_VERSION, |c| {
            c.execute_batch(SCHEMA)
        })
        .map_err(err(&path, "open and migrate"))?;
        Ok(Self { conn, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock()
    }

    fn decode(&self, r: RawRow) -> Result<AcpSession, AcpError> {
        let corrupt = |detail: String| AcpError::Corrupt {
            path: self.path.clone(),
            detail,
        };
        let time = |what: &str, t: &str| {
            timefmt::parse(t).ok_or_else(|| corrupt(format!("{what} '{t}' is not RFC 3339")))
        };
        let (id, agent, cwd, mode, transcript, state, created, updated, closed) = r;
        Ok(AcpSession {
            agent: AgentAlias::new(agent).map_err(|e| corrupt(e.to_string()))?,
            state: AcpState::parse(&state).ok_or_else(|| corrupt(format!("state '{state}'")))?,
            created_at: time("created_at", &created)?,
            updated_at: time("updated_at", &updated)?,
            closed_at: closed.map(|c| time("closed_at", &c)).transpose()?,
            id,
            cwd,
            mode,
            transcript,
        })
    }

    /// `session/new`: records a new session. An id in use (even by a tombstone) is refused.
    pub fn create(&self, new: &NewAcpSession) -> Result<AcpSession, AcpError> {
        let now = timefmt::format(timefmt::now());
        let conn = self.conn();
        let inserted = conn
            .execute(
                "INSERT INTO acp_sessions (session_id, agent, cwd, mode, transcript, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6) ON CONFLICT(session_id) DO NOTHING",
                params![new.id, new.agent.as_str(), new.cwd, new.mode, new.transcript, now],
            )
            .map_err(err(&self.path, "create a session"))?;
        if inserted == 0 {
            return Err(AcpError::Duplicate { id: new.id.clone() });
        }
        drop(conn);
        self.get(&new.id)?
            .ok_or_else(|| AcpError::NotFound { id: new.id.clone() })
    }

    /// The record, tombstones included.
    pub fn get(&self, id: &str) -> Result<Option<AcpSession>, AcpError> {
        let row = self
            .conn()
            .query_row(
                &format!("SELECT {COLUMNS} FROM acp_sessions WHERE session_id = ?1"),
                [id],
                raw,
            )
            .optional()
            .map_err(err(&self.path, "read a session"))?;
        row.map(|r| self.decode(r)).transpose()
    }

    /// `session/load`: what may be restored, without changing anything.
    pub fn load(&self, id: &str) -> Result<Restore, AcpError> {
        Ok(match self.get(id)? {
            None => Restore::Missing,
            Some(s) if s.state != AcpState::Active => Restore::Tombstoned(s),
            Some(s) => Restore::Restorable(s),
        })
    }

    /// `session/resume`: like `load`, and marks the session active now.
    pub fn resume(&self, id: &str) -> Result<Restore, AcpError> {
        match self.load(id)? {
            Restore::Restorable(_) => {
                self.touch(id)?;
                self.load(id)
            }
            other => Ok(other),
        }
    }

    fn update_active(&self, id: &str, sql: &str, value: Option<&str>) -> Result<(), AcpError> {
        let now = timefmt::format(timefmt::now());
        let n = self
            .conn()
            .execute(sql, params![id, value, now])
            .map_err(err(&self.path, "update a session"))?;
        if n == 1 {
            return Ok(());
        }
        match self.get(id)? {
            None => Err(AcpError::NotFound { id: id.into() }),
            Some(s) => Err(AcpError::Tombstoned {
                id: id.into(),
                state: s.state,
            }),
        }
    }

    pub fn touch(&self, id: &str) -> Result<(), AcpError> {
        self.update_active(
            id,
            "UPDATE acp_sessions SET updated_at = ?3 WHERE session_id = ?1 AND state = 'active' AND ?2 IS NULL",
            None,
        )
    }

    pub fn set_mode(&self, id: &str, mode: Option<&str>) -> Result<(), AcpError> {
        self.update_active(
            id,
            "UPDATE acp_sessions SET mode = ?2, updated_at = ?3 WHERE session_id = ?1 AND state = 'active'",
            mode,
        )
    }

    pub fn set_transcript(&self, id: &str, transcript: Option<&str>) -> Result<(), AcpError> {
        self.update_active(
            id,
            "UPDATE acp_sessions SET transcript = ?2, updated_at = ?3 WHERE session_id = ?1 AND state = 'active'",
            transcript,
        )
    }

    /// Tombstones the session as `Closed` or `Killed`; the first tombstone is kept.
    pub fn end(&self, id: &str, state: AcpState) -> Result<AcpSession, AcpError> {
        let now = timefmt::format(timefmt::now());
        let state = if state == AcpState::Active {
            AcpState::Closed
        } else {
            state
        };
        self.conn()
            .execute(
                "UPDATE acp_sessions SET state = ?2, closed_at = ?3, updated_at = ?3
                 WHERE session_id = ?1 AND state = 'active'",
                params![id, state.as_str(), now],
            )
            .map_err(err(&self.path, "end a session"))?;
        self.get(id)?
            .ok_or_else(|| AcpError::NotFound { id: id.into() })
    }

    /// Live sessions (tombstones excluded), optionally of one agent, newest activity first.
    pub fn list(&self, agent: Option<&AgentAlias>) -> Result<Vec<AcpSession>, AcpError> {
        let rows: Vec<RawRow> = self
            .conn()
            .prepare(&format!(
                "SELECT {COLUMNS} FROM acp_sessions WHERE state = 'active' AND (?1 IS NULL OR agent = ?1)
                 ORDER BY updated_at DESC, session_id"
            ))
            .and_then(|mut s| s.query_map([agent.map(AgentAlias::as_str)], raw)?.collect())
            .map_err(err(&self.path, "list sessions"))?;
        rows.into_iter().map(|r| self.decode(r)).collect()
    }

    /// Appends one message to an active session's transcript; returns its sequence number.
    pub fn append_transcript(&self, id: &str, role: &str, content: &str) -> Result<u64, AcpError> {
        let now = timefmt::format(timefmt::now());
        let mut conn = self.conn();
        let tx = conn
            .transaction()
            .map_err(err(&self.path, "append to a transcript"))?;
        let active: Option<String> = tx
            .query_row(
                "SELECT state FROM acp_sessions WHERE session_id = ?1",
                [id],
                |r| r.get(0),
            )
            .optional()
            .map_err(err(&self.path, "append to a transcript"))?;
        match active.as_deref() {
            None => return Err(AcpError::NotFound { id: id.into() }),
            Some("active") => {}
            Some(other) => {
                return Err(AcpError::Tombstoned {
                    id: id.into(),
                    state: AcpState::parse(other).unwrap_or(AcpState::Closed),
                });
            }
        }
        let seq: i64 = tx
            .query_row(
                "SELECT COALESCE(MAX(seq), 0) + 1 FROM acp_transcript WHERE session_id = ?1",
                [id],
                |r| r.get(0),
            )
            .map_err(err(&self.path, "append to a transcript"))?;
        tx.execute(
            "INSERT INTO acp_transcript (session_id, seq, role, content, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![id, seq, role, content, now],
        )
        .map_err(err(&self.path, "append to a transcript"))?;
        tx.execute(
            "UPDATE acp_sessions SET updated_at = ?2 WHERE session_id = ?1",
            params![id, now],
        )
        .map_err(err(&self.path, "append to a transcript"))?;
        tx.commit()
            .map_err(err(&self.path, "append to a transcript"))?;
        Ok(u64::try_from(seq).unwrap_or(0))
    }

    /// A session's transcript, oldest first (tombstones included).
    pub fn transcript(&self, id: &str) -> Result<Vec<AcpMessage>, AcpError> {
        let rows: Vec<(i64, String, String, String)> = self
            .conn()
            .prepare(
                "SELECT seq, role, content, created_at FROM acp_transcript WHERE session_id = ?1 ORDER BY seq",
            )
            .and_then(|mut s| {
                s.query_map([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                    .collect()
            })
            .map_err(err(&self.path, "read a transcript"))?;
        rows.into_iter()
            .map(|(seq, role, content, at)| {
                Ok(AcpMessage {
                    seq: u64::try_from(seq).unwrap_or(0),
                    role,
                    content,
                    created_at: timefmt::parse(&at).ok_or_else(|| AcpError::Corrupt {
                        path: self.path.clone(),
                        detail: format!("transcript time '{at}' is not RFC 3339"),
                    })?,
                })
            })
            .collect()
    }

    /// How many records (tombstones included) `agent` owns.
    pub fn count_agent(&self, agent: &AgentAlias) -> Result<u64, AcpError> {
        let n: i64 = self
            .conn()
            .query_row(
                "SELECT COUNT(*) FROM acp_sessions WHERE agent = ?1",
                [agent.as_str()],
                |r| r.get(0),
            )
            .map_err(err(&self.path, "count an agent's sessions"))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// Every record of `agent` (tombstones included) with its transcript, oldest first.
    pub fn export_agent(&self, agent: &AgentAlias) -> Result<Vec<AcpExport>, AcpError> {
        let rows: Vec<RawRow> = self
            .conn()
            .prepare(&format!(
                "SELECT {COLUMNS} FROM acp_sessions WHERE agent = ?1 ORDER BY created_at, session_id"
            ))
            .and_then(|mut s| s.query_map([agent.as_str()], raw)?.collect())
            .map_err(err(&self.path, "export an agent's sessions"))?;
        rows.into_iter()
            .map(|r| {
                let session = self.decode(r)?;
                let transcript = self.transcript(&session.id)?;
                Ok(AcpExport {
                    session,
                    transcript,
                })
            })
            .collect()
    }

    /// Puts exported records back under `agent` (restore), rewriting a `cwd` that starts with
    /// `cwd_from` to start with `cwd_to`. Existing ids are left alone, so a retry converges.
    /// Returns how many sessions were inserted.
    pub fn import_agent(
        &self,
        agent: &AgentAlias,
        sessions: &[AcpExport],
        cwd_rewrite: Option<(&str, &str)>,
    ) -> Result<u64, AcpError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction()
            .map_err(err(&self.path, "import sessions"))?;
        let mut inserted = 0u64;
        for e in sessions {
            let s = &e.session;
            let cwd = rewrite_cwd(&s.cwd, cwd_rewrite);
            let n = tx
                .execute(
                    "INSERT INTO acp_sessions (session_id, agent, cwd, mode, transcript, state, created_at, updated_at, closed_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT(session_id) DO NOTHING",
                    params![
                        s.id,
                        agent.as_str(),
                        cwd,
                        s.mode,
                        s.transcript,
                        s.state.as_str(),
                        timefmt::format(s.created_at),
                        timefmt::format(s.updated_at),
                        s.closed_at.map(timefmt::format)
                    ],
                )
                .map_err(err(&self.path, "import sessions"))?;
            inserted += n as u64;
            for m in &e.transcript {
                tx.execute(
                    "INSERT INTO acp_transcript (session_id, seq, role, content, created_at)
                     VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT DO NOTHING",
                    params![
                        s.id,
                        i64::try_from(m.seq).unwrap_or(i64::MAX),
                        m.role,
                        m.content,
                        timefmt::format(m.created_at)
                    ],
                )
                .map_err(err(&self.path, "import sessions"))?;
            }
        }
        tx.commit().map_err(err(&self.path, "import sessions"))?;
        Ok(inserted)
    }

    /// Moves every record of `from` to `to` and rewrites working directories under
    /// `cwd_rewrite.0` to `cwd_rewrite.1` (agent rename cascade); returns how many.
    pub fn rename_agent_with_cwd(
        &self,
        from: &AgentAlias,
        to: &AgentAlias,
        cwd_rewrite: Option<(&str, &str)>,
    ) -> Result<usize, AcpError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction()
            .map_err(err(&self.path, "rename an agent's sessions"))?;
        let rows: Vec<(String, String)> = tx
            .prepare("SELECT session_id, cwd FROM acp_sessions WHERE agent = ?1")
            .and_then(|mut s| {
                s.query_map([from.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect()
            })
            .map_err(err(&self.path, "rename an agent's sessions"))?;
        for (id, cwd) in &rows {
            tx.execute(
                "UPDATE acp_sessions SET agent = ?2, cwd = ?3 WHERE session_id = ?1",
                params![id, to.as_str(), rewrite_cwd(cwd, cwd_rewrite)],
            )
            .map_err(err(&self.path, "rename an agent's sessions"))?;
        }
        tx.commit()
            .map_err(err(&self.path, "rename an agent's sessions"))?;
        Ok(rows.len())
    }

    /// Deletes every record of `agent` (agent deletion cascade); returns how many.
    pub fn delete_agent(&self, agent: &AgentAlias) -> Result<usize, AcpError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction()
            .map_err(err(&self.path, "delete an agent's sessions"))?;
        tx.execute(
            "DELETE FROM acp_transcript WHERE session_id IN (SELECT session_id FROM acp_sessions WHERE agent = ?1)",
            [agent.as_str()],
        )
        .map_err(err(&self.path, "delete an agent's transcripts"))?;
        let n = tx
            .execute(
                "DELETE FROM acp_sessions WHERE agent = ?1",
                [agent.as_str()],
            )
            .map_err(err(&self.path, "delete an agent's sessions"))?;
        tx.commit()
            .map_err(err(&self.path, "delete an agent's sessions"))?;
        Ok(n)
    }

    /// Moves every record of `from` to `to` (agent rename cascade); returns how many.
    pub fn rename_agent(&self, from: &AgentAlias, to: &AgentAlias) -> Result<usize, AcpError> {
        self.rename_agent_with_cwd(from, to, None)
    }
}

/// `cwd` with the prefix `from` replaced by `to` (whole path components only).
fn rewrite_cwd(cwd: &str, rewrite: Option<(&str, &str)>) -> String {
    let Some((from, to)) = rewrite else {
        return cwd.to_string();
    };
    match Path::new(cwd).strip_prefix(from) {
        Ok(rest) if rest.as_os_str().is_empty() => to.to_string(),
        Ok(rest) => Path::new(to).join(rest).display().to_string(),
        Err(_) => cwd.to_string(),
    }
}

fn err(path: &Path, op: &'static str) -> impl FnOnce(rusqlite::Error) -> AcpError {
    let path = path.to_path_buf();
    move |cause| AcpError::Sqlite {
        cause: warren_config::sqlite::explain(cause, &path),
        path,
        op,
    }
}

/// The live marker of a running ACP server (`warren acp`) of one agent: an exclusive `flock`
/// on `data/sessions/acp-live/<agent>/<pid>.lock`, held for the server's life (LIFE-4: a live
/// ACP session is a hard reference for agent delete). The kernel drops the lock when the
/// process dies, so a server killed with SIGKILL leaves a file that [`AcpLive::servers`]
/// finds unlocked: not live, and removed.
#[derive(Debug)]
pub struct AcpLive {
    path: PathBuf,
    _file: std::fs::File,
}

impl AcpLive {
    fn dir(root: &InstallRoot, agent: &AgentAlias) -> PathBuf {
        root.sessions_dir().join("acp-live").join(agent.as_str())
    }

    /// Marks this process as a live ACP server of `agent`. The file is locked under a
    /// temporary name and renamed into place, so a concurrent [`AcpLive::servers`] never
    /// sees it unlocked.
    pub fn hold(root: &InstallRoot, agent: &AgentAlias) -> Result<Self, AcpError> {
        crate::sessions::ensure_sessions_dir(root)?;
        let dir = Self::dir(root, agent);
        let io = |path: &Path, op: &'static str| {
            let path = path.to_path_buf();
            move |e: std::io::Error| AcpError::Live { path, op, cause: e }
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(io(&dir, "create the live-marker directory"))?;
        let pid = std::process::id();
        let tmp = dir.join(format!("{pid}.lock.tmp"));
        let path = dir.join(format!("{pid}.lock"));
        let file = warren_config::atomic::open_lock_file(&tmp)
            .map_err(io(&tmp, "create the live marker"))?;
        file.try_lock().map_err(|e| AcpError::Live {
            path: tmp.clone(),
            op: "lock the live marker",
            cause: std::io::Error::other(e.to_string()),
        })?;
        std::fs::rename(&tmp, &path).map_err(io(&path, "publish the live marker"))?;
        Ok(Self { path, _file: file })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The PIDs of the live ACP servers of `agent`, ascending. Markers whose lock is free
    /// (their process died) are removed on the way.
    pub fn servers(root: &InstallRoot, agent: &AgentAlias) -> Result<Vec<u32>, AcpError> {
        let dir = Self::dir(root, agent);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(AcpError::Live {
                    path: dir,
                    op: "list the live markers",
                    cause: source,
                });
            }
        };
        let mut live = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pid) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".lock"))
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            let path = entry.path();
            let file = match std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&path)
            {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(source) => {
                    return Err(AcpError::Live {
                        path,
                        op: "open a live marker",
                        cause: source,
                    });
                }
            };
            match file.try_lock() {
                Ok(()) => {
                    // Its process is gone: the marker is stale.
                    let _ = std::fs::remove_file(&path);
                }
                Err(std::fs::TryLockError::WouldBlock) => live.push(pid),
                Err(std::fs::TryLockError::Error(source)) => {
                    return Err(AcpError::Live {
                        path,
                        op: "probe a live marker",
                        cause: source,
                    });
                }
            }
        }
        live.sort_unstable();
        Ok(live)
    }
}

impl Drop for AcpLive {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
