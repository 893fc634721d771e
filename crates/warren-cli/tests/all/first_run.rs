//! Issue 16 §1 and §7: the first run from a script. `warren init && warren agent -m hello`
//! without a terminal shows the runtime working under the starter risk profile (own-workspace
//! writes and own memory run without asking), its narration is separated around tool calls,
//! and a call that still needs approval fails at once with a message naming the way out.

use crate::common::bin;
use std::time::{Duration, Instant};

use serde_json::json;
use warren_testkit::fake_llm::{FakeCall, FakeOpenAi, FakeReply};
use warren_testkit::{TempRoot, text};

type R = Result<(), Box<dyn std::error::Error>>;

const NEEDS_APPROVAL: &str = "needs approval: rerun in a terminal, or allow it in the profile";

/// The starter config unchanged, stdin not a terminal: the demo writes welcome.md, reads it
/// back, stores its memory, and its closing words are true. Text before and after each tool
/// call is on its own line.
#[test]
fn the_offline_demo_works_from_a_script_issue16() -> R {
    let root = TempRoot::new()?;
    let init = root.run(bin(), &["init"])?;
    assert!(init.status.success(), "{}", text(&init).1);
    let out = root.run(bin(), &["agent", "-m", "hello"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    for tool in ["file_write", "file_read", "memory_store"] {
        assert!(stderr.contains(&format!("✓ {tool}")), "{tool}: {stderr}");
    }
    assert!(!stderr.contains("✗"), "{stderr}");
    let welcome = std::fs::read_to_string(root.path().join("agents/main/workspace/welcome.md"))?;
    assert!(welcome.starts_with("# Welcome to Warren"), "{welcome}");
    let memory = root.run(bin(), &["memory", "list"])?;
    assert!(text(&memory).0.contains("demo-first-run"));
    assert!(
        stdout.contains("Done. I wrote welcome.md, read it back and stored a memory"),
        "{stdout}"
    );
    // §7: narration around tool calls does not run together.
    assert!(
        stdout.contains(
            "in my workspace.\nNow I'll read it back.\nAnd I'll remember that we met.\nDone."
        ),
        "{stdout}"
    );
    Ok(())
}

/// Under the starter profile a write into a SIBLING workspace still asks; with no terminal
/// it fails at once (not after the 120 s approval timeout) naming the way out, while the
/// own-workspace write and the own memory in the same turn run.
#[test]
fn a_call_needing_approval_without_a_terminal_fails_at_once_issue16() -> R {
    let root = TempRoot::new()?;
    let init = root.run(bin(), &["init"])?;
    assert!(init.status.success(), "{}", text(&init).1);
    let fake = FakeOpenAi::start()?;
    let sibling = root.path().join("agents/bee/workspace/stolen.md");
    let config = root
        .read_config()?
        .replace("provider = \"demo\"", "provider = \"fake\"")
        .replace("model = \"demo\"", "model = \"gpt-test\"")
        + &format!(
            "\n{}\n\n[agents.bee]\nprovider = \"fake\"\nmodel = \"gpt-test\"\n\n\
             [agents.main.workspace.access]\nbee = \"ReadWrite\"\n",
            fake.provider_toml("fake", "sk-test")
        );
    root.write_config(&config)?;
    std::fs::create_dir_all(sibling.parent().ok_or("no parent")?)?;
    fake.push(FakeReply::calls(
        "Writing.",
        vec![
            FakeCall::new(
                "c1",
                "file_write",
                json!({"path": "mine.md", "content": "own\n"}),
            ),
            FakeCall::new(
                "c2",
                "file_write",
                json!({"path": sibling.to_str().ok_or("path")?, "content": "x\n"}),
            ),
            FakeCall::new(
                "c3",
                "memory_store",
                json!({"key": "k", "content": "remembered", "category": "core"}),
            ),
        ],
    ));
    fake.push(FakeReply::text("Finished."));
    let started = Instant::now();
    let out = root.run(bin(), &["agent", "-m", "go"])?;
    let took = started.elapsed();
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(took < Duration::from_secs(30), "took {took:?}");
    assert!(stderr.contains("✓ file_write"), "{stderr}");
    assert!(stderr.contains("✓ memory_store"), "{stderr}");
    assert!(
        stderr.contains(&format!("✗ file_write: Error: {NEEDS_APPROVAL}")),
        "{stderr}"
    );
    assert!(root.path().join("agents/main/workspace/mine.md").is_file());
    assert!(!sibling.exists(), "the sibling write ran unapproved");
    Ok(())
}

/// §7: a delete whose archive cannot be written says so (it used to print "archived:  ->
/// PATH" as if it had archived) and exits non-zero; `warren agents resume` finishes it once
/// the cause is gone.
#[test]
fn a_delete_whose_archive_failed_says_what_happened_issue16() -> R {
    let root = TempRoot::new()?;
    let init = root.run(bin(), &["init"])?;
    assert!(init.status.success(), "{}", text(&init).1);
    let config = root.read_config()? + "\n[agents.bee]\nprovider = \"demo\"\nmodel = \"demo\"\n";
    root.write_config(&config)?;
    // The archive directory's parent is a file: the archive cannot be created.
    let deleted = root.path().join("data/agents/_deleted");
    std::fs::create_dir_all(deleted.parent().ok_or("no parent")?)?;
    std::fs::write(&deleted, "not a directory")?;
    let out = root.run(bin(), &["agents", "delete", "bee", "--yes"])?;
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(!stdout.contains("archived:"), "{stdout}");
    assert!(
        stdout.contains("deleted agent 'bee' from the config")
            && stdout.contains("archiving its data did not finish (nothing archived yet")
            && stdout.contains("warren agents resume"),
        "{stdout}"
    );
    assert!(stderr.contains("cannot create the archive"), "{stderr}");
    std::fs::remove_file(&deleted)?;
    let out = root.run(bin(), &["agents", "resume"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains("deleted agent 'bee'") && stdout.contains("archived: "),
        "{stdout}"
    );
    Ok(())
}
