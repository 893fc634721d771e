//! Safe upgrades on the real binary (issue 22 §4; BEYOND-11): a store whose schema migration
//! fails is put back from its pre-migration snapshot and opens READ-ONLY at its old schema, in
//! the daemon and in the CLI: the daemon starts, reads answer, every write fails naming the
//! file and why, and `warren doctor` shows the store read-only with the reason.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use warren_testkit::{DaemonChild, TempRoot, free_port, http, pair, text};

use crate::common::bin;

type R = Result<(), Box<dyn std::error::Error>>;

const WAIT: Duration = Duration::from_secs(60);
const FAIL: (&str, &str) = ("FAILPOINTS", "sqlite-migration-fail=return");

/// Every row of `table` in `db` as text, and the file's schema version.
fn rows(db: &Path, table: &str) -> rusqlite::Result<(i64, Vec<String>)> {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let version = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let mut stmt = conn.prepare(&format!("SELECT * FROM {table} ORDER BY 1"))?;
    let n = stmt.column_count();
    let all = stmt
        .query_map([], |r| {
            (0..n)
                .map(|i| {
                    r.get::<_, rusqlite::types::Value>(i)
                        .map(|v| format!("{v:?}"))
                })
                .collect::<rusqlite::Result<Vec<_>>>()
                .map(|v| v.join("|"))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok((version, all))
}

/// A store written by an older warren: schema version 0, its tables and rows in place.
fn make_old(db: &Path) -> rusqlite::Result<()> {
    rusqlite::Connection::open(db)?.execute_batch("PRAGMA user_version = 0")
}

/// Memory, cron and the device registry at schema 0 under a daemon whose migrations fail
/// (failpoint `sqlite-migration-fail`): the daemon starts and says once per store that it is
/// read-only and why; each file keeps its version and rows (the snapshot was put back); reads
/// answer (`cron list`, `memory list`, `GET /api/devices`); writes fail naming the file and the
/// failed migration (`cron add`, `memory forget`, the daemon's registry delete); `warren doctor`
/// reports each as `read-only` with the reason. Without the read-only fallback the stores do
/// not open at all: the reads fail with the migration error and the daemon has no registry.
#[test]
fn failed_migrations_leave_memory_cron_and_devices_read_only_at_their_old_schema_beyond11() -> R {
    let root = TempRoot::new()?;
    let port = free_port()?;
    root.write_config(&format!(
        "[agents.main]\nrisk_profile = \"mem\"\n\n[risk_profiles.mem]\nautonomy = \"full\"\n\
         allowed_tools = [\"memory_store\"]\n\n[gateway]\nport = {port}\n"
    ))?;
    let ok = |args: &[&str]| -> Result<String, Box<dyn std::error::Error>> {
        let out = root.run(bin(), args)?;
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "warren {args:?}: {stdout}{stderr}");
        Ok(stdout)
    };
    ok(&[
        "tools",
        "run",
        "main",
        "memory_store",
        r#"{"key": "plan", "content": "before the upgrade"}"#,
    ])?;
    ok(&[
        "cron",
        "add",
        "nightly",
        "--agent",
        "main",
        "--every",
        "1h",
        "--message",
        "hi",
    ])?;
    // Every store exists at this warren's schema; the device registry holds one paired device.
    let mut daemon = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    daemon.wait_for("warren daemon ready", WAIT)?;
    let token = pair(&root, bin(), port, "phone")?;
    daemon.signal("TERM")?;
    daemon.wait(WAIT)?;
    drop(daemon);

    let data = root.path().join("data");
    let stores = [
        ("memory", data.join("memory/memory.db"), "memories"),
        ("cron", data.join("cron/jobs.db"), "jobs"),
        ("devices", data.join("devices.db"), "devices"),
    ];
    // The session store too (no rows yet): the daemon serves it read-only.
    let sessions_db = data.join("sessions/sessions.db");
    make_old(&sessions_db)?;
    let mut before = BTreeMap::new();
    for (name, db, table) in &stores {
        make_old(db)?;
        let (version, rows) = rows(db, table)?;
        assert_eq!(version, 0);
        assert!(!rows.is_empty(), "{name}: {rows:?}");
        before.insert(*name, rows);
    }
    let after = |before: &BTreeMap<&str, Vec<String>>| -> R {
        for (name, db, table) in &stores {
            let (version, now) = rows(db, table)?;
            assert_eq!(version, 0, "{name}: the snapshot was put back");
            assert_eq!(&now, &before[name], "{name}: rows unchanged");
        }
        Ok(())
    };

    let mut cmd = root.warren(bin(), &["daemon"]);
    cmd.env(FAIL.0, FAIL.1);
    let mut daemon = DaemonChild::spawn(cmd)?;
    daemon.wait_for("warren daemon ready", WAIT)?;
    let (status, health) = http(port, "GET", "/health", None, "")?;
    assert_eq!(status, 200, "{health}");
    after(&before)?;

    // Reads answer at the old schema: the daemon's registry, and the CLI's cron and memory.
    let (status, listed) = http(port, "GET", "/api/devices", Some(&token), "")?;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["devices"][0]["name"], "phone", "{listed}");
    let failing = |args: &[&str]| root.warren(bin(), args).env(FAIL.0, FAIL.1).output();
    let out = failing(&["cron", "list"])?;
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(text(&out).0.contains("nightly"), "{:?}", text(&out));
    let out = failing(&["memory", "list", "--agent", "main"])?;
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(text(&out).0.contains("plan"), "{:?}", text(&out));

    // The daemon reports the stores it opened read-only (and stays up), and said so once.
    let (status, health) = http(port, "GET", "/api/health", Some(&token), "")?;
    assert_eq!(status, 200, "{health}");
    assert_eq!(health["status"], "degraded", "{health}");
    let listed_ro = health["components"]["stores"]["read_only"].to_string();
    assert_eq!(
        health["components"]["stores"]["status"], "read_only",
        "{health}"
    );
    for db in [&stores[1].1, &stores[2].1, &sessions_db] {
        assert!(listed_ro.contains(&db.display().to_string()), "{health}");
    }
    for db in [&stores[1].1, &stores[2].1, &sessions_db] {
        let needle = format!("{}: opened read-only because the migration", db.display());
        daemon.saw_or_wait_for(&needle, WAIT)?;
        let times = daemon
            .stderr_seen()
            .iter()
            .filter(|l| l.contains(&needle))
            .count();
        assert_eq!(times, 1, "{:#?}", daemon.stderr_seen());
    }

    // Writes fail naming the file, why it is read-only and what to do.
    let refused = |out: std::process::Output, db: &Path| {
        let (stdout, stderr) = text(&out);
        assert!(!out.status.success(), "{stdout}{stderr}");
        // The command's error itself (not only the log line of the open).
        let error = stderr
            .lines()
            .find(|l| l.starts_with("error:"))
            .unwrap_or_default();
        assert!(
            error.contains(&db.display().to_string())
                && error.contains("read-only because the migration from schema 0 to")
                && error.contains("writes are refused until a migration succeeds"),
            "{stderr}"
        );
    };
    refused(
        failing(&[
            "cron",
            "add",
            "hourly",
            "--agent",
            "main",
            "--every",
            "1h",
            "--message",
            "x",
        ])?,
        &stores[1].1,
    );
    refused(
        failing(&["memory", "forget", "--agent", "main", "plan"])?,
        &stores[0].1,
    );
    let id = listed["devices"][0]["id"].as_str().unwrap_or_default();
    let (status, revoked) = http(
        port,
        "DELETE",
        &format!("/api/devices/{id}"),
        Some(&token),
        "",
    )?;
    assert_eq!(status, 200, "{revoked}");
    let line = daemon.wait_for("revoked, but the registry row stays", WAIT)?;
    assert!(
        line.contains(&stores[2].1.display().to_string())
            && line.contains("read-only because the migration from schema 0 to 1"),
        "{line}"
    );
    after(&before)?;
    daemon.signal("TERM")?;
    daemon.wait(WAIT)?;

    // `warren doctor` shows each store read-only, with the failed migration.
    let out = root.run(bin(), &["--json", "doctor"])?;
    assert_eq!(out.status.code(), Some(1), "{:?}", text(&out));
    let report: serde_json::Value = serde_json::from_str(&text(&out).0)?;
    for (name, db, _) in &stores {
        let state = report["databases"]
            .as_array()
            .and_then(|all| all.iter().find(|d| d["store"] == *name))
            .cloned()
            .unwrap_or_default();
        assert_eq!(state["status"], "read-only", "{state}");
        let reason = state["read_only"].as_str().unwrap_or_default();
        assert!(
            reason.contains("migration from schema 0 to") && reason.contains(".pre-migration"),
            "{state}"
        );
        assert!(
            report["problems"]
                .as_array()
                .is_some_and(|p| p.iter().any(|p| p.as_str().is_some_and(|p| p
                    .contains(&db.display().to_string())
                    && p.contains("read-only")))),
            "{report}"
        );
    }
    let human = text(&root.run(bin(), &["doctor"])?).0;
    assert!(human.contains("read-only"), "{human}");

    // Once the migration succeeds, every store is current and writable again.
    ok(&[
        "cron",
        "add",
        "hourly",
        "--agent",
        "main",
        "--every",
        "1h",
        "--message",
        "x",
    ])?;
    ok(&["memory", "forget", "--agent", "main", "plan"])?;
    let mut daemon = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    daemon.wait_for("warren daemon ready", WAIT)?;
    daemon.signal("TERM")?;
    daemon.wait(WAIT)?;
    let out = root.run(bin(), &["doctor"])?;
    assert!(out.status.success(), "{:?}", text(&out));
    Ok(())
}
