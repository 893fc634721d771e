//! The third red team's attacks on the process sandbox (issue 35 §1 and §6), performed for real
//! on this kernel: a sandboxed child opening an ACP session as another agent on the daemon's
//! control socket, and watching a `Write`-granted sibling's directory. Each is held at the full
//! and the landlock level, and succeeds with its guard switched off, so the probe is live. Both
//! are rows of `warren security selftest`.

// Test helpers outside #[test] fns: a failed setup step should panic with its name.
#![allow(clippy::expect_used)]

use warren_config::schema::SandboxKind;
use warren_security::control_socket::Guard;
use warren_security::sandbox::selftest::{self, Outcome, Probe};
use warren_security::sandbox::{Backend, Layer};

use crate::escape_sandbox::{escapes_without, outcome, sandbox};

/// The guard the daemon had before issue 35: the peer's uid only.
fn uid_only() -> Guard {
    Guard::FULL.without_key().without_peer_check()
}

#[test]
fn a_landlock_child_opened_a_session_as_another_agent_with_the_uid_check_alone_and_cannot_now_issue35()
 {
    let (f, s) = sandbox(SandboxKind::Landlock, &["ls", "cat", "sh"]);
    assert_eq!(s.backend(), Backend::Landlock);
    // A running daemon's key and the gateway's admin key, where a daemon keeps them.
    for file in [&f.targets.daemon_key, &f.targets.gateway_admin] {
        std::fs::write(file, "k".repeat(64)).expect("key file");
        std::fs::set_permissions(file, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .expect("chmod");
    }
    let (got, detail) = selftest::control_socket_probe(&s, &f.targets, uid_only());
    assert_eq!(
        got,
        Outcome::Escape,
        "the attack of issue 35 §1 (peer uid only): {detail}"
    );
    assert!(detail.contains("a session as agent 'docs'"), "{detail}");
    let (got, detail) = selftest::control_socket_probe(&s, &f.targets, Guard::FULL);
    assert_eq!(got, Outcome::Held, "with the daemon's guard: {detail}");
    assert!(detail.contains("seccomp filters"), "{detail}");
    for file in [
        "daemon.key: Permission denied",
        "gateway.json: Permission denied",
    ] {
        assert!(detail.contains(file), "{detail}");
    }
}

#[test]
fn the_control_socket_key_alone_holds_because_landlock_hides_data_issue35() {
    let key_only = Guard::FULL.without_peer_check();
    let (f, s) = sandbox(SandboxKind::Landlock, &["ls", "cat", "sh"]);
    let (got, detail) = selftest::control_socket_probe(&s, &f.targets, key_only);
    assert_eq!(got, Outcome::Held, "the key alone: {detail}");
    // Landlock is what keeps data/ unreadable to a root child with CAP_DAC_OVERRIDE.
    let (got, detail) =
        selftest::control_socket_probe(&s.clone().without(Layer::Landlock), &f.targets, key_only);
    assert_eq!(got, Outcome::Escape, "without Landlock: {detail}");
    assert!(detail.contains("read "), "{detail}");
}

#[test]
fn the_peer_check_alone_refuses_a_sandboxed_child_by_its_seccomp_filters_issue35() {
    let peer_only = Guard::FULL.without_key();
    let (f, s) = sandbox(SandboxKind::Landlock, &["ls", "cat", "sh"]);
    let (got, detail) = selftest::control_socket_probe(&s, &f.targets, peer_only);
    assert_eq!(got, Outcome::Held, "the peer check alone: {detail}");
    assert!(detail.contains("seccomp filters"), "{detail}");
    // A child without Warren's filters looks like any process of the daemon's user.
    let (got, detail) =
        selftest::control_socket_probe(&s.without(Layer::Seccomp), &f.targets, peer_only);
    assert_eq!(got, Outcome::Escape, "without seccomp: {detail}");
}

#[test]
fn the_full_level_does_not_even_reach_the_control_socket_issue35() {
    let (f, s) = sandbox(SandboxKind::Auto, &["ls", "cat", "sh"]);
    assert_eq!(s.backend(), Backend::Full);
    for guard in [Guard::FULL, uid_only()] {
        let (got, detail) = selftest::control_socket_probe(&s, &f.targets, guard);
        assert_eq!(got, Outcome::Held, "{guard:?}: {detail}");
        assert!(detail.contains("No such file"), "{detail}");
    }
}

#[test]
fn the_selftest_rows_of_issue35_hold_at_both_levels() {
    for kind in [SandboxKind::Auto, SandboxKind::Landlock] {
        let (f, s) = sandbox(kind, &["ls", "cat", "sh"]);
        for probe in [Probe::ControlSocket, Probe::WriteOnlyTierWatch] {
            let (got, detail) = outcome(&s, &f, probe);
            assert_eq!(got, Outcome::Held, "{probe:?} under {kind:?}: {detail}");
        }
    }
}

#[test]
fn a_write_grants_directory_cannot_be_watched_issue35() {
    // The attack: with seccomp off the watch streams the name the sibling creates.
    escapes_without(
        Probe::WriteOnlyTierWatch,
        SandboxKind::Auto,
        &[Layer::Seccomp],
    );
    escapes_without(
        Probe::WriteOnlyTierWatch,
        SandboxKind::Landlock,
        &[Layer::Seccomp],
    );
    let (f, s) = sandbox(SandboxKind::Auto, &["ls"]);
    let (_, detail) = outcome(
        &s.clone().without(Layer::Seccomp),
        &f,
        Probe::WriteOnlyTierWatch,
    );
    assert!(
        detail.contains(".warren-selftest-watched"),
        "the sibling's new file name reached the watcher: {detail}"
    );
    let (_, detail) = outcome(&s, &f, Probe::WriteOnlyTierWatch);
    assert!(detail.contains("inotify_init1"), "{detail}");
    assert!(
        s.posture()["layers"]["file_watches"]
            .as_str()
            .unwrap_or_default()
            .starts_with("denied"),
        "{}",
        s.posture()
    );
}
