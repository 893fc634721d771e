//! Issue 20 §3/§4 from the `warren` binary: a memory written by a real turn records who wrote
//! it (agent, channel, session, tool call, the call's signed receipt, `agent` trust) and `warren memory show` prints it;
//! an operator write through `warren memory store` is `operator` trust and a stale
//! `--expected-version` is refused naming both versions; `history` lists every kept version;
//! `undo` restores the exact earlier text (also after `forget`); and versions with their
//! provenance survive `warren agents rename`, `delete` and `restore`.

use std::fs;

use crate::common::bin;

use warren_config::InstallRoot;
use warren_testkit::{TempRoot, text};

type R = Result<(), Box<dyn std::error::Error>>;

const DEMO_KEY: &str = "demo-first-run";
const DEMO_TEXT: &str = "The operator ran the Warren demo and saw files, memory and sessions.";

fn ok(root: &TempRoot, args: &[&str]) -> Result<String, Box<dyn std::error::Error>> {
    let out = root.run(bin(), args)?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "warren {args:?} failed: {stderr}");
    Ok(stdout)
}

fn json(root: &TempRoot, args: &[&str]) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    Ok(serde_json::from_str(&ok(root, &all)?)?)
}

fn only_archive(root: &TempRoot) -> Result<String, Box<dyn std::error::Error>> {
    let names: Vec<String> = fs::read_dir(InstallRoot::at(root.path()).deleted_agents_dir())?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    match names.as_slice() {
        [one] => Ok(one.clone()),
        other => Err(format!("expected one archive, found {other:?}").into()),
    }
}

#[test]
fn provenance_history_undo_and_lifecycle_from_the_cli() -> R {
    let root = TempRoot::new()?;
    ok(&root, &["init"])?;
    // The offline demo turn stores its memory through the memory_store tool.
    ok(&root, &["agent", "-m", "hello"])?;

    let show = ok(&root, &["memory", "show", DEMO_KEY, "--agent", "main"])?;
    for line in [
        "version:  1",
        "trust:    agent",
        "by:       main",
        "channel:  cli",
        "turn in:  Agent-main-cli",
        "call:     ",
        "receipt:  wr1-",
    ] {
        assert!(show.contains(line), "{line:?} missing:\n{show}");
    }
    assert!(show.ends_with(&format!("{DEMO_TEXT}\n")), "{show}");
    // Recall's table shows each hit's version and trust too.
    let recall = ok(&root, &["memory", "recall", "--agent", "main", "demo"])?;
    let row = recall
        .lines()
        .find(|l| l.contains(DEMO_KEY))
        .ok_or_else(|| format!("no {DEMO_KEY} in:\n{recall}"))?;
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols.get(3..5), Some(&["1", "agent"][..]), "{recall}");
    let first = json(&root, &["memory", "show", DEMO_KEY, "--agent", "main"])?;
    let call = first["provenance"]["tool_call"]
        .as_str()
        .unwrap_or_default();
    assert!(!call.is_empty(), "{first}");
    // The receipt is the one the runtime signed for that call and kept in the session.
    let receipt = first["provenance"]["receipt"].as_str().unwrap_or_default();
    assert!(receipt.starts_with("wr1-"), "{first}");
    let session = ok(&root, &["sessions", "show", "Agent-main-cli"])?;
    assert!(
        session.contains(&format!("[receipt: {receipt}]")),
        "{receipt} not in the session:\n{session}"
    );

    // An operator write, compare-and-set on the version the operator read.
    let stored = ok(
        &root,
        &[
            "memory",
            "store",
            DEMO_KEY,
            "corrected by the operator",
            "--agent",
            "main",
            "--expected-version",
            "1",
        ],
    )?;
    assert!(stored.contains("as version 2"), "{stored}");
    let stale = root.run(
        bin(),
        &[
            "memory",
            "store",
            DEMO_KEY,
            "a lost update",
            "--agent",
            "main",
            "--expected-version",
            "1",
        ],
    )?;
    let (_, stderr) = text(&stale);
    assert!(!stale.status.success());
    assert!(
        stderr.contains(&format!("'{DEMO_KEY}'"))
            && stderr.contains("version 2, not the expected 1"),
        "{stderr}"
    );

    let history = ok(&root, &["memory", "history", DEMO_KEY, "--agent", "main"])?;
    let rows: Vec<&str> = history.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{history}");
    assert!(
        rows[0].starts_with("2 ") && rows[0].contains("current") && rows[0].contains("operator")
    );
    assert!(
        rows[1].starts_with("1 ")
            && rows[1].contains("replaced")
            && rows[1].contains("main via cli")
    );

    // Undo: the demo's exact text and its provenance are back, as version 3.
    let undo = ok(&root, &["memory", "undo", DEMO_KEY, "--agent", "main"])?;
    assert!(undo.contains("as version 3 (agent trust)"), "{undo}");
    let back = json(&root, &["memory", "show", DEMO_KEY, "--agent", "main"])?;
    assert_eq!(back["content"], DEMO_TEXT);
    assert_eq!(back["provenance"], first["provenance"]);
    // --to picks any kept version.
    ok(
        &root,
        &["memory", "undo", DEMO_KEY, "--agent", "main", "--to", "2"],
    )?;
    let now = json(&root, &["memory", "show", DEMO_KEY, "--agent", "main"])?;
    assert_eq!(now["content"], "corrected by the operator");
    assert_eq!(now["provenance"]["trust"], "operator");

    // Forget, then undo brings it back.
    ok(&root, &["memory", "forget", DEMO_KEY, "--agent", "main"])?;
    let gone = root.run(bin(), &["memory", "show", DEMO_KEY, "--agent", "main"])?;
    assert!(!gone.status.success());
    ok(&root, &["memory", "undo", DEMO_KEY, "--agent", "main"])?;
    let again = json(&root, &["memory", "show", DEMO_KEY, "--agent", "main"])?;
    assert_eq!(again["content"], "corrected by the operator");
    assert_eq!(again["version"], 5);

    // Rename, delete and restore: every version and its provenance come along.
    let before = json(&root, &["memory", "history", DEMO_KEY, "--agent", "main"])?;
    assert_eq!(before.as_array().map(Vec::len), Some(5), "{before}");
    ok(&root, &["agents", "add", "spare"])?;
    ok(&root, &["agents", "rename", "main", "chief"])?;
    let renamed = json(&root, &["memory", "history", DEMO_KEY, "--agent", "chief"])?;
    ok(&root, &["agents", "delete", "chief", "--yes"])?;
    ok(&root, &["agents", "restore", &only_archive(&root)?])?;
    let restored = json(&root, &["memory", "history", DEMO_KEY, "--agent", "chief"])?;
    let strip = |v: &serde_json::Value| -> Vec<serde_json::Value> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .map(|x| {
                        serde_json::json!([x["version"], x["state"], x["content"], x["provenance"]])
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(strip(&renamed), strip(&before));
    assert_eq!(strip(&restored), strip(&before));
    // The demo's own version (1) still names the turn that wrote it.
    let v1 = restored
        .as_array()
        .and_then(|a| a.iter().find(|x| x["version"] == 1))
        .ok_or("version 1 lost")?;
    assert_eq!(v1["provenance"]["tool_call"].as_str(), Some(call));
    assert_eq!(v1["provenance"]["channel"], "cli");
    Ok(())
}

/// Eight `warren memory store --expected-version 1` processes started together on one key:
/// exactly one wins, the others exit non-zero with the conflict, and nothing is lost.
#[test]
fn racing_cli_processes_with_the_same_expected_version_exactly_one_wins() -> R {
    let root = TempRoot::new()?;
    ok(&root, &["init"])?;
    ok(&root, &["memory", "store", "--agent", "main", "k", "base"])?;
    let mut children = Vec::new();
    for i in 0..8 {
        let content = format!("writer {i}");
        children.push(
            root.warren(
                bin(),
                &[
                    "memory",
                    "store",
                    "--agent",
                    "main",
                    "k",
                    &content,
                    "--expected-version",
                    "1",
                ],
            )
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()?,
        );
    }
    let mut winners = Vec::new();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output()?;
        let (stdout, stderr) = text(&out);
        if out.status.success() {
            assert!(stdout.contains("as version 2"), "{stdout}");
            winners.push(i);
        } else {
            assert!(
                stderr.contains("version 2, not the expected 1"),
                "writer {i}: {stderr}"
            );
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    let now = json(&root, &["memory", "show", "k", "--agent", "main"])?;
    assert_eq!(now["content"], format!("writer {}", winners[0]));
    let history = json(&root, &["memory", "history", "k", "--agent", "main"])?;
    assert_eq!(history.as_array().map(Vec::len), Some(2), "{history}");
    Ok(())
}

/// A `warren memory store|forget|undo` child killed between archiving the replaced version and
/// changing the live row leaves the key exactly as it was (one transaction): same live text and
/// version, same history; the next write then works.
#[test]
fn a_kill_between_archive_and_write_leaves_the_key_as_it_was() -> R {
    use warren_memory::VERSION_CRASH_POINTS;
    use warren_testkit::run_until_crash;
    let args: [&[&str]; 3] = [
        &["memory", "store", "--agent", "main", "k", "the new text"],
        &["memory", "forget", "--agent", "main", "k"],
        &["memory", "undo", "--agent", "main", "k"],
    ];
    for (point, args) in VERSION_CRASH_POINTS.iter().zip(args) {
        let root = TempRoot::new()?;
        ok(&root, &["init"])?;
        ok(&root, &["memory", "store", "--agent", "main", "k", "first"])?;
        ok(
            &root,
            &["memory", "store", "--agent", "main", "k", "second"],
        )?;
        let before = json(&root, &["memory", "history", "k", "--agent", "main"])?;
        run_until_crash(root.warren(bin(), args), point)?;
        let after = json(&root, &["memory", "history", "k", "--agent", "main"])?;
        assert_eq!(after, before, "{point}");
        let live = json(&root, &["memory", "show", "k", "--agent", "main"])?;
        assert_eq!(
            (&live["content"], &live["version"]),
            (&"second".into(), &2.into())
        );
        let again = root.run(bin(), args)?;
        assert!(again.status.success(), "{point}: {}", text(&again).1);
    }
    Ok(())
}
