//! The control plane (STATE-11): `data/control_plane.db`, one row per background run (cron
//! now; SOP runs and background delegates later) with its owner (PID + boot ID + the process's
//! start time + its PID namespace, one [`StoredOwner`]), producer kind, start time and state
//! `running | ok | failed | lost | cancelled | timed_out`. Rows of owners that are provably gone
//! (another boot, a dead PID of this boot, a PID of our namespace now held by a process that
//! started at another time, or another PID namespace no process is in any more) are marked
//! `lost` by the reaper the daemon runs at start ([`ControlPlane::reap`]). An owner we cannot
//! judge (another PID namespace, a process we may not inspect) is alive while its heartbeat is
//! fresh: the owning process renews `beat_ms` of its running rows every [`HEARTBEAT`]
//! ([`ControlPlane::heartbeat`], on [`monotonic_ms`]); one older than [`HEARTBEAT_STALE`] is
//! gone. A cancel request is a flag on the row; the owning process acts on it. Read paths
//! ([`ControlPlane::open_existing`]) never create the file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, ToSql, params};
use serde::Serialize;

use crate::sqlite_util::{OpenError, SharedConn, Sync, alias_column};
use crate::timefmt;

mod owner;

pub(crate) use owner::Namespaces;
pub use owner::{Owner, StoredOwner, boot_id, pid_namespace, process_start};

/// Schema version of `control_plane.db` (`PRAGMA user_version`): 1 without the owner's start
/// time, 2 with it and the owner's PID namespace (`owner_start`, `owner_ns`, issue 17).
pub const SCHEMA_VERSION: i64 = 2;

/// How often an owner renews the heartbeat of its running rows (control-plane runs, cron locks).
pub const HEARTBEAT: Duration = Duration::from_secs(30);

/// Age past which a heartbeat no longer vouches for an owner we cannot judge otherwise: three
/// missed beats (a busy disk or a slow tick is not a death).
pub const HEARTBEAT_STALE: Duration = Duration::from_secs(3 * HEARTBEAT.as_secs());

/// [`HEARTBEAT_STALE`] in milliseconds of [`monotonic_ms`].
#[allow(clippy::cast_possible_wrap)] // 90 s
const STALE_MS: i64 = HEARTBEAT_STALE.as_secs() as i64 * 1000;

/// `CLOCK_MONOTONIC` in milliseconds: the clock heartbeats are written and judged on. Wall-clock
/// time would make a live owner look dead after an NTP step forward or a suspend (and a dead one
/// fresh after a step back); this clock does not jump and stops while the machine sleeps. It
/// counts from the boot, the same for every process of the machine: rows are compared only
/// within their owner's boot ([`StoredOwner::boot_id`]). Not covered: a container in its own
/// time namespace (an offset monotonic clock; Docker and Podman do not create one).
pub fn monotonic_ms() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid, exclusively borrowed `ts`;
    // CLOCK_MONOTONIC is always available on Linux (std's `Instant` reads the same clock but
    // does not hand out its value, which a row must store).
    #[allow(unsafe_code)]
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    // time_t and c_long are i32 on 32-bit targets.
    #[allow(clippy::useless_conversion)]
    let ms = i64::from(ts.tv_sec) * 1000 + i64::from(ts.tv_nsec) / 1_000_000;
    ms
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS runs (
    id               TEXT PRIMARY KEY NOT NULL,
    kind             TEXT NOT NULL,
    agent            TEXT NOT NULL,
    label            TEXT NOT NULL,
    owner_pid        INTEGER NOT NULL,
    owner_boot       TEXT NOT NULL,
    owner_start      INTEGER,
    owner_ns         TEXT,
    started_at       TEXT NOT NULL,
    finished_at      TEXT,
    state            TEXT NOT NULL CHECK (state IN
                     ('running', 'ok', 'failed', 'lost', 'cancelled', 'timed_out')),
    heartbeat_at     TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    error            TEXT,
    beat_ms          INTEGER
);
CREATE INDEX IF NOT EXISTS runs_by_state ON runs(state);
CREATE INDEX IF NOT EXISTS runs_by_started ON runs(started_at);
";

/// [`open_owner_store`] with WAL NORMAL: `control_plane.db` and the cron store's `jobs.db`.
/// Every commit survives a process crash (the case the reapers handle); a power loss may roll
/// back the last commits — a registration, a claim or a result then reads as still running and
/// the next boot marks it `lost`, never `ok`. No fsync per run keeps fire-time lateness low.
pub(crate) fn open_with_owner_start(
    path: &Path,
    version: i64,
    schema: &str,
    start_columns: &[(&str, &str, &str)],
) -> Result<SharedConn, OpenError> {
    open_owner_store(path, Sync::Normal, version, schema, start_columns)
}

/// Opens (creating its directory) a store that records owners with their start time for
/// writing: `control_plane.db`, the cron store's `jobs.db` and the SOP store's `runs.db` at
/// schema `version`, of which version 1 knew no start time nor PID namespace.
/// [`warren_config::sqlite::open_migrated`] snapshots an older file first, applies `schema` and
/// adds each `(table, column, type)` of `start_columns` it lacks in place: the rows of version 1
/// keep everything and get no start time nor namespace (NULL: their owners are judged by PID
/// and boot only, as when they were written). A failed migration leaves the file read-only at
/// its old schema, where reads still answer ([`owner_columns`]) and writes say why
/// ([`SharedConn::read_only`]). The error names the file (or its directory); a caller whose
/// error names it too takes [`OpenError::cause`].
pub(crate) fn open_owner_store(
    path: &Path,
    sync: Sync,
    version: i64,
    schema: &str,
    start_columns: &[(&str, &str, &str)],
) -> Result<SharedConn, OpenError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|cause| OpenError::Dir {
            dir: dir.to_path_buf(),
            cause,
        })?;
    }
    let migrate = |conn: &mut Connection| {
        let tx = conn.transaction()?;
        tx.execute_batch(schema)?;
        for (table, column, kind) in start_columns {
            let has = tx
                .prepare("SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2")?
                .exists(params![table, column])?;
            if !has {
                tx.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {kind}"))?;
            }
        }
        tx.commit()
    };
    warren_config::sqlite::open_migrated(path, sync, version, migrate).map_err(|e| {
        OpenError::Sqlite {
            path: path.to_path_buf(),
            cause: warren_config::sqlite::cause_text(&e, path),
        }
    })
}

/// `owner_start, owner_ns` of `table` for a SELECT list, with `NULL` for either column a file
/// of schema 1 lacks (read-only: a read never migrates, and a failed migration leaves it at 1),
/// so read paths still answer and its owners are judged by PID and boot, as when written.
pub(crate) fn owner_columns(conn: &Connection, table: &str) -> rusqlite::Result<String> {
    Ok(owner_column_names(conn, table)?.join(", "))
}

fn owner_column_names(conn: &Connection, table: &str) -> rusqlite::Result<[&'static str; 2]> {
    let has = |column: &'static str| -> rusqlite::Result<&'static str> {
        let has = conn
            .prepare_cached("SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2")?
            .exists(params![table, column])?;
        Ok(if has { column } else { "NULL" })
    };
    Ok([has("owner_start")?, has("owner_ns")?])
}

/// A WHERE condition: the row of `table` (columns `owner_pid`, `owner_boot`, `owner_start`,
/// `owner_ns`) is `owner`'s, the SQL form of [`StoredOwner::is`]. Its parameters, from
/// `?first` on, are the PID, boot, start time and PID namespace of [`Owner::stored`]. The start
/// time and namespace are compared where both the row and the owner have them: a row of schema
/// 1 (NULL) is matched by PID and boot as before; a row of an earlier process that had the same
/// PID (another start time), or of another PID namespace, is not.
pub(crate) fn same_owner(conn: &Connection, table: &str, first: usize) -> rusqlite::Result<String> {
    let [start, ns] = owner_column_names(conn, table)?;
    let [pid, boot, start_p, ns_p] = [first, first + 1, first + 2, first + 3];
    Ok(format!(
        "owner_pid = ?{pid} AND owner_boot = ?{boot} \
         AND ({start} IS NULL OR ?{start_p} IS NULL OR {start} = ?{start_p}) \
         AND ({ns} IS NULL OR ?{ns_p} IS NULL OR {ns} = ?{ns_p})"
    ))
}

/// Sets `set` on the rows of `table` that are `owner`'s ([`same_owner`]) and match `filter`;
/// `set` and `filter` take their parameters from `?5` on (`values`, in order). Returns the
/// rows changed. The renewals (heartbeat, SOP lease) of this very process go through it.
pub(crate) fn update_owned(
    conn: &Connection,
    table: &str,
    set: &str,
    filter: &str,
    owner: &Owner,
    values: &[&dyn ToSql],
) -> rusqlite::Result<usize> {
    let mine = same_owner(conn, table, 1)?;
    let o = owner.stored();
    let mut all: Vec<&dyn ToSql> = vec![&o.pid, &o.boot_id, &o.start, &o.pid_ns];
    all.extend_from_slice(values);
    conn.execute(
        &format!("UPDATE {table} SET {set} WHERE {filter} AND {mine}"),
        all.as_slice(),
    )
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
    /// Judge it with [`StoredOwner::is_alive`].
    #[serde(flatten)]
    pub owner: StoredOwner,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub state: String,
    /// When the owner last renewed the row, for people (wall clock); judged is `beat_ms`.
    pub heartbeat_at: Option<String>,
    /// The heartbeat the owner is judged by ([`monotonic_ms`], meaningful in its boot only).
    #[serde(skip)]
    pub beat_ms: Option<i64>,
    pub cancel_requested: bool,
    pub error: Option<String>,
}

impl RunRecord {
    /// Whether the run's owner may still run now, its heartbeat counted
    /// ([`StoredOwner::is_alive_beating`]).
    pub fn owner_alive(&self) -> bool {
        self.owner.is_alive_beating(self.beat_ms, monotonic_ms())
    }
}

/// `data/control_plane.db`.
#[derive(Debug)]
pub struct ControlPlane {
    conn: SharedConn,
}

impl ControlPlane {
    /// Opens (creating) the control plane for writing, at schema 2 ([`open_with_owner_start`]:
    /// version 2 adds `runs.owner_start` and `runs.owner_ns`).
    pub fn open(path: &Path) -> Result<Self, ControlPlaneError> {
        let conn = open_with_owner_start(
            path,
            SCHEMA_VERSION,
            SCHEMA,
            &[
                ("runs", "owner_start", "INTEGER"),
                ("runs", "owner_ns", "TEXT"),
                ("runs", "beat_ms", "INTEGER"),
            ],
        )
        .map_err(|e| ControlPlaneError::Db {
            path: path.to_path_buf(),
            cause: e.cause(),
        })?;
        Ok(Self { conn })
    }

    /// Opens an existing control plane read-only; `None` when there is none yet.
    pub fn open_existing(path: &Path) -> Result<Option<Self>, ControlPlaneError> {
        let conn = SharedConn::open_existing(path).map_err(|e| ControlPlaneError::Db {
            path: path.to_path_buf(),
            cause: e.cause(),
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

    /// Why this handle is read-only (a migration left the file at its old schema), `None` when
    /// it is writable: a long-lived holder (the heartbeat task) reopens such a handle later.
    pub fn read_only(&self) -> Option<&str> {
        self.conn.read_only()
    }

    /// Refuses a write to a store left read-only at schema 1 by a failed migration, with why
    /// (its statements name `owner_start` / `owner_ns`, which SQLite would report as missing
    /// columns).
    fn writable(&self) -> Result<(), ControlPlaneError> {
        match self.conn.read_only() {
            None => Ok(()),
            Some(why) => Err(ControlPlaneError::Db {
                path: self.conn.path().to_path_buf(),
                cause: why.to_string(),
            }),
        }
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
                 owner_boot = ?6, owner_start = ?8, owner_ns = ?9, finished_at = NULL,
                 error = NULL, cancel_requested = 0, heartbeat_at = ?7, beat_ms = ?10",
        )
    }

    /// Inserts a `running` row of `owner`, its heartbeat set to now (a process killed before
    /// its first beat leaves a row that goes stale, not one judged by the rule without a
    /// heartbeat); `on_conflict` says what an existing `id` becomes (empty: an existing id is
    /// an error; a resumed row's heartbeat must be reset too, not keep the dead owner's).
    fn insert_running(
        &self,
        id: &str,
        kind: &str,
        agent: &str,
        label: &str,
        owner: &Owner,
        on_conflict: &str,
    ) -> Result<(), ControlPlaneError> {
        self.writable()?;
        let owner = owner.stored();
        self.conn()
            .execute(
                &format!(
                    "INSERT INTO runs (id, kind, agent, label, owner_pid, owner_boot, started_at,
                     state, owner_start, owner_ns, heartbeat_at, beat_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'running', ?8, ?9, ?7, ?10)
                     {on_conflict}"
                ),
                params![
                    id,
                    kind,
                    agent,
                    label,
                    owner.pid,
                    owner.boot_id,
                    timefmt::format(timefmt::now()),
                    owner.start,
                    owner.pid_ns,
                    monotonic_ms()
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

    /// Running runs of `owner` with a cancel request: rows of this very process
    /// ([`same_owner`]), not of an earlier one that had its PID (a crashed daemon's run keeps
    /// its request until the reaper marks it `lost`).
    pub fn cancel_requests(&self, owner: &Owner) -> Result<Vec<String>, ControlPlaneError> {
        let conn = self.conn();
        let mine = same_owner(&conn, "runs", 1).map_err(|e| self.err(e))?;
        let mut stmt = conn
            .prepare(&format!(
                "SELECT id FROM runs WHERE state = 'running' AND cancel_requested = 1 AND {mine}"
            ))
            .map_err(|e| self.err(e))?;
        let o = owner.stored();
        let rows = stmt
            .query_map(params![o.pid, o.boot_id, o.start, o.pid_ns], |r| r.get(0))
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<String>, _>>()
            .map_err(|e| self.err(e))
    }

    pub fn get(&self, id: &str) -> Result<Option<RunRecord>, ControlPlaneError> {
        let conn = self.conn();
        let columns = columns(&conn).map_err(|e| self.err(e))?;
        conn.query_row(
            &format!("SELECT {columns} FROM runs WHERE id = ?1"),
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
        let columns = columns(&conn).map_err(|e| self.err(e))?;
        let mut stmt = conn
            .prepare(&format!(
                "SELECT {columns} FROM runs WHERE (?1 IS NULL OR agent = ?1)
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
        self.writable()?;
        let lost = gone_owners(
            &self.conn(),
            "SELECT id, owner_pid, owner_boot, owner_start, owner_ns, beat_ms FROM runs
             WHERE state = 'running'",
            reaper,
            monotonic_ms(),
        )
        .map_err(|e| self.err(e))?;
        for id in &lost {
            self.finish(id, "lost", Some("its owner process exited during the run"))?;
        }
        Ok(lost)
    }

    /// Renews the heartbeat of `owner`'s running rows to now (`beat_ms`, [`monotonic_ms`], and
    /// `heartbeat_at` for people), in one UPDATE: rows of this very process ([`same_owner`]),
    /// never an earlier one's that had its PID, whose heartbeat must age. The owning process
    /// calls it every [`HEARTBEAT`]; returns the rows renewed.
    pub fn heartbeat(&self, owner: &Owner) -> Result<usize, ControlPlaneError> {
        self.writable()?;
        update_owned(
            &self.conn(),
            "runs",
            "heartbeat_at = ?5, beat_ms = ?6",
            "state = 'running'",
            owner,
            params![timefmt::format(timefmt::now()), monotonic_ms()],
        )
        .map_err(|e| self.err(e))
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

/// The columns [`row`] reads (NULL for the owner's start and namespace in a file of schema 1,
/// [`owner_columns`], and for its `beat_ms`).
fn columns(conn: &Connection) -> rusqlite::Result<String> {
    let owner = owner_columns(conn, "runs")?;
    let beat = if conn
        .prepare_cached("SELECT 1 FROM pragma_table_info('runs') WHERE name = 'beat_ms'")?
        .exists([])?
    {
        "beat_ms"
    } else {
        "NULL"
    };
    Ok(format!(
        "id, kind, agent, label, owner_pid, owner_boot, {owner}, started_at, finished_at, state, \
         heartbeat_at, cancel_requested, error, {beat}"
    ))
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RunRecord> {
    Ok(RunRecord {
        id: r.get(0)?,
        kind: r.get(1)?,
        agent: alias_column(r, 2)?,
        label: r.get(3)?,
        owner: StoredOwner::from_row(r, 4)?,
        started_at: r.get(8)?,
        finished_at: r.get(9)?,
        state: r.get(10)?,
        heartbeat_at: r.get(11)?,
        cancel_requested: r.get(12)?,
        error: r.get(13)?,
        beat_ms: r.get(14)?,
    })
}

/// When a reaper runs: any time (this process may own running rows), or at the start of a
/// process that owns none yet (a row of its own PID and boot is an earlier process's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reaper {
    Anytime,
    AtStart,
}

/// The ids of the rows `sql` selects as `(id, owner_pid, owner_boot, owner_start, owner_ns,
/// heartbeat)` whose owner is gone ([`StoredOwner::is_alive_beating`] at `now`; the reapers of
/// the control plane and the cron store). At start ([`Reaper::AtStart`]) a row of this very
/// process is an earlier one's too.
pub(crate) fn gone_owners(
    conn: &Connection,
    sql: &str,
    reaper: Reaper,
    now: i64,
) -> rusqlite::Result<Vec<String>> {
    let me = Owner::current();
    let mut namespaces = Namespaces::default();
    let mut stmt = conn.prepare(sql)?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            StoredOwner::from_row(r, 1)?,
            r.get::<_, Option<i64>>(5)?,
        ))
    })?;
    let mut gone = Vec::new();
    for row in rows {
        let (id, owner, heartbeat) = row?;
        if (reaper == Reaper::AtStart && owner.is(&me))
            || !owner.alive_seen(heartbeat, now, &mut namespaces)
        {
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
