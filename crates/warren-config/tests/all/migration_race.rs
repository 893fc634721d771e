//! Two processes migrating one store file at once (issue 22 §4; BEYOND-11): the daemon's reaper
//! and a CLI `warren cron` / `warren runs` on the first start after an upgrade both open the
//! same schema-1 file. The first migrates it; the second must see the new version and open it
//! writable, never put its own pre-migration snapshot back over the migrated file (that removed
//! the new column and the first process's rows, left the first one with a connection whose
//! every insert failed "no such column", and opened the second read-only with a `.failed`
//! marker). Also: a failed migration never puts back a snapshot older than what another
//! connection committed meanwhile.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use warren_config::sqlite::{
    self, MigrateFailure, Sync, failed_migration, migrate_guarded, open_wal, rusqlite,
    schema_version,
};

type R = Result<(), Box<dyn std::error::Error>>;

/// Set on the children the race test spawns (the test binary itself): the file they migrate.
const CHILD_DB: &str = "WARREN_MIGRATION_RACE_DB";

/// Rows of the schema-1 file: enough that the migration's index build holds the write lock
/// for a while, as a real migration of a big file does.
const ROWS: i64 = 20_000;

/// A schema-1 `runs` table without the `owner_start` column, `ROWS` rows.
fn make_schema_1(db: &Path) -> rusqlite::Result<()> {
    let conn = open_wal(db, Sync::Normal)?;
    conn.execute_batch(&format!(
        "CREATE TABLE runs (id INTEGER PRIMARY KEY, state TEXT NOT NULL);
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {ROWS})
         INSERT INTO runs (id, state) SELECT i, 'ok' FROM n;
         PRAGMA user_version = 1;"
    ))
}

/// The migration to schema 2, shaped like the control plane's and the cron store's (a
/// transaction that adds the column when it is missing), plus an index over the new column.
fn to_schema_2(conn: &mut rusqlite::Connection) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    let has = tx
        .prepare("SELECT 1 FROM pragma_table_info('runs') WHERE name = 'owner_start'")?
        .exists([])?;
    if !has {
        tx.execute_batch(
            "ALTER TABLE runs ADD COLUMN owner_start INTEGER;
             CREATE INDEX IF NOT EXISTS runs_by_owner ON runs(owner_start, state, id);",
        )?;
    }
    tx.commit()
}

/// The child's side: wait for `go`, open the file at schema 2, write a row that needs the new
/// column, and say how it went on one `CHILD` line.
fn child(db: &Path) {
    let go = db.with_extension("go");
    let until = Instant::now() + Duration::from_secs(30);
    while !go.exists() && Instant::now() < until {
        std::thread::sleep(Duration::from_micros(200));
    }
    let id = 1_000_000 + i64::from(std::process::id());
    let outcome = match sqlite::open_migrated(db, Sync::Normal, 2, to_schema_2) {
        Err(e) => format!("open failed: {e}"),
        Ok(store) => match store.read_only() {
            Some(why) => format!("read-only: {why}"),
            None => match store.lock().execute(
                "INSERT INTO runs (id, state, owner_start) VALUES (?1, 'running', ?1)",
                [id],
            ) {
                Ok(_) => format!("wrote {id}"),
                Err(e) => format!("insert failed: {e}"),
            },
        },
    };
    println!("CHILD {outcome}");
}

/// This test's name as the test harness filters it (`migration_race::<fn>`).
fn own_test_name(function: &str) -> String {
    let module = module_path!();
    let module = module.split_once("::").map_or(module, |(_, m)| m);
    format!("{module}::{function}")
}

/// Starts a child migrating `db` (it waits for the `go` file).
fn spawn_child(db: &Path) -> std::io::Result<std::process::Child> {
    Command::new(std::env::current_exe()?)
        .args([
            &own_test_name("two_processes_migrating_one_schema_1_file_keep_every_row"),
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DB, db)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
}

/// Many rounds of two processes opening the same schema-1 file at schema 2 at the same moment:
/// every round the file ends at version 2 with the new column, all `ROWS` old rows and both
/// children's rows; both children opened it writable; no `.failed` marker. Without the lock
/// around the migration (version read, snapshot, migration and version write), the second
/// process's ALTER fails ("database is locked") and its stale snapshot is copied back over the
/// migrated file: the file loses its column and the first child's row, the second opens
/// read-only.
#[test]
fn two_processes_migrating_one_schema_1_file_keep_every_row() -> R {
    if let Some(db) = std::env::var_os(CHILD_DB) {
        child(Path::new(&db));
        return Ok(());
    }
    const ROUNDS: usize = 12;
    let mut bad = Vec::new();
    for round in 0..ROUNDS {
        let dir = tempfile::tempdir()?;
        let db = dir.path().join("jobs.db");
        make_schema_1(&db)?;
        let children = [spawn_child(&db)?, spawn_child(&db)?];
        // Both children are up and polling before the go.
        std::thread::sleep(Duration::from_millis(150));
        std::fs::write(db.with_extension("go"), b"")?;
        let mut wrote = Vec::new();
        let mut said = Vec::new();
        for c in children {
            let out = c.wait_with_output()?;
            let stdout = String::from_utf8_lossy(&out.stdout);
            let line = stdout
                .lines()
                // The harness prints `test <name> ... ` on the same line under --nocapture.
                .find_map(|l| l.split_once("CHILD ").map(|(_, said)| said))
                .unwrap_or("no CHILD line")
                .to_string();
            if let Some(id) = line.strip_prefix("wrote ") {
                wrote.push(id.parse::<i64>()?);
            }
            assert!(
                out.status.success(),
                "round {round}: child failed: {line}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            said.push(line);
        }
        let conn = sqlite::open_read_only(&db)?;
        let version = schema_version(&conn)?;
        let old_rows: i64 =
            conn.query_row("SELECT count(*) FROM runs WHERE id <= ?1", [ROWS], |r| {
                r.get(0)
            })?;
        let mut new_rows: Vec<i64> = conn
            .prepare("SELECT id FROM runs WHERE owner_start = id ORDER BY id")
            .and_then(|mut s| {
                s.query_map([], |r| r.get(0))?
                    .collect::<rusqlite::Result<Vec<i64>>>()
            })
            .unwrap_or_default();
        new_rows.sort_unstable();
        wrote.sort_unstable();
        let got = (version, old_rows, new_rows, failed_migration(&db));
        let want = (2, ROWS, wrote.clone(), None);
        if got != want || wrote.len() != 2 {
            bad.push(format!("round {round}: {got:?}, children said {said:?}"));
        }
    }
    assert!(
        bad.is_empty(),
        "{} of {ROUNDS} rounds lost the migration or rows:\n{}",
        bad.len(),
        bad.join("\n")
    );
    Ok(())
}

/// A migration that fails after another connection committed to the file (a process that had
/// the store open before the upgrade) must not put its snapshot back: that copy predates the
/// other commit and would erase it. The error says why the snapshot stayed where it is, the
/// other row stays, and no `.failed` marker claims the file was put back. Without the check the
/// snapshot is copied back and the row is gone.
#[test]
fn a_failed_migration_never_puts_back_a_snapshot_older_than_another_commit() -> R {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("jobs.db");
    make_schema_1(&db)?;
    let mut conn = open_wal(&db, Sync::Normal)?;
    let other_db: PathBuf = db.clone();
    let result = migrate_guarded(&mut conn, &db, 2, move |c| {
        c.execute_batch("ALTER TABLE runs ADD COLUMN owner_start INTEGER")?;
        // Another process's writable connection, opened before this migration began.
        open_wal(&other_db, Sync::Normal)?.execute(
            "INSERT INTO runs (id, state) VALUES (-1, 'written meanwhile')",
            [],
        )?;
        Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
            Some("step 2 broke".into()),
        ))
    });
    let message = outcome(result);
    let kept: i64 = conn.query_row("SELECT count(*) FROM runs WHERE id = -1", [], |r| r.get(0))?;
    assert_eq!(
        (kept, failed_migration(&db)),
        (1, None),
        "the other commit was erased: {message}"
    );
    assert!(
        message.contains("step 2 broke")
            && message.contains("another connection")
            && message.contains(".pre-migration"),
        "{message}"
    );
    Ok(())
}

/// Rows of the big schema-1 file of the timing tests below, each with a 200-byte text: a file
/// of some 50 MB, whose snapshot copy and `quick_check` take tens of milliseconds, the windows
/// these tests need another connection to act in.
const BIG_ROWS: i64 = 200_000;

/// A schema-1 `runs` table of `BIG_ROWS` rows.
fn make_big_schema_1(db: &Path) -> rusqlite::Result<()> {
    let conn = open_wal(db, Sync::Normal)?;
    conn.execute_batch(&format!(
        "CREATE TABLE runs (id INTEGER PRIMARY KEY, state TEXT NOT NULL);
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {BIG_ROWS})
         INSERT INTO runs (id, state) SELECT i, hex(randomblob(100)) FROM n;
         PRAGMA user_version = 1;"
    ))
}

/// `migrate_guarded`'s outcome as text.
fn outcome(result: Result<(), MigrateFailure>) -> String {
    match result {
        Err(MigrateFailure::Failed(e)) => format!("failed: {e}"),
        Err(MigrateFailure::RolledBack(what)) => format!("rolled back: {what}"),
        Err(MigrateFailure::Busy(what)) => format!("busy: {what}"),
        Ok(()) => "succeeded".to_string(),
    }
}

/// A writer that does not take the migration lock (a process of the old warren, its store
/// opened before the upgrade) commits a row while the pre-migration snapshot is being copied;
/// the migration then fails. The row is not in the snapshot, so the snapshot must not be put
/// back: the row stays and the error says why. Each round's commit lands during the copy (the
/// writer commits 5 ms after the snapshot file appears; the copy of the 50 MB file takes far
/// longer) and before the migration step. With the `PRAGMA data_version` baseline read after
/// the snapshot (as before), the commit was part of the baseline, the check saw nothing, and
/// the restore erased the row in every round.
#[test]
fn a_commit_by_a_writer_without_the_lock_during_the_snapshot_survives_a_failed_migration() -> R {
    const ROUNDS: usize = 3;
    let mut bad = Vec::new();
    for round in 0..ROUNDS {
        let dir = tempfile::tempdir()?;
        let db = dir.path().join("jobs.db");
        make_big_schema_1(&db)?;
        let writer = open_wal(&db, Sync::Normal)?;
        let mut conn = open_wal(&db, Sync::Normal)?;
        let watched = db.clone();
        // How long after the snapshot file appeared the row was committed.
        let other = std::thread::spawn(move || -> rusqlite::Result<Duration> {
            let until = Instant::now() + Duration::from_secs(60);
            while sqlite::snapshots_of(&watched).is_empty() && Instant::now() < until {
                std::thread::sleep(Duration::from_micros(50));
            }
            let seen = Instant::now();
            std::thread::sleep(Duration::from_millis(5));
            writer.execute(
                "INSERT INTO runs (id, state) VALUES (-1, 'written during the snapshot')",
                [],
            )?;
            Ok(seen.elapsed())
        });
        let mut waited = Duration::ZERO;
        let result = migrate_guarded(&mut conn, &db, 2, |c| {
            // The other commit is in before the migration step begins.
            waited = other.join().map_err(|_| rusqlite::Error::InvalidQuery)??;
            c.execute_batch("ALTER TABLE runs ADD COLUMN owner_start INTEGER")?;
            Err(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
                Some("step 2 broke".into()),
            ))
        });
        let message = outcome(result);
        let kept: i64 =
            conn.query_row("SELECT count(*) FROM runs WHERE id = -1", [], |r| r.get(0))?;
        let got = (kept, schema_version(&conn)?, failed_migration(&db));
        if got != (1, 1, None)
            || !(message.contains("step 2 broke") && message.contains("another connection"))
        {
            bad.push(format!(
                "round {round}: {got:?} (committed {waited:?} after the snapshot file \
                 appeared): {message}"
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "{} of {ROUNDS} rounds erased the commit made during the snapshot:\n{}",
        bad.len(),
        bad.join("\n")
    );
    Ok(())
}

/// The migration step of the check test: adds the column, then declares it NOT NULL behind
/// SQLite's back (`writable_schema`), so the existing rows' NULLs make `PRAGMA quick_check`
/// fail for real.
fn to_schema_2_failing_its_check(conn: &mut rusqlite::Connection) -> rusqlite::Result<()> {
    conn.execute_batch("ALTER TABLE runs ADD COLUMN owner_start INTEGER")?;
    let cookie: i64 = conn.query_row("PRAGMA schema_version", [], |r| r.get(0))?;
    conn.execute_batch(&format!(
        "PRAGMA writable_schema = ON;
         UPDATE sqlite_master SET sql = replace(sql, 'owner_start INTEGER',
                                                'owner_start INTEGER NOT NULL')
          WHERE name = 'runs';
         PRAGMA schema_version = {};
         PRAGMA writable_schema = OFF;",
        cookie + 1
    ))
}

/// A process opening the file while the migration's `quick_check` runs, and the check then
/// fails: it must never find the new version (it would take the lock-free path, open the file
/// writable at schema 2, and have the schema-1 snapshot put back under it). A reader polls the
/// version with fresh connections from before the migration until after it; every version it
/// saw is 1, and the migration rolled back naming the check. With the version stamped before
/// the check (as before), the reader saw 2 for the whole check and restore (tens of ms).
#[test]
fn a_process_opening_the_file_during_a_failing_check_never_sees_the_new_version() -> R {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("jobs.db");
    make_big_schema_1(&db)?;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = std::thread::spawn({
        let db = db.clone();
        let done = std::sync::Arc::clone(&done);
        move || -> rusqlite::Result<(std::collections::BTreeSet<i64>, usize)> {
            let mut seen = std::collections::BTreeSet::new();
            let mut looks = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                seen.insert(schema_version(&sqlite::open_read_only(&db)?)?);
                looks += 1;
            }
            Ok((seen, looks))
        }
    });
    let mut conn = open_wal(&db, Sync::Normal)?;
    let message = outcome(migrate_guarded(
        &mut conn,
        &db,
        2,
        to_schema_2_failing_its_check,
    ));
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let (seen, looks) = reader.join().map_err(|_| "reader panicked")??;
    assert!(looks > 10, "the reader looked {looks} times");
    assert!(
        message.starts_with("rolled back: migration from schema 1 to 2 failed (quick_check")
            && message.contains("NULL value in runs.owner_start"),
        "{message}"
    );
    assert_eq!(
        (seen, schema_version(&conn)?),
        ([1].into_iter().collect(), 1),
        "versions a reader saw during the migration, then the file's"
    );
    Ok(())
}
