//! Group commit of SQLite appends (SESS-1, `[channels] session_durability`): each append stays
//! atomic inside a shared transaction, a failing append does not poison its batch, and a real
//! child process killed in the middle of a batch loses no acknowledged append and tears
//! nothing.
//!
//! The crash tests re-run this test binary as the child (`child_appender`, a no-op unless
//! `WARREN_GC_CHILD` is set): it appends from many async writers through `SessionHandle`
//! with `turn` durability and prints `ack <writer> <i>` after each acknowledged append.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::Arc;

use pretty_assertions::assert_eq;
use warren_config::InstallRoot;
use warren_config::schema::SessionDurability;
use warren_core::{Role, SessionKey};
use warren_store::failpoints as fp;
use warren_store::sessions::{NewMessage, Page, SessionBackend, SessionHandle, SqliteBackend};

type R = Result<(), Box<dyn std::error::Error>>;

const WRITERS: usize = 16;

fn key(s: &str) -> SessionKey {
    SessionKey::new(s).unwrap()
}

#[test]
fn one_failing_append_does_not_poison_its_batch_sess1() -> R {
    let dir = tempfile::tempdir()?;
    let root = InstallRoot::at(dir.path().join("w"));
    let b = SqliteBackend::open(&root, SessionDurability::Batched)?;
    // A trigger that rejects one message: the failure happens after the session row was
    // already bumped inside that append's savepoint.
    rusqlite::Connection::open(root.sessions_db())?.execute_batch(
        "CREATE TRIGGER reject_poison BEFORE INSERT ON messages WHEN new.content = 'poison'
         BEGIN SELECT RAISE(ABORT, 'poison rejected'); END;",
    )?;
    let (a, p) = (key("a"), key("p"));
    let results = b.append_many([
        (a.clone(), NewMessage::new(Role::User, "a1")),
        (p.clone(), NewMessage::new(Role::User, "poison")),
        (a.clone(), NewMessage::new(Role::User, "a2")),
        (p.clone(), NewMessage::new(Role::User, "p1")),
    ]);
    let ok: Vec<bool> = results.iter().map(Result::is_ok).collect();
    assert_eq!(ok, [true, false, true, true]);
    let e = results[1].as_ref().unwrap_err().to_string();
    assert!(
        e.contains("poison rejected") && e.contains("sessions.db"),
        "{e}"
    );
    let contents = |k: &SessionKey| -> Vec<String> {
        b.load(k, Page::All)
            .unwrap()
            .messages
            .into_iter()
            .map(|m| m.content)
            .collect()
    };
    assert_eq!(contents(&a), ["a1", "a2"]);
    assert_eq!(contents(&p), ["p1"]);
    // The failed append's session-row change was rolled back with its message.
    assert_eq!(b.meta(&p)?.unwrap().message_count, 1);
    assert_eq!(b.meta(&a)?.unwrap().message_count, 2);
    Ok(())
}

#[test]
fn concurrent_async_writers_share_commits_and_every_ack_is_stored_sess1() -> R {
    let dir = tempfile::tempdir()?;
    let root = InstallRoot::at(dir.path().join("w"));
    let backend: Arc<dyn SessionBackend> =
        Arc::new(SqliteBackend::open(&root, SessionDurability::Turn)?);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()?;
    let acked = rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for w in 0..WRITERS {
            let h = SessionHandle::new(Arc::clone(&backend));
            set.spawn(async move {
                let k = key(&format!("w{w}"));
                let mut seqs = Vec::new();
                for i in 0..50 {
                    let m = h
                        .append(k.clone(), NewMessage::new(Role::User, format!("w{w}-{i}")))
                        .await
                        .unwrap();
                    seqs.push(m.seq);
                }
                seqs
            });
        }
        let mut all = Vec::new();
        while let Some(r) = set.join_next().await {
            all.extend(r.unwrap());
        }
        all
    });
    assert_eq!(acked.len(), WRITERS * 50);
    for w in 0..WRITERS {
        let k = key(&format!("w{w}"));
        let got: Vec<String> = backend
            .load(&k, Page::All)?
            .messages
            .into_iter()
            .map(|m| m.content)
            .collect();
        let want: Vec<String> = (0..50).map(|i| format!("w{w}-{i}")).collect();
        assert_eq!(got, want);
        assert_eq!(backend.meta(&k)?.unwrap().message_count, 50);
    }
    Ok(())
}

/// The child of the crash tests (a no-op in a normal run).
#[test]
fn child_appender() {
    let Some(dir) = std::env::var_os("WARREN_GC_CHILD") else {
        return;
    };
    let _failpoints = warren_config::failpoint::init_from_env();
    let root = InstallRoot::at(dir);
    let backend: Arc<dyn SessionBackend> =
        Arc::new(SqliteBackend::open(&root, SessionDurability::Turn).unwrap());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let out = Arc::new(std::sync::Mutex::new(std::io::stdout()));
    rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for w in 0..WRITERS {
            let (h, out) = (SessionHandle::new(Arc::clone(&backend)), Arc::clone(&out));
            set.spawn(async move {
                let k = key(&format!("w{w}"));
                for i in 0u64.. {
                    h.append(k.clone(), NewMessage::new(Role::User, format!("w{w}-{i}")))
                        .await
                        .unwrap();
                    let mut o = out.lock().unwrap();
                    writeln!(o, "ack {w} {i}").unwrap();
                    o.flush().unwrap();
                }
            });
        }
        while set.join_next().await.is_some() {}
    });
}

/// Runs the child until it dies (killed by us after `kill_after` acks, or aborted at an armed
/// failpoint); returns the highest acknowledged index per writer and the exit status.
fn run_child(
    dir: &std::path::Path,
    failpoints: Option<&str>,
    kill_after: Option<usize>,
) -> (BTreeMap<usize, u64>, std::process::ExitStatus) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "group_commit::child_appender",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("WARREN_GC_CHILD", dir)
    .env_remove("FAILPOINTS")
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    if let Some(f) = failpoints {
        cmd.env("FAILPOINTS", f);
    }
    let mut child = cmd.spawn().unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let mut acked: BTreeMap<usize, u64> = BTreeMap::new();
    let mut n = 0;
    let mut killed = false;
    for line in stdout.lines() {
        let Ok(line) = line else { break };
        let Some(rest) = line.strip_prefix("ack ") else {
            continue;
        };
        let (w, i) = rest.split_once(' ').unwrap();
        let (w, i): (usize, u64) = (w.parse().unwrap(), i.parse().unwrap());
        let e = acked.entry(w).or_default();
        *e = (*e).max(i + 1);
        n += 1;
        if !killed && kill_after.is_some_and(|k| n >= k) {
            // SIGKILL: no destructor, no flush; lines already written are still read below.
            child.kill().unwrap();
            killed = true;
        }
    }
    (acked, child.wait().unwrap())
}

/// After the crash: every acknowledged append is stored exactly once; each writer's messages
/// are a gap-free prefix (at most its one in-flight append beyond the acks); every session
/// row's count matches its messages (nothing torn).
fn assert_consistent(dir: &std::path::Path, acked: &BTreeMap<usize, u64>, context: &str) {
    let root = InstallRoot::at(dir);
    let b = SqliteBackend::open(&root, SessionDurability::Turn).unwrap();
    assert!(
        !acked.is_empty(),
        "{context}: the child acknowledged nothing"
    );
    for w in 0..WRITERS {
        let k = key(&format!("w{w}"));
        let got: Vec<String> = b
            .load(&k, Page::All)
            .unwrap()
            .messages
            .into_iter()
            .map(|m| m.content)
            .collect();
        let acks = acked.get(&w).copied().unwrap_or(0) as usize;
        assert!(
            got.len() == acks || got.len() == acks + 1,
            "{context}: writer {w} acknowledged {acks} appends, {} stored",
            got.len()
        );
        let want: Vec<String> = (0..got.len()).map(|i| format!("w{w}-{i}")).collect();
        assert_eq!(got, want, "{context}: writer {w}");
        let count = b.meta(&k).unwrap().map_or(0, |m| m.message_count);
        assert_eq!(count, got.len() as u64, "{context}: writer {w} count");
    }
}

#[test]
fn killing_the_child_mid_batch_keeps_every_acknowledged_append_sess1() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w");
    let (acked, status) = run_child(&path, None, Some(1500));
    assert_eq!(
        status.signal(),
        Some(9),
        "the child should have been killed"
    );
    assert_consistent(&path, &acked, "SIGKILL");
}

#[test]
fn aborting_inside_a_batch_before_commit_keeps_every_acknowledged_append_sess1() {
    for point in [
        format!("{}=400*off->return", fp::APPEND_IN_BATCH),
        format!("{}=40*off->return", fp::APPEND_BEFORE_COMMIT),
        format!("{}=40*off->return", fp::APPEND_AFTER_COMMIT),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w");
        let (acked, status) = run_child(&path, Some(&point), None);
        assert_eq!(
            status.signal(),
            Some(6),
            "{point}: the child should have aborted"
        );
        assert_consistent(&path, &acked, &point);
    }
}
