//! The one spawn module (SBX-1..3, issue 13): every child process the runtime starts for an agent
//! (shell, git, scripts, later MCP servers) is started by [`Sandbox::spawn`].
//!
//! Levels (the `Backend` a sandbox uses):
//! - `full` (what `auto` and `bubblewrap` pick): the launcher ([`launch`]) forks, unshares the
//!   mount, PID, network, IPC, UTS and cgroup namespaces (and a user namespace when the daemon is
//!   not root), builds a root from binds of exactly the system set and the agent's roots, mounts
//!   a private `/proc`, `/dev` and `/tmp`, then sets rlimits, becomes `nobody` when the daemon is
//!   root (dropping every capability), sets `no_new_privs`, enforces the agent's Landlock rules
//!   (sibling tiers exact, the exec allowlist, TCP rules, scopes) and the seccomp filter
//!   ([`seccomp`]), and execs the program as PID 1 of the namespace; its exit (or the
//!   death of its reaper) kills everything the call started.
//! - `landlock`: a named weaker level, the same hook without namespaces (no PID namespace, so no
//!   own `/proc` and no survivor kill; host sockets reachable by path). Posture says so.
//! - `docker`: the runtime container (command construction only).
//! - `noop`: nothing; never picked by `auto`, and only with `unrestricted = true` on the profile.
//!
//! Why our own launcher rather than `bwrap`: the first version used `bwrap` plus an in-sandbox
//! stage for Landlock (a Landlock domain forbids `mount`, so Landlock must come after the binds,
//! which `bwrap` cannot do). That costs two extra `exec`s per child: 6.1 ms against 3.1 ms for
//! plain `bwrap` on the CI machine. Doing the same system calls in a `pre_exec` hook with
//! everything prepared in the daemon costs one `exec`: 2.6 ms (`benches/spawn.rs`).

pub mod egress;
mod landlock_rules;
mod launch;
mod owner;
mod probe_sys;
pub(crate) mod seccomp;
pub mod selftest;
mod selftest_socket;
mod selftest_watch;
pub mod stage;
mod wrappers;

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex, OnceLock, mpsc};

use serde::Serialize;
use warren_config::schema::{SandboxFallback, SandboxKind};

use crate::policy::SecurityPolicy;

pub use egress::{EgressProxy, ExitWatch, PROXY_PORT};
pub use landlock_rules::{landlock_abi, system_readable};

/// Where a child's stdout and stderr go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildIo {
    Piped,
    Null,
    /// stdin, stdout and stderr piped: a long-lived child spoken to over its stdio (an MCP
    /// server, issue 23).
    Duplex,
}

impl ChildIo {
    fn stdio(self) -> Stdio {
        match self {
            Self::Piped | Self::Duplex => Stdio::piped(),
            Self::Null => Stdio::null(),
        }
    }

    fn stdin(self) -> Stdio {
        match self {
            Self::Duplex => Stdio::piped(),
            Self::Piped | Self::Null => Stdio::null(),
        }
    }
}

/// The level a sandbox actually uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// Namespaces + Landlock + seccomp + no capabilities + rlimits.
    Full,
    /// Landlock + seccomp + rlimits, no namespaces (weaker, named).
    Landlock,
    Docker,
    Noop,
}

/// One layer of the full sandbox. Tests switch a layer off (`Sandbox::without`) to show that a
/// probe is live (it escapes without the layer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    /// The empty network namespace.
    NetNamespace,
    /// The PID namespace with its own `/proc` (also what kills survivors).
    PidNamespace,
    /// The mount namespace's hiding of `/run`, `/var/run`, `/tmp`, `/dev/shm` and homes.
    HostIpcHidden,
    /// Landlock file, network and scope rules.
    Landlock,
    /// The seccomp filter.
    Seccomp,
    /// Landlock EXECUTE only on the allowed commands' binaries.
    ExecAllowlist,
    /// Running as `nobody` when the daemon is root.
    SandboxUser,
    /// Daemon as root, full level: each call's own user namespace (only `nobody` mapped), so
    /// the kernel's per-user process and inotify counts are the call's own.
    OwnUserNamespace,
    /// Only stdio reaches the program: every other descriptor is closed at `exec`.
    CloseInherited,
}

impl Layer {
    pub const ALL: [Layer; 9] = [
        Layer::NetNamespace,
        Layer::PidNamespace,
        Layer::HostIpcHidden,
        Layer::Landlock,
        Layer::Seccomp,
        Layer::ExecAllowlist,
        Layer::SandboxUser,
        Layer::OwnUserNamespace,
        Layer::CloseInherited,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Layer::NetNamespace => "net_namespace",
            Layer::PidNamespace => "pid_namespace",
            Layer::HostIpcHidden => "host_ipc_hidden",
            Layer::Landlock => "landlock",
            Layer::Seccomp => "seccomp",
            Layer::ExecAllowlist => "exec_allowlist",
            Layer::SandboxUser => "sandbox_user",
            Layer::OwnUserNamespace => "own_user_namespace",
            Layer::CloseInherited => "close_inherited_fds",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.name() == name)
    }
}

/// Why an agent cannot get its sandbox.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(
        "sandbox '{requested}' of agent '{alias}' is unavailable on this host ({reason}); the agent's commands cannot run. \
         Enable what is missing (Landlock: Linux 5.13+; unprivileged user namespaces when the daemon is not root), or choose another level in its risk profile"
    )]
    Unavailable {
        alias: String,
        requested: String,
        reason: String,
    },
    #[error(
        "agent '{alias}': sandbox = \"noop\" (or fallback = \"noop\") runs commands unconfined and needs unrestricted = true in its risk profile"
    )]
    NoopNotAllowed { alias: String },
    #[error("cannot prepare the sandbox of agent '{alias}': {reason}")]
    Prepare { alias: String, reason: String },
}

/// System files every backend lets a child read (dynamic linker, users and groups, name
/// resolution, certificates, the system git config). Not `/etc` as a whole: it holds secrets.
pub(crate) const SYSTEM_CONFIG_FILES: [&str; 15] = [
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
    "/etc/os-release",
];

/// Environment variables every child gets (values set by Warren, not inherited).
pub const BASE_ENV: [&str; 5] = ["PATH", "HOME", "TMPDIR", "LANG", "TERM"];
const CHILD_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Resource limits of one child (from the risk profile).
#[derive(Debug, Clone, Copy, Serialize)]
struct Rlimits {
    processes: u64,
    file_size: u64,
    cpu_secs: u64,
}

/// What every spawn of a sandbox shares.
#[derive(Debug)]
struct Base {
    rules: landlock_rules::Rules,
    seccomp: Vec<Vec<u64>>,
    /// The full level's root (paths resolved once per sandbox).
    root: OnceLock<Arc<launch::RootBuilder>>,
}

/// The uid and gid confined children run as when the daemon runs as root (`nobody`).
pub const SANDBOX_UID: u32 = 65534;

/// An agent's sandbox: the policy it confines to and the level chosen for this host.
#[derive(Debug, Clone)]
pub struct Sandbox {
    policy: SecurityPolicy,
    backend: Backend,
    requested: SandboxKind,
    fallback_used: Option<String>,
    disabled: BTreeSet<Layer>,
    /// The rules and filters every spawn shares, built on first use and shared by every clone.
    spec: Arc<OnceLock<Result<Arc<Base>, String>>>,
    /// Whether the roots were handed to the sandbox user (daemon as root).
    handed_over: Arc<OnceLock<Result<(), String>>>,
    /// The daemon's egress proxy for this agent's children (issue 24 §3), shared by clones.
    egress: Arc<OnceLock<Arc<dyn EgressProxy>>>,
}

impl Sandbox {
    /// Chooses the level for `policy` on this host (SBX-3).
    pub fn for_policy(policy: &SecurityPolicy) -> Result<Self, SandboxError> {
        let requested = policy.sandbox_kind();
        let alias = || policy.alias().to_string();
        let noop_used =
            requested == SandboxKind::Noop || policy.fallback() == SandboxFallback::Noop;
        if noop_used && !policy.unrestricted() {
            return Err(SandboxError::NoopNotAllowed { alias: alias() });
        }
        let pick = |backend| Self {
            policy: policy.clone(),
            backend,
            requested,
            fallback_used: None,
            disabled: BTreeSet::new(),
            spec: Arc::default(),
            handed_over: Arc::default(),
            egress: Arc::default(),
        };
        let unavailable = |reason: String| -> Result<Self, SandboxError> {
            if policy.fallback() == SandboxFallback::Noop {
                tracing::warn!(agent = %policy.alias(), "sandbox {requested:?} unavailable ({reason}); running commands UNCONFINED (fallback = \"noop\", unrestricted = true)");
                Ok(Self {
                    fallback_used: Some(reason),
                    ..pick(Backend::Noop)
                })
            } else {
                Err(SandboxError::Unavailable {
                    alias: alias(),
                    requested: format!("{requested:?}").to_lowercase(),
                    reason,
                })
            }
        };
        match requested {
            SandboxKind::Noop => Ok(pick(Backend::Noop)),
            SandboxKind::Landlock => match stage_status() {
                Ok(()) => Ok(pick(Backend::Landlock)),
                Err(reason) => unavailable(reason),
            },
            SandboxKind::Auto | SandboxKind::Bubblewrap => {
                match stage_status().and_then(|()| full_status()) {
                    Ok(()) => Ok(pick(Backend::Full)),
                    Err(reason) => unavailable(reason),
                }
            }
            SandboxKind::Docker => match which("docker") {
                Some(_) => Ok(pick(Backend::Docker)),
                None => unavailable("`docker` is not installed".into()),
            },
        }
    }

    /// This sandbox with `layer` switched off (tests and the selftest's liveness rows only).
    #[doc(hidden)]
    pub fn without(mut self, layer: Layer) -> Self {
        self.disabled.insert(layer);
        self.spec = Arc::default();
        self
    }

    /// Sets the daemon's egress proxy (once; every clone of this sandbox shares it). Children
    /// of an agent with a network allowlist and `allow_network = false` reach the network only
    /// through it ([`egress`]).
    pub fn set_egress_proxy(&self, proxy: Arc<dyn EgressProxy>) {
        let _ = self.egress.set(proxy);
    }

    /// Whether a child reached the network through the egress proxy since the last call.
    pub fn take_egress_use(&self) -> bool {
        self.egress.get().is_some_and(|p| p.take_used())
    }

    /// Whether children get the proxy listener in their empty network namespace.
    pub fn proxied(&self) -> bool {
        self.backend == Backend::Full
            && !self.policy.allow_network()
            && self.on(Layer::NetNamespace)
            && !self.policy.egress().allow.is_empty()
    }

    fn watches_posture(&self) -> &'static str {
        match (self.on(Layer::Seccomp), self.watches()) {
            (true, seccomp::Watches::Denied) => {
                "denied (seccomp refuses inotify_init and fanotify_init: a watch needs no Landlock right)"
            }
            (true, seccomp::Watches::Allowed) => {
                "inotify allowed (every path the child can name is one it may read); fanotify denied"
            }
            (false, _) => "allowed (seccomp switched off)",
        }
    }

    fn on(&self, layer: Layer) -> bool {
        !self.disabled.contains(&layer)
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    pub fn policy(&self) -> &SecurityPolicy {
        &self.policy
    }

    /// The effective sandbox, for `warren security posture` and `/api/status`: the level, each
    /// layer, and what this level does not stop.
    pub fn posture(&self) -> serde_json::Value {
        let network = self.policy.allow_network();
        let (layers, not_contained): (serde_json::Value, Vec<&str>) = match self.backend {
            Backend::Full => (
                serde_json::json!({
                    "namespaces": ["user", "mount", "pid", "network", "ipc", "uts", "cgroup"],
                    "landlock_abi": landlock_abi(),
                    "seccomp": true,
                    "capabilities": "all dropped, no_new_privs",
                    "exec_allowlist": self.exec_allowlist().is_some(),
                    "file_watches": self.watches_posture(),
                    "rlimits": self.rlimits(),
                    "runs_as": if is_root() { "nobody (daemon is root), in a user namespace of its own" } else { "the daemon's user, in a user namespace" },
                }),
                vec![
                    "the dynamic loader can be named as a program to run any readable binary, and an interpreter can execute a memfd, so an exec-capable allowed command can bypass the exec allowlist (see exec_capable)",
                    "inotify instances are counted per host user (nobody, or the daemon's user): one call can hold all of them (when file watches are allowed)",
                    "stat on a known name in a Write-granted root shows its type, size, owner, mode and times (Landlock has no right for stat)",
                ],
            ),
            Backend::Landlock => (
                serde_json::json!({
                    "namespaces": [],
                    "landlock_abi": landlock_abi(),
                    "seccomp": true,
                    "exec_allowlist": self.exec_allowlist().is_some(),
                    "file_watches": self.watches_posture(),
                    "rlimits": self.rlimits(),
                }),
                vec![
                    "host Unix sockets are reachable by path (no mount namespace)",
                    "processes that leave the process group survive the call (no PID namespace)",
                    "/proc shows the host's processes (their cmdline is readable)",
                    "the host's System V IPC objects are reachable (no IPC namespace; POSIX message queues are held by Landlock)",
                    "the mode, timestamps and extended attributes of files in Read-granted roots can be changed (Landlock does not cover chmod, utimes or setxattr; the full level binds those roots read-only)",
                    "the child runs with the daemon's uid (uid 0 with only CAP_DAC_OVERRIDE when the daemon is root, so no process limit applies)",
                    "stat on any known host path shows its type, size, owner, mode and times (Landlock has no right for stat)",
                ],
            ),
            Backend::Docker => (
                serde_json::json!({"container": wrappers::DOCKER_IMAGE}),
                vec![],
            ),
            Backend::Noop => (
                serde_json::json!({}),
                vec!["everything: commands run unconfined with the daemon's rights"],
            ),
        };
        serde_json::json!({
            "requested": self.requested,
            "active": self.backend,
            "level": match self.backend {
                Backend::Full => "full",
                Backend::Landlock => "landlock (weaker: no namespaces)",
                Backend::Docker => "docker",
                Backend::Noop => "none",
            },
            "fallback_used": self.fallback_used,
            "landlock_abi": landlock_abi(),
            "carries_sibling_roots": matches!(self.backend, Backend::Full | Backend::Landlock),
            "network": match (self.backend, network) {
                (Backend::Noop, _) | (_, true) => "allowed",
                (Backend::Full, false) if self.proxied() => "only the allowlisted hosts, through the daemon's egress proxy (empty network namespace with the proxy on its loopback)",
                (Backend::Full, false) => "denied (empty network namespace; seccomp allows only AF_UNIX sockets)",
                (Backend::Landlock, false) => "denied (seccomp allows only AF_UNIX sockets)",
                (Backend::Docker, false) => "denied (--network none)",
            },
            "layers": layers,
            "not_contained": not_contained,
        })
    }

    /// Starts `program args...` confined for this agent: cwd = workspace, cleared environment
    /// plus the passthrough list, stdin closed, its own process group (pgid = its pid).
    ///
    /// This is the only way to start an agent's child: there is no unconfined `Command` to get
    /// hold of. Under `full`, the returned child is the namespace's reaper; killing it (or its group) ends the
    /// PID namespace and with it every process the call started.
    pub fn spawn(
        &self,
        program: impl AsRef<OsStr>,
        args: &[OsString],
        io: ChildIo,
    ) -> Result<Child, SandboxError> {
        self.spawn_with_env(program, args, io, &[])
    }

    /// [`Self::spawn`] with `extra_env` set on top of the cleared environment (a name already in
    /// it is replaced). Nothing is inherited: the caller names every extra variable (GIT-5).
    pub fn spawn_with_env(
        &self,
        program: impl AsRef<OsStr>,
        args: &[OsString],
        io: ChildIo,
        extra_env: &[(OsString, OsString)],
    ) -> Result<Child, SandboxError> {
        self.spawn_inner(program.as_ref(), args, io, extra_env, None)
    }

    /// Runs a selftest probe inside this sandbox and returns what it printed: the program is this
    /// binary itself, whose constructor performs the probe (see [`stage`]).
    pub(crate) fn spawn_probe(&self, probe: &selftest::ProbeSpec) -> Result<Vec<u8>, SandboxError> {
        let out = self
            .spawn_probe_child(probe)?
            .wait_with_output()
            .map_err(|e| self.prepare_err(format!("waiting for the probe failed: {e}")))?;
        Ok(out.stdout)
    }

    /// Starts a selftest probe inside this sandbox and returns the running child (stdout piped).
    pub(crate) fn spawn_probe_child(
        &self,
        probe: &selftest::ProbeSpec,
    ) -> Result<Child, SandboxError> {
        if matches!(self.backend, Backend::Noop | Backend::Docker) {
            return Err(
                self.prepare_err("probes run only under the full and landlock levels".into())
            );
        }
        let exe = stage_exe().map_err(|e| self.prepare_err(e))?;
        let program = match self.backend {
            Backend::Full => OsStr::new(stage::STAGE_PATH),
            _ => exe.as_os_str(),
        };
        let json = serde_json::to_string(probe).map_err(|e| self.prepare_err(e.to_string()))?;
        let env = [(OsString::from(stage::STAGE_ENV), OsString::from(json))];
        self.spawn_inner(program, &[], ChildIo::Piped, &env, Some(exe))
    }

    fn prepare_err(&self, reason: String) -> SandboxError {
        SandboxError::Prepare {
            alias: self.policy.alias().to_string(),
            reason,
        }
    }

    /// `probe_exe`: the stage executable to bind (at `STAGE_PATH`) and allow to run.
    fn spawn_inner(
        &self,
        program: &OsStr,
        args: &[OsString],
        io: ChildIo,
        extra_env: &[(OsString, OsString)],
        probe_exe: Option<&Path>,
    ) -> Result<Child, SandboxError> {
        self.policy
            .ensure_workspace()
            .map_err(|e| self.prepare_err(e.to_string()))?;
        let mut cmd = match self.backend {
            Backend::Docker => {
                let argv = wrapper_argv(Backend::Docker, &self.policy, program, args);
                let mut c = Command::new(&argv[0]);
                c.args(&argv[1..]);
                c
            }
            Backend::Noop | Backend::Landlock | Backend::Full => {
                let mut c = Command::new(program);
                c.args(args);
                c
            }
        };
        cmd.env_clear();
        for (key, value) in self.child_env() {
            cmd.env(key, value);
        }
        for (key, value) in extra_env {
            cmd.env(key, value);
        }
        cmd.current_dir(self.policy.workspace())
            .stdin(io.stdin())
            .stdout(io.stdio())
            .stderr(io.stdio());
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let spawn_err = |e: std::io::Error| {
            self.prepare_err(format!("cannot start {}: {e}", program.to_string_lossy()))
        };
        match self.backend {
            Backend::Noop | Backend::Docker => cmd.spawn().map_err(spawn_err),
            Backend::Landlock | Backend::Full => {
                let base = self.base()?;
                if self.run_as().is_some() {
                    self.hand_over_roots()?;
                }
                let proxy = match (self.proxied(), self.egress.get()) {
                    (true, Some(serve)) => {
                        let pair =
                            egress::channel().map_err(|e| self.prepare_err(e.to_string()))?;
                        cmd.envs(egress::env());
                        Some((pair, Arc::clone(serve)))
                    }
                    _ => None,
                };
                let child_end = proxy
                    .as_ref()
                    .map(|((_, theirs), _)| std::os::fd::AsRawFd::as_raw_fd(theirs));
                self.plan(&base, program, probe_exe)?
                    .proxy(child_end)
                    .install(&mut cmd);
                // From one long-lived thread: the parent-death signal follows the spawning thread.
                let mut child = spawner()
                    .spawn(cmd)
                    .map_err(|e| self.prepare_err(e))?
                    .map_err(spawn_err)?;
                if let Some(((ours, theirs), serve)) = proxy {
                    drop(theirs);
                    let served =
                        egress::receive(&ours).and_then(|l| Ok((l, egress::pidfd(child.id())?)));
                    match served {
                        Ok((listener, exited)) => serve.serve(listener, exited),
                        Err(e) => {
                            let _ = child.kill();
                            let _ = child.wait();
                            return Err(
                                self.prepare_err(format!("the egress proxy could not start: {e}"))
                            );
                        }
                    }
                }
                Ok(child)
            }
        }
    }

    /// What every spawn of this sandbox shares, built once: the Landlock rules and the compiled
    /// seccomp filters. Creates missing granted roots (Warren-owned workspace paths).
    fn base(&self) -> Result<Arc<Base>, SandboxError> {
        self.spec
            .get_or_init(|| self.build_base().map(Arc::new))
            .clone()
            .map_err(|reason| self.prepare_err(reason))
    }

    fn build_base(&self) -> Result<Base, String> {
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
                return Err(format!(
                    "cannot create granted root {}: {e}",
                    root.root.display()
                ));
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
    fn plan(
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
    fn watches(&self) -> seccomp::Watches {
        if self.backend == Backend::Landlock || !self.policy.write_only_roots().is_empty() {
            seccomp::Watches::Denied
        } else {
            seccomp::Watches::Allowed
        }
    }

    /// The uid children switch to: `nobody` under the full sandbox when the daemon is root.
    fn run_as(&self) -> Option<u32> {
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
    fn hand_over_roots(&self) -> Result<(), SandboxError> {
        self.handed_over
            .get_or_init(|| {
                let p = &self.policy;
                std::iter::once(p.workspace())
                    .chain(p.read_write_roots().iter().map(|g| g.root.as_path()))
                    .chain(p.write_only_roots().iter().map(|g| g.root.as_path()))
                    .try_for_each(owner::hand_over)
            })
            .clone()
            .map_err(|e| self.prepare_err(e))
    }

    fn rlimits(&self) -> Rlimits {
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

    /// Runs `program args...` to completion and collects its output (tests, probes).
    pub fn output(
        &self,
        program: impl AsRef<OsStr>,
        args: &[OsString],
    ) -> Result<Output, SandboxError> {
        self.spawn(program, args, ChildIo::Piped)?
            .wait_with_output()
            .map_err(|e| SandboxError::Prepare {
                alias: self.policy.alias().to_string(),
                reason: format!("waiting for the child failed: {e}"),
            })
    }

    /// The environment of a child: Warren's fixed values plus the passthrough names that are set.
    pub fn child_env(&self) -> Vec<(OsString, OsString)> {
        let mut env: Vec<(OsString, OsString)> = vec![
            ("PATH".into(), CHILD_PATH.into()),
            (
                "HOME".into(),
                self.policy.workspace().as_os_str().to_os_string(),
            ),
            ("TMPDIR".into(), self.policy.temp_dir().into_os_string()),
            ("LANG".into(), "C.UTF-8".into()),
            ("TERM".into(), "dumb".into()),
        ];
        for name in self.policy.env_passthrough() {
            if BASE_ENV.contains(&name.as_str()) || name == stage::STAGE_ENV {
                continue;
            }
            if let Some(value) = std::env::var_os(name) {
                env.push((name.into(), value));
            }
        }
        env
    }
}

pub(crate) fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The executable that runs selftest probes: this process's own binary.
fn stage_exe() -> Result<&'static Path, String> {
    static EXE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    EXE.get_or_init(|| {
        if !stage::linked() {
            return Err("the sandbox stage is not linked into this binary".into());
        }
        std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))
    })
    .as_ref()
    .map(PathBuf::as_path)
    .map_err(Clone::clone)
}

/// Whether this kernel can enforce the landlock level (probed once).
fn stage_status() -> Result<(), String> {
    static STATUS: OnceLock<Result<(), String>> = OnceLock::new();
    STATUS
        .get_or_init(|| {
            if landlock_abi().is_none() {
                return Err("the kernel has no Landlock support".into());
            }
            seccomp::packed(false, seccomp::Watches::Denied).map(|_| ())
        })
        .clone()
}

/// Whether this kernel lets the launcher build the full level's namespaces (probed once, by
/// starting `/bin/true` in a minimal root).
fn full_status() -> Result<(), String> {
    static STATUS: OnceLock<Result<(), String>> = OnceLock::new();
    STATUS
        .get_or_init(|| {
            let mut root = launch::RootBuilder::new();
            root.system();
            root.proc(Path::new("/proc"));
            let mut cmd = Command::new("/bin/true");
            cmd.env_clear()
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            launch::Plan::full(Arc::new(root), true, true, Path::new("/")).install(&mut cmd);
            let out = spawner()
                .spawn(cmd)?
                .and_then(Child::wait_with_output)
                .map_err(|e| format!("cannot create the sandbox's namespaces here: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "cannot create the sandbox's namespaces here (user namespaces disabled?): {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        })
        .clone()
}

/// A long-lived thread that spawns every confined child, so the parent-death signal (which
/// follows the spawning thread, not the process) never fires because a pool thread retired.
struct Spawner {
    requests: Mutex<mpsc::Sender<(Command, mpsc::SyncSender<std::io::Result<Child>>)>>,
}

impl Spawner {
    fn spawn(&self, cmd: Command) -> Result<std::io::Result<Child>, String> {
        let (reply, answer) = mpsc::sync_channel(1);
        self.requests
            .lock()
            .map_err(|_| "the sandbox spawner is poisoned".to_string())?
            .send((cmd, reply))
            .map_err(|_| "the sandbox spawner thread stopped".to_string())?;
        answer
            .recv()
            .map_err(|_| "the sandbox spawner thread stopped".to_string())
    }
}

fn spawner() -> &'static Spawner {
    static SPAWNER: OnceLock<Spawner> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (requests, inbox) =
            mpsc::channel::<(Command, mpsc::SyncSender<std::io::Result<Child>>)>();
        let started = std::thread::Builder::new()
            .name("warren-sandbox-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in inbox {
                    let _ = reply.send(cmd.spawn());
                }
            });
        if let Err(e) = started {
            tracing::error!("cannot start the sandbox spawner thread: {e}");
        }
        Spawner {
            requests: Mutex::new(requests),
        }
    })
}

/// The argv the docker backend runs for `program args`.
pub fn wrapper_argv(
    backend: Backend,
    policy: &SecurityPolicy,
    program: &OsStr,
    args: &[OsString],
) -> Vec<OsString> {
    let cmd = match backend {
        Backend::Docker => wrappers::docker(policy, program, args),
        Backend::Full | Backend::Landlock | Backend::Noop => {
            let mut c = Command::new(program);
            c.args(args);
            c
        }
    };
    std::iter::once(cmd.get_program().to_os_string())
        .chain(cmd.get_args().map(OsStr::to_os_string))
        .collect()
}

pub(crate) fn which(program: &str) -> Option<PathBuf> {
    CHILD_PATH
        .split(':')
        .chain(["/usr/sbin", "/sbin"])
        .map(|dir| PathBuf::from(dir).join(program))
        .find(|p| p.is_file())
}
