//! The control plane (STATE-11): `data/control_plane.db`, one row per background run (cron
//! now; SOP runs and background delegates later) with its owner (PID + boot ID), producer kind,
//! start time and state `running | ok | failed | lost | cancelled | timed_out`. Rows of owners
//! that are provably gone (another boot, or a dead PID of this boot) are marked `lost` by the
//! reaper the daemon runs at start ([`ControlPlane::reap`]). A cancel request is a flag on the
//! row; the owning process acts on it. Read paths ([`ControlPlane::open_existing`]) never create
//! the file.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use crate::sqlite_util::{SharedConn, Sync, alias_column};
use crate::timefmt;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS runs (
    id               TEXT PRIMARY KEY NOT NULL,
    kind             TEXT NOT NULL,
    agent            TEXT NOT NULL,
    label            TEXT NOT NULL,
    owner_pid        INTEGER NOT NULL,
    owner_boot       TEXT NOT NULL,
    started_at       TEXT NOT NULL,
    finished_at      TEXT,
    state            TEXT NOT NULL CHECK (state IN
                     ('running', 'ok', 'failed', 'lost', 'cancelled', 'timed_out')),
    heartbeat_at     TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    error            TEXT
);
CREATE INDEX IF NOT EXISTS runs_by_state ON runs(state);
CREATE INDEX IF NOT EXISTS runs_by_started ON runs(started_at);
";

/// Who runs something: a process of one boot of one machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Owner {
    pub pid: u32,
    pub boot_id: String,
}

impl Owner {
    /// This process.
    pub fn current() -> Self {
        Self {
            pid: std::process::id(),
            boot_id: boot_id(),
        }
    }

    /// Whether the owner may still run: `false` only when it is provably gone (another boot,
    /// or no process with its PID in this boot).
    pub fn is_alive(&self) -> bool {
        if self.boot_id != boot_id() {
            return false;
        }
        if self.pid == std::process::id() {
            return true;
        }
        self.pid != 0 && Path::new(&format!("/proc/{}", self.pid)).exists()
    }
}

/// `/proc/sys/kernel/random/boot_id` (empty when unreadable: then only the PID decides).
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

#[derive(Debug, thiserror::Error)]
pub enum ControlPlaneError {
    #[error("control plane {path}: {cause}")]
    Db { path: PathBuf, cause: String },
    #[error("no background run '{0}' (see `warren runs list`)")]
    NotFound(String),
    #[error("run '{id}' is already {state}; only running runs can be cancelled")]
    NotRunning { id: String, state: String },
}

/// One background run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRecord {
    pub id: String,
    pub kind: String,
    pub agent: warren_core::AgentAlias,
    pub label: String,
    pub owner_pid: u32,
    pub owner_boot: String,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub state: String,
    pub heartbeat_at: Option<String>,
    pub cancel_requested: bool,
    pub error: Option<String>,
}

/// `data/control_plane.db`.
#[derive(Debug)]
pub struct ControlPlane {
    conn: SharedConn,
}

impl ControlPlane {
    /// Opens (creating) the control plane for writing.
    pub fn open(path: &Path) -> Result<Self, ControlPlaneError> {
        // WAL NORMAL: every commit survives a process crash (the case the reaper handles);
        // a power loss may roll back the last commits — a registration or an end then reads as still running
        // and the next boot marks it `lost`, never `ok`. No fsync per run keeps fire-time
        // lateness low.
        let conn = SharedConn::open_store(path, Sync::Normal, SCHEMA).map_err(|cause| {
            ControlPlaneError::Db {
                path: path.to_path_buf(),
                cause,
            }
        })?;
        Ok(Self { conn })
    }

    /// Opens an existing control plane read-only; `None` when there is none yet.
    pub fn open_existing(path: &Path) -> Result<Option<Self>, ControlPlaneError> {
        let conn = SharedConn::open_existing(path).map_err(|cause| ControlPlaneError::Db {
            path: path.to_path_buf(),
            cause,
        })?;
        Ok(conn.map(|conn| Self { conn }))
    }

    /// A SQLite error on this store; a full disk reads "disk full at <dir>" (issue 15 §8).
    fn err(&self, e: rusqlite::Error) -> ControlPlaneError {
        ControlPlaneError::Db {
            path: self.conn.path().to_path_buf(),
            cause: warren_config::sqlite::cause_text(&e, self.conn.path()),
        }
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock()
    }

    /// Registers a running run of `owner`.
    pub fn register(
        &self,
        id: &str,
        kind: &str,
        agent: &str,
        label: &str,
        owner: &Owner,
    ) -> Result<(), ControlPlaneError> {
        self.insert_running(id, kind, agent, label, owner, "")
    }

    /// Registers `id` for `owner` as running again, or anew: a run another process continues
    /// after its owner died (an SOP run restored at start; the reaper had marked it `lost`).
    pub fn resume(
        &self,
        id: &str,
        kind: &str,
        agent: &str,
        label: &str,
        owner: &Owner,
    ) -> Result<(), ControlPlaneError> {
        self.insert_running(
            id,
            kind,
            agent,
            label,
            owner,
            "ON CONFLICT (id) DO UPDATE SET state = 'running', owner_pid = ?5,
                 owner_boot = ?6, finished_at = NULL, error = NULL, cancel_requested = 0",
        )
    }

    /// Inserts a `running` row of `owner`; `on_conflict` says what an existing `id` becomes
    /// (empty: an existing id is an error).
    fn insert_running(
        &self,
        id: &str,
        kind: &str,
        agent: &str,
        label: &str,
        owner: &Owner,
        on_conflict: &str,
    ) -> Result<(), ControlPlaneError> {
        self.conn()
            .execute(
                &format!(
                    "INSERT INTO runs (id, kind, agent, label, owner_pid, owner_boot, started_at, state)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'running') {on_conflict}"
                ),
                params![
                    id,
                    kind,
                    agent,
                    label,
                    owner.pid,
                    owner.boot_id,
                    timefmt::format(timefmt::now())
                ],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Ends a running run with `state` (a run already ended keeps its state).
    pub fn finish(
        &self,
        id: &str,
        state: &str,
        error: Option<&str>,
    ) -> Result<(), ControlPlaneError> {
        self.conn()
            .execute(
                "UPDATE runs SET state = ?2, error = ?3, finished_at = ?4
                 WHERE id = ?1 AND state = 'running'",
                params![id, state, error, timefmt::format(timefmt::now())],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Asks the owner to cancel `id`.
    pub fn request_cancel(&self, id: &str) -> Result<RunRecord, ControlPlaneError> {
        let run = self
            .get(id)?
            .ok_or_else(|| ControlPlaneError::NotFound(id.into()))?;
        if run.state != "running" {
            return Err(ControlPlaneError::NotRunning {
                id: id.into(),
                state: run.state,
            });
        }
        self.conn()
            .execute(
                "UPDATE runs SET cancel_requested = 1 WHERE id = ?1",
                params![id],
            )
            .map_err(|e| self.err(e))?;
        Ok(RunRecord {
            cancel_requested: true,
            ..run
        })
    }

    /// Running runs of `owner` with a cancel request.
    pub fn cancel_requests(&self, owner: &Owner) -> Result<Vec<String>, ControlPlaneError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare(
                "SELECT id FROM runs WHERE state = 'running' AND cancel_requested = 1
                 AND owner_pid = ?1 AND owner_boot = ?2",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![owner.pid, owner.boot_id], |r| r.get(0))
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<String>, _>>()
            .map_err(|e| self.err(e))
    }

    pub fn get(&self, id: &str) -> Result<Option<RunRecord>, ControlPlaneError> {
        self.conn()
            .query_row(
                &format!("SELECT {COLUMNS} FROM runs WHERE id = ?1"),
                params![id],
                row,
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    /// The newest runs first, of `agent` if given.
    pub fn list(
        &self,
        agent: Option<&str>,
        limit: u32,
    ) -> Result<Vec<RunRecord>, ControlPlaneError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare(&format!(
                "SELECT {COLUMNS} FROM runs WHERE (?1 IS NULL OR agent = ?1)
                 ORDER BY started_at DESC, id LIMIT ?2"
            ))
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![agent, limit], row)
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }

    /// Marks `lost` every running row whose owner is provably gone; returns their ids.
    pub fn reap(&self) -> Result<Vec<String>, ControlPlaneError> {
        self.reap_with(Reaper::Anytime)
    }

    /// [`ControlPlane::reap`] at daemon start, before this process registered any run: a row
    /// owned by this very PID in this boot is an earlier process's that had the same PID (a
    /// container's PID 1 restarted), so it is gone too.
    pub fn reap_at_start(&self) -> Result<Vec<String>, ControlPlaneError> {
        self.reap_with(Reaper::AtStart)
    }

    fn reap_with(&self, reaper: Reaper) -> Result<Vec<String>, ControlPlaneError> {
        let lost = gone_owners(
            &self.conn(),
            "SELECT id, owner_pid, owner_boot FROM runs WHERE state = 'running'",
            reaper,
        )
        .map_err(|e| self.err(e))?;
        for id in &lost {
            self.finish(id, "lost", Some("its owner process exited during the run"))?;
        }
        Ok(lost)
    }

    /// Repoints every row of agent `from` to `to` (LIFE-3).
    pub fn rename_agent(&self, from: &str, to: &str) -> Result<usize, ControlPlaneError> {
        self.conn()
            .execute(
                "UPDATE runs SET agent = ?2 WHERE agent = ?1",
                params![from, to],
            )
            .map_err(|e| self.err(e))
    }

    /// Removes every ended row of `agent` (LIFE-4; the cron store archives the runs).
    pub fn delete_agent(&self, agent: &str) -> Result<usize, ControlPlaneError> {
        self.conn()
            .execute(
                "DELETE FROM runs WHERE agent = ?1 AND state != 'running'",
                params![agent],
            )
            .map_err(|e| self.err(e))
    }
}

const COLUMNS: &str = "id, kind, agent, label, owner_pid, owner_boot, started_at, finished_at, \
                       state, heartbeat_at, cancel_requested, error";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RunRecord> {
    Ok(RunRecord {
        id: r.get(0)?,
        kind: r.get(1)?,
        agent: alias_column(r, 2)?,
        label: r.get(3)?,
        owner_pid: r.get(4)?,
        owner_boot: r.get(5)?,
        started_at: r.get(6)?,
        finished_at: r.get(7)?,
        state: r.get(8)?,
        heartbeat_at: r.get(9)?,
        cancel_requested: r.get(10)?,
        error: r.get(11)?,
    })
}

/// The ids of the rows `sql` selects as `(id, owner_pid, owner_boot)` whose owner process is
/// provably gone (the reapers of the control plane and the cron store).
/// When a reaper runs: any time (this process may own running rows), or at the start of a
/// process that owns none yet (a row of its own PID and boot is an earlier process's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reaper {
    Anytime,
    AtStart,
}

pub(crate) fn gone_owners(
    conn: &Connection,
    sql: &str,
    reaper: Reaper,
) -> rusqlite::Result<Vec<String>> {
    let me = Owner::current();
    let mut stmt = conn.prepare(sql)?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, u32>(1)?,
            r.get::<_, String>(2)?,
        ))
    })?;
    let mut gone = Vec::new();
    for row in rows {
        let (id, pid, boot_id) = row?;
        let owner = Owner { pid, boot_id };
        if (reaper == Reaper::AtStart && owner == me) || !owner.is_alive() {
            gone.push(id);
        }
    }
    Ok(gone)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_of_a_gone_owner_are_reaped_as_lost_and_live_ones_stay()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("control_plane.db");
        assert!(ControlPlane::open_existing(&path)?.is_none());
        assert!(!path.exists(), "a read path never creates the file");
        let cp = ControlPlane::open(&path)?;
        let me = Owner::current();
        let other_boot = Owner {
            pid: me.pid,
            boot_id: "00000000-0000-0000-0000-000000000000".into(),
        };
        cp.register("a", "cron", "main", "cron:a", &me)?;
        cp.register("b", "cron", "main", "cron:b", &other_boot)?;
        assert_eq!(cp.reap()?, vec!["b".to_string()]);
        let a = cp.get("a")?.map(|r| r.state);
        assert_eq!(a.as_deref(), Some("running"));
        assert_eq!(cp.get("b")?.map(|r| r.state).as_deref(), Some("lost"));
        cp.request_cancel("a")?;
        assert_eq!(cp.cancel_requests(&me)?, vec!["a".to_string()]);
        cp.finish("a", "cancelled", None)?;
        assert!(matches!(
            cp.request_cancel("a"),
            Err(ControlPlaneError::NotRunning { .. })
        ));
        assert_eq!(cp.list(Some("main"), 10)?.len(), 2);
        Ok(())
    }

    #[test]
    fn at_start_a_row_of_this_pid_is_an_earlier_process_and_lost()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let cp = ControlPlane::open(&dir.path().join("control_plane.db"))?;
        // A daemon that is PID 1 of a container, killed and started again: same PID, same boot.
        cp.register("a", "cron", "main", "cron:a", &Owner::current())?;
        assert!(
            cp.reap()?.is_empty(),
            "any time, this process's row is live"
        );
        assert_eq!(cp.reap_at_start()?, vec!["a".to_string()]);
        assert_eq!(cp.get("a")?.map(|r| r.state).as_deref(), Some("lost"));
        Ok(())
    }
}
