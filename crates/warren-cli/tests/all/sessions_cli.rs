//! `warren sessions list|show|search|delete` as a user runs them (SESS-1): JSON output, agent
//! guard on delete, one-line errors.

use crate::common::bin;

use pretty_assertions::assert_eq;
use warren_testkit::{TempRoot, text};

type R = Result<(), Box<dyn std::error::Error>>;

fn json(root: &TempRoot, args: &[&str]) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = root.run(bin(), &all)?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{args:?}: {stderr}");
    Ok(serde_json::from_str(&stdout)?)
}

#[test]
fn list_show_search_and_guarded_delete_sess1() -> R {
    let root = TempRoot::new()?;
    for (key, agent, text) in [
        ("standup", "main", "deploy the \"blue\" build"),
        ("standup", "main", "done"),
        ("research", "ops", "read the paper"),
    ] {
        json(&root, &["sessions", "append", key, "--agent", agent, text])?;
    }
    let list = json(&root, &["sessions", "list"])?;
    let mut keys: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["key"].as_str().unwrap())
        .collect();
    keys.sort();
    assert_eq!(keys, ["research", "standup"]);

    let show = json(&root, &["sessions", "show", "standup", "--last", "1"])?;
    assert_eq!(show["session"]["message_count"], 2);
    assert_eq!(show["session"]["agent"], "main");
    assert_eq!(show["messages"][0]["content"], "done");

    let hits = json(&root, &["sessions", "search", "\"blue"])?;
    assert_eq!(hits[0]["key"], "standup");

    let out = root.run(bin(), &["sessions", "delete", "standup", "--agent", "ops"])?;
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("belongs to agent 'main', not 'ops'"),
        "{stderr}"
    );

    json(&root, &["sessions", "delete", "standup", "--agent", "main"])?;
    let out = root.run(bin(), &["sessions", "show", "standup"])?;
    assert!(!out.status.success());
    assert!(text(&out).1.contains("session 'standup' does not exist"));
    Ok(())
}

#[test]
fn a_dry_run_reports_and_changes_nothing() -> R {
    let root = TempRoot::new()?;
    let dir = root.path().join("data").join("sessions");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(
        dir.join("old.jsonl"),
        "{\"role\":\"user\",\"content\":\"hi\"}\n",
    )?;
    let out = root.run(bin(), &["sessions", "migrate", "--dry-run"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("would import old.jsonl -> session old (1 messages"),
        "{stdout}"
    );
    assert!(stderr.contains("1/1 files"), "progress line: {stderr}");
    assert!(dir.join("old.jsonl").exists());
    assert!(!dir.join("sessions.db").exists());
    Ok(())
}
