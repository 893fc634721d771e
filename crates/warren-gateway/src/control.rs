//! THE typed control seam (issue 34 §3; codex-rs's `Op`): every admin verb — agents
//! add/rename/delete/restore/resume, reload, cron and SOP control, pairing and token revokes —
//! is one [`AdminOp`], run by one [`Control`] trait. The CLI builds the verb once and asks
//! `warren_runtime::probe` once where it runs:
//!
//! - a daemon runs: `warren_gateway::client::DaemonControl` sends the verb's serde form to
//!   `POST /admin/control`, whose handler deserializes this very enum and executes it on the
//!   daemon's config owner, running generation, scheduler and SOP engine
//!   (`crate::control_api`);
//! - none runs: [`LocalControl`] executes it in this process, on the process's one
//!   [`Stores`] (and, for the lifecycle verbs, under the install-root lock so no daemon starts
//!   meanwhile; LIFE-1, LAYOUT-4).
//!
//! Each area keeps its one executor next to what it drives, below this crate:
//! `warren_admin::lifecycle::Lifecycle::execute` ([`LifecycleOp`]),
//! `warren_jobs::cron::control::CronControl::execute` ([`CronOp`]) and
//! `warren_jobs::sop::Engine::run_op` ([`SopOp`]); the system verbs ([`SystemOp`]) live here,
//! beside the pairing state and the token registry they touch. On the wire every verb is one
//! JSON object tagged by `op`; the op names are unique across the areas.

use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Value, json};
use warren_config::{ConfigStore, InstallRoot};
use warren_jobs::cron::Scheduler;
use warren_jobs::cron::control::{CronControl, CronControlError};
use warren_jobs::sop::control::Await;
use warren_jobs::sop::{Engine, SopError};
use warren_runtime::AgentHost;
use warren_runtime::stores::Stores;

pub use warren_admin::control::{LIFECYCLE_OPS, LifecycleOp};
pub use warren_jobs::cron::control::{CRON_OPS, CronOp, CronReply, SchedulerState};
pub use warren_jobs::sop::control::{SOP_OPS, SopOp};

use crate::pairing::device_id;

/// The verbs of the daemon itself: reload, pairing, token revokes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum SystemOp {
    /// Re-read config.toml and rebuild every subsystem (SIGHUP).
    Reload {},
    /// A one-time pairing code (`warren pair`).
    PairCode {},
    /// Pair the operator's device without a code (`warren pair --device NAME`): only with the
    /// local admin key itself, never a bearer token (issue 35 §9).
    Pair { device: String },
    /// Revoke a paired device's token by its id (`warren tokens revoke`).
    TokenRevoke { id: String },
}

/// The wire names of the system verbs.
pub const SYSTEM_OPS: &[&str] = &["reload", "pair_code", "pair", "token_revoke"];

impl SystemOp {
    pub fn name(&self) -> &'static str {
        match self {
            SystemOp::Reload {} => "reload",
            SystemOp::PairCode {} => "pair_code",
            SystemOp::Pair { .. } => "pair",
            SystemOp::TokenRevoke { .. } => "token_revoke",
        }
    }
}

/// The wire name of every admin verb, area by area.
pub fn op_names() -> Vec<&'static str> {
    [LIFECYCLE_OPS, CRON_OPS, SOP_OPS, SYSTEM_OPS].concat()
}

/// Every admin verb. Serialized as its area's tagged object (`{"op": "cron_pause", ...}`);
/// deserialized by the `op` name, which picks the area.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum AdminOp {
    Lifecycle(LifecycleOp),
    Cron(CronOp),
    Sop(SopOp),
    System(SystemOp),
}

impl AdminOp {
    /// The verb's name, as on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            AdminOp::Lifecycle(op) => op.name(),
            AdminOp::Cron(op) => op.name(),
            AdminOp::Sop(op) => op.name(),
            AdminOp::System(op) => op.name(),
        }
    }
}

impl<'de> Deserialize<'de> for AdminOp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let value = Value::deserialize(d)?;
        let op = value
            .get("op")
            .ok_or_else(|| D::Error::missing_field("op"))?
            .as_str()
            .ok_or_else(|| D::Error::custom("`op` must be a string naming the verb"))?;
        let area = |ops: &[&str]| ops.contains(&op);
        let parsed = if area(LIFECYCLE_OPS) {
            LifecycleOp::deserialize(value).map(AdminOp::Lifecycle)
        } else if area(CRON_OPS) {
            CronOp::deserialize(value).map(AdminOp::Cron)
        } else if area(SOP_OPS) {
            SopOp::deserialize(value).map(AdminOp::Sop)
        } else if area(SYSTEM_OPS) {
            SystemOp::deserialize(value).map(AdminOp::System)
        } else {
            return Err(D::Error::custom(format!(
                "unknown op, expected one of: {}",
                op_names().join(", ")
            )));
        };
        parsed.map_err(D::Error::custom)
    }
}

/// Runs admin verbs where they must run: [`LocalControl`] in a process that owns the install
/// root, `crate::client::DaemonControl` through the daemon that does.
pub trait Control {
    type Error;

    /// Runs `op` and returns its report as JSON.
    fn run(&self, op: &AdminOp) -> Result<Value, Self::Error>;
}

/// Admin verbs run by this process, with no daemon, on this process's one [`Stores`].
#[derive(Debug, Clone)]
pub struct LocalControl {
    root: InstallRoot,
    stores: Arc<Stores>,
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
    #[error("creating the receipt key: {0}")]
    Receipts(getrandom::Error),
    #[error(transparent)]
    Lifecycle(#[from] warren_admin::lifecycle::LifecycleError),
    #[error(transparent)]
    Cron(#[from] CronControlError),
    #[error(transparent)]
    Sop(#[from] SopError),
    #[error(transparent)]
    Revoke(#[from] crate::tokens::RevokeError),
    #[error(transparent)]
    Devices(#[from] crate::devices::DeviceError),
    #[error(transparent)]
    SopStore(#[from] warren_store::sop::SopStoreError),
    #[error("no SOP run '{run}' (no run was ever stored)")]
    NoSopRun { run: String },
    /// `reload` and pairing act on a running daemon.
    #[error("`{op}` needs a running daemon; start `warren daemon` first")]
    NeedsDaemon { op: &'static str },
}

impl LocalControl {
    /// The verbs of this process on `root`, over the process's `stores`.
    pub fn new(root: &InstallRoot, stores: Arc<Stores>) -> Self {
        Self {
            root: root.clone(),
            stores,
        }
    }

    /// A one-process host over this process's stores (a cron or SOP run needs one).
    fn host(&self, config: &ConfigStore) -> Result<Arc<AgentHost>, LocalControlError> {
        let host =
            AgentHost::for_process_with(&self.root, config.snapshot(), Arc::clone(&self.stores))
                .map_err(LocalControlError::Receipts)?;
        Ok(Arc::new(host))
    }

    /// The runs this process registers must beat, or a daemon that cannot judge it (in another
    /// container) marks them lost once their heartbeat goes stale.
    fn keep_beating(&self, cron: bool) {
        warren_runtime::heartbeat::keep_beating(
            self.root.control_plane_db(),
            cron.then(|| self.root.cron_db()),
            false,
            warren_store::control_plane::HEARTBEAT,
        );
    }

    async fn cron(&self, op: &CronOp) -> Result<Value, LocalControlError> {
        let config = ConfigStore::load(self.root.clone())?;
        let snapshot = config.snapshot();
        let scheduler: Option<Arc<Scheduler>> = match op {
            CronOp::CronRun { name } => {
                // A job that is not there creates no store (the scheduler opens them to write).
                let known = match self
                    .stores
                    .cron_existing()
                    .map_err(CronControlError::from)?
                {
                    Some(store) => store.get(name).map_err(CronControlError::from)?.is_some(),
                    None => false,
                };
                if !known {
                    let missing = warren_store::cron::CronError::NotFound(name.clone());
                    return Err(CronControlError::from(missing).into());
                }
                let scheduler = Scheduler::open(&self.root, self.host(&config)?)
                    .map_err(CronControlError::from)?;
                self.keep_beating(true);
                Some(scheduler)
            }
            _ => None,
        };
        let control = CronControl {
            stores: &self.stores,
            config: snapshot.config(),
            scheduler,
            state: SchedulerState::NoDaemon,
            run_host: None,
            off_reason: None,
        };
        Ok(encode(control.execute(op).await?))
    }

    async fn sop(&self, op: &SopOp) -> Result<Value, LocalControlError> {
        // A decision or cancel on a run that was never stored creates no store.
        if let SopOp::SopDecide { run, .. } | SopOp::SopCancel { run, .. } = op
            && self.stores.sop_runs()?.is_none()
        {
            return Err(LocalControlError::NoSopRun { run: run.clone() });
        }
        let config = ConfigStore::load(self.root.clone())?;
        let engine = Engine::open(&self.root, self.host(&config)?)?;
        if let Some(w) = engine
            .fallback()
            .filter(|_| matches!(op, SopOp::SopRun { .. }))
        {
            eprintln!("warning: {w}");
        }
        self.keep_beating(false);
        let started = |run: &warren_store::sop::SopRun| {
            eprintln!(
                "run {} of '{}' started in this process (no daemon runs); an approval gate waits for `warren sop approve`",
                run.id, run.sop
            );
        };
        Ok(engine.run_op(op, Await::ToEnd(&started)).await?)
    }

    fn system(&self, op: &SystemOp) -> Result<Value, LocalControlError> {
        match op {
            SystemOp::TokenRevoke { id } => {
                let store = ConfigStore::load(self.root.clone())?
                    .with_check(Arc::new(warren_memory::BackendLock));
                let devices = crate::devices::Devices::open(&self.root.devices_db())?;
                let hash = crate::tokens::revoke_blocking(&store, Some(&devices), id)?;
                Ok(json!({"revoked": device_id(&hash)}))
            }
            other => Err(LocalControlError::NeedsDaemon { op: other.name() }),
        }
    }
}

fn encode(reply: CronReply) -> Value {
    serde_json::to_value(reply).unwrap_or(Value::Null)
}

impl Control for LocalControl {
    type Error = LocalControlError;

    fn run(&self, op: &AdminOp) -> Result<Value, LocalControlError> {
        if let AdminOp::System(op) = op {
            return self.system(op);
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(LocalControlError::Runtime)?;
        match op {
            AdminOp::Lifecycle(op) => {
                // No daemon starts while the verb runs (LIFE-1, LAYOUT-4).
                let _lock = warren_runtime::DaemonLock::acquire(&self.root)?;
                let store = ConfigStore::load(self.root.clone())?
                    .with_check(Arc::new(warren_memory::BackendLock));
                let lifecycle = warren_admin::lifecycle::Lifecycle::with_stores(
                    store,
                    Arc::clone(&self.stores),
                );
                Ok(runtime.block_on(lifecycle.execute(op))?)
            }
            AdminOp::Cron(op) => runtime.block_on(self.cron(op)),
            AdminOp::Sop(op) => runtime.block_on(self.sop(op)),
            AdminOp::System(op) => self.system(op),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every verb of every area goes through the one enum in its area's wire form and back;
    /// the op name picks the area, and an unknown op or field is refused.
    #[test]
    fn every_admin_verb_round_trips_through_the_one_enum_issue34() {
        let wires = [
            r#"{"op":"add","alias":"ops","provider":"demo"}"#,
            r#"{"op":"rename","alias":"a","to":"b"}"#,
            r#"{"op":"delete","alias":"a"}"#,
            r#"{"op":"delete_plan","alias":"a"}"#,
            r#"{"op":"restore","archive":"a-20261201","as":"c"}"#,
            r#"{"op":"resume"}"#,
            r#"{"op":"cron_remove","name":"tick"}"#,
            r#"{"op":"cron_pause","name":"tick"}"#,
            r#"{"op":"cron_resume","name":"tick"}"#,
            r#"{"op":"cron_run","name":"tick"}"#,
            r#"{"op":"sop_run","name":"triage","input":{"ticket":"42"}}"#,
            r#"{"op":"sop_decide","run":"r","step":"gate","approved":true,"who":"cli:ops"}"#,
            r#"{"op":"sop_cancel","run":"r","who":"cli:ops"}"#,
            r#"{"op":"reload"}"#,
            r#"{"op":"pair_code"}"#,
            r#"{"op":"pair","device":"laptop"}"#,
            r#"{"op":"token_revoke","id":"abcd1234"}"#,
        ];
        let mut names = Vec::new();
        for wire in wires {
            let op: AdminOp = serde_json::from_str(wire).unwrap_or_else(|e| panic!("{wire}: {e}"));
            assert_eq!(serde_json::to_string(&op).unwrap_or_default(), wire);
            assert_eq!(op.name(), wire.split('"').nth(3).unwrap_or_default());
            names.push(op.name());
        }
        let all = op_names();
        let mut unique = all.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), all.len(), "op names are unique across areas");
        let add =
            r#"{"op":"cron_add","job":{"name":"t","agent":"main","every":"1s","message":"hi"}}"#;
        let op: AdminOp = serde_json::from_str(add).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(&op, AdminOp::Cron(CronOp::CronAdd { job }) if job.name == "t"));
        let again: AdminOp = serde_json::to_value(&op)
            .and_then(serde_json::from_value)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(again, op);
        names.push(op.name());
        assert!(all.iter().all(|n| names.contains(n)), "a verb is untested");
        for bad in [
            r#"{"op":"launch"}"#,
            r#"{"alias":"a"}"#,
            r#"{"op":"reload","now":true}"#,
            r#"{"op":"cron_pause"}"#,
            r#"{"op":"token_revoke","id":"abcd","device":"x"}"#,
        ] {
            assert!(serde_json::from_str::<AdminOp>(bad).is_err(), "{bad}");
        }
    }
}
