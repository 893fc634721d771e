//! The Landlock backend: the agent's kernel rules, enforced on a spawner thread whose children
//! inherit them.
//!
//! Rights per root (SBX-2): the workspace and `ReadWrite` roots get every file right; `Read`
//! roots get read and list; `Write` roots get write, create and remove but neither read nor list;
//! system directories get read and execute; `/dev/null` read-write and `/dev/{zero,random,urandom}`
//! read (PERM-5); the operator's global git config files (`~/.gitconfig`, `~/.config/git/{config,
//! attributes,ignore}`) read (GIT-5);
//! `/tmp` is NOT granted (each agent has `<workspace>/.tmp`). When the risk profile
//! denies network, TCP connect and bind are handled with no allowed port (ABI ≥ 4). Signals and
//! abstract Unix sockets are scoped to the sandbox (ABI ≥ 6). Sibling roots that do not exist yet
//! are created (they are Warren-owned workspace paths); a root that cannot be opened is skipped
//! with a warning, never a silent fallback to no sandbox.

use std::path::Path;
use std::process::{Child, Command};
use std::sync::OnceLock;
use std::sync::mpsc;

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

/// Builds the agent's ruleset (once per sandbox; every child gets a duplicate of it).
pub(crate) fn build(policy: &SecurityPolicy) -> Result<RulesetCreated, String> {
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
    for p in super::SYSTEM_CONFIG_FILES.iter().chain(&["/proc"]) {
        rules.push((Path::new(p), read, false));
    }
    // The operator's global git config (identity for commits, GIT-5): read-only, when present.
    let global_git = global_git_config();
    for p in &global_git {
        rules.push((p.as_path(), read, false));
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
    Ok(created)
}

/// A thread restricted by the agent's ruleset that spawns the agent's children. Landlock
/// domains are per thread and inherited by children, so every process this thread starts is
/// confined from its first instruction, without a `pre_exec` hook (and so without `fork`).
#[derive(Debug)]
pub(crate) struct Spawner {
    requests: mpsc::Sender<(Command, mpsc::SyncSender<std::io::Result<Child>>)>,
}

impl Spawner {
    /// Starts the thread and waits until it has restricted itself.
    pub(crate) fn start(ruleset: RulesetCreated) -> Result<Self, String> {
        let (requests, inbox) =
            mpsc::channel::<(Command, mpsc::SyncSender<std::io::Result<Child>>)>();
        let (ready_tx, ready_rx) = mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("warren-landlock-spawner".into())
            .spawn(move || {
                let status = match ruleset.restrict_self() {
                    Ok(s) if s.ruleset != RulesetStatus::NotEnforced => Ok(()),
                    Ok(_) => Err("the kernel did not enforce the Landlock ruleset".to_string()),
                    Err(e) => Err(format!("cannot enforce the Landlock ruleset: {e}")),
                };
                let ok = status.is_ok();
                let _ = ready_tx.send(status);
                if !ok {
                    return;
                }
                for (mut cmd, reply) in inbox {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .map_err(|e| format!("cannot start the sandbox spawner thread: {e}"))?;
        ready_rx
            .recv()
            .map_err(|_| "the sandbox spawner thread died".to_string())??;
        Ok(Self { requests })
    }

    /// Spawns `cmd` from the restricted thread.
    pub(crate) fn spawn(&self, cmd: Command) -> Result<std::io::Result<Child>, String> {
        let (reply, answer) = mpsc::sync_channel(1);
        self.requests
            .send((cmd, reply))
            .map_err(|_| "the sandbox spawner thread stopped".to_string())?;
        answer
            .recv()
            .map_err(|_| "the sandbox spawner thread stopped".to_string())
    }
}
