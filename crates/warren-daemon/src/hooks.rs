//! The engine's own subsystems of a generation, as ordered [`GenerationHook`]s (STATE-19): the
//! telemetry of this generation's `[metrics]`/`[telemetry]` (issue 25), the MCP servers
//! (issue 23: servers of deleted agents and changed configs stop, eager ones start), the session
//! stores (opened off the start path, legacy import included), the cron scheduler (STATE-9:
//! declared jobs reconciled, missed fire times caught up) and the SOP engine (STATE-10: active
//! runs of a dead owner or of the previous generation continue at their first incomplete step).
//!
//! The channels' supervisor (issue 38) starts last: one task per configured channel, each
//! restarted alone when it fails; a reload stops them all with the generation.
//!
//! The scheduler and the engine are kept in the generation's [`Jobs`], where the gateway finds
//! them; the engine (`warren-runtime`) never holds a pointer to either.

use std::sync::{Arc, OnceLock, Weak};

use tokio::sync::oneshot;
use warren_channels::Channels;
use warren_jobs::cron::Scheduler;
use warren_jobs::sop::Engine;
use warren_runtime::RunningSubsystem;

use crate::{Generation, GenerationHook, HookError, StartFuture};

/// The background jobs of one generation, once their hooks started them (weak: each holds the
/// generation's host, and its subsystem owns it).
#[derive(Debug, Default)]
pub struct Jobs {
    cron: OnceLock<Weak<Scheduler>>,
    sop: OnceLock<Weak<Engine>>,
    channels: OnceLock<Arc<Channels>>,
}

impl Jobs {
    /// The generation's cron scheduler while it runs.
    pub fn cron(&self) -> Option<Arc<Scheduler>> {
        self.cron.get().and_then(Weak::upgrade)
    }

    /// The generation's SOP engine while it runs.
    pub fn sop(&self) -> Option<Arc<Engine>> {
        self.sop.get().and_then(Weak::upgrade)
    }

    /// The generation's channels and their health, once their hook started them.
    pub fn channels(&self) -> Option<Arc<Channels>> {
        self.channels.get().cloned()
    }

    /// Records a scheduler started outside the daemon loop (tests of the crates above).
    pub fn set_cron(&self, scheduler: &Arc<Scheduler>) {
        let _ = self.cron.set(Arc::downgrade(scheduler));
    }

    /// Records an SOP engine started outside the daemon loop (tests of the crates above).
    pub fn set_sop(&self, engine: &Arc<Engine>) {
        let _ = self.sop.set(Arc::downgrade(engine));
    }
}

/// The engine's hooks, in the order the daemon starts them after the listeners.
pub fn engine() -> Vec<Arc<dyn GenerationHook>> {
    vec![
        Arc::new(Telemetry),
        Arc::new(Mcp),
        Arc::new(Sessions),
        Arc::new(Cron),
        Arc::new(Sop),
        Arc::new(ChannelsHook),
    ]
}

/// A subsystem with nothing left running (its work was done at start).
fn done(name: &'static str) -> RunningSubsystem {
    let (stop, _) = oneshot::channel();
    RunningSubsystem::new(name, stop, tokio::spawn(async {}))
}

struct Telemetry;

impl GenerationHook for Telemetry {
    fn name(&self) -> &'static str {
        "telemetry"
    }

    fn start<'a>(&'a self, generation: &'a Generation) -> StartFuture<'a> {
        Box::pin(async move { Ok(warren_runtime::telemetry::start(&generation.snapshot)) })
    }
}

struct Mcp;

impl GenerationHook for Mcp {
    fn name(&self) -> &'static str {
        "mcp"
    }

    fn start<'a>(&'a self, generation: &'a Generation) -> StartFuture<'a> {
        Box::pin(async move {
            warren_runtime::mcp::reconcile(&generation.root, generation.snapshot.config());
            generation.host.start_eager_mcp();
            Ok(done("mcp"))
        })
    }
}

struct Sessions;

impl GenerationHook for Sessions {
    fn name(&self) -> &'static str {
        "sessions"
    }

    fn start<'a>(&'a self, generation: &'a Generation) -> StartFuture<'a> {
        Box::pin(async move {
            generation.host.open_sessions().await;
            Ok(done("sessions"))
        })
    }
}

struct Cron;

impl GenerationHook for Cron {
    fn name(&self) -> &'static str {
        "cron"
    }

    fn start<'a>(&'a self, generation: &'a Generation) -> StartFuture<'a> {
        Box::pin(async move {
            if !generation.snapshot.cron.enabled {
                return Ok(done("cron"));
            }
            let scheduler = Scheduler::open(&generation.root, Arc::clone(&generation.host))
                .map_err(HookError::Cron)?;
            if let Err(e) = scheduler.prepare().await {
                tracing::error!("cron: {e}");
            }
            generation.jobs.set_cron(&scheduler);
            Ok(scheduler.start())
        })
    }
}

struct Sop;

impl GenerationHook for Sop {
    fn name(&self) -> &'static str {
        "sop"
    }

    fn start<'a>(&'a self, generation: &'a Generation) -> StartFuture<'a> {
        Box::pin(async move {
            let engine = Engine::open(&generation.root, Arc::clone(&generation.host))
                .map_err(HookError::Sop)?;
            generation.jobs.set_sop(&engine);
            let restored = engine.restore().await;
            if !restored.is_empty() {
                tracing::info!(runs = restored.len(), "SOP runs restored");
            }
            Ok(engine.start())
        })
    }
}

struct ChannelsHook;

impl GenerationHook for ChannelsHook {
    fn name(&self) -> &'static str {
        "channels"
    }

    fn start<'a>(&'a self, generation: &'a Generation) -> StartFuture<'a> {
        Box::pin(async move {
            let (channels, running) = Channels::start(&generation.host);
            let _ = generation.jobs.channels.set(channels);
            Ok(running)
        })
    }
}
