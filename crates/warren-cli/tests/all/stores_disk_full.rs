//! A full disk under the memory, cron, control-plane and device stores reads "disk full at
//! <dir>" once, not SQLite's `disk I/O error`, and the store works again once space is freed
//! (issue 15 §8). Each store lives on a real small tmpfs, filled to the last block; the
//! session store's case is in `sessions_faults`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::{Tmpfs, bin};
use warren_testkit::{TempRoot, text};

type R = Result<(), Box<dyn std::error::Error>>;

/// A root on a 2 MiB tmpfs with one agent.
fn root_on_tmpfs() -> Result<(TempRoot, Tmpfs), Box<dyn std::error::Error>> {
    let root = TempRoot::new()?;
    let disk = Tmpfs::mount(root.path(), "2m")?;
    root.write_config("[agents.main]\n")?;
    Ok((root, disk))
}

/// `out` failed once with "disk full at <dir of db>" and none of SQLite's own words.
fn assert_disk_full(out: &Output, db: &Path) {
    let (_, stderr) = text(out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let dir = db.parent().unwrap_or(db);
    let full = format!("disk full at {}", dir.display());
    assert_eq!(stderr.matches(&full).count(), 1, "{stderr}");
    assert!(
        stderr.contains(&db.display().to_string()),
        "names the file: {stderr}"
    );
    for sqlite_words in ["disk I/O error", "database or disk is full"] {
        assert!(!stderr.contains(sqlite_words), "{stderr}");
    }
}

fn ok(out: &Output) -> String {
    let (stdout, stderr) = text(out);
    assert!(out.status.success(), "{stdout}{stderr}");
    stdout
}

fn data(root: &TempRoot) -> PathBuf {
    root.path().join("data")
}

#[test]
fn memory_store_on_a_full_disk_reads_disk_full_at_its_directory() -> R {
    let (root, disk) = root_on_tmpfs()?;
    let list = ["memory", "list", "--agent", "main"];
    ok(&root.run(bin(), &list)?);
    let db = data(&root).join("memory").join("memory.db");
    assert!(db.exists(), "the first list created the store");
    let filler = disk.fill("filler")?;

    assert_disk_full(&root.run(bin(), &list)?, &db);

    fs::remove_file(filler)?;
    ok(&root.run(bin(), &list)?);
    Ok(())
}

#[test]
fn cron_store_on_a_full_disk_reads_disk_full_at_its_directory() -> R {
    let (root, disk) = root_on_tmpfs()?;
    let add = |name: &str| {
        root.run(
            bin(),
            &[
                "cron",
                "add",
                name,
                "--agent",
                "main",
                "--every",
                "1h",
                "--message",
                "hi",
            ],
        )
    };
    ok(&add("first")?);
    let db = data(&root).join("cron").join("jobs.db");
    let filler = disk.fill("filler")?;

    assert_disk_full(&add("second")?, &db);

    fs::remove_file(filler)?;
    ok(&add("third")?);
    let listed = ok(&root.run(bin(), &["cron", "list"])?);
    assert!(
        listed.contains("first") && listed.contains("third") && !listed.contains("second"),
        "{listed}"
    );
    Ok(())
}

#[test]
fn control_plane_on_a_full_disk_reads_disk_full_at_its_directory() -> R {
    let (root, disk) = root_on_tmpfs()?;
    let db = data(&root).join("control_plane.db");
    // A run whose owner is gone (a child that has exited), as a killed daemon leaves it.
    let mut gone = std::process::Command::new("true").spawn()?;
    gone.wait()?;
    let owner = warren_store::control_plane::Owner {
        pid: gone.id(),
        ..warren_store::control_plane::Owner::current()
    };
    warren_store::control_plane::ControlPlane::open(&db)?.register(
        "cron-run-1",
        "cron",
        "main",
        "nightly",
        &owner,
    )?;
    let filler = disk.fill("filler")?;

    assert_disk_full(&root.run(bin(), &["runs", "cancel", "cron-run-1"])?, &db);

    fs::remove_file(filler)?;
    let said = ok(&root.run(bin(), &["runs", "cancel", "cron-run-1"])?);
    assert!(said.contains("marked lost"), "{said}");
    Ok(())
}

#[test]
fn device_registry_on_a_full_disk_reads_disk_full_at_its_directory() -> R {
    let (root, disk) = root_on_tmpfs()?;
    let db = data(&root).join("devices.db");
    warren_gateway::devices::Devices::open(&db)?.insert(&"ab".repeat(32), "phone")?;
    let filler = disk.fill("filler")?;

    assert_disk_full(&root.run(bin(), &["tokens", "list"])?, &db);

    fs::remove_file(filler)?;
    ok(&root.run(bin(), &["tokens", "list"])?);
    Ok(())
}
