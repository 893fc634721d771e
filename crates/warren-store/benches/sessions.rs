//! Session store benchmarks, each a ratio against a baseline measured in the same run on the
//! same disk (the install root is a temp dir beside the baseline's database):
//!
//! - appends/s with `turn` durability vs a raw rusqlite insert+commit with `synchronous=FULL`
//!   (target ≥ 0.7×);
//! - appends/s with `batched` durability (target ≥ 50k/s), vs raw insert+commit with `NORMAL`;
//! - JSONL→SQLite migration MB/s vs SHA-256 + raw insert of the same lines (target ≥ 0.5×);
//! - loading a 10k-message session vs a raw SELECT of the same rows (reported).
//!
//! Run: `cargo bench -p warren-store --bench sessions` (exits non-zero on a missed target).

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use rusqlite::{Connection, params};
use sha2::{Digest, Sha256};
use warren_config::InstallRoot;
use warren_config::schema::SessionDurability;
use warren_core::{Role, SessionKey};
use warren_store::sessions::migrate;
use warren_store::sessions::{NewMessage, Page, SessionBackend, SqliteBackend};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

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

    // 1. turn durability vs raw FULL commits.
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

    // 2. batched durability.
    let n = 30_000;
    let (raw_normal, batched) = interleaved(base, "NORMAL", SessionDurability::Batched, n)?;
    let rate = per_sec(n, batched);
    println!("append, batched durability ({n} appends, interleaved with the baseline)");
    println!(
        "  raw insert+commit NORMAL: {:>9.0}/s",
        per_sec(n, raw_normal)
    );
    println!("  SqliteBackend (batched):  {rate:>9.0}/s");
    println!(
        "  ratio:                    {:.2}x (target: >= 50000/s)",
        rate / per_sec(n, raw_normal)
    );
    if rate < 50_000.0 {
        failed.push(format!("batched appends at {rate:.0}/s"));
    }

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
