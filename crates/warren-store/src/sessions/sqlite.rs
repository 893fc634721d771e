//! The SQLite session backend (SESS-1): `data/sessions/sessions.db` in WAL mode.
//!
//! Every append is one `BEGIN IMMEDIATE` transaction holding the message row and the session
//! row's new count and activity time (the reference implementation ran two statements without a
//! transaction, so counts drifted after a crash). `[channels] session_durability` picks the
//! commit sync: `turn` = `synchronous=FULL` (an acknowledged append survives power loss),
//! `batched` = WAL `NORMAL` (atomic, the last commits may roll back after power loss).
//! Search uses FTS5 with every user word quoted, so quotes and operators are plain text.
//!
//! The file is opened by the one routine of every store (`warren_config::sqlite::open_wal`:
//! 0600, verified WAL) and its connection is a `SharedConn` (a mutex); async callers reach it
//! through `SessionHandle` (`spawn_blocking`), never from an async worker. Appends go through
//! the group-commit writer thread, which takes the same connection per batch.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params};
use time::OffsetDateTime;
use warren_config::InstallRoot;
use warren_config::failpoint::crash_point;
use warren_config::schema::SessionDurability;
use warren_core::{AgentAlias, Role, SessionKey};

use super::group::{AppendResult, Checkpointer, Reply, Request, SharedCheckpointer, Writer};
use super::lock::ensure_dir;
use super::{
    History, NewMessage, Page, SearchHit, SessionBackend, SessionError, SessionInit, SessionMeta,
    SessionState, StoredMessage,
};
use crate::failpoints;
use crate::sqlite_util::{self, SharedConn, Sync};
use crate::timefmt;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS sessions (
    key           TEXT PRIMARY KEY NOT NULL,
    name          TEXT,
    agent         TEXT,
    channel       TEXT,
    state         TEXT NOT NULL DEFAULT 'idle',
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    message_count INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS sessions_by_agent ON sessions(agent);
CREATE TABLE IF NOT EXISTS messages (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    session_key TEXT NOT NULL REFERENCES sessions(key) ON UPDATE CASCADE ON DELETE CASCADE,
    role        TEXT NOT NULL,
    content     TEXT NOT NULL,
    agent       TEXT,
    created_at  TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_session ON messages(session_key, id);
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts
    USING fts5(content, content = 'messages', content_rowid = 'id');
-- The index is derived data, brought up to date in one batch before each search (see
-- `catch_up_fts`): rows with id <= indexed_upto are in it, newer rows are not yet. Ids never
-- repeat (AUTOINCREMENT), so the watermark is exact.
CREATE TABLE IF NOT EXISTS fts_state (
    id           INTEGER PRIMARY KEY CHECK (id = 1),
    indexed_upto INTEGER NOT NULL
);
INSERT OR IGNORE INTO fts_state (id, indexed_upto) VALUES (1, 0);
CREATE TRIGGER IF NOT EXISTS messages_fts_delete AFTER DELETE ON messages
WHEN old.id <= (SELECT indexed_upto FROM fts_state) BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER IF NOT EXISTS messages_fts_update AFTER UPDATE OF content ON messages
WHEN old.id <= (SELECT indexed_upto FROM fts_state) BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
CREATE TABLE IF NOT EXISTS jsonl_import_receipts (
    source_name TEXT PRIMARY KEY NOT NULL,
    session_key TEXT NOT NULL,
    sha256      TEXT NOT NULL,
    byte_len    INTEGER NOT NULL,
    messages    INTEGER NOT NULL,
    imported_at TEXT NOT NULL
);
PRAGMA user_version = 1;
";

/// The schema version of `sessions.db` (`PRAGMA user_version`, set by [`SCHEMA`] too).
pub const SCHEMA_VERSION: i64 = 1;

const META_COLUMNS: &str =
    "key, name, agent, channel, state, created_at, updated_at, message_count";
const MESSAGE_COLUMNS: &str = "id, role, content, agent, created_at";

/// The SQLite chat/code session backend.
#[derive(Debug)]
pub struct SqliteBackend {
    root: InstallRoot,
    path: PathBuf,
    sync: Sync,
    conn: SharedConn,
    /// The group-commit writer thread of appends (declared after `conn`; it holds a clone).
    writer: Writer,
    checkpointer: SharedCheckpointer,
}

impl SqliteBackend {
    /// Opens (creating) `sessions.db` without importing JSONL (MIG-6: this never fences JSONL).
    pub fn open(root: &InstallRoot, durability: SessionDurability) -> Result<Self, SessionError> {
        ensure_dir(&root.sessions_dir())?;
        let path = root.sessions_db();
        let sync = match durability {
            SessionDurability::Turn => Sync::Full,
            SessionDurability::Batched => Sync::Normal,
        };
        // A migration that fails and rolls back leaves the store read-only at its old schema
        // (issue 22 §4): reads answer, appends say why.
        let conn = warren_config::sqlite::open_migrated(&path, sync, SCHEMA_VERSION, |c| {
            c.execute_batch(SCHEMA)
        })
        .map_err(SessionError::sqlite(&path, "open and migrate the schema"))?;
        if conn.read_only().is_some() {
            return Self::on(root, path, conn);
        }
        conn.lock()
            .execute_batch(SCHEMA)
            .map_err(SessionError::sqlite(&path, "create the schema"))?;
        // Checkpoints run on their own thread and connection (see `Checkpointer`); if that
        // cannot start, SQLite's automatic checkpoint stays on.
        let checkpointer = sqlite_util::open_wal(&path, sync)
            .ok()
            .and_then(|c| Checkpointer::start(c).ok());
        if checkpointer.is_some() {
            conn.lock()
                .execute_batch(
                    "PRAGMA wal_autocheckpoint = 0; PRAGMA journal_size_limit = 67108864;",
                )
                .map_err(SessionError::sqlite(&path, "configure checkpoints"))?;
        }
        let checkpointer: SharedCheckpointer = Arc::new(Mutex::new(checkpointer));
        let writer = {
            let (conn, db, ckpt) = (conn.clone(), path.clone(), Arc::clone(&checkpointer));
            Writer::start(move |batch| {
                let results = {
                    let mut conn = conn.lock();
                    commit_batch(&mut conn, &db, batch)
                };
                committed(&ckpt, batch.len());
                results
            })
            .map_err(SessionError::io(&path, "start the session writer thread"))?
        };
        Ok(Self {
            root: root.clone(),
            path,
            sync,
            conn,
            writer,
            checkpointer,
        })
    }

    /// Opens an existing `sessions.db` for reading only: no schema, no checkpoints, no import,
    /// nothing created — what a read-only command needs on a full disk (issue 15 §8; see
    /// [`sqlite_util::open_read_only`]). Writes through it fail.
    pub fn open_read_only(root: &InstallRoot) -> Result<Self, SessionError> {
        let path = root.sessions_db();
        let conn = sqlite_util::open_read_only(&path)
            .map_err(SessionError::sqlite(&path, "open read-only"))?;
        let conn = SharedConn::new(&path, conn);
        Self::on(root, path, conn)
    }

    /// The backend on a read-only connection: no checkpoints; its writer's commits fail.
    fn on(root: &InstallRoot, path: PathBuf, conn: SharedConn) -> Result<Self, SessionError> {
        let checkpointer: SharedCheckpointer = Arc::new(Mutex::new(None));
        let writer = {
            let (conn, db) = (conn.clone(), path.clone());
            Writer::start(move |batch| commit_batch(&mut conn.lock(), &db, batch))
                .map_err(SessionError::io(&path, "start the session writer thread"))?
        };
        Ok(Self {
            root: root.clone(),
            path,
            sync: Sync::Full,
            conn,
            writer,
            checkpointer,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn root(&self) -> &InstallRoot {
        &self.root
    }

    /// The commit sync chosen by `session_durability`.
    pub(crate) fn runtime_sync(&self) -> Sync {
        self.sync
    }

    /// Queues one append for group commit without blocking; the receiver yields its result
    /// once its batch committed (async callers: `SessionHandle::append`).
    pub fn append_queued(
        &self,
        key: SessionKey,
        message: NewMessage,
    ) -> Result<tokio::sync::oneshot::Receiver<AppendResult>, SessionError> {
        self.writer.submit_async(key, message)
    }

    pub(crate) fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock()
    }

    fn err(&self, op: &'static str) -> impl FnOnce(rusqlite::Error) -> SessionError {
        SessionError::sqlite(&self.path, op)
    }

    fn meta_in(
        &self,
        conn: &Connection,
        key: &SessionKey,
    ) -> Result<Option<SessionMeta>, SessionError> {
        let row = conn
            .prepare_cached(&format!(
                "SELECT {META_COLUMNS} FROM sessions WHERE key = ?1"
            ))
            .and_then(|mut s| s.query_row([key.as_str()], raw_meta).optional())
            .map_err(self.err("read a session"))?;
        row.map(|r| r.decode(&self.path)).transpose()
    }

    /// Indexes every message appended since the last search, in one transaction. Appends stay
    /// cheap (an FTS5 insert per tiny transaction costs more than the append itself) and the
    /// index is exact when a search reads it.
    fn catch_up_fts(&self, conn: &mut Connection) -> Result<(), SessionError> {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.err("begin indexing"))?;
        tx.execute_batch(
            "INSERT INTO messages_fts (rowid, content)
                 SELECT id, content FROM messages
                 WHERE id > (SELECT indexed_upto FROM fts_state) ORDER BY id;
             UPDATE fts_state SET indexed_upto =
                 MAX(indexed_upto, (SELECT COALESCE(MAX(id), 0) FROM messages));",
        )
        .map_err(self.err("index new messages for search"))?;
        tx.commit().map_err(self.err("commit the search index"))
    }

    /// Appends several messages through group commit and returns one result per message, in
    /// order. Each append is atomic on its own (message + session row, under its own
    /// SAVEPOINT); the call returns after the transaction(s) holding them committed. Appends
    /// of concurrent callers share transactions with these (SESS-1 group commit).
    pub fn append_many(
        &self,
        items: impl IntoIterator<Item = (SessionKey, NewMessage)>,
    ) -> Vec<AppendResult> {
        // An idle writer thread and a free connection: commit on this thread (no hand-off to
        // the writer and back, which a lone writer would pay on every append).
        if self.writer.idle()
            && let Some(mut conn) = self.conn.try_lock()
        {
            let mut batch: Vec<Request> = items
                .into_iter()
                .map(|(key, message)| Request {
                    key,
                    message,
                    reply: Reply::Direct,
                })
                .collect();
            let results = commit_batch(&mut conn, &self.path, &mut batch);
            drop(conn);
            committed(&self.checkpointer, batch.len());
            return results;
        }
        self.writer.submit_blocking(items)
    }

    fn update_one(
        &self,
        sql: &str,
        key: &SessionKey,
        value: Option<&str>,
    ) -> Result<(), SessionError> {
        let conn = self.conn();
        let n = conn
            .execute(sql, params![key.as_str(), value])
            .map_err(self.err("update a session"))?;
        if n == 0 {
            return Err(SessionError::NotFound { key: key.clone() });
        }
        Ok(())
    }
}

/// Undecoded session row (decoding may fail and must name the database).
pub(crate) struct RawMeta {
    key: String,
    name: Option<String>,
    agent: Option<String>,
    channel: Option<String>,
    state: String,
    created_at: String,
    updated_at: String,
    message_count: i64,
}

pub(crate) fn raw_meta(r: &Row<'_>) -> rusqlite::Result<RawMeta> {
    Ok(RawMeta {
        key: r.get(0)?,
        name: r.get(1)?,
        agent: r.get(2)?,
        channel: r.get(3)?,
        state: r.get(4)?,
        created_at: r.get(5)?,
        updated_at: r.get(6)?,
        message_count: r.get(7)?,
    })
}

fn corrupt(path: &Path, detail: String) -> SessionError {
    SessionError::Corrupt {
        path: path.to_path_buf(),
        detail,
    }
}

fn decode_time(path: &Path, what: &str, text: &str) -> Result<OffsetDateTime, SessionError> {
    timefmt::parse(text).ok_or_else(|| corrupt(path, format!("{what} '{text}' is not RFC 3339")))
}

fn decode_agent(path: &Path, text: Option<String>) -> Result<Option<AgentAlias>, SessionError> {
    text.map(|a| AgentAlias::new(a).map_err(|e| corrupt(path, e.to_string())))
        .transpose()
}

impl RawMeta {
    pub(crate) fn decode(self, path: &Path) -> Result<SessionMeta, SessionError> {
        Ok(SessionMeta {
            key: SessionKey::new(self.key).map_err(|e| corrupt(path, e.to_string()))?,
            name: self.name,
            agent: decode_agent(path, self.agent)?,
            channel: self.channel,
            state: SessionState::parse(&self.state)
                .ok_or_else(|| corrupt(path, format!("unknown session state '{}'", self.state)))?,
            created_at: decode_time(path, "created_at", &self.created_at)?,
            updated_at: decode_time(path, "updated_at", &self.updated_at)?,
            message_count: u64::try_from(self.message_count).unwrap_or(0),
        })
    }
}

type RawMessage = (i64, String, String, Option<String>, String);

fn raw_message(r: &Row<'_>) -> rusqlite::Result<RawMessage> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
}

fn decode_message(path: &Path, raw: RawMessage) -> Result<StoredMessage, SessionError> {
    let (id, role, content, agent, created_at) = raw;
    Ok(StoredMessage {
        seq: u64::try_from(id).unwrap_or(0),
        role: role
            .parse::<Role>()
            .map_err(|e| corrupt(path, e.to_string()))?,
        content,
        agent: decode_agent(path, agent)?,
        created_at: decode_time(path, "created_at", &created_at)?,
    })
}

/// Writes one batch as one `BEGIN IMMEDIATE` transaction, a SAVEPOINT per append (SESS-1
/// group commit); one result per request, in order. Runs on the writer thread.
fn commit_batch(conn: &mut Connection, path: &Path, batch: &mut [Request]) -> Vec<AppendResult> {
    let err =
        |op: &'static str, e: rusqlite::Error| SessionError::from_sqlite(path.to_path_buf(), op, e);
    let tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => {
            return batch
                .iter()
                .map(|_| Err(err("begin an append", dup_error(&e))))
                .collect();
        }
    };
    let mut done: Vec<AppendResult> = Vec::with_capacity(batch.len());
    let mut aborted: Option<rusqlite::Error> = None;
    for req in batch.iter_mut() {
        if let Some(e) = &aborted {
            done.push(Err(err("append a message", dup_error(e))));
            continue;
        }
        let created_at = req.message.created_at.unwrap_or_else(timefmt::now);
        let stamp = timefmt::format(created_at);
        let result = (|| -> rusqlite::Result<i64> {
            tx.prepare_cached("SAVEPOINT warren_append")?.execute([])?;
            match insert_message(&tx, &req.key, &req.message, &stamp) {
                Ok(id) => {
                    tx.prepare_cached("RELEASE warren_append")?.execute([])?;
                    Ok(id)
                }
                Err(e) => {
                    // Only this append is undone; the batch goes on (unless SQLite rolled the
                    // whole transaction back, checked below).
                    if !tx.is_autocommit() {
                        tx.execute_batch("ROLLBACK TO warren_append; RELEASE warren_append;")?;
                    }
                    Err(e)
                }
            }
        })();
        match result {
            Ok(id) => done.push(Ok(StoredMessage {
                seq: u64::try_from(id).unwrap_or(0),
                role: req.message.role,
                agent: req.message.agent.take(),
                content: std::mem::take(&mut req.message.content),
                created_at: timefmt::parse(&stamp).unwrap_or(created_at),
            })),
            Err(e) => {
                if tx.is_autocommit() {
                    // SQLite rolled back the whole transaction (disk full, I/O error, ...):
                    // nothing of this batch is written.
                    aborted = Some(dup_error(&e));
                }
                done.push(Err(err("append a message", e)));
            }
        }
        crash_point(failpoints::APPEND_IN_BATCH);
    }
    if let Some(e) = aborted {
        return fail_all(done, || err("append a message", dup_error(&e)));
    }
    crash_point(failpoints::APPEND_BEFORE_COMMIT);
    if let Err(e) = tx.commit() {
        return fail_all(done, || err("commit an append", dup_error(&e)));
    }
    crash_point(failpoints::APPEND_AFTER_COMMIT);
    done
}

/// Tells the background checkpointer (if any) how many appends a batch committed.
fn committed(checkpointer: &SharedCheckpointer, appends: usize) {
    if let Some(c) = checkpointer
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_mut()
    {
        c.committed(appends);
    }
}

/// The message row and the session row's new count and activity time (SESS-1).
fn insert_message(
    conn: &Connection,
    key: &SessionKey,
    message: &NewMessage,
    stamp: &str,
) -> rusqlite::Result<i64> {
    let agent = message.agent.as_ref().map(AgentAlias::as_str);
    conn.prepare_cached(
        "INSERT INTO sessions (key, agent, created_at, updated_at, message_count)
         VALUES (?1, ?2, ?3, ?3, 1)
         ON CONFLICT(key) DO UPDATE SET
            message_count = sessions.message_count + 1,
            updated_at = MAX(sessions.updated_at, excluded.updated_at),
            agent = COALESCE(sessions.agent, excluded.agent)",
    )?
    .execute(params![key.as_str(), agent, stamp])?;
    conn.prepare_cached(
        "INSERT INTO messages (session_key, role, content, agent, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![
        key.as_str(),
        message.role.as_str(),
        message.content,
        agent,
        stamp
    ])?;
    Ok(conn.last_insert_rowid())
}

/// The batch did not commit: every append in it fails (those that had failed keep their error).
fn fail_all(done: Vec<AppendResult>, err: impl Fn() -> SessionError) -> Vec<AppendResult> {
    done.into_iter()
        .map(|r| match r {
            Ok(_) => Err(err()),
            Err(e) => Err(e),
        })
        .collect()
}

/// A copy of a SQLite error for each append of a failed batch (`rusqlite::Error` is not Clone).
fn dup_error(e: &rusqlite::Error) -> rusqlite::Error {
    match e {
        rusqlite::Error::SqliteFailure(code, msg) => {
            rusqlite::Error::SqliteFailure(*code, msg.clone())
        }
        other => rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
            Some(other.to_string()),
        ),
    }
}

/// FTS5 query for "every word, literally": each whitespace-separated word becomes a quoted
/// string (`"` doubled inside), joined by AND.
pub(crate) fn fts_query(text: &str) -> Option<String> {
    let words: Vec<String> = text
        .split_whitespace()
        .map(|w| format!("\"{}\"", w.replace('"', "\"\"")))
        .collect();
    (!words.is_empty()).then(|| words.join(" AND "))
}

impl SessionBackend for SqliteBackend {
    fn kind(&self) -> &'static str {
        "sqlite"
    }

    fn ensure(&self, key: &SessionKey, init: &SessionInit) -> Result<SessionMeta, SessionError> {
        let conn = self.conn();
        let now = timefmt::format(timefmt::now());
        conn.prepare_cached(
            "INSERT INTO sessions (key, name, agent, channel, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?5)
             ON CONFLICT(key) DO UPDATE SET
                name = COALESCE(sessions.name, excluded.name),
                agent = COALESCE(sessions.agent, excluded.agent),
                channel = COALESCE(sessions.channel, excluded.channel)",
        )
        .and_then(|mut s| {
            s.execute(params![
                key.as_str(),
                init.name,
                init.agent.as_ref().map(AgentAlias::as_str),
                init.channel,
                now
            ])
        })
        .map_err(self.err("create a session"))?;
        self.meta_in(&conn, key)?
            .ok_or_else(|| SessionError::NotFound { key: key.clone() })
    }

    fn append(
        &self,
        key: &SessionKey,
        message: &NewMessage,
    ) -> Result<StoredMessage, SessionError> {
        self.append_many([(key.clone(), message.clone())])
            .pop()
            .unwrap_or_else(|| Err(SessionError::Task("an append got no answer".into())))
    }

    fn queue_append(
        &self,
        key: &SessionKey,
        message: &NewMessage,
    ) -> Option<Result<super::AppendReceiver, SessionError>> {
        Some(self.append_queued(key.clone(), message.clone()))
    }

    fn load(&self, key: &SessionKey, page: Page) -> Result<History, SessionError> {
        let conn = self.conn();
        let k = key.as_str();
        let rows: rusqlite::Result<Vec<RawMessage>> = match page {
            Page::All => conn
                .prepare_cached(&format!(
                    "SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_key = ?1 ORDER BY id"
                ))
                .and_then(|mut s| s.query_map([k], raw_message)?.collect()),
            Page::After { after, limit } => conn
                .prepare_cached(&format!(
                    "SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_key = ?1 AND id > ?2
                     ORDER BY id LIMIT ?3"
                ))
                .and_then(|mut s| {
                    s.query_map(
                        params![k, i64::try_from(after).unwrap_or(i64::MAX), limit as i64],
                        raw_message,
                    )?
                    .collect()
                }),
            Page::Last(n) => conn
                .prepare_cached(&format!(
                    "SELECT * FROM (SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_key = ?1
                     ORDER BY id DESC LIMIT ?2) ORDER BY id"
                ))
                .and_then(|mut s| s.query_map(params![k, n as i64], raw_message)?.collect()),
        };
        let messages = rows
            .map_err(self.err("load history"))?
            .into_iter()
            .map(|r| decode_message(&self.path, r))
            .collect::<Result<_, _>>()?;
        Ok(History {
            messages,
            issues: Vec::new(),
        })
    }

    fn list(&self) -> Result<Vec<SessionMeta>, SessionError> {
        let conn = self.conn();
        let rows: Vec<RawMeta> = conn
            .prepare_cached(&format!(
                "SELECT {META_COLUMNS} FROM sessions ORDER BY updated_at DESC, key"
            ))
            .and_then(|mut s| s.query_map([], raw_meta)?.collect())
            .map_err(self.err("list sessions"))?;
        rows.into_iter().map(|r| r.decode(&self.path)).collect()
    }

    fn meta(&self, key: &SessionKey) -> Result<Option<SessionMeta>, SessionError> {
        let conn = self.conn();
        self.meta_in(&conn, key)
    }

    fn rename(&self, from: &SessionKey, to: &SessionKey) -> Result<(), SessionError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.err("begin a rename"))?;
        let exists = |k: &SessionKey| -> Result<bool, SessionError> {
            tx.query_row(
                "SELECT EXISTS(SELECT 1 FROM sessions WHERE key = ?1)",
                [k.as_str()],
                |r| r.get(0),
            )
            .map_err(SessionError::sqlite(&self.path, "rename a session"))
        };
        if exists(to)? {
            return Err(SessionError::AlreadyExists { key: to.clone() });
        }
        let n = tx
            .execute(
                "UPDATE sessions SET key = ?2 WHERE key = ?1",
                params![from.as_str(), to.as_str()],
            )
            .map_err(self.err("rename a session"))?;
        if n == 0 {
            return Err(SessionError::NotFound { key: from.clone() });
        }
        tx.commit().map_err(self.err("commit a rename"))
    }

    fn delete(&self, key: &SessionKey) -> Result<bool, SessionError> {
        let conn = self.conn();
        let n = conn
            .execute("DELETE FROM sessions WHERE key = ?1", [key.as_str()])
            .map_err(self.err("delete a session"))?;
        Ok(n > 0)
    }

    fn clear(&self, key: &SessionKey) -> Result<u64, SessionError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.err("begin a clear"))?;
        let removed = tx
            .execute(
                "DELETE FROM messages WHERE session_key = ?1",
                [key.as_str()],
            )
            .map_err(self.err("clear a session"))?;
        let n = tx
            .execute(
                "UPDATE sessions SET message_count = 0, updated_at = ?2 WHERE key = ?1",
                params![key.as_str(), timefmt::format(timefmt::now())],
            )
            .map_err(self.err("clear a session"))?;
        if n == 0 {
            return Err(SessionError::NotFound { key: key.clone() });
        }
        tx.commit().map_err(self.err("commit a clear"))?;
        Ok(removed as u64)
    }

    fn set_name(&self, key: &SessionKey, name: Option<&str>) -> Result<(), SessionError> {
        let name = name.map(str::trim).filter(|n| !n.is_empty());
        self.update_one("UPDATE sessions SET name = ?2 WHERE key = ?1", key, name)
    }

    fn set_state(&self, key: &SessionKey, state: SessionState) -> Result<(), SessionError> {
        self.update_one(
            "UPDATE sessions SET state = ?2 WHERE key = ?1",
            key,
            Some(state.as_str()),
        )
    }

    fn set_agent(&self, key: &SessionKey, agent: Option<&AgentAlias>) -> Result<(), SessionError> {
        self.update_one(
            "UPDATE sessions SET agent = ?2 WHERE key = ?1",
            key,
            agent.map(AgentAlias::as_str),
        )
    }

    fn rename_agent(&self, from: &AgentAlias, to: &AgentAlias) -> Result<u64, SessionError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction()
            .map_err(self.err("begin an agent rename"))?;
        let sessions = tx
            .execute(
                "UPDATE sessions SET agent = ?2 WHERE agent = ?1",
                params![from.as_str(), to.as_str()],
            )
            .map_err(self.err("repoint sessions to the new alias"))?;
        tx.execute(
            "UPDATE messages SET agent = ?2 WHERE agent = ?1",
            params![from.as_str(), to.as_str()],
        )
        .map_err(self.err("repoint messages to the new alias"))?;
        tx.commit().map_err(self.err("commit an agent rename"))?;
        Ok(sessions as u64)
    }

    fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>, SessionError> {
        let q = fts_query(query).ok_or(SessionError::EmptySearch)?;
        let mut conn = self.conn();
        self.catch_up_fts(&mut conn)?;
        let rows: Vec<(String, i64, String, String)> = conn
            .prepare_cached(
                "SELECT m.session_key, m.id, m.role, m.content
                 FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid
                 WHERE messages_fts MATCH ?1 ORDER BY rank, m.id LIMIT ?2",
            )
            .and_then(|mut s| {
                s.query_map(params![q, limit as i64], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                })?
                .collect()
            })
            .map_err(self.err("search messages"))?;
        rows.into_iter()
            .map(|(key, id, role, content)| {
                Ok(SearchHit {
                    key: SessionKey::new(key).map_err(|e| corrupt(&self.path, e.to_string()))?,
                    seq: u64::try_from(id).unwrap_or(0),
                    role: role
                        .parse()
                        .map_err(|e: warren_core::RoleError| corrupt(&self.path, e.to_string()))?,
                    content,
                })
            })
            .collect()
    }
}
