//! Every alias in the config (the `[agents.<alias>]` keys, workspace grants, memory grants,
//! cron job agents, `runtime.default_agent`) is an `AgentAlias` read once when the file is
//! loaded (issue 14 §3): a value that is not an alias is an error naming the file, the key and
//! the line, and the typed config carries no unchecked alias.

use warren_config::{ConfigError, ConfigStore, InstallRoot};

fn load(text: &str) -> (tempfile::TempDir, Result<ConfigStore, ConfigError>) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let root = InstallRoot::at(dir.path());
    root.ensure_layout().unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(root.config_file(), text).unwrap_or_else(|e| panic!("{e}"));
    let loaded = ConfigStore::load(root);
    (dir, loaded)
}

#[test]
fn a_bad_alias_anywhere_in_the_config_is_refused_naming_file_key_and_line() {
    let cases = [
        (
            "[agents.Main]\n",
            "agents.Main",
            "config.toml:1:",
            "contains 'M'",
        ),
        (
            "[agents.default]\n",
            "agents.default",
            "config.toml:1:",
            "reserved",
        ),
        (
            "[agents.main.workspace.access]\n\"../x\" = \"Read\"\n",
            "agents.main.workspace.access.\"../x\"",
            "config.toml:2:",
            "contains '.'",
        ),
        (
            "[agents.main.memory]\nread_memory_from = [\"ok\", \"Bee\"]\n",
            "agents.main.memory.read_memory_from[1]",
            "config.toml:2:",
            "contains 'B'",
        ),
        (
            "[agents.main]\n[cron.jobs.n]\nagent = \"a/b\"\nevery = \"1h\"\nmessage = \"x\"\n",
            "cron.jobs.n.agent",
            "config.toml:3:",
            "contains '/'",
        ),
        (
            "[runtime]\ndefault_agent = \"x y\"\n[agents.main]\n",
            "runtime.default_agent",
            "config.toml:2:",
            "contains ' '",
        ),
    ];
    for (text, key, at, why) in cases {
        let (_dir, loaded) = load(text);
        let err = loaded.err().map(|e| e.to_string()).unwrap_or_default();
        for part in [key, at, why] {
            assert!(err.contains(part), "{text:?}: expected {part:?} in {err:?}");
        }
    }
}

#[test]
fn valid_aliases_load_typed_and_save_as_plain_strings() {
    let text = "[runtime]\ndefault_agent = \"ops\"\n\n[agents.main.memory]\nread_memory_from = [\"ops\"]\n\n[agents.ops]\n";
    let (_dir, loaded) = load(text);
    let store = loaded.unwrap();
    let snapshot = store.snapshot();
    let config = snapshot.config();
    let aliases: Vec<&str> = config.agents.keys().map(|a| a.as_str()).collect();
    assert_eq!(aliases, ["main", "ops"]);
    assert_eq!(
        config.default_agent().map(String::from).as_deref(),
        Some("ops")
    );
    assert_eq!(
        config.agents["main"].memory.read_memory_from[0]
            .agent()
            .as_str(),
        "ops"
    );
    let saved = toml::to_string(config).unwrap();
    assert!(saved.contains("default_agent = \"ops\""), "{saved}");
    assert!(saved.contains("read_memory_from = [\"ops\"]"), "{saved}");
}
