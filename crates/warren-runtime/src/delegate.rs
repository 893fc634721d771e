//! The `delegate` tool (PERM-7): runs a child turn for a sub-task. The child's policy comes
//! from `SecurityPolicy::narrow`, so it never holds more than its parent on any axis
//! (autonomy, grants, tools, commands, budget, iteration limit, ...); a request that would
//! escalate is refused with the axis named. The child uses the parent's provider route,
//! approval channel and cost ledger entry (its usage is billed to the parent agent, so it draws
//! on the parent's budget, under the cap its narrowed policy has: `max_cost_usd`), gets at most
//! the iterations it asks for (default: half the parent's), and can spawn further subagents
//! only when the parent's `delegation_depth` is 2 or more.
//!
//! Background delegation (issue 18 §3): with `background = true` the call returns a task id at
//! once and the child turn runs on in the process, registered in the control plane (kind
//! `delegate`: `warren runs list` shows it, `warren runs cancel` cancels it). Its result record
//! is `<parent workspace>/delegate_results/<task-id>.json`, written atomically through a
//! confined handle (a link the agent planted at `delegate_results` or at the file is refused,
//! never followed), with status `running` → `ok | failed | cancelled`. `delegate_status` and
//! `delegate_result` read the file first; only while it still says `running` do they overlay
//! the control plane's `lost` (its owner process is gone: a restart or a crash) or
//! `timed_out`. Results survive restarts; live cancel handles do not.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use warren_config::confined::{ConfinedDir, DirError};
use warren_config::schema::Autonomy;
use warren_core::ToolDefinition;
use warren_store::control_plane::{ControlPlane, Owner, StoredOwner};

/// The tool's name.
pub const DELEGATE_TOOL: &str = "delegate";
/// A background delegate's status.
pub const STATUS_TOOL: &str = "delegate_status";
/// A background delegate's result record.
pub const RESULT_TOOL: &str = "delegate_result";
/// The directory of result records, in the parent's workspace.
pub const RESULTS_DIR: &str = "delegate_results";
/// The control plane's `kind` of background delegates.
pub const RUN_KIND: &str = "delegate";
/// Largest result record read back.
const MAX_RECORD_BYTES: u64 = 1 << 20;

/// What the model passes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelegateArgs {
    /// The sub-task, as the child's user message.
    pub task: String,
    #[serde(default)]
    pub autonomy: Option<Autonomy>,
    /// Tools the child may use (default: the parent's).
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// Shell commands the child may start (default: the parent's).
    #[serde(default)]
    pub allowed_commands: Option<Vec<String>>,
    /// Tool rounds the child may use (default: half the parent's, at least 1).
    #[serde(default)]
    pub max_iterations: Option<u32>,
    /// The child's daily cost cap in USD (default and maximum: the parent's).
    #[serde(default)]
    pub max_cost_usd: Option<f64>,
    /// Read-write roots of the child (each within a root the parent may write).
    #[serde(default)]
    pub read_write: Option<Vec<PathBuf>>,
    /// Read-only roots of the child (each within a root the parent may read).
    #[serde(default)]
    pub read_only: Option<Vec<PathBuf>>,
    /// Run in the background: return a task id at once.
    #[serde(default)]
    pub background: bool,
}

/// What `delegate_status` and `delegate_result` take.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskArgs {
    pub task_id: String,
}

/// The definitions sent to providers (`delegate`, `delegate_status`, `delegate_result`).
pub fn definitions() -> Vec<ToolDefinition> {
    let task = serde_json::json!({
        "type": "object", "additionalProperties": false, "required": ["task_id"],
        "properties": {"task_id": {"type": "string"}}
    });
    vec![
        ToolDefinition {
            name: DELEGATE_TOOL.into(),
            description: "Run a sub-task in a subagent with the same or narrower permissions (never wider). Returns the subagent's final answer; with background = true, returns a task id at once (see delegate_status and delegate_result).".into(),
            parameters: serde_json::json!({
                "type": "object", "additionalProperties": false, "required": ["task"],
                "properties": {
                    "task": {"type": "string"},
                    "autonomy": {"type": "string", "enum": ["read_only", "supervised", "full"]},
                    "tools": {"type": "array", "items": {"type": "string"}},
                    "allowed_commands": {"type": "array", "items": {"type": "string"}},
                    "max_iterations": {"type": "integer", "minimum": 1},
                    "max_cost_usd": {"type": "number", "minimum": 0},
                    "read_write": {"type": "array", "items": {"type": "string"}},
                    "read_only": {"type": "array", "items": {"type": "string"}},
                    "background": {"type": "boolean"}
                }
            }),
        },
        ToolDefinition {
            name: STATUS_TOOL.into(),
            description: "The status of a background delegate: running, ok, failed, cancelled, lost or timed_out.".into(),
            parameters: task.clone(),
        },
        ToolDefinition {
            name: RESULT_TOOL.into(),
            description: "The result record of a background delegate (its reply once the status is ok).".into(),
            parameters: task,
        },
    ]
}

/// Why a task id or its record is refused.
#[derive(Debug, thiserror::Error)]
pub enum DelegateError {
    #[error(
        "invalid task_id '{0}': a background delegate's id is 'dlg-' followed by letters, digits and '-' (at most 64 characters)"
    )]
    BadId(String),
    #[error("no background delegate '{id}' (no {path})")]
    NotFound { id: String, path: PathBuf },
    #[error("delegate result {0}")]
    Dir(#[from] DirError),
    #[error("delegate result {path}: {cause}")]
    Record { path: PathBuf, cause: String },
    #[error(
        "background delegation needs the install's control plane (this runner was assembled without one)"
    )]
    NoControlPlane,
    #[error("{}: cannot be created", path.display())]
    NotCreated { path: PathBuf },
    #[error(transparent)]
    ControlPlane(#[from] warren_store::control_plane::ControlPlaneError),
    #[error("the delegate could not start: {0}")]
    Start(tokio::task::JoinError),
}

/// Checks a task id the model passed: only ids this tool makes, so no path can be formed.
pub fn validate_task_id(id: &str) -> Result<(), DelegateError> {
    let ok = id.len() <= 64
        && id.starts_with("dlg-")
        && id.len() > 4
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(DelegateError::BadId(id.chars().take(80).collect()))
    }
}

/// One result record (`delegate_results/<task-id>.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultRecord {
    pub task_id: String,
    /// The agent that delegated (a record naming no valid alias does not read back).
    pub agent: warren_core::AgentAlias,
    pub task: String,
    /// `running | ok | failed | cancelled` as written; `lost | timed_out` only as read back
    /// with the control plane's overlay.
    pub status: String,
    pub started_at: String,
    #[serde(default)]
    pub finished_at: Option<String>,
    #[serde(default)]
    pub reply: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub tool_calls: u32,
    #[serde(default)]
    pub provider_calls: u32,
    #[serde(default)]
    pub hit_iteration_cap: bool,
    /// The process running the child (`owner_pid`, `owner_boot`, `owner_start`, `owner_ns`; a
    /// record of an older warren has no start time nor namespace).
    #[serde(flatten)]
    pub owner: StoredOwner,
}

impl ResultRecord {
    /// A `running` record of `owner` started now.
    pub fn running(
        task_id: &str,
        agent: &warren_core::AgentAlias,
        task: &str,
        owner: &Owner,
    ) -> Self {
        Self {
            task_id: task_id.into(),
            agent: agent.clone(),
            task: task.into(),
            status: "running".into(),
            started_at: now(),
            finished_at: None,
            reply: None,
            error: None,
            tool_calls: 0,
            provider_calls: 0,
            hit_iteration_cap: false,
            owner: owner.stored(),
        }
    }

    /// This record ended with `status`.
    pub fn finished(mut self, status: &str) -> Self {
        self.status = status.into();
        self.finished_at = Some(now());
        self
    }
}

fn now() -> String {
    warren_store::timefmt::format(warren_store::timefmt::now())
}

fn file_name(id: &str) -> String {
    format!("{id}.json")
}

/// The results directory of a workspace, opened through a confined handle: the workspace is
/// the daemon's entry; `delegate_results` below it is never followed if it is a link.
pub fn results_dir(
    workspace: &std::path::Path,
    create: bool,
) -> Result<Option<ConfinedDir>, DirError> {
    let ws = if create {
        Some(ConfinedDir::create_root(workspace)?)
    } else {
        ConfinedDir::open_root(workspace)?
    };
    match ws {
        Some(ws) => ws.open_dir(RESULTS_DIR, create),
        None => Ok(None),
    }
}

/// Writes `record` atomically (temp file, fsync, rename) below `dir`.
pub fn write_record(dir: &ConfinedDir, record: &ResultRecord) -> Result<(), DelegateError> {
    validate_task_id(&record.task_id)?;
    let bytes = serde_json::to_vec_pretty(record).map_err(|e| DelegateError::Record {
        path: dir.path().join(file_name(&record.task_id)),
        cause: e.to_string(),
    })?;
    dir.write_atomic(file_name(&record.task_id), &bytes)?;
    Ok(())
}

/// Reads the record of `id` from `workspace`, with the control plane's overlay: while the file
/// says `running`, a control-plane row that ended `lost` or `timed_out` — or an owner process
/// that is provably gone ([`StoredOwner::is_alive`] of the row's owner, else the record's) —
/// decides the status.
pub fn read_status(
    workspace: &std::path::Path,
    control_plane: Option<&ControlPlane>,
    id: &str,
) -> Result<ResultRecord, DelegateError> {
    validate_task_id(id)?;
    let path = workspace.join(RESULTS_DIR).join(file_name(id));
    let not_found = || DelegateError::NotFound {
        id: id.into(),
        path: path.clone(),
    };
    let dir = results_dir(workspace, false)?.ok_or_else(not_found)?;
    let text = dir
        .read_to_string(file_name(id), MAX_RECORD_BYTES)?
        .ok_or_else(not_found)?;
    let mut record: ResultRecord =
        serde_json::from_str(&text).map_err(|e| DelegateError::Record {
            path: path.clone(),
            cause: e.to_string(),
        })?;
    if record.status != "running" {
        return Ok(record);
    }
    let row = control_plane.and_then(|cp| cp.get(id).ok().flatten());
    match row {
        Some(row) if row.state == "lost" || row.state == "timed_out" => {
            record.status = row.state;
            record.error = row.error;
            record.finished_at = row.finished_at;
        }
        row => {
            // The row's owner with its heartbeat; the record's when there is no row.
            let alive = row.map_or_else(|| record.owner.is_alive(), |row| row.owner_alive());
            if !alive {
                record.status = "lost".into();
                record.error = Some("its owner process exited during the run".into());
            }
        }
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_ids_of_this_tool_pass_and_paths_do_not() {
        assert!(validate_task_id(&crate::new_run_id("dlg-")).is_ok());
        for bad in [
            "",
            "dlg-",
            "../x",
            "dlg-../../etc/passwd",
            "dlg-a/b",
            "dlg-a.json",
            "other-1",
            &format!("dlg-{}", "a".repeat(80)),
        ] {
            assert!(validate_task_id(bad).is_err(), "{bad}");
        }
    }
}
