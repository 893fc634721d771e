//! ACP protocol sessions (SPEC SESS-3, STATE-7): `data/sessions/acp-sessions.db` (SQLite, WAL,
//! `synchronous=FULL`), a store separate from chat sessions, opened by the daemon and by RPC
//! contexts. It holds what ACP `session/new`, `session/load` and `session/resume` need: the
//! session id, agent alias, working directory, mode, a reference to the transcript (the chat
//! backend owns the messages, LAYOUT-3), state and UTC timestamps.
//!
//! A closed or killed session is a tombstone: it stays listed by id but can never be loaded,
//! resumed or re-created under the same id, and the first tombstone wins (a later `close`
//! does not turn "killed" into "closed"). The ACP server itself is a later issue.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::Serialize;
use time::OffsetDateTime;
use warren_config::InstallRoot;
use warren_core::AgentAlias;

use crate::sessions::SessionError;
use crate::sqlite_util::{self, Sync};
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
PRAGMA user_version = 1;
";

const COLUMNS: &str =
    "session_id, agent, cwd, mode, transcript, state, created_at, updated_at, closed_at";

#[derive(Debug, thiserror::Error)]
pub enum AcpError {
    #[error("ACP session database {path}: {op}: {source}")]
    Sqlite {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: rusqlite::Error,
    },
    #[error(transparent)]
    Open(#[from] SessionError),
    #[error("ACP session '{id}' already exists")]
    Duplicate { id: String },
    #[error("ACP session '{id}' does not exist")]
    NotFound { id: String },
    #[error("ACP session '{id}' was {state}; start a new session")]
    Tombstoned { id: String, state: AcpState },
    #[error("{path} holds an unreadable ACP session row: {detail}")]
    Corrupt { path: PathBuf, detail: String },
}

/// Lifecycle of an ACP session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
    conn: Mutex<Connection>,
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
        let conn = sqlite_util::open_wal(&path, Sync::Full).map_err(err(&path, "open"))?;
        conn.execute_batch(SCHEMA)
            .map_err(err(&path, "create the schema"))?;
        Ok(Self {
            path,
            conn: Mutex::new(conn),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
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

    /// Deletes every record of `agent` (agent deletion cascade); returns how many.
    pub fn delete_agent(&self, agent: &AgentAlias) -> Result<usize, AcpError> {
        self.conn()
            .execute(
                "DELETE FROM acp_sessions WHERE agent = ?1",
                [agent.as_str()],
            )
            .map_err(err(&self.path, "delete an agent's sessions"))
    }

    /// Moves every record of `from` to `to` (agent rename cascade); returns how many.
    pub fn rename_agent(&self, from: &AgentAlias, to: &AgentAlias) -> Result<usize, AcpError> {
        self.conn()
            .execute(
                "UPDATE acp_sessions SET agent = ?2 WHERE agent = ?1",
                [from.as_str(), to.as_str()],
            )
            .map_err(err(&self.path, "rename an agent's sessions"))
    }
}

fn err(path: &Path, op: &'static str) -> impl FnOnce(rusqlite::Error) -> AcpError {
    let path = path.to_path_buf();
    move |source| AcpError::Sqlite { path, op, source }
}
