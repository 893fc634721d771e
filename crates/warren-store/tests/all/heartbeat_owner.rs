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
use warren_store::control_plane::{HEARTBEAT_STALE, Owner, monotonic_ms};
use warren_store::cron::{CronError, CronStore};

use crate::common::{
    Cron, DeadNamespace, LiveNamespace, Plane, Proc, or_skip, pairs, reaped, states,
};
use crate::cron_owner::job;

type R = Result<(), Box<dyn std::error::Error>>;

/// A heartbeat just renewed, and one three missed beats and more ago ([`monotonic_ms`]).
fn fresh() -> i64 {
    monotonic_ms()
}

fn stale() -> i64 {
    monotonic_ms() - i64::try_from(HEARTBEAT_STALE.as_millis()).unwrap() - 5000
}

/// The heartbeat of `id` in `beats`, checked to be one renewed since `before`.
fn renewed(before: i64, beats: &[(String, Option<i64>)], id: &str) -> i64 {
    let beat = beats.iter().find(|(i, _)| i == id).and_then(|(_, b)| *b);
    let beat = beat.unwrap_or_else(|| panic!("{id} has no heartbeat"));
    assert!((before..=monotonic_ms()).contains(&beat), "{id}: {beat}");
    beat
}

/// Sets the heartbeat of each run, as its owner (or a version that did not beat) left it.
fn set_beats(conn: &Connection, beats: &[(&str, Option<i64>)]) {
    for (id, at) in beats {
        conn.execute(
            "UPDATE runs SET beat_ms = ?2 WHERE id = ?1",
            params![id, at],
        )
        .unwrap();
    }
}

fn heartbeats(db: &Path) -> Vec<(String, Option<i64>)> {
    let conn = Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare("SELECT id, beat_ms FROM runs ORDER BY id")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn a_run_of_another_live_pid_namespace_is_reaped_once_its_heartbeat_is_stale() -> R {
    let test = "a_run_of_another_live_pid_namespace_is_reaped_once_its_heartbeat_is_stale";
    let container = or_skip!(test, LiveNamespace::spawn());
    let here = Proc::sleep();
    let dead = Proc::sleep();
    let Plane { cp, conn, .. } =
        &Plane::with_cron_runs(&["fresh", "stale", "never"], &here.owner());
    cp.register("dead-fresh", "cron", "main", "cron:a", &dead.owner())?;
    drop(dead);
    // The daemon in the container wrote these rows (its PID names another process here) and
    // renewed two of them: one a moment ago, one before it stopped (killed, hung) long ago.
    conn.execute(
        "UPDATE runs SET owner_ns = ?1 WHERE id IN ('fresh', 'stale', 'never')",
        params![container.ns],
    )?;
    set_beats(
        conn,
        &[
            ("fresh", Some(fresh())),
            ("stale", Some(stale())),
            ("dead-fresh", Some(fresh())),
            // Written by a version that did not beat.
            ("never", None),
        ],
    );
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
    assert_eq!(reaped(cp), vec!["dead-fresh", "stale"]);
    assert_eq!(
        states(cp),
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
    let container = or_skip!(test, LiveNamespace::spawn());
    let dir = tempfile::tempdir()?;
    let Cron { store, conn } = &Cron::open(dir.path());
    store.insert(&job("nightly"))?;
    let here = Proc::sleep();
    store.claim("nightly", "r1", "schedule", None, &here.owner(), None)?;
    conn.execute("UPDATE jobs SET lock_ns = ?1", params![container.ns])?;
    conn.execute("UPDATE runs SET owner_ns = ?1", params![container.ns])?;
    let me = Owner::current();
    let held = |store: &CronStore, run: &str| match store
        .claim("nightly", run, "manual", None, &me, None)
    {
        Err(CronError::Held { run, .. }) => assert_eq!(run, "r1"),
        other => panic!("expected Held, got {other:?}"),
    };
    // The heartbeat the claim set: held.
    held(store, "r2");
    assert_eq!(store.reap()?, Vec::<String>::new());
    // No heartbeat (a lock of an older version): held, as before.
    conn.execute("UPDATE jobs SET lock_beat_ms = NULL", [])?;
    held(store, "r2");
    assert_eq!(store.reap()?, Vec::<String>::new());
    // The holder renews it: held.
    conn.execute("UPDATE jobs SET lock_beat_ms = ?1", params![fresh()])?;
    held(store, "r3");
    assert_eq!(store.reap()?, Vec::<String>::new());
    // The holder stopped renewing it: the reaper and a claim both take it.
    conn.execute("UPDATE jobs SET lock_beat_ms = ?1", params![stale()])?;
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
        "UPDATE jobs SET lock_ns = ?1, lock_beat_ms = ?2 WHERE name = 'hourly'",
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
    let Plane { dir, db, cp, conn } = &Plane::empty();
    let me = Owner::current();
    let other = Proc::sleep();
    for id in ["mine", "mine-ended", "earlier-same-pid"] {
        cp.register(id, "delegate", "main", "delegate:x", &me)?;
    }
    cp.register("other", "delegate", "main", "delegate:x", &other.owner())?;
    cp.finish("mine-ended", "ok", None)?;
    // A process that had our PID before (another start time): its heartbeat must age.
    conn.execute(
        "UPDATE runs SET owner_start = owner_start - 1 WHERE id = 'earlier-same-pid'",
        [],
    )?;
    // Forget the heartbeat each row got when registered: only the renewal's is looked at.
    conn.execute("UPDATE runs SET beat_ms = NULL", [])?;
    let before = monotonic_ms();
    assert_eq!(cp.heartbeat(&me)?, 1);
    let now = renewed(before, &heartbeats(db), "mine");
    assert_eq!(
        heartbeats(db),
        vec![
            ("earlier-same-pid".to_string(), None),
            ("mine".to_string(), Some(now)),
            ("mine-ended".to_string(), None),
            ("other".to_string(), None),
        ]
    );

    let Cron { store, conn: cron } = &Cron::open(dir.path());
    for name in ["mine", "other", "earlier", "free"] {
        store.insert(&job(name))?;
    }
    store.claim("mine", "m", "schedule", None, &me, None)?;
    store.claim("earlier", "e", "schedule", None, &me, None)?;
    store.claim("other", "o", "schedule", None, &other.owner(), None)?;
    cron.execute(
        "UPDATE jobs SET lock_start = lock_start - 1 WHERE name = 'earlier'",
        [],
    )?;
    cron.execute("UPDATE jobs SET lock_beat_ms = NULL", [])?;
    let before = monotonic_ms();
    assert_eq!(store.heartbeat(&me)?, 1);
    let mut stmt = cron.prepare("SELECT name, lock_beat_ms FROM jobs ORDER BY name")?;
    let beats: Vec<(String, Option<i64>)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    assert_eq!(
        beats,
        vec![
            ("earlier".to_string(), None),
            ("free".to_string(), None),
            ("mine".to_string(), Some(renewed(before, &beats, "mine"))),
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
    let beat: Option<i64> = cron.query_row(
        "SELECT lock_beat_ms FROM jobs WHERE name = 'mine'",
        [],
        |r| r.get(0),
    )?;
    assert_eq!(beat, None);
    Ok(())
}

#[test]
fn a_run_and_a_lock_of_a_namespace_the_scan_cannot_find_are_kept_while_they_beat() -> R {
    // A daemon in one container and `warren cron run` in a sibling container share the install
    // root: neither sees the other's processes, so the other's PID namespace looks empty (as a
    // killed container's does). Only the heartbeat tells a live sibling from a dead container;
    // before, the daemon's tick marked the sibling's run `lost` and freed its lock within 30 s.
    let test = "a_run_and_a_lock_of_a_namespace_the_scan_cannot_find_are_kept_while_they_beat";
    let sibling = or_skip!(test, DeadNamespace::new());
    let Plane { dir, cp, conn, .. } =
        &Plane::with_cron_runs(&["beating", "stale", "never"], &Owner::current());
    conn.execute("UPDATE runs SET owner_ns = ?1", params![sibling.ns])?;
    set_beats(
        conn,
        &[
            ("beating", Some(fresh())),
            ("stale", Some(stale())),
            // Written by a version that did not beat: the scan's verdict stands.
            ("never", None),
        ],
    );
    assert!(cp.get("beating")?.unwrap().owner_alive());
    assert_eq!(reaped(cp), vec!["never", "stale"]);
    assert_eq!(
        states(cp),
        pairs(&[("beating", "running"), ("never", "lost"), ("stale", "lost")])
    );
    // Its owner stops beating (the sibling container was killed): reaped.
    conn.execute("UPDATE runs SET beat_ms = ?1", params![stale()])?;
    assert_eq!(cp.reap()?, vec!["beating"]);

    let Cron { store, conn: cron } = &Cron::open(dir.path());
    store.insert(&job("nightly"))?;
    store.claim("nightly", "r1", "manual", None, &Owner::current(), None)?;
    cron.execute("UPDATE jobs SET lock_ns = ?1", params![sibling.ns])?;
    cron.execute("UPDATE runs SET owner_ns = ?1", params![sibling.ns])?;
    let other = Proc::sleep();
    // The heartbeat set by the claim keeps the lock against the reaper and a second claim.
    assert_eq!(store.reap()?, Vec::<String>::new());
    match store.claim("nightly", "r2", "schedule", None, &other.owner(), None) {
        Err(CronError::Held { run, .. }) => assert_eq!(run, "r1"),
        other => panic!("expected Held, got {other:?}"),
    }
    assert_eq!(store.run("r1")?.unwrap().status, "running");
    // Stale: taken.
    cron.execute("UPDATE jobs SET lock_beat_ms = ?1", params![stale()])?;
    assert_eq!(store.reap()?, vec!["r1".to_string()]);
    assert_eq!(store.run("r1")?.unwrap().status, "lost");
    assert_eq!(store.get("nightly")?.unwrap().lock_run, None);
    Ok(())
}

/// Milliseconds between heartbeat `at` and now.
fn age(at: Option<i64>) -> Option<i64> {
    at.map(|at| monotonic_ms() - at)
}

#[test]
fn a_run_just_registered_or_resumed_and_a_lock_just_claimed_have_a_heartbeat() -> R {
    // A process killed before its first tick (30 s) left rows without a heartbeat, judged by
    // the old rule: a cannot-tell owner alive until a reboot. A resumed row kept the dead
    // owner's stale heartbeat, so the new owner's run was reaped at once.
    let Plane { dir, db, cp, conn } = &Plane::empty();
    let me = Owner::current();
    cp.register("new", "delegate", "main", "delegate:x", &me)?;
    cp.register("sop-1", "sop", "main", "sop:x", &me)?;
    conn.execute(
        "UPDATE runs SET state = 'lost', beat_ms = ?1 WHERE id = 'sop-1'",
        params![stale()],
    )?;
    cp.resume("sop-1", "sop", "main", "sop:x", &me)?;
    cp.resume("sop-2", "sop", "main", "sop:x", &me)?;
    for (id, at) in heartbeats(db) {
        let age = age(at);
        assert!(
            age.is_some_and(|ms| (0..5000).contains(&ms)),
            "run {id}: heartbeat {age:?} ms old"
        );
    }

    let Cron { store, conn } = &Cron::open(dir.path());
    store.insert(&job("nightly"))?;
    store.claim("nightly", "r1", "manual", None, &me, None)?;
    let beat: Option<i64> = conn.query_row(
        "SELECT lock_beat_ms FROM jobs WHERE name = 'nightly'",
        [],
        |r| r.get(0),
    )?;
    let age = age(beat);
    assert!(
        age.is_some_and(|ms| (0..5000).contains(&ms)),
        "lock heartbeat {age:?} ms old"
    );
    Ok(())
}

#[test]
fn a_heartbeat_is_judged_on_the_monotonic_clock_not_the_wall_clock() -> R {
    // A wall-clock heartbeat made a live owner look dead after a suspend or an NTP step
    // forward (its last beat an hour "ago") and a dead one fresh after a step back (its last
    // beat in the "future"). The monotonic beat decides; the wall-clock text is for people.
    let test = "a_heartbeat_is_judged_on_the_monotonic_clock_not_the_wall_clock";
    let container = or_skip!(test, LiveNamespace::spawn());
    let here = Proc::sleep();
    let Plane { cp, conn, .. } =
        &Plane::with_cron_runs(&["stepped-forward", "stepped-back"], &here.owner());
    let hour = time::Duration::hours(1);
    let now = warren_store::timefmt::now();
    conn.execute("UPDATE runs SET owner_ns = ?1", params![container.ns])?;
    for (id, wall, beat) in [
        ("stepped-forward", now - hour, fresh()),
        ("stepped-back", now + hour, stale()),
    ] {
        conn.execute(
            "UPDATE runs SET heartbeat_at = ?2, beat_ms = ?3 WHERE id = ?1",
            params![id, warren_store::timefmt::format(wall), beat],
        )?;
    }
    assert_eq!(cp.reap()?, vec!["stepped-back"]);
    assert_eq!(
        states(cp),
        pairs(&[("stepped-back", "lost"), ("stepped-forward", "running")])
    );
    Ok(())
}
