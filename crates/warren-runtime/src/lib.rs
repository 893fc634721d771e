//! Warren's runtime: agents and their capabilities ([`AgentKit`]), the turn loop
//! ([`turn::AgentRunner`], LOOP-1..7) with approvals, receipts, cancellation, the cost ledger
//! (STATE-14) and the runtime trace (STATE-13); the daemon, its install-root lock (LAYOUT-4)
//! and the outer reload loop (STATE-19).

pub mod agent;
mod appendfile;
pub mod approval;
pub mod backup;
pub mod cancel;
pub mod cost;
pub mod cron;
pub mod daemon;
pub mod delegate;
pub mod egress;
pub mod history;
pub mod host;
pub mod lifecycle;
pub mod mcp;
pub mod metrics;
pub mod pending;
pub mod prompt;
pub mod receipts;
pub mod session_keys;
pub mod sessions;
pub mod skills;
pub mod sop;
pub mod telemetry;
pub mod toolparse;
pub mod trace;
pub mod turn;
mod unattended;

pub use agent::{AgentError, AgentKit};
pub use cancel::CancelToken;
pub use daemon::{
    DaemonError, DaemonLock, DaemonState, DaemonStatus, Generation, GenerationHook, ReloadTrigger,
    RunningSubsystem, StartFuture, probe, run, run_blocking, run_blocking_with,
};
pub use host::{AgentHost, ProcessServices, Turn, TurnRequest, event_channel};
pub use turn::{
    AgentRunner, Channel, Services, TurnError, TurnEvent, TurnEvents, TurnIo, TurnOutcome,
};

/// A new id for a run in the control plane: `<prefix><UTC time>-<12 hex>`, e.g.
/// `dlg-20261201T063000-0a1b2c3d4e5f` (cron runs use no prefix, SOP runs `sop-`, background
/// delegates `dlg-`). Text order is start order to the second.
pub(crate) fn new_run_id(prefix: &str) -> String {
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
