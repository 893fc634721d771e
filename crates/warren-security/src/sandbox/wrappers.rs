//! Command construction for the wrapper backends: bubblewrap, firejail and docker. Each returns
//! the wrapper invocation with the agent's program appended after `--`.

use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::process::Command;

use crate::policy::SecurityPolicy;

/// `bwrap` with the workspace and read-write roots bound writable, read-only roots bound
/// read-only; write-only roots are not bound (a mount cannot be write-only; SBX-2).
pub(crate) fn bubblewrap(policy: &SecurityPolicy, program: &OsStr, args: &[OsString]) -> Command {
    let mut cmd = Command::new("bwrap");
    cmd.args(["--die-with-parent", "--new-session", "--unshare-all"]);
    if policy.allow_network() {
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
    for file in super::SYSTEM_CONFIG_FILES {
        cmd.args(["--ro-bind-try", file, file]);
    }
    // The operator's global git config files (commit identity, GIT-5), read-only.
    for p in super::landlock_rules::global_git_config() {
        cmd.arg("--ro-bind-try").arg(&p).arg(&p);
    }
    cmd.args(["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]);
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
    cmd.arg("--chdir")
        .arg(policy.workspace())
        .arg("--")
        .arg(program)
        .args(args);
    cmd
}

/// `firejail` confined to the workspace and granted roots (read-only roots `--read-only`).
pub(crate) fn firejail(policy: &SecurityPolicy, program: &OsStr, args: &[OsString]) -> Command {
    let mut cmd = Command::new("firejail");
    cmd.args([
        "--quiet",
        "--noprofile",
        "--private-dev",
        "--private-tmp",
        "--nosound",
        "--no3d",
        "--caps.drop=all",
        "--nonewprivs",
        "--seccomp",
    ]);
    if !policy.allow_network() {
        cmd.arg("--net=none");
    }
    let mut whitelist = |root: &Path| {
        let mut a = OsString::from("--whitelist=");
        a.push(root);
        cmd.arg(a);
    };
    whitelist(policy.workspace());
    for g in policy
        .read_write_roots()
        .iter()
        .chain(policy.read_only_roots())
    {
        whitelist(&g.root);
    }
    for g in policy.read_only_roots() {
        let mut a = OsString::from("--read-only=");
        a.push(&g.root);
        cmd.arg(a);
    }
    cmd.arg("--").arg(program).args(args);
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
