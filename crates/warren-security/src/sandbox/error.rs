//! Why an agent cannot get its sandbox ([`SandboxError`]), and the cause behind it
//! ([`PrepareError`]): what this host lacks for a level, or the step of preparing or starting a
//! confined child that failed, naming the path or program at fault.

use std::path::PathBuf;
use std::sync::Arc;

use super::landlock_rules::LandlockError;
use super::owner::HandOverError;
use super::seccomp::SeccompError;

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
        reason: Arc<PrepareError>,
    },
    #[error(
        "agent '{alias}': sandbox = \"noop\" (or fallback = \"noop\") runs commands unconfined and needs unrestricted = true in its risk profile"
    )]
    NoopNotAllowed { alias: String },
    #[error("cannot prepare the sandbox of agent '{alias}': {cause}")]
    Prepare {
        alias: String,
        /// Shared: what is probed or built once per host or sandbox is reported to every
        /// spawn it fails.
        #[source]
        cause: Arc<PrepareError>,
    },
}

/// What this host lacks for a level, or which step of preparing or starting a confined child
/// failed.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error("the kernel has no Landlock support")]
    NoLandlock,
    #[error(transparent)]
    Seccomp(#[from] SeccompError),
    #[error(transparent)]
    Landlock(#[from] LandlockError),
    #[error("cannot create the sandbox's namespaces here: {0}")]
    NamespacesSpawn(std::io::Error),
    #[error("cannot create the sandbox's namespaces here (user namespaces disabled?): {stderr}")]
    Namespaces { stderr: String },
    #[error("`docker` is not installed")]
    NoDocker,
    #[error("the sandbox stage is not linked into this binary")]
    StageNotLinked,
    #[error("cannot find this executable: {0}")]
    CurrentExe(std::io::Error),
    #[error("the sandbox spawner is poisoned")]
    SpawnerPoisoned,
    #[error("the sandbox spawner thread stopped")]
    SpawnerStopped,
    #[error(transparent)]
    Workspace(#[from] crate::policy::PolicyError),
    #[error("cannot create granted root {}: {source}", root.display())]
    GrantedRoot {
        root: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    HandOver(#[from] HandOverError),
    #[error("cannot start {program}: {source}")]
    Start {
        program: String,
        source: std::io::Error,
    },
    #[error("cannot open the egress proxy's channel: {0}")]
    EgressChannel(std::io::Error),
    #[error("the egress proxy could not start: {0}")]
    EgressProxy(std::io::Error),
    #[error("waiting for the child failed: {0}")]
    WaitChild(std::io::Error),
    #[error("probes run only under the full and landlock levels")]
    ProbeLevel,
    #[error("cannot encode the probe: {0}")]
    ProbeSpec(serde_json::Error),
    #[error("waiting for the probe failed: {0}")]
    WaitProbe(std::io::Error),
}
