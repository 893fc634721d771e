//! Issue 35 §2, performed for real as root: a hand-edited backup whose manifest lists
//! `x -> <outside>` as a symbolic link, then `x` again as a world-writable directory and a file
//! `x/planted` (each stored under `files/`, so every digest checks). The restore loop before
//! the fix (paths joined under the target, `std::fs`) creates `planted` outside the target and
//! chmods the outside directory to 0777; with the guard, `backup verify` and `restore` refuse
//! the manifest naming the entry, and the confined writer alone (the manifest check bypassed)
//! refuses to pass the link. Modes are masked: no setgid or world-writable directory and no
//! setuid file comes back from a workspace.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use serde_json::{Value, json};
use warren_admin::backup::BackupError;
use warren_admin::backup::beneath::Beneath;
use warren_testkit::{TempRoot, text};

use crate::common::bin;

type R = Result<(), Box<dyn std::error::Error>>;

const LINK: &str = "agents/main/workspace/x";
const PLANTED: &str = "agents/main/workspace/x/planted";

/// A real backup of a small install, then its manifest edited as the red team did.
fn crafted_backup(
    dir: &Path,
    outside: &Path,
) -> Result<(TempRoot, std::path::PathBuf), Box<dyn std::error::Error>> {
    let root = TempRoot::new()?;
    root.write_config("[agents.main]\n")?;
    fs::create_dir_all(root.path().join("agents/main/workspace"))?;
    let dest = dir.join("b");
    let out = root.run(bin(), &["backup", dest.to_str().unwrap_or_default()])?;
    assert!(out.status.success(), "{:?}", text(&out));
    let mpath = dest.join("manifest.json");
    let mut m: Value = serde_json::from_slice(&fs::read(&mpath)?)?;
    let entries = m["entries"].as_array_mut().ok_or("no entries")?;
    // The planted file reuses config.toml's stored bytes and digest.
    let config = entries
        .iter()
        .find(|e| e["path"] == "config.toml")
        .cloned()
        .ok_or("no config.toml entry")?;
    let mut planted = config.clone();
    planted["path"] = json!(PLANTED);
    entries.push(json!({"path": LINK, "kind": "symlink", "target": outside}));
    entries.push(json!({"path": LINK, "kind": "dir", "mode": 0o777}));
    entries.push(planted);
    fs::write(&mpath, serde_json::to_vec_pretty(&m)?)?;
    let files = dest.join("files");
    fs::create_dir_all(files.join(LINK))?;
    fs::copy(files.join("config.toml"), files.join(PLANTED))?;
    Ok((root, dest))
}

/// The restore loop before issue 35 §2 (the guard switched off): each entry's path joined under
/// the staging directory and written through `std::fs`, directory modes applied by path.
fn plain_path_restore(backup: &Path, staging: &Path) -> io::Result<()> {
    let m: Value = serde_json::from_slice(&fs::read(backup.join("manifest.json"))?)?;
    let mkdirs = |p: &Path| fs::DirBuilder::new().recursive(true).mode(0o700).create(p);
    let mut modes = Vec::new();
    for e in m["entries"].as_array().into_iter().flatten() {
        let rel = e["path"].as_str().unwrap_or_default();
        let out = staging.join(rel);
        match e["kind"].as_str() {
            Some("dir") => {
                mkdirs(&out)?;
                modes.push((out, e["mode"].as_u64().unwrap_or(0o700) as u32));
            }
            Some("symlink") => {
                mkdirs(out.parent().unwrap_or(staging))?;
                std::os::unix::fs::symlink(e["target"].as_str().unwrap_or_default(), &out)?;
            }
            _ => {
                mkdirs(out.parent().unwrap_or(staging))?;
                let mut w = fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&out)?;
                io::copy(&mut fs::File::open(backup.join("files").join(rel))?, &mut w)?;
            }
        }
    }
    for (dir, mode) in modes.iter().rev() {
        fs::set_permissions(dir, fs::Permissions::from_mode(*mode))?;
    }
    Ok(())
}

fn mode(p: &Path) -> u32 {
    fs::metadata(p).map_or(0, |m| m.mode() & 0o7777)
}

#[test]
fn a_crafted_manifest_link_cannot_make_restore_write_or_chmod_outside_its_target_issue35() -> R {
    let work = tempfile::tempdir()?;
    let outside = work.path().join("outside");
    fs::DirBuilder::new().mode(0o700).create(&outside)?;
    fs::set_permissions(&outside, fs::Permissions::from_mode(0o700))?;
    let (root, backup) = crafted_backup(work.path(), &outside)?;

    // Guard off: the old loop writes outside its staging directory and opens the outside
    // directory to everyone.
    let staging = work.path().join("old-restore");
    plain_path_restore(&backup, &staging)?;
    assert!(
        outside.join("planted").is_file(),
        "the old loop planted a file outside"
    );
    assert_eq!(
        mode(&outside),
        0o777,
        "the old loop chmodded the outside directory"
    );
    fs::remove_file(outside.join("planted"))?;
    fs::set_permissions(&outside, fs::Permissions::from_mode(0o700))?;

    // Guard on: verify names the entry; restore refuses before writing anything.
    let out = root.run(
        bin(),
        &["backup", "verify", backup.to_str().unwrap_or_default()],
    )?;
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("entry '{LINK}' is listed twice")),
        "verify names the entry: {stderr}"
    );
    let target = work.path().join("restored");
    let out = root.run(
        bin(),
        &[
            "restore",
            backup.to_str().unwrap_or_default(),
            "--to",
            target.to_str().unwrap_or_default(),
        ],
    )?;
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(LINK), "{stderr}");
    assert!(!target.exists(), "nothing restored");
    assert_eq!(
        fs::read_dir(&outside)?.count(),
        0,
        "nothing written outside"
    );
    assert_eq!(
        mode(&outside),
        0o700,
        "the outside directory keeps its mode"
    );

    // The confined writer alone (as if the manifest check were bypassed): the same steps stop
    // at the link, whichever comes first.
    let staging = work.path().join("confined");
    fs::DirBuilder::new().mode(0o700).create(&staging)?;
    let beneath = Beneath::open(&staging)?;
    beneath.symlink(LINK, outside.to_str().unwrap_or_default())?;
    let refused = |r: Result<(), BackupError>| matches!(r, Err(BackupError::Beneath { .. }));
    assert!(refused(beneath.make_dir(LINK)));
    assert!(refused(beneath.make_dir(&format!("{LINK}/d"))));
    assert!(refused(beneath.create_file(PLANTED).map(drop)));
    assert!(refused(beneath.set_dir_mode(LINK, 0o777)));
    assert_eq!(
        fs::read_dir(&outside)?.count(),
        0,
        "nothing written outside"
    );
    assert_eq!(
        mode(&outside),
        0o700,
        "the outside directory keeps its mode"
    );
    Ok(())
}

#[test]
fn restored_modes_drop_setuid_setgid_and_world_write_issue35() -> R {
    let root = TempRoot::new()?;
    root.write_config("[agents.main]\n")?;
    let ws = root.path().join("agents/main/workspace");
    fs::create_dir_all(ws.join("open"))?;
    fs::set_permissions(ws.join("open"), fs::Permissions::from_mode(0o2777))?;
    fs::write(ws.join("tool"), "#!/bin/sh\n")?;
    fs::set_permissions(ws.join("tool"), fs::Permissions::from_mode(0o4777))?;
    fs::write(ws.join("notes"), "kept")?;
    fs::set_permissions(ws.join("notes"), fs::Permissions::from_mode(0o640))?;
    let work = tempfile::tempdir()?;
    let backup = work.path().join("b");
    let out = root.run(bin(), &["backup", backup.to_str().unwrap_or_default()])?;
    assert!(out.status.success(), "{:?}", text(&out));
    let target = work.path().join("r");
    let out = root.run(
        bin(),
        &[
            "restore",
            backup.to_str().unwrap_or_default(),
            "--to",
            target.to_str().unwrap_or_default(),
        ],
    )?;
    assert!(out.status.success(), "{:?}", text(&out));
    let rws = target.join("agents/main/workspace");
    assert_eq!(
        [
            mode(&rws.join("open")),
            mode(&rws.join("tool")),
            mode(&rws.join("notes"))
        ],
        [0o775, 0o775, 0o640]
    );
    Ok(())
}

/// A stored file under `files/` replaced by a link to a file outside the backup (same bytes, so
/// its digest matches): reading by path, as verify and restore did, follows the link; now both
/// open stored files beneath `files/` and refuse the link, naming it. (Restore also hashes
/// what it copies again, so a file swapped after the verify is not restored either.)
#[test]
fn a_link_planted_among_the_stored_files_is_not_followed_issue35() -> R {
    let root = TempRoot::new()?;
    root.write_config("[agents.main]\n")?;
    let ws = root.path().join("agents/main/workspace");
    fs::create_dir_all(&ws)?;
    let content = "the same bytes as the outside file";
    fs::write(ws.join("f.txt"), content)?;
    let work = tempfile::tempdir()?;
    let backup = work.path().join("b");
    let out = root.run(bin(), &["backup", backup.to_str().unwrap_or_default()])?;
    assert!(out.status.success(), "{:?}", text(&out));
    let outside = work.path().join("outside.txt");
    fs::write(&outside, content)?;
    let stored = backup.join("files/agents/main/workspace/f.txt");
    fs::remove_file(&stored)?;
    std::os::unix::fs::symlink(&outside, &stored)?;
    // Guard off: a read by path gets the outside file.
    assert_eq!(fs::read_to_string(&stored)?, content);

    let out = root.run(
        bin(),
        &["backup", "verify", backup.to_str().unwrap_or_default()],
    )?;
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("agents/main/workspace/f.txt") && stderr.contains("symbolic link"),
        "{stderr}"
    );
    let target = work.path().join("r");
    let out = root.run(
        bin(),
        &[
            "restore",
            backup.to_str().unwrap_or_default(),
            "--to",
            target.to_str().unwrap_or_default(),
        ],
    )?;
    assert_eq!(out.status.code(), Some(1), "{:?}", text(&out));
    assert!(!target.exists());
    Ok(())
}
