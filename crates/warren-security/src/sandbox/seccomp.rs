//! The seccomp filter of every confined child (installed by the stage, after Landlock).
//!
//! Refused with `EPERM`:
//! - `socket`/`socketpair` of every family but `AF_UNIX` when the network is off; with the network
//!   on, every family but `AF_UNIX`, `AF_INET` and `AF_INET6`, and `IPPROTO_MPTCP` in any family
//!   (raw, packet, netlink and vsock sockets are refused in both cases);
//! - `io_uring_*` (its operations, sockets included, bypass seccomp);
//! - new namespaces and namespace entry (`unshare`, `setns`, `clone` with `CLONE_NEW*` flags,
//!   and `clone3` answers `ENOSYS`, since its flags sit behind a pointer seccomp cannot read);
//! - kernel-facing calls no agent command needs: `ptrace`, `process_vm_readv/writev`,
//!   `pidfd_getfd`, `bpf`,
//!   `perf_event_open`, `userfaultfd`, `keyctl`/`add_key`/`request_key`, `mount` and friends,
//!   `pivot_root`, `chroot`, module and kexec calls, `reboot`, `swapon/off`, `acct`, `quotactl`;
//! - `fanotify_init` always, and `inotify_init`/`inotify_init1` when the child could name a path
//!   it may not read ([`Watches::Denied`], issue 35 §6): a watch needs no Landlock right, so a
//!   `Write` grant's directory (or, at the landlock level, any host path) streamed its file
//!   names and activity. `inotify_add_watch` takes a path seccomp cannot see, so the instance is
//!   what is refused.
//!
//! Every x32 system call (number with bit 30 set) is refused by a short hand-written prelude
//! filter, so the x32 ABI is no way around it; other architectures fail the main filter's
//! architecture check.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

const IPPROTO_MPTCP: u64 = 262;
const CLONE_NEW_FLAGS: u64 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWCGROUP) as u64;

/// How many filters [`packed`] installs on every confined child (the prelude and the main
/// filter): the daemon's control socket refuses a peer carrying this many more than the daemon
/// (issue 35 §1).
pub const CHILD_FILTERS: u32 = 2;

/// Whether children may create inotify instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Watches {
    /// Every path the child can name is one it may read (the full level without `Write`
    /// grants): a watch shows nothing a read does not, and file watchers of dev tools work.
    Allowed,
    /// `inotify_init` and `inotify_init1` answer `EPERM`.
    Denied,
}

/// Why the seccomp filters could not be compiled (cached per process: the cause is shared).
#[derive(Debug, Clone, thiserror::Error)]
pub enum SeccompError {
    #[error("cannot compile the seccomp filter: {0}")]
    Compile(std::sync::Arc<seccompiler::BackendError>),
    #[error("cannot compile the clone3 filter")]
    Clone3,
}

impl From<seccompiler::BackendError> for SeccompError {
    fn from(e: seccompiler::BackendError) -> Self {
        Self::Compile(std::sync::Arc::new(e))
    }
}

/// Compiles the filter for this host's architecture.
pub(crate) fn program(network: bool, watches: Watches) -> Result<BpfProgram, SeccompError> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)?;
    let cond = |arg: u8, op: Op, value: u64| {
        SeccompCondition::new(arg, Len::Dword, op, value).map_err(SeccompError::from)
    };
    let rule = |conds: Vec<SeccompCondition>| SeccompRule::new(conds).map_err(SeccompError::from);

    // Family rules: one rule per refused shape (rules of a syscall are OR-ed, conditions AND-ed).
    let mut family = vec![cond(0, Op::Ne, libc::AF_UNIX as u64)?];
    if network {
        family.push(cond(0, Op::Ne, libc::AF_INET as u64)?);
        family.push(cond(0, Op::Ne, libc::AF_INET6 as u64)?);
    }
    let socket_rules = vec![rule(family)?, rule(vec![cond(2, Op::Eq, IPPROTO_MPTCP)?])?];

    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for nr in [libc::SYS_socket, libc::SYS_socketpair] {
        rules.insert(nr, socket_rules.clone());
    }
    // `clone` is refused when any CLONE_NEW* bit is set: MaskedEq(flags) != 0 cannot be written
    // directly, so each bit gets its own rule.
    let clone_rules = (0..64)
        .map(|bit| 1u64 << bit)
        .filter(|b| CLONE_NEW_FLAGS & b != 0)
        .map(|b| {
            SeccompCondition::new(0, Len::Qword, Op::MaskedEq(b), b)
                .map_err(SeccompError::from)
                .and_then(|c| rule(vec![c]))
        })
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_clone, clone_rules);
    for nr in [
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_pidfd_getfd,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_open_tree,
        libc::SYS_move_mount,
        libc::SYS_fsopen,
        libc::SYS_fsmount,
        libc::SYS_fsconfig,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_kexec_load,
        libc::SYS_reboot,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_acct,
        libc::SYS_quotactl,
        libc::SYS_fanotify_init,
    ] {
        rules.insert(nr, Vec::new());
    }
    if watches == Watches::Denied {
        rules.insert(libc::SYS_inotify_init1, Vec::new());
        #[cfg(target_arch = "x86_64")]
        rules.insert(libc::SYS_inotify_init, Vec::new());
    }
    // The x32 ABI (the same calls with bit 30 set) is refused as a whole by the prelude
    // ([`prelude`]), which keeps this filter half as long: the kernel emulates a new filter
    // once per system call number when it is installed, so its length is paid on every spawn.
    #[cfg(target_arch = "x86_64")]
    rules.insert(libc::SYS_kexec_file_load, Vec::new());
    compile(rules, libc::EPERM, arch)
}

/// One filter: the listed calls (under their rules) answer `errno`, everything else is allowed.
fn compile(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    errno: i32,
    arch: TargetArch,
) -> Result<BpfProgram, SeccompError> {
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        arch,
    )?;
    Ok(BpfProgram::try_from(filter)?)
}

/// x86_64: the first filter, written out by hand (8 instructions). `clone3` answers `ENOSYS`
/// (not `EPERM`), so libc falls back to `clone`, whose flags the main filter can read; every x32
/// call (system call number with bit 30 set) answers `EPERM`. Another architecture is let
/// through here and refused by the main filter's architecture check.
#[cfg(target_arch = "x86_64")]
fn prelude() -> Vec<u64> {
    const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
    const X32_BIT: u32 = 0x4000_0000;
    let op = |code: u32, jt: u8, jf: u8, k: u32| {
        u64::from(code as u16) << 48 | u64::from(jt) << 40 | u64::from(jf) << 32 | u64::from(k)
    };
    let ld = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    let jeq = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
    let jset = libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K;
    let ret = libc::BPF_RET | libc::BPF_K;
    vec![
        op(ld, 0, 0, 4),                        // 0: A = seccomp_data.arch
        op(jeq, 0, 3, AUDIT_ARCH_X86_64),       // 1: another arch -> 5
        op(ld, 0, 0, 0),                        // 2: A = seccomp_data.nr
        op(jset, 3, 0, X32_BIT),                // 3: x32 -> 7
        op(jeq, 1, 0, libc::SYS_clone3 as u32), // 4: clone3 -> 6
        op(ret, 0, 0, libc::SECCOMP_RET_ALLOW), // 5
        op(ret, 0, 0, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32), // 6
        op(ret, 0, 0, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32), // 7
    ]
}

/// Elsewhere: `clone3` answers `ENOSYS` (see the x86_64 [`prelude`]).
#[cfg(not(target_arch = "x86_64"))]
fn prelude() -> Vec<u64> {
    clone3_program().map(|p| pack(&p)).unwrap_or_default()
}

#[cfg(not(target_arch = "x86_64"))]
fn clone3_program() -> Result<BpfProgram, SeccompError> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(libc::SYS_clone3, Vec::new());
    compile(rules, libc::ENOSYS, arch)
}

/// One instruction per `u64` (code, jt, jf, k), the form the stage spec carries.
fn pack(p: &BpfProgram) -> Vec<u64> {
    p.iter()
        .map(|i| {
            u64::from(i.code) << 48 | u64::from(i.jt) << 40 | u64::from(i.jf) << 32 | u64::from(i.k)
        })
        .collect()
}

/// Both filters, compiled once per process, network and watch setting, packed one instruction
/// per `u64` for the stage spec (the stage then only installs them: compiling costs ≈ 0.27 ms).
pub(crate) fn packed(network: bool, watches: Watches) -> Result<Vec<Vec<u64>>, SeccompError> {
    type Packed = Result<Vec<Vec<u64>>, SeccompError>;
    static CACHE: std::sync::OnceLock<[Packed; 4]> = std::sync::OnceLock::new();
    let build = |i: usize| -> Packed {
        let prelude = prelude();
        if prelude.is_empty() {
            return Err(SeccompError::Clone3);
        }
        let watches = if i & 2 == 0 {
            Watches::Allowed
        } else {
            Watches::Denied
        };
        Ok(vec![prelude, pack(&program(i & 1 == 1, watches)?)])
    };
    let i = usize::from(network) | usize::from(watches == Watches::Denied) << 1;
    CACHE.get_or_init(|| [build(0), build(1), build(2), build(3)])[i].clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a packed classic-BPF program (the instructions the prelude uses) on `(arch, nr)`.
    #[cfg(target_arch = "x86_64")]
    fn eval(program: &[u64], arch: u32, nr: u32) -> u32 {
        let (mut pc, mut acc) = (0usize, 0u32);
        loop {
            let i = program[pc];
            let (code, jt, jf, k) = (
                (i >> 48) as u32,
                ((i >> 40) & 0xff) as usize,
                ((i >> 32) & 0xff) as usize,
                i as u32,
            );
            pc += 1;
            match code {
                c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => {
                    acc = if k == 4 { arch } else { nr };
                }
                c if c == libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K => {
                    pc += if acc == k { jt } else { jf };
                }
                c if c == libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K => {
                    pc += if acc & k != 0 { jt } else { jf };
                }
                c if c == libc::BPF_RET | libc::BPF_K => return k,
                other => panic!("unexpected instruction {other:#x}"),
            }
        }
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_prelude_refuses_every_x32_call_and_clone3() {
        const X86_64: u32 = 0xC000_003E;
        let p = prelude();
        let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
        for nr in [0u32, 39, 41, 56, 272, 435, 511] {
            assert_eq!(eval(&p, X86_64, nr | 0x4000_0000), eperm, "x32 {nr}");
        }
        assert_eq!(eval(&p, X86_64, libc::SYS_clone3 as u32), enosys);
        for nr in [0u32, 39, 41, 56, 272] {
            assert_eq!(eval(&p, X86_64, nr), libc::SECCOMP_RET_ALLOW, "native {nr}");
        }
        // Another architecture is left to the main filter's architecture check.
        assert_eq!(eval(&p, 0x4000_0003, 435), libc::SECCOMP_RET_ALLOW);
    }

    #[test]
    fn every_child_gets_exactly_child_filters_filters() {
        for network in [false, true] {
            for watches in [Watches::Allowed, Watches::Denied] {
                let n = packed(network, watches)
                    .map(|p| p.len())
                    .unwrap_or_default();
                assert_eq!(n, CHILD_FILTERS as usize);
            }
        }
    }

    #[test]
    fn the_filter_compiles_for_both_network_settings() {
        for network in [false, true] {
            let p = program(network, Watches::Denied).unwrap_or_default();
            assert!(p.len() > 40, "filter has {} instructions", p.len());
        }
    }
}
