//! The daemon loop's typed failures besides [`crate::DaemonError`] (issue 34 §5): why a
//! [`crate::GenerationHook`] could not start its subsystem ([`HookError`]: logged, the daemon
//! runs on without it until the next reload) and why a requested reload was not done
//! ([`ReloadError`]: told to every caller waiting on [`crate::ReloadTrigger::request`]).

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use warren_config::ConfigError;
use warren_jobs::cron::CronRunError;
use warren_jobs::sop::SopError;

/// Why a generation hook did not start its subsystem.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error("cron scheduler not started: {0}")]
    Cron(CronRunError),
    #[error("SOP engine not started: {0}")]
    Sop(SopError),
    /// A file or socket the subsystem needs (its socket, key or endpoint file).
    #[error("cannot {action} {path}: {cause}")]
    Io {
        action: &'static str,
        path: PathBuf,
        cause: io::Error,
    },
    /// The listener could not bind `addr` (`setting` says where it is configured).
    #[error("cannot listen on {addr} ({setting}): {cause}")]
    Listen {
        addr: String,
        setting: &'static str,
        cause: io::Error,
    },
    /// A typed failure of a subsystem defined above the daemon (gateway, ACP, ...): its own
    /// error, which names what is at fault.
    #[error(transparent)]
    Subsystem(Box<dyn std::error::Error + Send + Sync>),
}

impl HookError {
    /// `cause` when acting on `path`.
    pub fn io(action: &'static str, path: impl Into<PathBuf>, cause: io::Error) -> Self {
        Self::Io {
            action,
            path: path.into(),
            cause,
        }
    }

    /// A subsystem's own error.
    pub fn subsystem(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Subsystem(Box::new(e))
    }
}

/// Why a requested reload did not publish a new generation.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ReloadError {
    /// config.toml on disk does not load; the running generation stays.
    #[error(transparent)]
    Refused(Arc<ConfigError>),
    /// The daemon loop went away before answering.
    #[error("the daemon stopped before reloading")]
    Stopped,
}

impl From<ConfigError> for ReloadError {
    fn from(e: ConfigError) -> Self {
        Self::Refused(Arc::new(e))
    }
}
