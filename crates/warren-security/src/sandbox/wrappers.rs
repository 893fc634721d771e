//! Command construction for the wrapping levels: `bwrap` for the full sandbox, and docker.

use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::process::Command;

use super::{Layer, Sandbox};
use crate::policy::SecurityPolicy;

/// `bwrap` building the full sandbox's namespaces, ending in `--` (the caller appends the stage
/// path, the program and its arguments). The new root holds only: `/usr` and the `/bin`, `/lib`
/// links read-only, the system config files of `SYSTEM_CONFIG_FILES`, the operator's global git
/// config, a private `/proc` (PID namespace), a minimal `/dev`, a private `/tmp`, the stage
/// executable, and the agent's roots at their own paths (workspace and `ReadWrite` roots
/// writable, `Read` roots read-only, `Write` roots writable — Landlock inside makes them
/// write-only). Not `/run`, `/var`, `/home`, `/root`, `/etc/ssl/private` or the rest of `/etc`.
pub(crate) fn bubblewrap(sandbox: &Sandbox, stage_exe: &Path, privileged: bool) -> Command {
    let policy = sandbox.policy();
    // Checked by `bwrap_status` before this level was chosen.
    let mut cmd = Command::new(super::bwrap_path().unwrap_or_else(|_| "bwrap".into()));
    cmd.args(["--die-with-parent", "--new-session"]);
    // As root, bwrap runs privileged (no user namespace) and keeps the capabilities the stage
    // needs to become `nobody`, which drops them all; otherwise a user namespace, no capabilities.
    if !privileged {
        cmd.args(["--unshare-user", "--cap-drop", "ALL"]);
    }
    cmd.args([
        "--unshare-ipc",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup",
    ]);
    if sandbox.on(Layer::PidNamespace) {
        cmd.arg("--unshare-pid");
    }
    if policy.allow_network() || !sandbox.on(Layer::NetNamespace) {
        cmd.arg("--share-net");
    }
    cmd.args(["--ro-bind", "/usr", "/usr"]);
    for dir in ["/bin", "/sbin", "/lib", "/lib64", "/lib32"] {
        let path = Path::new(dir);
        match std::fs::read_link(path) {
            Ok(target) => {
                cmd.arg("--symlink").arg(target).arg(path);
            }
            Err(_) if path.is_dir() => {
                cmd.arg("--ro-bind").arg(path).arg(path);
            }
            Err(_) => {}
        }
    }
    // bwrap makes mount-point parents 0700: `/etc` must be walkable by the sandbox user.
    cmd.args(["--perms", "0755", "--dir", "/etc"]);
    for file in super::SYSTEM_CONFIG_FILES {
        cmd.args(["--ro-bind-try", file, file]);
    }
    if sandbox.on(Layer::PidNamespace) {
        cmd.args(["--proc", "/proc"]);
    } else {
        cmd.args(["--ro-bind", "/proc", "/proc"]);
    }
    cmd.args(["--dev", "/dev", "--tmpfs", "/tmp"]);
    if !sandbox.on(Layer::HostIpcHidden) {
        for dir in ["/run", "/var/run", "/tmp", "/dev/shm", "/home"] {
            cmd.args(["--bind-try", dir, dir]);
        }
    }
    cmd.arg("--ro-bind")
        .arg(stage_exe)
        .arg(super::stage::STAGE_PATH);
    // Directories bwrap creates for mount points are 0700 root: the sandbox user could not walk
    // to its own workspace by absolute path. Create every ancestor of a bound root 0755 first.
    let mut ancestors = std::collections::BTreeSet::new();
    for root in std::iter::once(policy.workspace())
        .chain(policy.read_write_roots().iter().map(|g| g.root.as_path()))
        .chain(policy.read_only_roots().iter().map(|g| g.root.as_path()))
        .chain(policy.write_only_roots().iter().map(|g| g.root.as_path()))
    {
        ancestors.extend(root.ancestors().skip(1).filter(|a| a.parent().is_some()));
    }
    let global_git = super::landlock_rules::global_git_config();
    for file in &global_git {
        ancestors.extend(file.ancestors().skip(1).filter(|a| a.parent().is_some()));
    }
    for dir in ancestors {
        cmd.args(["--perms", "0755", "--dir"]).arg(dir);
    }
    // The operator's global git config files (commit identity, GIT-5), read-only; nothing else of
    // that home directory.
    for p in &global_git {
        cmd.arg("--ro-bind-try").arg(p).arg(p);
    }
    let bind = |cmd: &mut Command, flag: &str, root: &Path| {
        cmd.arg(flag).arg(root).arg(root);
    };
    bind(&mut cmd, "--bind", policy.workspace());
    for g in policy.read_write_roots() {
        bind(&mut cmd, "--bind-try", &g.root);
    }
    for g in policy.read_only_roots() {
        bind(&mut cmd, "--ro-bind-try", &g.root);
    }
    for g in policy.write_only_roots() {
        bind(&mut cmd, "--bind-try", &g.root);
    }
    cmd.arg("--chdir").arg(policy.workspace()).arg("--");
    cmd
}

/// Image used by the docker backend.
pub const DOCKER_IMAGE: &str = "debian:stable-slim";

/// `docker run` with the workspace mounted read-write at the same path and no network unless allowed.
pub(crate) fn docker(policy: &SecurityPolicy, program: &OsStr, args: &[OsString]) -> Command {
    let mut cmd = Command::new("docker");
    cmd.args([
        "run",
        "--rm",
        "-i",
        "--init",
        "--cap-drop=ALL",
        "--security-opt=no-new-privileges",
    ]);
    if !policy.allow_network() {
        cmd.args(["--network", "none"]);
    }
    let mut volume = |root: &Path, mode: &str| {
        let mut v = root.as_os_str().to_os_string();
        v.push(":");
        v.push(root);
        v.push(":");
        v.push(mode);
        cmd.arg("-v").arg(v);
    };
    volume(policy.workspace(), "rw");
    for g in policy.read_write_roots() {
        volume(&g.root, "rw");
    }
    for g in policy.read_only_roots() {
        volume(&g.root, "ro");
    }
    cmd.arg("-w")
        .arg(policy.workspace())
        .arg(DOCKER_IMAGE)
        .arg(program)
        .args(args);
    cmd
}
