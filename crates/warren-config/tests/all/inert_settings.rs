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
fn runtime_kind_docker_is_refused_naming_the_key_and_sop_is_accepted_issue16() -> R {
    let err = load_error("[runtime]\nkind = \"docker\"\n\n[agents.main]\n")?;
    assert!(
        err.contains(":2:")
            && err.contains("runtime.kind")
            && err.contains("\"docker\" is not available yet"),
        "{err}"
    );
    assert!(err.contains("\"native\""), "the way out is named: {err}");

    // [sop] works now (STATE-10): its table is accepted; an unknown key in it is refused.
    assert_eq!(
        load_error("[agents.main]\n\n[sop]\nenabled = true\n")?,
        "loaded"
    );
    let err = load_error("[agents.main]\n[sop]\nenabeld = true\n")?;
    assert!(err.contains("enabeld"), "{err}");

    // What works stays accepted.
    assert_eq!(
        load_error("[runtime]\nkind = \"native\"\n[agents.main]\n")?,
        "loaded"
    );
    Ok(())
}
