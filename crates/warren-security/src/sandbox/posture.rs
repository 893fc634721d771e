//! What a sandbox reports about itself (`warren security posture`, `/api/status`): the level,
//! each layer and what the level does not stop.

use super::{Backend, Layer, Sandbox, is_root, landlock_abi, seccomp, wrappers};

impl Sandbox {
    fn watches_posture(&self) -> &'static str {
        match (self.on(Layer::Seccomp), self.watches()) {
            (true, seccomp::Watches::Denied) => {
                "denied (seccomp refuses inotify_init and fanotify_init: a watch needs no Landlock right)"
            }
            (true, seccomp::Watches::Allowed) => {
                "inotify allowed (every path the child can name is one it may read); fanotify denied"
            }
            (false, _) => "allowed (seccomp switched off)",
        }
    }

    /// The effective sandbox, for `warren security posture` and `/api/status`: the level, each
    /// layer, and what this level does not stop.
    pub fn posture(&self) -> serde_json::Value {
        let network = self.policy.allow_network();
        let (layers, not_contained): (serde_json::Value, Vec<&str>) = match self.backend {
            Backend::Full => (
                serde_json::json!({
                    "namespaces": ["user", "mount", "pid", "network", "ipc", "uts", "cgroup"],
                    "landlock_abi": landlock_abi(),
                    "seccomp": true,
                    "capabilities": "all dropped, no_new_privs",
                    "exec_allowlist": self.exec_allowlist().is_some(),
                    "file_watches": self.watches_posture(),
                    "rlimits": self.rlimits(),
                    "runs_as": if is_root() { "nobody (daemon is root), in a user namespace of its own" } else { "the daemon's user, in a user namespace" },
                }),
                vec![
                    "the dynamic loader can be named as a program to run any readable binary, and an interpreter can execute a memfd, so an exec-capable allowed command can bypass the exec allowlist (see exec_capable)",
                    "inotify instances are counted per host user (nobody, or the daemon's user): one call can hold all of them (when file watches are allowed)",
                    "stat on a known name in a Write-granted root shows its type, size, owner, mode and times (Landlock has no right for stat)",
                ],
            ),
            Backend::Landlock => (
                serde_json::json!({
                    "namespaces": [],
                    "landlock_abi": landlock_abi(),
                    "seccomp": true,
                    "exec_allowlist": self.exec_allowlist().is_some(),
                    "file_watches": self.watches_posture(),
                    "rlimits": self.rlimits(),
                }),
                vec![
                    "host Unix sockets are reachable by path (no mount namespace)",
                    "processes that leave the process group survive the call (no PID namespace)",
                    "/proc shows the host's processes (their cmdline is readable)",
                    "the host's System V IPC objects are reachable (no IPC namespace; POSIX message queues are held by Landlock)",
                    "the mode, timestamps and extended attributes of files in Read-granted roots can be changed (Landlock does not cover chmod, utimes or setxattr; the full level binds those roots read-only)",
                    "the child runs with the daemon's uid (uid 0 with only CAP_DAC_OVERRIDE when the daemon is root, so no process limit applies)",
                    "stat on any known host path shows its type, size, owner, mode and times (Landlock has no right for stat)",
                ],
            ),
            Backend::Docker => (
                serde_json::json!({"container": wrappers::DOCKER_IMAGE}),
                vec![],
            ),
            Backend::Noop => (
                serde_json::json!({}),
                vec!["everything: commands run unconfined with the daemon's rights"],
            ),
        };
        serde_json::json!({
            "requested": self.requested,
            "active": self.backend,
            "level": match self.backend {
                Backend::Full => "full",
                Backend::Landlock => "landlock (weaker: no namespaces)",
                Backend::Docker => "docker",
                Backend::Noop => "none",
            },
            "fallback_used": self.fallback_used,
            "landlock_abi": landlock_abi(),
            "carries_sibling_roots": matches!(self.backend, Backend::Full | Backend::Landlock),
            "network": match (self.backend, network) {
                (Backend::Noop, _) | (_, true) => "allowed",
                (Backend::Full, false) if self.proxied() => "only the allowlisted hosts, through the daemon's egress proxy (empty network namespace with the proxy on its loopback)",
                (Backend::Full, false) => "denied (empty network namespace; seccomp allows only AF_UNIX sockets)",
                (Backend::Landlock, false) => "denied (seccomp allows only AF_UNIX sockets)",
                (Backend::Docker, false) => "denied (--network none)",
            },
            "layers": layers,
            "not_contained": not_contained,
        })
    }
}
