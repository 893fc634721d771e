//! Session store benchmarks, each a ratio against a baseline measured in the same run on the
//! same disk (the install root is a temp dir beside the baseline's database):
//!
//! - appends/s with `turn` durability vs a raw rusqlite insert+commit with `synchronous=FULL`
//!   (target ≥ 0.7×);
//! - appends/s with `batched` durability (target ≥ 50k/s) under a stated load: `WRITERS`
//!   threads appending one message at a time each to its own session, acknowledged after
//!   commit, so group commit shares transactions between them; also reported: a lone writer
//!   (no batching possible) and the raw insert+commit with `NORMAL`;
//! - the same concurrent load with `turn` durability (reported: group commit shares fsyncs);
//! - JSONL→SQLite migration MB/s vs SHA-256 + raw insert of the same lines (target ≥ 0.5×);
//! - loading a 10k-message session vs a raw SELECT of the same rows (reported).
//!
//! Run: `cargo bench -p warren-store --bench sessions` (exits non-zero on a missed target).

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::{Connection, params};
use sha2::{Digest, Sha256};
use warren_config::InstallRoot;
use warren_config::schema::SessionDurability;
use warren_core::{Role, SessionKey};
use warren_store::sessions::migrate;
use warren_store::sessions::{NewMessage, Page, SessionBackend, SessionHandle, SqliteBackend};

type Res<T> = Result<T, Box<dyn std::error::Error>>;
/// The result of a writer thread (its error crosses the thread boundary).
type SendRes<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const TEXT: &str =
    "The quick brown fox jumps over the lazy dog while the agent thinks about tools.";

fn raw_db(path: &Path, sync: &str) -> Res<Connection> {
    let conn = Connection::open(path)?;
    let _: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    conn.execute_batch(&format!(
        "PRAGMA synchronous = {sync};
         CREATE TABLE IF NOT EXISTS m (id INTEGER PRIMARY KEY, k TEXT NOT NULL, role TEXT NOT NULL,
             content TEXT NOT NULL, created_at TEXT NOT NULL);"
    ))?;
    Ok(conn)
}

/// Raw baseline: one insert + commit per message.
fn raw_appends(conn: &mut Connection, n: usize) -> Res<Duration> {
    let t = Instant::now();
    for i in 0..n {
        let tx = conn.transaction()?;
        tx.execute(
            "INSERT INTO m (k, role, content, created_at) VALUES (?1, 'user', ?2, '2026-01-01T00:00:00.000000Z')",
            params!["bench", format!("{i} {TEXT}")],
        )?;
        tx.commit()?;
    }
    Ok(t.elapsed())
}

fn our_appends(backend: &SqliteBackend, n: usize) -> Res<Duration> {
    let key = SessionKey::new("bench")?;
    let t = Instant::now();
    for i in 0..n {
        backend.append(&key, &NewMessage::new(Role::User, format!("{i} {TEXT}")))?;
    }
    Ok(t.elapsed())
}

/// `writers` threads, each appending `per_writer` messages one at a time to its own session.
fn concurrent_appends(backend: &SqliteBackend, writers: usize, per_writer: usize) -> Res<Duration> {
    let t = Instant::now();
    std::thread::scope(|s| -> Res<()> {
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                s.spawn(move || -> SendRes<()> {
                    let key = SessionKey::new(format!("writer-{w}"))?;
                    for i in 0..per_writer {
                        backend
                            .append(&key, &NewMessage::new(Role::User, format!("{i} {TEXT}")))?;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join()
                .map_err(|_| "writer panicked")?
                .map_err(|e| -> Box<dyn std::error::Error> { e })?;
        }
        Ok(())
    })?;
    Ok(t.elapsed())
}

/// Concurrent writers of the batched bench: async tasks (the daemon's shape) and threads.
const TASKS: usize = 64;
const THREADS: usize = 8;

/// `tasks` tokio tasks, each appending `per_task` messages one at a time to its own session
/// through `SessionHandle`, awaiting each commit.
async fn task_appends(
    backend: &Arc<dyn SessionBackend>,
    tasks: usize,
    per_task: usize,
) -> Res<Duration> {
    let t = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for w in 0..tasks {
        let handle = SessionHandle::new(Arc::clone(backend));
        set.spawn(async move {
            let key = SessionKey::new(format!("task-{w}")).map_err(|e| e.to_string())?;
            for i in 0..per_task {
                handle
                    .append(
                        key.clone(),
                        NewMessage::new(Role::User, format!("{i} {TEXT}")),
                    )
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok::<(), String>(())
        });
    }
    while let Some(r) = set.join_next().await {
        r.map_err(|e| e.to_string())??;
    }
    Ok(t.elapsed())
}

/// Alternates baseline and ours in `ROUNDS` slices so disk noise (other builds on the same
/// machine) hits both alike; returns the summed times.
fn interleaved(
    base: &Path,
    sync: &str,
    durability: SessionDurability,
    n: usize,
) -> Res<(Duration, Duration)> {
    const ROUNDS: usize = 6;
    let mut conn = raw_db(&base.join(format!("raw-{sync}.db")), sync)?;
    let backend = SqliteBackend::open(&fresh_root(base, sync), durability)?;
    let (mut raw, mut ours) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..ROUNDS {
        raw += raw_appends(&mut conn, n / ROUNDS)?;
        ours += our_appends(&backend, n / ROUNDS)?;
    }
    Ok((raw, ours))
}

fn per_sec(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

fn fresh_root(base: &Path, name: &str) -> InstallRoot {
    let root = InstallRoot::at(base.join(name));
    let _ = fs::remove_dir_all(root.root());
    root
}

fn jsonl_files(dir: &Path, files: usize, lines: usize) -> Res<u64> {
    fs::create_dir_all(dir)?;
    let mut total = 0;
    for f in 0..files {
        let body: String = (0..lines)
            .map(|i| {
                format!(
                    "{{\"role\":\"{}\",\"content\":\"{i} {TEXT}\",\"created_at\":\"2025-01-01T00:00:{:02}Z\"}}\n",
                    if i % 2 == 0 { "user" } else { "assistant" },
                    i % 60
                )
            })
            .collect();
        total += body.len() as u64;
        fs::write(dir.join(format!("s{f}.jsonl")), body)?;
    }
    Ok(total)
}

/// Baseline for the migration: read, SHA-256 and raw-insert every line, one FULL commit per file.
fn raw_import(src: &Path, db: &Path) -> Res<Duration> {
    let mut conn = raw_db(db, "FULL")?;
    let t = Instant::now();
    let mut names: Vec<_> = fs::read_dir(src)?.flatten().map(|e| e.path()).collect();
    names.sort();
    for path in names {
        let bytes = fs::read(&path)?;
        let _digest = Sha256::digest(&bytes);
        let text = std::str::from_utf8(&bytes)?;
        let tx = conn.transaction()?;
        {
            let mut stmt = tx.prepare_cached(
                "INSERT INTO m (k, role, content, created_at) VALUES (?1, 'user', ?2, '2025-01-01T00:00:00.000000Z')",
            )?;
            for line in text.lines() {
                stmt.execute(params!["k", line])?;
            }
        }
        tx.commit()?;
    }
    Ok(t.elapsed())
}

fn main() -> Res<()> {
    let tmp = tempfile::tempdir()?;
    let base = tmp.path();
    let mut failed = Vec::new();

    // `WARREN_BENCH_ONLY=batched` runs only the batched section (for profiling).
    let only_batched = std::env::var("WARREN_BENCH_ONLY").is_ok_and(|v| v == "batched");

    // 1. turn durability vs raw FULL commits.
    if !only_batched {
        let n = 1800;
        let (raw_full, turn) = interleaved(base, "FULL", SessionDurability::Turn, n)?;
        let ratio = per_sec(n, turn) / per_sec(n, raw_full);
        println!("append, turn durability ({n} appends, interleaved with the baseline)");
        println!("  raw insert+commit FULL: {:>9.0}/s", per_sec(n, raw_full));
        println!("  SqliteBackend (turn):   {:>9.0}/s", per_sec(n, turn));
        println!("  ratio:                  {ratio:.2}x (target >= 0.70x)");
        if ratio < 0.7 {
            failed.push(format!("turn appends at {ratio:.2}x of raw"));
        }
    }

    // 2. batched durability: concurrent writers through group commit.
    let n = 64_000;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()?;
    let mut conn = raw_db(&base.join("raw-NORMAL.db"), "NORMAL")?;
    let tasks_backend: Arc<dyn SessionBackend> = Arc::new(SqliteBackend::open(
        &fresh_root(base, "batched-tasks"),
        SessionDurability::Batched,
    )?);
    let threads_backend = SqliteBackend::open(
        &fresh_root(base, "batched-threads"),
        SessionDurability::Batched,
    )?;
    let lone_backend = SqliteBackend::open(&fresh_root(base, "lone"), SessionDurability::Batched)?;
    let (mut raw_normal, mut tasks, mut threads, mut lone) = (
        Duration::ZERO,
        Duration::ZERO,
        Duration::ZERO,
        Duration::ZERO,
    );
    const ROUNDS: usize = 4;
    let small = n / ROUNDS / 8;
    for _ in 0..ROUNDS {
        raw_normal += raw_appends(&mut conn, small)?;
        tasks += rt.block_on(task_appends(&tasks_backend, TASKS, n / ROUNDS / TASKS))?;
        threads += concurrent_appends(&threads_backend, THREADS, small / THREADS)?;
        lone += our_appends(&lone_backend, small)?;
    }
    let rate = per_sec(n, tasks);

    println!("append, batched durability (interleaved with the baselines)");
    println!(
        "  raw insert+commit NORMAL, 1 writer:                 {:>9.0}/s",
        per_sec(small * ROUNDS, raw_normal)
    );
    println!(
        "  SqliteBackend, 1 blocking writer (no batching):     {:>9.0}/s",
        per_sec(small * ROUNDS, lone)
    );
    println!(
        "  SqliteBackend, {THREADS} blocking writer threads:          {:>9.0}/s",
        per_sec(small / THREADS * THREADS * ROUNDS, threads)
    );
    println!(
        "  SqliteBackend, {TASKS} async writers (SessionHandle):   {rate:>9.0}/s (target >= 50000/s)"
    );
    println!(
        "    load shape: {TASKS} tokio tasks on 2 worker threads, each appending one message at \
         a time to its own session and awaiting the commit before the next; {n} appends"
    );
    if rate < 50_000.0 {
        failed.push(format!("batched appends at {rate:.0}/s"));
    }

    if only_batched {
        return if failed.is_empty() {
            Ok(())
        } else {
            Err(failed.join("; ").into())
        };
    }

    // 2b. turn durability under concurrent load (reported): group commit shares the fsyncs.
    let n = 3_200;
    let turn_backend: Arc<dyn SessionBackend> = Arc::new(SqliteBackend::open(
        &fresh_root(base, "turn-tasks"),
        SessionDurability::Turn,
    )?);
    let d = rt.block_on(task_appends(&turn_backend, TASKS, n / TASKS))?;
    println!(
        "append, turn durability, {TASKS} async writers ({n} appends): {:>9.0}/s (reported)",
        per_sec(n, d)
    );

    // 3. migration throughput.
    let src = base.join("src");
    let bytes = jsonl_files(&src, 20, 5_000)?;
    let mb = bytes as f64 / 1e6;
    let raw = raw_import(&src, &base.join("raw-import.db"))?;
    let root = fresh_root(base, "migrate");
    jsonl_files(&root.sessions_dir(), 20, 5_000)?;
    let backend = SqliteBackend::open(&root, SessionDurability::Turn)?;
    let t = Instant::now();
    let report = migrate::import(&backend, &mut |_| {})?;
    let ours = t.elapsed();
    if !report.errors.is_empty() {
        return Err(format!("migration failed: {:?}", report.errors).into());
    }
    let ratio = raw.as_secs_f64() / ours.as_secs_f64();
    println!("migration ({mb:.1} MB, 20 files, 100k messages)");
    println!(
        "  SHA-256 + raw insert: {:>7.1} MB/s",
        mb / raw.as_secs_f64()
    );
    println!(
        "  migrate::import:      {:>7.1} MB/s",
        mb / ours.as_secs_f64()
    );
    println!("  ratio:                {ratio:.2}x (target >= 0.50x)");
    if ratio < 0.5 {
        failed.push(format!("migration at {ratio:.2}x of raw"));
    }

    // 4. load a 10k-message session.
    let rounds = 20;
    let root10k = fresh_root(base, "load");
    let b = SqliteBackend::open(&root10k, SessionDurability::Batched)?;
    let k = SessionKey::new("big")?;
    for i in 0..10_000 {
        b.append(&k, &NewMessage::new(Role::User, format!("{i} {TEXT}")))?;
    }
    let t = Instant::now();
    for _ in 0..rounds {
        let h = b.load(&k, Page::All)?;
        assert_eq!(h.messages.len(), 10_000);
    }
    let ours = t.elapsed() / rounds;
    let conn = Connection::open(root10k.sessions_db())?;
    let t = Instant::now();
    for _ in 0..rounds {
        let mut stmt = conn.prepare_cached(
            "SELECT id, role, content, agent, created_at FROM messages WHERE session_key = ?1 ORDER BY id",
        )?;
        let rows: Vec<(i64, String, String, Option<String>, String)> = stmt
            .query_map(["big"], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })?
            .collect::<Result<_, _>>()?;
        assert_eq!(rows.len(), 10_000);
    }
    let raw = t.elapsed() / rounds;
    println!("load of a 10k-message session");
    println!("  raw SELECT:    {raw:?}");
    println!("  load(Page::All): {ours:?}");
    println!(
        "  ratio:         {:.2}x of raw speed (reported)",
        raw.as_secs_f64() / ours.as_secs_f64()
    );

    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("; ").into())
    }
}
