//! The typed control seam of the lifecycle verbs (issue 34 §3; codex-rs's `Op`): `warren agents
//! rename|delete|restore|resume` build one [`AdminOp`], and one executor runs it,
//! [`Lifecycle::execute`]. Without a daemon the CLI runs it here ([`LocalControl`]: the
//! install-root lock, then the lifecycle on this process's stores); with one, the CLI sends the
//! same value as JSON to `POST /admin/agents/lifecycle`, whose handler deserializes this very
//! enum and executes it on the daemon's config owner and running generation. No verb is spelled
//! twice: the wire format is this enum's serde form.
//!
//! Still on their own paths (issue 34 §3, open): `agents add`, `reload`, cron/SOP control and
//! tokens.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use warren_config::{ConfigStore, InstallRoot};
use warren_core::AgentAlias;

use crate::lifecycle::{Lifecycle, LifecycleError};

/// One lifecycle verb, as the CLI asks for it and the daemon's admin route receives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum AdminOp {
    Rename {
        alias: AgentAlias,
        to: AgentAlias,
    },
    Delete {
        alias: AgentAlias,
    },
    DeletePlan {
        alias: AgentAlias,
    },
    Restore {
        archive: String,
        #[serde(default, rename = "as", skip_serializing_if = "Option::is_none")]
        as_alias: Option<AgentAlias>,
    },
    Resume,
}

impl AdminOp {
    /// The verb's name (`rename`, `delete_plan`, ...), as on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            AdminOp::Rename { .. } => "rename",
            AdminOp::Delete { .. } => "delete",
            AdminOp::DeletePlan { .. } => "delete_plan",
            AdminOp::Restore { .. } => "restore",
            AdminOp::Resume => "resume",
        }
    }

    /// Whether the verb changes the config (the daemon reloads after it).
    pub fn mutates(&self) -> bool {
        matches!(
            self,
            AdminOp::Rename { .. } | AdminOp::Delete { .. } | AdminOp::Restore { .. }
        )
    }
}

impl Lifecycle {
    /// THE executor of an [`AdminOp`]: its report (a rename/delete/restore report, a delete
    /// plan, or the list of converged journals) as JSON.
    pub async fn execute(&self, op: &AdminOp) -> Result<Value, LifecycleError> {
        let json = |v: Result<Value, serde_json::Error>| {
            v.map_err(|e| LifecycleError::Worker(format!("cannot encode the report: {e}")))
        };
        match op {
            AdminOp::Rename { alias, to } => {
                json(serde_json::to_value(self.rename(alias, to).await?))
            }
            AdminOp::Delete { alias } => json(serde_json::to_value(self.delete(alias).await?)),
            AdminOp::DeletePlan { alias } => {
                json(serde_json::to_value(self.delete_plan(alias).await?))
            }
            AdminOp::Restore { archive, as_alias } => json(serde_json::to_value(
                self.restore(archive, as_alias.as_ref()).await?,
            )),
            AdminOp::Resume => json(serde_json::to_value(self.converge_pending().await)),
        }
    }
}

/// Runs admin verbs where they must run: implemented here for a process that owns the install
/// root ([`LocalControl`]) and by the daemon client (`warren_gateway::client::DaemonControl`).
pub trait Control {
    type Error;

    /// Runs `op` and returns its report as JSON.
    fn run(&self, op: &AdminOp) -> Result<Value, Self::Error>;
}

/// Admin verbs run by this process, with no daemon: it holds the install-root lock for the
/// verb (no daemon starts meanwhile; LIFE-1, LAYOUT-4) and runs the lifecycle on its own
/// stores.
#[derive(Debug, Clone)]
pub struct LocalControl {
    root: InstallRoot,
}

/// Why a local admin verb did not run or failed.
#[derive(Debug, thiserror::Error)]
pub enum LocalControlError {
    #[error(transparent)]
    Lock(#[from] warren_runtime::LockError),
    #[error(transparent)]
    Config(#[from] warren_config::ConfigError),
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error(transparent)]
    Lifecycle(#[from] LifecycleError),
}

impl LocalControl {
    pub fn new(root: &InstallRoot) -> Self {
        Self { root: root.clone() }
    }
}

impl Control for LocalControl {
    type Error = LocalControlError;

    fn run(&self, op: &AdminOp) -> Result<Value, LocalControlError> {
        let _lock = warren_runtime::DaemonLock::acquire(&self.root)?;
        let store = ConfigStore::load(self.root.clone())?
            .with_check(std::sync::Arc::new(warren_memory::BackendLock));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(LocalControlError::Runtime)?;
        let lifecycle = Lifecycle::new(store);
        Ok(runtime.block_on(lifecycle.execute(op))?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alias(s: &str) -> AgentAlias {
        AgentAlias::new(s).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The wire form is the one the admin route has always read (`op` tag, `as` for the new
    /// alias of a restore), and it round-trips.
    #[test]
    fn every_verb_round_trips_in_the_admin_routes_wire_form_issue34() {
        let ops = [
            (
                AdminOp::Rename {
                    alias: alias("a"),
                    to: alias("b"),
                },
                r#"{"op":"rename","alias":"a","to":"b"}"#,
            ),
            (
                AdminOp::Delete { alias: alias("a") },
                r#"{"op":"delete","alias":"a"}"#,
            ),
            (
                AdminOp::DeletePlan { alias: alias("a") },
                r#"{"op":"delete_plan","alias":"a"}"#,
            ),
            (
                AdminOp::Restore {
                    archive: "a-20261201".into(),
                    as_alias: Some(alias("c")),
                },
                r#"{"op":"restore","archive":"a-20261201","as":"c"}"#,
            ),
            (
                AdminOp::Restore {
                    archive: "a-20261201".into(),
                    as_alias: None,
                },
                r#"{"op":"restore","archive":"a-20261201"}"#,
            ),
            (AdminOp::Resume, r#"{"op":"resume"}"#),
        ];
        for (op, wire) in ops {
            assert_eq!(serde_json::to_string(&op).unwrap_or_default(), wire);
            let back: AdminOp = serde_json::from_str(wire).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(back, op);
            assert_eq!(op.name(), wire.split('"').nth(3).unwrap_or_default());
        }
        assert!(serde_json::from_str::<AdminOp>(r#"{"op":"rename","alias":"a"}"#).is_err());
        assert!(
            serde_json::from_str::<AdminOp>(r#"{"op":"delete","alias":"a","extra":1}"#).is_err(),
            "unknown fields are refused"
        );
    }
}
