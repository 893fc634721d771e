//! Command construction for the docker level.

use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::process::Command;

use crate::policy::SecurityPolicy;

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
