//! Agent rename and delete with 10k memory rows and 1k session messages (issue 9), against the
//! time to copy the bytes of the stores they touch (memory.db + sessions.db + ACP db, copied
//! and fsynced on the same disk) — a sanity ratio, not a target. Also reports how long the
//! config write lock was held against the config save inside it: the lock must cover only the
//! checks, the journal record and the save, never the side effects.
//!
//! Run: `cargo bench -p warren-runtime --bench lifecycle`.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use warren_admin::lifecycle::Lifecycle;
use warren_config::{ConfigStore, InstallRoot};
use warren_core::{AgentAlias, Role, SessionKey};
use warren_memory::{MemoryStore, MemoryStores, NewEntry};
use warren_store::sessions::{NewMessage, SessionInit, open_chat_sessions};

const ROWS: usize = 10_000;
const MESSAGES: usize = 1_000;
const RUNS: usize = 3;

type E = Box<dyn std::error::Error>;

fn seed(rt: &tokio::runtime::Runtime, dir: &Path) -> Result<InstallRoot, E> {
    let root = InstallRoot::at(dir.join("warren"));
    root.ensure_layout()?;
    fs::write(
        root.config_file(),
        "[agents.a]\n[agents.a.workspace.access]\nb = \"Read\"\n\n[agents.b]\n",
    )?;
    let config = ConfigStore::load(root.clone())?.snapshot().config().clone();
    let b = AgentAlias::new("b")?;
    rt.block_on(async {
        let store = MemoryStores::new(root.clone()).sqlite(&config).await?;
        let id = store.agent_id(&b, true).await?.ok_or("no id")?;
        for i in 0..ROWS {
            let e = NewEntry::new(
                "b",
                &format!("key-{i}"),
                &format!("memory row {i}: some text of a typical fact, about eighty bytes long"),
                None,
                None,
            )?;
            store.store_with_agent(id.clone(), e).await?;
        }
        Ok::<(), E>(())
    })?;
    let sessions = open_chat_sessions(&root, &config.channels)?;
    for s in 0..10 {
        let key = SessionKey::new(format!("s{s}"))?;
        sessions.backend().ensure(
            &key,
            &SessionInit {
                agent: Some(b.clone()),
                ..SessionInit::default()
            },
        )?;
        for i in 0..MESSAGES / 10 {
            sessions.backend().append(
                &key,
                &NewMessage::new(Role::User, format!("message {i} with a little content")),
            )?;
        }
    }
    let ws = root.agent_workspace(&b);
    fs::create_dir_all(&ws)?;
    fs::write(ws.join("notes.md"), "notes")?;
    Ok(root)
}

/// Copies the store files (what the operations touch) and fsyncs the copies.
fn copy_baseline(root: &InstallRoot, out: &Path) -> Result<(Duration, u64), E> {
    let start = Instant::now();
    let mut bytes = 0;
    for (i, p) in [root.memory_db(), root.sessions_db(), root.acp_sessions_db()]
        .iter()
        .enumerate()
    {
        if let Ok(data) = fs::read(p) {
            let mut f = fs::File::create(out.join(format!("copy-{i}")))?;
            f.write_all(&data)?;
            f.sync_all()?;
            bytes += data.len() as u64;
        }
    }
    Ok((start.elapsed(), bytes))
}

fn main() -> Result<(), E> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut rows = Vec::new();
    let (b, bee) = (AgentAlias::new("b")?, AgentAlias::new("bee")?);
    for run in 0..RUNS {
        let dir = tempfile::tempdir()?;
        let root = seed(&rt, dir.path())?;
        let (copy, bytes) = copy_baseline(&root, dir.path())?;
        let lc = Lifecycle::new(ConfigStore::load(root.clone())?);
        let start = Instant::now();
        let renamed = rt.block_on(lc.rename(&b, &bee))?;
        let rename = start.elapsed();
        assert!(renamed.converged, "{:?}", renamed.warnings);
        let lc = Lifecycle::new(ConfigStore::load(root.clone())?);
        let start = Instant::now();
        let deleted = rt.block_on(lc.delete(&bee))?;
        let delete = start.elapsed();
        assert!(deleted.converged, "{:?}", deleted.warnings);
        assert_eq!(deleted.counts.get("memory"), Some(&(ROWS as u64)));
        println!(
            "run {run}: copy {bytes} B {copy:?} | rename {rename:?} ({:.1}x copy; lock held {} us, persist {} us) | delete {delete:?} ({:.1}x copy; lock held {} us, persist {} us)",
            rename.as_secs_f64() / copy.as_secs_f64(),
            renamed.lock_held_us.unwrap_or(0),
            renamed.persist_us.unwrap_or(0),
            delete.as_secs_f64() / copy.as_secs_f64(),
            deleted.lock_held_us.unwrap_or(0),
            deleted.persist_us.unwrap_or(0),
        );
        rows.push((copy, rename, delete, renamed, deleted));
    }
    rows.sort_by_key(|r| r.1);
    let (copy, rename, delete, renamed, deleted) = &rows[RUNS / 2];
    println!(
        "lifecycle (median of {RUNS}, {ROWS} memory rows, {MESSAGES} messages): rename {rename:?} = {:.1}x copy, delete {delete:?} = {:.1}x copy (copy {copy:?})",
        rename.as_secs_f64() / copy.as_secs_f64(),
        delete.as_secs_f64() / copy.as_secs_f64()
    );
    for (op, r) in [("rename", renamed), ("delete", deleted)] {
        let (held, persist) = (r.lock_held_us.unwrap_or(0), r.persist_us.unwrap_or(0));
        println!(
            "{op}: config write lock held {held} us, of which the config save {persist} us ({:.0}%); side effects ran after the lock",
            100.0 * persist as f64 / held.max(1) as f64
        );
    }
    Ok(())
}
