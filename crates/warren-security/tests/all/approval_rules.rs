//! The approval rules are policy axes (issue 14 §4, PERM-2/7): `SecurityPolicy` carries the
//! risk profile's `always_ask` and `approval_timeout_secs`, the runtime reads them only there,
//! and `narrow` hands them to a child unchanged, whatever else the child narrows.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use pretty_assertions::assert_eq;
use warren_config::schema::Autonomy;
use warren_config::{ConfigStore, InstallRoot};
use warren_core::AgentAlias;
use warren_security::{NarrowRequest, SecurityPolicy};

#[test]
fn always_ask_and_the_approval_timeout_come_from_the_profile_and_survive_narrowing_perm7() {
    let dir = tempfile::tempdir().unwrap();
    let root = InstallRoot::at(dir.path().join("w"));
    root.ensure_layout().unwrap();
    std::fs::write(
        root.config_file(),
        "[agents.main]\nrisk_profile = \"ops\"\n[agents.plain]\n\
         [risk_profiles.ops]\nautonomy = \"full\"\nalways_ask = [\"shell\", \"file_write\"]\n\
         approval_timeout_secs = 7\nallowed_tools = [\"file_read\", \"file_write\", \"shell\"]\n",
    )
    .unwrap();
    let config = ConfigStore::load(root.clone())
        .unwrap()
        .snapshot()
        .config()
        .clone();
    let policy =
        |a: &str| SecurityPolicy::for_agent(&config, &root, &AgentAlias::new(a).unwrap()).unwrap();
    let (main, plain) = (policy("main"), policy("plain"));
    let rules = |p: &SecurityPolicy| (p.always_ask().to_vec(), p.approval_timeout());
    assert_eq!(
        rules(&main),
        (
            vec!["shell".to_string(), "file_write".to_string()],
            Duration::from_secs(7)
        )
    );
    assert!(main.always_asks("shell") && !main.always_asks("file_read"));
    assert_eq!(
        rules(&plain),
        (vec![], Duration::from_secs(120)),
        "the default profile"
    );
    assert_eq!(
        main.describe()["always_ask"],
        serde_json::json!(["shell", "file_write"])
    );
    assert_eq!(
        main.describe()["approval_timeout_secs"],
        serde_json::json!(7)
    );

    for req in [
        NarrowRequest::default(),
        NarrowRequest {
            autonomy: Some(Autonomy::Supervised),
            allowed_tools: Some(vec!["shell".into()]),
            max_tool_iterations: Some(1),
            ..Default::default()
        },
    ] {
        let child = main.narrow(req.clone()).unwrap();
        assert_eq!(rules(&child), rules(&main), "{req:?}");
        let grandchild = child.narrow(NarrowRequest::default()).unwrap();
        assert_eq!(rules(&grandchild), rules(&main), "{req:?}");
    }
}
