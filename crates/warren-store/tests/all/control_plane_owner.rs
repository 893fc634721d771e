//! The control plane's owner is one process, not just a PID (issue 17, STATE-11): a row records
//! its owner's start time (`/proc/<pid>/stat` field 22), so a PID the kernel gave to an
//! unrelated process after a crash no longer keeps a dead owner's run `running` forever, while a
//! row of another PID namespace (a daemon in a container, read from the host) is not judged by a
//! PID number that names another process here, and is reaped once no process is in that
//! namespace (the container was killed and restarted); and a file of schema 1 (no start time nor
//! namespace) is upgraded in place through the one migration routine, keeping its rows. Real
//! processes (`sleep`), real files.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use pretty_assertions::assert_eq;
use rusqlite::{Connection, params};
use warren_store::control_plane::{
    ControlPlane, Owner, RunRecord, StoredOwner, boot_id, pid_namespace, process_start,
};

use crate::common::{
    DeadNamespace, LiveNamespace, Plane, Proc, old_file, or_skip, pairs, reaped, sleep_program,
    states, version,
};

type R = Result<(), Box<dyn std::error::Error>>;

/// `owner_start` of row `id`, read by another connection.
fn recorded_start(db: &Path, id: &str) -> Option<u64> {
    Connection::open(db)
        .unwrap()
        .query_row(
            "SELECT owner_start FROM runs WHERE id = ?1",
            params![id],
            |r| r.get(0),
        )
        .unwrap()
}

#[test]
fn a_run_whose_pid_now_belongs_to_another_process_is_reaped_and_a_live_owner_is_not_issue17() -> R {
    let Plane { dir, db, cp, .. } = &Plane::empty();
    let sleep = sleep_program();
    // The live owner runs under a command name with spaces and parentheses (its `stat` line
    // must be read after the last `)`).
    let odd = dir.path().join("x) y (z");
    std::fs::copy(&sleep, &odd)?;

    // A daemon that registers its run and then dies (SIGKILL: it never ends the row).
    let crashed = Proc::spawn(&sleep);
    cp.register("crashed", "cron", "main", "cron:a", &crashed.owner())?;
    let crashed_start = recorded_start(db, "crashed");
    assert_eq!(crashed_start, process_start(crashed.pid()));
    assert!(crashed_start.is_some());
    drop(crashed);

    // An unrelated process, started later, now has the dead owner's PID (the kernel reused it:
    // here the row is pointed at it, as reuse would leave it).
    std::thread::sleep(Duration::from_millis(50));
    let unrelated = Proc::spawn(&odd);
    let unrelated_start = process_start(unrelated.pid());
    assert!(unrelated_start.is_some(), "the odd command name parses");
    assert!(
        unrelated_start != crashed_start,
        "started {crashed_start:?} and {unrelated_start:?}"
    );
    Connection::open(db)?.execute(
        "UPDATE runs SET owner_pid = ?1 WHERE id = 'crashed'",
        params![unrelated.pid()],
    )?;
    assert!(
        unrelated.pid_and_boot().is_alive(),
        "by PID and boot alone the dead owner still looks alive"
    );

    // The unrelated process's own run, and a row of schema 1 (no start time) of the same PID.
    cp.register("live", "cron", "main", "cron:b", &unrelated.owner())?;
    assert_eq!(recorded_start(db, "live"), unrelated_start);
    cp.register("old-row", "cron", "main", "cron:c", &unrelated.owner())?;
    Connection::open(db)?.execute(
        "UPDATE runs SET owner_start = NULL WHERE id = 'old-row'",
        [],
    )?;

    assert_eq!(cp.reap()?, vec!["crashed".to_string()]);
    assert_eq!(
        states(cp),
        pairs(&[
            ("crashed", "lost"),
            ("live", "running"),
            ("old-row", "running")
        ])
    );
    let lost = cp.get("crashed")?.unwrap();
    assert_eq!(
        lost.error.as_deref(),
        Some("its owner process exited during the run")
    );
    // The owner of a right start time stays alive by the same check the reaper uses, which
    // the store hands out with its rows.
    let live = cp.get("live")?.unwrap().owner;
    assert_eq!(live, unrelated.owner().stored());
    assert_eq!(
        (live.start, live.pid_ns.clone()),
        (unrelated_start, pid_namespace())
    );
    assert!(live.is_alive());
    assert!(!lost.owner.is_alive());
    assert_eq!(lost.owner.start, crashed_start);

    // Once the live owner is gone too, its rows are reaped as before.
    let live_pid = unrelated.pid();
    drop(unrelated);
    assert_eq!(process_start(live_pid), None);
    assert_eq!(reaped(cp), vec!["live".to_string(), "old-row".to_string()]);
    Ok(())
}

/// Schema 1 of `control_plane.db`, as the previous warren wrote it.
const SCHEMA_1: &str = "
CREATE TABLE runs (
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
CREATE INDEX runs_by_state ON runs(state);
CREATE INDEX runs_by_started ON runs(started_at);
PRAGMA user_version = 1;
";

#[test]
fn a_control_plane_of_schema_1_is_upgraded_in_place_and_keeps_its_rows_issue17() -> R {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("data").join("control_plane.db");
    {
        let old = old_file(&db, SCHEMA_1);
        let me = std::process::id();
        let other_boot = "00000000-0000-0000-0000-000000000000";
        // One row a line: id, label, pid, boot, started, finished, state, cancel requested,
        // error.
        #[rustfmt::skip]
        let rows = [
            ("mine", "cron:a", me, boot_id(), "2026-11-30T10:00:00Z", None, "running", 1, None),
            ("other-boot", "cron:b", me, other_boot.into(), "2026-11-30T09:00:00Z", None, "running", 0, None),
            ("done", "delegate", 4242, boot_id(), "2026-11-29T08:00:00Z", Some("2026-11-29T08:05:00Z"), "failed", 0, Some("model refused")),
        ];
        for (id, label, pid, boot, started, finished, state, cancel, error) in rows {
            old.execute(
                "INSERT INTO runs (id, kind, agent, label, owner_pid, owner_boot, started_at,
                 finished_at, state, cancel_requested, error)
                 VALUES (?1, 'cron', 'main', ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![
                    id, label, pid, boot, started, finished, state, cancel, error
                ],
            )?;
        }
    }
    // Read paths answer at schema 1 without touching the file.
    let before: Vec<RunRecord> = ControlPlane::open_existing(&db)?.unwrap().list(None, 10)?;
    assert_eq!(before.len(), 3);
    assert_eq!(version(&db), 1);

    let cp = ControlPlane::open(&db)?;
    assert_eq!(version(&db), warren_store::control_plane::SCHEMA_VERSION);
    assert_eq!(version(&db), 2);
    assert_eq!(cp.list(None, 10)?, before, "every row and field kept");
    for id in ["mine", "other-boot", "done"] {
        let owner = cp.get(id)?.unwrap().owner;
        assert_eq!(
            (owner.start, owner.pid_ns),
            (None, None),
            "{id}: schema 1 knew no start nor namespace"
        );
    }
    let snapshots = warren_config::sqlite::snapshots_of(&db);
    assert_eq!(snapshots.len(), 1, "{snapshots:?}");

    // Rows without a start time are judged by PID and boot, as before.
    assert_eq!(cp.reap()?, vec!["other-boot".to_string()]);
    assert_eq!(
        states(&cp),
        pairs(&[
            ("done", "failed"),
            ("mine", "running"),
            ("other-boot", "lost")
        ])
    );

    // New rows record their owner's start and namespace; opening again migrates nothing more.
    cp.register("new", "cron", "main", "cron:c", &Owner::current())?;
    assert_eq!(
        recorded_start(&db, "new"),
        process_start(std::process::id())
    );
    assert!(pid_namespace().is_some());
    assert_eq!(cp.get("new")?.unwrap().owner.pid_ns, pid_namespace());
    drop(cp);
    let again = ControlPlane::open(&db)?;
    assert_eq!(warren_config::sqlite::snapshots_of(&db), snapshots);
    assert_eq!(again.list(None, 10)?.len(), 4);
    Ok(())
}

#[test]
fn a_run_of_another_live_pid_namespace_is_not_reaped_by_a_pid_of_another_start_time_issue17() -> R {
    // A daemon in a container (its own PID namespace, which still has a process in it)
    // registered runs; a CLI on the host shares the install root. The daemon's PID number names
    // another process here, started at another time: that proves nothing about the daemon,
    // which may well be running.
    let test = "a_run_of_another_live_pid_namespace_is_not_reaped";
    let container_ns = or_skip!(test, LiveNamespace::spawn());
    let Plane { cp, conn, .. } = &Plane::empty();
    let here = Proc::sleep();
    let zero_boot = Owner {
        pid: here.pid(),
        boot_id: "00000000-0000-0000-0000-000000000000".into(),
    };
    for (id, owner) in [
        ("container", here.owner()),
        ("ours", here.owner()),
        ("no-namespace", here.owner()),
        ("other-boot", zero_boot),
        ("mine-elsewhere", Owner::current()),
    ] {
        cp.register(id, "cron", "main", "cron:a", &owner)?;
    }
    assert_eq!(cp.get("ours")?.unwrap().owner, here.owner().stored());
    // Every row's PID is held by a process that started at another time than its owner; the
    // namespace differs where the row says so (NULL: a row written before namespaces).
    conn.execute("UPDATE runs SET owner_start = owner_start - 1", [])?;
    conn.execute(
        "UPDATE runs SET owner_ns = ?1 WHERE id IN ('container', 'other-boot', 'mine-elsewhere')",
        params![container_ns.ns],
    )?;
    conn.execute(
        "UPDATE runs SET owner_ns = NULL WHERE id = 'no-namespace'",
        [],
    )?;

    let container = cp.get("container")?.unwrap().owner;
    assert_eq!(
        container,
        StoredOwner {
            pid: here.pid(),
            boot_id: boot_id(),
            start: process_start(here.pid()).map(|s| s - 1),
            pid_ns: Some(container_ns.ns.clone()),
        }
    );
    assert!(
        container.is_alive(),
        "a live namespace of another than ours cannot be judged by PID"
    );

    assert_eq!(reaped(cp), vec!["no-namespace", "other-boot", "ours"]);
    // At start, a row of this PID in another namespace is not an earlier process of ours.
    assert_eq!(cp.reap_at_start()?, Vec::<String>::new());
    assert_eq!(
        states(cp),
        pairs(&[
            ("container", "running"),
            ("mine-elsewhere", "running"),
            ("no-namespace", "lost"),
            ("other-boot", "lost"),
            ("ours", "lost"),
        ])
    );
    // Once the namespace is gone (the container stopped), the same rows are, when written by
    // a version without the heartbeat (a row that beats is judged by its heartbeat then:
    // heartbeat_owner).
    let _stopped = container_ns.kill();
    conn.execute("UPDATE runs SET beat_ms = NULL", [])?;
    assert_eq!(reaped(cp), vec!["container", "mine-elsewhere"]);
    Ok(())
}

#[test]
fn a_run_of_a_pid_namespace_no_process_is_in_is_reaped_though_its_pid_is_ours_issue17() -> R {
    // A daemon that was PID 1 of its container is killed (`docker kill`, the OOM killer) and
    // the container restarted: the new daemon is PID 1 again, in a new PID namespace, in the
    // same boot. The old one's rows name a namespace no process is in any more: their owner is
    // gone, whatever the PID number (ours) and start time say.
    let test = "a_run_of_a_pid_namespace_no_process_is_in_is_reaped";
    let old_container = or_skip!(test, DeadNamespace::new());
    let Plane { cp, conn, .. } =
        &Plane::with_cron_runs(&["pid-1", "same-start", "ours"], &Owner::current());
    conn.execute(
        "UPDATE runs SET owner_ns = ?1 WHERE id IN ('pid-1', 'same-start')",
        params![old_container.ns],
    )?;
    conn.execute(
        "UPDATE runs SET owner_start = owner_start - 1 WHERE id = 'pid-1'",
        [],
    )?;
    // Written by a version without the heartbeat: the scan alone decides (a row that beats is
    // judged by its heartbeat: heartbeat_owner).
    conn.execute("UPDATE runs SET beat_ms = NULL", [])?;
    let gone = cp.get("same-start")?.unwrap().owner;
    assert_eq!(
        gone,
        StoredOwner {
            pid_ns: Some(old_container.ns.clone()),
            ..Owner::current().stored()
        }
    );
    assert!(!gone.is_alive(), "no process is in {}", old_container.ns);

    assert_eq!(reaped(cp), vec!["pid-1", "same-start"]);
    assert_eq!(
        states(cp),
        pairs(&[
            ("ours", "running"),
            ("pid-1", "lost"),
            ("same-start", "lost")
        ])
    );
    Ok(())
}
