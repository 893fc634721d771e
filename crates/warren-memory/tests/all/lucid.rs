//! The Lucid backend (issue 20 §2): SQLite is the source of truth and the `lucid` CLI an
//! enrichment. A fake `lucid` executable speaks the real CLI's format (argv `store "<key>:
//! <content>" --type=<t> --project=<dir>` and `context "<query>" --budget=<n> --project=<dir>`,
//! a `<lucid-context>` block of `- [label] content` lines on stdout). A missing, failing or
//! hanging `lucid` degrades to SQLite only, with a warning in the health report.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{Fixture, R, cats, entry, pairs, seen};
use pretty_assertions::assert_eq;
use warren_config::schema::MemoryBackendKind;
use warren_memory::RecallQuery;

/// A fake `lucid`: logs its argv, appends stored text to `<project>/stored`, and answers
/// `context` with every stored line plus one line of its own.
fn fake_lucid(dir: &Path) -> Result<(PathBuf, PathBuf), Box<dyn std::error::Error>> {
    let log = dir.join("argv.log");
    let bin = dir.join("lucid");
    warren_testkit::write_executable(
        &bin,
        &format!(
            r#"#!/bin/sh
printf '%s\n' "$*" >> '{log}'
cmd="$1"; text="$2"; shift 2
for a in "$@"; do case "$a" in --project=*) project="${{a#--project=}}";; esac; done
case "$cmd" in
  store) printf '%s\n' "$text" >> "$project/stored" ;;
  context)
    echo "Lucid context for: $text"
    echo "<lucid-context>"
    [ -f "$project/stored" ] && sed 's/^/- [decision] /' "$project/stored"
    echo "- [learning] lucid recalls a note about $text"
    echo "</lucid-context>"
    ;;
  *) echo "unknown command $cmd" >&2; exit 2 ;;
esac
"#,
            log = log.display()
        ),
    )?;
    Ok((bin, log))
}

fn lucid_fixture(
    agents: &[(&str, Vec<warren_config::schema::MemoryGrant>)],
    command: &Path,
) -> Result<Fixture, Box<dyn std::error::Error>> {
    let mut fx = Fixture::new(MemoryBackendKind::Lucid, agents)?;
    fx.config.memory.lucid.command = command.display().to_string();
    Ok(fx)
}

#[tokio::test]
async fn lucid_enriches_recall_while_sqlite_stays_the_truth() -> R {
    let dir = tempfile::tempdir()?;
    let (bin, log) = fake_lucid(dir.path())?;
    let fx = lucid_fixture(
        &[
            ("a", vec![]),
            ("b", vec![]),
            ("c", vec![cats("a", &["core"])]),
        ],
        &bin,
    )?;
    let a = fx.mem("a").await?;
    a.store(entry("a", "tabs", "use tabs for indentation", "core"))
        .await?;
    let argv = std::fs::read_to_string(&log)?;
    let project = fx.root.memory_dir().join("lucid").join("a");
    assert_eq!(
        argv.trim(),
        format!(
            "store tabs: use tabs for indentation --type=decision --project={}",
            project.display()
        )
    );

    let hits = a.recall(RecallQuery::new("indentation", 5)).await?;
    let got: Vec<(&str, &str, &str)> = hits
        .iter()
        .map(|h| {
            (
                h.entry.agent.as_str(),
                h.entry.key.as_str(),
                h.entry.content.as_str(),
            )
        })
        .collect();
    // SQLite's row first; Lucid's own line after it; Lucid's copy of the SQLite row is not
    // shown twice.
    assert_eq!(
        got,
        vec![
            ("a", "tabs", "use tabs for indentation"),
            ("a", "lucid_1", "lucid recalls a note about indentation"),
        ]
    );
    assert!(std::fs::read_to_string(&log)?.contains(&format!(
        "context indentation --budget=200 --project={}",
        project.display()
    )));
    // A full page from SQLite: Lucid is not asked.
    let calls = std::fs::read_to_string(&log)?.lines().count();
    assert_eq!(
        seen(a.as_ref(), "indentation", 1).await?,
        pairs(&[("a", "tabs")])
    );
    assert_eq!(std::fs::read_to_string(&log)?.lines().count(), calls);

    // Scope: b has no grant (sees nothing, its own project is empty); c's grant on a is
    // category-limited, so c gets a's SQLite rows of that category but never Lucid's lines.
    assert_eq!(
        seen(fx.mem("b").await?.as_ref(), "indentation", 5).await?,
        pairs(&[])
    );
    assert_eq!(
        seen(fx.mem("c").await?.as_ref(), "indentation", 5).await?,
        pairs(&[("a", "tabs")])
    );
    let health = fx.stores.health(&fx.config).await;
    assert_eq!(health["status"], "ok", "{health}");

    // A purge (agent delete) removes the Lucid project with the rows: a later agent of the
    // same alias starts without the old enrichment.
    assert!(project.is_dir());
    assert_eq!(a.purge().await?, 1);
    assert!(!project.exists());
    Ok(())
}

#[tokio::test]
async fn failing_missing_or_hanging_lucid_degrades_to_sqlite_with_a_health_warning() -> R {
    let dir = tempfile::tempdir()?;
    let failing = dir.path().join("lucid-failing");
    warren_testkit::write_executable(
        &failing,
        "#!/bin/sh\necho 'lucid: database is locked' >&2\nexit 1\n",
    )?;
    let hanging = dir.path().join("lucid-hanging");
    warren_testkit::write_executable(&hanging, "#!/bin/sh\nexec sleep 30\n")?;
    let missing = dir.path().join("no-such-lucid");

    for (command, reason) in [
        (&failing, "database is locked"),
        (&missing, "not found"),
        (&hanging, "killed"),
    ] {
        let mut fx = lucid_fixture(&[("a", vec![])], command)?;
        fx.config.memory.lucid.store_timeout_ms = 300;
        fx.config.memory.lucid.recall_timeout_ms = 300;
        let a = fx.mem("a").await?;
        let started = Instant::now();
        a.store(entry("a", "k", "a durable fact", "core")).await?;
        assert!(started.elapsed() < Duration::from_secs(5), "{reason}");
        assert_eq!(
            seen(a.as_ref(), "durable", 5).await?,
            pairs(&[("a", "k")]),
            "{reason}"
        );
        assert_eq!(
            a.get("k".into()).await?.map(|e| e.content),
            Some("a durable fact".to_string())
        );
        let health = fx.stores.health(&fx.config).await;
        assert_eq!(health["status"], "warning", "{reason}: {health}");
        let warning = health["lucid"]["warning"].as_str().unwrap_or_default();
        assert!(
            warning.contains(reason) && warning.contains("SQLite only"),
            "{reason}: {health}"
        );
    }
    Ok(())
}
