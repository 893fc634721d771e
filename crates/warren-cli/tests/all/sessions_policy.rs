//! `[channels] session_store_on_error` (MIG-7 [decision]) through the real `warren` binary:
//! `stop` fails the command naming the files at fault, `ephemeral` runs without persistence
//! and says so loudly, and a bad value is rejected naming the key.

#![allow(clippy::unwrap_used)]

use crate::common::bin;

use warren_testkit::{TempRoot, text};

type R = Result<(), Box<dyn std::error::Error>>;

/// A live JSONL file next to its staged import: the session store cannot be built.
fn broken(root: &TempRoot, policy: &str) -> R {
    root.write_config(&format!(
        "[agents.main]\n\n[channels]\nsession_store_on_error = \"{policy}\"\n"
    ))?;
    warren_testkit::unbuildable_sessions(&root.path().join("data").join("sessions"))?;
    Ok(())
}

#[test]
fn stop_fails_the_command_naming_both_files_mig7() -> R {
    let root = TempRoot::new()?;
    broken(&root, "stop")?;
    let out = root.run(bin(), &["sessions", "list"])?;
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(
        stderr.contains("k.jsonl.importing") && stderr.contains("k.jsonl"),
        "{stderr}"
    );
    Ok(())
}

#[test]
fn ephemeral_runs_without_persistence_and_warns_mig7() -> R {
    let root = TempRoot::new()?;
    broken(&root, "ephemeral")?;
    let out = root.run(bin(), &["sessions", "append", "fresh", "hello"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stderr.contains("session persistence is off"), "{stderr}");
    // Nothing was persisted: the next command does not see the message.
    let out = root.run(bin(), &["--json", "sessions", "list"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(!stdout.contains("fresh"), "{stdout}");
    // The sources are untouched.
    let dir = root.path().join("data").join("sessions");
    assert!(dir.join("k.jsonl").exists() && dir.join("k.jsonl.importing").exists());
    Ok(())
}

#[test]
fn an_unknown_policy_is_rejected_naming_the_key_mig7() -> R {
    let root = TempRoot::new()?;
    root.write_config("[agents.main]\n\n[channels]\nsession_store_on_error = \"ignore\"\n")?;
    let out = root.run(bin(), &["sessions", "list"])?;
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(
        stderr.contains("channels.session_store_on_error"),
        "{stderr}"
    );
    assert!(
        stderr.contains("ephemeral") || stderr.contains("stop"),
        "{stderr}"
    );
    Ok(())
}
