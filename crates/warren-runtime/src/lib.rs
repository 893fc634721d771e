//! Warren's runtime: agents and their capabilities ([`AgentKit`]), the turn loop
//! ([`turn::AgentRunner`], LOOP-1..7) with approvals, receipts, cancellation, the cost ledger
//! (STATE-14) and the runtime trace (STATE-13); the daemon, its install-root lock (LAYOUT-4)
//! and the outer reload loop (STATE-19).

pub mod agent;
mod appendfile;
pub mod approval;
pub mod cancel;
pub mod cost;
pub mod cron;
pub mod daemon;
pub mod delegate;
pub mod history;
pub mod host;
pub mod lifecycle;
pub mod pending;
pub mod prompt;
pub mod receipts;
pub mod sessions;
pub mod sop;
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
