//! `warren memory ...` end to end: the real binary over a real SQLite store whose rows were
//! written through agents' scoped handles (MEM-1/2/3).

use crate::common::bin;

use pretty_assertions::assert_eq;
use warren_config::{ConfigStore, InstallRoot};
use warren_core::AgentAlias;
use warren_memory::{MemoryStores, NewEntry, create_memory_for_agent};
use warren_testkit::{TempRoot, text};

type R = Result<(), Box<dyn std::error::Error>>;

fn ok(root: &TempRoot, args: &[&str]) -> Result<String, Box<dyn std::error::Error>> {
    let out = root.run(bin(), args)?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "warren {args:?} failed: {stderr}");
    Ok(stdout)
}

fn seed(root: &TempRoot, rows: &[(&str, &str, &str, &str)]) -> R {
    let install = InstallRoot::at(root.path());
    let config = ConfigStore::load(install.clone())?.snapshot();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let stores = MemoryStores::new(install);
        for (agent, key, content, category) in rows {
            let mem = create_memory_for_agent(&stores, &config, &AgentAlias::new(*agent)?).await?;
            mem.store(NewEntry::new(agent, key, content, Some(category), None)?)
                .await?;
        }
        Ok(())
    })
}

#[test]
fn list_recall_show_forget_are_scoped_to_the_agent() -> R {
    let root = TempRoot::new()?;
    ok(&root, &["init"])?;
    ok(&root, &["agents", "add", "research"])?;
    ok(&root, &["agents", "add", "ops"])?;
    ok(
        &root,
        &[
            "config",
            "set",
            "agents.main.memory.read_memory_from",
            r#"[{ agent = "research", categories = ["findings"] }]"#,
        ],
    )?;
    seed(
        &root,
        &[
            ("main", "plan", "ship the memory feature", "core"),
            ("research", "paper", "memory isolation survey", "findings"),
            ("research", "draft", "memory gossip", "drafts"),
            ("ops", "pager", "memory alert runbook", "core"),
        ],
    )?;

    let list = ok(&root, &["memory", "list", "--agent", "main"])?;
    assert!(list.contains("plan") && !list.contains("paper"), "{list}");

    let json: serde_json::Value = serde_json::from_str(&ok(
        &root,
        &["--json", "memory", "recall", "--agent", "main", "memory"],
    )?)?;
    let mut seen: Vec<(String, String)> = json
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| (e["agent"].to_string(), e["key"].to_string()))
                .collect()
        })
        .unwrap_or_default();
    seen.sort();
    assert_eq!(
        seen,
        vec![
            ("\"main\"".into(), "\"plan\"".into()),
            ("\"research\"".into(), "\"paper\"".into())
        ],
        "own rows plus the granted category only"
    );

    let show = ok(&root, &["memory", "show", "--agent", "ops", "pager"])?;
    assert!(show.contains("memory alert runbook"), "{show}");

    // main cannot delete ops's row: it answers "no such key" like any absent key.
    let out = root.run(bin(), &["memory", "forget", "--agent", "main", "pager"])?;
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.starts_with("error: agent 'main' has no memory with key 'pager'"),
        "{stderr}"
    );
    ok(&root, &["memory", "forget", "--agent", "ops", "pager"])?;
    assert!(ok(&root, &["memory", "list", "--agent", "ops"])?.contains("no memories"));

    let out = root.run(bin(), &["memory", "list", "--agent", "ghost"])?;
    assert!(text(&out).1.contains("agent 'ghost' is not configured"));
    Ok(())
}

#[test]
fn config_set_refuses_to_move_an_agent_that_wrote_mem9() -> R {
    let root = TempRoot::new()?;
    ok(&root, &["init"])?;
    seed(&root, &[("main", "k", "a fact", "core")])?;
    let before = root.read_config()?;
    let out = root.run(
        bin(),
        &["config", "set", "agents.main.memory.backend", "markdown"],
    )?;
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("locked to sqlite (MEM-9)") && stderr.contains("memory.db"),
        "{stderr}"
    );
    assert_eq!(root.read_config()?, before, "nothing written");
    // A hand edit is caught by `config validate`.
    std::fs::write(
        root.config_path(),
        format!("{before}\n[agents.main.memory]\nbackend = \"none\"\n"),
    )?;
    let out = root.run(bin(), &["config", "validate"])?;
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).1.contains("MEM-9"), "{}", text(&out).1);
    Ok(())
}
