//! The half of each selftest probe that runs inside the sandbox (issue 13): the stage, after
//! confinement, performs the attack with exact system calls and prints `ok: ...` (it got
//! through) or `refused: ...` (what the kernel answered); the judge in [`super::selftest`] reads
//! that line and checks the host side.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use super::selftest::{FORK_CAP, MEMORY_MARK, PLANTED, Probe, ProbeSpec, mq_name};
use super::{probe_sys, selftest_socket, selftest_watch};

/// Why an attack failed inside the sandbox: what the kernel (or the probe) answered, printed
/// after `refused: ` for the judge.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct Refused(pub(super) String);

impl From<std::io::Error> for Refused {
    fn from(e: std::io::Error) -> Self {
        Self(e.to_string())
    }
}

impl From<rustix::io::Errno> for Refused {
    fn from(e: rustix::io::Errno) -> Self {
        Self(e.to_string())
    }
}

impl From<std::net::AddrParseError> for Refused {
    fn from(e: std::net::AddrParseError) -> Self {
        Self(e.to_string())
    }
}

impl From<serde_json::Error> for Refused {
    fn from(e: serde_json::Error) -> Self {
        Self(e.to_string())
    }
}

impl From<&str> for Refused {
    fn from(why: &str) -> Self {
        Self(why.to_string())
    }
}

impl From<String> for Refused {
    fn from(why: String) -> Self {
        Self(why)
    }
}

fn refusal<T>(why: impl Into<Refused>) -> Result<T, Refused> {
    Err(why.into())
}

/// Runs inside the stage after confinement: performs the probe and prints `ok: ...` or
/// `refused: ...`.
pub(crate) fn in_stage(spec: &ProbeSpec) -> String {
    match attempt(spec) {
        Ok(detail) => format!("ok: {detail}"),
        Err(e) => format!("refused: {e}"),
    }
}

fn attempt(spec: &ProbeSpec) -> Result<String, Refused> {
    use rustix::net::{AddressFamily, Protocol, SendFlags, SocketType, ipproto, socket_with};
    let e = |e: rustix::io::Errno| Refused::from(e);
    let addr = || {
        spec.target
            .parse::<std::net::SocketAddr>()
            .map_err(Refused::from)
    };
    match spec.probe {
        Probe::Udp => {
            let fd =
                rustix::net::socket(AddressFamily::INET, SocketType::DGRAM, None).map_err(e)?;
            rustix::net::sendto(&fd, b"warren-selftest", SendFlags::empty(), &addr()?)
                .map_err(e)?;
            Ok("datagram sent".into())
        }
        Probe::Tcp => {
            std::net::TcpStream::connect_timeout(&addr()?, Duration::from_millis(200))
                .map_err(Refused::from)?;
            Ok("connected".into())
        }
        Probe::Mptcp => {
            let fd = socket_with(
                AddressFamily::INET,
                SocketType::STREAM,
                rustix::net::SocketFlags::empty(),
                Some(ipproto::MPTCP),
            )
            .map_err(e)?;
            rustix::net::connect(&fd, &addr()?).map_err(e)?;
            Ok("connected over MPTCP".into())
        }
        Probe::TcpFastOpen => {
            let fd =
                rustix::net::socket(AddressFamily::INET, SocketType::STREAM, None).map_err(e)?;
            // MSG_FASTOPEN: connect and send in one call.
            let flags = SendFlags::from_bits_retain(0x2000_0000);
            rustix::net::sendto(&fd, b"warren-selftest", flags, &addr()?).map_err(e)?;
            Ok("sent with TCP Fast Open".into())
        }
        Probe::KernelSockets => {
            let tries = [
                ("netlink", AddressFamily::NETLINK, SocketType::RAW, None),
                ("packet", AddressFamily::PACKET, SocketType::RAW, None),
                ("vsock", AddressFamily::VSOCK, SocketType::STREAM, None),
                (
                    "alg",
                    AddressFamily::from_raw(libc::AF_ALG as u16),
                    SocketType::SEQPACKET,
                    None,
                ),
                ("bluetooth", AddressFamily::BLUETOOTH, SocketType::RAW, None),
                ("xdp", AddressFamily::XDP, SocketType::RAW, None),
                ("can", AddressFamily::CAN, SocketType::RAW, None),
                ("tipc", AddressFamily::TIPC, SocketType::RDM, None),
                ("key", AddressFamily::KEY, SocketType::RAW, None),
                ("rds", AddressFamily::RDS, SocketType::SEQPACKET, None),
                (
                    "raw inet",
                    AddressFamily::INET,
                    SocketType::RAW,
                    Some(Protocol::from_raw(
                        std::num::NonZeroU32::new(1).unwrap_or(std::num::NonZeroU32::MIN),
                    )),
                ),
            ];
            let opened: Vec<&str> = tries
                .into_iter()
                .filter(|(_, fam, ty, proto)| rustix::net::socket(*fam, *ty, *proto).is_ok())
                .map(|(name, ..)| name)
                .collect();
            if opened.is_empty() {
                Err("no kernel socket could be opened".into())
            } else {
                Ok(format!("opened {}", opened.join(", ")))
            }
        }
        Probe::HostUnixSocket => {
            let mut found = Vec::new();
            for p in [
                spec.target.as_str(),
                "/var/run/postgresql/.s.PGSQL.5432",
                "/run/mysqld/mysqld.sock",
                "/run/dbus/system_bus_socket",
            ] {
                if std::os::unix::net::UnixStream::connect(p).is_ok() {
                    found.push(p.to_string());
                }
            }
            if found.is_empty() {
                Err("no host socket reachable".into())
            } else {
                Ok(format!("connected to {}", found.join(", ")))
            }
        }
        Probe::ProcEnviron => {
            let mut read = Vec::new();
            for pid in [spec.target.as_str(), "1"] {
                for file in ["environ", "cmdline"] {
                    let mut text = String::new();
                    if std::fs::File::open(format!("/proc/{pid}/{file}"))
                        .and_then(|mut f| f.read_to_string(&mut text))
                        .is_ok()
                        && !text.is_empty()
                        && (pid == spec.target || text.contains("warren"))
                    {
                        read.push(format!("/proc/{pid}/{file}"));
                    }
                }
            }
            // Only a process outside the sandbox counts: the daemon's pid by number.
            let daemon = format!("/proc/{}/", spec.target);
            let outside: Vec<String> = read
                .into_iter()
                .filter(|p| p.starts_with(&daemon))
                .collect();
            if outside.is_empty() {
                Err("the daemon's /proc entries are not readable".into())
            } else {
                Ok(format!("read {}", outside.join(", ")))
            }
        }
        Probe::OutsideRead => std::fs::read(&spec.target)
            .map(|b| format!("read {} bytes", b.len()))
            .map_err(Refused::from),
        Probe::OutsideStat => std::fs::symlink_metadata(&spec.target)
            .map(|m| format!("size {}", m.len()))
            .map_err(Refused::from),
        Probe::SymlinkOut => {
            let link = Path::new(".warren-selftest-link");
            let _ = std::fs::remove_file(link);
            std::os::unix::fs::symlink(&spec.target, link).map_err(Refused::from)?;
            let r = std::fs::read(link);
            let _ = std::fs::remove_file(link);
            r.map(|b| format!("read {} bytes through the link", b.len()))
                .map_err(Refused::from)
        }
        Probe::HardlinkOut => {
            let link = Path::new(".warren-selftest-hardlink");
            let _ = std::fs::remove_file(link);
            std::fs::hard_link(&spec.target, link).map_err(Refused::from)?;
            let r = std::fs::read(link);
            let _ = std::fs::remove_file(link);
            r.map(|b| format!("linked and read {} bytes", b.len()))
                .map_err(Refused::from)
        }
        Probe::ReadOnlyTierWrite => {
            let path = Path::new(&spec.target).join(".warren-selftest");
            std::fs::File::create(&path)
                .and_then(|mut f| f.write_all(b"x"))
                .map(|()| "wrote into the Read grant".into())
                .map_err(Refused::from)
        }
        Probe::WriteOnlyTierRead => std::fs::read_dir(&spec.target)
            .map(|d| format!("listed {} entries", d.count()))
            .map_err(Refused::from),
        Probe::RootPrivileges => {
            let uid = rustix::process::getuid();
            let caps = rustix::thread::capabilities(None).map_err(e)?;
            if uid.is_root() || !caps.effective.is_empty() || !caps.permitted.is_empty() {
                Ok(format!(
                    "uid {} with capabilities {:?}",
                    uid.as_raw(),
                    caps.effective
                ))
            } else {
                refusal(format!("uid {}, no capabilities", uid.as_raw()))
            }
        }
        Probe::IoUring => probe_sys::io_uring_setup()
            .map(|()| "created an io_uring".into())
            .map_err(Refused::from),
        Probe::NestedNamespace => {
            let tries = [
                ("unshare", probe_sys::unshare_user()),
                ("clone", probe_sys::clone_new_user()),
                ("clone3", probe_sys::clone3_new_user()),
            ];
            let (done, refused): (Vec<_>, Vec<_>) = tries.into_iter().partition(|(_, r)| r.is_ok());
            if done.is_empty() {
                refusal(
                    refused
                        .iter()
                        .map(|(n, r)| {
                            format!(
                                "{n}: {}",
                                r.as_ref()
                                    .err()
                                    .map(ToString::to_string)
                                    .unwrap_or_default()
                            )
                        })
                        .collect::<Vec<_>>()
                        .join(", "),
                )
            } else {
                Ok(format!(
                    "new user namespace by {}",
                    done.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
                ))
            }
        }
        Probe::KernelInterfaces => {
            let opened = probe_sys::kernel_interfaces();
            if opened.is_empty() {
                Err("every call refused".into())
            } else {
                Ok(format!("used {}", opened.join(", ")))
            }
        }
        Probe::SignalOutside => {
            let pid: i32 = spec.target.parse().map_err(|_| "bad pid".to_string())?;
            probe_sys::kill(pid, libc::SIGTERM)
                .map(|()| format!("sent SIGTERM to {pid}"))
                .map_err(Refused::from)
        }
        Probe::ProcessMemory => {
            let mut parts = spec.target.split(' ');
            let pid: i32 = parts.next().and_then(|p| p.parse().ok()).ok_or("bad pid")?;
            let addr: usize = parts
                .next()
                .and_then(|a| a.parse().ok())
                .ok_or("bad address")?;
            let vm = probe_sys::process_vm_read(pid, addr, MEMORY_MARK.len());
            let mem = std::fs::File::open(format!("/proc/{pid}/mem")).and_then(|f| {
                let mut buf = [0u8; 16];
                std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, addr as u64).map(|()| buf)
            });
            let stolen = probe_sys::pidfd_getfd(pid);
            match (vm, mem, stolen) {
                (Ok(b), _, _) if b == MEMORY_MARK => {
                    Ok("read the daemon's memory with process_vm_readv".into())
                }
                (_, Ok(b), _) if b == MEMORY_MARK => {
                    Ok("read the daemon's memory through /proc/<pid>/mem".into())
                }
                (_, _, Ok(fd)) => Ok(format!(
                    "took the daemon's descriptor {fd} with pidfd_getfd"
                )),
                (vm, mem, stolen) => refusal(format!(
                    "process_vm_readv: {}; /proc/{pid}/mem: {}; pidfd_getfd: {}",
                    vm.err()
                        .map(|e| e.to_string())
                        .unwrap_or_else(|| "other bytes".into()),
                    mem.err()
                        .map(|e| e.to_string())
                        .unwrap_or_else(|| "other bytes".into()),
                    stolen.err().map(|e| e.to_string()).unwrap_or_default()
                )),
            }
        }
        Probe::AbstractUnixSocket => {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(spec.target.as_bytes())
                .map_err(Refused::from)?;
            std::os::unix::net::UnixStream::connect_addr(&addr)
                .map(|_| format!("connected to @{}", spec.target))
                .map_err(Refused::from)
        }
        Probe::SysvIpc => {
            let key: i32 = spec.target.parse().map_err(|_| "bad key".to_string())?;
            let shm = probe_sys::shm_lookup(key);
            let mq = probe_sys::mq_lookup(&mq_name(key));
            match (shm, mq) {
                (Err(a), Err(b)) => refusal(format!("segment: {a}; queue: {b}")),
                (shm, mq) => Ok(format!(
                    "found the host's {}",
                    [
                        shm.is_ok().then_some("segment"),
                        mq.is_ok().then_some("message queue")
                    ]
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>()
                    .join(" and ")
                )),
            }
        }
        #[cfg(target_arch = "x86_64")]
        Probe::I386Abi => match probe_sys::i386_unshare_user() {
            0 => Ok("unshared a user namespace through int 0x80".into()),
            r => refusal(format!("int 0x80 answered {r}")),
        },
        #[cfg(not(target_arch = "x86_64"))]
        Probe::I386Abi => Err("x86_64 only".into()),
        Probe::HardlinkIntoWriteTier => {
            let own = Path::new(PLANTED);
            let _ = std::fs::remove_file(own);
            std::fs::write(own, b"x").map_err(Refused::from)?;
            let r = std::fs::hard_link(own, Path::new(&spec.target).join(PLANTED));
            let _ = std::fs::remove_file(own);
            r.map(|()| {
                "linked an own file into the Write grant: what the sibling writes there is readable"
                    .into()
            })
            .map_err(Refused::from)
        }
        Probe::ReadOnlyTierMetadata => {
            use std::os::unix::fs::PermissionsExt;
            // Its own mode again: harmless, but only the owner on a writable mount may do it.
            let mode = std::fs::metadata(&spec.target)
                .map_err(Refused::from)?
                .permissions()
                .mode();
            std::fs::set_permissions(&spec.target, std::fs::Permissions::from_mode(mode))
                .map(|()| {
                    "changed the mode of a file in the Read grant (chmod 000 works the same)".into()
                })
                .map_err(Refused::from)
        }
        Probe::SharedProcessLimit if spec.target == "fill" => {
            let (n, e) = probe_sys::fork_until_refused(FORK_CAP);
            let mut watches = Vec::new();
            while watches.len() < FORK_CAP {
                match rustix::fs::inotify::init(rustix::fs::inotify::CreateFlags::CLOEXEC) {
                    Ok(fd) => watches.push(fd),
                    Err(_) => break,
                }
            }
            println!(
                "started {n} processes, then: {e}; held {} inotify instances",
                watches.len()
            );
            let _ = std::io::Write::flush(&mut std::io::stdout());
            std::thread::sleep(Duration::from_secs(60));
            Ok(String::new())
        }
        Probe::SharedProcessLimit => probe_sys::fork_once()
            .map(|()| "forked".into())
            .map_err(|e| Refused(format!("cannot fork: {e}"))),
        Probe::ControlSocket => selftest_socket::attempt(&spec.target),
        Probe::WriteOnlyTierWatch => selftest_watch::attempt(&spec.target),
        Probe::Survivors => Err("runs as a shell command, not in the stage".into()),
        Probe::ExecUnlisted => std::process::Command::new(&spec.target)
            .stdout(std::process::Stdio::null())
            .status()
            .map(|s| format!("{} ran ({s})", spec.target))
            .map_err(Refused::from),
    }
}
