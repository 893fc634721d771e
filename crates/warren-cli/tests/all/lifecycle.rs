//! Agent lifecycle end to end (LIFE-1..6, BEYOND-1, BEYOND-3) with the real `warren` binary,
//! real SQLite stores and real child processes killed at every named crash point.
//!
//! Every scenario starts from a copy of one seeded install (workspace files, memory rows, chat
//! sessions with messages, a closed ACP session with a transcript, cost records), so an
//! interrupted run can be compared byte for byte with an uninterrupted one: [`state`] renders
//! everything an operator could observe, with the install path and operation timestamps
//! normalised.

use crate::common::bin;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use pretty_assertions::assert_eq;
use warren_admin::lifecycle::{
    DELETE_CRASH_POINTS, RENAME_CRASH_POINTS, RESTORE_CRASH_POINTS, WORKSPACE_COPY_CRASH_POINTS,
};
use warren_config::{ConfigStore, InstallRoot};
use warren_core::{AgentAlias, Role, SessionKey};
use warren_memory::{MemoryStore, MemoryStores, NewEntry};
use warren_store::acp::{AcpSessionStore, AcpState, NewAcpSession};
use warren_store::sessions::{NewMessage, SessionInit, open_chat_sessions};
use warren_testkit::{DaemonChild, TempRoot, http, pair, run_until_crash, text};

type R = Result<(), Box<dyn std::error::Error>>;

const WAIT: Duration = Duration::from_secs(30);

/// A grant graph: a reads b, b read-writes c (workspace and memory grants).
const CONFIG: &str = r#"[agents.a]
model = "m"

[agents.a.workspace.access]
b = "Read"

[agents.a.memory]
read_memory_from = ["b"]

[agents.b]
model = "mb"

[agents.b.workspace.access]
c = "ReadWrite"

[agents.b.memory]
read_memory_from = [{ agent = "c", categories = ["notes"] }]

[agents.c]
"#;

fn alias(s: &str) -> AgentAlias {
    AgentAlias::new(s).unwrap_or_else(|e| panic!("{e}"))
}

/// Seeds agent `b` (and a little of `a`): workspace files, memory rows, sessions, an ACP
/// session with a transcript, cost records.
fn seed(root: &Path, rows: usize, messages: usize) -> R {
    let install = InstallRoot::at(root);
    let config = ConfigStore::load(install.clone())?.snapshot();
    let ws = install.agent_workspace(&alias("b"));
    fs::create_dir_all(ws.join("sub"))?;
    fs::write(ws.join("notes.txt"), "b's notes\n")?;
    fs::write(ws.join("sub/data.bin"), (0u8..=255).collect::<Vec<u8>>())?;
    for who in ["a", "c"] {
        fs::create_dir_all(install.agent_workspace(&alias(who)))?;
        fs::write(install.agent_workspace(&alias(who)).join("x.txt"), who)?;
    }

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let stores = MemoryStores::new(install.clone());
        let store = stores.sqlite(&config).await?;
        for who in ["a", "b"] {
            let id = store
                .agent_id(&alias(who), true)
                .await?
                .ok_or("no agent id")?;
            for i in 0..rows {
                let entry = NewEntry::new(
                    who,
                    &format!("k{i}"),
                    &format!("{who} remembers {i}"),
                    Some(if i % 2 == 0 { "notes" } else { "core" }),
                    None,
                )?;
                store.store_with_agent(id.clone(), entry).await?;
            }
        }
        Ok::<(), Box<dyn std::error::Error>>(())
    })?;

    let sessions = open_chat_sessions(&install, &config.channels)?;
    let backend = sessions.backend();
    for (key, who) in [("chat-b-1", "b"), ("chat-b-2", "b"), ("chat-a-1", "a")] {
        let key = SessionKey::new(key)?;
        backend.ensure(
            &key,
            &SessionInit {
                agent: Some(alias(who)),
                channel: Some("cli".into()),
                name: Some(format!("{who}'s talk")),
            },
        )?;
        for i in 0..messages {
            let (role, agent) = if i % 2 == 0 {
                (Role::User, None)
            } else {
                (Role::Assistant, Some(alias(who)))
            };
            let mut m = NewMessage::new(role, format!("message {i} of {key}"));
            m.agent = agent;
            backend.append(&key, &m)?;
        }
    }
    drop(sessions);

    let acp = AcpSessionStore::open(&install)?;
    acp.create(&NewAcpSession {
        id: "acp-b-1".into(),
        agent: alias("b"),
        cwd: ws.join("sub").display().to_string(),
        mode: Some("code".into()),
        transcript: None,
    })?;
    acp.append_transcript("acp-b-1", "user", "fix the bug")?;
    acp.append_transcript("acp-b-1", "agent", "done")?;
    acp.end("acp-b-1", AcpState::Closed)?;

    fs::create_dir_all(install.state_dir())?;
    let mut ledger = String::new();
    for who in ["a", "b", "b"] {
        ledger.push_str(&format!(
            r#"{{"time":"2026-01-01T00:00:00Z","agent":"{who}","session":null,"provider":"p","model":"m","input_tokens":1,"output_tokens":2,"cost_usd":0.5,"rate":null,"rejected":false}}"#
        ));
        ledger.push('\n');
    }
    fs::write(install.costs_ledger(), ledger)?;
    Ok(())
}

/// A seeded install; each scenario copies it.
fn template(rows: usize, messages: usize) -> Result<TempRoot, Box<dyn std::error::Error>> {
    let root = TempRoot::new()?;
    root.write_config(CONFIG)?;
    seed(root.path(), rows, messages)?;
    Ok(root)
}

fn copy_of(template: &TempRoot) -> Result<TempRoot, Box<dyn std::error::Error>> {
    let root = TempRoot::new()?;
    let status = Command::new("cp")
        .arg("-a")
        .arg(template.path())
        .arg(root.path())
        .status()?;
    assert!(status.success());
    Ok(root)
}

fn tree(dir: &Path, base: &Path, out: &mut BTreeMap<String, String>) {
    let Ok(rd) = fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        let rel = p.strip_prefix(base).unwrap_or(&p).display().to_string();
        if p.file_name().is_some_and(|n| n == ".tmp") {
            continue; // the daemon's per-workspace scratch directory
        }
        if p.is_dir() {
            tree(&p, base, out);
        } else {
            let bytes = fs::read(&p).unwrap_or_default();
            out.insert(rel, String::from_utf8_lossy(&bytes).into_owned());
        }
    }
}

fn render(map: &BTreeMap<String, String>) -> String {
    map.iter()
        .map(|(k, v)| format!("{k}: {v:?}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn sql_rows(db: &Path, query: &str) -> Vec<String> {
    let Ok(conn) = rusqlite::Connection::open(db) else {
        return vec!["<no db>".into()];
    };
    let mut stmt = match conn.prepare(query) {
        Ok(s) => s,
        Err(e) => return vec![format!("<{e}>")],
    };
    let n = stmt.column_count();
    stmt.query_map([], |r| {
        Ok((0..n)
            .map(|i| {
                r.get::<_, rusqlite::types::Value>(i)
                    .map(|v| format!("{v:?}"))
                    .unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join("|"))
    })
    .map(|rows| rows.flatten().collect())
    .unwrap_or_default()
}

/// Everything observable, with the install path and per-run timestamps normalised.
fn state(root: &Path) -> String {
    let install = InstallRoot::at(root);
    let mut out = String::new();
    out.push_str(&format!(
        "== config\n{}\n",
        fs::read_to_string(install.config_file()).unwrap_or_default()
    ));
    let mut files = BTreeMap::new();
    tree(&install.agents_dir(), root, &mut files);
    out.push_str(&format!("== agents/\n{}\n", render(&files)));
    let mut archive = BTreeMap::new();
    tree(
        &install.deleted_agents_dir(),
        &install.deleted_agents_dir(),
        &mut archive,
    );
    let normalised: BTreeMap<String, String> = archive
        .into_iter()
        .map(|(k, v)| {
            // `<alias>-<timestamp>/...` -> `<alias>-T/...`
            let k = match k.split_once('-') {
                Some((a, rest)) => format!("{a}-T{}", rest.find('/').map_or("", |i| &rest[i..])),
                None => k,
            };
            let v = if k.ends_with("manifest.json") || k.ends_with("restored.json") {
                let mut j: serde_json::Value = serde_json::from_str(&v).unwrap_or_default();
                if let Some(o) = j.as_object_mut() {
                    o.remove("deleted_at");
                    o.remove("restored_at");
                }
                serde_json::to_string_pretty(&j).unwrap_or_default()
            } else {
                v
            };
            (k, v)
        })
        .collect();
    out.push_str(&format!("== archive\n{}\n", render(&normalised)));
    out.push_str(&format!(
        "== memory\n{}\n",
        sql_rows(
            &install.memory_db(),
            "SELECT a.alias, m.id, m.key, m.content, m.category, m.session, m.created_at, m.updated_at \
             FROM memories m JOIN agents a ON a.id = m.agent_id ORDER BY a.alias, m.key"
        )
        .join("\n")
    ));
    out.push_str(&format!(
        "== memory agents\n{}\n",
        sql_rows(
            &install.memory_db(),
            "SELECT alias FROM agents ORDER BY alias"
        )
        .join("\n")
    ));
    out.push_str(&format!(
        "== sessions\n{}\n",
        sql_rows(&install.sessions_db(), "SELECT * FROM sessions ORDER BY 1")
            .into_iter()
            .chain(sql_rows(
                &install.sessions_db(),
                "SELECT * FROM messages ORDER BY 2, 1"
            ))
            .collect::<Vec<_>>()
            .join("\n")
    ));
    out.push_str(&format!(
        "== acp\n{}\n{}\n",
        sql_rows(
            &install.acp_sessions_db(),
            "SELECT * FROM acp_sessions ORDER BY 1"
        )
        .join("\n"),
        sql_rows(
            &install.acp_sessions_db(),
            "SELECT * FROM acp_transcript ORDER BY 1, 2"
        )
        .join("\n")
    ));
    out.push_str(&format!(
        "== costs\n{}\n",
        fs::read_to_string(install.costs_ledger()).unwrap_or_default()
    ));
    let journal: Vec<String> = fs::read_dir(install.lifecycle_journal_dir())
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    out.push_str(&format!("== journal\n{journal:?}\n"));
    out.replace(&root.display().to_string(), "<ROOT>")
}

/// Message rows without their storage sequence number (a global rowid; order within a
/// session is what a restore keeps).
fn without_seq(state: &str) -> String {
    state
        .lines()
        .map(|l| match l.split_once('|') {
            Some((first, rest))
                if first.starts_with("Integer(") && rest.starts_with("Text(\"chat-") =>
            {
                rest.to_string()
            }
            _ => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Session rows carry `updated_at`, which an operation sets to its own time; drop that column
/// where two runs are compared.
fn without_times(state: &str) -> String {
    // Timestamps of this year written by the operation itself (session updated_at).
    state
        .lines()
        .map(|l| {
            if l.contains("Text(\"20") {
                l.split('|')
                    .filter(|f| !f.contains("Text(\"20"))
                    .collect::<Vec<_>>()
                    .join("|")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ok(root: &TempRoot, args: &[&str]) -> Result<String, Box<dyn std::error::Error>> {
    let out = root.run(bin(), args)?;
    let (stdout, stderr) = text(&out);
    if !out.status.success() {
        return Err(format!("warren {args:?} failed: {stdout}{stderr}").into());
    }
    Ok(stdout)
}

fn config_of(root: &TempRoot) -> Result<toml::Value, Box<dyn std::error::Error>> {
    Ok(toml::from_str(&root.read_config()?)?)
}

#[test]
fn rename_with_a_grant_graph_keeps_every_grant_pointing_at_the_right_agent_life3() -> R {
    let root = template(3, 2)?;
    ok(&root, &["agents", "rename", "b", "bee"])?;
    ok(&root, &["agents", "rename", "c", "sea"])?;
    let cfg = config_of(&root)?;
    let agents = &cfg["agents"];
    assert!(agents.get("b").is_none() && agents.get("c").is_none());
    assert_eq!(
        agents["a"]["workspace"]["access"]["bee"].as_str(),
        Some("Read")
    );
    assert_eq!(
        agents["a"]["memory"]["read_memory_from"],
        toml::Value::Array(vec!["bee".into()])
    );
    assert_eq!(agents["bee"]["model"].as_str(), Some("mb"));
    assert_eq!(
        agents["bee"]["workspace"]["access"]["sea"].as_str(),
        Some("ReadWrite")
    );
    assert_eq!(
        agents["bee"]["memory"]["read_memory_from"][0]["agent"].as_str(),
        Some("sea")
    );
    // Workspace, memory, sessions, ACP (with cwd) and costs all follow.
    let s = state(root.path());
    assert!(s.contains("agents/bee/workspace/notes.txt"), "{s}");
    assert!(!s.contains("\"agents/b/"), "{s}");
    assert!(s.contains("Text(\"bee\")|"), "{s}");
    assert!(s.contains("<ROOT>/agents/bee/workspace/sub"), "{s}");
    assert!(s.contains(r#""agent":"bee""#), "{s}");
    // `default` is reserved on every surface.
    for args in [
        &["agents", "rename", "a", "default"][..],
        &["agents", "rename", "default", "x"][..],
        &["agents", "delete", "default", "--yes"][..],
    ] {
        let out = root.run(bin(), args)?;
        assert!(!out.status.success());
        assert!(text(&out).1.contains("reserved"), "{}", text(&out).1);
    }
    Ok(())
}

#[test]
fn a_crash_at_every_rename_step_converges_to_the_uninterrupted_state_beyond3() -> R {
    let seeded = template(4, 3)?;
    let reference = copy_of(&seeded)?;
    ok(&reference, &["agents", "rename", "b", "b2"])?;
    let want = without_times(&state(reference.path()));
    let before = without_times(&state(copy_of(&seeded)?.path()));
    for point in RENAME_CRASH_POINTS {
        let run = copy_of(&seeded)?;
        let args = ["agents", "rename", "b", "b2"];
        run_until_crash(run.warren(bin(), &args), point)?;
        // The next lifecycle call converges the journal (the daemon does the same at start).
        resumed(&run, point, &before, &args, without_times)?;
        assert_eq!(
            without_times(&state(run.path())),
            want,
            "after a crash at {point}"
        );
    }
    // A cross-filesystem move (copy + fsync + remove) ends in the same state.
    let run = copy_of(&seeded)?;
    let out = run
        .warren(bin(), &["agents", "rename", "b", "b2"])
        .env("FAILPOINTS", "lifecycle-force-exdev=return")
        .output()?;
    assert!(out.status.success(), "{}", text(&out).1);
    assert_eq!(without_times(&state(run.path())), want, "EXDEV copy path");
    // Killed at each step of that copy (its markers and the rename between them), then
    // resumed on the same filesystem: the same state.
    for point in WORKSPACE_COPY_CRASH_POINTS {
        let run = copy_of(&seeded)?;
        let out = run
            .warren(bin(), &["agents", "rename", "b", "b2"])
            .env(
                "FAILPOINTS",
                format!("lifecycle-force-exdev=return;{point}=return"),
            )
            .output()?;
        assert!(
            text(&out).1.contains(&format!("failpoint {point} reached")),
            "{point}: {}",
            text(&out).1
        );
        ok(&run, &["agents", "resume"])?;
        assert_eq!(
            without_times(&state(run.path())),
            want,
            "after a crash at {point} of a cross-filesystem move"
        );
    }
    Ok(())
}

/// Crash points before the journal record is durable: the operation never happened, the
/// install is as it was, and running the command again does it.
const BEFORE_JOURNAL: [&str; 2] = [
    "lifecycle-journal-after-temp-write",
    "lifecycle-journal-after-temp-fsync",
];

/// After a crash at `point` and `agents resume`: at a point before the journal the install is
/// unchanged (`before`) and the command is run again.
fn resumed(
    run: &TempRoot,
    point: &str,
    before: &str,
    args: &[&str],
    tidy: fn(&str) -> String,
) -> R {
    ok(run, &["agents", "resume"])?;
    if BEFORE_JOURNAL.contains(&point) {
        assert_eq!(tidy(&state(run.path())), before, "after a crash at {point}");
        ok(run, args)?;
    }
    Ok(())
}

/// The one archive under `data/deleted-agents/`.
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

/// Issue 15 §2: a kill at any step of a delete — every write, fsync and rename of the
/// journal, the config, each store's export and the manifest — converges on `agents resume`
/// to the uninterrupted state, and the archive it leaves restores (resume → restore).
#[test]
fn a_crash_at_every_delete_step_converges_and_stays_restorable_beyond3() -> R {
    let seeded = template(4, 3)?;
    let reference = copy_of(&seeded)?;
    ok(&reference, &["agents", "delete", "b", "--yes"])?;
    let want = without_times(&state(reference.path()));
    assert!(want.contains("b-T/workspace/notes.txt"), "{want}");
    ok(
        &reference,
        &["agents", "restore", &only_archive(&reference)?],
    )?;
    let want_restored = without_seq(&without_times(&state(reference.path())));
    let before = without_times(&state(copy_of(&seeded)?.path()));
    for point in DELETE_CRASH_POINTS {
        let run = copy_of(&seeded)?;
        let args = ["agents", "delete", "b", "--yes"];
        run_until_crash(run.warren(bin(), &args), point)?;
        resumed(&run, point, &before, &args, without_times)?;
        assert_eq!(
            without_times(&state(run.path())),
            want,
            "after a crash at {point}"
        );
        ok(&run, &["agents", "restore", &only_archive(&run)?])
            .map_err(|e| format!("restore after a crash at {point}: {e}"))?;
        assert_eq!(
            without_seq(&without_times(&state(run.path()))),
            want_restored,
            "restored after a crash at {point}"
        );
    }
    Ok(())
}

/// A kill at any step of a restore converges on `agents resume` to the uninterrupted restore.
#[test]
fn a_crash_at_every_restore_step_converges_to_the_uninterrupted_state_beyond3() -> R {
    let deleted = template(4, 3)?;
    ok(&deleted, &["agents", "delete", "b", "--yes"])?;
    let archive = only_archive(&deleted)?;
    let reference = copy_of(&deleted)?;
    ok(&reference, &["agents", "restore", &archive])?;
    let want = without_seq(&without_times(&state(reference.path())));
    let before = without_seq(&without_times(&state(copy_of(&deleted)?.path())));
    for point in RESTORE_CRASH_POINTS {
        let run = copy_of(&deleted)?;
        let args = ["agents", "restore", archive.as_str()];
        run_until_crash(run.warren(bin(), &args), point)?;
        resumed(&run, point, &before, &args, |s| {
            without_seq(&without_times(s))
        })?;
        assert_eq!(
            without_seq(&without_times(&state(run.path()))),
            want,
            "after a crash at {point}"
        );
    }
    Ok(())
}

/// Issue 15 §2, the reported sequence: `agents delete` killed as it renames the manifest temp
/// file, then `agents resume`, then `agents restore`. The killed writer's temp file is swept
/// and never hashed into the manifest; temp files of dead writers in the journal directory
/// and beside the cost ledger are swept too, while a live writer's is left alone.
#[test]
fn a_delete_killed_at_the_manifest_rename_leaves_a_restorable_archive_issue15() -> R {
    let root = template(2, 2)?;
    run_until_crash(
        root.warren(bin(), &["agents", "delete", "b", "--yes"]),
        "lifecycle-manifest-after-temp-fsync",
    )?;
    let install = InstallRoot::at(root.path());
    let archive = install.deleted_agents_dir().join(only_archive(&root)?);
    let temps = |dir: &Path| -> Vec<String> {
        fs::read_dir(dir)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.contains(".tmp-"))
                    .collect()
            })
            .unwrap_or_default()
    };
    let left = temps(&archive);
    assert!(
        left.len() == 1 && left[0].starts_with(".manifest.json.tmp-"),
        "the killed writer's temp file: {left:?}"
    );
    assert!(!archive.join("manifest.json").exists());
    // A writer that died (its pid gone) and one still running (this test's child).
    let mut dead = Command::new("true").spawn()?;
    let dead_pid = dead.id();
    dead.wait()?;
    let mut live = Command::new("sleep").arg("60").spawn()?;
    let journal = install.lifecycle_journal_dir();
    let state_dir = install
        .costs_ledger()
        .parent()
        .map(Path::to_path_buf)
        .ok_or("ledger has no directory")?;
    let dead_journal = journal.join(format!(".x.json.tmp-{dead_pid}-1"));
    let dead_ledger = state_dir.join(format!(".costs.jsonl.tmp-{dead_pid}-1"));
    let live_ledger = state_dir.join(format!(".costs.jsonl.tmp-{}-1", live.id()));
    for p in [&dead_journal, &dead_ledger, &live_ledger] {
        fs::write(p, b"partial")?;
    }

    let resumed = ok(&root, &["agents", "resume"]);
    let live_kept = live_ledger.exists();
    live.kill()?;
    live.wait()?;
    resumed?;
    assert_eq!(temps(&archive), Vec::<String>::new());
    let manifest: serde_json::Value =
        serde_json::from_slice(&fs::read(archive.join("manifest.json"))?)?;
    let files: Vec<&String> = manifest["files"]
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    assert!(
        files.iter().all(|f| !f.contains(".tmp-"))
            && files.iter().any(|f| *f == "stores/memory.json"),
        "{files:?}"
    );
    assert!(!dead_journal.exists(), "dead writer's journal temp swept");
    assert!(!dead_ledger.exists(), "dead writer's ledger temp swept");
    assert!(live_kept, "a live writer's temp file is never swept");

    let out = ok(
        &root,
        &[
            "--json",
            "agents",
            "restore",
            &archive.display().to_string(),
        ],
    )?;
    let report: serde_json::Value = serde_json::from_str(&out)?;
    assert_eq!(report["converged"], true, "{report}");
    assert_eq!(report["counts"]["memory"], 2, "{report}");
    assert!(config_of(&root)?["agents"].get("b").is_some());
    assert!(
        install
            .agent_workspace(&alias("b"))
            .join("notes.txt")
            .exists()
    );
    Ok(())
}

/// An archive whose manifest an older `agents resume` wrote with a killed writer's temp file
/// in it (since removed) still restores: the temp file is no archived data.
#[test]
fn an_archive_whose_manifest_lists_a_swept_temp_file_restores_issue15() -> R {
    let root = template(2, 2)?;
    let out = ok(&root, &["--json", "agents", "delete", "b", "--yes"])?;
    let report: serde_json::Value = serde_json::from_str(&out)?;
    let archive = PathBuf::from(report["archive"].as_str().ok_or("no archive")?);
    let path = archive.join("manifest.json");
    let mut manifest: serde_json::Value = serde_json::from_slice(&fs::read(&path)?)?;
    manifest["files"][".manifest.json.tmp-99999999-1"] = serde_json::Value::from("00");
    fs::write(&path, serde_json::to_vec_pretty(&manifest)?)?;
    ok(
        &root,
        &["agents", "restore", &archive.display().to_string()],
    )?;
    assert!(config_of(&root)?["agents"].get("b").is_some());
    Ok(())
}

#[test]
fn the_next_daemon_start_converges_an_interrupted_delete_beyond3() -> R {
    let seeded = template(2, 2)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let with_port = |root: &TempRoot| -> R {
        let text = root.read_config()?;
        root.write_config(&format!("{text}\n[gateway]\nport = {port}\n"))?;
        Ok(())
    };
    let reference = copy_of(&seeded)?;
    with_port(&reference)?;
    ok(&reference, &["agents", "delete", "b", "--yes"])?;
    let run = copy_of(&seeded)?;
    with_port(&run)?;
    run_until_crash(
        run.warren(bin(), &["agents", "delete", "b", "--yes"]),
        "lifecycle-after-config-persist",
    )?;
    let mut daemon = DaemonChild::spawn(run.warren(bin(), &["daemon"]))?;
    daemon.wait_for("lifecycle journal converged at start", WAIT)?;
    daemon.wait_for("warren daemon ready", WAIT)?;
    daemon.signal("TERM")?;
    daemon.wait(WAIT)?;
    assert_eq!(
        without_times(&state(run.path())),
        without_times(&state(reference.path()))
    );
    Ok(())
}

#[test]
fn delete_then_restore_gives_back_the_same_files_rows_sessions_and_messages_beyond1() -> R {
    let root = template(5, 4)?;
    let before = state(root.path());
    let out = ok(&root, &["--json", "agents", "delete", "b", "--yes"])?;
    let report: serde_json::Value = serde_json::from_str(&out)?;
    assert_eq!(report["converged"], true);
    assert_eq!(report["counts"]["memory"], 5);
    assert_eq!(report["counts"]["sessions"], 2);
    assert_eq!(report["counts"]["acp"], 1);
    let archive = PathBuf::from(report["archive"].as_str().ok_or("no archive")?);
    let manifest: serde_json::Value =
        serde_json::from_slice(&fs::read(archive.join("manifest.json"))?)?;
    assert_eq!(manifest["schema_version"], 1);
    assert!(
        manifest["config_entry"]
            .as_str()
            .unwrap_or("")
            .contains("mb")
    );
    assert!(manifest["deleted_at"].is_string());
    // The ACP export carries the transcript.
    let acp = fs::read_to_string(archive.join("stores/acp.json"))?;
    assert!(acp.contains("fix the bug") && acp.contains("done"), "{acp}");
    // Grants on b were scrubbed; b's state is gone from the live stores.
    let mid = state(root.path());
    assert!(!mid.contains("Text(\"b\")|"), "{mid}");

    // A tampered archive is refused.
    let notes = archive.join("workspace/notes.txt");
    fs::write(&notes, "tampered\n")?;
    let out = root.run(
        bin(),
        &["agents", "restore", archive.to_str().unwrap_or("")],
    )?;
    assert!(!out.status.success());
    assert!(text(&out).1.contains("does not match"), "{}", text(&out).1);
    fs::write(&notes, "b's notes\n")?;

    // The alias taken: refused; then the real restore by archive name.
    ok(&root, &["agents", "add", "b"])?;
    let name = archive.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let out = root.run(bin(), &["agents", "restore", name])?;
    assert!(!out.status.success());
    assert!(text(&out).1.contains("exists"), "{}", text(&out).1);
    ok(&root, &["agents", "delete", "b", "--yes"])?;
    for entry in fs::read_dir(root.path().join("data/agents/_deleted"))? {
        let p = entry?.path();
        if p != archive {
            fs::remove_dir_all(p)?; // the empty b added just now
        }
    }
    let out = ok(&root, &["--json", "agents", "restore", name])?;
    // Grants scrubbed at delete are not restored (they belong to the other agents' entries);
    // the report names them. Put them back to compare everything else.
    let restored: serde_json::Value = serde_json::from_str(&out)?;
    let scrubbed = manifest["scrubbed_references"]
        .as_array()
        .ok_or("no list")?;
    assert!(!scrubbed.is_empty(), "{manifest}");
    assert_eq!(&restored["references"], &manifest["scrubbed_references"]);
    let warned = restored["warnings"].to_string();
    for site in scrubbed {
        assert!(warned.contains(site.as_str().unwrap_or("?")), "{warned}");
    }
    let after = state(root.path());
    let strip = |s: &str| {
        let s = without_seq(s);
        without_times(&s)
            .lines()
            .skip_while(|l| !l.starts_with("== agents/"))
            .take_while(|l| !l.starts_with("== archive"))
            .chain(
                without_times(&s)
                    .lines()
                    .skip_while(|l| !l.starts_with("== memory"))
                    .take_while(|l| !l.starts_with("== journal")),
            )
            .map(str::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(strip(&after), strip(&before));
    let cfg = config_of(&root)?;
    assert_eq!(cfg["agents"]["b"]["model"].as_str(), Some("mb"));
    // The archive is marked restored and cannot be restored twice.
    let out = root.run(bin(), &["agents", "restore", name, "--as", "b3"])?;
    assert!(!out.status.success());
    Ok(())
}

#[test]
fn restore_under_a_new_alias_rewrites_attribution() -> R {
    let root = template(2, 2)?;
    let out = ok(&root, &["--json", "agents", "delete", "b", "--yes"])?;
    let report: serde_json::Value = serde_json::from_str(&out)?;
    let archive = report["archive"].as_str().ok_or("no archive")?.to_string();
    ok(&root, &["agents", "restore", &archive, "--as", "bee"])?;
    let s = state(root.path());
    assert!(s.contains("agents/bee/workspace/sub/data.bin"), "{s}");
    assert!(s.contains("Text(\"bee\")|"), "{s}");
    assert!(s.contains("<ROOT>/agents/bee/workspace/sub"), "{s}");
    assert_eq!(
        config_of(&root)?["agents"]["bee"]["model"].as_str(),
        Some("mb")
    );
    Ok(())
}

#[test]
fn delete_is_refused_on_a_live_acp_session_and_on_a_hard_reference_life4() -> R {
    let root = template(1, 1)?;
    let acp = AcpSessionStore::open(&InstallRoot::at(root.path()))?;
    acp.create(&NewAcpSession {
        id: "live".into(),
        agent: alias("b"),
        cwd: "/".into(),
        mode: None,
        transcript: None,
    })?;
    drop(acp);
    let before = state(root.path());
    let out = root.run(bin(), &["agents", "delete", "b", "--yes"])?;
    assert!(!out.status.success());
    assert!(
        text(&out).1.contains("live ACP session"),
        "{}",
        text(&out).1
    );
    assert_eq!(state(root.path()), before, "nothing changed");
    assert!(
        text(&out).1.contains("--end-sessions"),
        "the refusal says how to end them: {}",
        text(&out).1
    );
    // With no `warren acp` of b running, the operator ends the stored session; delete proceeds.
    let ended = ok(&root, &["acp", "-a", "b", "--end-sessions"])?;
    assert!(ended.contains("ended 1 ACP session"), "{ended}");
    ok(&root, &["agents", "delete", "b", "--yes"])?;

    // Unreadable ACP store: fail closed.
    let root = template(1, 1)?;
    let db = InstallRoot::at(root.path()).acp_sessions_db();
    fs::remove_file(&db)?;
    fs::create_dir_all(&db)?;
    let out = root.run(bin(), &["agents", "delete", "b", "--yes"])?;
    assert!(!out.status.success());
    assert!(text(&out).1.contains("fail closed"), "{}", text(&out).1);

    // runtime.default_agent is a hard reference.
    let root = template(1, 1)?;
    let cfg = root.read_config()?;
    root.write_config(&format!("[runtime]\ndefault_agent = \"c\"\n\n{cfg}"))?;
    let out = root.run(bin(), &["agents", "delete", "c", "--yes"])?;
    assert!(!out.status.success());
    assert!(
        text(&out).1.contains("runtime.default_agent"),
        "{}",
        text(&out).1
    );
    let plan = ok(&root, &["--json", "agents", "delete", "c", "--dry-run"])?;
    let plan: serde_json::Value = serde_json::from_str(&plan)?;
    assert_eq!(plan["allowed"], false);
    // ...and rename rewrites it.
    ok(&root, &["agents", "rename", "c", "sea"])?;
    assert_eq!(
        config_of(&root)?["runtime"]["default_agent"].as_str(),
        Some("sea")
    );
    Ok(())
}

#[test]
fn an_unwritable_archive_purges_nothing_and_warns_life5() -> R {
    let root = template(2, 2)?;
    let install = InstallRoot::at(root.path());
    fs::create_dir_all(install.deleted_agents_dir().parent().ok_or("no parent")?)?;
    fs::write(
        install.deleted_agents_dir(),
        "a file where the archive directory goes",
    )?;
    let before = state(root.path());
    let out = root.run(bin(), &["--json", "agents", "delete", "b", "--yes"])?;
    assert!(!out.status.success(), "not converged => non-zero exit");
    let report: serde_json::Value = serde_json::from_str(&text(&out).0)?;
    let warnings = report["warnings"].to_string();
    assert!(
        warnings.contains("nothing was archived or purged"),
        "{warnings}"
    );
    // Config changed (persisted first, LIFE-2); every store and the workspace are untouched.
    let after = state(root.path());
    let section = |s: &str, name: &str| {
        s.split("== ")
            .find(|p| p.starts_with(name))
            .unwrap_or("")
            .to_string()
    };
    for name in ["agents/", "memory", "sessions", "acp", "costs"] {
        assert_eq!(section(&after, name), section(&before, name), "{name}");
    }
    // The warning is in the runtime trace too (never only in a log).
    let trace = fs::read_to_string(install.runtime_trace())?;
    assert!(
        trace.contains("\"kind\":\"lifecycle\"")
            && trace.contains("nothing was archived or purged"),
        "{trace}"
    );
    // Once the archive can be written, the journal converges.
    fs::remove_file(install.deleted_agents_dir())?;
    ok(&root, &["agents", "resume"])?;
    assert!(state(root.path()).contains("== journal\n[]"));
    Ok(())
}

#[test]
fn rename_refuses_a_non_empty_target_workspace() -> R {
    let root = template(1, 1)?;
    let ws = InstallRoot::at(root.path()).agent_workspace(&alias("zz"));
    fs::create_dir_all(&ws)?;
    fs::write(ws.join("keep.txt"), "mine")?;
    let before = state(root.path());
    let out = root.run(bin(), &["agents", "rename", "b", "zz"])?;
    assert!(!out.status.success());
    assert!(text(&out).1.contains("not empty"), "{}", text(&out).1);
    assert_eq!(state(root.path()), before);
    Ok(())
}

#[test]
fn a_memory_store_that_is_down_is_left_untouched_and_reported() -> R {
    let root = TempRoot::new()?;
    root.write_config(&format!(
        "{CONFIG}\n[memory]\nbackend = \"postgres\"\n\n[memory.postgres]\nurl = \"postgres://nobody@127.0.0.1:1/none\"\n"
    ))?;
    let out = root.run(bin(), &["--json", "agents", "delete", "c", "--yes"])?;
    assert!(!out.status.success());
    let report: serde_json::Value = serde_json::from_str(&text(&out).0)?;
    let warnings = report["warnings"].to_string();
    assert!(warnings.contains("memory: export failed"), "{warnings}");
    assert!(warnings.contains("left untouched"), "{warnings}");
    // The other stores converged; the journal keeps the operation for a retry.
    assert_eq!(report["counts"]["sessions"], 0);
    let journal = InstallRoot::at(root.path()).lifecycle_journal_dir();
    assert_eq!(fs::read_dir(journal)?.count(), 1);
    Ok(())
}

#[test]
fn the_cli_and_the_gateway_reach_the_same_end_state_life1() -> R {
    let seeded = template(3, 2)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let text_cfg = seeded.read_config()?;
    seeded.write_config(&format!("{text_cfg}\n[gateway]\nport = {port}\n"))?;

    // Without a daemon: the CLI works on the root itself.
    let cli = copy_of(&seeded)?;
    ok(&cli, &["agents", "rename", "b", "bee"])?;
    ok(&cli, &["agents", "delete", "c", "--yes"])?;
    let want = without_times(&state(cli.path()));

    // Through the gateway's token routes.
    let gw = copy_of(&seeded)?;
    let mut daemon = DaemonChild::spawn(gw.warren(bin(), &["daemon"]))?;
    daemon.wait_for("warren daemon ready", WAIT)?;
    let token = pair(&gw, bin(), port, "t")?;
    assert_eq!(
        http(
            port,
            "POST",
            "/api/agents/b/rename",
            None,
            r#"{"to":"bee"}"#
        )?
        .0,
        401
    );
    let (status, body) = http(
        port,
        "POST",
        "/api/agents/b/rename",
        Some(&token),
        r#"{"to":"bee"}"#,
    )?;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["converged"], true, "{body}");
    // The running daemon reloaded: the new alias serves at once, the old one is gone.
    assert!(body["reloaded_generation"].is_u64(), "{body}");
    // The reload answers once the new config is published; the old generation may serve a
    // last request or two while it drains, and one accepted just as it stops is closed
    // unanswered (an idempotent GET is retried, as HTTP clients do). The listening socket is
    // handed from generation to generation, so no connection is refused (STATE-19).
    let started = std::time::Instant::now();
    loop {
        let (status, agents) = match http(port, "GET", "/api/agents", Some(&token), "") {
            Ok(answer) => answer,
            Err(e) if e.kind() != std::io::ErrorKind::ConnectionRefused => {
                assert!(started.elapsed() < WAIT, "{e}");
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        assert_eq!(status, 200, "{agents}");
        let aliases: Vec<&str> = agents["agents"]
            .as_array()
            .map(|a| a.iter().filter_map(|x| x["alias"].as_str()).collect())
            .unwrap_or_default();
        if aliases.contains(&"bee") && !aliases.contains(&"b") {
            break;
        }
        assert!(
            started.elapsed() < WAIT,
            "the daemon still serves 'b': {agents}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let (status, plan) = http(port, "GET", "/api/agents/c/delete-plan", Some(&token), "")?;
    assert_eq!(status, 200, "{plan}");
    assert_eq!(plan["allowed"], true, "{plan}");
    let (_, doc) = http(port, "GET", "/api/openapi.json", Some(&token), "")?;
    for path in [
        "/api/agents/{alias}/rename",
        "/api/agents/{alias}",
        "/api/agents/{alias}/delete-plan",
        "/api/agents/restore",
    ] {
        assert!(
            doc["paths"].get(path).is_some(),
            "{path} missing from OpenAPI"
        );
    }
    let (status, body) = http(port, "DELETE", "/api/agents/default", Some(&token), "")?;
    assert_eq!(status, 400, "{body}");
    let (status, body) = http(port, "DELETE", "/api/agents/c", Some(&token), "")?;
    assert_eq!(status, 200, "{body}");
    daemon.signal("TERM")?;
    daemon.wait(WAIT)?;
    // Pairing added a token to config; compare everything but config and devices.
    let strip_config = |s: &str| s.split("== agents/").nth(1).unwrap_or("").to_string();
    assert_eq!(
        strip_config(&without_times(&state(gw.path()))),
        strip_config(&want)
    );

    // Restore through the gateway; a live ACP session refuses a delete with 409.
    let mut daemon = DaemonChild::spawn(gw.warren(bin(), &["daemon"]))?;
    daemon.wait_for("warren daemon ready", WAIT)?;
    let archive = fs::read_dir(InstallRoot::at(gw.path()).deleted_agents_dir())?
        .next()
        .ok_or("no archive")??
        .file_name()
        .to_string_lossy()
        .into_owned();
    let (status, body) = http(
        port,
        "POST",
        "/api/agents/restore",
        Some(&token),
        &serde_json::json!({"archive": archive}).to_string(),
    )?;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["converged"], true, "{body}");
    assert!(config_of(&gw)?["agents"].get("c").is_some());
    let acp = AcpSessionStore::open(&InstallRoot::at(gw.path()))?;
    acp.create(&NewAcpSession {
        id: "live-a".into(),
        agent: alias("a"),
        cwd: "/".into(),
        mode: None,
        transcript: None,
    })?;
    let (status, body) = http(port, "DELETE", "/api/agents/a", Some(&token), "")?;
    assert_eq!(status, 409, "{body}");
    assert!(body["message"].to_string().contains("live ACP"), "{body}");
    daemon.signal("TERM")?;
    daemon.wait(WAIT)?;

    // The CLI with a daemon running goes through the daemon (admin route).
    let via = copy_of(&seeded)?;
    let mut daemon = DaemonChild::spawn(via.warren(bin(), &["daemon"]))?;
    daemon.wait_for("warren daemon ready", WAIT)?;
    ok(&via, &["agents", "rename", "b", "bee"])?;
    ok(&via, &["agents", "delete", "c", "--yes"])?;
    daemon.signal("TERM")?;
    daemon.wait(WAIT)?;
    assert_eq!(without_times(&state(via.path())), want);
    Ok(())
}

/// How many descriptors process `pid` holds open on `db` (with its `-wal` and `-shm`).
fn open_handles(pid: u32, db: &Path) -> usize {
    let prefix = db.display().to_string();
    fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| fs::read_link(e.path()).ok())
                .filter(|t| t.display().to_string().starts_with(&prefix))
                .count()
        })
        .unwrap_or(0)
}

/// Issue 14 §6: a lifecycle rename inside a running daemon works on the running generation's
/// stores. While the rename is inside its store cascade (held there by a `sleep` failpoint
/// after the sessions and ACP steps), the daemon holds exactly the descriptors of the session and ACP
/// databases it held before: no second SQLite writer, no second import.
#[test]
fn a_rename_inside_a_running_daemon_opens_no_second_session_writer_issue14() -> R {
    let root = template(2, 2)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let text_cfg = root.read_config()?;
    root.write_config(&format!("{text_cfg}\n[gateway]\nport = {port}\n"))?;
    let install = InstallRoot::at(root.path());
    let mut cmd = root.warren(bin(), &["daemon"]);
    cmd.env("FAILPOINTS", "lifecycle-after-acp=sleep(4000)");
    let mut daemon = DaemonChild::spawn(cmd)?;
    daemon.wait_for("chat sessions ready", WAIT)?;
    daemon.wait_for("warren daemon ready", WAIT)?;
    let token = pair(&root, bin(), port, "t")?;
    let pid = daemon.pid();
    let dbs = [install.sessions_db(), install.acp_sessions_db()];
    let before: Vec<usize> = dbs.iter().map(|db| open_handles(pid, db)).collect();
    assert!(
        before.iter().all(|n| *n > 0),
        "the generation's stores are open: {before:?}"
    );

    let request = std::thread::spawn(move || {
        http(
            port,
            "POST",
            "/api/agents/b/rename",
            Some(&token),
            r#"{"to":"bee"}"#,
        )
    });
    // The rename reaches the failpoint within milliseconds and sleeps there 4 s; sampling the
    // first 1.5 s sees only the rename's own handles (the reload it triggers comes after).
    let started = std::time::Instant::now();
    let mut most = before.clone();
    while started.elapsed() < Duration::from_millis(1500) {
        for (m, db) in most.iter_mut().zip(&dbs) {
            *m = (*m).max(open_handles(pid, db));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let (status, body) = request.join().map_err(|_| "request thread panicked")??;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["converged"], true, "{body}");
    assert_eq!(body["counts"]["sessions"], 2, "{body}");
    assert_eq!(
        most, before,
        "descriptors of {dbs:?} while the rename ran (before: {before:?})"
    );
    daemon.signal("TERM")?;
    daemon.wait(WAIT)?;
    Ok(())
}

/// Delete and restore with memory on the real PostgreSQL server (skipped without
/// WARREN_TEST_POSTGRES_URL): rows leave the server only after the export is archived and come
/// back identical.
#[test]
fn delete_and_restore_on_postgres_memory_keep_the_rows_beyond1() -> R {
    let Some(url) = warren_testkit::postgres_url() else {
        return Ok(());
    };
    let schema = format!("lc_{}", std::process::id());
    let root = TempRoot::new()?;
    root.write_config(&format!(
        "{CONFIG}\n[memory]\nbackend = \"postgres\"\n\n[memory.postgres]\nurl = \"{url}\"\nschema = \"{schema}\"\n"
    ))?;
    let install = InstallRoot::at(root.path());
    let config = ConfigStore::load(install.clone())?.snapshot();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let export =
        |who: &str| -> Result<Vec<warren_memory::MemoryEntry>, Box<dyn std::error::Error>> {
            rt.block_on(async {
                let store = MemoryStores::new(install.clone())
                    .store(&config, warren_config::schema::MemoryBackendKind::Postgres)
                    .await?;
                Ok(match store.agent_id(&alias(who), false).await? {
                    Some(id) => store.export_agent(id).await?,
                    None => Vec::new(),
                })
            })
        };
    rt.block_on(async {
        let store = MemoryStores::new(install.clone())
            .store(&config, warren_config::schema::MemoryBackendKind::Postgres)
            .await?;
        let id = store.agent_id(&alias("b"), true).await?.ok_or("no id")?;
        for i in 0..7 {
            let e = NewEntry::new("b", &format!("k{i}"), &format!("pg fact {i}"), None, None)?;
            store.store_with_agent(id.clone(), e).await?;
        }
        Ok::<(), Box<dyn std::error::Error>>(())
    })?;
    let before = export("b")?;
    assert_eq!(before.len(), 7);
    let out = ok(&root, &["--json", "agents", "delete", "b", "--yes"])?;
    let report: serde_json::Value = serde_json::from_str(&out)?;
    assert_eq!(report["counts"]["memory"], 7, "{report}");
    assert!(export("b")?.is_empty());
    ok(&root, &["agents", "rename", "a", "ay"])?;
    ok(
        &root,
        &[
            "agents",
            "restore",
            report["archive"].as_str().ok_or("no archive")?,
        ],
    )?;
    let after = export("b")?;
    let cleanup = rt.block_on(async {
        warren_memory::PostgresStore::new(&url, &schema)?
            .drop_schema()
            .await
    });
    assert_eq!(after, before);
    cleanup?;
    Ok(())
}

/// A delete whose config save never happened is not rolled forward over a config edited since
/// (here: the operator changed something else): the record is dropped with a warning and the
/// agent keeps all its state.
#[test]
fn an_unsaved_delete_is_not_redone_over_a_config_edited_since_beyond3() -> R {
    let root = template(2, 2)?;
    run_until_crash(
        root.warren(bin(), &["agents", "delete", "b", "--yes"]),
        "lifecycle-after-journal",
    )?;
    ok(&root, &["config", "set", "agents.a.model", "m2"])?;
    let before = state(root.path());
    let out = ok(&root, &["--json", "agents", "resume"])?;
    assert!(out.contains("cannot be redone"), "{out}");
    let after = state(root.path());
    assert!(after.contains("agents/b/workspace/notes.txt"), "{after}");
    assert_eq!(
        before.split("== journal").next(),
        after.split("== journal").next(),
        "nothing but the journal changed"
    );
    assert!(after.contains("== journal\n[]"));
    Ok(())
}

/// A workspace that is a link to a directory outside the install root is recorded in the
/// manifest and left where it is; the stores are still archived and purged (LIFE-4).
#[test]
fn a_workspace_outside_the_install_root_is_recorded_not_moved_life4() -> R {
    let root = template(2, 2)?;
    let outside = tempfile::tempdir()?;
    fs::write(outside.path().join("project.txt"), "user project")?;
    let ws = InstallRoot::at(root.path()).agent_workspace(&alias("c"));
    fs::remove_dir_all(&ws)?;
    std::os::unix::fs::symlink(outside.path(), &ws)?;
    let out = ok(&root, &["--json", "agents", "delete", "c", "--yes"])?;
    let report: serde_json::Value = serde_json::from_str(&out)?;
    assert_eq!(report["converged"], true, "{report}");
    assert!(
        report["warnings"].to_string().contains("kept in place"),
        "{report}"
    );
    assert_eq!(
        fs::read_to_string(outside.path().join("project.txt"))?,
        "user project"
    );
    let archive = PathBuf::from(report["archive"].as_str().ok_or("no archive")?);
    assert!(!archive.join("workspace").exists());
    let manifest: serde_json::Value =
        serde_json::from_slice(&fs::read(archive.join("manifest.json"))?)?;
    assert_eq!(manifest["workspace_archived"], false);
    assert!(manifest["notes"].to_string().contains("link"), "{manifest}");
    Ok(())
}
