//! The one factory for chat/code session backends (SESS-1, MIG-1, MIG-6, MIG-7 [decision]).
//!
//! Every entry point (daemon, `warren agent`, `warren sessions`, tools) opens sessions through
//! [`open_chat_sessions`], so they all share one backend choice, one migration and one answer
//! to "what if the backend cannot be built": the process-level policy in config,
//! `[channels] session_store_on_error`. `stop` (the default) returns the error and the caller
//! stops its session subsystem; `ephemeral` logs a loud error and hands out an in-memory
//! backend flagged as disabled. (The reference implementation let each subsystem choose, and
//! some ignored the error silently.)
//!
//! A legacy file the import refused on its own account (no valid message, a symlink, a name
//! that maps to no session key; [`MigrateError::leaves_store_usable`]) stays where it is and is
//! reported — logged as a warning naming the file and what to do, and returned by
//! [`open_chat_sessions_reporting`] — while the rest of the store opens (issue 15).

use std::sync::Arc;

use warren_config::InstallRoot;
use warren_config::schema::{ChannelsConfig, SessionBackendKind, SessionStoreOnError};

use super::migrate::{self, MigrateError, MigrationReport};
use super::{JsonlBackend, MemoryBackend, SessionBackend, SessionError, SqliteBackend};

/// Why the configured backend could not be built.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error(transparent)]
    Migrate(#[from] MigrateError),
    #[error("importing legacy JSONL sessions failed for {} file(s): {}", .errors.len(), first_line(.errors))]
    Import { errors: Vec<MigrateError> },
}

fn first_line(errors: &[MigrateError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// The opened chat sessions.
#[derive(Debug, Clone)]
pub enum ChatSessions {
    Durable(Arc<dyn SessionBackend>),
    /// Persistence is off (`session_store_on_error = "ephemeral"`); `reason` says why.
    Disabled {
        backend: Arc<dyn SessionBackend>,
        reason: String,
    },
}

impl ChatSessions {
    pub fn backend(&self) -> &Arc<dyn SessionBackend> {
        match self {
            ChatSessions::Durable(b) | ChatSessions::Disabled { backend: b, .. } => b,
        }
    }

    pub fn is_durable(&self) -> bool {
        matches!(self, ChatSessions::Durable(_))
    }
}

/// Opens the backend `[channels]` selects; for SQLite, imports legacy JSONL first (MIG-1).
/// Construction errors go through `[channels] session_store_on_error`. Legacy files left out
/// of the import are logged as warnings.
pub fn open_chat_sessions(
    root: &InstallRoot,
    channels: &ChannelsConfig,
) -> Result<ChatSessions, OpenError> {
    let (sessions, skipped) = open_chat_sessions_reporting(root, channels)?;
    for e in &skipped {
        tracing::warn!("{e}");
    }
    Ok(sessions)
}

/// [`open_chat_sessions`] that returns the legacy files left out of the import instead of
/// logging them, for a caller that shows them itself (the CLI prints them on stderr).
pub fn open_chat_sessions_reporting(
    root: &InstallRoot,
    channels: &ChannelsConfig,
) -> Result<(ChatSessions, Vec<MigrateError>), OpenError> {
    match open_durable(root, channels) {
        Ok((backend, skipped)) => Ok((ChatSessions::Durable(backend), skipped)),
        Err(e) => Ok((on_error(e, channels)?, Vec::new())),
    }
}

/// `[channels] session_store_on_error` applied to a backend that could not be built.
fn on_error(e: OpenError, channels: &ChannelsConfig) -> Result<ChatSessions, OpenError> {
    match channels.session_store_on_error {
        SessionStoreOnError::Stop => Err(e),
        SessionStoreOnError::Ephemeral => {
            tracing::error!(
                "SESSION PERSISTENCE IS OFF ([channels] session_store_on_error = \"ephemeral\"): \
                 {e}. Conversations will be lost when this process stops; fix the problem and \
                 restart"
            );
            Ok(ChatSessions::Disabled {
                backend: Arc::new(MemoryBackend::new()),
                reason: e.to_string(),
            })
        }
    }
}

/// [`open_chat_sessions_reporting`] for a command that only reads: when the SQLite store
/// cannot be opened for writing because the disk is full, it is opened read-only instead
/// ([`SqliteBackend::open_read_only`]) and the third value says so (issue 15 §8). A store left
/// read-only by a failed migration (the one mechanism of every store,
/// `warren_config::sqlite::open_migrated`; issue 22 §4) is said so too.
pub fn open_chat_sessions_for_reading(
    root: &InstallRoot,
    channels: &ChannelsConfig,
) -> Result<(ChatSessions, Vec<MigrateError>, Option<String>), OpenError> {
    match open_durable(root, channels) {
        Err(e)
            if matches!(channels.session_backend, SessionBackendKind::Sqlite)
                && root.sessions_db().is_file()
                && warren_config::sqlite::disk_full(&root.sessions_dir()) =>
        {
            let notice = format!(
                "disk full at {}: sessions opened read-only (nothing imported or written)",
                root.sessions_dir().display()
            );
            let backend = SqliteBackend::open_read_only(root).map_err(|_| e)?;
            Ok((
                ChatSessions::Durable(Arc::new(backend)),
                Vec::new(),
                Some(notice),
            ))
        }
        Ok((backend, skipped)) => {
            let db = root.sessions_db();
            let notice = warren_config::sqlite::read_only_stores()
                .into_iter()
                .find(|(path, _)| *path == db)
                .map(|(_, why)| format!("sessions opened {why}"));
            Ok((ChatSessions::Durable(backend), skipped, notice))
        }
        Err(e) => Ok((on_error(e, channels)?, Vec::new(), None)),
    }
}

/// The backend and the legacy files left out of its import.
type Opened = (Arc<dyn SessionBackend>, Vec<MigrateError>);

fn open_durable(root: &InstallRoot, channels: &ChannelsConfig) -> Result<Opened, OpenError> {
    match channels.session_backend {
        SessionBackendKind::Jsonl => Ok((
            Arc::new(JsonlBackend::open(root, channels.session_durability)?),
            Vec::new(),
        )),
        SessionBackendKind::Sqlite => {
            let backend = SqliteBackend::open(root, channels.session_durability)?;
            let report = migrate::import(&backend, &mut |_| {})?;
            log_report(&report);
            let (skipped, errors): (Vec<_>, Vec<_>) = report
                .errors
                .into_iter()
                .partition(MigrateError::leaves_store_usable);
            if !errors.is_empty() {
                return Err(OpenError::Import { errors });
            }
            Ok((Arc::new(backend), skipped))
        }
    }
}

fn log_report(report: &MigrationReport) {
    let changed = report.changed();
    if changed > 0 {
        tracing::info!("imported {changed} legacy JSONL session file(s) into sessions.db");
    }
    for f in &report.files {
        if !f.issues.is_empty() {
            tracing::warn!(
                "{}: {} line(s) skipped or trimmed during import",
                f.source_name,
                f.issues.len()
            );
        }
    }
}
