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
mod error;
mod host;
mod landlock_rules;
mod launch;
mod layer;
mod owner;
mod plan;
mod posture;
mod probe_sys;
pub(crate) mod seccomp;
pub mod selftest;
mod selftest_socket;
mod selftest_stage;
mod selftest_watch;
pub mod stage;
mod wrappers;

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::process::{Child, Command, Output};
use std::sync::{Arc, OnceLock};

use warren_config::schema::{SandboxFallback, SandboxKind};

use crate::policy::SecurityPolicy;

pub use egress::{EgressProxy, ExitWatch, PROXY_PORT};
pub use error::{PrepareError, SandboxError};
use host::{full_status, spawner, stage_exe, stage_status};
pub(crate) use host::{is_root, which};
pub use landlock_rules::{landlock_abi, system_readable};
pub use layer::{Backend, ChildIo, Layer};
pub use owner::HandOverError;
use plan::Base;

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
    spec: Arc<OnceLock<Result<Arc<Base>, Arc<PrepareError>>>>,
    /// Whether the roots were handed to the sandbox user (daemon as root).
    handed_over: Arc<OnceLock<Result<(), Arc<PrepareError>>>>,
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
        let unavailable = |reason: Arc<PrepareError>| -> Result<Self, SandboxError> {
            if policy.fallback() == SandboxFallback::Noop {
                tracing::warn!(agent = %policy.alias(), "sandbox {requested:?} unavailable ({reason}); running commands UNCONFINED (fallback = \"noop\", unrestricted = true)");
                Ok(Self {
                    fallback_used: Some(reason.to_string()),
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
                None => unavailable(Arc::new(PrepareError::NoDocker)),
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

    fn on(&self, layer: Layer) -> bool {
        !self.disabled.contains(&layer)
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    pub fn policy(&self) -> &SecurityPolicy {
        &self.policy
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
            .map_err(|e| self.prepare_err(PrepareError::WaitProbe(e)))?;
        Ok(out.stdout)
    }

    /// Starts a selftest probe inside this sandbox and returns the running child (stdout piped).
    pub(crate) fn spawn_probe_child(
        &self,
        probe: &selftest::ProbeSpec,
    ) -> Result<Child, SandboxError> {
        if matches!(self.backend, Backend::Noop | Backend::Docker) {
            return Err(self.prepare_err(PrepareError::ProbeLevel));
        }
        let exe = stage_exe().map_err(|e| self.shared_err(e))?;
        let program = match self.backend {
            Backend::Full => OsStr::new(stage::STAGE_PATH),
            _ => exe.as_os_str(),
        };
        let json = serde_json::to_string(probe)
            .map_err(|e| self.prepare_err(PrepareError::ProbeSpec(e)))?;
        let env = [(OsString::from(stage::STAGE_ENV), OsString::from(json))];
        self.spawn_inner(program, &[], ChildIo::Piped, &env, Some(exe))
    }

    fn prepare_err(&self, cause: impl Into<PrepareError>) -> SandboxError {
        self.shared_err(Arc::new(cause.into()))
    }

    /// [`Self::prepare_err`] of a cause probed or built once and shared.
    fn shared_err(&self, cause: Arc<PrepareError>) -> SandboxError {
        SandboxError::Prepare {
            alias: self.policy.alias().to_string(),
            cause,
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
            .map_err(|e| self.prepare_err(e))?;
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
        let spawn_err = |source: std::io::Error| {
            self.prepare_err(PrepareError::Start {
                program: program.to_string_lossy().into_owned(),
                source,
            })
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
                        let pair = egress::channel()
                            .map_err(|e| self.prepare_err(PrepareError::EgressChannel(e)))?;
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
                            return Err(self.prepare_err(PrepareError::EgressProxy(e)));
                        }
                    }
                }
                Ok(child)
            }
        }
    }

    /// Runs `program args...` to completion and collects its output (tests, probes).
    pub fn output(
        &self,
        program: impl AsRef<OsStr>,
        args: &[OsString],
    ) -> Result<Output, SandboxError> {
        self.spawn(program, args, ChildIo::Piped)?
            .wait_with_output()
            .map_err(|e| self.prepare_err(PrepareError::WaitChild(e)))
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
