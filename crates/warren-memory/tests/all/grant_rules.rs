//! One memory-grant rule set (issue 14 §5, MEM-4/7/8): config validation (a `config.toml`
//! loaded by `ConfigStore`) and the memory factory (`create_memory_for_agent` on the same
//! config) give the same answer for the same grants: both accept, or both refuse with the same
//! rule.

#![allow(clippy::unwrap_used)]

use crate::common;

use common::{R, cats, grant};
use warren_config::schema::{AgentConfig, MemoryBackendKind, MemoryGrant};
use warren_config::{Config, ConfigError, ConfigStore, InstallRoot};
use warren_core::AgentAlias;
use warren_memory::{MemoryError, MemoryStores, create_memory_for_agent, resolve_grants};

/// Agent `a` (on `a_backend`) with `grants`, next to agents `b` (on `b_backend`) and `c`.
fn config(
    a_backend: MemoryBackendKind,
    b_backend: MemoryBackendKind,
    grants: Vec<MemoryGrant>,
) -> Config {
    let mut config = Config::default();
    config.memory.backend = MemoryBackendKind::Sqlite;
    for (alias, backend) in [
        ("a", a_backend),
        ("b", b_backend),
        ("c", MemoryBackendKind::Sqlite),
    ] {
        let mut agent = AgentConfig::default();
        agent.memory.backend = Some(backend);
        if alias == "a" {
            agent.memory.read_memory_from = grants.clone();
        }
        config
            .agents
            .insert(alias.parse().unwrap_or_else(|e| panic!("{e}")), agent);
    }
    config
}

/// What validation says about `a`'s grants: `Ok(())` or the first refused grant's message.
fn validation(root: &InstallRoot, config: &Config) -> Result<(), String> {
    std::fs::create_dir_all(root.root()).unwrap();
    std::fs::write(root.config_file(), toml::to_string(config).unwrap()).unwrap();
    match ConfigStore::load(root.clone()) {
        Ok(_) => Ok(()),
        Err(ConfigError::Invalid { problems, .. }) => {
            let grants: Vec<String> = problems
                .iter()
                .filter(|p| {
                    p.key
                        .as_deref()
                        .is_some_and(|k| k.starts_with("agents.a.memory.read_memory_from["))
                })
                .map(|p| p.message.clone())
                .collect();
            assert_eq!(
                grants.len(),
                problems.len(),
                "only grant problems: {problems:?}"
            );
            grants.into_iter().next().map_or(Ok(()), Err)
        }
        Err(e) => panic!("unexpected load error: {e}"),
    }
}

/// What the factory says about `a`'s grants.
async fn factory(root: &InstallRoot, config: &Config) -> Result<(), String> {
    let stores = MemoryStores::new(root.clone());
    match create_memory_for_agent(&stores, config, &AgentAlias::new("a").unwrap()).await {
        Ok(_) => Ok(()),
        Err(MemoryError::Grant { agent, rule, .. }) => {
            assert_eq!(agent, "a");
            Err(rule)
        }
        Err(e) => panic!("unexpected factory error: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validation_and_factory_give_the_same_answer_for_the_same_grants_mem4_mem7() -> R {
    use MemoryBackendKind::{Markdown, Sqlite};
    // (case, a's backend, b's backend, a's grants, refused rule the answer must contain)
    let cases: Vec<(&str, _, _, Vec<MemoryGrant>, Option<&str>)> = vec![
        ("plain", Sqlite, Sqlite, vec![grant("b")], None),
        (
            "categories",
            Sqlite,
            Sqlite,
            vec![cats("b", &["x"]), grant("c")],
            None,
        ),
        ("markdown plain", Markdown, Markdown, vec![grant("b")], None),
        (
            "self",
            Sqlite,
            Sqlite,
            vec![grant("a")],
            Some("always reads its own memory"),
        ),
        (
            "unknown",
            Sqlite,
            Sqlite,
            vec![grant("ghost")],
            Some("'ghost', which does not exist"),
        ),
        (
            "twice",
            Sqlite,
            Sqlite,
            vec![grant("b"), cats("b", &["x"])],
            Some("granted twice"),
        ),
        (
            "cross-backend",
            Sqlite,
            Markdown,
            vec![grant("b")],
            Some("cross-backend memory grants are not supported (MEM-7)"),
        ),
        (
            "empty categories",
            Sqlite,
            Sqlite,
            vec![cats("b", &[])],
            Some("categories is empty"),
        ),
        (
            "categories on markdown",
            Markdown,
            Markdown,
            vec![cats("b", &["x"])],
            Some("keeps no categories"),
        ),
    ];
    for (case, a, b, grants, refused) in cases {
        let dir = tempfile::tempdir()?;
        let root = InstallRoot::at(dir.path().join("warren"));
        let config = config(a, b, grants);
        let by_validation = validation(&root, &config);
        let by_factory = factory(&root, &config).await;
        assert_eq!(by_validation, by_factory, "{case}: the two paths disagree");
        match (refused, &by_factory) {
            (None, Ok(())) => {}
            (Some(rule), Err(got)) if got.contains(rule) => {}
            _ => panic!("{case}: expected {refused:?}, got {by_factory:?}"),
        }
    }
    Ok(())
}

/// The accepted grants the factory hands to the scoped handle are the config's, in order.
#[test]
fn accepted_grants_keep_their_categories_and_order() {
    let config = config(
        MemoryBackendKind::Sqlite,
        MemoryBackendKind::Sqlite,
        vec![cats("b", &["x", "y"]), grant("c")],
    );
    let grants = resolve_grants(&config, &AgentAlias::new("a").unwrap()).unwrap();
    let got: Vec<(String, Option<Vec<String>>)> = grants
        .into_iter()
        .map(|g| (g.agent.to_string(), g.categories))
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "b".to_string(),
                Some(vec!["x".to_string(), "y".to_string()])
            ),
            ("c".to_string(), None),
        ]
    );
}
