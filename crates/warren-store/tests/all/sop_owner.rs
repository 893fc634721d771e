//! The SOP store's claim names one process, not just a PID (issue 17, STATE-10/STATE-11): a run
//! records its owner's start time (`/proc/<pid>/stat` field 22) and PID namespace, so after a
//! crash a PID the kernel gave to an unrelated process no longer holds the run until its lease
//! ends, nor does that process's lease renewal (or the control plane's cancel requests) reach
//! the dead owner's rows; a live owner keeps its run; and a `runs.db` of schema 1 (no start time
//! nor namespace) is upgraded in place through the one migration routine, keeping its runs.
//! Real processes (`sleep`), real files.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use pretty_assertions::assert_eq;
use rusqlite::{Connection, params};
use serde_json::json;
use warren_store::control_plane::{ControlPlane, Owner, boot_id, pid_namespace, process_start};
use warren_store::sop::{Event, NewRun, SopRun, SopStore, StepRecord, now_ms};

use crate::common::{OTHER_NS, Proc, old_file, version};

type R = Result<(), Box<dyn std::error::Error>>;

/// A lease far longer than any test: a run changes hands only when its owner is provably gone.
const LEASE_MS: i64 = 600_000;

/// Starts run `id` of the SOP `triage` for `owner`.
fn start(store: &SopStore, id: &str, owner: &Owner) -> SopRun {
    let agent = "main".parse().unwrap();
    let definition = json!({"steps": [{"id": "a"}, {"id": "gate"}]});
    let input = json!({"ticket": id});
    let run = NewRun {
        id,
        sop: "triage",
        agent: &agent,
        trigger: "manual",
        input: &input,
        definition: &definition,
        max_for_sop: 8,
        max_global: 8,
        lease_ms: LEASE_MS,
    };
    store.start(&run, owner).unwrap()
}

/// `(dir, db, store, reused)`: a store at `<dir>/sop/runs.db` with two runs. `r1`: started by a process that then died
/// (SIGKILL: it never finished the run), its PID now held by `reused`, an unrelated process
/// started later (the row is pointed at the new process's PID, as the kernel's reuse would leave
/// it). `r2`: started by that process itself, with its own start time.
fn crashed_and_live() -> (tempfile::TempDir, PathBuf, SopStore, Proc) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sop").join("runs.db");
    let store = SopStore::open(&db).unwrap();
    let crashed = Proc::sleep();
    start(&store, "r1", &crashed.owner());
    drop(crashed);
    // Start times are clock ticks (1/100 s): the unrelated process starts visibly later.
    std::thread::sleep(Duration::from_millis(50));
    let reused = Proc::sleep();
    Connection::open(&db)
        .unwrap()
        .execute(
            "UPDATE runs SET owner_pid = ?1 WHERE id = 'r1'",
            params![reused.pid()],
        )
        .unwrap();
    assert!(
        reused.pid_and_boot().is_alive(),
        "by PID and boot alone the dead owner still looks alive"
    );
    start(&store, "r2", &reused.owner());
    (dir, db, store, reused)
}

/// `(owner_start, owner_ns)` of run `id`, read by another connection.
fn recorded_owner(db: &Path, id: &str) -> (Option<u64>, Option<String>) {
    Connection::open(db)
        .unwrap()
        .query_row(
            "SELECT owner_start, owner_ns FROM runs WHERE id = ?1",
            params![id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
}

fn lease(store: &SopStore, id: &str) -> i64 {
    store.get(id).unwrap().unwrap().lease_until_ms
}

fn events(store: &SopStore, id: &str) -> Vec<String> {
    store
        .events(id)
        .unwrap()
        .into_iter()
        .map(|e| e.what)
        .collect()
}

#[test]
fn a_sop_run_claimed_by_a_reused_pid_is_claimable_again_and_a_live_owner_keeps_it_issue17() -> R {
    let (_dir, db, store, reused) = crashed_and_live();

    // The dead owner's run is taken over at once, its lease notwithstanding.
    let me = Owner::current();
    assert!(lease(&store, "r1") > now_ms() + LEASE_MS / 2);
    let claimed = store.claim("r1", &me, LEASE_MS)?;
    let claimed = claimed.expect("the run of a PID reused by another process is claimable");
    assert_eq!(claimed.owner(), me.stored());
    assert_eq!(
        recorded_owner(&db, "r1"),
        (process_start(me.pid), pid_namespace())
    );
    assert_eq!(events(&store, "r1"), ["started", "resumed"]);

    // The live owner of the same PID keeps its run. Each start and claim recorded its owner's
    // start time and namespace.
    assert_eq!(store.claim("r2", &me, LEASE_MS)?, None);
    assert_eq!(store.get("r2")?.unwrap().owner(), reused.owner().stored());
    assert_eq!(events(&store, "r2"), ["started"]);
    let theirs = (process_start(reused.pid()), pid_namespace());
    assert!(theirs.0.is_some() && theirs.1.is_some());
    assert_eq!(recorded_owner(&db, "r2"), theirs);

    // Once it is gone too, its run is claimable as before.
    drop(reused);
    assert!(store.claim("r2", &me, LEASE_MS)?.is_some());
    Ok(())
}

#[test]
fn a_lease_renewal_reaches_only_the_runs_of_the_same_process_issue17() -> R {
    let (_dir, db, store, reused) = crashed_and_live();

    // The process that now has the dead owner's PID renews its own run only: the dead owner's
    // lease runs out as it would have.
    let r1 = lease(&store, "r1");
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(store.renew(&reused.owner(), 2 * LEASE_MS)?, 1);
    assert_eq!(lease(&store, "r1"), r1);
    assert!(lease(&store, "r2") > now_ms() + LEASE_MS);
    // A row of another PID namespace is another process's, whatever its PID and start.
    let conn = Connection::open(&db)?;
    conn.execute(
        "UPDATE runs SET owner_ns = ?1 WHERE id = 'r2'",
        params![OTHER_NS],
    )?;
    assert_eq!(store.renew(&reused.owner(), LEASE_MS)?, 0);
    // A row without start time nor namespace (schema 1) is matched by PID and boot, as before.
    conn.execute(
        "UPDATE runs SET owner_start = NULL, owner_ns = NULL WHERE id = 'r1'",
        [],
    )?;
    assert_eq!(store.renew(&reused.owner(), LEASE_MS)?, 1);
    drop(reused);
    Ok(())
}

#[test]
fn a_cancel_request_is_served_only_by_the_process_that_registered_the_run_issue17() -> R {
    // A cancel request on a dead owner's run is not served by the process that has its PID
    // now (it would cancel a run of its own by that id, or ignore it); its own run's request is.
    let dir = tempfile::tempdir()?;
    let cp = ControlPlane::open(&dir.path().join("control_plane.db"))?;
    let crashed = Proc::sleep();
    cp.register("c1", "sop", "main", "sop:triage", &crashed.owner())?;
    drop(crashed);
    std::thread::sleep(Duration::from_millis(50));
    let reused_cp = Proc::sleep();
    let cp_db = Connection::open(dir.path().join("control_plane.db"))?;
    cp_db.execute(
        "UPDATE runs SET owner_pid = ?1 WHERE id = 'c1'",
        params![reused_cp.pid()],
    )?;
    cp.register("c2", "sop", "main", "sop:triage", &reused_cp.owner())?;
    cp.request_cancel("c1")?;
    cp.request_cancel("c2")?;
    assert_eq!(cp.cancel_requests(&reused_cp.owner())?, ["c2"]);
    cp_db.execute(
        "UPDATE runs SET owner_start = NULL, owner_ns = NULL WHERE id = 'c1'",
        [],
    )?;
    let mut served = cp.cancel_requests(&reused_cp.owner())?;
    served.sort();
    assert_eq!(served, ["c1", "c2"], "schema 1's rows: PID and boot");
    Ok(())
}

/// Schema 1 of `runs.db`, as the previous warren wrote it.
const SCHEMA_1: &str = "
CREATE TABLE runs (
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
    lease_until_ms   INTEGER NOT NULL,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    durable          INTEGER NOT NULL DEFAULT 1,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    finished_at      TEXT,
    error            TEXT
);
CREATE INDEX sop_runs_by_status ON runs(status);
CREATE INDEX sop_runs_by_sop ON runs(sop, created_at);
CREATE TABLE steps (
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
CREATE TABLE events (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id  TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    at      TEXT NOT NULL,
    who     TEXT NOT NULL,
    what    TEXT NOT NULL,
    why     TEXT
);
CREATE INDEX sop_events_by_run ON events(run_id, seq);
CREATE TABLE approvals (
    run_id   TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    step_id  TEXT NOT NULL,
    decision TEXT NOT NULL CHECK (decision IN ('approved', 'denied')),
    who      TEXT NOT NULL,
    reason   TEXT,
    at       TEXT NOT NULL,
    PRIMARY KEY (run_id, step_id)
);
PRAGMA user_version = 1;
";

/// Every run with its steps and events, as the store reads them.
fn everything(store: &SopStore) -> Vec<(SopRun, Vec<StepRecord>, Vec<Event>)> {
    store
        .list(None, 100)
        .unwrap()
        .into_iter()
        .map(|run| {
            let steps = store.steps(&run.id).unwrap();
            let events = store.events(&run.id).unwrap();
            (run, steps, events)
        })
        .collect()
}

#[test]
fn a_sop_store_of_schema_1_is_upgraded_in_place_and_keeps_its_runs_issue17() -> R {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("sop").join("runs.db");
    let me = std::process::id();
    let live = Proc::sleep();
    let other_boot = "00000000-0000-0000-0000-000000000000";
    let leased = now_ms() + LEASE_MS;
    {
        let old = old_file(&db, SCHEMA_1);
        // One run a line: id, status, step, pid, boot, finished.
        #[rustfmt::skip]
        let runs = [
            ("mine", "waiting", 1, me, boot_id(), None),
            ("theirs", "running", 0, live.pid(), boot_id(), None),
            ("rebooted", "running", 0, me, other_boot.to_string(), None),
            ("done", "ok", 2, 4242, boot_id(), Some("2026-11-30T08:05:00Z")),
        ];
        for (id, status, step, pid, boot, finished) in runs {
            old.execute(
                "INSERT INTO runs (id, sop, agent, trigger, input, definition, status,
                 step_index, revision, owner_pid, owner_boot, lease_until_ms, created_at,
                 updated_at, finished_at)
                 VALUES (?1, 'triage', 'main', 'manual', '{\"n\":1}',
                 '{\"steps\":[{\"id\":\"a\"},{\"id\":\"gate\"}]}', ?2, ?3, 3, ?4, ?5, ?6,
                 '2026-11-30T08:00:00Z', '2026-11-30T08:01:00Z', ?7)",
                params![id, status, step, pid, boot, leased, finished],
            )?;
            old.execute(
                "INSERT INTO steps (run_id, step_id, idx, kind, status, output, receipt,
                 recorded_at, done_at)
                 VALUES (?1, 'a', 0, 'turn', 'done', 'summary', 'rc-1',
                 '2026-11-30T08:00:30Z', '2026-11-30T08:00:31Z')",
                params![id],
            )?;
            old.execute(
                "INSERT INTO events (run_id, at, who, what) VALUES
                 (?1, '2026-11-30T08:00:00Z', 'trigger:manual', 'started')",
                params![id],
            )?;
        }
        old.execute(
            "INSERT INTO approvals (run_id, step_id, decision, who, at)
             VALUES ('done', 'gate', 'approved', 'cli', '2026-11-30T08:04:00Z')",
            [],
        )?;
    }
    // Read paths answer at schema 1 without touching the file.
    let before = everything(&SopStore::open_existing(&db)?.unwrap());
    assert_eq!(before.len(), 4);
    assert_eq!(version(&db), 1);

    let store = SopStore::open(&db)?;
    assert_eq!(version(&db), 2);
    assert_eq!(everything(&store), before, "every run, step and event kept");
    assert_eq!(
        store
            .approval("done", "gate")?
            .map(|a| a.decision)
            .as_deref(),
        Some("approved")
    );
    for id in ["mine", "theirs", "rebooted", "done"] {
        assert_eq!(
            recorded_owner(&db, id),
            (None, None),
            "{id}: schema 1 knew no start nor namespace"
        );
    }
    let snapshots = warren_config::sqlite::snapshots_of(&db);
    assert_eq!(snapshots.len(), 1, "{snapshots:?}");

    // Runs without a start time are judged by PID and boot, as before: another boot's run is
    // claimable, a live PID's is not (its lease holds).
    let me_now = Owner::current();
    assert_eq!(store.claim("theirs", &me_now, LEASE_MS)?, None);
    assert!(store.claim("rebooted", &me_now, LEASE_MS)?.is_some());
    // A claim records its owner's start and namespace; opening again migrates nothing more.
    let mine = store.claim("mine", &me_now, LEASE_MS)?.unwrap();
    assert_eq!(mine.owner(), me_now.stored());
    assert_eq!(
        recorded_owner(&db, "rebooted"),
        (process_start(me), pid_namespace())
    );
    drop(store);
    let again = SopStore::open(&db)?;
    assert_eq!(warren_config::sqlite::snapshots_of(&db), snapshots);
    assert_eq!(again.active()?.len(), 3);
    Ok(())
}
