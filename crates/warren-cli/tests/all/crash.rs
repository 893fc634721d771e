//! Crash safety of config saves (CFG-4, CFG-5): a real `warren config set` child aborts at each
//! named failpoint of the save; what survives on disk must parse and be either the old or the
//! new content, never torn or empty, and a fresh process must read a consistent value.

use crate::common::bin;
use std::fs;

use pretty_assertions::assert_eq;
use warren_config::failpoint::{CONFIG_DIR_SYNC_ERROR, CONFIG_SAVE};
use warren_testkit::{TempRoot, run_until_crash, text};

type R = Result<(), Box<dyn std::error::Error>>;

const OLD: &str = "# keep me\n[agents.main]\nmodel = \"m\"\n\n[gateway]\nport = 1111 # ops\n";

#[test]
fn a_crash_at_any_save_step_leaves_old_or_new_never_torn() -> R {
    let new = OLD.replace("port = 1111", "port = 2222");
    for (step, failpoint) in CONFIG_SAVE.iter().enumerate() {
        let root = TempRoot::new()?;
        root.write_config(OLD)?;
        let cmd = root.warren(bin(), &["config", "set", "gateway.port", "2222"]);
        run_until_crash(cmd, failpoint)?;

        let on_disk = root.read_config()?;
        let renamed = step >= 2; // after-rename and after-dir-sync
        assert_eq!(
            on_disk,
            if renamed {
                new.clone()
            } else {
                OLD.to_string()
            },
            "after crash at {failpoint}"
        );
        if renamed {
            assert_eq!(
                fs::read_to_string(root.path().join("config.toml.bak"))?,
                OLD,
                "{failpoint}: .bak keeps the old file"
            );
        }

        // A fresh process (what a reload does) sees one consistent value.
        let out = root.run(bin(), &["config", "get", "gateway.port"])?;
        let (stdout, stderr) = text(&out);
        assert!(
            out.status.success(),
            "{failpoint}: config unreadable after crash: {stderr}"
        );
        assert_eq!(
            stdout.trim(),
            if renamed { "2222" } else { "1111" },
            "{failpoint}"
        );

        // The crashed writer's lock died with it, and its temp file is swept by the next save.
        let out = root.run(bin(), &["config", "set", "gateway.port", "3333"])?;
        assert!(
            out.status.success(),
            "{failpoint}: next save failed: {}",
            text(&out).1
        );
        let leftovers: Vec<_> = fs::read_dir(root.path())?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp-"))
            .collect();
        assert_eq!(
            leftovers,
            Vec::<String>::new(),
            "{failpoint}: temp files left"
        );
        assert_eq!(
            root.read_config()?,
            OLD.replace("port = 1111", "port = 3333")
        );
    }
    Ok(())
}

#[test]
fn a_failed_directory_sync_after_the_rename_still_succeeds_with_a_warning_cfg5() -> R {
    let root = TempRoot::new()?;
    root.write_config(OLD)?;
    let out = root
        .warren(bin(), &["config", "set", "gateway.port", "2222"])
        .env("FAILPOINTS", format!("{CONFIG_DIR_SYNC_ERROR}=return"))
        .output()?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("set gateway.port = 2222"), "{stdout}");
    assert!(
        stderr.contains("warning:") && stderr.contains("could not be synced"),
        "{stderr}"
    );
    assert_eq!(
        root.read_config()?,
        OLD.replace("port = 1111", "port = 2222")
    );
    assert_eq!(
        fs::read_to_string(root.path().join("config.toml.bak"))?,
        OLD,
        ".bak kept for recovery"
    );
    Ok(())
}
