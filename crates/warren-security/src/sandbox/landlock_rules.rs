//! The agent's Landlock rules, enforced by the in-sandbox stage on itself just before `exec`.
//!
//! Rights per root (SBX-2): the workspace and `ReadWrite` roots get every file right; `Read`
//! roots get read and list; `Write` roots get write, create and remove but neither read, list
//! nor refer (no hard link or rename into them from another directory);
//! system directories get read, and execute unless the risk profile lists its commands: then only
//! the resolved binaries of `allowed_commands` (plus the shell, git and the dynamic loader) are
//! executable, and nothing in the workspace or granted roots is; `/dev/null` read-write and `/dev/{zero,random,urandom}`
//! read (PERM-5); the operator's global git config files (`~/.gitconfig`, `~/.config/git/{config,
//! attributes,ignore}`) read (GIT-5);
//! `/tmp` is NOT granted (each agent has `<workspace>/.tmp`). When the risk profile
//! denies network, TCP connect and bind are handled with no allowed port (ABI ≥ 4). Signals and
//! abstract Unix sockets are scoped to the sandbox (ABI ≥ 6). Granted roots are created by the
//! daemon before the spawn; a path missing inside the sandbox is simply not granted.

use std::path::Path;
use std::sync::OnceLock;

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath,
    PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, Scope, make_bitflags,
};

/// Why an agent's Landlock ruleset could not be built.
#[derive(Debug, thiserror::Error)]
pub enum LandlockError {
    #[error("the kernel has no Landlock support")]
    Unsupported,
    #[error("cannot build the Landlock ruleset: {0}")]
    Ruleset(#[from] landlock::RulesetError),
    #[error("cannot grant {}: {source}", path.display())]
    Rule {
        path: std::path::PathBuf,
        source: landlock::RulesetError,
    },
}

/// The rules of one child.
#[derive(Debug, Clone)]
pub(crate) struct Rules {
    /// Every file right (workspace, `ReadWrite` roots).
    pub full: Vec<std::path::PathBuf>,
    /// Read and list (`Read` roots).
    pub read: Vec<std::path::PathBuf>,
    /// Write, create, remove; no read or list (`Write` roots).
    pub write_only: Vec<std::path::PathBuf>,
    /// Extra read-only files (the operator's global git config).
    pub extra_read: Vec<std::path::PathBuf>,
    /// Files that may be executed; `None` = everything under the system directories and the
    /// granted roots (`allowed_commands = ["*"]`).
    pub exec: Option<Vec<std::path::PathBuf>>,
    /// Files executable whatever the allowlist: the program the daemon starts (bash, git) and a
    /// selftest probe.
    pub always_exec: Vec<std::path::PathBuf>,
    pub network: bool,
    /// With the network off: the one TCP port the child may connect to (the egress proxy on
    /// its own loopback, issue 24 §3).
    pub proxy_port: Option<u16>,
}

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

/// The system path every sandboxed child may read that holds `path`, if one does (`/usr`,
/// `/bin`, ..., `/proc`, the system config files): a secret stored there is no secret from an
/// agent (issue 35 §1).
pub fn system_readable(path: &Path) -> Option<&'static str> {
    SYSTEM_EXEC
        .iter()
        .chain(super::SYSTEM_CONFIG_FILES.iter())
        .chain(&["/proc"])
        .copied()
        .find(|p| path.starts_with(p))
}

/// The global git config files of the daemon's user that exist: `~/.gitconfig` and, under
/// `~/.config/git/`, only `config`, `attributes` and `ignore` (never the directory, which may
/// hold a `credentials` store). Shared with the bubblewrap backend.
pub(crate) fn global_git_config() -> Vec<std::path::PathBuf> {
    let Some(home) = std::env::var_os("HOME").map(std::path::PathBuf::from) else {
        return Vec::new();
    };
    let xdg = home.join(".config").join("git");
    [
        home.join(".gitconfig"),
        xdg.join("config"),
        xdg.join("attributes"),
        xdg.join("ignore"),
    ]
    .into_iter()
    .filter(|p| p.is_file())
    .collect()
}

/// The raw bits of read-file and read-dir (for the rule the launcher adds on the sandbox's own
/// `/proc`).
pub(crate) fn read_access_bits() -> u64 {
    (make_bitflags!(AccessFs::{ReadFile | ReadDir}) & AccessFs::from_all(abi())).bits()
}

/// Builds the ruleset of `spec` in the daemon (paths are opened here, so the rules hold the
/// host's inodes, which the binds preserve); the launcher enforces it in the child just before
/// `exec` with `landlock_restrict_self`.
pub(crate) fn build(spec: &Rules) -> Result<Option<std::os::fd::OwnedFd>, LandlockError> {
    let abi = abi();
    if abi == ABI::Unsupported {
        return Err(LandlockError::Unsupported);
    }
    let all = AccessFs::from_all(abi);
    let exec = BitFlags::from(AccessFs::Execute) & all;
    let read = make_bitflags!(AccessFs::{ReadFile | ReadDir}) & all;
    // No `Refer` on a `Write` root: a file linked or moved in from a readable root would stay
    // readable there, so what the sibling later writes into it could be read back.
    let write_only = (AccessFs::from_write(abi)
        & !make_bitflags!(AccessFs::{MakeChar | MakeBlock | Refer}))
        & all;
    let mut full = all & !make_bitflags!(AccessFs::{MakeChar | MakeBlock});
    // With an exec allowlist, nothing written by the agent may be executed either.
    let system = if spec.exec.is_some() {
        full &= !exec;
        read
    } else {
        read | exec
    };

    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)?;
    if !spec.network && !AccessNet::from_all(abi).is_empty() {
        ruleset = ruleset.handle_access(AccessNet::from_all(abi))?;
    }
    if !Scope::from_all(abi).is_empty() {
        ruleset = ruleset.scope(Scope::from_all(abi))?;
    }
    let mut created = ruleset.create()?;
    if let (false, Some(port)) = (spec.network, spec.proxy_port)
        && AccessNet::from_all(abi).contains(AccessNet::ConnectTcp)
    {
        created = created.add_rule(NetPort::new(port, AccessNet::ConnectTcp))?;
    }

    let file_read = BitFlags::from(AccessFs::ReadFile) & all;
    let null_rw = make_bitflags!(AccessFs::{ReadFile | WriteFile | Truncate}) & all;
    let mut rules: Vec<(&Path, BitFlags<AccessFs>)> = Vec::new();
    for p in SYSTEM_EXEC {
        rules.push((Path::new(p), system));
    }
    for p in super::SYSTEM_CONFIG_FILES.iter().chain(&["/proc"]) {
        rules.push((Path::new(p), read));
    }
    for p in &spec.extra_read {
        rules.push((p.as_path(), read));
    }
    rules.push((Path::new("/dev/null"), null_rw));
    for dev in ["/dev/zero", "/dev/random", "/dev/urandom"] {
        rules.push((Path::new(dev), file_read));
    }
    for p in spec.exec.iter().flatten().chain(&spec.always_exec) {
        rules.push((p.as_path(), exec | file_read));
    }
    for p in &spec.full {
        rules.push((p.as_path(), full));
    }
    for p in &spec.read {
        rules.push((p.as_path(), read));
    }
    for p in &spec.write_only {
        rules.push((p.as_path(), write_only));
    }
    for (path, access) in rules {
        // A path missing inside the sandbox is simply not granted.
        let Ok(fd) = PathFd::new(path) else {
            continue;
        };
        // Directory rights on a file are refused by the kernel: keep only file rights there.
        let access = if path.is_dir() {
            access
        } else {
            access & AccessFs::from_file(abi)
        };
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|source| LandlockError::Rule {
                path: path.to_path_buf(),
                source,
            })?;
    }
    Ok(created.into())
}
