//! Sandbox backends (SBX-1..3): bubblewrap confines for real on this host; firejail and docker
//! are checked by the command they build (neither runs here).

// Test helpers outside #[test] fns: a failed setup step should panic with its name.
#![allow(clippy::expect_used)]

use std::ffi::OsString;
use std::fs;

use warren_config::schema::{RiskProfile, SandboxKind};
use warren_config::{ConfigStore, InstallRoot};
use warren_core::AgentAlias;
use warren_security::SecurityPolicy;
use warren_security::sandbox::{Backend, Sandbox, wrapper_argv};

const CONFIG: &str = r#"
[agents.main]
risk_profile = "boxed"
[agents.main.workspace.access]
docs = "Read"
inbox = "Write"
[agents.docs]
[agents.inbox]
[agents.stranger]

[risk_profiles.boxed]
sandbox = "bubblewrap"
"#;

fn setup(kind: SandboxKind) -> (tempfile::TempDir, InstallRoot, SecurityPolicy) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = InstallRoot::at(dir.path().join("w"));
    root.ensure_layout().expect("layout");
    fs::write(root.config_file(), CONFIG).expect("config");
    let mut config = ConfigStore::load(root.clone())
        .expect("valid")
        .snapshot()
        .config()
        .clone();
    config.risk_profiles.insert(
        "boxed".into(),
        RiskProfile {
            sandbox: kind,
            ..RiskProfile::default()
        },
    );
    for a in ["main", "docs", "inbox", "stranger"] {
        let ws = root.agent_workspace(&AgentAlias::new(a).expect("alias"));
        fs::create_dir_all(&ws).expect("ws");
        fs::write(ws.join("secret.txt"), format!("SECRET-{a}")).expect("secret");
    }
    let policy =
        SecurityPolicy::for_agent(&config, &root, &AgentAlias::new("main").expect("alias"))
            .expect("policy");
    (dir, root, policy)
}

fn run(sandbox: &Sandbox, script: &str) -> std::process::Output {
    sandbox
        .output("/bin/sh", &["-c".into(), script.into()])
        .expect("spawn")
}

#[test]
fn bubblewrap_binds_the_workspace_and_grants_and_hides_the_rest_sbx2() {
    let (_d, root, policy) = setup(SandboxKind::Bubblewrap);
    let sandbox = Sandbox::for_policy(&policy)
        .expect("the full sandbox (namespaces, Landlock, seccomp) is available");
    assert_eq!(sandbox.backend(), Backend::Full);
    let stranger = root
        .agent_workspace(&AgentAlias::new("stranger").expect("alias"))
        .join("secret.txt");
    let docs = root.agent_workspace(&AgentAlias::new("docs").expect("alias"));

    // Unsandboxed, the same commands work.
    assert!(
        std::process::Command::new("cat")
            .arg(&stranger)
            .output()
            .expect("cat")
            .status
            .success()
    );

    let out = run(&sandbox, &format!("cat {}", stranger.display()));
    assert!(
        !out.status.success() && !String::from_utf8_lossy(&out.stdout).contains("SECRET"),
        "{out:?}"
    );
    let out = run(&sandbox, "echo made > here.txt && cat secret.txt");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "SECRET-main");
    assert!(
        policy.workspace().join("here.txt").exists(),
        "workspace writes reach the host"
    );
    let out = run(&sandbox, &format!("cat {}/secret.txt", docs.display()));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "SECRET-docs",
        "read-only grant is bound: {out:?}"
    );
    let out = run(&sandbox, &format!("echo x > {}/pwn", docs.display()));
    assert!(
        !out.status.success() && !docs.join("pwn").exists(),
        "read-only bind refuses writes: {out:?}"
    );
    let out = run(&sandbox, "cat /etc/shadow");
    assert!(!out.status.success(), "/etc/shadow is not bound: {out:?}");
}

#[test]
fn bubblewrap_has_no_network_unless_allowed_sbx1() {
    let (_d, _root, policy) = setup(SandboxKind::Bubblewrap);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = listener.local_addr().expect("addr").port();
    let sandbox = Sandbox::for_policy(&policy).expect("bwrap");
    let out = sandbox
        .output(
            "/bin/bash",
            &[
                "-c".into(),
                format!("echo x > /dev/tcp/127.0.0.1/{port} && echo CONNECTED").into(),
            ],
        )
        .expect("spawn");
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("CONNECTED"),
        "{out:?}"
    );
}

#[test]
fn docker_commands_carry_the_roots_and_deny_network_sbx1() {
    let (_d, root, policy) = setup(SandboxKind::Landlock);
    let ws = policy.workspace().display().to_string();
    let docs = root
        .agent_workspace(&AgentAlias::new("docs").expect("alias"))
        .display()
        .to_string();
    let args: Vec<OsString> = vec!["-c".into(), "ls".into()];
    let text = |b| {
        wrapper_argv(b, &policy, "/bin/sh".as_ref(), &args)
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
    };

    let dk = text(Backend::Docker);
    assert_eq!(&dk[..3], ["docker", "run", "--rm"]);
    assert!(dk.windows(2).any(|w| w == ["--network", "none"]));
    assert!(
        dk.windows(2)
            .any(|w| w[0] == "-v" && w[1] == format!("{ws}:{ws}:rw"))
    );
    assert!(
        dk.windows(2)
            .any(|w| w[0] == "-v" && w[1] == format!("{docs}:{docs}:ro"))
    );
    assert!(dk.windows(2).any(|w| w[0] == "-w" && w[1] == ws));
    let inbox = root
        .agent_workspace(&AgentAlias::new("inbox").expect("alias"))
        .display()
        .to_string();
    assert!(
        !dk.iter().any(|a| a.contains(&inbox)),
        "a mount cannot be write-only: the write-only root is omitted"
    );
}

#[test]
fn auto_picks_the_full_sandbox_on_this_kernel_and_posture_says_so_sbx1() {
    let (_d, _root, policy) = setup(SandboxKind::Auto);
    let sandbox = Sandbox::for_policy(&policy).expect("auto");
    assert_eq!(sandbox.backend(), Backend::Full);
    let posture = sandbox.posture();
    assert_eq!(posture["active"], "full");
    assert_eq!(posture["carries_sibling_roots"], true);
    assert!(posture["landlock_abi"].as_i64().is_some_and(|abi| abi >= 1));
}

#[test]
fn extra_env_is_added_to_the_cleared_environment_and_replaces_base_values_git5() {
    for kind in [SandboxKind::Landlock, SandboxKind::Bubblewrap] {
        let (_d, _root, policy) = setup(kind);
        let sandbox = Sandbox::for_policy(&policy).expect("sandbox");
        let env: [(OsString, OsString); 2] = [
            ("HOME".into(), "/operator-home".into()),
            ("GIT_TERMINAL_PROMPT".into(), "0".into()),
        ];
        let out = sandbox
            .spawn_with_env(
                "/usr/bin/env",
                &[],
                warren_security::sandbox::ChildIo::Piped,
                &env,
            )
            .expect("spawn")
            .wait_with_output()
            .expect("wait");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("HOME=") || l.starts_with("GIT_"))
            .collect();
        lines.sort_unstable();
        assert_eq!(
            lines,
            vec!["GIT_TERMINAL_PROMPT=0", "HOME=/operator-home"],
            "{kind:?}: {text}"
        );
    }
}
