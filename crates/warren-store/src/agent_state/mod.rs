//! One store's share of an agent rename/delete/restore (LIFE-3, LIFE-4, BEYOND-1; issue 34 §2):
//! the per-agent state adapters of the stores of this crate: [`sessions`], [`acp`], [`cron`]
//! (with the control plane) and [`sop`] (runs and definition files). Each works on its store's
//! own per-agent methods (`rename_agent`, `export_agent`, `delete_agent`, `import_agent`); the
//! stores do not know their adapters, so this module sits above them (no import circle between
//! the crate's top-level modules, `crates/warren-security/tests/all/layering.rs`).
//!
//! - [`AgentState`]: count residue, export, purge, rename and restore the rows of one alias;
//!   every method idempotent (rename/purge of an alias with nothing left is a no-op, restore
//!   skips what is already there).
//! - [`StoreHandles`]: where an adapter gets its store from. The caller (the lifecycle in
//!   `warren-admin`) decides: inside a daemon the running generation's handles, else the ones its
//!   process opened once. An adapter never opens a store itself.
//! - [`AgentStateError`]: a failed share, naming the store, the alias and the typed cause
//!   ([`StateCause`]).

use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use warren_config::InstallRoot;
use warren_core::{AgentAlias, SessionKeyError};

use crate::acp::{AcpError, AcpSessionStore};
use crate::control_plane::{ControlPlane, ControlPlaneError};
use crate::cron::{CronError, CronStore};
use crate::sessions::{OpenError, SessionBackend, SessionError};
use crate::sop::{SopStore, SopStoreError};

pub mod acp;
pub mod cron;
pub mod sessions;
pub mod sop;

/// Where the workspace of the agent was and is (ACP `cwd` rewrites follow it).
#[derive(Debug, Clone)]
pub struct WorkspaceMove {
    pub from: PathBuf,
    pub to: PathBuf,
}

impl WorkspaceMove {
    /// The `(from, to)` prefix rewrite, when the workspace moved.
    pub fn rewrite(&self) -> Option<(String, String)> {
        (self.from != self.to).then(|| {
            (
                self.from.display().to_string(),
                self.to.display().to_string(),
            )
        })
    }
}

/// One store's share of an agent's state.
pub trait AgentState: Send + Sync {
    /// Stable name: the archive file is `stores/<name>.json`.
    fn name(&self) -> &'static str;
    /// How many records `alias` still owns here (residue).
    fn count(&self, alias: &AgentAlias) -> Result<u64, AgentStateError>;
    /// Every record of `alias`, as JSON, with the count.
    fn export(&self, alias: &AgentAlias) -> Result<(u64, Value), AgentStateError>;
    /// Deletes every record of `alias`; returns how many.
    fn purge(&self, alias: &AgentAlias) -> Result<u64, AgentStateError>;
    /// Moves `from`'s records to `to`; returns how many.
    fn rename(
        &self,
        from: &AgentAlias,
        to: &AgentAlias,
        ws: &WorkspaceMove,
    ) -> Result<u64, AgentStateError>;
    /// Puts an export (made for `original`) back under `alias`; returns how many records.
    fn restore(
        &self,
        alias: &AgentAlias,
        original: &AgentAlias,
        data: Value,
        ws: &WorkspaceMove,
    ) -> Result<u64, AgentStateError>;
}

/// The store handles an adapter works on, lent by the caller (never opened by the adapter).
pub trait StoreHandles: Send + Sync {
    /// The install root (SOP definition files live under it).
    fn root(&self) -> &InstallRoot;
    /// The durable chat-session backend.
    fn chat(&self) -> Result<Arc<dyn SessionBackend>, StateCause>;
    /// Runs `f` on the ACP session store.
    fn with_acp<T>(
        &self,
        f: impl FnOnce(&AcpSessionStore) -> Result<T, AcpError>,
    ) -> Result<T, StateCause>;
    /// The cron store. `None` when there is no store and `create` is false.
    fn cron(&self, create: bool) -> Result<Option<Arc<CronStore>>, StateCause>;
    /// The control plane; `None` when there is none yet.
    fn control_plane(&self) -> Result<Option<Arc<ControlPlane>>, StateCause>;
    /// The SOP run store; `None` when there is none yet.
    fn sop_runs(&self) -> Result<Option<Arc<SopStore>>, StateCause>;
}

/// A failed share of a lifecycle operation: which store, for which agent, and why.
#[derive(Debug, thiserror::Error)]
#[error("{store} store of agent '{alias}': {cause}")]
pub struct AgentStateError {
    /// The store's stable name ([`AgentState::name`]).
    pub store: &'static str,
    /// The agent the operation was for (a rename's old alias, a restore's target alias).
    pub alias: AgentAlias,
    pub cause: Box<StateCause>,
}

/// What went wrong inside one store.
#[derive(Debug, thiserror::Error)]
pub enum StateCause {
    /// Chat sessions run without persistence this generation (nothing durable to move).
    #[error("chat session persistence is off ({reason})")]
    ChatNotDurable { reason: String },
    /// The daemon's generation could not open its chat sessions (its reason).
    #[error("the daemon's chat sessions are unavailable: {0}")]
    DaemonChat(String),
    /// The daemon's generation holds no ACP session store.
    #[error("the daemon's ACP session store is not open")]
    DaemonAcpClosed,
    #[error("chat sessions cannot be opened: {0}")]
    ChatOpen(Arc<OpenError>),
    #[error(transparent)]
    Chat(#[from] SessionError),
    #[error("archived session key '{key}' is invalid: {cause}")]
    SessionKey { key: String, cause: SessionKeyError },
    /// A restore met a session of the same key owned by someone else.
    #[error("session '{key}' exists and belongs to {}; not overwritten", owner_text(.owner))]
    SessionTaken {
        key: String,
        owner: Option<AgentAlias>,
    },
    #[error("the ACP session store cannot be opened: {0}")]
    AcpOpen(Arc<AcpError>),
    #[error(transparent)]
    Acp(#[from] AcpError),
    #[error(transparent)]
    Cron(#[from] CronError),
    #[error("the cron store was not opened")]
    CronNotOpened,
    #[error(transparent)]
    ControlPlane(#[from] ControlPlaneError),
    #[error(transparent)]
    Sop(#[from] SopStoreError),
    /// Rewriting the SOP definition files that name the agent failed (the cause names the file).
    #[error("SOP definitions: {0}")]
    SopDefinitions(crate::sop_defs::SopDefError),
    #[error("cannot encode the export: {0}")]
    Encode(serde_json::Error),
    #[error("archive does not parse: {0}")]
    ArchiveParse(serde_json::Error),
}

fn owner_text(owner: &Option<AgentAlias>) -> String {
    owner
        .as_ref()
        .map_or_else(|| "no agent".to_string(), |a| format!("'{a}'"))
}

impl StateCause {
    /// This cause, as `store`'s failure for `alias`.
    pub fn at(self, store: &'static str, alias: &AgentAlias) -> AgentStateError {
        AgentStateError {
            store,
            alias: alias.clone(),
            cause: Box::new(self),
        }
    }
}

/// Runs one store method's body and names the store and alias on its failure.
pub fn scoped<T>(
    store: &'static str,
    alias: &AgentAlias,
    body: impl FnOnce() -> Result<T, StateCause>,
) -> Result<T, AgentStateError> {
    body().map_err(|cause| cause.at(store, alias))
}

/// `v` as the JSON of an archive's `stores/<name>.json`.
pub fn json<T: Serialize>(v: &T) -> Result<Value, StateCause> {
    serde_json::to_value(v).map_err(StateCause::Encode)
}

/// An archive's `stores/<name>.json` back as `T`.
pub fn from_json<T: DeserializeOwned>(v: Value) -> Result<T, StateCause> {
    serde_json::from_value(v).map_err(StateCause::ArchiveParse)
}

#[cfg(test)]
mod tests;
