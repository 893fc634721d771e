//! The Landlock backend: kernel rules applied to the child between fork and exec.
//!
//! Rights per root (SBX-2): the workspace and `ReadWrite` roots get every file right; `Read`
//! roots get read and list; `Write` roots get write, create and remove but neither read nor list;
//! system directories get read and execute; `/dev/null` read-write and `/dev/{zero,random,urandom}`
//! read (PERM-5); `/tmp` is NOT granted (each agent has `<workspace>/.tmp`). When the risk profile
//! denies network, TCP connect and bind are handled with no allowed port (ABI ≥ 4). Signals and
//! abstract Unix sockets are scoped to the sandbox (ABI ≥ 6). Sibling roots that do not exist yet
//! are created (they are Warren-owned workspace paths); a root that cannot be opened is skipped
//! with a warning, never a silent fallback to no sandbox.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope, make_bitflags,
};

use crate::policy::SecurityPolicy;

const ABIS: [ABI; 7] = [
    ABI::V7,
    ABI::V6,
    ABI::V5,
    ABI::V4,
    ABI::V3,
    ABI::V2,
    ABI::V1,
];

/// The highest Landlock ABI this kernel supports, or `None` (probed once per process).
pub fn landlock_abi() -> Option<i32> {
    static ABI_VERSION: OnceLock<Option<i32>> = OnceLock::new();
    *ABI_VERSION.get_or_init(|| {
        ABIS.iter().zip((1..=7).rev()).find_map(|(abi, n)| {
            Ruleset::default()
                .set_compatibility(CompatLevel::HardRequirement)
                .handle_access(AccessFs::from_all(*abi))
                .and_then(|r| r.create())
                .ok()
                .map(|_| n)
        })
    })
}

fn abi() -> ABI {
    landlock_abi()
        .and_then(|n| ABIS.get(usize::try_from(7 - n).ok()?).copied())
        .unwrap_or(ABI::Unsupported)
}

const SYSTEM_EXEC: [&str; 6] = ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32"];
const SYSTEM_READ: [&str; 16] = [
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/localtime",
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/gitconfig",
    "/etc/mime.types",
    "/proc",
    "/etc/os-release",
];

/// Builds the ruleset in the parent and installs a `pre_exec` hook that restricts the child.
pub(crate) fn apply(policy: &SecurityPolicy, cmd: &mut Command) -> Result<(), String> {
    let abi = abi();
    let all = AccessFs::from_all(abi);
    let read = make_bitflags!(AccessFs::{ReadFile | ReadDir}) & all;
    let exec_read = read | (BitFlags::from(AccessFs::Execute) & all);
    let write_only =
        (AccessFs::from_write(abi) & !make_bitflags!(AccessFs::{MakeChar | MakeBlock})) & all;
    let full = all & !make_bitflags!(AccessFs::{MakeChar | MakeBlock});

    let mut ruleset = Ruleset::default()
        .handle_access(all)
        .map_err(|e| e.to_string())?;
    if !policy.allow_network() && !AccessNet::from_all(abi).is_empty() {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi))
            .map_err(|e| e.to_string())?;
    }
    if !Scope::from_all(abi).is_empty() {
        ruleset = ruleset
            .scope(Scope::from_all(abi))
            .map_err(|e| e.to_string())?;
    }
    let mut created = ruleset.create().map_err(|e| e.to_string())?;

    let mut rules: Vec<(&Path, BitFlags<AccessFs>, bool)> = Vec::new();
    for p in SYSTEM_EXEC {
        rules.push((Path::new(p), exec_read, false));
    }
    for p in SYSTEM_READ {
        rules.push((Path::new(p), read, false));
    }
    let file_read = BitFlags::from(AccessFs::ReadFile) & all;
    let null_rw = make_bitflags!(AccessFs::{ReadFile | WriteFile | Truncate}) & all;
    rules.push((Path::new("/dev/null"), null_rw, false));
    for dev in ["/dev/zero", "/dev/random", "/dev/urandom"] {
        rules.push((Path::new(dev), file_read, false));
    }
    rules.push((policy.workspace(), full, true));
    for g in policy.read_write_roots() {
        rules.push((&g.root, full, true));
    }
    for g in policy.read_only_roots() {
        rules.push((&g.root, read, true));
    }
    for g in policy.write_only_roots() {
        rules.push((&g.root, write_only, true));
    }
    for (path, access, warren_owned) in rules {
        if warren_owned
            && !path.exists()
            && let Err(e) = std::fs::create_dir_all(path)
        {
            tracing::warn!(agent = %policy.alias(), root = %path.display(), "sandbox root missing and cannot be created ({e}); skipped");
            continue;
        }
        let fd = match PathFd::new(path) {
            Ok(fd) => fd,
            Err(e) => {
                if warren_owned {
                    tracing::warn!(agent = %policy.alias(), root = %path.display(), "sandbox root cannot be opened ({e}); skipped");
                }
                continue;
            }
        };
        // Directory rights on a file are refused by the kernel: keep only file rights there.
        let access = if path.is_dir() {
            access
        } else {
            access & AccessFs::from_file(abi)
        };
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| e.to_string())?;
    }
    install(cmd, created);
    Ok(())
}

/// Installs the hook that restricts the child right before `exec`.
#[allow(unsafe_code)]
fn install(cmd: &mut Command, created: RulesetCreated) {
    let mut created = Some(created);
    // SAFETY: the closure runs in the forked child before exec. It only calls
    // `RulesetCreated::restrict_self` (prctl(PR_SET_NO_NEW_PRIVS) and landlock_restrict_self on an
    // fd opened in the parent) and builds an io::Error from a raw errno; it takes no locks held by
    // other parent threads. A failure makes `spawn()` return that error: the program never runs
    // unconfined.
    unsafe {
        cmd.pre_exec(
            move || match created.take().map(RulesetCreated::restrict_self) {
                Some(Ok(status)) if status.ruleset != RulesetStatus::NotEnforced => Ok(()),
                _ => Err(std::io::Error::from_raw_os_error(libc::EPERM)),
            },
        );
    }
}
