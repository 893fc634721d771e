//! Issue 16 §6: settings that would be accepted and do nothing are refused at validation,
//! naming the key, its line, and the way out — until they work.

use std::fs;

use warren_config::{ConfigError, ConfigStore, InstallRoot};

type R = Result<(), Box<dyn std::error::Error>>;

fn load_error(text: &str) -> Result<String, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let root = InstallRoot::at(dir.path());
    root.ensure_layout()?;
    fs::write(root.config_file(), text)?;
    Ok(match ConfigStore::load(root) {
        Err(e @ ConfigError::Invalid { .. }) => e.to_string(),
        Err(other) => format!("unexpected error: {other}"),
        Ok(_) => "loaded".into(),
    })
}

#[test]
fn runtime_kind_docker_and_sop_are_refused_naming_the_key_issue16() -> R {
    let err = load_error("[runtime]\nkind = \"docker\"\n\n[agents.main]\n")?;
    assert!(
        err.contains(":2:")
            && err.contains("runtime.kind")
            && err.contains("\"docker\" is not available yet"),
        "{err}"
    );
    assert!(err.contains("\"native\""), "the way out is named: {err}");

    let err = load_error("[agents.main]\n\n[sop]\nenabled = true\n")?;
    assert!(
        err.contains("sop") && err.contains("[sop] is not implemented yet"),
        "{err}"
    );
    // Even an empty [sop] table is refused: it would read as if SOPs were configured.
    let err = load_error("[agents.main]\n[sop]\n")?;
    assert!(err.contains("[sop] is not implemented yet"), "{err}");

    // What works stays accepted.
    assert_eq!(
        load_error("[runtime]\nkind = \"native\"\n[agents.main]\n")?,
        "loaded"
    );
    Ok(())
}
