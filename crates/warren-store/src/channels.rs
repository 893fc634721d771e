//! The channels' durable state (issue 38, BEYOND-14/15): `data/channels/channels.db` with
//!
//! - the **inbox**: every inbound message, stored and committed before the platform is told it
//!   was received, unique per (channel, platform id) so a redelivery is dropped; a row becomes
//!   at most one turn: `received` → `turn_started` (committed before the turn is submitted) →
//!   `done`, or `refused` (a sender who may not talk) / `ignored` (a group message not for the
//!   bot) / `interrupted` (the process died during its turn: never run twice);
//! - the **outbox**: every message the channel sends, one delivery state machine per row:
//!   `queued` → `sending` → `sent` (with the platform's message ids) / `failed` (with its
//!   error); a reply is unique per inbox row, so a turn has at most one final reply; a long
//!   reply is sent in chunks and `chunks_sent` says where a resumed delivery continues;
//! - the **senders** each channel has seen (`pending`, `allowed`, `blocked`);
//! - the **session generation** per conversation scope (`/new` starts the next one).
//!
//! Opened only by `warren_runtime::stores::Stores`, with the one SQLite open routine
//! ([`SharedConn::open_store`], `synchronous = FULL`: acknowledged = durable).

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use warren_config::failpoint::crash_point;

use crate::cron::now_ms;
use crate::sqlite_util::{SharedConn, Sync};
use crate::timefmt;

/// Crash points of the channel layer's durable steps, in the order a message reaches them.
pub const FAILPOINTS: [&str; 6] = [
    RECEIVE_BEFORE_COMMIT,
    RECEIVE_AFTER_COMMIT,
    TURN_AFTER_START,
    TURN_AFTER_FINISH,
    SEND_AFTER_SEND,
    SEND_AFTER_RECORD,
];
/// Inbound rows inserted, the transaction not committed (the platform was not told).
pub const RECEIVE_BEFORE_COMMIT: &str = "channels-receive-before-commit";
/// Inbound rows committed, the platform not told yet (the next poll confirms them).
pub const RECEIVE_AFTER_COMMIT: &str = "channels-receive-after-commit";
/// The row is `turn_started`, the turn not submitted yet.
pub const TURN_AFTER_START: &str = "channels-turn-after-start";
/// The turn finished and its reply is queued (one transaction), nothing sent.
pub const TURN_AFTER_FINISH: &str = "channels-turn-after-finish";
/// A chunk was sent, its message id not recorded yet (the one reply that may repeat).
pub const SEND_AFTER_SEND: &str = "channels-send-after-send";
/// A chunk's message id recorded.
pub const SEND_AFTER_RECORD: &str = "channels-send-after-record";

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS inbox (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    channel     TEXT NOT NULL,
    platform_id TEXT NOT NULL,
    kind        TEXT NOT NULL,
    chat_id     TEXT NOT NULL,
    thread_id   TEXT,
    message_id  TEXT,
    sender_id   TEXT NOT NULL,
    sender_name TEXT NOT NULL DEFAULT '',
    text        TEXT NOT NULL,
    payload     TEXT,
    state       TEXT NOT NULL CHECK (state IN
                ('received', 'turn_started', 'done', 'refused', 'ignored', 'interrupted')),
    session     TEXT,
    note        TEXT,
    received_at TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    UNIQUE (channel, platform_id)
);
CREATE INDEX IF NOT EXISTS inbox_by_state ON inbox(channel, state, id);
CREATE TABLE IF NOT EXISTS outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    channel         TEXT NOT NULL,
    inbox_id        INTEGER,
    purpose         TEXT NOT NULL,
    chat_id         TEXT NOT NULL,
    thread_id       TEXT,
    text            TEXT NOT NULL,
    markup          TEXT,
    plain           INTEGER NOT NULL DEFAULT 0,
    state           TEXT NOT NULL CHECK (state IN ('queued', 'sending', 'sent', 'failed')),
    chunks_sent     INTEGER NOT NULL DEFAULT 0,
    message_ids     TEXT NOT NULL DEFAULT '[]',
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_ms INTEGER NOT NULL DEFAULT 0,
    error           TEXT,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    UNIQUE (inbox_id, purpose)
);
CREATE INDEX IF NOT EXISTS outbox_due ON outbox(channel, state, next_attempt_ms);
CREATE TABLE IF NOT EXISTS senders (
    channel    TEXT NOT NULL,
    sender_id  TEXT NOT NULL,
    name       TEXT NOT NULL DEFAULT '',
    status     TEXT NOT NULL CHECK (status IN ('pending', 'allowed', 'blocked')),
    prompted   INTEGER NOT NULL DEFAULT 0,
    first_seen TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (channel, sender_id)
);
CREATE TABLE IF NOT EXISTS conversations (
    channel    TEXT NOT NULL,
    scope      TEXT NOT NULL,
    generation INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (channel, scope)
);
";

#[derive(Debug, thiserror::Error)]
pub enum ChannelStoreError {
    #[error("channel store {path}: {cause}")]
    Db { path: PathBuf, cause: String },
    #[error("no sender '{sender}' on channel {channel} (see `warren channels senders {channel}`)")]
    NoSender { channel: String, sender: String },
}

/// An inbound message as the adapter hands it over.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Inbound {
    /// The platform's id of the update, unique per channel (Telegram: `update_id`).
    pub platform_id: String,
    /// `text` (a message), `command` (`/new`, `/stop`, `/status`), `callback` (a button).
    pub kind: String,
    pub chat_id: String,
    pub thread_id: Option<String>,
    pub message_id: Option<String>,
    pub sender_id: String,
    pub sender_name: String,
    pub text: String,
    /// Extra data (a button's callback data, the chat type, whether the bot was addressed).
    pub payload: Option<String>,
}

/// A stored inbound message.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InboxRow {
    pub id: i64,
    pub channel: String,
    pub platform_id: String,
    pub kind: String,
    pub chat_id: String,
    pub thread_id: Option<String>,
    pub message_id: Option<String>,
    pub sender_id: String,
    pub sender_name: String,
    pub text: String,
    pub payload: Option<String>,
    pub state: String,
    pub session: Option<String>,
    pub note: Option<String>,
    pub received_at: String,
}

/// A message to send.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outbound {
    /// The inbox row it answers (a reply is unique per row and purpose).
    pub inbox_id: Option<i64>,
    /// `reply` (a turn's final answer), `notice`, `prompt` (an owner's Allow / Block).
    pub purpose: String,
    pub chat_id: String,
    pub thread_id: Option<String>,
    pub text: String,
    /// Buttons (the platform's `reply_markup` JSON).
    pub markup: Option<String>,
    /// Send without formatting.
    pub plain: bool,
}

/// A stored outbound message and its delivery state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutboxRow {
    pub id: i64,
    pub channel: String,
    pub inbox_id: Option<i64>,
    pub purpose: String,
    pub chat_id: String,
    pub thread_id: Option<String>,
    pub text: String,
    pub markup: Option<String>,
    pub plain: bool,
    pub state: String,
    pub chunks_sent: u32,
    pub message_ids: Vec<String>,
    pub attempts: u32,
    pub next_attempt_ms: i64,
    pub error: Option<String>,
    pub created_at: String,
}

/// A sender a channel has seen or been told about.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sender {
    pub channel: String,
    pub sender_id: String,
    pub name: String,
    pub status: String,
    pub first_seen: String,
    pub updated_at: String,
}

/// Counts of one channel's rows by table and state.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Counts {
    pub inbox: std::collections::BTreeMap<String, u64>,
    pub outbox: std::collections::BTreeMap<String, u64>,
}

/// `data/channels/channels.db`.
#[derive(Debug)]
pub struct ChannelStore {
    conn: SharedConn,
}

const INBOX_COLS: &str = "id, channel, platform_id, kind, chat_id, thread_id, message_id, \
     sender_id, sender_name, text, payload, state, session, note, received_at";
const OUTBOX_COLS: &str = "id, channel, inbox_id, purpose, chat_id, thread_id, text, markup, \
     plain, state, chunks_sent, message_ids, attempts, next_attempt_ms, error, created_at";

fn inbox_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<InboxRow> {
    Ok(InboxRow {
        id: r.get(0)?,
        channel: r.get(1)?,
        platform_id: r.get(2)?,
        kind: r.get(3)?,
        chat_id: r.get(4)?,
        thread_id: r.get(5)?,
        message_id: r.get(6)?,
        sender_id: r.get(7)?,
        sender_name: r.get(8)?,
        text: r.get(9)?,
        payload: r.get(10)?,
        state: r.get(11)?,
        session: r.get(12)?,
        note: r.get(13)?,
        received_at: r.get(14)?,
    })
}

fn outbox_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<OutboxRow> {
    let ids: String = r.get(11)?;
    Ok(OutboxRow {
        id: r.get(0)?,
        channel: r.get(1)?,
        inbox_id: r.get(2)?,
        purpose: r.get(3)?,
        chat_id: r.get(4)?,
        thread_id: r.get(5)?,
        text: r.get(6)?,
        markup: r.get(7)?,
        plain: r.get(8)?,
        state: r.get(9)?,
        chunks_sent: r.get(10)?,
        message_ids: serde_json::from_str(&ids).unwrap_or_default(),
        attempts: r.get(12)?,
        next_attempt_ms: r.get(13)?,
        error: r.get(14)?,
        created_at: r.get(15)?,
    })
}

fn now() -> String {
    timefmt::format(timefmt::now())
}

fn insert_outbound(conn: &Connection, channel: &str, m: &Outbound) -> rusqlite::Result<i64> {
    let t = now();
    let changed = conn.execute(
        "INSERT OR IGNORE INTO outbox (channel, inbox_id, purpose, chat_id, thread_id, text, \
         markup, plain, state, created_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'queued', ?9, ?9)",
        params![
            channel,
            m.inbox_id,
            m.purpose,
            m.chat_id,
            m.thread_id,
            m.text,
            m.markup,
            m.plain,
            t
        ],
    )?;
    Ok(if changed == 1 {
        conn.last_insert_rowid()
    } else {
        0
    })
}

impl ChannelStore {
    /// Opens (creating `data/channels/` and the file) for writing.
    pub fn open(path: &Path) -> Result<Self, ChannelStoreError> {
        let conn = SharedConn::open_store(path, Sync::Full, SCHEMA).map_err(|cause| {
            ChannelStoreError::Db {
                path: path.to_path_buf(),
                cause,
            }
        })?;
        Ok(Self { conn })
    }

    fn err(&self, e: rusqlite::Error) -> ChannelStoreError {
        ChannelStoreError::Db {
            path: self.conn.path().to_path_buf(),
            cause: warren_config::sqlite::cause_text(&e, self.conn.path()),
        }
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>,
    ) -> Result<T, ChannelStoreError> {
        let mut conn = self.conn.lock();
        f(&mut conn).map_err(|e| self.err(e))
    }

    /// Stores `messages` of `channel` in one transaction; a platform id already stored is
    /// dropped (a redelivery). Returns how many rows are new. Only after this returns may the
    /// adapter tell the platform the messages were received.
    pub fn receive(&self, channel: &str, messages: &[Inbound]) -> Result<usize, ChannelStoreError> {
        if messages.is_empty() {
            return Ok(0);
        }
        let added = self.with(|conn| {
            let tx = conn.transaction()?;
            let t = now();
            let mut added = 0;
            for m in messages {
                added += tx.execute(
                    "INSERT OR IGNORE INTO inbox (channel, platform_id, kind, chat_id, thread_id, \
                     message_id, sender_id, sender_name, text, payload, state, received_at, \
                     updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 'received', \
                     ?11, ?11)",
                    params![
                        channel,
                        m.platform_id,
                        m.kind,
                        m.chat_id,
                        m.thread_id,
                        m.message_id,
                        m.sender_id,
                        m.sender_name,
                        m.text,
                        m.payload,
                        t
                    ],
                )?;
            }
            crash_point(RECEIVE_BEFORE_COMMIT);
            tx.commit()?;
            Ok(added)
        })?;
        crash_point(RECEIVE_AFTER_COMMIT);
        Ok(added)
    }

    /// `channel`'s rows still waiting for their turn (or refusal), oldest first.
    pub fn received(&self, channel: &str) -> Result<Vec<InboxRow>, ChannelStoreError> {
        self.with(|conn| {
            let mut stmt = conn.prepare(&format!(
                "SELECT {INBOX_COLS} FROM inbox WHERE channel = ?1 AND state = 'received' ORDER BY id"
            ))?;
            stmt.query_map([channel], inbox_row)?.collect()
        })
    }

    /// One inbox row.
    pub fn inbox_row(&self, id: i64) -> Result<Option<InboxRow>, ChannelStoreError> {
        self.with(|conn| {
            conn.query_row(
                &format!("SELECT {INBOX_COLS} FROM inbox WHERE id = ?1"),
                [id],
                inbox_row,
            )
            .optional()
        })
    }

    /// `channel`'s most recent inbox rows (newest first), of `state` if given.
    pub fn inbox(
        &self,
        channel: &str,
        state: Option<&str>,
        limit: u32,
    ) -> Result<Vec<InboxRow>, ChannelStoreError> {
        self.with(|conn| {
            let mut stmt = conn.prepare(&format!(
                "SELECT {INBOX_COLS} FROM inbox WHERE channel = ?1 AND (?2 IS NULL OR state = ?2) \
                 ORDER BY id DESC LIMIT ?3"
            ))?;
            stmt.query_map(params![channel, state, limit], inbox_row)?
                .collect()
        })
    }

    /// Claims row `id` for its one turn in `session`: `received` → `turn_started`, committed.
    /// `false` when the row was already claimed (it is never run twice).
    pub fn start_turn(&self, id: i64, session: &str) -> Result<bool, ChannelStoreError> {
        let claimed = self.with(|conn| {
            conn.execute(
                "UPDATE inbox SET state = 'turn_started', session = ?2, updated_at = ?3 \
                 WHERE id = ?1 AND state = 'received'",
                params![id, session, now()],
            )
        })? == 1;
        if claimed {
            crash_point(TURN_AFTER_START);
        }
        Ok(claimed)
    }

    /// Row `id`'s turn ended: the row is `done` (with `note`, e.g. the turn's error) and
    /// `reply` queued, in one transaction (a second reply to the row is dropped).
    pub fn finish_turn(
        &self,
        channel: &str,
        id: i64,
        note: Option<&str>,
        reply: Option<&Outbound>,
    ) -> Result<(), ChannelStoreError> {
        self.with(|conn| {
            let tx = conn.transaction()?;
            tx.execute(
                "UPDATE inbox SET state = 'done', note = ?2, updated_at = ?3 WHERE id = ?1",
                params![id, note, now()],
            )?;
            if let Some(reply) = reply {
                insert_outbound(&tx, channel, reply)?;
            }
            tx.commit()
        })?;
        crash_point(TURN_AFTER_FINISH);
        Ok(())
    }

    /// Row `id` ends without a turn: `refused` (a sender who may not talk) or `ignored`, with
    /// why, and `reply` (a notice, an owner's prompt) queued in the same transaction.
    pub fn close_without_turn(
        &self,
        channel: &str,
        id: i64,
        state: &str,
        note: &str,
        reply: &[Outbound],
    ) -> Result<(), ChannelStoreError> {
        self.with(|conn| {
            let tx = conn.transaction()?;
            tx.execute(
                "UPDATE inbox SET state = ?2, note = ?3, updated_at = ?4 WHERE id = ?1 \
                 AND state = 'received'",
                params![id, state, note, now()],
            )?;
            for m in reply {
                insert_outbound(&tx, channel, m)?;
            }
            tx.commit()
        })
    }

    /// After a restart: the rows whose turn had started when the process died become
    /// `interrupted` (never run twice) and each gets `notice(row)` queued, in one transaction.
    /// Returns the rows.
    pub fn interrupt_started(
        &self,
        channel: &str,
        notice: impl Fn(&InboxRow) -> Outbound,
    ) -> Result<Vec<InboxRow>, ChannelStoreError> {
        self.with(|conn| {
            let tx = conn.transaction()?;
            let rows: Vec<InboxRow> = {
                let mut stmt = tx.prepare(&format!(
                    "SELECT {INBOX_COLS} FROM inbox WHERE channel = ?1 AND state = 'turn_started' \
                     ORDER BY id"
                ))?;
                stmt.query_map([channel], inbox_row)?
                    .collect::<rusqlite::Result<_>>()?
            };
            for row in &rows {
                tx.execute(
                    "UPDATE inbox SET state = 'interrupted', note = 'the process stopped during its turn', \
                     updated_at = ?2 WHERE id = ?1",
                    params![row.id, now()],
                )?;
                insert_outbound(&tx, channel, &notice(row))?;
            }
            tx.commit()?;
            Ok(rows)
        })
    }

    /// Queues `message` (0 when a message of the same row and purpose is already queued).
    pub fn enqueue(&self, channel: &str, message: &Outbound) -> Result<i64, ChannelStoreError> {
        self.with(|conn| insert_outbound(conn, channel, message))
    }

    /// `channel`'s messages due for (another) delivery attempt at `now_ms`, oldest first:
    /// queued ones and those a crash left `sending`.
    pub fn due(&self, channel: &str, now_ms: i64) -> Result<Vec<OutboxRow>, ChannelStoreError> {
        self.with(|conn| {
            let mut stmt = conn.prepare(&format!(
                "SELECT {OUTBOX_COLS} FROM outbox WHERE channel = ?1 AND state IN ('queued', 'sending') \
                 AND next_attempt_ms <= ?2 ORDER BY id"
            ))?;
            stmt.query_map(params![channel, now_ms], outbox_row)?
                .collect()
        })
    }

    /// When `channel`'s next delivery attempt is due, if any message waits.
    pub fn next_due_ms(&self, channel: &str) -> Result<Option<i64>, ChannelStoreError> {
        self.with(|conn| {
            conn.query_row(
                "SELECT MIN(next_attempt_ms) FROM outbox WHERE channel = ?1 \
                 AND state IN ('queued', 'sending')",
                [channel],
                |r| r.get(0),
            )
        })
    }

    /// `channel`'s most recent outbox rows (newest first).
    pub fn outbox(&self, channel: &str, limit: u32) -> Result<Vec<OutboxRow>, ChannelStoreError> {
        self.with(|conn| {
            let mut stmt = conn.prepare(&format!(
                "SELECT {OUTBOX_COLS} FROM outbox WHERE channel = ?1 ORDER BY id DESC LIMIT ?2"
            ))?;
            stmt.query_map(params![channel, limit], outbox_row)?
                .collect()
        })
    }

    /// Message `id` is being sent (one more attempt).
    pub fn sending(&self, id: i64) -> Result<(), ChannelStoreError> {
        self.with(|conn| {
            conn.execute(
                "UPDATE outbox SET state = 'sending', attempts = attempts + 1, updated_at = ?2 \
                 WHERE id = ?1",
                params![id, now()],
            )
            .map(drop)
        })
    }

    /// Chunk `chunks_sent` of message `id` was delivered as the platform's `message_id`.
    pub fn chunk_sent(&self, id: i64, message_id: &str) -> Result<(), ChannelStoreError> {
        crash_point(SEND_AFTER_SEND);
        self.with(|conn| {
            let ids: String =
                conn.query_row("SELECT message_ids FROM outbox WHERE id = ?1", [id], |r| {
                    r.get(0)
                })?;
            let mut ids: Vec<String> = serde_json::from_str(&ids).unwrap_or_default();
            ids.push(message_id.to_string());
            conn.execute(
                "UPDATE outbox SET chunks_sent = chunks_sent + 1, message_ids = ?2, error = NULL, \
                 updated_at = ?3 WHERE id = ?1",
                params![id, serde_json::to_string(&ids).unwrap_or_default(), now()],
            )
            .map(drop)
        })?;
        crash_point(SEND_AFTER_RECORD);
        Ok(())
    }

    /// Every chunk of message `id` was delivered.
    pub fn sent(&self, id: i64) -> Result<(), ChannelStoreError> {
        self.set_state(id, "sent", None, None)
    }

    /// Message `id` could not be delivered for good (`error`: the platform's answer).
    pub fn failed(&self, id: i64, error: &str) -> Result<(), ChannelStoreError> {
        self.set_state(id, "failed", Some(error), None)
    }

    /// Message `id` waits until `at_ms` for its next attempt (`error`: why the last failed).
    pub fn retry_at(&self, id: i64, error: &str, at_ms: i64) -> Result<(), ChannelStoreError> {
        self.set_state(id, "queued", Some(error), Some(at_ms))
    }

    /// Message `id` is sent without formatting from now on (the platform rejected its markup).
    pub fn set_plain(&self, id: i64) -> Result<(), ChannelStoreError> {
        self.with(|conn| {
            conn.execute("UPDATE outbox SET plain = 1 WHERE id = ?1", [id])
                .map(drop)
        })
    }

    fn set_state(
        &self,
        id: i64,
        state: &str,
        error: Option<&str>,
        at_ms: Option<i64>,
    ) -> Result<(), ChannelStoreError> {
        self.with(|conn| {
            conn.execute(
                "UPDATE outbox SET state = ?2, error = COALESCE(?3, error), \
                 next_attempt_ms = COALESCE(?4, next_attempt_ms), updated_at = ?5 WHERE id = ?1",
                params![id, state, error, at_ms, now()],
            )
            .map(drop)
        })
    }

    /// The sender `sender_id` of `channel`, if seen.
    pub fn sender(
        &self,
        channel: &str,
        sender_id: &str,
    ) -> Result<Option<Sender>, ChannelStoreError> {
        self.with(|conn| {
            conn.query_row(
                "SELECT channel, sender_id, name, status, first_seen, updated_at FROM senders \
                 WHERE channel = ?1 AND sender_id = ?2",
                params![channel, sender_id],
                sender_row,
            )
            .optional()
        })
    }

    /// Every sender of `channel`, by id.
    pub fn senders(&self, channel: &str) -> Result<Vec<Sender>, ChannelStoreError> {
        self.with(|conn| {
            let mut stmt = conn.prepare(
                "SELECT channel, sender_id, name, status, first_seen, updated_at FROM senders \
                 WHERE channel = ?1 ORDER BY sender_id",
            )?;
            stmt.query_map([channel], sender_row)?.collect()
        })
    }

    /// Records an unknown sender as `pending`; `true` the first time (the owners are asked
    /// once per sender, not once per message).
    pub fn note_pending(
        &self,
        channel: &str,
        sender_id: &str,
        name: &str,
    ) -> Result<bool, ChannelStoreError> {
        self.with(|conn| {
            let t = now();
            conn.execute(
                "INSERT OR IGNORE INTO senders (channel, sender_id, name, status, first_seen, \
                 updated_at) VALUES (?1, ?2, ?3, 'pending', ?4, ?4)",
                params![channel, sender_id, name, t],
            )
            .map(|n| n == 1)
        })
    }

    /// Sets `sender_id`'s status on `channel` (`allowed` or `blocked`), creating the row.
    pub fn set_sender(
        &self,
        channel: &str,
        sender_id: &str,
        status: &str,
    ) -> Result<(), ChannelStoreError> {
        self.with(|conn| {
            let t = now();
            conn.execute(
                "INSERT INTO senders (channel, sender_id, status, first_seen, updated_at) \
                 VALUES (?1, ?2, ?3, ?4, ?4) ON CONFLICT (channel, sender_id) \
                 DO UPDATE SET status = ?3, updated_at = ?4",
                params![channel, sender_id, status, t],
            )
            .map(drop)
        })
    }

    /// The current session generation of a conversation scope (0 until `/new`).
    pub fn generation(&self, channel: &str, scope: &str) -> Result<i64, ChannelStoreError> {
        self.with(|conn| {
            conn.query_row(
                "SELECT generation FROM conversations WHERE channel = ?1 AND scope = ?2",
                params![channel, scope],
                |r| r.get(0),
            )
            .optional()
            .map(Option::unwrap_or_default)
        })
    }

    /// Starts the next session generation of a scope (`/new`); returns it.
    pub fn next_generation(&self, channel: &str, scope: &str) -> Result<i64, ChannelStoreError> {
        self.with(|conn| {
            conn.execute(
                "INSERT INTO conversations (channel, scope, generation) VALUES (?1, ?2, 1) \
                 ON CONFLICT (channel, scope) DO UPDATE SET generation = generation + 1",
                params![channel, scope],
            )?;
            conn.query_row(
                "SELECT generation FROM conversations WHERE channel = ?1 AND scope = ?2",
                params![channel, scope],
                |r| r.get(0),
            )
        })
    }

    /// Row counts of `channel` by table and state.
    pub fn counts(&self, channel: &str) -> Result<Counts, ChannelStoreError> {
        self.with(|conn| {
            let mut out = Counts::default();
            for (table, map) in [("inbox", &mut out.inbox), ("outbox", &mut out.outbox)] {
                let mut stmt = conn.prepare(&format!(
                    "SELECT state, COUNT(*) FROM {table} WHERE channel = ?1 GROUP BY state"
                ))?;
                for row in stmt.query_map([channel], |r| Ok((r.get(0)?, r.get(1)?)))? {
                    let (state, n): (String, u64) = row?;
                    map.insert(state, n);
                }
            }
            Ok(out)
        })
    }

    /// Milliseconds since the epoch (the outbox's clock).
    pub fn now_ms() -> i64 {
        now_ms()
    }
}

fn sender_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Sender> {
    Ok(Sender {
        channel: r.get(0)?,
        sender_id: r.get(1)?,
        name: r.get(2)?,
        status: r.get(3)?,
        first_seen: r.get(4)?,
        updated_at: r.get(5)?,
    })
}

#[cfg(test)]
mod tests;
