//! SOP runs (STATE-10): `data/sop/runs.db`, or the same schema in memory when the durable file
//! cannot be opened (the engine warns about that in its logs, `/api/health` and every run).
//!
//! * `runs`: one row per run with its definition (as it was when the run started), input,
//!   status, the index of the next step, a `revision` every change compares and sets, and the
//!   claim (its owner, a [`StoredOwner`]: PID + boot ID + the process's start time + its PID
//!   namespace, issue 17; and the lease end). Active statuses are `running` and `waiting` (an
//!   approval gate); the terminal ones `ok | failed | denied | cancelled`.
//! * `steps`: one row per step that ran: its output and receipt are recorded (`recorded`)
//!   BEFORE the run moves past it (`done`), so a process that dies in between finds the receipt
//!   at restart and never repeats the step's side effect.
//! * `events`: who did what and why (started, step done, approved, denied, cancelled, ...).
//! * `approvals`: the operator's decision on a gate, written by whoever decides (CLI, API) and
//!   read by the run's owner.
//!
//! Starting a run checks the per-SOP and the global concurrency caps in the insert's
//! transaction.

mod agent;
mod journal;

pub use journal::StepOutcome;

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use serde::Serialize;

use crate::control_plane::{Owner, StoredOwner, open_owner_store, owner_columns, update_owned};
use crate::sqlite_util::{SharedConn, Sync};
use crate::timefmt;

/// Schema version of `runs.db` (`PRAGMA user_version`): 1 without the owner's start time, 2
/// with it and the owner's PID namespace (`runs.owner_start`, `runs.owner_ns`, issue 17).
pub const SCHEMA_VERSION: i64 = 2;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS runs (
    id               TEXT PRIMARY KEY NOT NULL,
    sop              TEXT NOT NULL,
    agent            TEXT NOT NULL,
    trigger          TEXT NOT NULL,
    input            TEXT NOT NULL,
    definition       TEXT NOT NULL,
    status           TEXT NOT NULL CHECK (status IN
                     ('running', 'waiting', 'ok', 'failed', 'denied', 'cancelled')),
    step_index       INTEGER NOT NULL DEFAULT 0,
    revision         INTEGER NOT NULL DEFAULT 0,
    owner_pid        INTEGER NOT NULL,
    owner_boot       TEXT NOT NULL,
    owner_start      INTEGER,
    owner_ns         TEXT,
    lease_until_ms   INTEGER NOT NULL,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    durable          INTEGER NOT NULL DEFAULT 1,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    finished_at      TEXT,
    error            TEXT
);
CREATE INDEX IF NOT EXISTS sop_runs_by_status ON runs(status);
CREATE INDEX IF NOT EXISTS sop_runs_by_sop ON runs(sop, created_at);
CREATE TABLE IF NOT EXISTS steps (
    run_id      TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    step_id     TEXT NOT NULL,
    idx         INTEGER NOT NULL,
    kind        TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('recorded', 'done')),
    output      TEXT NOT NULL,
    receipt     TEXT,
    recorded_at TEXT NOT NULL,
    done_at     TEXT,
    PRIMARY KEY (run_id, step_id)
);
CREATE TABLE IF NOT EXISTS events (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id  TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    at      TEXT NOT NULL,
    who     TEXT NOT NULL,
    what    TEXT NOT NULL,
    why     TEXT
);
CREATE INDEX IF NOT EXISTS sop_events_by_run ON events(run_id, seq);
CREATE TABLE IF NOT EXISTS approvals (
    run_id   TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    step_id  TEXT NOT NULL,
    decision TEXT NOT NULL CHECK (decision IN ('approved', 'denied')),
    who      TEXT NOT NULL,
    reason   TEXT,
    at       TEXT NOT NULL,
    PRIMARY KEY (run_id, step_id)
);
";

#[derive(Debug, thiserror::Error)]
pub enum SopStoreError {
    #[error("SOP run store {path}: {cause}")]
    Db { path: PathBuf, cause: String },
    #[error("no SOP run '{0}' (see `warren sop runs`)")]
    NotFound(String),
    #[error("SOP '{sop}' already has {active} active run(s), its max_concurrent; not started")]
    SopBusy { sop: String, active: u32 },
    #[error("{active} SOP runs are active, the [sop] max_concurrent_runs cap; '{sop}' not started")]
    GlobalBusy { sop: String, active: u32 },
    #[error("run '{id}' changed meanwhile (revision {expected} expected, {found} found)")]
    Conflict {
        id: String,
        expected: i64,
        found: i64,
    },
    #[error("run '{id}' is {status}, not waiting for approval of step '{step}'")]
    NotWaiting {
        id: String,
        step: String,
        status: String,
    },
    #[error("run '{id}' is already {status}")]
    Finished { id: String, status: String },
}

/// One run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SopRun {
    pub id: String,
    pub sop: String,
    pub agent: warren_core::AgentAlias,
    pub trigger: String,
    pub input: serde_json::Value,
    pub definition: serde_json::Value,
    pub status: String,
    pub step_index: u32,
    pub revision: i64,
    pub owner_pid: u32,
    pub owner_boot: String,
    /// The owner's start time ([`StoredOwner::start`]); `None` in a run of schema 1.
    pub owner_start: Option<u64>,
    /// The owner's PID namespace ([`StoredOwner::pid_ns`]); `None` in a run of schema 1.
    pub owner_ns: Option<String>,
    pub lease_until_ms: i64,
    pub cancel_requested: bool,
    pub durable: bool,
    pub created_at: String,
    pub updated_at: String,
    pub finished_at: Option<String>,
    pub error: Option<String>,
}

impl SopRun {
    pub fn is_active(&self) -> bool {
        matches!(self.status.as_str(), "running" | "waiting")
    }

    /// The run's claim holder, judged by [`StoredOwner::is_alive`]: a PID reused after a crash
    /// by a process that started at another time does not hold the run. A run of schema 1 has
    /// no start time nor namespace: its PID and boot decide, bounded by its lease.
    pub fn owner(&self) -> StoredOwner {
        StoredOwner {
            pid: self.owner_pid,
            boot_id: self.owner_boot.clone(),
            start: self.owner_start,
            pid_ns: self.owner_ns.clone(),
        }
    }
}

/// A step that ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepRecord {
    pub step_id: String,
    pub idx: u32,
    pub kind: String,
    pub status: String,
    pub output: String,
    pub receipt: Option<String>,
    pub recorded_at: String,
    pub done_at: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    pub at: String,
    pub who: String,
    pub what: String,
    pub why: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Approval {
    pub decision: String,
    pub who: String,
    pub reason: Option<String>,
    pub at: String,
}

/// A new run to insert.
#[derive(Debug, Clone)]
pub struct NewRun<'a> {
    pub id: &'a str,
    pub sop: &'a str,
    pub agent: &'a warren_core::AgentAlias,
    pub trigger: &'a str,
    pub input: &'a serde_json::Value,
    pub definition: &'a serde_json::Value,
    pub max_for_sop: u32,
    pub max_global: u32,
    pub lease_ms: i64,
}

/// The SOP run store.
#[derive(Debug, Clone)]
pub struct SopStore {
    conn: SharedConn,
    durable: bool,
}

pub use crate::cron::now_ms;

fn stamp() -> String {
    timefmt::format(timefmt::now())
}

impl SopStore {
    /// Opens (creating) `data/sop/runs.db` for writing, at schema 2 ([`open_owner_store`]:
    /// version 2 adds `runs.owner_start` and `runs.owner_ns`; a file of version 1 is upgraded in
    /// place keeping its runs). FULL sync: a step's receipt is on disk before the run moves past
    /// the step.
    pub fn open(path: &Path) -> Result<Self, SopStoreError> {
        let conn = open_owner_store(
            path,
            Sync::Full,
            SCHEMA_VERSION,
            SCHEMA,
            &[
                ("runs", "owner_start", "INTEGER"),
                ("runs", "owner_ns", "TEXT"),
            ],
        )
        .map_err(|e| SopStoreError::Db {
            path: path.to_path_buf(),
            cause: e.cause(),
        })?;
        Ok(Self {
            conn,
            durable: true,
        })
    }

    /// An existing store read-only; `None` when there is none yet.
    pub fn open_existing(path: &Path) -> Result<Option<Self>, SopStoreError> {
        let conn = SharedConn::open_existing(path).map_err(|e| SopStoreError::Db {
            path: path.to_path_buf(),
            cause: e.cause(),
        })?;
        Ok(conn.map(|conn| Self {
            conn,
            durable: true,
        }))
    }

    /// The same schema in memory: runs end with the process.
    pub fn in_memory() -> Result<Self, SopStoreError> {
        let path = Path::new(":memory:");
        let err = |e: rusqlite::Error| SopStoreError::Db {
            path: path.to_path_buf(),
            cause: e.to_string(),
        };
        let conn = Connection::open_in_memory().map_err(err)?;
        conn.execute_batch("PRAGMA foreign_keys = ON;")
            .map_err(err)?;
        conn.execute_batch(SCHEMA).map_err(err)?;
        Ok(Self {
            conn: SharedConn::new(path, conn),
            durable: false,
        })
    }

    pub fn is_durable(&self) -> bool {
        self.durable
    }

    pub fn path(&self) -> &Path {
        self.conn.path()
    }

    fn err(&self, e: impl std::fmt::Display) -> SopStoreError {
        SopStoreError::Db {
            path: self.conn.path().to_path_buf(),
            cause: e.to_string(),
        }
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock()
    }

    /// Refuses a start, claim or lease renewal on a store left read-only at schema 1 by a failed
    /// migration, with why (their statements name `owner_start` / `owner_ns`, which SQLite would
    /// report as missing columns).
    fn writable(&self) -> Result<(), SopStoreError> {
        match self.conn.read_only() {
            None => Ok(()),
            Some(why) => Err(self.err(why)),
        }
    }

    /// The columns [`run_row`] reads (NULL for the owner's start and namespace in a file of
    /// schema 1, [`owner_columns`]).
    fn columns(&self, conn: &Connection) -> Result<String, SopStoreError> {
        let owner = owner_columns(conn, "runs").map_err(|e| self.err(e))?;
        Ok(format!(
            "id, sop, agent, trigger, input, definition, status, step_index, revision, \
             owner_pid, owner_boot, {owner}, lease_until_ms, cancel_requested, durable, \
             created_at, updated_at, finished_at, error"
        ))
    }

    /// Inserts a run claimed by `owner` (with its start time and PID namespace) if the caps
    /// allow; records the `started` event.
    pub fn start(&self, run: &NewRun<'_>, owner: &Owner) -> Result<SopRun, SopStoreError> {
        self.writable()?;
        let owner = owner.stored();
        {
            let mut conn = self.conn();
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|e| self.err(e))?;
            let count = |sql: &str, p: &[&dyn rusqlite::ToSql]| -> Result<u32, SopStoreError> {
                tx.query_row(sql, p, |r| r.get(0)).map_err(|e| self.err(e))
            };
            let for_sop = count(
                "SELECT COUNT(*) FROM runs WHERE sop = ?1 AND status IN ('running', 'waiting')",
                &[&run.sop],
            )?;
            if for_sop >= run.max_for_sop {
                return Err(SopStoreError::SopBusy {
                    sop: run.sop.into(),
                    active: for_sop,
                });
            }
            let all = count(
                "SELECT COUNT(*) FROM runs WHERE status IN ('running', 'waiting')",
                &[],
            )?;
            if all >= run.max_global {
                return Err(SopStoreError::GlobalBusy {
                    sop: run.sop.into(),
                    active: all,
                });
            }
            let now = stamp();
            tx.execute(
                "INSERT INTO runs (id, sop, agent, trigger, input, definition, status, owner_pid,
                                   owner_boot, lease_until_ms, durable, created_at, updated_at,
                                   owner_start, owner_ns)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'running', ?7, ?8, ?9, ?10, ?11, ?11, ?12, ?13)",
                params![
                    run.id,
                    run.sop,
                    run.agent.as_str(),
                    run.trigger,
                    run.input.to_string(),
                    run.definition.to_string(),
                    owner.pid,
                    owner.boot_id,
                    now_ms() + run.lease_ms,
                    self.durable,
                    now,
                    owner.start,
                    owner.pid_ns
                ],
            )
            .map_err(|e| self.err(e))?;
            let why = if self.durable {
                None
            } else {
                Some("runs are kept in memory only: they end with this process")
            };
            tx.execute(
                "INSERT INTO events (run_id, at, who, what, why) VALUES (?1, ?2, ?3, 'started', ?4)",
                params![run.id, now, format!("trigger:{}", run.trigger), why],
            )
            .map_err(|e| self.err(e))?;
            tx.commit().map_err(|e| self.err(e))?;
        }
        self.get(run.id)?
            .ok_or_else(|| SopStoreError::NotFound(run.id.into()))
    }

    pub fn get(&self, id: &str) -> Result<Option<SopRun>, SopStoreError> {
        let conn = self.conn();
        let columns = self.columns(&conn)?;
        conn.query_row(
            &format!("SELECT {columns} FROM runs WHERE id = ?1"),
            params![id],
            run_row,
        )
        .optional()
        .map_err(|e| self.err(e))
    }

    /// Runs newest first, of `sop` if given.
    pub fn list(&self, sop: Option<&str>, limit: u32) -> Result<Vec<SopRun>, SopStoreError> {
        let conn = self.conn();
        let columns = self.columns(&conn)?;
        let mut stmt = conn
            .prepare(&format!(
                "SELECT {columns} FROM runs WHERE (?1 IS NULL OR sop = ?1)
                 ORDER BY created_at DESC, id DESC LIMIT ?2"
            ))
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![sop, limit], run_row)
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }

    /// Active runs (running or waiting), oldest first.
    pub fn active(&self) -> Result<Vec<SopRun>, SopStoreError> {
        let conn = self.conn();
        let columns = self.columns(&conn)?;
        let mut stmt = conn
            .prepare(&format!(
                "SELECT {columns} FROM runs WHERE status IN ('running', 'waiting')
                 ORDER BY created_at, id"
            ))
            .map_err(|e| self.err(e))?;
        let rows = stmt.query_map([], run_row).map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }

    /// Takes over the active run `id` for `owner` when its claim is free: held by `owner`
    /// already ([`StoredOwner::is`]), its owner provably gone ([`StoredOwner::is_alive`]: a PID
    /// reused by a process that started at another time counts), or its lease over. The claim
    /// records `owner`'s start time and PID namespace. Compare-and-set on the revision.
    /// `Ok(None)`: another live owner holds it.
    pub fn claim(
        &self,
        id: &str,
        owner: &Owner,
        lease_ms: i64,
    ) -> Result<Option<SopRun>, SopStoreError> {
        self.writable()?;
        let run = self
            .get(id)?
            .ok_or_else(|| SopStoreError::NotFound(id.into()))?;
        if !run.is_active() {
            return Ok(None);
        }
        let holder = run.owner();
        let mine = holder.is(owner);
        if !mine && holder.is_alive() && run.lease_until_ms > now_ms() {
            return Ok(None);
        }
        let stored = owner.stored();
        let changed = self
            .conn()
            .execute(
                "UPDATE runs SET owner_pid = ?2, owner_boot = ?3, owner_start = ?7, owner_ns = ?8,
                        lease_until_ms = ?4, revision = revision + 1, updated_at = ?5
                 WHERE id = ?1 AND revision = ?6",
                params![
                    id,
                    stored.pid,
                    stored.boot_id,
                    now_ms() + lease_ms,
                    stamp(),
                    run.revision,
                    stored.start,
                    stored.pid_ns
                ],
            )
            .map_err(|e| self.err(e))?;
        if changed == 0 {
            return Ok(None);
        }
        if !mine {
            self.event(
                id,
                &format!("pid:{}", owner.pid),
                "resumed",
                Some(&format!(
                    "its previous owner (pid {}) is gone or its lease ran out",
                    run.owner_pid
                )),
            )?;
        }
        self.get(id)
    }

    /// Extends the lease of `owner`'s active runs: those of this very process
    /// ([`same_owner`](crate::control_plane::same_owner)), not an earlier one's that had its
    /// PID, whose lease must run out.
    pub fn renew(&self, owner: &Owner, lease_ms: i64) -> Result<usize, SopStoreError> {
        self.writable()?;
        update_owned(
            &self.conn(),
            "runs",
            "lease_until_ms = ?5",
            "status IN ('running', 'waiting')",
            owner,
            params![now_ms() + lease_ms],
        )
        .map_err(|e| self.err(e))
    }

    /// Marks the recorded step done and moves the run to `next_index` (compare-and-set on
    /// `revision`). Returns the new revision.
    pub fn advance(
        &self,
        run_id: &str,
        step_id: Option<&str>,
        next_index: u32,
        revision: i64,
        event: (&str, &str, Option<&str>),
    ) -> Result<i64, SopStoreError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let now = stamp();
        let changed = tx
            .execute(
                "UPDATE runs SET step_index = ?2, revision = revision + 1, updated_at = ?3,
                        status = 'running'
                 WHERE id = ?1 AND revision = ?4 AND status IN ('running', 'waiting')",
                params![run_id, next_index, now, revision],
            )
            .map_err(|e| self.err(e))?;
        if changed == 0 {
            drop(tx);
            drop(conn);
            return Err(self.conflict(run_id, revision));
        }
        if let Some(step_id) = step_id {
            tx.execute(
                "UPDATE steps SET status = 'done', done_at = ?3 WHERE run_id = ?1 AND step_id = ?2",
                params![run_id, step_id, now],
            )
            .map_err(|e| self.err(e))?;
        }
        tx.execute(
            "INSERT INTO events (run_id, at, who, what, why) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![run_id, now, event.0, event.1, event.2],
        )
        .map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))?;
        Ok(revision + 1)
    }

    fn conflict(&self, run_id: &str, expected: i64) -> SopStoreError {
        match self.get(run_id) {
            Ok(Some(run)) if !run.is_active() => SopStoreError::Finished {
                id: run_id.into(),
                status: run.status,
            },
            Ok(Some(run)) => SopStoreError::Conflict {
                id: run_id.into(),
                expected,
                found: run.revision,
            },
            Ok(None) => SopStoreError::NotFound(run_id.into()),
            Err(e) => e,
        }
    }

    /// Sets the run `waiting` (an approval gate) or back to `running` (CAS).
    pub fn set_waiting(
        &self,
        run_id: &str,
        waiting: bool,
        revision: i64,
    ) -> Result<i64, SopStoreError> {
        let changed = self
            .conn()
            .execute(
                "UPDATE runs SET status = ?2, revision = revision + 1, updated_at = ?3
                 WHERE id = ?1 AND revision = ?4 AND status IN ('running', 'waiting')",
                params![
                    run_id,
                    if waiting { "waiting" } else { "running" },
                    stamp(),
                    revision
                ],
            )
            .map_err(|e| self.err(e))?;
        if changed == 0 {
            return Err(self.conflict(run_id, revision));
        }
        Ok(revision + 1)
    }

    /// Ends an active run with a terminal `status`; `false` if it had already ended.
    pub fn finish(
        &self,
        run_id: &str,
        status: &str,
        error: Option<&str>,
        who: &str,
        why: Option<&str>,
    ) -> Result<bool, SopStoreError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let now = stamp();
        let changed = tx
            .execute(
                "UPDATE runs SET status = ?2, error = ?3, finished_at = ?4, updated_at = ?4,
                        revision = revision + 1
                 WHERE id = ?1 AND status IN ('running', 'waiting')",
                params![run_id, status, error, now],
            )
            .map_err(|e| self.err(e))?;
        if changed > 0 {
            tx.execute(
                "INSERT INTO events (run_id, at, who, what, why) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![run_id, now, who, status, why.or(error)],
            )
            .map_err(|e| self.err(e))?;
        }
        tx.commit().map_err(|e| self.err(e))?;
        Ok(changed > 0)
    }

    /// Deletes the oldest finished runs of `sop` beyond `keep`.
    pub fn prune(&self, sop: &str, keep: u32) -> Result<usize, SopStoreError> {
        self.conn()
            .execute(
                "DELETE FROM runs WHERE id IN (
                     SELECT id FROM runs WHERE sop = ?1 AND status NOT IN ('running', 'waiting')
                     ORDER BY created_at DESC, id DESC LIMIT -1 OFFSET ?2)",
                params![sop, keep],
            )
            .map_err(|e| self.err(e))
    }

    /// Asks the owner of the active run `id` to cancel it.
    pub fn request_cancel(&self, id: &str, who: &str) -> Result<SopRun, SopStoreError> {
        let run = self
            .get(id)?
            .ok_or_else(|| SopStoreError::NotFound(id.into()))?;
        if !run.is_active() {
            return Err(SopStoreError::Finished {
                id: id.into(),
                status: run.status,
            });
        }
        self.conn()
            .execute(
                "UPDATE runs SET cancel_requested = 1 WHERE id = ?1",
                params![id],
            )
            .map_err(|e| self.err(e))?;
        self.event(id, who, "cancel requested", None)?;
        Ok(SopRun {
            cancel_requested: true,
            ..run
        })
    }
}

fn run_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SopRun> {
    let json = |i: usize| -> rusqlite::Result<serde_json::Value> {
        let text: String = r.get(i)?;
        Ok(serde_json::from_str(&text).unwrap_or(serde_json::Value::Null))
    };
    Ok(SopRun {
        id: r.get(0)?,
        sop: r.get(1)?,
        agent: crate::sqlite_util::alias_column(r, 2)?,
        trigger: r.get(3)?,
        input: json(4)?,
        definition: json(5)?,
        status: r.get(6)?,
        step_index: r.get(7)?,
        revision: r.get(8)?,
        owner_pid: r.get(9)?,
        owner_boot: r.get(10)?,
        owner_start: r.get(11)?,
        owner_ns: r.get(12)?,
        lease_until_ms: r.get(13)?,
        cancel_requested: r.get(14)?,
        durable: r.get(15)?,
        created_at: r.get(16)?,
        updated_at: r.get(17)?,
        finished_at: r.get(18)?,
        error: r.get(19)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_run<'a>(
        id: &'a str,
        def: &'a serde_json::Value,
        input: &'a serde_json::Value,
    ) -> NewRun<'a> {
        static MAIN: std::sync::LazyLock<warren_core::AgentAlias> =
            std::sync::LazyLock::new(|| "main".parse().unwrap_or_else(|e| panic!("{e}")));
        NewRun {
            id,
            sop: "triage",
            agent: &MAIN,
            trigger: "manual",
            input,
            definition: def,
            max_for_sop: 1,
            max_global: 8,
            lease_ms: 30_000,
        }
    }

    #[test]
    fn caps_cas_receipts_and_approvals() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("sop").join("runs.db");
        assert!(SopStore::open_existing(&path)?.is_none());
        let store = SopStore::open(&path)?;
        let me = Owner::current();
        let def = serde_json::json!({"steps": [{"id": "a"}, {"id": "gate"}]});
        let input = serde_json::json!({});
        let run = store.start(&new_run("r1", &def, &input), &me)?;
        assert!(matches!(
            store.start(&new_run("r2", &def, &input), &me),
            Err(SopStoreError::SopBusy { .. })
        ));
        store.record_step(
            "r1",
            &StepOutcome {
                step_id: "a",
                idx: 0,
                kind: "turn",
                output: "out",
                receipt: Some("rc"),
            },
        )?;
        assert_eq!(
            store.step("r1", "a")?.map(|s| s.status).as_deref(),
            Some("recorded")
        );
        let rev = store.advance(
            "r1",
            Some("a"),
            1,
            run.revision,
            ("engine", "step a done", None),
        )?;
        assert!(matches!(
            store.advance("r1", Some("a"), 1, run.revision, ("engine", "x", None)),
            Err(SopStoreError::Conflict { .. })
        ));
        assert!(store.decide("r1", "gate", true, "cli", None).is_err());
        store.set_waiting("r1", true, rev)?;
        store.decide("r1", "gate", false, "cli", Some("no"))?;
        assert_eq!(
            store.approval("r1", "gate")?.map(|a| a.decision).as_deref(),
            Some("denied")
        );
        assert!(store.finish("r1", "denied", None, "engine", None)?);
        assert_eq!(store.prune("triage", 0)?, 1);
        let mem = SopStore::in_memory()?;
        assert!(!mem.is_durable());
        mem.start(&new_run("m1", &def, &input), &me)?;
        Ok(())
    }
}
