//! Raw system calls the selftest probes make inside the sandbox (and the few the judge makes on
//! the host side), each wrapped so the probe code stays safe. Every call here is an attack a
//! probe performs: the seccomp filter, a namespace or Landlock is expected to refuse it.
#![allow(unsafe_code)]

use std::io::Error;

fn ret(r: libc::c_long) -> Result<libc::c_long, Error> {
    if r < 0 {
        Err(Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn close(fd: libc::c_long) {
    // SAFETY: closes a descriptor this module just opened.
    unsafe {
        libc::close(fd as libc::c_int);
    }
}

/// `io_uring_setup(4, {})`: a ring whose operations (connect, sendmsg, openat) seccomp could
/// not see.
pub(crate) fn io_uring_setup() -> Result<(), Error> {
    let mut params = [0u8; 120]; // struct io_uring_params
    // SAFETY: the kernel writes at most sizeof(io_uring_params) bytes into `params`.
    let fd = ret(unsafe { libc::syscall(libc::SYS_io_uring_setup, 4u32, params.as_mut_ptr()) })?;
    close(fd);
    Ok(())
}

/// `unshare(CLONE_NEWUSER)`: a nested user namespace, where the caller holds every capability.
pub(crate) fn unshare_user() -> Result<(), Error> {
    // SAFETY: unshare takes flags only.
    ret(unsafe { libc::unshare(libc::CLONE_NEWUSER) } as libc::c_long).map(drop)
}

/// `clone(CLONE_NEWUSER | SIGCHLD)` (fork semantics); the child exits at once.
pub(crate) fn clone_new_user() -> Result<(), Error> {
    let flags = (libc::CLONE_NEWUSER | libc::SIGCHLD) as libc::c_long;
    // SAFETY: fork semantics (no CLONE_VM); the child only calls _exit.
    let pid = ret(unsafe { libc::syscall(libc::SYS_clone, flags, 0, 0, 0, 0) })?;
    if pid == 0 {
        // SAFETY: leaves the forked child without running any Rust code.
        unsafe { libc::_exit(0) };
    }
    reap(pid);
    Ok(())
}

/// `clone3({flags: CLONE_NEWUSER, exit_signal: SIGCHLD})`.
pub(crate) fn clone3_new_user() -> Result<(), Error> {
    let mut args = [0u64; 11]; // struct clone_args (size 88)
    args[0] = libc::CLONE_NEWUSER as u64;
    args[4] = libc::SIGCHLD as u64;
    // SAFETY: fork semantics (no CLONE_VM, no stack); the child only calls _exit.
    let pid = ret(unsafe {
        libc::syscall(
            libc::SYS_clone3,
            args.as_mut_ptr(),
            std::mem::size_of_val(&args),
        )
    })?;
    if pid == 0 {
        // SAFETY: as above.
        unsafe { libc::_exit(0) };
    }
    reap(pid);
    Ok(())
}

fn reap(pid: libc::c_long) {
    let mut status = 0;
    // SAFETY: waits for the child this module forked.
    unsafe {
        libc::waitpid(pid as libc::pid_t, &mut status, 0);
    }
}

/// Kernel interfaces no agent command needs, each tried once; returns the names that worked.
pub(crate) fn kernel_interfaces() -> Vec<&'static str> {
    let mut opened = Vec::new();
    let mut attr = [0u8; 128]; // struct perf_event_attr (software clock)
    attr[0] = 1; // type = PERF_TYPE_SOFTWARE
    attr[4] = 128; // size
    let mut bpf_attr = [0u8; 128];
    bpf_attr[0] = 2; // map_type = BPF_MAP_TYPE_ARRAY
    bpf_attr[4] = 4; // key_size
    bpf_attr[8] = 4; // value_size
    bpf_attr[12] = 1; // max_entries
    // SAFETY: each call gets buffers at least as large as the kernel reads; a descriptor it
    // returns is closed at once.
    unsafe {
        let tries: [(&str, libc::c_long); 6] = [
            (
                "bpf",
                libc::syscall(libc::SYS_bpf, 0, bpf_attr.as_mut_ptr(), 128u32),
            ),
            (
                "perf_event_open",
                libc::syscall(libc::SYS_perf_event_open, attr.as_mut_ptr(), 0, -1, -1, 0),
            ),
            (
                "userfaultfd",
                libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | 1), // UFFD_USER_MODE_ONLY
            ),
            (
                "keyctl",
                // KEYCTL_GET_KEYRING_ID of the user keyring
                libc::syscall(libc::SYS_keyctl, 0, -4, 0),
            ),
            (
                "ptrace",
                libc::syscall(libc::SYS_ptrace, libc::PTRACE_TRACEME, 0, 0, 0),
            ),
            (
                "mount",
                libc::mount(
                    c"none".as_ptr(),
                    c".".as_ptr(),
                    c"tmpfs".as_ptr(),
                    0,
                    std::ptr::null(),
                ) as libc::c_long,
            ),
        ];
        for (name, r) in tries {
            if r >= 0 {
                opened.push(name);
                if matches!(name, "bpf" | "perf_event_open" | "userfaultfd") {
                    close(r);
                }
            }
        }
    }
    // Its own descriptor: allowed by every other rule, so only seccomp refuses it.
    if pidfd_getfd(std::process::id() as i32).is_ok() {
        opened.push("pidfd_getfd");
    }
    opened
}

/// `kill(pid, sig)`.
pub(crate) fn kill(pid: i32, sig: i32) -> Result<(), Error> {
    // SAFETY: kill takes integers only.
    ret(unsafe { libc::kill(pid, sig) } as libc::c_long).map(drop)
}

/// `process_vm_readv` of `len` bytes at `addr` in `pid`.
pub(crate) fn process_vm_read(pid: i32, addr: usize, len: usize) -> Result<Vec<u8>, Error> {
    let mut buf = vec![0u8; len];
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: the local iovec covers `buf`; the remote one is only read by the kernel.
    let n =
        ret(unsafe { libc::syscall(libc::SYS_process_vm_readv, pid, &local, 1, &remote, 1, 0) })?;
    buf.truncate(n as usize);
    Ok(buf)
}

/// A System V shared memory segment (host side): `shmget(key, 4096, IPC_CREAT | 0666)`.
pub(crate) fn shm_create(key: i32) -> Result<i32, Error> {
    // SAFETY: shmget takes integers only.
    ret(
        unsafe { libc::shmget(key, 4096, libc::IPC_CREAT | libc::IPC_EXCL | 0o666) }
            as libc::c_long,
    )
    .map(|id| id as i32)
}

/// Looks a segment up by key (`shmget(key, 0, 0)`) and returns its id.
pub(crate) fn shm_lookup(key: i32) -> Result<i32, Error> {
    // SAFETY: as above.
    ret(unsafe { libc::shmget(key, 0, 0) } as libc::c_long).map(|id| id as i32)
}

/// Removes a segment (`shmctl(id, IPC_RMID)`).
pub(crate) fn shm_remove(id: i32) {
    // SAFETY: IPC_RMID takes no buffer.
    unsafe {
        libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut());
    }
}

/// Forks children that block forever until the kernel refuses one; returns how many started
/// and the refusal.
pub(crate) fn fork_until_refused(max: usize) -> (usize, Error) {
    let mut n = 0;
    loop {
        // SAFETY: fork in the single-threaded probe; the child only pauses and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: the child never returns to Rust code; it dies with the probe (at the
            // landlock level no PID namespace would end it).
            unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                libc::pause();
                libc::_exit(0);
            }
        }
        if pid < 0 {
            return (n, Error::last_os_error());
        }
        n += 1;
        if n >= max {
            return (n, Error::from_raw_os_error(libc::EAGAIN));
        }
    }
}

/// One fork whose child exits at once.
pub(crate) fn fork_once() -> Result<(), Error> {
    // SAFETY: as above.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: as above.
        unsafe { libc::_exit(0) };
    }
    ret(pid as libc::c_long)?;
    reap(pid as libc::c_long);
    Ok(())
}

/// A POSIX message queue (host side): `mq_open(name, O_CREAT | O_EXCL | O_RDWR, 0666)`.
pub(crate) fn mq_create(name: &std::ffi::CStr) -> Result<(), Error> {
    // SAFETY: `name` is NUL-terminated; a null attr asks for the defaults.
    let q = unsafe {
        libc::mq_open(
            name.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
            0o666 as libc::mode_t,
            std::ptr::null_mut::<libc::mq_attr>(),
        )
    };
    ret(q as libc::c_long)?;
    // SAFETY: closes the queue descriptor just opened.
    unsafe { libc::mq_close(q) };
    Ok(())
}

/// Opens an existing POSIX message queue by name.
pub(crate) fn mq_lookup(name: &std::ffi::CStr) -> Result<(), Error> {
    // SAFETY: `name` is NUL-terminated.
    let q = unsafe { libc::mq_open(name.as_ptr(), libc::O_RDONLY) };
    ret(q as libc::c_long)?;
    // SAFETY: as above.
    unsafe { libc::mq_close(q) };
    Ok(())
}

/// Removes a POSIX message queue.
pub(crate) fn mq_remove(name: &std::ffi::CStr) {
    // SAFETY: `name` is NUL-terminated.
    unsafe {
        libc::mq_unlink(name.as_ptr());
    }
}

/// `unshare(CLONE_NEWUSER)` through the i386 system call entry (`int 0x80`, number 310), which
/// a filter written for x86_64 numbers would not recognise. Returns the raw result.
#[cfg(target_arch = "x86_64")]
pub(crate) fn i386_unshare_user() -> i64 {
    let mut ret: i64 = 310;
    // SAFETY: `int 0x80` with the i386 numbering: unshare(flags) reads ebx only; rbx is
    // swapped in and out (LLVM reserves it), r8-r11 are declared clobbered.
    unsafe {
        std::arch::asm!(
            "xchg {flags}, rbx",
            "int 0x80",
            "xchg {flags}, rbx",
            flags = inout(reg) i64::from(libc::CLONE_NEWUSER) => _,
            inout("rax") ret,
            out("r8") _, out("r9") _, out("r10") _, out("r11") _,
        );
    }
    ret
}

/// `pidfd_getfd` of descriptors 0..=2 of `pid` (a copy of another process's descriptor);
/// returns the first one taken.
pub(crate) fn pidfd_getfd(pid: i32) -> Result<i32, Error> {
    // SAFETY: pidfd_open takes integers only.
    let pidfd = ret(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) })?;
    let mut last = Error::from_raw_os_error(libc::EBADF);
    for target in 0..=2 {
        // SAFETY: pidfd_getfd takes integers only; a descriptor it returns is closed at once.
        match ret(unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd, target, 0u32) }) {
            Ok(fd) => {
                close(fd);
                close(pidfd);
                return Ok(target);
            }
            Err(e) => last = e,
        }
    }
    close(pidfd);
    Err(last)
}

/// `fanotify_init(FAN_CLASS_NOTIF | FAN_REPORT_FID | FAN_CLOEXEC)`: the unprivileged form
/// (Linux 5.13+), whose inode marks would report a directory's activity like inotify.
pub(crate) fn fanotify_init() -> Result<(), Error> {
    const FAN_CLOEXEC: libc::c_uint = 0x1;
    const FAN_REPORT_FID: libc::c_uint = 0x200;
    // SAFETY: fanotify_init takes flags only and returns a new descriptor.
    let fd = ret(unsafe {
        libc::syscall(
            libc::SYS_fanotify_init,
            FAN_CLOEXEC | FAN_REPORT_FID,
            libc::O_RDONLY as libc::c_uint,
        )
    })?;
    close(fd);
    Ok(())
}
