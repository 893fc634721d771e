//! The cron store (STATE-9): `data/cron/jobs.db` — jobs (declared in config or added at
//! runtime), their lock row and their run history (start, end, status, output excerpt, tokens,
//! cost, receipts, delivery). Read paths ([`CronStore::open_existing`]) never create the file.
//!
//! Honest runs ([`runs`]): every run path claims the job with [`CronStore::claim`] in one
//! transaction — the lock columns name the run and its owner (PID + boot ID + the process's
//! start time + its PID namespace, a [`StoredOwner`](crate::control_plane::StoredOwner), issue
//! 17); a second claim while the holder is alive is refused naming it, a holder that is
//! provably gone ([`StoredOwner::is_alive`](crate::control_plane::StoredOwner::is_alive):
//! another boot, a dead PID, or a PID of our namespace now held by a process that started at
//! another time) loses its lock and its run becomes `lost`. A holder that cannot be judged
//! (another PID namespace, a process we may not inspect) holds the lock while its heartbeat
//! (`jobs.lock_beat_ms`, renewed by [`CronStore::heartbeat`]) is fresh. [`CronStore::finish`]
//! stores the result and the status in one transaction, so `ok` is never recorded for a result
//! that was not stored. The row codecs are [`rows`]; one agent's jobs and runs (rename, delete,
//! restore) are in `agent.rs`.

mod agent;
mod rows;
mod runs;

pub use agent::AgentCron;
use rows::{JOB_COLUMNS, get_job, insert_job, job_row, list_jobs};

use std::path::{Path, PathBuf};

use rusqlite::{Connection, params};
use serde::{Deserialize, Serialize};
use warren_core::AgentAlias;

use crate::control_plane::open_with_owner_start;
use crate::sqlite_util::SharedConn;
use crate::timefmt;

/// Schema version of `jobs.db` (`PRAGMA user_version`): 1 without the owner's start time, 2
/// with it and the owner's PID namespace (`jobs.lock_start`, `jobs.lock_ns`,
/// `runs.owner_start`, `runs.owner_ns`, issue 17) and the lock holder's heartbeat
/// (`jobs.lock_beat_ms`, [`crate::control_plane::monotonic_ms`]).
pub const SCHEMA_VERSION: i64 = 2;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS jobs (
    name             TEXT PRIMARY KEY NOT NULL,
    agent            TEXT NOT NULL,
    schedule_kind    TEXT NOT NULL CHECK (schedule_kind IN ('cron', 'every', 'at')),
    schedule         TEXT NOT NULL,
    tz               TEXT,
    message          TEXT,
    command          TEXT,
    session          TEXT,
    enabled          INTEGER NOT NULL DEFAULT 1,
    paused_reason    TEXT,
    source           TEXT NOT NULL CHECK (source IN ('declared', 'runtime', 'heartbeat')),
    catch_up         TEXT NOT NULL DEFAULT 'skip' CHECK (catch_up IN ('skip', 'once')),
    budget_usd       REAL,
    daily_budget_usd REAL,
    webhook          TEXT,
    next_fire_ms     INTEGER,
    failures         INTEGER NOT NULL DEFAULT 0,
    note             TEXT,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    lock_run         TEXT,
    lock_pid         INTEGER,
    lock_boot        TEXT,
    lock_start       INTEGER,
    lock_ns          TEXT,
    locked_at        TEXT,
    lock_beat_ms     INTEGER,
    probe            TEXT,
    probe_state      TEXT,
    CHECK ((message IS NULL) != (command IS NULL))
);
CREATE INDEX IF NOT EXISTS jobs_next_fire ON jobs(next_fire_ms) WHERE enabled = 1;
CREATE TABLE IF NOT EXISTS runs (
    id             TEXT PRIMARY KEY NOT NULL,
    job            TEXT NOT NULL,
    agent          TEXT NOT NULL,
    trigger        TEXT NOT NULL,
    started_at     TEXT NOT NULL,
    finished_at    TEXT,
    status         TEXT NOT NULL CHECK (status IN
                   ('running', 'ok', 'failed', 'lost', 'cancelled', 'timed_out')),
    error          TEXT,
    output         TEXT,
    tokens_in      INTEGER NOT NULL DEFAULT 0,
    tokens_out     INTEGER NOT NULL DEFAULT 0,
    cost_usd       REAL NOT NULL DEFAULT 0,
    receipts       TEXT NOT NULL DEFAULT '[]',
    session        TEXT,
    delivery       TEXT,
    delivery_error TEXT,
    owner_pid      INTEGER NOT NULL,
    owner_boot     TEXT NOT NULL,
    owner_start    INTEGER,
    owner_ns       TEXT
);
CREATE INDEX IF NOT EXISTS runs_by_job ON runs(job, started_at);
";

/// Output kept per run (the rest is cut with a marker).
pub const OUTPUT_EXCERPT: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum CronError {
    #[error("cron store {path}: {cause}")]
    Db { path: PathBuf, cause: String },
    #[error("no cron job '{0}' (see `warren cron list`)")]
    NotFound(String),
    #[error("cron job '{0}' already exists (remove it first or pick another name)")]
    Exists(String),
    #[error("cron job '{job}' is declared in config.toml ([cron.jobs.{job}]); change it there")]
    Declared { job: String },
    #[error(
        "cron job '{job}' is already running (run {run} of pid {pid} since {since}); not started twice"
    )]
    Held {
        job: String,
        run: String,
        pid: u32,
        since: String,
    },
}

/// A job as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub name: String,
    pub agent: AgentAlias,
    pub schedule_kind: String,
    pub schedule: String,
    pub tz: Option<String>,
    pub message: Option<String>,
    pub command: Option<String>,
    pub session: Option<String>,
    pub enabled: bool,
    pub paused_reason: Option<String>,
    pub source: String,
    pub catch_up: String,
    pub budget_usd: Option<f64>,
    pub daily_budget_usd: Option<f64>,
    pub webhook: Option<String>,
    pub next_fire_ms: Option<i64>,
    pub failures: u32,
    pub note: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub lock_run: Option<String>,
    pub lock_pid: Option<u32>,
    pub lock_boot: Option<String>,
    pub locked_at: Option<String>,
    /// A heartbeat's check (JSON); the model is called only when it fires.
    pub probe: Option<String>,
    /// What the check saw last (a fingerprint, a message sequence number).
    pub probe_state: Option<String>,
}

impl Job {
    /// The next fire time as stored text (UTC), if any.
    pub fn next_fire(&self) -> Option<String> {
        self.next_fire_ms.map(format_ms)
    }
}

/// A stored UTC text of unix milliseconds.
pub fn format_ms(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .map(timefmt::format)
        .unwrap_or_default()
}

/// Now in unix milliseconds.
pub fn now_ms() -> i64 {
    i64::try_from(timefmt::now().unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX)
}

/// One run of a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    pub id: String,
    pub job: String,
    pub agent: AgentAlias,
    pub trigger: String,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub status: String,
    pub error: Option<String>,
    pub output: Option<String>,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub cost_usd: f64,
    pub receipts: Vec<String>,
    pub session: Option<String>,
    pub delivery: Option<String>,
    pub delivery_error: Option<String>,
    pub owner_pid: u32,
    pub owner_boot: String,
}

/// What a run produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunResult {
    pub status: RunStatus,
    pub error: Option<String>,
    pub output: String,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub cost_usd: f64,
    pub receipts: Vec<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RunStatus {
    Ok,
    #[default]
    Failed,
    Cancelled,
    TimedOut,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Ok => "ok",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::TimedOut => "timed_out",
        }
    }
}

/// How finishing a run changes its job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobAfterRun {
    /// `Some` = set the next fire time (a backoff, or `None` inside to stop firing).
    pub next_fire_ms: Option<Option<i64>>,
    /// Pause the job with this reason.
    pub pause: Option<String>,
}

/// `data/cron/jobs.db`.
#[derive(Debug)]
pub struct CronStore {
    conn: SharedConn,
}

impl CronStore {
    /// Opens (creating `data/cron/` and the file) for writing, at schema 2
    /// ([`open_with_owner_start`]: version 2 adds `jobs.lock_start`, `jobs.lock_ns`,
    /// `jobs.lock_beat_ms`, `runs.owner_start` and `runs.owner_ns`).
    pub fn open(path: &Path) -> Result<Self, CronError> {
        let conn = open_with_owner_start(
            path,
            SCHEMA_VERSION,
            SCHEMA,
            &[
                ("jobs", "lock_start", "INTEGER"),
                ("jobs", "lock_ns", "TEXT"),
                ("jobs", "lock_beat_ms", "INTEGER"),
                ("runs", "owner_start", "INTEGER"),
                ("runs", "owner_ns", "TEXT"),
            ],
        )
        .map_err(|e| CronError::Db {
            path: path.to_path_buf(),
            cause: e.cause(),
        })?;
        Ok(Self { conn })
    }

    /// Opens an existing store read-only; `None` when there is none (= no jobs).
    pub fn open_existing(path: &Path) -> Result<Option<Self>, CronError> {
        let conn = SharedConn::open_existing(path).map_err(|e| CronError::Db {
            path: path.to_path_buf(),
            cause: e.cause(),
        })?;
        Ok(conn.map(|conn| Self { conn }))
    }

    pub fn path(&self) -> &Path {
        self.conn.path()
    }

    /// A SQLite error on this store; a full disk reads "disk full at <dir>" (issue 15 §8).
    fn err(&self, e: rusqlite::Error) -> CronError {
        CronError::Db {
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

    /// Refuses a lock change on a store left read-only at schema 1 by a failed migration, with
    /// why (its statements name `lock_start` / `owner_start` / ..., which SQLite would report as
    /// a missing column).
    fn writable(&self) -> Result<(), CronError> {
        match self.conn.read_only() {
            None => Ok(()),
            Some(why) => Err(CronError::Db {
                path: self.conn.path().to_path_buf(),
                cause: why.to_string(),
            }),
        }
    }

    /// Adds a job; refused if the name exists.
    pub fn insert(&self, job: &Job) -> Result<(), CronError> {
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(|e| self.err(e))?;
        if get_job(&tx, &job.name).map_err(|e| self.err(e))?.is_some() {
            return Err(CronError::Exists(job.name.clone()));
        }
        insert_job(&tx, job).map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))
    }

    /// Reconciles declared jobs with config: inserts new ones, updates changed ones (keeping
    /// runtime state; `next_fire_ms` recomputed by `next` only when the schedule changed or the
    /// job was re-enabled), deletes declared rows no longer in config. Runtime jobs of the same
    /// name are left alone (reported). Returns `(added, updated, removed, conflicts)`.
    pub fn reconcile_declared(
        &self,
        declared: &[Job],
        next: &dyn Fn(&Job) -> Option<i64>,
    ) -> Result<(usize, usize, usize, Vec<String>), CronError> {
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(|e| self.err(e))?;
        let (mut added, mut updated, mut conflicts) = (0, 0, Vec::new());
        for job in declared {
            match get_job(&tx, &job.name).map_err(|e| self.err(e))? {
                None => {
                    let mut job = job.clone();
                    job.next_fire_ms = if job.enabled { next(&job) } else { None };
                    insert_job(&tx, &job).map_err(|e| self.err(e))?;
                    added += 1;
                }
                Some(old) if old.source == "runtime" || old.source != job.source => {
                    conflicts.push(job.name.clone())
                }
                Some(old) => {
                    let schedule_changed = (&old.schedule_kind, &old.schedule, &old.tz)
                        != (&job.schedule_kind, &job.schedule, &job.tz);
                    let same = !schedule_changed
                        && (
                            &old.agent,
                            &old.message,
                            &old.command,
                            &old.session,
                            old.enabled,
                            &old.catch_up,
                            old.budget_usd,
                            old.daily_budget_usd,
                            &old.webhook,
                            &old.probe,
                        ) == (
                            &job.agent,
                            &job.message,
                            &job.command,
                            &job.session,
                            job.enabled,
                            &job.catch_up,
                            job.budget_usd,
                            job.daily_budget_usd,
                            &job.webhook,
                            &job.probe,
                        );
                    if same {
                        continue;
                    }
                    let re_enabled = job.enabled && !old.enabled;
                    let next_fire = if !job.enabled {
                        None
                    } else if schedule_changed || re_enabled || old.next_fire_ms.is_none() {
                        next(job)
                    } else {
                        old.next_fire_ms
                    };
                    tx.execute(
                        "UPDATE jobs SET agent = ?2, schedule_kind = ?3, schedule = ?4, tz = ?5,
                         message = ?6, command = ?7, session = ?8, enabled = ?9, catch_up = ?10,
                         budget_usd = ?11, daily_budget_usd = ?12, webhook = ?13, probe = ?17,
                         next_fire_ms = ?14, paused_reason = CASE WHEN ?9 THEN NULL ELSE paused_reason END,
                         failures = CASE WHEN ?15 THEN 0 ELSE failures END, updated_at = ?16
                         WHERE name = ?1",
                        params![
                            job.name,
                            job.agent.as_str(),
                            job.schedule_kind,
                            job.schedule,
                            job.tz,
                            job.message,
                            job.command,
                            job.session,
                            job.enabled,
                            job.catch_up,
                            job.budget_usd,
                            job.daily_budget_usd,
                            job.webhook,
                            next_fire,
                            re_enabled,
                            timefmt::format(timefmt::now()),
                            job.probe,
                        ],
                    )
                    .map_err(|e| self.err(e))?;
                    updated += 1;
                }
            }
        }
        let names: Vec<&str> = declared.iter().map(|j| j.name.as_str()).collect();
        let stale: Vec<String> = list_jobs(&tx)
            .map_err(|e| self.err(e))?
            .into_iter()
            .filter(|j| j.source != "runtime" && !names.contains(&j.name.as_str()))
            .map(|j| j.name)
            .collect();
        for name in &stale {
            tx.execute("DELETE FROM jobs WHERE name = ?1", params![name])
                .map_err(|e| self.err(e))?;
        }
        tx.commit().map_err(|e| self.err(e))?;
        Ok((added, updated, stale.len(), conflicts))
    }

    pub fn get(&self, name: &str) -> Result<Option<Job>, CronError> {
        get_job(&self.conn(), name).map_err(|e| self.err(e))
    }

    pub fn list(&self) -> Result<Vec<Job>, CronError> {
        list_jobs(&self.conn()).map_err(|e| self.err(e))
    }

    /// The earliest fire time of an enabled, unlocked job.
    pub fn next_due(&self) -> Result<Option<i64>, CronError> {
        self.conn()
            .query_row(
                "SELECT MIN(next_fire_ms) FROM jobs WHERE enabled = 1 AND lock_run IS NULL",
                [],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))
    }

    /// Enabled, unlocked jobs due at `now_ms`, earliest first.
    pub fn due(&self, now_ms: i64) -> Result<Vec<Job>, CronError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare(&format!(
                "SELECT {JOB_COLUMNS} FROM jobs WHERE enabled = 1 AND lock_run IS NULL
                 AND next_fire_ms IS NOT NULL AND next_fire_ms <= ?1 ORDER BY next_fire_ms"
            ))
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![now_ms], job_row)
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }

    /// Sets the next fire time (catch-up and one-shot handling).
    pub fn set_next_fire(&self, name: &str, next: Option<i64>) -> Result<(), CronError> {
        self.conn()
            .execute(
                "UPDATE jobs SET next_fire_ms = ?2 WHERE name = ?1",
                params![name, next],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Records what a heartbeat's check saw and, when it did not fire, its next tick (no run).
    pub fn set_probe_state(
        &self,
        name: &str,
        state: Option<&str>,
        next_fire: Option<Option<i64>>,
    ) -> Result<(), CronError> {
        self.conn()
            .execute(
                "UPDATE jobs SET probe_state = ?2,
                 next_fire_ms = CASE WHEN ?3 THEN ?4 ELSE next_fire_ms END WHERE name = ?1",
                params![name, state, next_fire.is_some(), next_fire.flatten()],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Pauses (with `reason`) or resumes a job; resuming clears the failure count and sets
    /// `next_fire`.
    pub fn set_enabled(
        &self,
        name: &str,
        enabled: bool,
        reason: Option<&str>,
        next_fire: Option<i64>,
    ) -> Result<Job, CronError> {
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(|e| self.err(e))?;
        if get_job(&tx, name).map_err(|e| self.err(e))?.is_none() {
            return Err(CronError::NotFound(name.into()));
        }
        tx.execute(
            "UPDATE jobs SET enabled = ?2, paused_reason = ?3, next_fire_ms = ?4,
             failures = CASE WHEN ?2 THEN 0 ELSE failures END,
             note = CASE WHEN ?2 THEN NULL ELSE note END, updated_at = ?5 WHERE name = ?1",
            params![
                name,
                enabled,
                reason,
                next_fire,
                timefmt::format(timefmt::now())
            ],
        )
        .map_err(|e| self.err(e))?;
        let job = get_job(&tx, name)
            .map_err(|e| self.err(e))?
            .ok_or_else(|| CronError::NotFound(name.into()))?;
        tx.commit().map_err(|e| self.err(e))?;
        Ok(job)
    }

    /// Removes a runtime job and its history (declared jobs are removed from config).
    pub fn remove(&self, name: &str) -> Result<(), CronError> {
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(|e| self.err(e))?;
        let job = get_job(&tx, name)
            .map_err(|e| self.err(e))?
            .ok_or_else(|| CronError::NotFound(name.into()))?;
        if job.source != "runtime" {
            return Err(CronError::Declared { job: job.name });
        }
        tx.execute("DELETE FROM runs WHERE job = ?1", params![name])
            .map_err(|e| self.err(e))?;
        tx.execute("DELETE FROM jobs WHERE name = ?1", params![name])
            .map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control_plane::Owner;

    fn job(name: &str) -> Job {
        let now = timefmt::format(timefmt::now());
        Job {
            name: name.into(),
            agent: "main".parse().unwrap(),
            schedule_kind: "every".into(),
            schedule: "1s".into(),
            tz: None,
            message: Some("hi".into()),
            command: None,
            session: None,
            enabled: true,
            paused_reason: None,
            source: "runtime".into(),
            catch_up: "skip".into(),
            budget_usd: None,
            daily_budget_usd: None,
            webhook: None,
            next_fire_ms: Some(1000),
            failures: 0,
            note: None,
            created_at: now.clone(),
            updated_at: now,
            lock_run: None,
            lock_pid: None,
            lock_boot: None,
            locked_at: None,
            probe: None,
            probe_state: None,
        }
    }

    #[test]
    fn read_paths_never_create_the_store() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("cron").join("jobs.db");
        assert!(CronStore::open_existing(&path)?.is_none());
        assert!(!path.exists() && !path.parent().is_some_and(Path::exists));
        CronStore::open(&path)?.insert(&job("a"))?;
        let read = CronStore::open_existing(&path)?.map(|s| s.list());
        assert_eq!(read.map(|l| l.map(|j| j.len()).ok()), Some(Some(1)));
        Ok(())
    }

    #[test]
    fn a_second_claim_is_refused_naming_the_holder_and_a_gone_holder_is_lost()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let store = CronStore::open(&dir.path().join("jobs.db"))?;
        store.insert(&job("a"))?;
        let me = Owner::current();
        store.claim("a", "r1", "schedule", None, &me, Some(Some(2000)))?;
        match store.claim("a", "r2", "manual", None, &me, None) {
            Err(CronError::Held { run, pid, .. }) => {
                assert_eq!((run.as_str(), pid), ("r1", me.pid))
            }
            other => panic!("expected Held, got {other:?}"),
        }
        let ok = RunResult {
            status: RunStatus::Ok,
            output: "done".into(),
            tokens_in: 3,
            tokens_out: 4,
            ..RunResult::default()
        };
        let after = JobAfterRun {
            next_fire_ms: None,
            pause: None,
        };
        assert!(store.finish("r1", &ok, &after, 10)?);
        assert_eq!(store.runs("a", 10)?[0].status, "ok");
        // A holder of another boot is provably gone: its run is lost, the claim succeeds.
        let gone = Owner {
            pid: me.pid,
            boot_id: "another-boot".into(),
        };
        store.claim("a", "r3", "schedule", None, &gone, None)?;
        store.claim("a", "r4", "manual", None, &me, None)?;
        assert_eq!(store.run("r3")?.map(|r| r.status).as_deref(), Some("lost"));
        // Finishing a lost run changes nothing: it stays lost, never ok.
        assert!(!store.finish("r3", &ok, &after, 10)?);
        assert_eq!(store.run("r3")?.map(|r| r.status).as_deref(), Some("lost"));
        Ok(())
    }

    #[test]
    fn reap_marks_runs_of_a_gone_owner_lost_and_clears_the_lock()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let store = CronStore::open(&dir.path().join("jobs.db"))?;
        store.insert(&job("a"))?;
        let gone = Owner {
            pid: u32::MAX - 1,
            boot_id: crate::control_plane::boot_id(),
        };
        store.claim("a", "r1", "schedule", None, &gone, None)?;
        assert_eq!(store.reap()?, vec!["r1".to_string()]);
        let job = store.get("a")?;
        assert_eq!(job.and_then(|j| j.lock_run), None);
        assert_eq!(store.run("r1")?.map(|r| r.status).as_deref(), Some("lost"));
        Ok(())
    }

    #[test]
    fn at_start_a_lock_of_this_pid_is_an_earlier_process_and_its_run_lost()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let store = CronStore::open(&dir.path().join("jobs.db"))?;
        store.insert(&job("a"))?;
        // A daemon that is PID 1 of a container, killed mid-run and started again.
        store.claim("a", "r1", "schedule", None, &Owner::current(), None)?;
        assert!(
            store.reap()?.is_empty(),
            "any time, this process's run is live"
        );
        assert_eq!(store.reap_at_start()?, vec!["r1".to_string()]);
        assert_eq!(store.get("a")?.and_then(|j| j.lock_run), None);
        assert_eq!(store.run("r1")?.map(|r| r.status).as_deref(), Some("lost"));
        store.claim("a", "r2", "schedule", None, &Owner::current(), None)?;
        Ok(())
    }

    #[test]
    fn agent_jobs_follow_rename_delete_and_restore() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let store = CronStore::open(&dir.path().join("jobs.db"))?;
        store.insert(&job("a"))?;
        store.claim("a", "r1", "manual", None, &Owner::current(), None)?;
        let (main, ops) = ("main".parse()?, "ops".parse()?);
        store.rename_agent(&main, &ops)?;
        let archive = store.export_agent(&ops)?;
        assert_eq!((archive.jobs.len(), archive.runs.len()), (1, 1));
        store.delete_agent(&ops)?;
        assert!(store.list()?.is_empty());
        store.import_agent(&archive, &ops, "restored from archive")?;
        let back = store.get("a")?;
        assert_eq!(
            back.map(|j| (j.agent, j.enabled, j.paused_reason)),
            Some((ops.clone(), false, Some("restored from archive".into())))
        );
        assert_eq!(store.run("r1")?.map(|r| r.status).as_deref(), Some("lost"));
        Ok(())
    }
}
