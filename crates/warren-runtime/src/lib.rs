//! Warren's runtime. For now: the daemon, its install-root lock (LAYOUT-4) and the outer reload
//! loop (STATE-19). Later issues add agents, the turn loop, the scheduler and supervision.

pub mod agent;
pub mod daemon;
pub mod sessions;

pub use agent::{AgentError, AgentKit};
pub use daemon::{
    DaemonError, DaemonLock, DaemonState, DaemonStatus, Generation, GenerationHook, ReloadTrigger,
    RunningSubsystem, StartFuture, probe, run, run_blocking, run_blocking_with,
};
