//! Why one store's share of an agent rename/delete/restore failed (issue 34 §2, §5): a
//! [`StoreError`] names the store (`memory`, `sessions`, `acp`, `costs`, `cron`, `sop`,
//! `actions`: the archive's `stores/<name>.json`), the agent alias and the cause. The shares of
//! the stores in `warren-store` fail with its [`AgentStateError`] (their cause a
//! [`StateCause`]), carried whole ([`StoreCause::Store`]); the memory, cost and action-window
//! shares (stores outside `warren-store`) add their own causes here. Lifecycle reports print
//! the whole chain (`memory: export failed (memory store of agent 'c': ...)`).

use std::path::PathBuf;
use std::sync::Arc;

use warren_config::atomic::AtomicWriteError;
use warren_core::AgentAlias;
use warren_memory::MemoryError;
use warren_runtime::cost::CostError;
use warren_store::agent_state::{AgentStateError, StateCause};

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
    /// A store of `warren-store` (sessions, ACP, cron and control plane, SOP runs).
    #[error(transparent)]
    Store(#[from] StateCause),
    #[error("the memory store cannot be opened: {0}")]
    MemoryOpen(Arc<MemoryError>),
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// The `max_actions_per_hour` window (`data/state/actions.db`) failed.
    #[error("action window: {0}")]
    Actions(warren_runtime::actions::ActionWindowError),
    #[error(transparent)]
    Cost(#[from] CostError),
}

impl From<AgentStateError> for StoreError {
    fn from(e: AgentStateError) -> Self {
        Self {
            store: e.store,
            alias: e.alias,
            cause: Box::new(StoreCause::Store(*e.cause)),
        }
    }
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

/// Why one store's share of a delete (its export written into the archive) or of a restore
/// (its archive file read back) did not complete; the report's warning prints it.
#[derive(Debug, thiserror::Error)]
pub enum ShareError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The export could not be written durably into the archive.
    #[error("cannot write {}: {cause}", path.display())]
    Write {
        path: PathBuf,
        cause: AtomicWriteError,
    },
    /// The archive's `stores/<name>.json` could not be read.
    #[error("{}: {cause}", path.display())]
    Read {
        path: PathBuf,
        cause: std::io::Error,
    },
    /// The archive's `stores/<name>.json` is not JSON.
    #[error("{}: {cause}", path.display())]
    Parse {
        path: PathBuf,
        cause: serde_json::Error,
    },
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
    use warren_store::agent_state::StateCause;

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
                assert!(
                    matches!(*cause, StoreCause::Store(StateCause::ArchiveParse(_))),
                    "{text}"
                );
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
