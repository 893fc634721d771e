//! Warren's engine (layer 4): agents and their capabilities ([`AgentKit`]), THE turn door
//! ([`AgentHost::submit`], LOOP-1, SESS-1/2), the turn loop ([`turn::AgentRunner`], LOOP-1..7)
//! with approvals, receipts, cancellation and delegation, the cost ledger (STATE-14), the
//! runtime trace (STATE-13), egress, MCP, telemetry and the process's store owner
//! ([`stores::Stores`]). Its clients live above it and the engine never knows them:
//! `warren-jobs` (cron, SOP, unattended runs), `warren-admin` (lifecycle, backup),
//! `warren-daemon` (the reload loop and its generations), the gateway, ACP and the CLI.

pub mod actions;
pub mod agent;
mod appendfile;
pub mod approval;
pub mod attachments;
pub mod cancel;
pub mod cost;
pub mod delegate;
pub mod egress;
pub mod heartbeat;
pub mod history;
pub mod host;
pub mod lock;
pub mod mcp;
pub mod metrics;
pub mod pending;
pub mod prompt;
pub mod receipts;
pub mod session_keys;
pub mod sessions;
pub mod skills;
pub mod stores;
pub mod subsystem;
pub mod telemetry;
pub mod toolparse;
pub mod trace;
pub mod turn;

pub use agent::{AgentError, AgentKit};
pub use cancel::CancelToken;
pub use host::{AgentHost, ProcessServices, Turn, TurnRequest, event_channel};
pub use lock::{DaemonLock, DaemonState, DaemonStatus, LockError, probe};
pub use subsystem::RunningSubsystem;
pub use turn::{
    AgentRunner, Channel, Services, TurnError, TurnEvent, TurnEvents, TurnIo, TurnOutcome,
};

/// A new id for a run in the control plane: `<prefix><UTC time>-<12 hex>`, e.g.
/// `dlg-20261201T063000-0a1b2c3d4e5f` (cron runs use no prefix, SOP runs `sop-`, background
/// delegates `dlg-`). Text order is start order to the second.
pub fn new_run_id(prefix: &str) -> String {
    let mut bytes = [0u8; 6];
    let _ = getrandom::fill(&mut bytes);
    let t = time::OffsetDateTime::now_utc();
    format!(
        "{prefix}{}{:02}{:02}T{:02}{:02}{:02}-{}",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        warren_core::hex::encode(&bytes)
    )
}
