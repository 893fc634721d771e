//! Why one store's share of an agent rename/delete/restore failed (issue 34 §2, §5): a
//! [`StoreError`] names the store (`memory`, `sessions`, `acp`, `costs`, `cron`, `sop`,
//! `actions`: the archive's `stores/<name>.json`), the agent alias and the cause; the cause is a
//! [`StoreCause`] carrying the store's own typed error. Lifecycle reports print the whole chain
//! (`memory: export failed (memory store of agent 'c': ...)`).

use std::sync::Arc;

use warren_core::{AgentAlias, SessionKeyError};
use warren_memory::MemoryError;
use warren_runtime::cost::CostError;
use warren_store::acp::AcpError;
use warren_store::control_plane::ControlPlaneError;
use warren_store::cron::CronError;
use warren_store::sessions::{OpenError, SessionError};
use warren_store::sop::SopStoreError;

/// A failed share of a lifecycle operation: which store, for which agent, and why.
#[derive(Debug, thiserror::Error)]
#[error("{store} store of agent '{alias}': {cause}")]
pub struct StoreError {
    /// The store's stable name ([`super::stores::AgentStateStore::name`]).
    pub store: &'static str,
    /// The agent the operation was for (a rename's old alias, a restore's target alias).
    pub alias: AgentAlias,
    pub cause: Box<StoreCause>,
}

/// What went wrong inside one store.
#[derive(Debug, thiserror::Error)]
pub enum StoreCause {
    /// Chat sessions run without persistence this generation (nothing durable to move).
    #[error("chat session persistence is off ({reason})")]
    ChatNotDurable { reason: String },
    /// The daemon's generation could not open its chat sessions.
    #[error("in the daemon: {0}")]
    DaemonChat(warren_runtime::sessions::ChatUnavailable),
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
    #[error("the memory store cannot be opened: {0}")]
    MemoryOpen(Arc<MemoryError>),
    #[error(transparent)]
    Memory(#[from] MemoryError),
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
    SopDefinitions(warren_store::sop_defs::SopDefError),
    /// The `max_actions_per_hour` window (`data/state/actions.db`) failed.
    #[error("action window: {0}")]
    Actions(warren_runtime::actions::ActionWindowError),
    #[error(transparent)]
    Cost(#[from] CostError),
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

impl StoreCause {
    /// This cause, as `store`'s failure for `alias`.
    pub fn at(self, store: &'static str, alias: &AgentAlias) -> StoreError {
        StoreError {
            store,
            alias: alias.clone(),
            cause: Box::new(self),
        }
    }
}

/// Runs one store method's body and names the store and alias on its failure.
pub(crate) fn scoped<T>(
    store: &'static str,
    alias: &AgentAlias,
    body: impl FnOnce() -> Result<T, StoreCause>,
) -> Result<T, StoreError> {
    body().map_err(|cause| cause.at(store, alias))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use warren_config::schema::MemoryBackendKind;
    use warren_config::{Config, InstallRoot};
    use warren_core::AgentAlias;

    use super::{StoreCause, StoreError};
    use crate::lifecycle::registered;
    use crate::lifecycle::stores::{OwnStores, StoreContext, StoreSource, WorkspaceMove};

    /// Issue 34 §2/§5: a store's failure is a typed error naming the store, the alias and the
    /// cause (here: every store's share of a restore whose archive does not parse).
    #[test]
    fn a_failed_share_names_its_store_alias_and_cause_issue34() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let root = InstallRoot::at(dir.path());
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let ctx = StoreContext {
            root: root.clone(),
            config: Arc::new(Config::default()),
            memory_backend: MemoryBackendKind::None,
            handle: rt.handle().clone(),
            source: StoreSource::Own(Arc::new(OwnStores::new(
                &root,
                Arc::new(warren_runtime::stores::Stores::new(
                    &root,
                    &Config::default(),
                )),
            ))),
        };
        let (bee, b) = (
            AgentAlias::new("bee").unwrap_or_else(|e| panic!("{e}")),
            AgentAlias::new("b").unwrap_or_else(|e| panic!("{e}")),
        );
        let ws = WorkspaceMove {
            from: root.agent_workspace(&b),
            to: root.agent_workspace(&bee),
        };
        let mut failed = Vec::new();
        for store in registered(&ctx) {
            if let Err(e) = store.restore(&bee, &b, serde_json::json!("not an archive"), &ws) {
                let text = e.to_string();
                let StoreError {
                    store: name,
                    alias,
                    cause,
                } = e;
                assert!(matches!(*cause, StoreCause::ArchiveParse(_)), "{text}");
                assert_eq!((name, &alias), (store.name(), &bee));
                assert!(
                    text.starts_with(&format!(
                        "{name} store of agent 'bee': archive does not parse"
                    )),
                    "{text}"
                );
                failed.push(name);
            }
        }
        // Costs and SOP runs restore nothing (their history stays where it is).
        assert_eq!(failed, ["memory", "sessions", "acp", "cron", "actions"]);
    }
}
