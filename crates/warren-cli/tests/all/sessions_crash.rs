//! Crash safety of the JSONL→SQLite migration (MIG-1..5) and of SQLite appends (SESS-1): a
//! real `warren` child aborts at each named failpoint; the next run must converge on exactly
//! the state of an uninterrupted run (every message once, no source bytes lost, receipts
//! matching archives) and a further run must be a no-op. Also: a read-only sessions directory
//! and a full disk (a real small tmpfs when the test may mount one, else injected errors).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::{Tmpfs, bin};
use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::process::Command;

use pretty_assertions::assert_eq;
use sha2::{Digest, Sha256};
use warren_store::failpoints as fp;
use warren_testkit::{TempRoot, run_until_crash, text};

type R = Result<(), Box<dyn std::error::Error>>;

/// Sources of a legacy install: timestamps on some lines, a torn tail, an empty file.
fn sources() -> BTreeMap<&'static str, String> {
    let mut m = BTreeMap::new();
    m.insert(
        "alpha.jsonl",
        "{\"role\":\"user\",\"content\":\"a1\",\"created_at\":\"2024-02-03T04:05:06Z\",\"agent\":\"main\"}\n\
         {\"role\":\"assistant\",\"content\":\"a2\",\"created_at\":\"2024-02-03T04:05:07Z\"}\n\
         {\"role\":\"user\",\"content\":\"a3 with \\\"quotes\\\"\"}\n"
            .to_string(),
    );
    m.insert(
        "beta.jsonl",
        "{\"role\":\"user\",\"content\":\"b1\"}\n{\"role\":\"tool\",\"content\":\"b2\"}\n{\"role\":\"assis"
            .to_string(),
    );
    m.insert("gamma.jsonl", String::new());
    m
}

fn sessions_dir(root: &TempRoot) -> PathBuf {
    root.path().join("data").join("sessions")
}

fn seed(root: &TempRoot) {
    let dir = sessions_dir(root);
    fs::create_dir_all(&dir).unwrap();
    for (name, text) in sources() {
        fs::write(dir.join(name), text).unwrap();
    }
}

fn migrate(root: &TempRoot) -> Command {
    root.warren(bin(), &["sessions", "migrate"])
}

/// Every source's bytes are somewhere: live, staged or archive (MIG-1: nothing lost).
fn assert_no_source_lost(root: &TempRoot, context: &str) {
    let dir = sessions_dir(root);
    for (name, text) in sources() {
        let stem = name.trim_end_matches(".jsonl");
        let holders: Vec<String> = [".jsonl", ".jsonl.importing", ".jsonl.migrated"]
            .iter()
            .map(|s| dir.join(format!("{stem}{s}")))
            .filter(|p| fs::read_to_string(p).is_ok_and(|t| t == text))
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert!(
            !holders.is_empty(),
            "{context}: the bytes of {name} are lost"
        );
    }
}

/// What a user sees after migration, independent of wall-clock times of untimed lines.
#[derive(Debug, PartialEq, Eq)]
struct Converged {
    files: Vec<String>,
    sessions: Vec<(String, u64)>,
    messages: Vec<(String, String, String, Option<String>)>,
    receipts: Vec<(String, String, String, i64)>,
}

fn converged(root: &TempRoot) -> Converged {
    let dir = sessions_dir(root);
    let mut files: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".jsonl") && !n.starts_with('.'))
        .collect();
    files.sort();
    let conn = rusqlite::Connection::open(dir.join("sessions.db")).unwrap();
    let sessions = conn
        .prepare("SELECT key, message_count FROM sessions ORDER BY key")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let timed = ["a1", "a2"];
    let messages = conn
        .prepare("SELECT session_key, role, content, created_at FROM messages ORDER BY id")
        .unwrap()
        .query_map([], |r| {
            let content: String = r.get(2)?;
            let at: String = r.get(3)?;
            let at = timed.contains(&content.as_str()).then_some(at);
            Ok((r.get(0)?, r.get(1)?, content, at))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let receipts: Vec<(String, String, String, i64)> = conn
        .prepare("SELECT source_name, session_key, sha256, byte_len FROM jsonl_import_receipts ORDER BY source_name")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    // Receipts match archives, byte for byte.
    for (source, _, sha, len) in &receipts {
        let archive = fs::read(dir.join(format!("{source}.migrated"))).unwrap();
        let digest: String = Sha256::digest(&archive)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            (&digest, archive.len() as i64),
            (sha, *len),
            "receipt of {source}"
        );
    }
    Converged {
        files,
        sessions,
        messages,
        receipts,
    }
}

fn run_ok(cmd: &mut Command, context: &str) -> String {
    let out = cmd.output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{context}: {stdout}{stderr}");
    stdout
}

#[test]
fn a_crash_at_every_migration_step_converges_on_the_next_run_mig1_mig3_mig4() -> R {
    // The state of an uninterrupted run.
    let clean = TempRoot::new()?;
    seed(&clean);
    run_ok(&mut migrate(&clean), "uninterrupted run");
    let expected = converged(&clean);
    assert_eq!(expected.sessions.len(), 3);
    assert_eq!(
        expected.messages.len(),
        5,
        "the torn tail of beta is skipped"
    );

    for point in fp::MIGRATE {
        let root = TempRoot::new()?;
        seed(&root);
        run_until_crash(migrate(&root), point)?;
        assert_no_source_lost(&root, point);

        let out = run_ok(&mut migrate(&root), point);
        assert!(
            !out.contains("nothing to migrate"),
            "{point}: the rerun must finish the work"
        );
        assert_eq!(converged(&root), expected, "after a crash at {point}");

        let again = run_ok(&mut migrate(&root), point);
        assert!(
            again.contains("nothing to migrate"),
            "{point}: second run not a no-op: {again}"
        );
        assert_eq!(
            converged(&root),
            expected,
            "{point}: the no-op run changed something"
        );
    }
    Ok(())
}

#[test]
fn jsonl_stays_fenced_after_a_crash_past_the_commit_mig4() -> R {
    let root = TempRoot::new()?;
    root.write_config("[agents.main]\n\n[channels]\nsession_backend = \"jsonl\"\n")?;
    seed(&root);
    run_until_crash(migrate(&root), fp::MIGRATE_AFTER_COMMIT)?;
    // A later process configured for JSONL must not write beside the migrated data.
    let out = root.run(bin(), &["sessions", "append", "alpha", "late"])?;
    let (_, stderr) = text(&out);
    assert!(
        !out.status.success(),
        "JSONL append after a committed receipt"
    );
    assert!(
        stderr.contains("inactive") && stderr.contains("MIG-4"),
        "{stderr}"
    );
    Ok(())
}

#[test]
fn a_crash_around_an_append_commit_keeps_messages_and_counts_consistent_sess1() -> R {
    for (point, expect_new) in [
        (fp::APPEND_BEFORE_COMMIT, false),
        (fp::APPEND_AFTER_COMMIT, true),
    ] {
        let root = TempRoot::new()?;
        run_ok(
            &mut root.warren(bin(), &["sessions", "append", "k", "first"]),
            point,
        );
        run_until_crash(
            root.warren(bin(), &["sessions", "append", "k", "second"]),
            point,
        )?;
        let out = run_ok(
            &mut root.warren(bin(), &["--json", "sessions", "show", "k"]),
            point,
        );
        let v: serde_json::Value = serde_json::from_str(&out)?;
        let contents: Vec<&str> = v["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["content"].as_str().unwrap())
            .collect();
        let want: &[&str] = if expect_new {
            &["first", "second"]
        } else {
            &["first"]
        };
        assert_eq!(contents, want, "{point}");
        assert_eq!(
            v["session"]["message_count"].as_u64(),
            Some(want.len() as u64),
            "{point}"
        );
    }
    Ok(())
}

#[test]
fn a_read_only_sessions_directory_fails_naming_the_file_and_loses_nothing() -> R {
    let root = TempRoot::new()?;
    let dir = sessions_dir(&root);
    // A real read-only filesystem where the test may mount one: SQLite cannot even open its
    // WAL there, and says which database.
    if let Ok(mount) = Tmpfs::mount(&dir, "4m") {
        seed(&root);
        if mount.remount_read_only() {
            let out = migrate(&root).output()?;
            let (_, stderr) = text(&out);
            assert!(!out.status.success());
            assert!(stderr.contains("sessions.db"), "{stderr}");
            for (name, bytes) in sources() {
                assert_eq!(
                    fs::read_to_string(dir.join(name))?,
                    bytes,
                    "{name} untouched"
                );
            }
        }
    }
    // Always: the staging rename fails with EROFS (injected), naming the source file.
    let root = TempRoot::new()?;
    seed(&root);
    let out = migrate(&root)
        .env(
            "FAILPOINTS",
            format!("{}=return", fp::MIGRATE_READ_ONLY_ERROR),
        )
        .output()?;
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains("alpha.jsonl") && stderr.contains("Read-only"),
        "{stderr}"
    );
    for (name, bytes) in sources() {
        assert_eq!(
            fs::read_to_string(sessions_dir(&root).join(name))?,
            bytes,
            "{name} untouched"
        );
    }
    run_ok(&mut migrate(&root), "once the directory is writable again");
    Ok(())
}

#[test]
fn a_full_disk_during_the_import_restores_the_sources_and_a_later_run_succeeds() -> R {
    let root = TempRoot::new()?;
    let dir = sessions_dir(&root);
    let big: String = (0..400)
        .map(|i| {
            format!(
                "{{\"role\":\"user\",\"content\":\"{i} {}\"}}\n",
                "lorem ipsum ".repeat(20)
            )
        })
        .collect();
    let mount = Tmpfs::mount(&dir, "400k").ok();
    fs::create_dir_all(&dir)?;
    fs::write(dir.join("big.jsonl"), &big)?;
    let out = if mount.is_some() {
        migrate(&root).output()?
    } else {
        migrate(&root)
            .env(
                "FAILPOINTS",
                format!("{}=return", fp::MIGRATE_DISK_FULL_ERROR),
            )
            .output()?
    };
    let (_, stderr) = text(&out);
    assert!(!out.status.success(), "the import should not fit");
    assert!(
        stderr.contains("full") && stderr.contains("sessions.db"),
        "{stderr}"
    );
    assert_eq!(
        fs::read_to_string(dir.join("big.jsonl"))?,
        big,
        "source back at its live name"
    );
    assert!(!dir.join("big.jsonl.importing").exists());
    drop(mount);
    // With room again (the mount is gone; the source was on it, so write it back).
    fs::create_dir_all(&dir)?;
    if !dir.join("big.jsonl").exists() {
        fs::write(dir.join("big.jsonl"), &big)?;
    }
    let out = run_ok(&mut migrate(&root), "after freeing space");
    assert!(out.contains("400 messages"), "{out}");
    Ok(())
}
