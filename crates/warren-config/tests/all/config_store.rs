//! ConfigStore behaviour a user notices: dirty-path saves keep the file, bad edits change
//! nothing, stale and unbound writes are refused, writers serialise, secrets stay encrypted.
//! (CFG-1..7, STATE-1/2)

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use pretty_assertions::assert_eq;
use warren_config::{Config, ConfigError, ConfigStore, InstallRoot, KeyPath};

type R = Result<(), Box<dyn std::error::Error>>;

const USER_CONFIG: &str = r#"# my warren config -- hand written, keep my comments!
[agents.main]
model   =   "gpt-4o"     # aligned on purpose
risk_profile = "default"

[agents.research]   # the reader
model = "claude"

[gateway]
port = 1111 # chosen by ops
bind = "127.0.0.1"

# trailing note
"#;

fn root_with(text: &str) -> Result<(tempfile::TempDir, InstallRoot), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let root = InstallRoot::at(dir.path());
    root.ensure_layout()?;
    fs::write(root.config_file(), text)?;
    Ok((dir, root))
}

fn key(s: &str) -> KeyPath {
    s.parse().unwrap_or_default()
}

#[test]
fn save_rewrites_only_the_changed_key_cfg5() -> R {
    let (_d, root) = root_with(USER_CONFIG)?;
    let store = ConfigStore::load(root.clone())?;
    let mut txn = store.write_blocking()?;
    txn.set_from_str(&key("gateway.port"), "2222")?;
    let outcome = txn.commit()?;
    assert_eq!(outcome.generation, 2);
    assert_eq!(outcome.changed, vec!["gateway.port".to_string()]);
    let expected =
        USER_CONFIG.replace("port = 1111 # chosen by ops", "port = 2222 # chosen by ops");
    assert_eq!(fs::read_to_string(root.config_file())?, expected);
    assert_eq!(
        fs::read_to_string(root.config_backup())?,
        USER_CONFIG,
        "previous file kept as .bak"
    );
    assert_eq!(
        fs::metadata(root.config_file())?.permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(store.snapshot().gateway.port, 2222);
    Ok(())
}

#[test]
fn setting_a_known_absent_key_creates_it() -> R {
    let (_d, root) = root_with("[agents.main]\n")?;
    let store = ConfigStore::load(root.clone())?;
    let mut txn = store.write_blocking()?;
    txn.set_from_str(&key("gateway.port"), "4242")?;
    txn.set_from_str(
        &key("agents.main.workspace.unrestricted_filesystem"),
        "true",
    )?;
    txn.commit()?;
    let reloaded = ConfigStore::load(root)?;
    assert_eq!(reloaded.snapshot().gateway.port, 4242);
    assert!(
        reloaded.snapshot().agents["main"]
            .workspace
            .unrestricted_filesystem
    );
    Ok(())
}

#[test]
fn text_values_stay_strings_even_when_they_look_like_numbers() -> R {
    let (_d, root) = root_with("[agents.main]\n")?;
    let store = ConfigStore::load(root)?;
    let mut txn = store.write_blocking()?;
    txn.set_from_str(&key("agents.main.model"), "123")?;
    txn.commit()?;
    assert_eq!(
        store.snapshot().agents["main"].model.as_deref(),
        Some("123")
    );
    Ok(())
}

#[test]
fn bad_edits_change_nothing_cfg7() -> R {
    let (_d, root) = root_with(USER_CONFIG)?;
    let store = ConfigStore::load(root.clone())?;
    let cases = [
        ("gateway.prot", "1", "unknown key `prot`"),
        ("gateway.port", "not-a-port", "invalid type"),
        ("gateway.port", "70000", "gateway.port"),
        ("agents.\"a/b\".model", "x", "contains '/'"),
        ("agents.default.model", "x", "reserved"),
        (
            "agents.main.workspace.access.nobody",
            "Read",
            "does not exist",
        ),
        (
            "agents.main.workspace.access.research",
            "Rea",
            "did you mean `Read`?",
        ),
        (
            "agents.main.memory.read_memory_from",
            "[\"ghost\"]",
            "does not exist",
        ),
    ];
    for (path, value, expected) in cases {
        let mut txn = store.write_blocking()?;
        let err = txn
            .set_from_str(&key(path), value)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains(expected),
            "set {path} = {value}: expected {expected:?} in {err:?}"
        );
        assert!(err.contains("config.toml"), "error names the file: {err}");
        assert_eq!(
            txn.commit()?.generation,
            1,
            "nothing dirty, nothing written"
        );
    }
    assert_eq!(fs::read_to_string(root.config_file())?, USER_CONFIG);
    assert!(!root.config_backup().exists());
    assert_eq!(store.generation(), 1);
    Ok(())
}

#[test]
fn validation_errors_name_key_line_and_column_cfg7() -> R {
    let (_d, root) = root_with("[agents.main]\nmodel = \"x\"\n\n[gateway]\nprot = 8080\n")?;
    let err = ConfigStore::load(root.clone())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    let file = root.config_file();
    assert_eq!(
        err,
        format!(
            "{}:5:1: gateway.prot: unknown key `prot` (did you mean `port`?)",
            file.display()
        )
    );

    fs::write(root.config_file(), "[agents.main]\nmodel = \"x\n")?;
    let err = ConfigStore::load(root.clone())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.starts_with(&format!("{}:2:", file.display())) && err.contains("TOML syntax error"),
        "{err}"
    );

    fs::write(
        root.config_file(),
        "[agents.main]\n[agents.ops]\n[agents.main]\n",
    )?;
    let err = ConfigStore::load(root.clone())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains(":3:") && err.contains("duplicate key") && err.contains("only once"),
        "{err}"
    );

    fs::write(
        root.config_file(),
        "[agents.main.workspace.access]\nops = \"Read\"\n[agents.main.memory]\nread_memory_from = [\"main\"]\n",
    )?;
    match ConfigStore::load(root) {
        Err(ConfigError::Invalid { problems, .. }) => {
            let keys: Vec<_> = problems
                .iter()
                .map(|p| (p.key.clone().unwrap_or_default(), p.position))
                .collect();
            assert_eq!(
                keys,
                vec![
                    ("agents.main.workspace.access.ops".to_string(), Some((2, 1))),
                    (
                        "agents.main.memory.read_memory_from[0]".to_string(),
                        Some((4, 21))
                    ),
                ],
                "every problem is reported, each at its line"
            );
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
    Ok(())
}

#[test]
fn cross_backend_and_markdown_category_grants_are_rejected_mem4_mem7() -> R {
    let (_d, root) = root_with(
        "[agents.a.memory]\nbackend = \"markdown\"\nread_memory_from = [{ agent = \"b\", categories = [\"x\"] }, \"c\"]\n\
         [agents.b.memory]\nbackend = \"markdown\"\n[agents.c.memory]\nbackend = \"sqlite\"\n",
    )?;
    let err = ConfigStore::load(root)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("read_memory_from[0]") && err.contains("MEM-4"),
        "{err}"
    );
    assert!(
        err.contains("read_memory_from[1]") && err.contains("MEM-7"),
        "{err}"
    );
    Ok(())
}

#[test]
fn unbound_config_never_overwrites_a_real_file() -> R {
    // The reference implementation once replaced a 109 KB config with a 702-byte default.
    let big: String = (0..3000)
        .map(|i| format!("# user line {i}\n"))
        .collect::<String>()
        + "[agents.main]\n";
    let (_d, root) = root_with(&big)?;
    let store = ConfigStore::unbound(root.clone(), Config::default());
    let mut txn = store.write_blocking()?;
    txn.add_agent(&"main".parse()?, &[])?;
    txn.set_from_str(&key("gateway.port"), "9999")?;
    assert!(matches!(txn.commit(), Err(ConfigError::Unbound)));
    assert_eq!(fs::read_to_string(root.config_file())?, big);
    Ok(())
}

#[test]
fn a_write_built_on_a_stale_read_is_refused_cfg2() -> R {
    let (_d, root) = root_with(USER_CONFIG)?;
    let daemon_view = ConfigStore::load(root.clone())?;
    // Another process (here: another store) changes the file.
    let cli_view = ConfigStore::load(root.clone())?;
    let mut txn = cli_view.write_blocking()?;
    txn.set_from_str(&key("gateway.port"), "3333")?;
    txn.commit()?;
    let err = daemon_view.write_blocking().err();
    assert!(
        matches!(err, Some(ConfigError::Stale { generation: 1, .. })),
        "{err:?}"
    );
    assert_eq!(daemon_view.reload_blocking()?, 2);
    assert_eq!(daemon_view.snapshot().gateway.port, 3333);
    Ok(())
}

/// What `warren config set` uses (issue 15 §1, §3): a write onto the file as it is under the
/// lock keeps another writer's change instead of refusing as stale; a changed file that does
/// not load is the error and nothing is written.
#[test]
fn a_write_onto_the_latest_file_keeps_the_other_writer_and_refuses_a_broken_file() -> R {
    let (_d, root) = root_with(USER_CONFIG)?;
    let cli_view = ConfigStore::load(root.clone())?;
    let other = ConfigStore::load(root.clone())?;
    let mut txn = other.write_blocking()?;
    txn.set_from_str(&key("gateway.port"), "3333")?;
    txn.commit()?;
    let mut txn = cli_view.write_latest_blocking()?;
    txn.set_from_str(&key("agents.main.model"), "gpt-5")?;
    txn.commit()?;
    let text = fs::read_to_string(root.config_file())?;
    assert!(
        text.contains("port = 3333 # chosen by ops") && text.contains("model =   \"gpt-5\""),
        "both writes landed: {text}"
    );

    let broken = text.replace("port = 3333", "port = \"x\"");
    fs::write(root.config_file(), &broken)?;
    let err = cli_view.write_latest_blocking().err();
    assert!(
        err.as_ref()
            .is_some_and(|e| e.to_string().contains("gateway.port")),
        "{err:?}"
    );
    assert_eq!(
        fs::read_to_string(root.config_file())?,
        broken,
        "nothing written"
    );
    Ok(())
}

#[test]
fn concurrent_writers_serialise_and_lose_nothing_cfg3() -> R {
    let (_d, root) = root_with("[agents.main]\n")?;
    let store = ConfigStore::load(root.clone())?;
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let store = store.clone();
            std::thread::spawn(move || -> Result<u64, ConfigError> {
                let mut txn = store.write_blocking()?;
                txn.set_from_str(
                    &format!("cost.rates.m{i}.input_per_mtok").parse()?,
                    &format!("{i}.5"),
                )?;
                Ok(txn.commit()?.generation)
            })
        })
        .collect();
    let mut generations = Vec::new();
    for t in threads {
        generations.push(t.join().map_err(|_| "writer panicked")??);
    }
    generations.sort_unstable();
    assert_eq!(
        generations,
        (2..=9).collect::<Vec<_>>(),
        "each commit publishes exactly one generation"
    );
    let disk = ConfigStore::load(root)?;
    assert_eq!(disk.snapshot().cost.rates.len(), 8, "no update lost");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_writers_share_the_same_lock_and_readers_keep_their_snapshot() -> R {
    let (_d, root) = root_with("[agents.main]\n")?;
    let store = ConfigStore::load(root)?;
    let before = store.snapshot();
    let mut tasks = Vec::new();
    for i in 0..4u16 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut txn = store.write().await?;
            txn.set_from_str(&"gateway.port".parse()?, &(5000 + i).to_string())?;
            txn.commit().map(|o| o.generation)
        }));
    }
    for t in tasks {
        t.await??;
    }
    assert_eq!(store.generation(), 5);
    assert_eq!(before.generation(), 1);
    assert_eq!(
        before.gateway.port, 42617,
        "a held snapshot never changes under its reader"
    );
    assert!(Arc::strong_count(&before) >= 1);
    Ok(())
}

#[test]
fn secrets_are_encrypted_on_disk_and_untouched_by_unrelated_saves_cfg6() -> R {
    let (_d, root) = root_with(
        "[agents.main]\nprovider = \"openai\"\n\n[providers.openai]\nkind = \"openai\"\n",
    )?;
    let store = ConfigStore::load(root.clone())?;
    let mut txn = store.write_blocking()?;
    txn.set_secret(&key("providers.openai.api_key"), "sk-live-abcdef")?;
    txn.commit()?;
    let disk = fs::read_to_string(root.config_file())?;
    assert!(
        !disk.contains("sk-live-abcdef"),
        "plaintext on disk:\n{disk}"
    );
    let sealed_line = disk
        .lines()
        .find(|l| l.starts_with("api_key = \"enc2:"))
        .map(str::to_owned);
    assert!(sealed_line.is_some(), "{disk}");
    assert_eq!(
        fs::metadata(root.secret_key())?.permissions().mode() & 0o777,
        0o600
    );

    let snapshot = store.snapshot();
    let provider = &snapshot.providers["openai"];
    assert_eq!(
        provider.api_key.as_ref().map(|k| k.expose()),
        Some("sk-live-abcdef")
    );
    assert!(
        !format!("{:?}", snapshot.config()).contains("sk-live"),
        "Debug never prints secrets"
    );

    let mut txn = store.write_blocking()?;
    txn.set_from_str(&key("gateway.port"), "4000")?;
    txn.commit()?;
    let disk2 = fs::read_to_string(root.config_file())?;
    assert_eq!(
        disk2
            .lines()
            .find(|l| l.starts_with("api_key"))
            .map(str::to_owned),
        sealed_line,
        "ciphertext byte-identical"
    );

    let mut txn = store.write_blocking()?;
    let err = txn
        .set_secret(&key("gateway.bind"), "0.0.0.0")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("not a secret field"), "{err}");
    Ok(())
}

#[test]
fn a_missing_symlinked_or_corrupt_key_is_a_clear_error_cfg6() -> R {
    let (_d, root) = root_with("[agents.main]\n[providers.openai]\n")?;
    let store = ConfigStore::load(root.clone())?;
    let mut txn = store.write_blocking()?;
    txn.set_secret(&key("providers.openai.api_key"), "sk-1")?;
    txn.commit()?;
    let key_bytes = fs::read(root.secret_key())?;

    fs::remove_file(root.secret_key())?;
    let err = ConfigStore::load(root.clone())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("providers.openai.api_key")
            && err.contains("cannot be recovered without the original key"),
        "{err}"
    );
    assert!(
        !root.secret_key().exists(),
        "loading never invents a new key"
    );

    let elsewhere = root.root().join("stolen_key");
    fs::write(&elsewhere, &key_bytes)?;
    std::os::unix::fs::symlink(&elsewhere, root.secret_key())?;
    let err = ConfigStore::load(root.clone())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("symlink"), "{err}");

    fs::remove_file(root.secret_key())?;
    fs::write(root.secret_key(), "abcdef\n")?;
    let err = ConfigStore::load(root.clone())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("corrupt") && err.contains("64 hex characters"),
        "{err}"
    );

    fs::write(root.secret_key(), &key_bytes)?;
    assert!(ConfigStore::load(root).is_ok());
    Ok(())
}

#[test]
fn a_failure_before_the_rename_leaves_disk_and_live_config_unchanged_cfg5() -> R {
    let (_d, root) = root_with(USER_CONFIG)?;
    let store = ConfigStore::load(root.clone())?;
    // A non-empty directory where config.toml.bak must go makes the save fail before the rename.
    fs::create_dir(root.config_backup())?;
    fs::write(root.config_backup().join("blocker"), "")?;
    let mut txn = store.write_blocking()?;
    txn.set_from_str(&key("gateway.port"), "2222")?;
    let err = txn
        .commit()
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("cannot save") && err.contains("config.toml"),
        "{err}"
    );
    assert_eq!(fs::read_to_string(root.config_file())?, USER_CONFIG);
    assert_eq!(store.generation(), 1);
    assert_eq!(store.snapshot().gateway.port, 1111);
    Ok(())
}

#[test]
fn reload_with_an_invalid_file_keeps_the_running_generation_state19() -> R {
    let (_d, root) = root_with(USER_CONFIG)?;
    let store = ConfigStore::load(root.clone())?;
    fs::write(root.config_file(), "[gateway]\nport = \"oops\"\n")?;
    let err = store
        .reload_blocking()
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("gateway.port"), "{err}");
    assert_eq!(store.generation(), 1);
    assert_eq!(store.snapshot().gateway.port, 1111);
    fs::write(
        root.config_file(),
        "[agents.main]\n[gateway]\nport = 7777\n",
    )?;
    assert_eq!(store.reload_blocking()?, 2);
    assert_eq!(store.snapshot().gateway.port, 7777);
    Ok(())
}

#[test]
fn add_agent_refuses_duplicates_and_invalid_grants_stay_out() -> R {
    let (_d, root) = root_with(USER_CONFIG)?;
    let store = ConfigStore::load(root.clone())?;
    let mut txn = store.write_blocking()?;
    let research = warren_core::AgentAlias::new("research")?;
    let err = txn
        .add_agent(&research, &[])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("already exists"), "{err}");
    let ops = warren_core::AgentAlias::new("ops")?;
    txn.add_agent(&ops, &[("model", "m1")])?;
    txn.commit()?;
    let text = fs::read_to_string(root.config_file())?;
    assert!(
        text.starts_with(USER_CONFIG.trim_end_matches("# trailing note\n")),
        "existing text kept:\n{text}"
    );
    assert!(
        text.ends_with("# trailing note\n\n[agents.ops]\nmodel = \"m1\"\n"),
        "new table appended:\n{text}"
    );
    Ok(())
}

/// Issue 15 item 6: an empty (0-byte, whitespace- or comment-only) or agent-less config.toml is
/// an error that names the file, at load and at reload; a refused reload keeps the running
/// generation (its agents, its paired tokens) serving.
#[test]
fn an_empty_or_agentless_config_is_refused_at_load_and_reload_cfg7_state19() -> R {
    let cases = [
        ("0-byte", "", "is empty"),
        ("whitespace", " \n\t\n\n", "is empty"),
        (
            "comments",
            "# nothing here yet\n\n# [agents.main]\n",
            "is empty",
        ),
        ("agent-less", "[gateway]\nport = 4242\n", "no agent"),
    ];
    for (what, text, expected) in cases {
        let (_d, root) = root_with(text)?;
        let file = root.config_file().display().to_string();
        let err = ConfigStore::load(root.clone())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.starts_with(&file) && err.contains(expected),
            "{what}: load must fail naming {file}: {err:?}"
        );

        fs::write(root.config_file(), USER_CONFIG)?;
        let store = ConfigStore::load(root.clone())?;
        fs::write(root.config_file(), text)?;
        let err = store
            .reload_blocking()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.starts_with(&file) && err.contains(expected),
            "{what}: reload must fail naming {file}: {err:?}"
        );
        assert_eq!(
            store.generation(),
            1,
            "{what}: the running generation stays"
        );
        assert_eq!(
            store.snapshot().agents.keys().collect::<Vec<_>>(),
            vec!["main", "research"],
            "{what}"
        );
    }
    Ok(())
}

/// An edit may not leave the file without agents either (the next load would refuse it).
#[test]
fn an_edit_that_removes_the_last_agent_is_refused_and_changes_nothing_cfg7() -> R {
    let (_d, root) = root_with("[agents.main]\n\n[gateway]\nport = 1111\n")?;
    let store = ConfigStore::load(root.clone())?;
    let mut txn = store.write_blocking()?;
    txn.remove(&key("agents.main"))?;
    let err = txn
        .commit()
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("no agent"), "{err}");
    assert_eq!(
        fs::read_to_string(root.config_file())?,
        "[agents.main]\n\n[gateway]\nport = 1111\n"
    );
    Ok(())
}
