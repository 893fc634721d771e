//! The cron store's job lock names one process, not just a PID (issue 17, STATE-9/STATE-11): a
//! claim records its owner's start time (`/proc/<pid>/stat` field 22), so after a daemon crash a
//! PID the kernel gave to an unrelated process no longer keeps the job locked (never firing
//! again) nor its run `running`, while a lock of another PID namespace (a daemon in a container,
//! read from the host) is not judged by a PID number that names another process here, and is
//! taken once no process is in that namespace (the container was killed and restarted); and a
//! `jobs.db` of schema 1 (no start time nor namespace) is upgraded in place through the one
//! migration routine, keeping its jobs and runs. Real processes (`sleep`), real files.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use pretty_assertions::assert_eq;
use rusqlite::types::FromSql;
use rusqlite::{Connection, params};
use warren_store::control_plane::{Owner, boot_id, pid_namespace, process_start};
use warren_store::cron::{CronError, CronStore, Job, Run};

use crate::common::{DeadNamespace, LiveNamespace, Proc, old_file, or_skip, version};

type R = Result<(), Box<dyn std::error::Error>>;

pub(crate) fn job(name: &str) -> Job {
    let now = "2026-12-01T10:00:00Z".to_string();
    Job {
        name: name.into(),
        agent: "main".parse().unwrap(),
        schedule_kind: "every".into(),
        schedule: "1h".into(),
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

/// `(dir, db, store, reused)`: a store at `<dir>/cron/jobs.db` with two jobs. `crashed`: a daemon claimed it for run `r1`
/// and then died (SIGKILL: it never finished the run), its PID now held by `reused`, an unrelated
/// process started later (the rows are pointed at the new process's PID, as the kernel's reuse
/// would leave them). `live`: claimed for run `r2` by that process itself, with its own start
/// time.
fn crashed_and_live() -> (tempfile::TempDir, PathBuf, CronStore, Proc) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cron").join("jobs.db");
    let store = CronStore::open(&db).unwrap();
    store.insert(&job("crashed")).unwrap();
    store.insert(&job("live")).unwrap();
    let crashed = Proc::sleep();
    store
        .claim("crashed", "r1", "schedule", None, &crashed.owner(), None)
        .unwrap();
    drop(crashed);
    // Start times are clock ticks (1/100 s): the unrelated process starts visibly later.
    std::thread::sleep(Duration::from_millis(50));
    let reused = Proc::sleep();
    let conn = Connection::open(&db).unwrap();
    for reuse in [
        "UPDATE jobs SET lock_pid = ?1 WHERE name = 'crashed'",
        "UPDATE runs SET owner_pid = ?1 WHERE id = 'r1'",
    ] {
        conn.execute(reuse, params![reused.pid()]).unwrap();
    }
    assert!(
        reused.pid_and_boot().is_alive(),
        "by PID and boot alone the dead owner still looks alive"
    );
    store
        .claim("live", "r2", "schedule", None, &reused.owner(), None)
        .unwrap();
    (dir, db, store, reused)
}

fn status(store: &CronStore, run: &str) -> Option<String> {
    store.run(run).unwrap().map(|r| r.status)
}

fn lock(store: &CronStore, job: &str) -> Option<String> {
    store.get(job).unwrap().and_then(|j| j.lock_run)
}

/// `(jobs.lock_<what>, runs.owner_<what>)` of `job` and `run` (`what`: `start` or `ns`), read
/// by another connection.
fn recorded<T: FromSql>(db: &Path, what: &str, job: &str, run: &str) -> (Option<T>, Option<T>) {
    let conn = Connection::open(db).unwrap();
    let column = |sql: String, key: &str| -> Option<T> {
        conn.query_row(&sql, params![key], |r| r.get(0)).unwrap()
    };
    (
        column(format!("SELECT lock_{what} FROM jobs WHERE name = ?1"), job),
        column(format!("SELECT owner_{what} FROM runs WHERE id = ?1"), run),
    )
}

#[test]
fn a_job_locked_by_a_reused_pid_is_claimable_again_and_a_live_owner_keeps_its_lock_issue17() -> R {
    let (_dir, db, store, reused) = crashed_and_live();

    // The dead daemon's lock is gone: the job fires again, its run is lost.
    let me = Owner::current();
    store.claim("crashed", "r3", "manual", None, &me, None)?;
    assert_eq!(status(&store, "r1").as_deref(), Some("lost"));
    assert_eq!(lock(&store, "crashed").as_deref(), Some("r3"));
    // The live owner of the same PID keeps its lock, named in the refusal.
    match store.claim("live", "r4", "manual", None, &me, None) {
        Err(CronError::Held { run, pid, .. }) => {
            assert_eq!((run.as_str(), pid), ("r2", reused.pid()))
        }
        other => panic!("expected Held, got {other:?}"),
    }
    assert_eq!(status(&store, "r2").as_deref(), Some("running"));
    assert_eq!(status(&store, "r4"), None);

    // Each claim recorded its owner's start time, in the lock and in the run.
    let mine = process_start(me.pid);
    assert!(mine.is_some());
    assert_eq!(recorded(&db, "start", "crashed", "r3"), (mine, mine));
    let theirs = process_start(reused.pid());
    assert_eq!(recorded(&db, "start", "live", "r2"), (theirs, theirs));
    let ours = pid_namespace();
    assert!(ours.is_some());
    assert_eq!(recorded(&db, "ns", "crashed", "r3"), (ours.clone(), ours));
    Ok(())
}

/// Points `crashed`'s lock and run `r1` at PID namespace `ns` (a daemon in a container wrote
/// them, a version without the heartbeat: its lock has none, so the scan alone decides; a lock
/// that beats is judged by its heartbeat, heartbeat_owner).
fn lock_in_namespace(db: &Path, ns: Option<&str>) {
    let conn = Connection::open(db).unwrap();
    conn.execute(
        "UPDATE jobs SET lock_ns = ?1, lock_beat_ms = NULL WHERE name = 'crashed'",
        params![ns],
    )
    .unwrap();
    conn.execute("UPDATE runs SET owner_ns = ?1 WHERE id = 'r1'", params![ns])
        .unwrap();
}

#[test]
fn a_lock_of_another_live_pid_namespace_is_not_taken_by_a_pid_of_another_start_time_issue17() -> R {
    // `crashed` as above, but its lock and run say they were written in another PID namespace
    // that still has a process in it (a daemon in a container that is up; this process is a
    // CLI on the host sharing the install root): the PID number names another process here,
    // which proves nothing about the daemon.
    // `reused` is bound: it must live through the test (an unbound field is dropped at once).
    let test = "a_lock_of_another_live_pid_namespace_is_not_taken";
    let container = or_skip!(test, LiveNamespace::spawn());
    let (_dir, db, store, _reused) = crashed_and_live();
    lock_in_namespace(&db, Some(&container.ns));

    assert_eq!(store.reap()?, Vec::<String>::new());
    assert_eq!(store.reap_at_start()?, Vec::<String>::new());
    match store.claim("crashed", "r3", "manual", None, &Owner::current(), None) {
        Err(CronError::Held { run, .. }) => assert_eq!(run, "r1"),
        other => panic!("expected Held, got {other:?}"),
    }
    assert_eq!(status(&store, "r1").as_deref(), Some("running"));
    assert_eq!(lock(&store, "crashed").as_deref(), Some("r1"));

    // Without a namespace (a row written before namespaces were kept) the start time decides.
    lock_in_namespace(&db, None);
    assert_eq!(store.reap()?, vec!["r1".to_string()]);
    assert_eq!(lock(&store, "crashed"), None);
    Ok(())
}

#[test]
fn a_lock_of_a_pid_namespace_no_process_is_in_is_taken_though_its_pid_is_ours_issue17() -> R {
    // The daemon was PID 1 of a container that was killed and restarted: the new daemon is
    // PID 1 again, in a new PID namespace, in the same boot. The old one's lock and run name a
    // namespace no process is in any more, so the job fires again and the run is lost
    // (before: locked until the machine rebooted).
    let test = "a_lock_of_a_pid_namespace_no_process_is_in_is_taken";
    let old_container = or_skip!(test, DeadNamespace::new());
    let me = Owner::current();
    for reap_first in [false, true] {
        let (_dir, db, store, _reused) = crashed_and_live();
        let conn = Connection::open(&db)?;
        for pid in [
            "UPDATE jobs SET lock_pid = ?1 WHERE name = 'crashed'",
            "UPDATE runs SET owner_pid = ?1 WHERE id = 'r1'",
        ] {
            conn.execute(pid, params![me.pid])?;
        }
        lock_in_namespace(&db, Some(&old_container.ns));
        if reap_first {
            // The daemon's reaper at start releases the lock.
            assert_eq!(store.reap_at_start()?, vec!["r1".to_string()]);
            assert_eq!(lock(&store, "crashed"), None);
        }
        store.claim("crashed", "r3", "schedule", None, &me, None)?;
        assert_eq!(status(&store, "r1").as_deref(), Some("lost"));
        assert_eq!(lock(&store, "crashed").as_deref(), Some("r3"));
        // The live owner of this namespace keeps its lock.
        assert_eq!(status(&store, "r2").as_deref(), Some("running"));
    }
    Ok(())
}

#[test]
fn a_run_whose_pid_now_belongs_to_another_process_is_reaped_lost_and_a_live_one_is_not_issue17() -> R
{
    let (_dir, _, store, reused) = crashed_and_live();

    assert_eq!(store.reap()?, vec!["r1".to_string()]);
    assert_eq!(status(&store, "r1").as_deref(), Some("lost"));
    assert_eq!(lock(&store, "crashed"), None, "the job fires again");
    assert_eq!(status(&store, "r2").as_deref(), Some("running"));
    assert_eq!(lock(&store, "live").as_deref(), Some("r2"));
    let lost = store.run("r1")?.unwrap();
    assert_eq!(
        lost.error.as_deref(),
        Some("the process running it exited before the result was stored")
    );

    // Once the live owner is gone too, its run is reaped as before.
    let pid = reused.pid();
    drop(reused);
    assert_eq!(process_start(pid), None);
    assert_eq!(store.reap()?, vec!["r2".to_string()]);
    assert_eq!(lock(&store, "live"), None);
    Ok(())
}

/// Schema 1 of `jobs.db`, as the previous warren wrote it.
const SCHEMA_1: &str = "
CREATE TABLE jobs (
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
    locked_at        TEXT,
    probe            TEXT,
    probe_state      TEXT,
    CHECK ((message IS NULL) != (command IS NULL))
);
CREATE INDEX jobs_next_fire ON jobs(next_fire_ms) WHERE enabled = 1;
CREATE TABLE runs (
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
    owner_boot     TEXT NOT NULL
);
CREATE INDEX runs_by_job ON runs(job, started_at);
PRAGMA user_version = 1;
";

/// Every job, and every run of each, as the store reads them.
fn everything(store: &CronStore) -> (Vec<Job>, Vec<Run>) {
    let jobs = store.list().unwrap();
    let runs = jobs
        .iter()
        .flat_map(|j| store.runs(&j.name, 100).unwrap())
        .collect();
    (jobs, runs)
}

#[test]
fn a_cron_store_of_schema_1_is_upgraded_in_place_and_keeps_its_jobs_and_runs_issue17() -> R {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("cron").join("jobs.db");
    let me = std::process::id();
    let other_boot = "00000000-0000-0000-0000-000000000000";
    {
        let old = old_file(&db, SCHEMA_1);
        // One job a line: name, failures, lock run, lock pid, lock boot, locked at.
        #[rustfmt::skip]
        let jobs = [
            ("mine", 0, Some("r-mine"), Some(me), Some(boot_id()), Some("2026-11-30T10:00:00Z")),
            ("rebooted", 2, Some("r-other"), Some(me), Some(other_boot.into()), Some("2026-11-30T09:00:00Z")),
            ("idle", 0, None, None, None, None),
        ];
        for (name, failures, run, pid, boot, locked_at) in jobs {
            old.execute(
                "INSERT INTO jobs (name, agent, schedule_kind, schedule, message, source,
                 next_fire_ms, failures, created_at, updated_at, lock_run, lock_pid, lock_boot,
                 locked_at)
                 VALUES (?1, 'main', 'every', '1h', 'hi', 'runtime', 5000, ?2,
                 '2026-11-30T08:00:00Z', '2026-11-30T08:00:00Z', ?3, ?4, ?5, ?6)",
                params![name, failures, run, pid, boot, locked_at],
            )?;
        }
        // One run a line: id, job, started, finished, status, output, tokens in, cost, pid, boot.
        #[rustfmt::skip]
        let runs = [
            ("r-mine", "mine", "2026-11-30T10:00:00Z", None, "running", None, 0, 0.0, me, boot_id()),
            ("r-other", "rebooted", "2026-11-30T09:00:00Z", None, "running", None, 0, 0.0, me, other_boot.into()),
            ("r-done", "idle", "2026-11-29T08:00:00Z", Some("2026-11-29T08:05:00Z"), "ok", Some("digest sent"), 120, 0.25, 4242, boot_id()),
        ];
        for (id, job, started, finished, status, output, tokens_in, cost, pid, boot) in runs {
            old.execute(
                "INSERT INTO runs (id, job, agent, trigger, started_at, finished_at, status,
                 output, tokens_in, cost_usd, owner_pid, owner_boot)
                 VALUES (?1, ?2, 'main', 'schedule', ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                params![
                    id, job, started, finished, status, output, tokens_in, cost, pid, boot
                ],
            )?;
        }
    }
    // Read paths answer at schema 1 without touching the file.
    let before = everything(&CronStore::open_existing(&db)?.unwrap());
    assert_eq!((before.0.len(), before.1.len()), (3, 3));
    assert_eq!(version(&db), 1);

    let store = CronStore::open(&db)?;
    assert_eq!(version(&db), 2);
    assert_eq!(everything(&store), before, "every job, run and field kept");
    for (job, run) in [
        ("mine", "r-mine"),
        ("rebooted", "r-other"),
        ("idle", "r-done"),
    ] {
        assert_eq!(
            recorded::<u64>(&db, "start", job, run),
            (None, None),
            "{job}: schema 1 knew no start"
        );
        assert_eq!(
            recorded::<String>(&db, "ns", job, run),
            (None, None),
            "{job}: schema 1 knew no namespace"
        );
    }
    let snapshots = warren_config::sqlite::snapshots_of(&db);
    assert_eq!(snapshots.len(), 1, "{snapshots:?}");

    // Locks and runs without a start time are judged by PID and boot, as before: another
    // boot's run is lost, this live PID's lock holds.
    assert_eq!(store.reap()?, vec!["r-other".to_string()]);
    assert_eq!(lock(&store, "rebooted"), None);
    assert_eq!(status(&store, "r-mine").as_deref(), Some("running"));
    let me_now = Owner::current();
    assert!(matches!(
        store.claim("mine", "r-again", "manual", None, &me_now, None),
        Err(CronError::Held { .. })
    ));

    // New claims record their owner's start; opening again migrates nothing more.
    store.claim("idle", "r-new", "manual", None, &me_now, None)?;
    let mine = process_start(me);
    assert!(mine.is_some());
    assert_eq!(recorded(&db, "start", "idle", "r-new"), (mine, mine));
    assert_eq!(
        recorded(&db, "ns", "idle", "r-new"),
        (pid_namespace(), pid_namespace())
    );
    drop(store);
    let again = CronStore::open(&db)?;
    assert_eq!(warren_config::sqlite::snapshots_of(&db), snapshots);
    assert_eq!(again.runs("idle", 10)?.len(), 2);
    Ok(())
}
