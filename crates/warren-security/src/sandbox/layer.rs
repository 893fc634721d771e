//! The levels a sandbox runs at ([`Backend`]), the layers of the full level ([`Layer`]) and how
//! a child's stdio is wired ([`ChildIo`]).

use std::process::Stdio;

use serde::Serialize;

/// Where a child's stdout and stderr go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildIo {
    Piped,
    Null,
    /// stdin, stdout and stderr piped: a long-lived child spoken to over its stdio (an MCP
    /// server, issue 23).
    Duplex,
}

impl ChildIo {
    pub(super) fn stdio(self) -> Stdio {
        match self {
            Self::Piped | Self::Duplex => Stdio::piped(),
            Self::Null => Stdio::null(),
        }
    }

    pub(super) fn stdin(self) -> Stdio {
        match self {
            Self::Duplex => Stdio::piped(),
            Self::Piped | Self::Null => Stdio::null(),
        }
    }
}

/// The level a sandbox actually uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// Namespaces + Landlock + seccomp + no capabilities + rlimits.
    Full,
    /// Landlock + seccomp + rlimits, no namespaces (weaker, named).
    Landlock,
    Docker,
    Noop,
}

/// One layer of the full sandbox. Tests switch a layer off (`Sandbox::without`) to show that a
/// probe is live (it escapes without the layer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    /// The empty network namespace.
    NetNamespace,
    /// The PID namespace with its own `/proc` (also what kills survivors).
    PidNamespace,
    /// The mount namespace's hiding of `/run`, `/var/run`, `/tmp`, `/dev/shm` and homes.
    HostIpcHidden,
    /// Landlock file, network and scope rules.
    Landlock,
    /// The seccomp filter.
    Seccomp,
    /// Landlock EXECUTE only on the allowed commands' binaries.
    ExecAllowlist,
    /// Running as `nobody` when the daemon is root.
    SandboxUser,
    /// Daemon as root, full level: each call's own user namespace (only `nobody` mapped), so
    /// the kernel's per-user process and inotify counts are the call's own.
    OwnUserNamespace,
    /// Only stdio reaches the program: every other descriptor is closed at `exec`.
    CloseInherited,
}

impl Layer {
    pub const ALL: [Layer; 9] = [
        Layer::NetNamespace,
        Layer::PidNamespace,
        Layer::HostIpcHidden,
        Layer::Landlock,
        Layer::Seccomp,
        Layer::ExecAllowlist,
        Layer::SandboxUser,
        Layer::OwnUserNamespace,
        Layer::CloseInherited,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Layer::NetNamespace => "net_namespace",
            Layer::PidNamespace => "pid_namespace",
            Layer::HostIpcHidden => "host_ipc_hidden",
            Layer::Landlock => "landlock",
            Layer::Seccomp => "seccomp",
            Layer::ExecAllowlist => "exec_allowlist",
            Layer::SandboxUser => "sandbox_user",
            Layer::OwnUserNamespace => "own_user_namespace",
            Layer::CloseInherited => "close_inherited_fds",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.name() == name)
    }
}
