//! A store that cannot open stops only what needs it (issue 36 §1, §2), as an operator sees it
//! with a real daemon: a damaged `data/memory/memory.db`, `data/control_plane.db`,
//! `data/sessions.db`, ... is reported by name, file and error in `/api/health` (`degraded`),
//! in `warren status` and in `warren doctor`; the daemon starts and chats; the damaged file is
//! never rewritten; a damaged control plane is named as the scheduler's cause (not
//! `[cron] enabled = false`) in health, in `cron add`'s error and in `warren status`.

use std::fs;
use std::path::{Path, PathBuf};

use crate::common::{bin, fake_config, paired_daemon};
use warren_testkit::fake_llm::{FakeOpenAi, FakeReply};
use warren_testkit::{DaemonChild, TempRoot, free_port, http, text};

type R = Result<(), Box<dyn std::error::Error>>;

/// Bytes no SQLite reads as a database.
fn garbage() -> Vec<u8> {
    b"this is not a database, it was damaged on purpose\n".repeat(200)
}

/// Writes the damaged file (parents created) and returns its bytes.
fn damage(path: &Path) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    let bytes = garbage();
    fs::write(path, &bytes)?;
    Ok(bytes)
}

/// A paired daemon on the fake LLM, started with some store files damaged.
struct Damaged {
    root: TempRoot,
    fake: FakeOpenAi,
    port: u16,
    daemon: DaemonChild,
    token: String,
    /// The damaged files' bytes, in the order given.
    before: Vec<Vec<u8>>,
}

/// A daemon on the fake LLM with the files `damaged` (relative to the root) damaged before it
/// starts.
fn daemon_with_damaged(damaged: &[PathBuf]) -> Result<Damaged, Box<dyn std::error::Error>> {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    root.write_config(&fake_config(&fake, "sk-test", port, "", ""))?;
    let out = root.run(bin(), &["init"])?;
    assert!(out.status.success(), "{:?}", text(&out));
    let mut before = Vec::new();
    for path in damaged {
        before.push(damage(&path_in(&root, path))?);
    }
    let (daemon, token) = paired_daemon(&root, port, "ops")?;
    Ok(Damaged {
        root,
        fake,
        port,
        daemon,
        token,
        before,
    })
}

fn path_in(root: &TempRoot, rel: &Path) -> PathBuf {
    root.path().join(rel)
}

/// The `components.stores.degraded` entry of `store` in a health answer.
fn degraded<'a>(health: &'a serde_json::Value, store: &str) -> Option<&'a serde_json::Value> {
    health["components"]["stores"]["degraded"]
        .as_array()?
        .iter()
        .find(|f| f["store"] == store)
}

fn chat_works(fake: &FakeOpenAi, port: u16, token: &str) -> R {
    fake.push(FakeReply::text("still here"));
    let (status, body) = http(
        port,
        "POST",
        "/api/agents/main/chat",
        Some(token),
        r#"{"message": "hello", "session": "web"}"#,
    )?;
    assert_eq!(status, 200, "the chat works: {body}");
    assert!(body.to_string().contains("still here"), "{body}");
    Ok(())
}

#[test]
fn a_damaged_memory_store_stops_only_memory_and_is_reported_everywhere_issue36() -> R {
    let rel = PathBuf::from("data/memory/memory.db");
    let Damaged {
        root,
        fake,
        port,
        mut daemon,
        token,
        before,
    } = daemon_with_damaged(std::slice::from_ref(&rel))?;
    let file = path_in(&root, &rel);
    chat_works(&fake, port, &token)?;

    let (status, health) = http(port, "GET", "/api/health", Some(&token), "")?;
    assert_eq!(status, 200, "{health}");
    assert_eq!(health["status"], "degraded", "{health}");
    let fault = degraded(&health, "memory").ok_or_else(|| format!("no memory fault: {health}"))?;
    assert_eq!(fault["file"], file.display().to_string(), "{health}");
    assert!(
        fault["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{health}"
    );

    let out = root.run(bin(), &["status"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains("degraded")
            && stdout.contains("memory")
            && stdout.contains(&file.display().to_string()),
        "warren status names the store and its file: {stdout}"
    );
    let out = root.run(bin(), &["doctor"])?;
    let (stdout, stderr) = text(&out);
    assert!(
        format!("{stdout}{stderr}").contains(&format!("store memory ({})", file.display())),
        "warren doctor names the store and its file: {stdout}{stderr}"
    );

    daemon.signal("TERM")?;
    daemon.wait(std::time::Duration::from_secs(20))?;
    assert_eq!(
        fs::read(&file)?,
        before[0],
        "the damaged file is never rewritten"
    );
    Ok(())
}

#[test]
fn a_damaged_control_plane_is_named_as_the_schedulers_cause_not_cron_disabled_issue36() -> R {
    let rel = PathBuf::from("data/control_plane.db");
    let Damaged {
        root,
        fake,
        port,
        mut daemon,
        token,
        before,
    } = daemon_with_damaged(std::slice::from_ref(&rel))?;
    let file = path_in(&root, &rel);
    chat_works(&fake, port, &token)?;

    let (_, health) = http(port, "GET", "/api/health", Some(&token), "")?;
    assert_eq!(health["status"], "degraded", "{health}");
    let cron = &health["components"]["cron"];
    assert_eq!(cron["status"], "error", "{health}");
    assert!(
        cron["error"]
            .as_str()
            .is_some_and(|e| e.contains(&file.display().to_string())),
        "the scheduler's real cause: {health}"
    );
    assert!(degraded(&health, "control_plane").is_some(), "{health}");

    let out = root.run(
        bin(),
        &[
            "cron",
            "add",
            "nightly",
            "--agent",
            "main",
            "--every",
            "1h",
            "--message",
            "hi",
        ],
    )?;
    let (stdout, stderr) = text(&out);
    let said = format!("{stdout}{stderr}");
    assert!(
        !said.contains("enabled = false"),
        "blames the setting: {said}"
    );
    assert!(
        said.contains(&file.display().to_string()),
        "names the file: {said}"
    );

    let out = root.run(bin(), &["status"])?;
    let (stdout, _) = text(&out);
    assert!(
        stdout.contains("control_plane") && stdout.contains(&file.display().to_string()),
        "warren status names the store: {stdout}"
    );

    daemon.signal("TERM")?;
    daemon.wait(std::time::Duration::from_secs(20))?;
    assert_eq!(
        fs::read(&file)?,
        before[0],
        "the damaged file is never rewritten"
    );
    Ok(())
}

/// The session, ACP session, cron and SOP run stores damaged at once: each is named, the daemon still
/// starts and answers, and no file is rewritten.
#[test]
fn every_damaged_store_is_named_in_health_and_left_as_it_was_issue36() -> R {
    let rels = [
        ("sessions", PathBuf::from("data/sessions/sessions.db")),
        (
            "acp_sessions",
            PathBuf::from("data/sessions/acp-sessions.db"),
        ),
        ("cron", PathBuf::from("data/cron/jobs.db")),
        ("sop_runs", PathBuf::from("data/sop/runs.db")),
    ];
    let paths: Vec<PathBuf> = rels.iter().map(|(_, p)| p.clone()).collect();
    let Damaged {
        root,
        port,
        mut daemon,
        token,
        before,
        ..
    } = daemon_with_damaged(&paths)?;
    let (status, health) = http(port, "GET", "/api/health", Some(&token), "")?;
    assert_eq!(status, 200, "{health}");
    assert_eq!(health["status"], "degraded", "{health}");
    for (store, rel) in &rels {
        let fault =
            degraded(&health, store).ok_or_else(|| format!("no {store} fault: {health}"))?;
        assert_eq!(
            fault["file"],
            path_in(&root, rel).display().to_string(),
            "{health}"
        );
    }
    daemon.signal("TERM")?;
    daemon.wait(std::time::Duration::from_secs(20))?;
    for ((_, rel), bytes) in rels.iter().zip(before) {
        assert_eq!(
            fs::read(path_in(&root, rel))?,
            bytes,
            "{} rewritten",
            rel.display()
        );
    }
    Ok(())
}
