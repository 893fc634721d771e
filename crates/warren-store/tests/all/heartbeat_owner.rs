//! The heartbeat bounds an owner that cannot be judged (STATE-11): a control-plane run or a
//! cron lock of another PID namespace that still has a process in it (a daemon in a container,
//! read from the host) counted as alive forever; now it is alive while its owner renews its
//! heartbeat and gone once the heartbeat is older than [`HEARTBEAT_STALE`]. A row without a
//! heartbeat keeps the old rule, a heartbeat never revives an owner provably gone, and the
//! renewal touches only the renewing process's own rows. Real processes, real files; the rows'
//! heartbeat is written as the other namespace's daemon would have (its clock is ours).

#![allow(clippy::unwrap_used)]

use std::path::Path;

use pretty_assertions::assert_eq;
use rusqlite::{Connection, params};
use warren_store::control_plane::{ControlPlane, HEARTBEAT_STALE, Owner};
use warren_store::cron::{CronError, CronStore};
use warren_store::timefmt;

use crate::common::{LiveNamespace, Proc, or_skip};
use crate::cron_owner::job;

type R = Result<(), Box<dyn std::error::Error>>;

/// A heartbeat just renewed, and one three missed beats and more ago.
fn fresh() -> String {
    timefmt::format(timefmt::now())
}

fn stale() -> String {
    timefmt::format(timefmt::now() - HEARTBEAT_STALE - time::Duration::seconds(5))
}

fn states(cp: &ControlPlane) -> Vec<(String, String)> {
    let mut rows: Vec<_> = cp
        .list(None, 100)
        .unwrap()
        .into_iter()
        .map(|r| (r.id, r.state))
        .collect();
    rows.sort();
    rows
}

fn pairs(rows: &[(&str, &str)]) -> Vec<(String, String)> {
    rows.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

fn heartbeats(db: &Path) -> Vec<(String, Option<String>)> {
    let conn = Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare("SELECT id, heartbeat_at FROM runs ORDER BY id")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn a_run_of_another_live_pid_namespace_is_reaped_once_its_heartbeat_is_stale() -> R {
    let test = "a_run_of_another_live_pid_namespace_is_reaped_once_its_heartbeat_is_stale";
    let Some(container) = or_skip(test, LiveNamespace::spawn()) else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("data").join("control_plane.db");
    let cp = ControlPlane::open(&db)?;
    let here = Proc::sleep();
    let dead = Proc::sleep();
    for id in ["fresh", "stale", "never"] {
        cp.register(id, "cron", "main", "cron:a", &here.owner())?;
    }
    cp.register("dead-fresh", "cron", "main", "cron:a", &dead.owner())?;
    drop(dead);
    let conn = Connection::open(&db)?;
    // The daemon in the container wrote these rows (its PID names another process here) and
    // renewed two of them: one a moment ago, one before it stopped (killed, hung) long ago.
    conn.execute(
        "UPDATE runs SET owner_ns = ?1 WHERE id IN ('fresh', 'stale', 'never')",
        params![container.ns],
    )?;
    for (id, at) in [
        ("fresh", fresh()),
        ("stale", stale()),
        ("dead-fresh", fresh()),
    ] {
        conn.execute(
            "UPDATE runs SET heartbeat_at = ?2 WHERE id = ?1",
            params![id, at],
        )?;
    }
    let stale_run = cp.get("stale")?.unwrap();
    assert!(
        stale_run.owner.is_alive(),
        "without its heartbeat: cannot tell"
    );
    assert!(
        !stale_run.owner_alive(),
        "its heartbeat is older than {HEARTBEAT_STALE:?}"
    );
    assert!(cp.get("fresh")?.unwrap().owner_alive());

    // A heartbeat never revives an owner of our namespace whose process is gone.
    let mut reaped = cp.reap()?;
    reaped.sort();
    assert_eq!(reaped, vec!["dead-fresh", "stale"]);
    assert_eq!(
        states(&cp),
        pairs(&[
            ("dead-fresh", "lost"),
            ("fresh", "running"),
            ("never", "running"),
            ("stale", "lost"),
        ])
    );
    Ok(())
}

#[test]
fn a_lock_of_another_live_pid_namespace_is_taken_once_its_heartbeat_is_stale() -> R {
    let test = "a_lock_of_another_live_pid_namespace_is_taken_once_its_heartbeat_is_stale";
    let Some(container) = or_skip(test, LiveNamespace::spawn()) else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("cron").join("jobs.db");
    let store = CronStore::open(&db)?;
    store.insert(&job("nightly"))?;
    let here = Proc::sleep();
    store.claim("nightly", "r1", "schedule", None, &here.owner(), None)?;
    let conn = Connection::open(&db)?;
    conn.execute("UPDATE jobs SET lock_ns = ?1", params![container.ns])?;
    conn.execute("UPDATE runs SET owner_ns = ?1", params![container.ns])?;
    let me = Owner::current();
    let held = |store: &CronStore, run: &str| match store
        .claim("nightly", run, "manual", None, &me, None)
    {
        Err(CronError::Held { run, .. }) => assert_eq!(run, "r1"),
        other => panic!("expected Held, got {other:?}"),
    };
    // No heartbeat yet (the holder's first tick is to come, or it is an older version): held.
    held(&store, "r2");
    assert_eq!(store.reap()?, Vec::<String>::new());
    // The holder renews it: held.
    conn.execute("UPDATE jobs SET lock_beat_at = ?1", params![fresh()])?;
    held(&store, "r3");
    assert_eq!(store.reap()?, Vec::<String>::new());
    // The holder stopped renewing it: the reaper and a claim both take it.
    conn.execute("UPDATE jobs SET lock_beat_at = ?1", params![stale()])?;
    assert_eq!(store.reap()?, vec!["r1".to_string()]);
    assert_eq!(store.get("nightly")?.unwrap().lock_run, None);
    store.claim("nightly", "r4", "manual", None, &me, None)?;
    assert_eq!(store.run("r1")?.unwrap().status, "lost");
    assert_eq!(
        store.get("nightly")?.unwrap().lock_run.as_deref(),
        Some("r4")
    );

    // A claim on its own (no reaper first) takes a stale lock too.
    store.insert(&job("hourly"))?;
    store.claim("hourly", "h1", "schedule", None, &here.owner(), None)?;
    conn.execute(
        "UPDATE jobs SET lock_ns = ?1, lock_beat_at = ?2 WHERE name = 'hourly'",
        params![container.ns, stale()],
    )?;
    conn.execute(
        "UPDATE runs SET owner_ns = ?1 WHERE id = 'h1'",
        params![container.ns],
    )?;
    store.claim("hourly", "h2", "manual", None, &me, None)?;
    assert_eq!(store.run("h1")?.unwrap().status, "lost");
    Ok(())
}

#[test]
fn a_heartbeat_renews_only_the_running_rows_and_locks_of_this_very_process() -> R {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("data").join("control_plane.db");
    let cp = ControlPlane::open(&db)?;
    let me = Owner::current();
    let other = Proc::sleep();
    for id in ["mine", "mine-ended", "earlier-same-pid"] {
        cp.register(id, "delegate", "main", "delegate:x", &me)?;
    }
    cp.register("other", "delegate", "main", "delegate:x", &other.owner())?;
    cp.finish("mine-ended", "ok", None)?;
    let conn = Connection::open(&db)?;
    // A process that had our PID before (another start time): its heartbeat must age.
    conn.execute(
        "UPDATE runs SET owner_start = owner_start - 1 WHERE id = 'earlier-same-pid'",
        [],
    )?;
    let now = timefmt::now();
    assert_eq!(cp.heartbeat(&me, now)?, 1);
    assert_eq!(
        heartbeats(&db),
        vec![
            ("earlier-same-pid".to_string(), None),
            ("mine".to_string(), Some(timefmt::format(now))),
            ("mine-ended".to_string(), None),
            ("other".to_string(), None),
        ]
    );

    let cron_db = dir.path().join("cron").join("jobs.db");
    let store = CronStore::open(&cron_db)?;
    for name in ["mine", "other", "earlier", "free"] {
        store.insert(&job(name))?;
    }
    store.claim("mine", "m", "schedule", None, &me, None)?;
    store.claim("earlier", "e", "schedule", None, &me, None)?;
    store.claim("other", "o", "schedule", None, &other.owner(), None)?;
    let cron = Connection::open(&cron_db)?;
    cron.execute(
        "UPDATE jobs SET lock_start = lock_start - 1 WHERE name = 'earlier'",
        [],
    )?;
    assert_eq!(store.heartbeat(&me, now)?, 1);
    let mut stmt = cron.prepare("SELECT name, lock_beat_at FROM jobs ORDER BY name")?;
    let beats: Vec<(String, Option<String>)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    assert_eq!(
        beats,
        vec![
            ("earlier".to_string(), None),
            ("free".to_string(), None),
            ("mine".to_string(), Some(timefmt::format(now))),
            ("other".to_string(), None),
        ]
    );
    // Finishing the run releases the lock and its heartbeat with it.
    store.finish(
        "m",
        &warren_store::cron::RunResult::default(),
        &warren_store::cron::JobAfterRun {
            next_fire_ms: None,
            pause: None,
        },
        10,
    )?;
    let beat: Option<String> = cron.query_row(
        "SELECT lock_beat_at FROM jobs WHERE name = 'mine'",
        [],
        |r| r.get(0),
    )?;
    assert_eq!(beat, None);
    Ok(())
}
