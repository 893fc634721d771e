//! What a spawn of a sandbox is given, built from its policy: the Landlock rules, the compiled
//! seccomp filters, the full level's root, the rlimits, the user it runs as and the launch plan.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use serde::Serialize;

use super::{
    Backend, Layer, PROXY_PORT, PrepareError, SANDBOX_UID, SYSTEM_CONFIG_FILES, Sandbox,
    SandboxError, is_root, landlock_rules, launch, owner, seccomp, stage, which,
};

/// Resource limits of one child (from the risk profile).
#[derive(Debug, Clone, Copy, Serialize)]
pub(super) struct Rlimits {
    processes: u64,
    file_size: u64,
    cpu_secs: u64,
}

/// What every spawn of a sandbox shares.
#[derive(Debug)]
pub(super) struct Base {
    rules: landlock_rules::Rules,
    seccomp: Vec<Vec<u64>>,
    /// The full level's root (paths resolved once per sandbox).
    root: OnceLock<Arc<launch::RootBuilder>>,
}

impl Sandbox {
    /// What every spawn of this sandbox shares, built once: the Landlock rules and the compiled
    /// seccomp filters. Creates missing granted roots (Warren-owned workspace paths).
    pub(super) fn base(&self) -> Result<Arc<Base>, SandboxError> {
        self.spec
            .get_or_init(|| self.build_base().map(Arc::new).map_err(Arc::new))
            .clone()
            .map_err(|cause| self.shared_err(cause))
    }

    fn build_base(&self) -> Result<Base, PrepareError> {
        let p = &self.policy;
        for root in p
            .read_write_roots()
            .iter()
            .chain(p.read_only_roots())
            .chain(p.write_only_roots())
        {
            if !root.root.exists()
                && let Err(e) = std::fs::create_dir_all(&root.root)
            {
                return Err(PrepareError::GrantedRoot {
                    root: root.root.clone(),
                    source: e,
                });
            }
        }
        let mut full = vec![p.workspace().to_path_buf()];
        full.extend(p.read_write_roots().iter().map(|g| g.root.clone()));
        Ok(Base {
            rules: landlock_rules::Rules {
                full,
                read: p.read_only_roots().iter().map(|g| g.root.clone()).collect(),
                write_only: p
                    .write_only_roots()
                    .iter()
                    .map(|g| g.root.clone())
                    .collect(),
                extra_read: landlock_rules::global_git_config(),
                exec: if self.on(Layer::ExecAllowlist) {
                    self.exec_allowlist()
                } else {
                    None
                },
                always_exec: Vec::new(),
                network: p.allow_network(),
                proxy_port: self.proxied().then_some(PROXY_PORT),
            },
            seccomp: if self.on(Layer::Seccomp) {
                // Proxied: inet sockets, in a namespace where only the proxy listens.
                seccomp::packed(p.allow_network() || self.proxied(), self.watches())?
            } else {
                Vec::new()
            },
            root: OnceLock::new(),
        })
    }

    /// The launch plan of one child: `program` (always executable; for git also the writable
    /// roots, for its hooks, GIT-8) and, for a probe, the stage executable.
    pub(super) fn plan(
        &self,
        base: &Base,
        program: &OsStr,
        probe_exe: Option<&Path>,
    ) -> Result<launch::Plan, SandboxError> {
        let p = &self.policy;
        let landlock = if self.on(Layer::Landlock) {
            let mut rules = base.rules.clone();
            let path = Path::new(program);
            if rules.exec.is_some() && path.file_name().is_some_and(|n| n == "git") {
                let writable = rules.full.clone();
                rules.always_exec.extend(writable);
            }
            if path.is_absolute() {
                rules.always_exec.push(path.to_path_buf());
            } else if let Some(found) = which(&program.to_string_lossy()) {
                rules.always_exec.push(found);
            }
            rules.always_exec.extend(probe_exe.map(Path::to_path_buf));
            landlock_rules::build(&rules).map_err(|e| self.prepare_err(e))?
        } else {
            None
        };
        let plan = match self.backend {
            Backend::Full => {
                let root = match probe_exe {
                    Some(exe) => Arc::new(self.new_root(Some(exe))),
                    None => base
                        .root
                        .get_or_init(|| Arc::new(self.new_root(None)))
                        .clone(),
                };
                launch::Plan::full(
                    root,
                    !p.allow_network() && self.on(Layer::NetNamespace),
                    self.on(Layer::PidNamespace),
                    p.workspace(),
                )
            }
            _ => launch::Plan::landlock_level(),
        };
        let limits = self.rlimits();
        // Issue 35 §8: no file may grow past what remains of the workspace limits and of the
        // free space above the daemon's reserve (the kernel answers EFBIG / SIGXFSZ).
        let file_size = limits.file_size.min(p.write_room());
        Ok(plan
            .rlimits(limits.processes, file_size, limits.cpu_secs)
            .run_as(self.run_as())
            .own_user_namespace(self.on(Layer::OwnUserNamespace))
            .drop_capabilities(self.drop_capabilities())
            .close_inherited(self.on(Layer::CloseInherited))
            .landlock(
                landlock,
                (self.backend == Backend::Full && self.on(Layer::PidNamespace))
                    .then(landlock_rules::read_access_bits),
            )
            .seccomp(&base.seccomp))
    }

    /// The full level's root: the system set read-only, a private `/proc`, `/dev` and `/tmp`,
    /// the agent's roots at their own paths (workspace and `ReadWrite` roots writable, `Read`
    /// roots read-only, `Write` roots writable — Landlock makes them write-only). Not `/run`,
    /// `/var`, `/home`, `/root`, `/etc/ssl/private` or the rest of `/etc`.
    fn new_root(&self, probe_exe: Option<&Path>) -> launch::RootBuilder {
        let p = &self.policy;
        let mut r = launch::RootBuilder::new();
        // Mounts that other paths may sit below come first (a temp-dir install root or HOME
        // lives under /tmp): a later tmpfs would cover what was bound there.
        if self.on(Layer::HostIpcHidden) {
            r.tmpfs(Path::new("/tmp"));
        } else {
            for dir in ["/tmp", "/run", "/var/run", "/home"] {
                r.bind(Path::new(dir), false);
            }
        }
        r.tmpfs(Path::new("/dev"));
        for dev in ["null", "zero", "full", "random", "urandom", "tty"] {
            r.bind(&Path::new("/dev").join(dev), false);
        }
        for (link, target) in [
            ("fd", "/proc/self/fd"),
            ("stdin", "/proc/self/fd/0"),
            ("stdout", "/proc/self/fd/1"),
            ("stderr", "/proc/self/fd/2"),
        ] {
            r.symlink(Path::new(target), &Path::new("/dev").join(link));
        }
        if self.on(Layer::HostIpcHidden) {
            r.dir(Path::new("/dev/shm"));
        } else {
            r.bind(Path::new("/dev/shm"), false);
        }
        if self.on(Layer::PidNamespace) {
            r.proc(Path::new("/proc"));
        } else {
            r.bind(Path::new("/proc"), false);
        }
        r.system();
        r.dir(Path::new("/etc"));
        for file in SYSTEM_CONFIG_FILES {
            r.bind(Path::new(file), true);
        }
        // The operator's global git config files (commit identity, GIT-5), nothing else of that
        // home directory.
        for file in landlock_rules::global_git_config() {
            r.bind(&file, true);
        }
        if let Some(exe) = probe_exe {
            r.bind_at(exe, Path::new(stage::STAGE_PATH), true);
        }
        r.bind(p.workspace(), false);
        for g in p.read_write_roots() {
            r.bind(&g.root, false);
        }
        for g in p.read_only_roots() {
            r.bind(&g.root, true);
        }
        for g in p.write_only_roots() {
            r.bind(&g.root, false);
        }
        r
    }

    /// Whether children may create inotify instances (issue 35 §6). A watch needs no Landlock
    /// right, so it is refused wherever the child can name a path it may not read: at the
    /// landlock level every host path is nameable (other workspaces, `data/`), and at the full
    /// level a `Write` grant's directory is mounted but write-only.
    pub(super) fn watches(&self) -> seccomp::Watches {
        if self.backend == Backend::Landlock || !self.policy.write_only_roots().is_empty() {
            seccomp::Watches::Denied
        } else {
            seccomp::Watches::Allowed
        }
    }

    /// The uid children switch to: `nobody` under the full sandbox when the daemon is root.
    pub(super) fn run_as(&self) -> Option<u32> {
        (self.backend == Backend::Full && is_root() && self.on(Layer::SandboxUser))
            .then_some(SANDBOX_UID)
    }

    /// The landlock level with the daemon as root: the child keeps uid 0 (its roots may sit
    /// below a directory only root can enter, such as `/root`) and `CAP_DAC_OVERRIDE` (roots the
    /// full level handed to `nobody` stay usable; Landlock decides every path) but loses every
    /// other capability and the rest of the bounding set, so an `exec` gains none back. With them, `CAP_SYS_PTRACE` read the
    /// daemon's `/proc/<pid>/environ` through Landlock and `CAP_IPC_OWNER` attached any
    /// System V segment.
    fn drop_capabilities(&self) -> bool {
        self.backend == Backend::Landlock && is_root() && self.on(Layer::SandboxUser)
    }

    /// Gives the workspace and the writable granted roots to the sandbox user (once per sandbox),
    /// so children running as `nobody` can work in them. Walks with directory handles
    /// (`O_NOFOLLOW`, `AT_SYMLINK_NOFOLLOW`) and changes only root-owned entries with one link, so
    /// a planted symlink or hard link never hands a file outside the roots over.
    pub(super) fn hand_over_roots(&self) -> Result<(), SandboxError> {
        self.handed_over
            .get_or_init(|| {
                let p = &self.policy;
                std::iter::once(p.workspace())
                    .chain(p.read_write_roots().iter().map(|g| g.root.as_path()))
                    .chain(p.write_only_roots().iter().map(|g| g.root.as_path()))
                    .try_for_each(owner::hand_over)
                    .map_err(|e| Arc::new(e.into()))
            })
            .clone()
            .map_err(|cause| self.shared_err(cause))
    }

    pub(super) fn rlimits(&self) -> Rlimits {
        let p = &self.policy;
        Rlimits {
            processes: p.max_processes(),
            file_size: p.max_file_size_bytes(),
            cpu_secs: p.max_cpu_secs(),
        }
    }

    /// The binaries children may execute: `None` when `allowed_commands` has `*`; otherwise the
    /// resolved binaries of the allowed commands, the shell the `shell` tool runs, `git` (the
    /// `git_operations` tool and its hooks) and the dynamic loader.
    pub fn exec_allowlist(&self) -> Option<Vec<PathBuf>> {
        let commands = self.policy.allowed_commands();
        if commands.iter().any(|c| c == "*") {
            return None;
        }
        let mut out: BTreeSet<PathBuf> = BTreeSet::new();
        let fixed = ["bash", "sh", "git"];
        for name in commands.iter().map(String::as_str).chain(fixed) {
            let found = if name.contains('/') {
                Some(PathBuf::from(name))
            } else {
                which(name)
            };
            if let Some(path) = found {
                out.insert(std::fs::canonicalize(&path).unwrap_or(path));
            }
        }
        // git's own helper programs, and the dynamic loaders the kernel opens for every binary.
        out.insert(PathBuf::from("/usr/lib/git-core"));
        for dir in ["/lib64", "/usr/lib64", "/lib", "/usr/lib"] {
            if let Ok(entries) = std::fs::read_dir(dir) {
                for e in entries.flatten() {
                    if e.file_name().to_string_lossy().starts_with("ld-linux") {
                        let path = e.path();
                        out.insert(std::fs::canonicalize(&path).unwrap_or(path));
                    }
                }
            }
        }
        for triple in ["x86_64-linux-gnu", "aarch64-linux-gnu"] {
            let dir = Path::new("/usr/lib").join(triple);
            if let Ok(entries) = std::fs::read_dir(&dir) {
                for e in entries.flatten() {
                    if e.file_name().to_string_lossy().starts_with("ld-linux") {
                        out.insert(e.path());
                    }
                }
            }
        }
        Some(out.into_iter().collect())
    }
}
