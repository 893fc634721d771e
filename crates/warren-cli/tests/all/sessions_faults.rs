//! Sessions under bad input and a full disk, as a user sees them (issue 15 items 7 and 8):
//! - one bad legacy JSONL file (MIG-5) is a warning naming it and what to do, and every other
//!   session command (and `warren agent`) keeps working; a symlinked `.jsonl` is never
//!   followed and the migration's progress line never passes 100 %; the daemon chats on, and
//!   says so in `/api/health` and its log;
//! - a full disk during a JSONL append reads once (not doubled) and leaves no partial line.

use crate::common::{Tmpfs, bin, fake_config, paired_daemon};
use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use warren_testkit::fake_llm::{FakeOpenAi, FakeReply};
use warren_testkit::{TempRoot, free_port, http, text};

type R = Result<(), Box<dyn std::error::Error>>;

fn sessions_dir(root: &TempRoot) -> PathBuf {
    root.path().join("data").join("sessions")
}

const JUNK: &str = "this is not json\n{\"role\":\"robot\",\"content\":\"x\"}\n";

#[test]
fn one_bad_legacy_file_is_a_warning_and_every_other_session_command_works_mig5() -> R {
    let root = TempRoot::new()?;
    let out = root.run(bin(), &["init"])?;
    assert!(out.status.success(), "{:?}", text(&out));
    let dir = sessions_dir(&root);
    fs::create_dir_all(&dir)?;
    fs::write(
        dir.join("old.jsonl"),
        "{\"role\":\"user\",\"content\":\"from the old days\"}\n",
    )?;
    let junk = dir.join("junk.jsonl");
    fs::write(&junk, JUNK)?;
    let warning = format!(
        "warning: {} is not empty but holds no valid message",
        junk.display()
    );

    let out = root.run(bin(), &["sessions", "list"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "sessions list must work: {stderr}");
    assert!(stdout.contains("old"), "{stdout}");
    assert!(
        stderr.contains(&warning) && stderr.contains("warren sessions migrate"),
        "the bad file is named with what to do: {stderr}"
    );

    let out = root.run(bin(), &["sessions", "show", "old"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "sessions show must work: {stderr}");
    assert!(stdout.contains("from the old days"), "{stdout}");
    assert!(stderr.contains(&warning), "{stderr}");

    let out = root.run(bin(), &["agent", "-m", "hello"])?;
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "warren agent must work: {stderr}");
    assert!(
        stderr.contains(&junk.display().to_string()),
        "warren agent reports the bad file too: {stderr}"
    );
    assert_eq!(
        fs::read_to_string(&junk)?,
        JUNK,
        "the bad file is left as it was"
    );
    Ok(())
}

/// Issue 15 §7 in the daemon: with a bad legacy file beside a good one, the daemon's chat
/// works, `/api/health` names the file and what to do (sessions "warning", not an error), and
/// the log says it too; the file is left as it was.
#[test]
fn a_bad_legacy_file_leaves_the_daemon_chatting_and_is_reported_in_health_and_log_mig5() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let port = free_port()?;
    root.write_config(&fake_config(&fake, "sk-test", port, "", ""))?;
    let dir = sessions_dir(&root);
    fs::create_dir_all(&dir)?;
    fs::write(
        dir.join("old.jsonl"),
        "{\"role\":\"user\",\"content\":\"from the old days\"}\n",
    )?;
    let junk = dir.join("junk.jsonl");
    fs::write(&junk, JUNK)?;
    let (mut daemon, token) = paired_daemon(&root, port, "ci")?;
    let token = Some(token.as_str());

    fake.push(FakeReply::text("hello back"));
    let (status, body) = http(
        port,
        "POST",
        "/api/agents/main/chat",
        token,
        r#"{"message": "hello", "session": "web"}"#,
    )?;
    assert_eq!(status, 200, "the daemon's chat works: {body}");
    assert!(body.to_string().contains("hello back"), "{body}");

    let (status, health) = http(port, "GET", "/api/health", token, "")?;
    assert_eq!(status, 200, "{health}");
    let sessions = &health["components"]["sessions"];
    assert_eq!(sessions["status"], "warning", "{health}");
    let reported = sessions["legacy_files_not_imported"].to_string();
    assert!(
        reported.contains(&junk.display().to_string())
            && reported.contains("holds no valid message")
            && reported.contains("warren sessions migrate"),
        "the file and what to do: {health}"
    );
    let logged = daemon.saw_or_wait_for("holds no valid message", Duration::from_secs(20))?;
    assert!(
        logged.contains(&junk.display().to_string()) && logged.contains("WARN"),
        "{logged}"
    );
    let (status, listed) = http(port, "GET", "/api/agents/main/sessions", token, "")?;
    assert_eq!(status, 200, "{listed}");
    assert!(listed.to_string().contains("\"web\""), "{listed}");
    assert_eq!(
        fs::read_to_string(&junk)?,
        JUNK,
        "the bad file is left as it was"
    );
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(20))?;
    Ok(())
}

#[test]
fn migrate_never_follows_a_symlinked_jsonl_and_its_progress_stays_at_most_100_percent_mig1() -> R {
    let root = TempRoot::new()?;
    let dir = sessions_dir(&root);
    fs::create_dir_all(&dir)?;
    let outside = root.path().join("not-a-session.txt");
    let secret = "{\"role\":\"user\",\"content\":\"outside the sessions directory\"}\n".repeat(500);
    fs::write(&outside, &secret)?;
    std::os::unix::fs::symlink(&outside, dir.join("evil.jsonl"))?;
    fs::write(
        dir.join("good.jsonl"),
        "{\"role\":\"user\",\"content\":\"hi\"}\n",
    )?;

    let out = root.run(bin(), &["sessions", "migrate"])?;
    let (stdout, stderr) = text(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "the symlink is an error: {stdout}{stderr}"
    );
    assert!(
        stderr.contains("evil.jsonl") && stderr.contains("symlink"),
        "{stderr}"
    );
    let percents: Vec<u64> = stderr
        .split('%')
        .filter_map(|before| before.rsplit(['[', ']', ' ']).next()?.parse().ok())
        .collect();
    assert!(!percents.is_empty(), "a progress line is printed: {stderr}");
    assert!(
        percents.iter().all(|p| *p <= 100),
        "progress past 100 %: {percents:?} in {stderr}"
    );
    assert!(stdout.contains("imported good.jsonl"), "{stdout}");

    let out = root.run(bin(), &["--json", "sessions", "list"])?;
    let listed: serde_json::Value = serde_json::from_str(&text(&out).0)?;
    let keys: Vec<&str> = listed
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["key"].as_str())
        .collect();
    assert_eq!(keys, ["good"], "the link's target was not imported");
    assert_eq!(fs::read_to_string(&outside)?, secret);
    Ok(())
}

/// Failpoint (warren_store::failpoints) that makes a JSONL append write half its line and then
/// fail with ENOSPC, as a full disk does.
const JSONL_APPEND_DISK_FULL: &str = "sessions-jsonl-append-enospc";

fn append(
    root: &TempRoot,
    text_: &str,
    failpoint: Option<&str>,
) -> std::io::Result<std::process::Output> {
    let mut cmd = root.warren(
        bin(),
        &["sessions", "append", "notes", "--agent", "main", text_],
    );
    if let Some(fp) = failpoint {
        cmd.env("FAILPOINTS", format!("{fp}=return"));
    }
    cmd.stdin(std::process::Stdio::null()).output()
}

#[test]
fn a_full_disk_during_a_jsonl_append_reads_once_and_leaves_no_partial_line() -> R {
    let root = TempRoot::new()?;
    root.write_config("[agents.main]\n\n[channels]\nsession_backend = \"jsonl\"\n")?;
    let out = append(&root, "first", None)?;
    assert!(out.status.success(), "{:?}", text(&out));
    let file = sessions_dir(&root).join("notes.jsonl");
    let before = fs::read(&file)?;

    let out = append(
        &root,
        "second, on a full disk",
        Some(JSONL_APPEND_DISK_FULL),
    )?;
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.matches("No space left on device").count(),
        1,
        "the cause reads once: {stderr}"
    );
    assert!(
        stderr.contains(&file.display().to_string()),
        "names the file: {stderr}"
    );
    assert_eq!(fs::read(&file)?, before, "no partial line stays behind");

    let out = append(&root, "third", None)?;
    assert!(out.status.success(), "{:?}", text(&out));
    let out = root.run(bin(), &["sessions", "show", "notes"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        !stderr.contains("skipped"),
        "no torn line to skip: {stderr}"
    );
    let said: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.split("user (main): ").nth(1))
        .collect();
    assert_eq!(said, ["first", "third"], "{stdout}");
    Ok(())
}

/// On a really full disk (a small tmpfs), a SQLite session write says "disk full at <dir>"
/// once — not SQLite's `disk I/O error` — while `sessions list` and `sessions show` keep
/// working (the store opens read-only); once space is freed, writes work again and nothing
/// was lost (issue 15 §8).
#[test]
fn a_full_disk_reads_disk_full_and_read_only_session_commands_keep_working() -> R {
    let root = TempRoot::new()?;
    let disk = Tmpfs::mount(root.path(), "2m")?;
    root.write_config("[agents.main]\n")?;
    let out = append(&root, "first", None)?;
    assert!(out.status.success(), "{:?}", text(&out));
    let filler = disk.fill("filler")?;
    let dir = sessions_dir(&root);

    let out = append(&root, "second, on a full disk", None)?;
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let full = format!("disk full at {}", dir.display());
    assert_eq!(stderr.matches(&full).count(), 1, "{stderr}");
    assert!(!stderr.contains("disk I/O error"), "{stderr}");

    let out = root.run(bin(), &["sessions", "list"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "list works on a full disk: {stderr}");
    assert!(stdout.contains("notes"), "{stdout}");
    assert!(stderr.contains(&full), "the user is told why: {stderr}");
    let out = root.run(bin(), &["sessions", "show", "notes"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "show works on a full disk: {stderr}");
    assert!(stdout.contains("user (main): first"), "{stdout}");

    fs::remove_file(filler)?;
    let out = append(&root, "third", None)?;
    assert!(out.status.success(), "{:?}", text(&out));
    let out = root.run(bin(), &["sessions", "show", "notes"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let said: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.split("user (main): ").nth(1))
        .collect();
    assert_eq!(said, ["first", "third"], "{stdout}");
    drop(disk);
    Ok(())
}
