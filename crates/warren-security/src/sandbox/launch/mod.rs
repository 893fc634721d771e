//! The launcher: what happens between `fork` and `exec` of a confined child.
//!
//! Everything is prepared in the daemon ([`Plan`]: paths as C strings, the Landlock ruleset as
//! an fd, the seccomp filters compiled); the hook that runs in the forked child only makes
//! system calls, never allocates and never takes a lock, so forking a multi-threaded daemon is
//! safe. For the full level the hook:
//!
//! 1. asks for SIGKILL when the spawning thread dies, and unshares the mount, PID, network (unless
//!    allowed), IPC, UTS and cgroup namespaces — plus a user namespace with a one-to-one map of
//!    the daemon's uid when the daemon is not root;
//! 2. forks once more: the grandchild is PID 1 of the new PID namespace, the child stays outside
//!    as its reaper, closes every inherited descriptor but stdio and exits with the grandchild's
//!    status (128 + signal when killed). Killing the child (timeout, cancel) kills the grandchild
//!    through its parent-death signal; the grandchild's exit ends the namespace, which kills every
//!    process the call left behind;
//! 3. in the grandchild: a new session, a private mount tree, a tmpfs root built from binds of
//!    exactly the allowed paths (reached through the old root), a fresh `/proc`, a minimal `/dev`,
//!    a private `/tmp`, then `pivot_root` and the old root detached;
//! 4. rlimits, the switch to `nobody` when the daemon is root (which drops every capability),
//!    `no_new_privs`, the Landlock ruleset, the seccomp filters; `exec` follows.
//!
//! The landlock level runs only step 4 in the child. Step 3's root is listed and built by
//! [`root`]. The `pre_exec` hook and the raw system calls it makes are this module's `unsafe`
//! code.
#![allow(unsafe_code)]

mod root;

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::process::Command;

pub(crate) use root::RootBuilder;
use root::{build_root, cstr};

/// Everything the child needs, prepared by the daemon.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// `None`: the landlock level (no namespaces, no fork).
    namespaces: Option<Namespaces>,
    rlimits: Vec<(libc::__rlimit_resource_t, u64)>,
    run_as: Option<u32>,
    /// Mark every descriptor but stdio close-on-exec just before `exec`.
    close_inherited: bool,
    /// Keep the uid but drop every capability and the bounding set (the landlock level, daemon
    /// as root).
    drop_caps: bool,
    landlock: Option<OwnedFd>,
    /// Read rights on the sandbox's own `/proc`, added in the child: the procfs mounted there
    /// does not exist yet when the daemon builds the ruleset.
    proc_read: Option<u64>,
    seccomp: Vec<Vec<libc::sock_filter>>,
    /// The child's end of the egress socketpair: the launcher opens the proxy listener in the
    /// new network namespace and sends it there (issue 24 §3, [`super::egress`]).
    proxy: Option<libc::c_int>,
}

/// `struct landlock_path_beneath_attr` (packed).
#[repr(C, packed)]
struct PathBeneath {
    allowed_access: u64,
    parent_fd: i32,
}

#[derive(Debug)]
struct Namespaces {
    flags: libc::c_int,
    /// `(setgroups, uid_map, gid_map)` contents when a user namespace is created.
    user_map: Option<(CString, CString)>,
    pid: bool,
    root: std::sync::Arc<RootBuilder>,
    chdir: CString,
    /// Daemon as root: the program's own user namespace, mapping only the sandbox uid (set by
    /// [`Plan::run_as`] with [`Plan::own_user_namespace`]), created after the root is built.
    own_user: Option<(CString, CString)>,
}

impl Plan {
    pub(crate) fn landlock_level() -> Self {
        Self::default()
    }

    pub(crate) fn full(
        root: std::sync::Arc<RootBuilder>,
        net: bool,
        pid: bool,
        chdir: &Path,
    ) -> Self {
        let mut flags = libc::CLONE_NEWNS | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS;
        flags |= libc::CLONE_NEWCGROUP;
        if net {
            flags |= libc::CLONE_NEWNET;
        }
        if pid {
            flags |= libc::CLONE_NEWPID;
        }
        let user_map = if rustix::process::geteuid().is_root() {
            None
        } else {
            flags |= libc::CLONE_NEWUSER;
            let uid = rustix::process::geteuid().as_raw();
            let gid = rustix::process::getegid().as_raw();
            Some((
                CString::new(format!("{uid} {uid} 1")).unwrap_or_default(),
                CString::new(format!("{gid} {gid} 1")).unwrap_or_default(),
            ))
        };
        Self {
            namespaces: Some(Namespaces {
                flags,
                user_map,
                pid,
                root,
                chdir: cstr(chdir),
                own_user: None,
            }),
            ..Self::default()
        }
    }

    pub(crate) fn rlimits(mut self, processes: u64, file_size: u64, cpu: u64) -> Self {
        self.rlimits = vec![
            (libc::RLIMIT_NPROC, processes),
            (libc::RLIMIT_FSIZE, file_size),
            (libc::RLIMIT_CPU, cpu),
            (libc::RLIMIT_CORE, 0),
        ];
        self
    }

    pub(crate) fn run_as(mut self, id: Option<u32>) -> Self {
        self.run_as = id;
        self
    }

    /// Only stdin, stdout and stderr reach the program: a descriptor the daemon holds without
    /// `O_CLOEXEC` (inherited from whatever started it: a jobserver pipe, a socket-activated
    /// listener; or opened by a C library) would otherwise pass into the sandbox, past every
    /// file and network rule.
    pub(crate) fn close_inherited(mut self, on: bool) -> Self {
        self.close_inherited = on;
        self
    }

    pub(crate) fn drop_capabilities(mut self, on: bool) -> Self {
        self.drop_caps = on;
        self
    }

    /// With [`Self::run_as`] under the full level (daemon as root): the program runs in a user
    /// namespace of its own that maps only `id`, so the per-user counts the kernel keeps
    /// (`RLIMIT_NPROC` processes, inotify instances, message-queue bytes, pending signals) are
    /// this call's own and not shared by every `nobody` process on the host.
    pub(crate) fn own_user_namespace(mut self, on: bool) -> Self {
        if let (true, Some(id), Some(ns)) = (on, self.run_as, self.namespaces.as_mut())
            && ns.pid
            && ns.user_map.is_none()
        {
            let map = CString::new(format!("{id} {id} 1")).unwrap_or_default();
            ns.own_user = Some((map.clone(), map));
        }
        self
    }

    pub(crate) fn landlock(mut self, fd: Option<OwnedFd>, proc_read: Option<u64>) -> Self {
        self.landlock = fd;
        self.proc_read = proc_read;
        self
    }

    pub(crate) fn seccomp(mut self, packed: &[Vec<u64>]) -> Self {
        self.seccomp = packed
            .iter()
            .map(|p| {
                p.iter()
                    .map(|w| libc::sock_filter {
                        code: (w >> 48) as u16,
                        jt: (w >> 40) as u8,
                        jf: (w >> 32) as u8,
                        k: *w as u32,
                    })
                    .collect()
            })
            .collect();
        self
    }

    /// Opens the egress proxy listener in the new network namespace and sends it on `fd`.
    pub(crate) fn proxy(mut self, fd: Option<libc::c_int>) -> Self {
        self.proxy = fd;
        self
    }

    /// Installs the hook on `cmd`.
    pub(crate) fn install(self, cmd: &mut Command) {
        use std::os::unix::process::CommandExt;
        // SAFETY: the hook runs in the forked child; it only makes system calls on data prepared
        // here (no allocation, no locks) and either returns, exits or execs.
        unsafe {
            cmd.pre_exec(move || self.run());
        }
    }

    fn run(&self) -> std::io::Result<()> {
        // SAFETY: raw system calls on prepared, NUL-terminated buffers; see the module docs.
        unsafe {
            let mut handshake = None;
            if let Some(ns) = &self.namespaces {
                check(
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL),
                    c"parent-death signal",
                )?;
                check(libc::unshare(ns.flags), c"unshare")?;
                if let Some((uid_map, gid_map)) = &ns.user_map {
                    write_file(c"/proc/self/setgroups", c"deny")?;
                    write_file(c"/proc/self/uid_map", uid_map)?;
                    write_file(c"/proc/self/gid_map", gid_map)?;
                }
                if let Some(fd) = self.proxy {
                    send_proxy_listener(fd)?;
                }
                if ns.pid {
                    handshake = reap_or_continue(ns.own_user.as_ref())?;
                    check(
                        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL),
                        c"parent-death signal",
                    )?;
                }
                // A new session (no terminal to push input into). Without the PID namespace
                // (a test switch) this process leads its group and cannot start one.
                if ns.pid {
                    check(libc::setsid(), c"setsid")?;
                }
                build_root(&ns.root, &ns.chdir)?;
            }
            if let Some(id) = self.run_as {
                check(libc::setgroups(0, std::ptr::null()), c"setgroups")?;
                check(libc::setresgid(id, id, id), c"setresgid")?;
                check(libc::setresuid(id, id, id), c"setresuid")?;
                // A credential change clears the parent-death signal: set it again.
                if self.namespaces.is_some() {
                    check(
                        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL),
                        c"parent-death signal",
                    )?;
                }
            }
            // As `nobody` already, so the namespace's owner is `nobody` and the kernel's per-user
            // counts of its processes roll up to the host's `nobody` as before, never to root
            // (inotify instances counted against root's 128 made every root process fail).
            // Before the rlimits: the namespace records the current process limit as its
            // ceiling, and the call's own limit then applies inside it. Where the kernel refuses
            // an unprivileged user namespace the call runs without one (the counts are then
            // shared by every `nobody` process, as posture says).
            if let Some((to_reaper, from_reaper)) = handshake {
                let unshared = libc::unshare(libc::CLONE_NEWUSER) == 0;
                let byte = [u8::from(unshared)];
                let mut got = [0u8];
                let sent = libc::write(to_reaper, byte.as_ptr().cast(), 1);
                let read = libc::read(from_reaper, got.as_mut_ptr().cast(), 1);
                libc::close(to_reaper);
                libc::close(from_reaper);
                if unshared && (sent != 1 || read != 1 || got[0] != 1) {
                    return Err(last_error(c"map the user namespace"));
                }
                if unshared {
                    // The creator holds every capability in the new namespace: drop them.
                    drop_capabilities(None)?;
                }
            }
            for (resource, value) in &self.rlimits {
                let lim = libc::rlimit {
                    rlim_cur: *value,
                    rlim_max: *value,
                };
                check(libc::setrlimit(*resource, &lim), c"setrlimit")?;
            }
            if self.drop_caps {
                // CAP_DAC_OVERRIDE stays: a workspace or grant handed to `nobody` by the full
                // level stays usable; Landlock still decides every path.
                drop_capabilities(Some(CAP_DAC_OVERRIDE))?;
            }
            check(
                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0),
                c"no_new_privs",
            )?;
            if let Some(fd) = &self.landlock {
                if let Some(access) = self.proc_read {
                    let proc = libc::open(
                        c"/proc".as_ptr(),
                        libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
                    );
                    check(proc, c"open /proc")?;
                    let attr = PathBeneath {
                        allowed_access: access,
                        parent_fd: proc,
                    };
                    // LANDLOCK_RULE_PATH_BENEATH = 1
                    let r = libc::syscall(
                        libc::SYS_landlock_add_rule,
                        fd.as_raw_fd(),
                        1u32,
                        &attr as *const PathBeneath,
                        0u32,
                    );
                    libc::close(proc);
                    check(if r < 0 { -1 } else { 0 }, c"landlock rule for /proc")?;
                }
                let r = libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0u32);
                check(if r < 0 { -1 } else { 0 }, c"landlock")?;
            }
            if self.close_inherited {
                close_inherited_on_exec();
            }
            for filter in &self.seccomp {
                let prog = libc::sock_fprog {
                    len: filter.len() as u16,
                    filter: filter.as_ptr().cast_mut(),
                };
                check(
                    libc::prctl(
                        libc::PR_SET_SECCOMP,
                        libc::SECCOMP_MODE_FILTER,
                        &prog as *const libc::sock_fprog,
                    ),
                    c"seccomp",
                )?;
            }
        }
        Ok(())
    }
}

/// Marks every descriptor from 3 up close-on-exec (`close_range(CLOSE_RANGE_CLOEXEC)`, Linux 5.11;
/// before that one `fcntl` per descriptor below the descriptor limit).
unsafe fn close_inherited_on_exec() {
    // SAFETY: raw system calls on integers; see the module docs.
    unsafe {
        const CLOSE_RANGE_CLOEXEC: u32 = 1 << 2;
        if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) == 0 {
            return;
        }
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur.min(1 << 20) as libc::c_int
        } else {
            1024
        };
        for fd in 3..max {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
}

/// `CAP_DAC_OVERRIDE` (linux/capability.h).
const CAP_DAC_OVERRIDE: u32 = 1;

/// Empties the ambient and inheritable capability sets and reduces the bounding, permitted
/// and effective sets to `keep` (a capability number, or none).
unsafe fn drop_capabilities(keep: Option<u32>) -> std::io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    // SAFETY: raw system calls on stack data; see the module docs.
    unsafe {
        let mut cap: u32 = 0;
        // Dropping past the last capability answers EINVAL.
        loop {
            if Some(cap) != keep && libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                break;
            }
            cap += 1;
            if cap > 63 {
                break;
            }
        }
        let kept = keep.map_or(0, |c| 1u32 << c);
        check(
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL,
                0,
                0,
                0,
            ),
            c"clear ambient capabilities",
        )?;
        let header = Header {
            version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
            pid: 0,
        };
        let data = [
            Data {
                effective: kept,
                permitted: kept,
                inheritable: 0,
            },
            Data {
                effective: 0,
                permitted: 0,
                inheritable: 0,
            },
        ];
        let r = libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr());
        check(if r < 0 { -1 } else { 0 }, c"drop capabilities")?;
    }
    Ok(())
}

/// In the new network namespace (capabilities still held): `lo` up, a TCP listener on
/// `127.0.0.1:PROXY_PORT`, its descriptor sent to the daemon over `channel` (`SCM_RIGHTS`),
/// then both closed here.
unsafe fn send_proxy_listener(channel: libc::c_int) -> std::io::Result<()> {
    #[repr(C)]
    struct Rights {
        header: libc::cmsghdr,
        fd: libc::c_int,
    }
    // SAFETY: raw system calls on stack data; see the module docs.
    unsafe {
        let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        check(s, c"socket for lo")?;
        let mut ifr: libc::ifreq = std::mem::zeroed();
        ifr.ifr_name[0] = b'l' as libc::c_char;
        ifr.ifr_name[1] = b'o' as libc::c_char;
        ifr.ifr_ifru.ifru_flags = (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        let up = libc::ioctl(s, libc::SIOCSIFFLAGS, &ifr as *const libc::ifreq);
        libc::close(s);
        check(up, c"bring up lo")?;
        let l = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        check(l, c"proxy socket")?;
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: super::egress::PROXY_PORT.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes([127, 0, 0, 1]),
            },
            sin_zero: [0; 8],
        };
        check(
            libc::bind(
                l,
                (&addr as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            ),
            c"bind the proxy",
        )?;
        check(libc::listen(l, 64), c"listen")?;
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut rights: Rights = std::mem::zeroed();
        rights.header.cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
        rights.header.cmsg_level = libc::SOL_SOCKET;
        rights.header.cmsg_type = libc::SCM_RIGHTS;
        rights.fd = l;
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = (&mut rights as *mut Rights).cast();
        msg.msg_controllen = std::mem::size_of::<Rights>() as _;
        let sent = libc::sendmsg(channel, &msg, 0);
        libc::close(l);
        libc::close(channel);
        check(if sent < 0 { -1 } else { 0 }, c"send the proxy listener")?;
    }
    Ok(())
}

/// Forks: the parent waits for the child and exits with its status; the child returns.
///
/// With `own_user` (uid and gid map contents), the child later unshares a user namespace and
/// the parent, still privileged in the daemon's namespace, writes its maps: the child returns
/// `(to_reaper, from_reaper)`, writes one byte on the first once it has unshared and reads one
/// byte from the second once the maps are written.
unsafe fn reap_or_continue(
    own_user: Option<&(CString, CString)>,
) -> std::io::Result<Option<(libc::c_int, libc::c_int)>> {
    // SAFETY: a raw clone(SIGCHLD) is fork without atfork handlers; the parent branch never
    // returns to Rust code that could touch state shared with the daemon.
    unsafe {
        // The host's /proc, opened before the child pivots the shared mount namespace's root.
        let mut proc_fd = -1;
        let (mut up, mut down) = ([-1; 2], [-1; 2]);
        if own_user.is_some() {
            proc_fd = libc::open(
                c"/proc".as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            );
            check(proc_fd, c"open /proc")?;
            check(libc::pipe2(up.as_mut_ptr(), libc::O_CLOEXEC), c"pipe")?;
            check(libc::pipe2(down.as_mut_ptr(), libc::O_CLOEXEC), c"pipe")?;
        }
        let pid = libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_long, 0, 0, 0, 0);
        if pid < 0 {
            return Err(last_error(c"fork"));
        }
        if pid == 0 {
            if own_user.is_none() {
                return Ok(None);
            }
            libc::close(proc_fd);
            libc::close(up[0]);
            libc::close(down[1]);
            return Ok(Some((up[1], down[0])));
        }
        if let Some((uid_map, gid_map)) = own_user {
            libc::close(up[1]);
            libc::close(down[0]);
            let mut byte = [0u8];
            if libc::read(up[0], byte.as_mut_ptr().cast(), 1) == 1 {
                let mut path = [0u8; 32];
                let mapped = byte[0] == 1
                    && [(c"/uid_map", uid_map), (c"/gid_map", gid_map)].iter().all(
                        |(file, map)| {
                            pid_path(&mut path, pid as u32, file.to_bytes_with_nul());
                            write_at(proc_fd, &path, map.to_bytes())
                        },
                    );
                let reply = [u8::from(mapped)];
                libc::write(down[1], reply.as_ptr().cast(), 1);
            }
        }
        // The reaper: no descriptor but stdio (std's exec-error pipe must close here so the
        // spawn returns once the grandchild has exec'd).
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
        let mut status: libc::c_int = 0;
        loop {
            let r = libc::waitpid(pid as libc::pid_t, &mut status, 0);
            if r == pid as libc::pid_t {
                break;
            }
            if r < 0 && *libc::__errno_location() != libc::EINTR {
                libc::_exit(126);
            }
        }
        if libc::WIFEXITED(status) {
            libc::_exit(libc::WEXITSTATUS(status));
        }
        libc::_exit(128 + libc::WTERMSIG(status));
    }
}

/// Writes `<pid><file>` (with its NUL) into `out`, without allocating.
fn pid_path(out: &mut [u8; 32], pid: u32, file: &[u8]) {
    let mut digits = [0u8; 10];
    let (mut n, mut len) = (pid, 0);
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut at = 0;
    for d in digits[..len].iter().rev() {
        out[at] = *d;
        at += 1;
    }
    for b in file.iter().take(out.len() - at) {
        out[at] = *b;
        at += 1;
    }
}

/// Writes `text` to `path` (NUL-terminated) below the directory `dir`.
unsafe fn write_at(dir: libc::c_int, path: &[u8; 32], text: &[u8]) -> bool {
    // SAFETY: see the module docs; `path` holds a NUL.
    unsafe {
        let fd = libc::openat(dir, path.as_ptr().cast(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let n = libc::write(fd, text.as_ptr().cast(), text.len());
        libc::close(fd);
        n == text.len() as isize
    }
}

unsafe fn write_file(path: &CStr, text: &CStr) -> std::io::Result<()> {
    // SAFETY: see the module docs.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        check(fd, path)?;
        let bytes = text.to_bytes();
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        libc::close(fd);
        if n < 0 {
            return Err(last_error(path));
        }
    }
    Ok(())
}

/// A failed step writes one line naming it to the child's stderr (std reports the errno).
fn check(r: libc::c_int, what: &CStr) -> std::io::Result<()> {
    if r < 0 { Err(last_error(what)) } else { Ok(()) }
}

fn last_error_at(what: &CStr, path: &CStr) -> std::io::Error {
    let err = std::io::Error::last_os_error();
    // SAFETY: write(2) of prepared bytes to fd 2.
    unsafe {
        let w = what.to_bytes();
        let p = path.to_bytes();
        libc::write(2, b"warren sandbox: ".as_ptr().cast(), 16);
        libc::write(2, w.as_ptr().cast(), w.len());
        libc::write(2, b" ".as_ptr().cast(), 1);
        libc::write(2, p.as_ptr().cast(), p.len());
        libc::write(2, b" failed\n".as_ptr().cast(), 8);
    }
    err
}

fn last_error(what: &CStr) -> std::io::Error {
    let err = std::io::Error::last_os_error();
    // SAFETY: write(2) of static bytes to fd 2.
    unsafe {
        let prefix = b"warren sandbox: ";
        libc::write(2, prefix.as_ptr().cast(), prefix.len());
        let w = what.to_bytes();
        libc::write(2, w.as_ptr().cast(), w.len());
        libc::write(2, b" failed\n".as_ptr().cast(), 8);
    }
    err
}
