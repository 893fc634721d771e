//! Markdown memory in a workspace the agent writes (PERM-6, issue 13): links and hard links the
//! agent plants — at `MEMORY.md`, `memory/`, the lock file or the old predictable temp name —
//! lead the daemon nowhere outside the workspace. Each test first shows that a plain `std::fs`
//! open follows the planted link to the host file (the attack is live), then that memory does
//! not: recall returns none of the host text, store writes nothing through it.

use crate::common;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use common::{Fixture, R, entry};
use warren_config::schema::MemoryBackendKind;
use warren_core::AgentAlias;
use warren_memory::{Memory, MemoryError, RecallQuery};

const HOST_TEXT: &str = "- **hostkey**: hunter2 host secret\n";

/// A Markdown fixture with agent `a` and its (created) workspace, plus a host directory outside
/// the install root holding `host.md` with [`HOST_TEXT`].
struct Setup {
    fx: Fixture,
    ws: PathBuf,
    host_dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Result<Self, Box<dyn std::error::Error>> {
        let fx = Fixture::new(MemoryBackendKind::Markdown, &[("a", vec![])])?;
        let ws = fx.root.agent_workspace(&AgentAlias::new("a")?);
        std::fs::create_dir_all(&ws)?;
        let host_dir = tempfile::tempdir()?;
        std::fs::write(host_dir.path().join("host.md"), HOST_TEXT)?;
        Ok(Self { fx, ws, host_dir })
    }

    fn host(&self) -> PathBuf {
        self.host_dir.path().join("host.md")
    }

    fn host_text(&self) -> String {
        std::fs::read_to_string(self.host()).unwrap_or_default()
    }
}

/// The error of `r`, which must be a refusal naming `file`.
fn refused<T: std::fmt::Debug>(r: Result<T, MemoryError>, file: &str, why: &str) -> String {
    match r {
        Ok(v) => panic!("expected a refusal naming {file}, got {v:?}"),
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains(file) && msg.contains(why), "{msg}");
            msg
        }
    }
}

async fn recall_text(mem: &dyn Memory, text: &str) -> Result<String, MemoryError> {
    Ok(mem
        .recall(RecallQuery::new(text, 10))
        .await?
        .into_iter()
        .map(|h| h.entry.content)
        .collect::<Vec<_>>()
        .join("\n"))
}

fn is_link(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recall_does_not_follow_a_memory_md_link_to_a_host_file_perm6() -> R {
    let s = Setup::new()?;
    symlink(s.host(), s.ws.join("MEMORY.md"))?;
    // The attack: a plain open of the workspace path reads the host file.
    assert_eq!(std::fs::read_to_string(s.ws.join("MEMORY.md"))?, HOST_TEXT);
    let a = s.fx.mem("a").await?;
    let msg = refused(
        recall_text(&*a, "hunter2").await,
        "MEMORY.md",
        "symbolic link",
    );
    assert!(!msg.contains("hunter2"), "{msg}");
    refused(a.get("hostkey".into()).await, "MEMORY.md", "symbolic link");
    refused(a.count().await, "MEMORY.md", "symbolic link");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_neither_copies_nor_writes_through_a_memory_md_link_perm6() -> R {
    let s = Setup::new()?;
    symlink(s.host(), s.ws.join("MEMORY.md"))?;
    let a = s.fx.mem("a").await?;
    refused(
        a.store(entry("a", "pref", "likes tea", "core")).await,
        "MEMORY.md",
        "symbolic link",
    );
    refused(
        a.forget("hostkey".into()).await,
        "MEMORY.md",
        "symbolic link",
    );
    // The host file is unchanged, and its text was not copied into the workspace (a rewrite
    // that had read it through the link would have turned MEMORY.md into a file holding it).
    assert_eq!(s.host_text(), HOST_TEXT);
    assert!(is_link(&s.ws.join("MEMORY.md")));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hard_linked_memory_md_is_not_read_perm6() -> R {
    let s = Setup::new()?;
    std::fs::hard_link(s.host(), s.ws.join("MEMORY.md"))?;
    assert_eq!(std::fs::read_to_string(s.ws.join("MEMORY.md"))?, HOST_TEXT);
    let a = s.fx.mem("a").await?;
    refused(recall_text(&*a, "hunter2").await, "MEMORY.md", "hard links");
    refused(
        a.store(entry("a", "pref", "likes tea", "core")).await,
        "MEMORY.md",
        "hard links",
    );
    assert_eq!(s.host_text(), HOST_TEXT);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_file_link_creates_nothing_outside_the_workspace_perm6() -> R {
    let s = Setup::new()?;
    let target = s.host_dir.path().join("created-by-the-daemon");
    symlink(&target, s.ws.join(".memory.lock"))?;
    // The attack: opening the lock path to create it creates the link's target.
    let probe = s.host_dir.path().join("probe");
    symlink(&probe, s.ws.join("probe.lock"))?;
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(s.ws.join("probe.lock"))?;
    assert!(probe.exists());

    let a = s.fx.mem("a").await?;
    refused(
        a.store(entry("a", "pref", "likes tea", "core")).await,
        ".memory.lock",
        "symbolic link",
    );
    refused(
        recall_text(&*a, "tea").await,
        ".memory.lock",
        "symbolic link",
    );
    assert!(!target.exists(), "the lock link's target was created");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_at_the_old_predictable_temp_name_is_never_written_through_perm6() -> R {
    let s = Setup::new()?;
    // Markdown memory used to write `.MEMORY.md.tmp-<daemon pid>`: an agent could plant a link
    // there and have the daemon truncate and write the host file.
    let planted = s.ws.join(format!(".MEMORY.md.tmp-{}", std::process::id()));
    symlink(s.host(), &planted)?;
    let a = s.fx.mem("a").await?;
    a.store(entry("a", "pref", "likes tea", "core")).await?;
    assert_eq!(s.host_text(), HOST_TEXT, "the host file was written");
    assert!(is_link(&planted), "the planted link was replaced or moved");
    let core = std::fs::read_to_string(s.ws.join("MEMORY.md"))?;
    assert!(
        core.contains("likes tea") && !core.contains("hunter2"),
        "{core}"
    );
    assert!(!is_link(&s.ws.join("MEMORY.md")));
    // No temp file of ours is left behind: the workspace holds the link, the file, the lock.
    let mut names: Vec<String> = std::fs::read_dir(&s.ws)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()?;
    names.sort();
    let mut want = vec![
        ".memory.lock".to_string(),
        "MEMORY.md".to_string(),
        planted
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    ];
    want.sort();
    assert_eq!(names, want);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_dir_link_is_not_followed_by_recall_store_or_purge_perm6() -> R {
    let s = Setup::new()?;
    std::fs::write(s.host_dir.path().join("2020-01-01.md"), HOST_TEXT)?;
    symlink(s.host_dir.path(), s.ws.join("memory"))?;
    assert_eq!(
        std::fs::read_to_string(s.ws.join("memory").join("2020-01-01.md"))?,
        HOST_TEXT
    );
    let listing = |dir: &Path| -> Result<Vec<String>, std::io::Error> {
        let mut v: Vec<String> = std::fs::read_dir(dir)?
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect::<Result<_, _>>()?;
        v.sort();
        Ok(v)
    };
    let before = listing(s.host_dir.path())?;

    let a = s.fx.mem("a").await?;
    refused(recall_text(&*a, "hunter2").await, "memory", "symbolic link");
    refused(
        a.store(entry("a", "standup", "talked about tea", "daily"))
            .await,
        "memory",
        "symbolic link",
    );
    refused(a.purge().await, "memory", "symbolic link");
    // Nothing was written into, or removed from, the host directory.
    assert_eq!(listing(s.host_dir.path())?, before);
    assert_eq!(
        std::fs::read_to_string(s.host_dir.path().join("2020-01-01.md"))?,
        HOST_TEXT
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daily_file_link_is_not_read_perm6() -> R {
    let s = Setup::new()?;
    std::fs::create_dir_all(s.ws.join("memory"))?;
    symlink(s.host(), s.ws.join("memory").join("2020-01-01.md"))?;
    let a = s.fx.mem("a").await?;
    refused(
        recall_text(&*a, "hunter2").await,
        "2020-01-01.md",
        "symbolic link",
    );
    Ok(())
}

/// The MEM-9 probe (run at daemon start over every agent) skips a planted link instead of
/// failing — and does not count the host file's lines as this agent's memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mem9_probe_skips_a_planted_link_perm6() -> R {
    let s = Setup::new()?;
    symlink(s.host(), s.ws.join("MEMORY.md"))?;
    let held = warren_memory::lock::holdings(&s.fx.root, &s.fx.config, None)?;
    assert!(!held.contains_key("a"), "{held:?}");
    // A real entry is counted.
    std::fs::remove_file(s.ws.join("MEMORY.md"))?;
    let a = s.fx.mem("a").await?;
    a.store(entry("a", "pref", "likes tea", "core")).await?;
    let held = warren_memory::lock::holdings(&s.fx.root, &s.fx.config, None)?;
    assert_eq!(
        held.get("a")
            .map(|h| h.iter().map(|(_, _, n)| *n).sum::<u64>()),
        Some(1)
    );
    Ok(())
}
