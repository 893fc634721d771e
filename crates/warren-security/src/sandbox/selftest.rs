//! The escape matrix of `warren security selftest` (issue 13): each probe performs one attack
//! from inside the agent's real sandbox, on this kernel, and the daemon side judges whether it
//! got out. Network probes aim at listeners the selftest opens on the host's loopback, so an
//! escape is a datagram or connection that actually arrived, not a guess from an error code.
//!
//! Most probes run in the stage itself after confinement (no program needed, exact syscalls);
//! `survivors` runs `/bin/sh`. Tests run the same probes with one layer switched off to show
//! each probe is live.

use std::ffi::OsString;
use std::net::{TcpListener, UdpSocket};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{ChildIo, Layer, Sandbox, SandboxError};
use crate::confined_dir::ConfinedDir;

/// One probe of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Probe {
    Udp,
    Tcp,
    Mptcp,
    TcpFastOpen,
    KernelSockets,
    HostUnixSocket,
    ProcEnviron,
    Survivors,
    OutsideRead,
    OutsideStat,
    SymlinkOut,
    HardlinkOut,
    ReadOnlyTierWrite,
    WriteOnlyTierRead,
    RootPrivileges,
    ExecUnlisted,
    IoUring,
    NestedNamespace,
    KernelInterfaces,
    SignalOutside,
    ProcessMemory,
    AbstractUnixSocket,
    SysvIpc,
    HardlinkIntoWriteTier,
    SharedProcessLimit,
    I386Abi,
    ReadOnlyTierMetadata,
    ControlSocket,
    WriteOnlyTierWatch,
}

impl Probe {
    pub const ALL: [Probe; 29] = [
        Probe::Udp,
        Probe::Tcp,
        Probe::Mptcp,
        Probe::TcpFastOpen,
        Probe::KernelSockets,
        Probe::HostUnixSocket,
        Probe::ProcEnviron,
        Probe::Survivors,
        Probe::OutsideRead,
        Probe::OutsideStat,
        Probe::SymlinkOut,
        Probe::HardlinkOut,
        Probe::ReadOnlyTierWrite,
        Probe::WriteOnlyTierRead,
        Probe::RootPrivileges,
        Probe::ExecUnlisted,
        Probe::IoUring,
        Probe::NestedNamespace,
        Probe::KernelInterfaces,
        Probe::SignalOutside,
        Probe::ProcessMemory,
        Probe::AbstractUnixSocket,
        Probe::SysvIpc,
        Probe::HardlinkIntoWriteTier,
        Probe::SharedProcessLimit,
        Probe::I386Abi,
        Probe::ReadOnlyTierMetadata,
        Probe::ControlSocket,
        Probe::WriteOnlyTierWatch,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Probe::Udp => "network: UDP datagram to the host",
            Probe::Tcp => "network: TCP connect to the host",
            Probe::Mptcp => "network: MPTCP connect to the host",
            Probe::TcpFastOpen => "network: TCP Fast Open sendto the host",
            Probe::KernelSockets => {
                "sockets: netlink, packet, vsock, alg, bluetooth, xdp, can, tipc, key, rds, raw"
            }
            Probe::HostUnixSocket => "host Unix socket (in host /tmp)",
            Probe::ProcEnviron => "/proc/<daemon>/environ and cmdline",
            Probe::Survivors => "survivor after the call (job-control fork)",
            Probe::OutsideRead => "read the install root's secret key",
            Probe::OutsideStat => "stat the install root's config",
            Probe::SymlinkOut => "read through a symlink to the secret key",
            Probe::HardlinkOut => "hard-link the secret key into the workspace",
            Probe::ReadOnlyTierWrite => "write into a Read-granted sibling",
            Probe::WriteOnlyTierRead => "list a Write-granted sibling",
            Probe::RootPrivileges => "uid 0 or capabilities",
            Probe::ExecUnlisted => "run a program outside allowed_commands",
            Probe::IoUring => "io_uring (operations unseen by seccomp)",
            Probe::NestedNamespace => "nested user namespace (unshare, clone, clone3)",
            Probe::KernelInterfaces => {
                "bpf, perf_event_open, userfaultfd, keyctl, ptrace, mount, pidfd_getfd"
            }
            Probe::SignalOutside => "signal a host process",
            Probe::ProcessMemory => {
                "read the daemon's memory or descriptors (process_vm_readv, /proc/<pid>/mem, pidfd_getfd)"
            }
            Probe::AbstractUnixSocket => "host abstract Unix socket (@name)",
            Probe::SysvIpc => "host System V shared memory and POSIX message queues",
            Probe::HardlinkIntoWriteTier => "hard-link an own file into a Write-granted sibling",
            Probe::SharedProcessLimit => "exhaust the process limit of another call",
            Probe::I386Abi => "i386 system calls (int 0x80): unshare a user namespace",
            Probe::ReadOnlyTierMetadata => "chmod a file of a Read-granted sibling",
            Probe::ControlSocket => {
                "the daemon's control socket: read its key or open a session as another agent"
            }
            Probe::WriteOnlyTierWatch => "watch a Write-granted sibling (inotify, fanotify)",
        }
    }

    /// The layers of the full sandbox that stop this probe.
    pub fn layers(self) -> &'static [Layer] {
        match self {
            Probe::Udp | Probe::Mptcp | Probe::TcpFastOpen => {
                &[Layer::Seccomp, Layer::NetNamespace]
            }
            Probe::Tcp => &[Layer::Seccomp, Layer::NetNamespace, Layer::Landlock],
            Probe::KernelSockets => &[Layer::Seccomp],
            Probe::HostUnixSocket => &[Layer::HostIpcHidden],
            Probe::ProcEnviron => &[Layer::PidNamespace, Layer::SandboxUser],
            Probe::Survivors => &[Layer::PidNamespace],
            Probe::OutsideRead | Probe::SymlinkOut | Probe::HardlinkOut => &[Layer::Landlock],
            Probe::OutsideStat => &[],
            Probe::ReadOnlyTierWrite | Probe::WriteOnlyTierRead => &[Layer::Landlock],
            Probe::RootPrivileges => &[Layer::SandboxUser],
            Probe::ExecUnlisted => &[Layer::ExecAllowlist],
            Probe::IoUring | Probe::NestedNamespace | Probe::KernelInterfaces => &[Layer::Seccomp],
            Probe::SignalOutside => &[Layer::PidNamespace, Layer::Landlock],
            Probe::ProcessMemory => &[
                Layer::PidNamespace,
                Layer::Seccomp,
                Layer::Landlock,
                Layer::SandboxUser,
            ],
            Probe::AbstractUnixSocket => &[Layer::NetNamespace, Layer::Landlock],
            Probe::SysvIpc => &[],
            Probe::HardlinkIntoWriteTier => &[Layer::Landlock],
            Probe::SharedProcessLimit => &[Layer::OwnUserNamespace],
            Probe::I386Abi => &[Layer::Seccomp],
            Probe::ReadOnlyTierMetadata => &[],
            Probe::ControlSocket => &[],
            Probe::WriteOnlyTierWatch => &[Layer::Seccomp],
        }
    }
}

/// What stops a probe under the full sandbox, as the selftest prints it.
fn stopped_by(probe: Probe) -> Vec<&'static str> {
    match probe {
        Probe::OutsideRead | Probe::SymlinkOut | Probe::HardlinkOut => {
            vec!["mount namespace (not bound)", "landlock"]
        }
        Probe::OutsideStat => vec!["mount namespace (not bound)"],
        Probe::SysvIpc => vec!["ipc namespace"],
        Probe::ReadOnlyTierMetadata => vec!["mount namespace (read-only bind)"],
        Probe::ControlSocket => vec![
            "mount namespace (not bound)",
            "landlock (the key is unreadable)",
            "the socket's peer check (seccomp filters)",
        ],
        Probe::HardlinkIntoWriteTier => vec!["mount namespace (EXDEV)", "landlock (no refer)"],
        other => other.layers().iter().map(|l| l.name()).collect(),
    }
}

/// Why a probe could not be run: its row is skipped, with this as its detail.
#[derive(Debug, thiserror::Error)]
pub(super) enum Unprobed {
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error("cannot {what}: {source}")]
    Host {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("{0} is missing")]
    Missing(&'static str),
    #[error(transparent)]
    Dir(#[from] crate::confined_dir::DirError),
    #[error(transparent)]
    Workspace(#[from] crate::policy::PolicyError),
    #[error(transparent)]
    Key(#[from] crate::control_socket::ControlKeyError),
    #[error("cannot encode the probe's aim: {0}")]
    Aim(serde_json::Error),
    #[error("{}: {source}", path.display())]
    Path {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What the stage does for a probe (sent in the stage spec).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ProbeSpec {
    pub probe: Probe,
    /// Address, path or pid the probe aims at.
    pub target: String,
}

/// The verdict of one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Held,
    Escape,
    Skipped,
}

/// One row of the matrix.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub probe: Probe,
    pub name: &'static str,
    pub outcome: Outcome,
    /// The layers that stop it (when held).
    pub layers: Vec<&'static str>,
    pub detail: String,
}

/// Host-side things the probes aim at: the install root's secret files.
#[derive(Debug, Clone)]
pub struct Targets {
    /// A file the agent must never read (the install root's `.secret_key`).
    pub secret_file: PathBuf,
    /// A file the agent must not even see (`config.toml`).
    pub hidden_file: PathBuf,
    /// The daemon's control socket (`data/daemon.sock`); the selftest's own socket, served with
    /// the daemon's guard, goes beside it.
    pub daemon_socket: PathBuf,
    /// The key of that socket (`data/daemon.key`).
    pub daemon_key: PathBuf,
    /// The gateway's published admin key (`data/gateway.json`).
    pub gateway_admin: PathBuf,
}

/// Runs every probe against `sandbox`.
pub fn run(sandbox: &Sandbox, targets: &Targets) -> Vec<Row> {
    Probe::ALL
        .iter()
        .map(|p| run_probe(sandbox, *p, targets))
        .collect()
}

/// Runs one probe against `sandbox` and judges it.
pub fn run_probe(sandbox: &Sandbox, probe: Probe, targets: &Targets) -> Row {
    let judged = if sandbox.backend() == super::Backend::Noop {
        Ok((
            Outcome::Escape,
            "sandbox noop: nothing contains the agent's commands".into(),
        ))
    } else {
        judge(sandbox, probe, targets)
    };
    let (outcome, detail) = match judged {
        Ok(v) => v,
        Err(e) => (Outcome::Skipped, e.to_string()),
    };
    Row {
        probe,
        name: probe.name(),
        outcome,
        layers: stopped_by(probe),
        detail,
    }
}

pub(super) fn inside(
    sandbox: &Sandbox,
    probe: Probe,
    target: String,
) -> Result<String, SandboxError> {
    let out = sandbox.spawn_probe(&ProbeSpec { probe, target })?;
    Ok(String::from_utf8_lossy(&out).trim().to_string())
}

/// `ok: ...` from the stage means the operation inside succeeded.
pub(super) fn succeeded(line: &str) -> bool {
    line.starts_with("ok")
}

/// [`Probe::ControlSocket`] against a socket served with `guard` (tests switch a half of the
/// guard off to show the probe is live).
#[doc(hidden)]
pub fn control_socket_probe(
    sandbox: &Sandbox,
    targets: &Targets,
    guard: crate::control_socket::Guard,
) -> (Outcome, String) {
    super::selftest_socket::judge(sandbox, targets, guard)
        .unwrap_or_else(|e| (Outcome::Skipped, e.to_string()))
}

fn judge(sandbox: &Sandbox, probe: Probe, t: &Targets) -> Result<(Outcome, String), Unprobed> {
    let policy = sandbox.policy();
    let network_probe = matches!(
        probe,
        Probe::Udp | Probe::Tcp | Probe::Mptcp | Probe::TcpFastOpen
    );
    if network_probe && policy.allow_network() {
        return Ok((Outcome::Skipped, "allow_network = true".into()));
    }
    let verdict = |escaped: bool, detail: String| {
        Ok((
            if escaped {
                Outcome::Escape
            } else {
                Outcome::Held
            },
            detail,
        ))
    };
    match probe {
        Probe::Udp => {
            let aim = |source| Unprobed::Host {
                what: "open a UDP socket on the host's loopback to aim at",
                source,
            };
            let sock = UdpSocket::bind("127.0.0.1:0").map_err(aim)?;
            sock.set_read_timeout(Some(Duration::from_millis(300)))
                .map_err(aim)?;
            let addr = sock.local_addr().map_err(aim)?;
            let line = inside(sandbox, probe, addr.to_string())?;
            let mut buf = [0u8; 64];
            let got = sock.recv(&mut buf).is_ok();
            verdict(got, line)
        }
        Probe::Tcp | Probe::Mptcp | Probe::TcpFastOpen => {
            let aim = |source| Unprobed::Host {
                what: "open a TCP listener on the host's loopback to aim at",
                source,
            };
            let listener = TcpListener::bind("127.0.0.1:0").map_err(aim)?;
            listener.set_nonblocking(true).map_err(aim)?;
            let addr = listener.local_addr().map_err(aim)?;
            let line = inside(sandbox, probe, addr.to_string())?;
            verdict(accepted(&listener), line)
        }
        Probe::HostUnixSocket => {
            let dir = std::env::temp_dir().join(format!("warren-selftest-{}", std::process::id()));
            let at = |path: &std::path::Path| {
                let path = path.to_path_buf();
                move |source| Unprobed::Path { path, source }
            };
            std::fs::create_dir_all(&dir).map_err(at(&dir))?;
            let path = dir.join("s.sock");
            let _ = std::fs::remove_file(&path);
            let listener = UnixListener::bind(&path).map_err(at(&path))?;
            listener.set_nonblocking(true).map_err(at(&path))?;
            let _ =
                std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777));
            let _ = std::fs::set_permissions(
                &path,
                std::os::unix::fs::PermissionsExt::from_mode(0o777),
            );
            let line = inside(sandbox, probe, path.display().to_string())?;
            let got = listener.accept().is_ok();
            let _ = std::fs::remove_dir_all(&dir);
            verdict(got || succeeded(&line), line)
        }
        Probe::ProcEnviron => {
            let line = inside(sandbox, probe, std::process::id().to_string())?;
            verdict(succeeded(&line), line)
        }
        Probe::Survivors => survivors(sandbox),
        Probe::OutsideRead | Probe::SymlinkOut | Probe::HardlinkOut => {
            let line = inside(sandbox, probe, t.secret_file.display().to_string())?;
            verdict(succeeded(&line), line)
        }
        Probe::OutsideStat => {
            let line = inside(sandbox, probe, t.hidden_file.display().to_string())?;
            verdict(succeeded(&line), line)
        }
        Probe::ReadOnlyTierWrite => match policy.read_only_roots().first() {
            None => Ok((Outcome::Skipped, "the agent has no Read grant".into())),
            Some(g) => {
                let line = inside(sandbox, probe, g.root.display().to_string())?;
                // The grant is agent-writable: cleaned up through a confined handle.
                if let Ok(Some(dir)) = ConfinedDir::open_root(&g.root) {
                    let _ = dir.remove(".warren-selftest");
                }
                verdict(succeeded(&line), line)
            }
        },
        Probe::WriteOnlyTierRead => match policy.write_only_roots().first() {
            None => Ok((Outcome::Skipped, "the agent has no Write grant".into())),
            Some(g) => {
                let line = inside(sandbox, probe, g.root.display().to_string())?;
                verdict(succeeded(&line), line)
            }
        },
        Probe::KernelSockets | Probe::RootPrivileges => {
            let line = inside(sandbox, probe, String::new())?;
            verdict(succeeded(&line), line)
        }
        Probe::IoUring | Probe::NestedNamespace | Probe::KernelInterfaces => {
            let line = inside(sandbox, probe, String::new())?;
            verdict(succeeded(&line), line)
        }
        Probe::SignalOutside => {
            let mut victim = std::process::Command::new("/bin/sleep")
                .arg("30")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .spawn()
                .map_err(|source| Unprobed::Host {
                    what: "start a host process to aim at",
                    source,
                })?;
            let line = inside(sandbox, probe, victim.id().to_string());
            std::thread::sleep(Duration::from_millis(50));
            let died = matches!(victim.try_wait(), Ok(Some(_)));
            let _ = victim.kill();
            let _ = victim.wait();
            let line = line?;
            verdict(died, line)
        }
        Probe::ProcessMemory => {
            let target = format!(
                "{} {}",
                std::process::id(),
                std::hint::black_box(MEMORY_MARK.as_ptr()) as usize
            );
            let line = inside(sandbox, probe, target)?;
            verdict(succeeded(&line), line)
        }
        Probe::AbstractUnixSocket => {
            use std::os::linux::net::SocketAddrExt;
            let name = format!("warren-selftest-{}-{}", std::process::id(), nanos());
            let aim = |source| Unprobed::Host {
                what: "open an abstract Unix socket on the host to aim at",
                source,
            };
            let addr =
                std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).map_err(aim)?;
            let listener = UnixListener::bind_addr(&addr).map_err(aim)?;
            listener.set_nonblocking(true).map_err(aim)?;
            let line = inside(sandbox, probe, name)?;
            verdict(listener.accept().is_ok() || succeeded(&line), line)
        }
        Probe::SysvIpc => {
            let key = (nanos() as i32 & 0x3fff_ffff) | 0x4000_0000;
            let id = super::probe_sys::shm_create(key).map_err(|source| Unprobed::Host {
                what: "create a host segment to aim at",
                source,
            })?;
            let queue = mq_name(key);
            let made = super::probe_sys::mq_create(&queue);
            let line = inside(sandbox, probe, key.to_string());
            super::probe_sys::shm_remove(id);
            super::probe_sys::mq_remove(&queue);
            made.map_err(|source| Unprobed::Host {
                what: "create a host message queue to aim at",
                source,
            })?;
            let line = line?;
            verdict(succeeded(&line), line)
        }
        Probe::I386Abi => {
            if !cfg!(target_arch = "x86_64") {
                return Ok((Outcome::Skipped, "x86_64 only".into()));
            }
            let line = inside(sandbox, probe, String::new())?;
            if line.is_empty() {
                return verdict(
                    false,
                    "killed by seccomp (SIGSYS) at the first i386 call".into(),
                );
            }
            verdict(succeeded(&line), line)
        }
        Probe::HardlinkIntoWriteTier => match policy.write_only_roots().first() {
            None => Ok((Outcome::Skipped, "the agent has no Write grant".into())),
            Some(g) => {
                let line = inside(sandbox, probe, g.root.display().to_string())?;
                // Both places are agent-writable: cleaned up through confined handles.
                if let Ok(Some(dir)) = ConfinedDir::open_root(&g.root) {
                    let _ = dir.remove(PLANTED);
                }
                if let Ok(Some(dir)) = ConfinedDir::open_root(policy.workspace()) {
                    let _ = dir.remove(PLANTED);
                }
                verdict(succeeded(&line), line)
            }
        },
        Probe::SharedProcessLimit => shared_process_limit(sandbox),
        Probe::ReadOnlyTierMetadata => match policy.read_only_roots().first() {
            None => Ok((Outcome::Skipped, "the agent has no Read grant".into())),
            Some(g) => {
                // The daemon plants the file the probe aims at (a Read root is agent-writable
                // for its owner): written and removed through a confined handle.
                let dir =
                    ConfinedDir::open_root(&g.root)?.ok_or(Unprobed::Missing("the Read grant"))?;
                dir.write_atomic(PLANTED, b"x")?;
                let line = inside(sandbox, probe, g.root.join(PLANTED).display().to_string());
                let _ = dir.remove(PLANTED);
                let line = line?;
                verdict(succeeded(&line), line)
            }
        },
        Probe::ControlSocket => {
            super::selftest_socket::judge(sandbox, t, crate::control_socket::Guard::FULL)
        }
        Probe::WriteOnlyTierWatch => super::selftest_watch::judge(sandbox),
        Probe::ExecUnlisted => {
            if sandbox.exec_allowlist().is_none() {
                return Ok((Outcome::Skipped, "allowed_commands = [\"*\"]".into()));
            }
            let allowed = sandbox.exec_allowlist().unwrap_or_default();
            let Some(victim) = ["/usr/bin/id", "/usr/bin/whoami", "/usr/bin/uname"]
                .into_iter()
                .map(PathBuf::from)
                .find(|p| {
                    p.exists() && !allowed.contains(&std::fs::canonicalize(p).unwrap_or(p.clone()))
                })
            else {
                return Ok((Outcome::Skipped, "no unlisted program found".into()));
            };
            let line = inside(sandbox, probe, victim.display().to_string())?;
            verdict(succeeded(&line), line)
        }
    }
}

/// What [`Probe::ProcessMemory`] tries to read out of the daemon.
pub(super) static MEMORY_MARK: [u8; 16] = *b"warren-vm-marker";
/// The file [`Probe::HardlinkIntoWriteTier`] creates and links.
pub(super) const PLANTED: &str = ".warren-selftest-planted";
/// How many processes the fork probe starts at most (the landlock level as root has no limit).
pub(super) const FORK_CAP: usize = 2048;

/// The POSIX message queue name of the IPC probe.
pub(super) fn mq_name(key: i32) -> std::ffi::CString {
    std::ffi::CString::new(format!("/warren-selftest-{key}")).unwrap_or_default()
}

pub(super) fn nanos() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
}

/// One call fills its process limit and stays; a second call of the same agent then tries to
/// fork. Under the full level each call counts its own processes (its own user namespace).
fn shared_process_limit(sandbox: &Sandbox) -> Result<(Outcome, String), Unprobed> {
    let spec = ProbeSpec {
        probe: Probe::SharedProcessLimit,
        target: "fill".into(),
    };
    let mut filler = sandbox.spawn_probe_child(&spec)?;
    let mut first = String::new();
    if let Some(out) = filler.stdout.take() {
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut first);
    }
    let line = inside(sandbox, Probe::SharedProcessLimit, "fork".into());
    // The daemon's own per-user budget (root's 128 inotify instances) is not the call's to use.
    let daemon_inotify =
        rustix::fs::inotify::init(rustix::fs::inotify::CreateFlags::CLOEXEC).map(drop);
    let _ = filler.kill();
    let _ = filler.wait();
    let line = line?;
    let daemon_hit = super::is_root() && daemon_inotify.is_err();
    let detail = format!(
        "{}; the other call: {line}; the daemon's inotify: {}",
        first.trim(),
        daemon_inotify.map_or_else(|e| e.to_string(), |()| "ok".into())
    );
    Ok((
        if succeeded(&line) && !daemon_hit {
            Outcome::Held
        } else {
            Outcome::Escape
        },
        detail,
    ))
}

fn accepted(listener: &TcpListener) -> bool {
    let deadline = Instant::now() + Duration::from_millis(300);
    while Instant::now() < deadline {
        if listener.accept().is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

fn survivors(sandbox: &Sandbox) -> Result<(Outcome, String), Unprobed> {
    const MARK: &str = ".warren-selftest-survivor";
    const STOP: &str = ".warren-selftest-stop";
    sandbox.policy().ensure_workspace()?;
    // The workspace is agent-writable: the markers are read and removed through a handle.
    let ws = ConfinedDir::open_root(sandbox.policy().workspace())?
        .ok_or(Unprobed::Missing("the workspace"))?;
    let _ = ws.remove(MARK);
    let _ = ws.remove(STOP);
    let script = "set -m; ( while [ ! -e .warren-selftest-stop ]; do echo x >> .warren-selftest-survivor; done ) & exit 0";
    let mut child = sandbox.spawn(
        "/bin/sh",
        &[OsString::from("-c"), script.into()],
        ChildIo::Null,
    )?;
    child.wait().map_err(|source| Unprobed::Host {
        what: "wait for the call",
        source,
    })?;
    std::thread::sleep(Duration::from_millis(300));
    let size = || ws.stat(MARK).ok().flatten().map_or(0, |m| m.len);
    let before = size();
    std::thread::sleep(Duration::from_millis(300));
    let after = size();
    let _ = ws.write_atomic(STOP, b"");
    std::thread::sleep(Duration::from_millis(100));
    let _ = ws.remove(MARK);
    let _ = ws.remove(STOP);
    let escaped = after > before;
    Ok((
        if escaped {
            Outcome::Escape
        } else {
            Outcome::Held
        },
        if escaped {
            "a background job kept writing after the call ended".into()
        } else {
            "nothing ran after the call ended".into()
        },
    ))
}
