//! The shell's egress through a proxy (issue 24 §3, SBX-2).
//!
//! Design: with `allow_network = false` and a non-empty `[agents.<alias>.network] allow`, the
//! child still gets its own EMPTY network namespace; in it the launcher (running in the new
//! namespace, before it drops its capabilities) brings up `lo`, opens a TCP listener on
//! `127.0.0.1:`[`PROXY_PORT`] and passes that listener's descriptor to the daemon over a
//! socketpair (`SCM_RIGHTS`). A socket stays in the namespace it was created in, so the daemon
//! accepts, on its own threads, connections made INSIDE the sandbox — no forwarder process,
//! no veth, no privileges. The daemon's [`EgressProxy`] (the runtime's HTTP CONNECT proxy)
//! checks each CONNECT host / absolute URI against the allowlist, logs it to the trace and
//! connects from the host side. `HTTPS_PROXY`/`HTTP_PROXY` point the child at it.
//!
//! Nothing else is reachable: the namespace has no other interface and no route. On top,
//! Landlock (ABI ≥ 4) lets the child `connect` over TCP only to the proxy port and bind none.
//! The proxy stops when the child exits (a pidfd on the child).

use std::os::fd::{AsFd, OwnedFd};

/// The proxy's port on the sandbox's own loopback.
pub const PROXY_PORT: u16 = 3128;

/// The daemon side of a sandbox's egress proxy (the runtime implements it).
pub trait EgressProxy: Send + Sync + std::fmt::Debug {
    /// Serves `listener` (in the sandbox's network namespace) until the child exits
    /// ([`ExitWatch::wait`] returns).
    fn serve(&self, listener: std::net::TcpListener, exited: ExitWatch);

    /// Whether a connection was let through since the last call (the runtime's taint rule
    /// treats the output of a shell command that reached the network as untrusted).
    fn take_used(&self) -> bool;
}

/// Waits for a spawned child's exit (a pidfd: no race with the pid's reuse).
#[derive(Debug)]
pub struct ExitWatch(OwnedFd);

impl ExitWatch {
    /// Blocks until the child has exited (or the wait fails).
    pub fn wait(self) {
        use rustix::event::{PollFd, PollFlags, poll};
        loop {
            let mut fds = [PollFd::new(&self.0, PollFlags::IN)];
            match poll(&mut fds, None) {
                Err(rustix::io::Errno::INTR) => continue,
                _ => return,
            }
        }
    }
}

/// The socketpair a spawn receives its listener over: `(daemon end, child end)`.
pub(crate) fn channel() -> std::io::Result<(OwnedFd, OwnedFd)> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType, socketpair};
    socketpair(
        AddressFamily::UNIX,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(std::io::Error::from)
}

/// The listener the launcher sent on `ours` (already there once the spawn returned).
pub(crate) fn receive(ours: &OwnedFd) -> std::io::Result<std::net::TcpListener> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, recvmsg};
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    recvmsg(
        ours.as_fd(),
        &mut [std::io::IoSliceMut::new(&mut byte)],
        &mut control,
        RecvFlags::DONTWAIT | RecvFlags::CMSG_CLOEXEC,
    )
    .map_err(std::io::Error::from)?;
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(mut fds) = message
            && let Some(fd) = fds.next()
        {
            return Ok(std::net::TcpListener::from(fd));
        }
    }
    Err(std::io::Error::other("the sandbox sent no proxy listener"))
}

/// A watch on `pid`'s exit.
pub(crate) fn pidfd(pid: u32) -> std::io::Result<ExitWatch> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| std::io::Error::other("bad pid"))?;
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())
        .map(ExitWatch)
        .map_err(std::io::Error::from)
}

/// The proxy variables a proxied child gets.
pub(crate) fn env() -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    let url = format!("http://127.0.0.1:{PROXY_PORT}");
    ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"]
        .into_iter()
        .map(|k| (k.into(), url.clone().into()))
        .chain([("NO_PROXY".into(), "".into())])
        .collect()
}
