//! Why a lifecycle operation was refused or failed before it changed anything (LIFE-2..5).
//! Each variant names the agent, archive or file at fault and the way out; the gateway maps
//! the variants to HTTP status codes (`warren_gateway::lifecycle_api`), the CLI prints them.

use std::path::PathBuf;

use warren_config::ConfigError;
use warren_config::atomic::AtomicWriteError;
use warren_core::AliasError;

/// A refused or failed lifecycle operation.
#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    #[error("agent '{alias}' is not configured")]
    AgentNotFound { alias: String },
    #[error("the alias 'default' is reserved: it can never be created, renamed or deleted")]
    ReservedAlias,
    #[error(transparent)]
    InvalidAlias(AliasError),
    #[error("the new alias must differ from the old one")]
    SameAlias,
    #[error("agent '{alias}' already exists; choose another alias")]
    AgentExists { alias: String },
    #[error("agent '{alias}' exists; restore with --as NEW_ALIAS")]
    RestoreTargetExists { alias: String },
    #[error("the workspace {path} exists and is not empty; move its contents away first")]
    WorkspaceNotEmpty { path: PathBuf },
    #[error("cannot delete agent '{alias}': {}", reasons.join("; "))]
    DeleteRefused { alias: String, reasons: Vec<String> },
    #[error("post-condition failed: references to '{alias}' remain ({}); nothing was saved", left.join(", "))]
    ReferencesRemain { alias: String, left: Vec<String> },
    #[error("archive {path} not found ({cause})")]
    ArchiveNotFound {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{archive} was already restored")]
    AlreadyRestored { archive: PathBuf },
    #[error("{path}: manifest unreadable ({reason}); the archive cannot be verified")]
    ManifestUnreadable { path: PathBuf, reason: Unreadable },
    #[error("{path}: schema_version {found} is not {expected}")]
    SchemaVersion {
        path: PathBuf,
        found: u32,
        expected: u32,
    },
    #[error("{archive} does not match its manifest: {}", diffs.join("; "))]
    ArchiveMismatch {
        archive: PathBuf,
        diffs: Vec<String>,
    },
    #[error("{archive} is incomplete (its delete did not converge): {}", warnings.join("; "))]
    ArchiveIncomplete {
        archive: PathBuf,
        warnings: Vec<String>,
    },
    /// A journaled operation whose config change was never saved cannot be redone now.
    #[error("{0}")]
    CannotRedo(String),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot write the lifecycle journal {path}: {cause}")]
    Journal {
        path: PathBuf,
        cause: Box<AtomicWriteError>,
    },
    #[error("cannot clear the lifecycle journal {path}: {cause}")]
    JournalClear {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{path}: {cause}")]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("lifecycle worker failed: {0}")]
    Worker(String),
}

/// What kind of failure an error is, for the front ends (status codes, exit codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The agent or archive does not exist.
    NotFound,
    /// The request itself is wrong (bad alias, same alias, name taken, bad config edit).
    Invalid,
    /// The request is valid but refused in the current state (references, live sessions,
    /// non-empty workspace, damaged or restored archive).
    Refused,
    /// The config file could not be read, locked or written.
    Config,
    /// A file or worker failed.
    Io,
}

impl LifecycleError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::AgentNotFound { .. } | Self::ArchiveNotFound { .. } => ErrorKind::NotFound,
            Self::ReservedAlias
            | Self::InvalidAlias(_)
            | Self::SameAlias
            | Self::AgentExists { .. }
            | Self::Config(ConfigError::Invalid { .. }) => ErrorKind::Invalid,
            Self::RestoreTargetExists { .. }
            | Self::WorkspaceNotEmpty { .. }
            | Self::DeleteRefused { .. }
            | Self::ReferencesRemain { .. }
            | Self::AlreadyRestored { .. }
            | Self::ManifestUnreadable { .. }
            | Self::SchemaVersion { .. }
            | Self::ArchiveMismatch { .. }
            | Self::ArchiveIncomplete { .. }
            | Self::CannotRedo(_) => ErrorKind::Refused,
            Self::Config(_) => ErrorKind::Config,
            Self::Journal { .. }
            | Self::JournalClear { .. }
            | Self::Io { .. }
            | Self::Worker(_) => ErrorKind::Io,
        }
    }
}

/// Why a JSON file of the lifecycle (a journal record, an archive's manifest) could not be
/// read; the path is named by the error that carries it.
#[derive(Debug, thiserror::Error)]
pub enum Unreadable {
    #[error("{0}")]
    Read(#[from] std::io::Error),
    #[error("{0}")]
    Parse(#[from] serde_json::Error),
}

/// Reads and parses the JSON file at `path`.
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(
    path: &std::path::Path,
) -> Result<T, Unreadable> {
    Ok(serde_json::from_slice(&std::fs::read(path)?)?)
}

/// Parses an alias the user typed, at the edge (CLI command, gateway body): the lifecycle
/// operations take the parsed [`warren_core::AgentAlias`]. `default` is
/// [`LifecycleError::ReservedAlias`], anything else invalid [`LifecycleError::InvalidAlias`].
pub fn parse_alias(s: &str) -> Result<warren_core::AgentAlias, LifecycleError> {
    warren_core::AgentAlias::new(s).map_err(|e| match e {
        AliasError::Reserved => LifecycleError::ReservedAlias,
        other => LifecycleError::InvalidAlias(other),
    })
}
