//! The guard of the daemon's local control socket, `data/daemon.sock` (issue 35 §1, ACP-5):
//! what a connecting process must prove before the daemon serves it an agent.
//!
//! The peer's uid alone proved nothing: a child of an agent whose risk profile says
//! `sandbox = "landlock"` runs with the daemon's uid (uid 0 with `CAP_DAC_OVERRIDE` when the daemon
//! is root, so file modes are no obstacle), has no mount namespace, and may connect to any
//! Unix socket by path. It opened an ACP session as another agent. Two independent kernel facts
//! now stand between such a child and the socket; either one alone refuses it:
//!
//! 1. **The key** ([`ControlKey`]): 32 random bytes the daemon writes to `data/daemon.key`
//!    (0600) at start. `warren acp` reads it and sends it in the handshake. No sandboxed child
//!    can read it whatever its uid or capabilities: Landlock (both levels) allows reads only
//!    below the agent's roots and the system set (`/usr`, `/bin`, `/lib*`, `/proc`, a few
//!    `/etc` files), and `data/` is none of them; the full level does not even mount it. The
//!    daemon refuses to publish a key below a system path ([`system_readable`]). Nor can a child
//!    take it from a process: the key is never in an environment or a command line, and Landlock
//!    refuses `ptrace`-class access (`/proc/<pid>/mem`, `fd/`, `environ`) to processes outside
//!    the child's domain.
//! 2. **The peer check** ([`Guard::admit_peer`]): `SO_PEERCRED` gives the connecting process;
//!    the daemon reads its `Seccomp_filters` count from `/proc/<pid>/status` and refuses a peer
//!    carrying Warren's two filters on top of the daemon's own (at least the daemon's count plus
//!    two). Every sandboxed child carries exactly that many or more (a child's own filters only
//!    add), and a process can never remove a seccomp filter (they are inherited across `fork`
//!    and `exec`), so no child can pass for an unsandboxed process. A relay under one extra
//!    filter of its own (an editor in a Flatpak or Snap) is still admitted.
//!    The pid is pinned with `SO_PEERPIDFD` (Linux 6.5+): the status is read through a
//!    `/proc/<pid>` handle opened while the peer's pidfd shows it alive, so a recycled pid
//!    cannot stand in for the peer. A peer whose status cannot be read is refused.
//!
//! The uid check stays (the socket is the local owner's only). `warren acp` run from a shell
//! that is itself under two or more seccomp filters the daemon does not carry is refused with
//! that reason; run it where the daemon was started.

#![allow(unsafe_code)]

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::sandbox::system_readable;

/// Random bytes in a key.
const KEY_BYTES: usize = 32;

/// Why the control socket's key could not be made, published or read.
#[derive(Debug, thiserror::Error)]
pub enum ControlKeyError {
    #[error("cannot draw the control socket's key from the kernel: {0}")]
    Random(std::io::Error),
    #[error("cannot write the control socket's key {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "cannot read the control socket's key {path}: {source} (is a warren daemon running on this install root, and are you its user?)"
    )]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the control socket's key {path} is malformed (restart the daemon to write a new one)")]
    Malformed { path: PathBuf },
    #[error(
        "the control socket's key {path} would sit below {system}, which every sandboxed child may read; move the install root out of {system}"
    )]
    Exposed { path: PathBuf, system: &'static str },
}

/// Why the daemon refused a connection on its control socket.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerRefused {
    #[error("refused a connection from uid {uid} (the socket belongs to uid {owner})")]
    Uid { uid: u32, owner: u32 },
    #[error(
        "refused pid {pid}: it carries {filters} seccomp filters and the daemon {ours}, so it runs inside an agent's sandbox (run `warren acp` from a shell outside any sandbox, under the daemon's filters)"
    )]
    Sandboxed { pid: i32, filters: u32, ours: u32 },
    #[error("refused pid {pid}: cannot verify that it runs outside every agent sandbox: {reason}")]
    Unverified { pid: i32, reason: String },
    #[error(
        "refused: the handshake carries no valid key (`warren acp` reads it from the daemon's data/daemon.key)"
    )]
    Key,
}

/// The daemon's control socket key: 32 random bytes, hex-encoded. `Debug` does not show it.
#[derive(Clone)]
pub struct ControlKey(String);

impl std::fmt::Debug for ControlKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ControlKey(..)")
    }
}

impl ControlKey {
    /// A fresh key from the kernel's random source.
    pub fn generate() -> Result<Self, ControlKeyError> {
        let mut bytes = [0u8; KEY_BYTES];
        let mut filled = 0;
        while filled < KEY_BYTES {
            filled += rustix::rand::getrandom(
                &mut bytes[filled..],
                rustix::rand::GetRandomFlags::empty(),
            )
            .map_err(|e| ControlKeyError::Random(e.into()))?;
        }
        Ok(Self(bytes.iter().map(|b| format!("{b:02x}")).collect()))
    }

    /// Writes the key to `path` (0600, created fresh and renamed into place), refusing a path
    /// below a directory every sandboxed child may read.
    pub fn publish(&self, path: &Path) -> Result<(), ControlKeyError> {
        let dir = path.parent().unwrap_or(Path::new("/"));
        let resolved = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        if let Some(system) = system_readable(&resolved) {
            return Err(ControlKeyError::Exposed {
                path: path.to_path_buf(),
                system,
            });
        }
        let write_err = |source| ControlKeyError::Write {
            path: path.to_path_buf(),
            source,
        };
        let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(write_err)?;
        file.write_all(self.0.as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(write_err)?;
        std::fs::rename(&tmp, path).map_err(write_err)
    }

    /// The key a running daemon published at `path`.
    pub fn read(path: &Path) -> Result<Self, ControlKeyError> {
        let text = std::fs::read_to_string(path).map_err(|source| ControlKeyError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let text = text.trim();
        if text.len() != KEY_BYTES * 2 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ControlKeyError::Malformed {
                path: path.to_path_buf(),
            });
        }
        Ok(Self(text.to_string()))
    }

    /// The key as the handshake carries it.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `offered` is this key (compared in constant time).
    pub fn matches(&self, offered: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), offered.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

/// What the daemon checks of a connection. [`Guard::FULL`] in the daemon; tests switch a half
/// off to show that the other half, and the sandbox layer behind it, holds alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Guard {
    key: bool,
    peer: bool,
}

impl Guard {
    /// The uid, the key and the peer check.
    pub const FULL: Guard = Guard {
        key: true,
        peer: true,
    };

    /// Without the key (tests and the selftest's liveness rows only).
    #[doc(hidden)]
    pub fn without_key(self) -> Self {
        Self { key: false, ..self }
    }

    /// Without the peer check (tests and the selftest's liveness rows only).
    #[doc(hidden)]
    pub fn without_peer_check(self) -> Self {
        Self {
            peer: false,
            ..self
        }
    }

    /// The uid check and (unless switched off) the peer check of a connected socket, before a
    /// byte of the handshake is read.
    pub fn admit_peer(&self, socket: BorrowedFd<'_>, owner: u32) -> Result<(), PeerRefused> {
        let cred = peer_cred(socket).map_err(|e| PeerRefused::Unverified {
            pid: 0,
            reason: format!("SO_PEERCRED: {e}"),
        })?;
        if cred.uid != owner {
            return Err(PeerRefused::Uid {
                uid: cred.uid,
                owner,
            });
        }
        if !self.peer {
            return Ok(());
        }
        let pid = cred.pid;
        if pid <= 0 {
            // A peer in a PID namespace the daemon cannot see.
            return Err(PeerRefused::Unverified {
                pid,
                reason: "its pid is not visible from the daemon's PID namespace".into(),
            });
        }
        let unverified = |reason: String| PeerRefused::Unverified { pid, reason };
        let ours = seccomp_filters(&std::fs::read_to_string("/proc/self/status").map_err(|e| {
            unverified(format!(
                "cannot read the daemon's own /proc/self/status: {e}"
            ))
        })?)
        .ok_or_else(|| unverified("the kernel shows no Seccomp_filters line".into()))?;
        let filters = peer_filters(socket, pid).map_err(|e| unverified(e.to_string()))?;
        if filters >= ours.saturating_add(crate::sandbox::seccomp::CHILD_FILTERS) {
            return Err(PeerRefused::Sandboxed { pid, filters, ours });
        }
        Ok(())
    }

    /// The key check of the handshake (`offered`: the handshake's `key`).
    pub fn admit_key(&self, key: &ControlKey, offered: Option<&str>) -> Result<(), PeerRefused> {
        if !self.key || offered.is_some_and(|o| key.matches(o)) {
            Ok(())
        } else {
            Err(PeerRefused::Key)
        }
    }
}

/// The `Seccomp_filters:` count of a `/proc/<pid>/status` text.
fn seccomp_filters(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Seccomp_filters:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The seccomp filter count of the socket's peer `pid`, read through a `/proc/<pid>` handle
/// that is known to be the peer's: opened first, then the peer's pidfd (taken from the socket)
/// must show the peer still alive, so the pid had not been recycled when it was opened.
fn peer_filters(socket: BorrowedFd<'_>, pid: i32) -> Result<u32, PeerStatusError> {
    use rustix::fs::{Mode, OFlags};
    let dir = rustix::fs::open(
        format!("/proc/{pid}"),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| PeerStatusError::Open {
        path: format!("/proc/{pid}"),
        errno,
    })?;
    // Before Linux 6.5 there is no SO_PEERPIDFD: the pid is taken as it is (the key still
    // holds alone).
    if let Some(pidfd) = peer_pidfd(socket) {
        pidfd_alive(pidfd.as_fd()).map_err(PeerStatusError::Exited)?;
    }
    let status = rustix::fs::openat(
        &dir,
        "status",
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| PeerStatusError::Open {
        path: format!("/proc/{pid}/status"),
        errno,
    })?;
    let text = std::io::read_to_string(std::fs::File::from(status))
        .map_err(|source| PeerStatusError::Read { pid, source })?;
    seccomp_filters(&text).ok_or(PeerStatusError::NoFilterLine { pid })
}

/// Why the peer's seccomp filter count could not be read.
#[derive(Debug, thiserror::Error)]
enum PeerStatusError {
    #[error("{path}: {errno}")]
    Open {
        path: String,
        errno: rustix::io::Errno,
    },
    #[error("the peer exited before it could be checked ({0})")]
    Exited(std::io::Error),
    #[error("/proc/{pid}/status: {source}")]
    Read { pid: i32, source: std::io::Error },
    #[error("/proc/{pid}/status has no Seccomp_filters")]
    NoFilterLine { pid: i32 },
}

/// `SO_PEERCRED` of a connected Unix socket (read into `libc::ucred`, whose pid may be 0 for a
/// peer in an unseen PID namespace).
fn peer_cred(socket: BorrowedFd<'_>) -> std::io::Result<libc::ucred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: u32::MAX,
        gid: u32::MAX,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes (one ucred) into `cred`, a live local.
    let r = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &raw mut len,
        )
    };
    if r == 0 {
        Ok(cred)
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// `SO_PEERPIDFD` (asm-generic and x86 numbering).
#[cfg(not(any(target_arch = "mips", target_arch = "mips64", target_arch = "sparc64")))]
const SO_PEERPIDFD: libc::c_int = 77;

/// The pidfd of the socket's peer (Linux 6.5+), `None` where the kernel has none.
#[cfg(not(any(target_arch = "mips", target_arch = "mips64", target_arch = "sparc64")))]
fn peer_pidfd(socket: BorrowedFd<'_>) -> Option<OwnedFd> {
    let mut fd: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the kernel writes one c_int into `fd` and its size into `len`, both live locals.
    let r = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_PEERPIDFD,
            (&raw mut fd).cast(),
            &raw mut len,
        )
    };
    // SAFETY: on success the kernel returned a new descriptor that nothing else owns.
    (r == 0 && fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(any(target_arch = "mips", target_arch = "mips64", target_arch = "sparc64"))]
fn peer_pidfd(_socket: BorrowedFd<'_>) -> Option<OwnedFd> {
    None
}

/// `pidfd_send_signal(pidfd, 0)`: whether the process behind the pidfd is still alive.
fn pidfd_alive(pidfd: BorrowedFd<'_>) -> std::io::Result<()> {
    // SAFETY: signal 0 only checks the target; no siginfo pointer, no flags.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            0,
            std::ptr::null::<libc::siginfo_t>(),
            0u32,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_count_is_read_from_the_status_line() {
        assert_eq!(
            seccomp_filters("Name:\tx\nSeccomp:\t2\nSeccomp_filters:\t3\n"),
            Some(3)
        );
        assert_eq!(seccomp_filters("Seccomp:\t0\n"), None);
    }

    #[test]
    fn a_key_matches_only_itself() {
        let key = ControlKey::generate().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(key.as_str().len(), 64);
        assert!(key.matches(key.as_str()));
        assert!(!key.matches(&key.as_str()[1..]));
        assert!(!key.matches(&"0".repeat(64)));
        assert!(Guard::FULL.admit_key(&key, None).is_err());
        assert!(Guard::FULL.without_key().admit_key(&key, None).is_ok());
        assert!(!format!("{key:?}").contains(key.as_str()));
    }

    #[test]
    fn a_key_below_a_path_every_sandboxed_child_reads_is_refused_issue35() {
        let key = ControlKey::generate().unwrap_or_else(|e| panic!("{e}"));
        let refused = key.publish(Path::new("/usr/share/warren-never/daemon.key"));
        assert!(
            matches!(
                refused,
                Err(ControlKeyError::Exposed { system: "/usr", .. })
            ),
            "{refused:?}"
        );
    }
}
