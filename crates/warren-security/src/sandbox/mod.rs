//! The one spawn module (SBX-1..3): every child process the runtime starts for an agent (shell,
//! git, scripts) is started by [`Sandbox::spawn`], which applies the agent's sandbox backend,
//! clears the environment down to an explicit list, sets the working directory to the workspace
//! and closes stdin.
//!
//! Backends: `landlock` (kernel rules for the workspace and, per tier, the sibling roots; the only
//! backend that carries the sibling roots exactly, SBX-2), `bubblewrap` (bind mounts: workspace
//! and read-write roots writable, read-only roots read-only, write-only roots omitted because a
//! mount cannot be write-only), `firejail` and `docker` (command construction), `noop`. `auto`
//! picks the strongest available. A backend that was asked for but is unavailable refuses to
//! start the agent unless the risk profile says `fallback = "noop"` (SBX-3).

mod landlock_rules;
mod wrappers;

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, OnceLock};

use serde::Serialize;
use warren_config::schema::{SandboxFallback, SandboxKind};

use crate::policy::SecurityPolicy;

pub use landlock_rules::landlock_abi;

/// Where a child's stdout and stderr go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildIo {
    Piped,
    Null,
}

impl ChildIo {
    fn stdio(self) -> Stdio {
        match self {
            Self::Piped => Stdio::piped(),
            Self::Null => Stdio::null(),
        }
    }
}

/// The backend a sandbox actually uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    Landlock,
    Bubblewrap,
    Firejail,
    Docker,
    Noop,
}

/// Why an agent cannot get its sandbox.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(
        "sandbox '{requested}' of agent '{alias}' is unavailable on this host ({reason}); the agent is not started. \
         Install it, choose another backend, or set fallback = \"noop\" in its risk profile to run commands unconfined"
    )]
    Unavailable {
        alias: String,
        requested: String,
        reason: String,
    },
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

/// An agent's sandbox: the policy it confines to and the backend chosen for this host.
#[derive(Debug, Clone)]
pub struct Sandbox {
    policy: SecurityPolicy,
    backend: Backend,
    requested: SandboxKind,
    fallback_used: Option<String>,
    /// The Landlock spawner thread, started on first use and shared by every clone.
    landlock: Arc<OnceLock<Result<landlock_rules::Spawner, String>>>,
}

impl Sandbox {
    /// Chooses the backend for `policy` on this host (SBX-3).
    pub fn for_policy(policy: &SecurityPolicy) -> Result<Self, SandboxError> {
        let requested = policy.sandbox_kind();
        let pick = |backend| Self {
            policy: policy.clone(),
            backend,
            requested,
            fallback_used: None,
            landlock: Arc::default(),
        };
        let unavailable = |reason: String| -> Result<Self, SandboxError> {
            if policy.fallback() == SandboxFallback::Noop {
                tracing::warn!(agent = %policy.alias(), "sandbox {requested:?} unavailable ({reason}); running commands UNCONFINED (fallback = \"noop\")");
                Ok(Self {
                    fallback_used: Some(reason),
                    ..pick(Backend::Noop)
                })
            } else {
                Err(SandboxError::Unavailable {
                    alias: policy.alias().to_string(),
                    requested: format!("{requested:?}").to_lowercase(),
                    reason,
                })
            }
        };
        match requested {
            SandboxKind::Noop => Ok(pick(Backend::Noop)),
            SandboxKind::Landlock => match landlock_abi() {
                Some(_) => Ok(pick(Backend::Landlock)),
                None => unavailable("the kernel has no Landlock support".into()),
            },
            SandboxKind::Bubblewrap => match bwrap_status() {
                Ok(()) => Ok(pick(Backend::Bubblewrap)),
                Err(reason) => unavailable(reason),
            },
            SandboxKind::Firejail => match which("firejail") {
                Some(_) => Ok(pick(Backend::Firejail)),
                None => unavailable("`firejail` is not installed".into()),
            },
            SandboxKind::Docker => match which("docker") {
                Some(_) => Ok(pick(Backend::Docker)),
                None => unavailable("`docker` is not installed".into()),
            },
            SandboxKind::Auto => {
                if landlock_abi().is_some() {
                    Ok(pick(Backend::Landlock))
                } else if bwrap_status().is_ok() {
                    Ok(pick(Backend::Bubblewrap))
                } else {
                    unavailable("neither Landlock nor a working bubblewrap is available".into())
                }
            }
        }
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    pub fn policy(&self) -> &SecurityPolicy {
        &self.policy
    }

    /// The effective sandbox, for `warren security posture`.
    pub fn posture(&self) -> serde_json::Value {
        serde_json::json!({
            "requested": self.requested,
            "active": self.backend,
            "fallback_used": self.fallback_used,
            "landlock_abi": landlock_abi(),
            "carries_sibling_roots": self.backend == Backend::Landlock,
            "network": if self.policy.allow_network() { "allowed" } else { "denied" },
        })
    }

    /// Starts `program args...` confined for this agent: cwd = workspace, cleared environment
    /// plus the passthrough list, stdin closed, its own process group (pgid = its pid).
    ///
    /// This is the only way to start an agent's child: there is no unconfined `Command` to get
    /// hold of. With Landlock, the child is spawned by a thread that restricted itself with the
    /// agent's ruleset, so the child inherits the domain from its first instruction and std can
    /// use `posix_spawn` (no `fork` of the daemon, no code between fork and exec).
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
        let prepare_err = |reason: String| SandboxError::Prepare {
            alias: self.policy.alias().to_string(),
            reason,
        };
        self.policy
            .ensure_workspace()
            .map_err(|e| prepare_err(e.to_string()))?;
        let program = program.as_ref();
        let mut cmd = match self.backend {
            Backend::Landlock | Backend::Noop => {
                let mut c = Command::new(program);
                c.args(args);
                c
            }
            wrapper => {
                let argv = wrapper_argv(wrapper, &self.policy, program, args);
                let mut c = Command::new(&argv[0]);
                c.args(&argv[1..]);
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
            .stdin(Stdio::null())
            .stdout(io.stdio())
            .stderr(io.stdio());
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let spawn_err = |e: std::io::Error| {
            prepare_err(format!("cannot start {}: {e}", program.to_string_lossy()))
        };
        if self.backend != Backend::Landlock {
            return cmd.spawn().map_err(spawn_err);
        }
        let spawner = self
            .landlock
            .get_or_init(|| {
                landlock_rules::build(&self.policy).and_then(landlock_rules::Spawner::start)
            })
            .as_ref()
            .map_err(|reason| prepare_err(reason.clone()))?;
        spawner.spawn(cmd).map_err(prepare_err)?.map_err(spawn_err)
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
            if BASE_ENV.contains(&name.as_str()) {
                continue;
            }
            if let Some(value) = std::env::var_os(name) {
                env.push((name.into(), value));
            }
        }
        env
    }
}

/// The argv a wrapper backend would run for `program args` (what `Sandbox::command` builds for
/// `bubblewrap`, `firejail` and `docker`; `landlock` and `noop` run the program itself).
pub fn wrapper_argv(
    backend: Backend,
    policy: &SecurityPolicy,
    program: &OsStr,
    args: &[OsString],
) -> Vec<OsString> {
    let cmd = match backend {
        Backend::Bubblewrap => wrappers::bubblewrap(policy, program, args),
        Backend::Firejail => wrappers::firejail(policy, program, args),
        Backend::Docker => wrappers::docker(policy, program, args),
        Backend::Landlock | Backend::Noop => {
            let mut c = Command::new(program);
            c.args(args);
            c
        }
    };
    std::iter::once(cmd.get_program().to_os_string())
        .chain(cmd.get_args().map(OsStr::to_os_string))
        .collect()
}

/// Whether `bwrap` exists and can build a namespace here (probed once per process).
fn bwrap_status() -> Result<(), String> {
    static STATUS: OnceLock<Result<(), String>> = OnceLock::new();
    STATUS
        .get_or_init(|| {
            let bwrap = which("bwrap")
                .ok_or_else(|| "`bwrap` (bubblewrap) is not installed".to_string())?;
            let out = Command::new(bwrap)
                .args([
                    "--ro-bind",
                    "/",
                    "/",
                    "--unshare-all",
                    "--die-with-parent",
                    "true",
                ])
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("cannot run bwrap: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "bwrap cannot create namespaces here: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        })
        .clone()
}

fn which(program: &str) -> Option<PathBuf> {
    CHILD_PATH
        .split(':')
        .chain(["/usr/sbin", "/sbin"])
        .map(|dir| PathBuf::from(dir).join(program))
        .find(|p| p.is_file())
}
