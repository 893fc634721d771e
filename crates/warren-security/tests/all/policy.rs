//! `SecurityPolicy::for_agent` (PERM-2) and the subagent validator `narrow` (PERM-7).

// Test helpers outside #[test] fns: a failed setup step should panic with its name.
#![allow(clippy::expect_used)]

use std::path::PathBuf;
use std::time::Duration;

use pretty_assertions::assert_eq;
use proptest::prelude::*;
use warren_config::schema::{Autonomy, SandboxFallback, SandboxKind};
use warren_config::{Config, ConfigStore, InstallRoot};
use warren_core::AgentAlias;
use warren_security::{NarrowRequest, NarrowViolation, PolicyError, SecurityPolicy, Tier};

const CONFIG: &str = r#"
[agents.main]
risk_profile = "ops"
runtime_profile = "careful"
[agents.main.workspace.access]
docs = "Read"
inbox = "Write"
shared = "ReadWrite"
[agents.docs]
[agents.inbox]
[agents.shared]
[agents.free.workspace]
unrestricted_filesystem = true

[risk_profiles.ops]
autonomy = "supervised"
allowed_commands = ["ls", "cat", "git"]
forbidden_paths = ["/etc/shadow"]
max_actions_per_hour = 50
max_cost_per_day_usd = 2.0
env_passthrough = ["GIT_AUTHOR_NAME"]
allowed_tools = ["file_read", "shell"]

[runtime_profiles.careful]
max_tool_iterations = 4
"#;

fn setup() -> (tempfile::TempDir, InstallRoot, Config) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = InstallRoot::at(dir.path().join("w"));
    root.ensure_layout().expect("layout");
    std::fs::write(root.config_file(), CONFIG).expect("config");
    let config = ConfigStore::load(root.clone())
        .expect("valid")
        .snapshot()
        .config()
        .clone();
    (dir, root, config)
}

fn alias(s: &str) -> AgentAlias {
    AgentAlias::new(s).expect("alias")
}

#[test]
fn for_agent_applies_profile_boundary_grants_in_order_perm2() {
    let (_d, root, config) = setup();
    let p = SecurityPolicy::for_agent(&config, &root, &alias("main")).expect("policy");
    assert_eq!(p.autonomy(), Autonomy::Supervised);
    assert_eq!(p.allowed_commands(), ["ls", "cat", "git"]);
    assert_eq!(p.max_actions_per_hour(), 50);
    assert_eq!(p.max_tool_iterations(), 4);
    assert_eq!(p.workspace(), root.agent_workspace(&alias("main")));
    let roots = |g: &[warren_security::Grant]| g.iter().map(|g| g.root.clone()).collect::<Vec<_>>();
    assert_eq!(
        roots(p.read_only_roots()),
        vec![root.agent_workspace(&alias("docs"))]
    );
    assert_eq!(
        roots(p.write_only_roots()),
        vec![root.agent_workspace(&alias("inbox"))]
    );
    assert_eq!(
        roots(p.read_write_roots()),
        vec![root.agent_workspace(&alias("shared"))]
    );
    assert!(p.workspace_only());
    assert!(p.tool_allowed("shell") && !p.tool_allowed("file_write"));
    assert!(
        !root.agent_workspace(&alias("main")).exists(),
        "workspace is created lazily (PERM-1)"
    );
    p.ensure_workspace().expect("create");
    assert!(p.temp_dir().is_dir());

    let free = SecurityPolicy::for_agent(&config, &root, &alias("free")).expect("policy");
    assert!(
        !free.workspace_only(),
        "unrestricted_filesystem turns workspace_only off"
    );
}

#[test]
fn policies_are_immutable_and_cheap_to_clone() {
    let (_d, root, config) = setup();
    let p = SecurityPolicy::for_agent(&config, &root, &alias("main")).expect("policy");
    let q = p.clone();
    assert_eq!(p, q);
}

#[test]
fn unknown_agents_and_dangling_grants_are_errors_perm2() {
    let (_d, root, mut config) = setup();
    assert!(matches!(
        SecurityPolicy::for_agent(&config, &root, &alias("nobody")),
        Err(PolicyError::UnknownAgent { .. })
    ));
    // A config built in code (not through validation) with a dangling grant is still refused.
    config.agents.get_mut("main").map(|a| {
        a.workspace.access.insert(
            "ghost".parse().unwrap_or_else(|e| panic!("{e}")),
            warren_config::schema::AccessLevel::Read,
        )
    });
    let err = SecurityPolicy::for_agent(&config, &root, &alias("main"))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("'ghost'"), "{err}");
}

#[test]
fn tiers_decide_consistently_for_reads_and_writes_perm3_perm4() {
    let (_d, root, config) = setup();
    let p = SecurityPolicy::for_agent(&config, &root, &alias("main")).expect("policy");
    let ws = |a: &str| root.agent_workspace(&alias(a)).join("f");
    assert_eq!(p.can_read(&ws("main")).map(|r| r.tier), Ok(Tier::Workspace));
    assert_eq!(p.can_read(&ws("docs")).map(|r| r.tier), Ok(Tier::ReadOnly));
    assert_eq!(
        p.can_read(&ws("shared")).map(|r| r.tier),
        Ok(Tier::ReadWrite)
    );
    assert!(
        p.can_read(&ws("inbox")).is_err(),
        "write-only is an explicit read deny"
    );
    assert!(p.can_write(&ws("docs")).is_err());
    assert_eq!(
        p.can_write(&ws("inbox")).map(|r| r.tier),
        Ok(Tier::WriteOnly)
    );
    for dev in ["/dev/null", "/dev/zero", "/dev/random", "/dev/urandom"] {
        assert_eq!(
            p.can_read(std::path::Path::new(dev)).map(|r| r.tier),
            Ok(Tier::Device),
            "{dev}"
        );
    }
    // A relative path that does not exist yet resolves under the workspace.
    assert_eq!(
        p.can_write(std::path::Path::new("new/dir/file"))
            .map(|r| r.tier),
        Ok(Tier::Workspace)
    );
}

fn parent() -> (tempfile::TempDir, InstallRoot, SecurityPolicy) {
    let (d, root, config) = setup();
    let p = SecurityPolicy::for_agent(&config, &root, &alias("main")).expect("policy");
    (d, root, p)
}

#[test]
fn narrow_accepts_a_strict_subset_perm7() {
    let (_d, root, p) = parent();
    let child = p
        .narrow(NarrowRequest {
            autonomy: Some(Autonomy::ReadOnly),
            read_write: Some(vec![]),
            read_only: Some(vec![
                root.agent_workspace(&alias("shared")).join("sub"),
                root.agent_workspace(&alias("docs")),
            ]),
            allowed_commands: Some(vec!["ls".into()]),
            max_actions_per_hour: Some(10),
            max_tool_iterations: Some(2),
            allowed_tools: Some(vec!["file_read".into()]),
            extra_forbidden_paths: vec![PathBuf::from("/srv")],
            ..Default::default()
        })
        .expect("a narrowing is accepted");
    assert_eq!(child.autonomy(), Autonomy::ReadOnly);
    assert_eq!(child.read_only_roots().len(), 2);
    assert!(child.read_write_roots().is_empty());
    assert!(
        child
            .forbidden_paths()
            .contains(&PathBuf::from("/etc/shadow")),
        "parent's forbidden paths kept"
    );
    assert!(
        child
            .can_read(&root.agent_workspace(&alias("shared")).join("sub/x"))
            .is_ok()
    );
    assert!(
        child
            .can_write(&root.agent_workspace(&alias("shared")).join("sub/x"))
            .is_err(),
        "downgraded rw → ro"
    );
}

#[test]
fn narrow_refuses_every_escalation_axis_perm7() {
    let (_d, root, p) = parent();
    let ws = |a: &str| root.agent_workspace(&alias(a));
    let cases: Vec<(NarrowRequest, &str)> = vec![
        (
            NarrowRequest {
                autonomy: Some(Autonomy::Full),
                ..Default::default()
            },
            "autonomy",
        ),
        (
            NarrowRequest {
                read_write: Some(vec![ws("docs")]),
                ..Default::default()
            },
            "read-write root",
        ),
        (
            NarrowRequest {
                read_only: Some(vec![ws("inbox")]),
                ..Default::default()
            },
            "read-only root",
        ),
        (
            NarrowRequest {
                write_only: Some(vec![ws("docs")]),
                ..Default::default()
            },
            "write-only root",
        ),
        (
            NarrowRequest {
                read_only: Some(vec![PathBuf::from("/etc")]),
                ..Default::default()
            },
            "root outside",
        ),
        (
            NarrowRequest {
                read_only: Some(vec![ws("docs").join("../../stranger/workspace")]),
                ..Default::default()
            },
            "dotdot",
        ),
        (
            NarrowRequest {
                workspace_only: Some(false),
                ..Default::default()
            },
            "workspace_only",
        ),
        (
            NarrowRequest {
                allowed_commands: Some(vec!["rm".into()]),
                ..Default::default()
            },
            "command",
        ),
        (
            NarrowRequest {
                env_passthrough: Some(vec!["AWS_SECRET".into()]),
                ..Default::default()
            },
            "env",
        ),
        (
            NarrowRequest {
                allowed_tools: Some(vec!["file_write".into()]),
                ..Default::default()
            },
            "tool",
        ),
        (
            NarrowRequest {
                max_actions_per_hour: Some(51),
                ..Default::default()
            },
            "actions",
        ),
        (
            NarrowRequest {
                max_cost_per_day_usd: Some(2.5),
                ..Default::default()
            },
            "cost",
        ),
        (
            NarrowRequest {
                max_cost_per_day_usd: Some(f64::NAN),
                ..Default::default()
            },
            "cost NaN",
        ),
        (
            NarrowRequest {
                max_tool_iterations: Some(5),
                ..Default::default()
            },
            "iterations",
        ),
        (
            NarrowRequest {
                shell_timeout: Some(Duration::from_secs(600)),
                ..Default::default()
            },
            "timeout",
        ),
        (
            NarrowRequest {
                sandbox: Some(SandboxKind::Noop),
                ..Default::default()
            },
            "sandbox",
        ),
        (
            NarrowRequest {
                fallback: Some(SandboxFallback::Noop),
                ..Default::default()
            },
            "fallback",
        ),
        (
            NarrowRequest {
                allow_network: Some(true),
                ..Default::default()
            },
            "network",
        ),
    ];
    for (req, axis) in cases {
        let result = p.narrow(req);
        assert!(result.is_err(), "{axis}: escalation accepted");
    }
    assert!(matches!(
        p.narrow(NarrowRequest {
            autonomy: Some(Autonomy::Full),
            ..Default::default()
        }),
        Err(NarrowViolation::Autonomy { .. })
    ));
}

proptest! {
    /// Whatever roots a child asks for, every path it can read or write, its parent can too.
    #[test]
    fn a_narrowed_child_never_reaches_more_than_its_parent_perm7(
        picks in proptest::collection::vec((0usize..5, 0usize..3, "[a-z]{0,3}"), 0..6),
        probe in (0usize..5, "[a-z]{1,3}"),
    ) {
        let (_d, root, p) = parent();
        let agents = ["main", "docs", "inbox", "shared", "stranger"];
        let mut req = NarrowRequest { read_write: Some(vec![]), read_only: Some(vec![]), write_only: Some(vec![]), ..Default::default() };
        for (agent, tier, sub) in &picks {
            let path = root.agent_workspace(&alias(agents[*agent])).join(sub);
            match tier {
                0 => req.read_write.get_or_insert_with(Vec::new).push(path),
                1 => req.read_only.get_or_insert_with(Vec::new).push(path),
                _ => req.write_only.get_or_insert_with(Vec::new).push(path),
            }
        }
        if let Ok(child) = p.narrow(req) {
            let target = root.agent_workspace(&alias(agents[probe.0])).join(&probe.1);
            if child.can_read(&target).is_ok() {
                prop_assert!(p.can_read(&target).is_ok(), "child reads {target:?}, parent cannot");
            }
            if child.can_write(&target).is_ok() {
                prop_assert!(p.can_write(&target).is_ok(), "child writes {target:?}, parent cannot");
            }
        }
    }
}

#[test]
fn roots_named_through_a_symlinked_install_root_decide_alike_perm3() {
    // The install root is reached through a symlink: the model may name a root by its
    // configured (symlinked) form, its canonical form, or relative to the workspace. The first
    // decision is lexical, so each form must be recognised without resolving the path.
    let dir = tempfile::tempdir().expect("tempdir");
    let real = dir.path().join("real");
    std::fs::create_dir_all(&real).expect("real");
    std::os::unix::fs::symlink(&real, dir.path().join("link")).expect("symlink");
    let root = InstallRoot::at(dir.path().join("link/w"));
    root.ensure_layout().expect("layout");
    std::fs::write(root.config_file(), CONFIG).expect("config");
    let config = ConfigStore::load(root.clone())
        .expect("valid")
        .snapshot()
        .config()
        .clone();
    let p = SecurityPolicy::for_agent(&config, &root, &alias("main")).expect("policy");
    p.ensure_workspace().expect("workspace");
    for sibling in ["docs", "inbox"] {
        let ws = root.agent_workspace(&alias(sibling));
        std::fs::create_dir_all(&ws).expect("sibling");
        std::fs::write(ws.join("f"), "x").expect("file");
    }
    let canonical = real.join("w/agents/docs/workspace/f");
    for path in [
        root.agent_workspace(&alias("docs")).join("f"),
        canonical.clone(),
        PathBuf::from("../../docs/workspace/f"),
    ] {
        assert_eq!(
            p.can_read(&path).map(|r| (r.tier, r.path)),
            Ok((Tier::ReadOnly, canonical.clone())),
            "{}",
            path.display()
        );
    }
    let refusals: Vec<_> = [
        root.agent_workspace(&alias("inbox")).join("f"),
        real.join("w/agents/inbox/workspace/f"),
        real.join("w/agents/inbox/workspace/missing/../f"),
    ]
    .iter()
    .map(|path| p.can_read(path).map_err(|d| d.reason).map(|r| r.tier))
    .collect();
    let refused = Err(
        "agent 'main' has only a Write grant on 'inbox'; reading it is not allowed \
         (change it to [agents.main.workspace.access] inbox = \"ReadWrite\")"
            .to_string(),
    );
    assert_eq!(refusals, vec![refused.clone(), refused.clone(), refused]);
}
