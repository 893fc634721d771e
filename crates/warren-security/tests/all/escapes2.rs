//! The second round of attacks on the process sandbox (issue 13, SBX-1..3), performed for real
//! on this kernel with `allowed_commands`, `autonomy = "full"` and `allow_network = false`: each
//! is held by the full level (and, where the README says so, the landlock level), and escapes
//! with the layer that stops it switched off, so the probe is live. The probes are rows of
//! `warren security selftest`.

// Test helpers outside #[test] fns: a failed setup step should panic with its name.
#![allow(clippy::expect_used)]

use warren_config::schema::SandboxKind;
use warren_security::sandbox::selftest::{Outcome, Probe};
use warren_security::sandbox::{Layer, Sandbox};

use crate::escape_sandbox::{escapes_without, outcome, policy_with, sandbox};

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn held(kind: SandboxKind, probe: Probe) {
    let (f, s) = sandbox(kind, &["ls", "cat", "sh"]);
    let (got, detail) = outcome(&s, &f, probe);
    assert_eq!(got, Outcome::Held, "{probe:?} under {kind:?}: {detail}");
}

#[test]
fn io_uring_cannot_be_set_up_issue13() {
    escapes_without(Probe::IoUring, SandboxKind::Auto, &[Layer::Seccomp]);
    held(SandboxKind::Landlock, Probe::IoUring);
}

#[test]
fn nested_user_namespaces_are_refused_by_unshare_clone_and_clone3_issue13() {
    escapes_without(Probe::NestedNamespace, SandboxKind::Auto, &[Layer::Seccomp]);
    let (f, s) = sandbox(SandboxKind::Auto, &["ls"]);
    let (_, detail) = outcome(&s, &f, Probe::NestedNamespace);
    assert!(
        detail.contains("clone3: Function not implemented"),
        "clone3 answers ENOSYS so libc falls back to clone, whose flags seccomp reads: {detail}"
    );
}

#[test]
fn bpf_perf_userfaultfd_keyctl_ptrace_mount_and_pidfd_getfd_are_refused_issue13() {
    escapes_without(
        Probe::KernelInterfaces,
        SandboxKind::Auto,
        &[Layer::Seccomp],
    );
    let (f, s) = sandbox(SandboxKind::Auto, &["ls"]);
    let (_, detail) = outcome(&s.without(Layer::Seccomp), &f, Probe::KernelInterfaces);
    assert!(
        detail.contains("pidfd_getfd"),
        "without seccomp a process takes a copy of a descriptor: {detail}"
    );
}

#[test]
fn alg_bluetooth_xdp_can_tipc_key_and_rds_sockets_are_refused_issue13() {
    // The kernel-socket row tries every one of these families; without seccomp at least one
    // opens (escape_sandbox.rs shows that half).
    held(SandboxKind::Auto, Probe::KernelSockets);
    held(SandboxKind::Landlock, Probe::KernelSockets);
}

#[test]
fn a_host_process_cannot_be_signalled_issue13() {
    held(SandboxKind::Auto, Probe::SignalOutside);
    // Without a PID namespace, Landlock's signal scope is what holds.
    escapes_without(
        Probe::SignalOutside,
        SandboxKind::Landlock,
        &[Layer::Landlock],
    );
}

#[test]
fn the_daemons_memory_cannot_be_read_issue13() {
    held(SandboxKind::Auto, Probe::ProcessMemory);
    escapes_without(
        Probe::ProcessMemory,
        SandboxKind::Landlock,
        &[Layer::Seccomp, Layer::Landlock, Layer::SandboxUser],
    );
}

#[test]
fn host_abstract_unix_sockets_are_unreachable_with_and_without_network_issue13() {
    escapes_without(
        Probe::AbstractUnixSocket,
        SandboxKind::Auto,
        &[Layer::NetNamespace, Layer::Landlock],
    );
    // allow_network = true: the host's network namespace, so Landlock's scope alone holds.
    let (f, p) = policy_with(SandboxKind::Auto, &["ls"], true);
    let s = Sandbox::for_policy(&p).expect("sandbox");
    assert_eq!(
        outcome(&s, &f, Probe::AbstractUnixSocket).0,
        Outcome::Held,
        "Landlock scopes abstract sockets (ABI >= 6)"
    );
    let (got, detail) = outcome(&s.without(Layer::Landlock), &f, Probe::AbstractUnixSocket);
    assert_eq!(got, Outcome::Escape, "without Landlock: {detail}");
}

#[test]
#[cfg(target_arch = "x86_64")]
fn i386_system_calls_are_killed_not_filtered_by_x86_64_numbers_issue13() {
    // unshare is 310 on i386 (272 on x86_64): a filter matching x86_64 numbers alone would let
    // `int 0x80` through.
    escapes_without(Probe::I386Abi, SandboxKind::Auto, &[Layer::Seccomp]);
    held(SandboxKind::Landlock, Probe::I386Abi);
}

#[test]
fn a_descriptor_the_daemon_holds_without_cloexec_does_not_reach_the_child_issue13() {
    let (f, full) = sandbox(SandboxKind::Auto, &["cat", "sh"]);
    let (_f2, landlock) = sandbox(SandboxKind::Landlock, &["cat", "sh"]);
    // Each read goes through a fresh descriptor (they share the file offset otherwise).
    let read = |s: &Sandbox| {
        // What a jobserver pipe, a socket-activated listener or a C library leaves open.
        let fd = rustix::fs::open(
            &f.targets.secret_file,
            rustix::fs::OFlags::RDONLY,
            rustix::fs::Mode::empty(),
        )
        .expect("open the install root's secret");
        let flags = rustix::io::fcntl_getfd(&fd).expect("flags");
        assert!(
            !flags.contains(rustix::io::FdFlags::CLOEXEC),
            "the probe is live"
        );
        let n = std::os::fd::AsRawFd::as_raw_fd(&fd);
        let out = s
            .output("/bin/sh", &["-c".into(), format!("cat <&{n}").into()])
            .expect("spawn");
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    for s in [full, landlock] {
        let held = read(&s);
        assert!(
            held.contains("Bad file descriptor") && !held.contains("0123456789abcdef"),
            "{:?}: only stdio reaches the program: {held}",
            s.backend()
        );
        let open = read(&s.clone().without(Layer::CloseInherited));
        assert!(
            open.contains("0123456789abcdef"),
            "{:?}: without closing, the descriptor passes every file rule: {open}",
            s.backend()
        );
    }
}

#[test]
fn the_exec_allowlist_does_not_stop_an_exec_capable_command_running_a_memfd_issue13() {
    // The README's "does not stop" cell: an allowed interpreter writes a binary into a memfd
    // and executes it; Landlock's EXECUTE right does not cover memfds. This is why exec-capable
    // commands need approval under `supervised`.
    // .ci/prepare installs Debian's python3 (the MCP and client tests need it too): no skip.
    let (_f, s) = sandbox(SandboxKind::Auto, &["python3"]);
    let script = "import os\n\
        fd = os.memfd_create('x', 0)\n\
        os.write(fd, open('/usr/bin/id', 'rb').read())\n\
        try:\n    os.execv('/usr/bin/id', ['id'])\n\
        except OSError as e:\n    print('direct:', e.strerror, flush=True)\n\
        os.execve(fd, ['id', '-u'], {})\n";
    let out = s
        .output("/usr/bin/python3", &["-c".into(), script.into()])
        .expect("spawn");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("direct: Permission denied"), "{text}");
    assert!(
        text.lines().any(|l| l.trim().parse::<u32>().is_ok()),
        "the memfd ran: {text}"
    );
}

#[test]
fn host_ipc_is_invisible_under_full_and_system_v_is_named_as_a_gap_of_the_landlock_level_issue13() {
    held(SandboxKind::Auto, Probe::SysvIpc);
    let (f, s) = sandbox(SandboxKind::Landlock, &["ls"]);
    let (got, detail) = outcome(&s, &f, Probe::SysvIpc);
    assert_eq!(got, Outcome::Escape, "no IPC namespace: {detail}");
    assert!(
        !detail.contains("message queue"),
        "POSIX message queues are files to Landlock (an internal mount no rule covers): {detail}"
    );
    let (_, detail) = outcome(&s.clone().without(Layer::Landlock), &f, Probe::SysvIpc);
    assert!(detail.contains("segment and message queue"), "{detail}");
    assert!(
        s.posture()["not_contained"]
            .to_string()
            .contains("System V IPC"),
        "posture names the gap"
    );
}

#[test]
fn an_own_file_cannot_be_hard_linked_into_a_write_only_sibling_issue13() {
    // Linked in, the file stays readable in the own workspace: whatever the sibling writes into
    // it could be read back through a Write grant. The full level's separate mounts answer EXDEV;
    // the landlock level holds by giving Write roots no `refer` right.
    held(SandboxKind::Auto, Probe::HardlinkIntoWriteTier);
    escapes_without(
        Probe::HardlinkIntoWriteTier,
        SandboxKind::Landlock,
        &[Layer::Landlock],
    );
}

#[test]
fn one_call_cannot_exhaust_the_process_limit_of_another_issue13() {
    if !is_root() {
        eprintln!(
            "SKIPPED the liveness half: each call already has its own user namespace when not root"
        );
        held(SandboxKind::Auto, Probe::SharedProcessLimit);
        return;
    }
    // As root, every call ran as the same `nobody`: one call's 510 processes made every other
    // agent's fork fail ("Cannot fork").
    escapes_without(
        Probe::SharedProcessLimit,
        SandboxKind::Auto,
        &[Layer::OwnUserNamespace],
    );
    // The namespace is created as `nobody`, so its counts roll up to the host's `nobody`, never
    // to root: a call holding every inotify instance it can get leaves the daemon its own (a
    // root-owned namespace made root's 128 the call's). The instances one call can hold are
    // still all of `nobody`'s (README: does not stop) where watches are allowed; this agent
    // has a `Write` grant, so seccomp refuses it any (issue 35 §6), and without seccomp it holds
    // them all.
    let (f, s) = sandbox(SandboxKind::Auto, &["ls"]);
    let (_, detail) = outcome(&s, &f, Probe::SharedProcessLimit);
    assert!(detail.ends_with("the daemon's inotify: ok"), "{detail}");
    assert!(detail.contains("held 0 inotify instances"), "{detail}");
    let (_, detail) = outcome(&s.without(Layer::Seccomp), &f, Probe::SharedProcessLimit);
    assert!(detail.ends_with("the daemon's inotify: ok"), "{detail}");
    let max: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_user_instances")
        .expect("max_user_instances")
        .trim()
        .parse()
        .expect("a number");
    // All of them, but for the few a parallel test's unfiltered watcher (escapes3) may hold.
    let held: usize = detail
        .split("held ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(held + 4 >= max, "held {held} of {max}: {detail}");
}

#[test]
fn the_landlock_level_drops_every_capability_so_the_daemons_environ_stays_unreadable_issue13() {
    // With CAP_SYS_PTRACE, Landlock let a root child read /proc/<daemon>/environ (the
    // cmdline stays readable at this level: posture says so).
    let (f, s) = sandbox(SandboxKind::Landlock, &["ls"]);
    let (_, detail) = outcome(&s, &f, Probe::ProcEnviron);
    assert!(!detail.contains("/environ"), "{detail}");
    if !is_root() {
        eprintln!("SKIPPED the capabilities half: needs root (CI runs as root)");
        return;
    }
    let (_, detail) = outcome(&s.without(Layer::SandboxUser), &f, Probe::ProcEnviron);
    assert!(
        detail.contains("/environ"),
        "with its capabilities the child reads it: {detail}"
    );
}

#[test]
fn a_root_child_of_the_landlock_level_has_no_process_limit_as_posture_says_issue13() {
    if !is_root() {
        eprintln!("SKIPPED: needs root (CI runs as root)");
        return;
    }
    let (f, s) = sandbox(SandboxKind::Landlock, &["ls"]);
    let (_, detail) = outcome(&s, &f, Probe::SharedProcessLimit);
    assert!(detail.starts_with("started 2048 processes"), "{detail}");
    assert!(
        s.posture()["not_contained"]
            .to_string()
            .contains("no process limit"),
        "posture names the gap"
    );
    let (f, s) = sandbox(SandboxKind::Auto, &["ls"]);
    let (_, detail) = outcome(&s, &f, Probe::SharedProcessLimit);
    assert!(
        detail.starts_with("started 51"),
        "the full level's limit: {detail}"
    );
}

#[test]
fn a_read_grants_file_modes_cannot_be_changed_under_full_and_the_landlock_level_names_the_gap_issue13()
 {
    // Landlock has no right for chmod, utimes or setxattr: only the full level's read-only bind
    // keeps a Read grant's metadata (a `chmod 000` there locked the sibling out of its files).
    held(SandboxKind::Auto, Probe::ReadOnlyTierMetadata);
    let (f, s) = sandbox(SandboxKind::Landlock, &["ls"]);
    let (got, detail) = outcome(&s, &f, Probe::ReadOnlyTierMetadata);
    assert_eq!(got, Outcome::Escape, "{detail}");
    assert!(
        s.posture()["not_contained"].to_string().contains("chmod"),
        "posture names the gap"
    );
}

#[test]
fn the_landlock_level_as_root_still_writes_a_grant_the_full_level_handed_to_nobody_issue13() {
    if !is_root() {
        eprintln!("SKIPPED: needs root (CI runs as root)");
        return;
    }
    // A sibling under the full level owns its workspace as `nobody`: the landlock level's uid-0
    // child keeps CAP_DAC_OVERRIDE (and nothing else) so its Write grant there still works,
    // while Landlock keeps it write-only.
    let (_f, p) = policy_with(SandboxKind::Landlock, &["cat", "sh"], false);
    let inbox = p.write_only_roots()[0].root.clone();
    std::os::unix::fs::chown(&inbox, Some(65534), Some(65534)).expect("chown");
    let s = Sandbox::for_policy(&p).expect("landlock");
    let out = s
        .output(
            "/bin/sh",
            &[
                "-c".into(),
                format!(
                    "echo x > {0}/dropped.txt && echo WROTE; cat {0}/secret.txt; cat /proc/self/status",
                    inbox.display()
                )
                .into(),
            ],
        )
        .expect("spawn");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("WROTE"), "{text}");
    assert!(!text.contains("SECRET-inbox"), "still write-only: {text}");
    assert!(
        text.contains("CapEff:\t0000000000000002"),
        "only CAP_DAC_OVERRIDE: {text}"
    );
}
