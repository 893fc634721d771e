//! Issue 35 §8 (backup part), on the real binary: a backup keeps the holes of sparse files
//! (two 1,000 MB sparse files in a workspace took 2.1 GB in a backup before), and an agent
//! whose workspace is over `--max-agent-mb` is left out with a warning naming the agent, its
//! size, the cap and how to raise it, while everything else is backed up.

use std::fs;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use serde_json::Value;
use warren_testkit::{TempRoot, text};

use crate::common::bin;

type R = Result<(), Box<dyn std::error::Error>>;

const MB: u64 = 1_000_000;

/// Bytes allocated on disk below `dir` (what `du` counts).
fn allocated(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(meta) = e.metadata() else { continue };
            total += meta.blocks() * 512;
            if meta.is_dir() {
                stack.push(e.path());
            }
        }
    }
    total
}

fn sparse_file(path: &Path, len: u64, marks: &[(u64, &[u8])]) -> std::io::Result<()> {
    let f = fs::File::create(path)?;
    f.set_len(len)?;
    for (off, bytes) in marks {
        f.write_all_at(bytes, *off)?;
    }
    Ok(())
}

fn manifest(backup: &Path) -> Result<Value, Box<dyn std::error::Error>> {
    Ok(serde_json::from_slice(&fs::read(
        backup.join("manifest.json"),
    )?)?)
}

#[test]
fn two_1000_mb_sparse_files_back_up_and_restore_as_their_data_issue35() -> R {
    let root = TempRoot::new()?;
    root.write_config("[agents.main]\n")?;
    let ws = root.path().join("agents/main/workspace");
    fs::create_dir_all(&ws)?;
    let marks: [(u64, &[u8]); 3] = [
        (0, b"head"),
        (500 * MB, b"middle"),
        (1000 * MB - 4, b"tail"),
    ];
    sparse_file(&ws.join("a.img"), 1000 * MB, &marks)?;
    sparse_file(&ws.join("b.img"), 1000 * MB, &marks[..1])?;
    assert!(allocated(&ws) < 2 * MB, "the workspace itself is sparse");

    let work = tempfile::tempdir()?;
    for encrypt in [false, true] {
        let backup = work.path().join(format!("b-{encrypt}"));
        let mut args = vec!["backup", backup.to_str().unwrap_or_default()];
        if encrypt {
            args.push("--encrypt");
        }
        let run = |args: &[&str]| {
            root.warren(bin(), args)
                .env("WARREN_BACKUP_PASSPHRASE", "correct horse")
                .output()
        };
        let out = run(&args)?;
        assert!(out.status.success(), "{:?}", text(&out));
        assert!(
            allocated(&backup) < 10 * MB,
            "the backup (encrypted: {encrypt}) holds the data, not the holes: {} bytes",
            allocated(&backup)
        );
        let m = manifest(&backup)?;
        assert_eq!(m["version"], 2, "a backup with a sparse file is version 2");
        let entry = m["entries"]
            .as_array()
            .and_then(|es| {
                es.iter()
                    .find(|e| e["path"] == "agents/main/workspace/a.img")
            })
            .ok_or("no entry for a.img")?;
        assert_eq!(entry["sparse"]["len"], 1000 * MB);

        let out = run(&["backup", "verify", backup.to_str().unwrap_or_default()])?;
        assert!(out.status.success(), "{:?}", text(&out));
        let target = work.path().join(format!("r-{encrypt}"));
        let out = run(&[
            "restore",
            backup.to_str().unwrap_or_default(),
            "--to",
            target.to_str().unwrap_or_default(),
        ])?;
        assert!(out.status.success(), "{:?}", text(&out));
        let rws = target.join("agents/main/workspace");
        assert!(allocated(&rws) < 2 * MB, "restored with its holes");
        for (name, marks) in [("a.img", &marks[..]), ("b.img", &marks[..1])] {
            let f = fs::File::open(rws.join(name))?;
            assert_eq!(f.metadata()?.len(), 1000 * MB, "{name}");
            for (off, bytes) in marks {
                let mut got = vec![0u8; bytes.len()];
                f.read_exact_at(&mut got, *off)?;
                assert_eq!(&got, bytes, "{name} at {off}");
            }
            let mut between = vec![1u8; 4096];
            f.read_exact_at(&mut between, 250 * MB)?;
            assert!(
                between.iter().all(|&b| b == 0),
                "{name}: a hole reads as zeros"
            );
        }
    }
    Ok(())
}

#[test]
fn an_agent_over_the_backup_cap_is_left_out_with_a_message_naming_it_issue35() -> R {
    let root = TempRoot::new()?;
    root.write_config("[agents.main]\n\n[agents.big]\n")?;
    let (main_ws, big_ws) = (
        root.path().join("agents/main/workspace"),
        root.path().join("agents/big/workspace"),
    );
    fs::create_dir_all(&main_ws)?;
    fs::create_dir_all(big_ws.join("sub"))?;
    fs::write(main_ws.join("notes.txt"), "small and kept")?;
    let noise: Vec<u8> = (0..3 * MB as u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    fs::write(big_ws.join("sub/blob.bin"), &noise)?;
    // A sparse file counts its data, not its length: this one does not reach the cap.
    sparse_file(&main_ws.join("disk.img"), 1000 * MB, &[(0, b"x")])?;

    let work = tempfile::tempdir()?;
    let backup = work.path().join("b");
    let out = root.run(
        bin(),
        &[
            "backup",
            backup.to_str().unwrap_or_default(),
            "--max-agent-mb",
            "2",
        ],
    )?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout} {stderr}");
    let warning = stdout
        .lines()
        .find(|l| l.starts_with("warning: agent 'big'"))
        .ok_or_else(|| format!("no warning for agent 'big': {stdout}"))?;
    for part in [
        "uses 3.0 MB",
        "agents/big/workspace",
        "cap of 2 MB",
        "--max-agent-mb N",
    ] {
        assert!(warning.contains(part), "{part:?} in {warning}");
    }
    assert!(!stdout.contains("agent 'main'"), "{stdout}");
    let m = manifest(&backup)?;
    let paths: Vec<&str> = m["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["path"].as_str())
        .collect();
    assert!(
        paths.contains(&"agents/main/workspace/notes.txt"),
        "{paths:?}"
    );
    assert!(paths.contains(&"agents/big/workspace"), "{paths:?}");
    assert!(
        !paths.iter().any(|p| p.starts_with("agents/big/workspace/")),
        "{paths:?}"
    );

    // Raised: everything is in.
    let all = work.path().join("all");
    let out = root.run(
        bin(),
        &[
            "backup",
            all.to_str().unwrap_or_default(),
            "--max-agent-mb",
            "0",
        ],
    )?;
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(!text(&out).0.contains("warning: agent"), "{:?}", text(&out));
    let m = manifest(&all)?;
    assert!(
        m["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["path"] == "agents/big/workspace/sub/blob.bin")
    );
    Ok(())
}
